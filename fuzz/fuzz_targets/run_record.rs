//! Fuzz target `run_record`: see `wanda::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wanda::fuzzing::run("run_record", data));
