//! Accepting HTTP connections without letting idle ones lock the API out.
//!
//! A client that opens connections and sends nothing held a file descriptor each until the
//! process ran out (issue 21: 20 000 half-open connections timed out `/healthz` and failed
//! retrains with "Too many open files"). Here:
//! - at most `max_connections` are open; at the cap a new connection is still accepted and the
//!   oldest one with no request in progress is closed for it (a fresh connection is about to
//!   send its request; an old idle one is not). Only when every open connection is inside a
//!   request is the new one closed at once;
//! - a connection that has not sent a whole request head `header_timeout` after it opened, or
//!   after its last response, is closed (hyper's header-read timeout);
//! - `max_connections` is lowered at start to leave [`RESERVED_DESCRIPTORS`] of the process's
//!   file-descriptor limit for the state directory, Kafka and logging, after raising the soft
//!   limit to the hard one;
//! - on shutdown, accepting stops and every connection finishes its request in progress
//!   (hyper's graceful shutdown); the daemon bounds the wait with `log.shutdown_timeout`.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

/// Largest read buffer of one connection (hyper's default is 408 KiB): an upload streams
/// through it into the request's own buffer (`serve/body.rs`), so more only costs memory that
/// the allocator keeps after the connection closes.
const READ_BUFFER_BYTES: usize = 64 << 10;
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::config::HttpConfig;

/// File descriptors kept out of the connection budget.
pub const RESERVED_DESCRIPTORS: u64 = 512;

/// How many connections, for how long, and how many requests at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub request_timeout: Duration,
    pub max_concurrent_requests: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits::of(&HttpConfig::default())
    }
}

impl ConnectionLimits {
    /// The limits `[http]` sets.
    pub fn of(http: &HttpConfig) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: http.max_connections,
            header_timeout: http.header_timeout.0,
            request_timeout: http.request_timeout.0,
            max_concurrent_requests: http.max_concurrent_requests,
        }
    }

    /// These limits with `max_connections` lowered (with a warning) so that the open
    /// connections leave [`RESERVED_DESCRIPTORS`] of the file-descriptor limit, after the soft
    /// limit is raised to the hard one where the platform allows.
    pub fn within_descriptor_limit(self) -> ConnectionLimits {
        let Some(limit) = raise_descriptor_limit() else {
            return self;
        };
        let budget = usize::try_from(limit.saturating_sub(RESERVED_DESCRIPTORS).max(16))
            .unwrap_or(usize::MAX);
        if self.max_connections <= budget {
            return self;
        }
        tracing::warn!(
            configured = self.max_connections,
            allowed = budget,
            descriptor_limit = limit,
            "http.max_connections lowered to leave file descriptors for the state directory and \
             Kafka; raise the open-files limit (LimitNOFILE) to allow more"
        );
        ConnectionLimits {
            max_connections: budget,
            ..self
        }
    }
}

/// Raises the soft open-files limit to the hard one; returns the soft limit now in force.
#[cfg(unix)]
fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};

    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if setrlimit(Resource::Nofile, limit).is_err() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    limit.current
}

#[cfg(not(unix))]
fn raise_descriptor_limit() -> Option<u64> {
    None
}

/// One open connection, in accept order.
struct Slot {
    id: u64,
    /// Requests in progress on it.
    busy: Arc<AtomicUsize>,
    evict: Option<oneshot::Sender<()>>,
}

/// The open connections and the cap on them.
struct Open {
    max: usize,
    slots: Mutex<VecDeque<Slot>>,
}

impl Open {
    fn slots(&self) -> std::sync::MutexGuard<'_, VecDeque<Slot>> {
        // The queue is consistent after every call; a panic elsewhere cannot half-edit it.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes room for connection `id` (closing the oldest idle one at the cap) and registers
    /// it; `None` when every open connection is inside a request.
    fn admit(&self, id: u64) -> Option<(Arc<AtomicUsize>, oneshot::Receiver<()>)> {
        let mut slots = self.slots();
        if slots.len() >= self.max {
            let idle = slots
                .iter()
                .position(|s| s.busy.load(Ordering::Acquire) == 0)?;
            if let Some(mut evicted) = slots.remove(idle) {
                if let Some(evict) = evicted.evict.take() {
                    let _ = evict.send(());
                }
            }
        }
        let busy = Arc::new(AtomicUsize::new(0));
        let (evict, evicted) = oneshot::channel();
        slots.push_back(Slot {
            id,
            busy: Arc::clone(&busy),
            evict: Some(evict),
        });
        Some((busy, evicted))
    }

    fn release(&self, id: u64) {
        let mut slots = self.slots();
        if let Some(i) = slots.iter().position(|s| s.id == id) {
            slots.remove(i);
        }
    }
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves, then lets every
/// connection finish its request in progress.
pub(super) async fn accept(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let open = Arc::new(Open {
        max: limits.max_connections.max(1),
        slots: Mutex::new(VecDeque::new()),
    });
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut next_id = 0_u64;
    let mut last_warning: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        // Reap finished connection tasks so the set stays the size of the open connections.
        while connections.try_join_next().is_some() {}
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors (or a connection reset before it was taken): wait a
                // little rather than spin, and say so at most every 10 s.
                if last_warning.map_or(true, |t| t.elapsed() >= Duration::from_secs(10)) {
                    tracing::warn!(error = %e, "HTTP accept failed");
                    last_warning = Some(Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        next_id += 1;
        let id = next_id;
        let Some((busy, evicted)) = open.admit(id) else {
            drop(stream);
            continue;
        };
        let app = app.clone();
        let open = Arc::clone(&open);
        let mut stopped = stopped.clone();
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                let app = app.clone();
                let busy = Arc::clone(&busy);
                busy.fetch_add(1, Ordering::AcqRel);
                async move {
                    let response = app.oneshot(request).await;
                    busy.fetch_sub(1, Ordering::AcqRel);
                    response
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(READ_BUFFER_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            // `let _` drops the borrow of the flag before anything else is awaited.
            let stopping = async move {
                let _ = stopped.wait_for(|&s| s).await;
            };
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = evicted => {}
                _ = stopping => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.as_mut().await;
                }
            }
            open.release(id);
        });
    }
    let _ = stop.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// At the cap the oldest connection without a request in progress makes room; with every
    /// connection busy the new one is refused; a closed connection frees its place.
    #[test]
    fn the_oldest_idle_connection_makes_room() {
        let open = Open {
            max: 3,
            slots: Mutex::new(VecDeque::new()),
        };
        let (busy1, _e1) = open.admit(1).expect("room");
        let (_busy2, mut evicted2) = open.admit(2).expect("room");
        let (busy3, _e3) = open.admit(3).expect("room");
        busy1.fetch_add(1, Ordering::AcqRel);
        let (busy4, _e4) = open.admit(4).expect("2 is idle");
        assert!(evicted2.try_recv().is_ok(), "2 was told to close");
        let ids = |open: &Open| open.slots().iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(ids(&open), vec![1, 3, 4]);
        busy3.fetch_add(1, Ordering::AcqRel);
        busy4.fetch_add(1, Ordering::AcqRel);
        assert!(
            open.admit(5).is_none(),
            "every connection is inside a request"
        );
        open.release(3);
        assert!(open.admit(6).is_some());
        assert_eq!(ids(&open), vec![1, 4, 6]);
    }
}
