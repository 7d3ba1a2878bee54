//! Fuzz target `stream_file`: see ../checks.rs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("neyman-fuzz-{}", std::process::id()));
    if std::fs::create_dir_all(&dir).is_ok() {
        checks::stream_file(data, &dir);
    }
});
