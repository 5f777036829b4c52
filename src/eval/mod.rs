//! Model evaluation: WikiText-2 perplexity by the Wanda paper's protocol, and zero-shot accuracy
//! on lm-evaluation-harness's tasks.

pub mod perplexity;
pub mod zeroshot;
