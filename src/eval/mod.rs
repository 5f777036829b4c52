//! Model evaluation: WikiText-2 perplexity by the Wanda paper's protocol.

pub mod perplexity;
