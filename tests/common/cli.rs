//! Running the `neyman` binary from a test: its exit code and both streams, never a panic.

use std::process::Command;

pub const BIN: &str = env!("CARGO_BIN_EXE_neyman");

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the binary with `args` from the package root; a panic (exit 101) fails the test.
pub fn neyman(args: &[&str]) -> Run {
    let out = Command::new(BIN)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the neyman binary runs");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_ne!(run.code, 101, "neyman {args:?} panicked:\n{}", run.stderr);
    run
}
