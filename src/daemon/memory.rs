//! Freed memory handed back to the system by the async workers when they go idle.
//!
//! mimalloc (the process's allocator, `main.rs`) keeps a thread's emptied pages until that
//! thread allocates or collects again, and an idle tokio worker does neither: after 100 HTTP
//! uploads stalled under `http.max_body_bytes` and timed out, 13 MB stayed resident over an
//! idle daemon of 35 MB until the next requests came. A worker about to park collects its
//! heap, forced (pages returned now, not after the purge delay), at most once per
//! [`FORCE_EVERY`] so a busy server that parks between requests does not return and re-fault
//! the same pages each time; what a worker frees just after a collection is returned by
//! [`sweep`], which wakes a worker every [`SWEEP_EVERY`]. A block freed by another thread goes
//! back to its owner's heap, which collects it only when it wakes: hence one async worker by
//! default (`--threads`). Measured: 100 uploads stalled and timed out left 9 MB over an idle
//! 22 MB with the collection on park alone, 1–2 MB with the sweep (tests/http_memory.rs).

use std::cell::Cell;
use std::time::{Duration, Instant};

/// The shortest time between two forced collections on one worker.
const FORCE_EVERY: Duration = Duration::from_millis(100);

thread_local! {
    static LAST_FORCED: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// How often [`sweep`] collects.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Collects the heap of the worker that runs it every [`SWEEP_EVERY`]; runs for the runtime's
/// life.
pub(super) async fn sweep() {
    let mut tick = tokio::time::interval(SWEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        collect(Instant::now());
    }
}

/// `on_thread_park` of the daemon's runtime.
pub(super) fn on_park() {
    let now = Instant::now();
    let due = LAST_FORCED.with(|last| {
        last.get()
            .map_or(true, |t| now.duration_since(t) >= FORCE_EVERY)
    });
    if due {
        collect(now);
    }
}

/// Collects the calling thread's heap now and remembers when.
fn collect(now: Instant) {
    LAST_FORCED.with(|last| last.set(Some(now)));
    // SAFETY: collects the calling thread's own mimalloc heap; no pointer is passed and
    // mimalloc allows it at any time on a thread that uses the allocator.
    unsafe { libmimalloc_sys::mi_collect(true) };
}
