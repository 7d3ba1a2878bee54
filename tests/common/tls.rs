//! TLS for the Kafka tests. tansu 0.6.0 cannot listen with TLS itself: its `--cert` and
//! `--key` flags are in one exclusive clap group, so passing both is a usage error and either
//! alone starts a plaintext listener. A real TLS terminator in front of it stands in for the
//! broker's TLS listener: socat (Debian `socat`, OpenSSL), with a CA and a server certificate
//! for 127.0.0.1 made by the `openssl` command line (Debian `openssl`) in the test's directory.
//! `scripts/test.sh` installs both.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A CA and a server certificate it signed for `127.0.0.1`, as PEM files in a directory.
pub struct Certificates {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (scripts/test.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A self-signed CA named `name` in `dir` (`<name>.pem`, `<name>.key`).
pub fn ca(dir: &Path, name: &str) -> PathBuf {
    let (pem, key) = (format!("{name}.pem"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &key,
            "-out",
            &pem,
        ],
    );
    dir.join(pem)
}

/// A CA (`ca.pem`) and a server certificate for 127.0.0.1 it signed, in `dir`.
pub fn certificates(dir: &Path) -> Certificates {
    let ca = ca(dir, "ca");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
    );
    std::fs::write(dir.join("san.cnf"), "subjectAltName=IP:127.0.0.1\n").expect("write");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.cnf",
            "-out",
            "server.pem",
        ],
    );
    Certificates {
        ca,
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
    }
}

/// socat terminating TLS on a loopback port and forwarding the plaintext to `backend`;
/// killed on drop.
pub struct Terminator {
    child: Child,
    pub port: u16,
}

impl Terminator {
    /// Listens on loopback `port` (waits up to 10 s for it to accept) and forwards to
    /// `backend` (`host:port`).
    pub fn start_on(certificates: &Certificates, port: u16, backend: &str) -> Terminator {
        let listen = format!(
            "OPENSSL-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
            certificates.server_cert.display(),
            certificates.server_key.display()
        );
        let child = Command::new("socat")
            .args([listen, format!("TCP:{backend}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run socat (scripts/test.sh installs it): {e}"));
        let mut terminator = Terminator { child, port };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
            if let Some(status) = terminator.child.try_wait().expect("try_wait") {
                panic!("socat exited before listening on {port}: {status}");
            }
            assert!(Instant::now() < deadline, "socat did not listen on {port}");
            std::thread::sleep(Duration::from_millis(10));
        }
        terminator
    }
}

impl Drop for Terminator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
