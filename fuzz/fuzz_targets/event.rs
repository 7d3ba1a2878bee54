//! Fuzz target `event`: see ../checks.rs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::event(data));
