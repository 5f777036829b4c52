//! Fuzz target `tokenizer_json`: see `wanda::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wanda::fuzzing::run("tokenizer_json", data));
