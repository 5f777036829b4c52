//! Fuzz target `pipeline_yaml`: see `wanda::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wanda::fuzzing::run("pipeline_yaml", data));
