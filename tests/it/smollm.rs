//! Checks against the real SmolLM2-135M in `../shared`: tokenizer parity, GGUF config.
