//! Fuzz target `safetensors`: see `wanda::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wanda::fuzzing::run("safetensors", data));
