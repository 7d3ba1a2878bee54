//! `neyman run --config config/kafka.toml` as a child process for the tests against a real
//! broker (tests/kafka_daemon.rs, tests/kafka_interop.rs), with the overrides passed through
//! the documented environment variables.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::broker::{free_port, Broker};
use super::http::http;

pub const BIN: &str = env!("CARGO_BIN_EXE_neyman");
pub const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/kafka.toml");
/// Generous: debug builds on a busy 2-core machine train slowly, and tansu group joins take
/// about 3 s each.
pub const DEADLINE: Duration = Duration::from_secs(300);

/// A `neyman run` process on `config/kafka.toml` with overrides through the documented
/// environment variables; SIGKILLed on drop if still running.
pub struct Daemon {
    child: Child,
    /// The HTTP API's port on 127.0.0.1.
    pub port: u16,
    log: PathBuf,
}

impl Daemon {
    pub fn start(broker: &Broker, state: &Path, env: &[(&str, &str)]) -> Daemon {
        let port = free_port();
        std::fs::create_dir_all(state).expect("state dir");
        let log = state.join(format!("daemon-{port}.log"));
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--config", CONFIG])
            .env("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", broker.bootstrap())
            .env("NEYMAN_STATE_DIR", state)
            .env("NEYMAN_HTTP_LISTEN", format!("127.0.0.1:{port}"))
            .env("NEYMAN_LOG_FORMAT", "json")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn neyman run");
        Daemon { child, port, log }
    }

    pub fn metrics(&self) -> String {
        http(self.port, "GET", "/metrics", "")
            .map(|(_, body)| body)
            .unwrap_or_default()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill {signal}");
    }

    /// SIGTERM, then the exit status within 60 s.
    pub fn terminate(mut self) -> (std::process::ExitStatus, String) {
        self.signal("-TERM");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "no exit 60 s after SIGTERM:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `done(metrics text)` holds; panics with the log after `DEADLINE`.
    pub fn wait_for(&mut self, what: &str, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if done(&self.metrics()) {
                return;
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "daemon exited ({status}) waiting for {what}:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
