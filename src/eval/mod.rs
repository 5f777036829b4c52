//! Model evaluation: WikiText-2 perplexity by the Wanda paper's protocol, zero-shot accuracy
//! on lm-evaluation-harness's tasks, and decoding speed.

pub mod perplexity;
pub mod speed;
pub mod zeroshot;
