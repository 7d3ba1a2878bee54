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
        let bootstrap = broker.bootstrap();
        let mut all = vec![("NEYMAN_KAFKA_BOOTSTRAP_SERVERS", bootstrap.as_str())];
        all.extend_from_slice(env);
        Daemon::start_config(Path::new(CONFIG), state, &all)
    }

    /// `neyman run --config config` with its state under `state` and the HTTP API on a free
    /// port, with overrides through the environment.
    pub fn start_config(config: &Path, state: &Path, env: &[(&str, &str)]) -> Daemon {
        let port = free_port();
        std::fs::create_dir_all(state).expect("state dir");
        let log = state.join(format!("daemon-{port}.log"));
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--config"])
            .arg(config)
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

    pub fn pid(&self) -> u32 {
        self.child.id()
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
    pub fn terminate(self) -> (std::process::ExitStatus, String) {
        self.signal("-TERM");
        self.exit_within(Duration::from_secs(60), "SIGTERM")
    }

    /// The exit status and log once the process ends, which it must within `limit` (else a
    /// panic with the log and the threads' stacks).
    pub fn exit_within(
        mut self,
        limit: Duration,
        after: &str,
    ) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return (status, self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "no exit {limit:?} after {after}:\n{}\n{}",
                self.log_text(),
                self.stacks()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The threads' stacks, for a daemon that hangs: from gdb when the machine has it.
    fn stacks(&self) -> String {
        Command::new("gdb")
            .args([
                "-p",
                &self.child.id().to_string(),
                "-batch",
                "-ex",
                "thread apply all bt",
            ])
            .stdin(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("(no stacks: gdb: {e})"))
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
