//! Fuzz target `model_file`: see ../checks.rs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::model_file(data));
