//! Progress of a long command on stderr: on a terminal an indicatif bar with counts and ETA;
//! otherwise (a CI log, a pipe, systemd) one line every [`LOG_EVERY`] and at the end, so a
//! long run is never silent; nothing with `--quiet`. [`Progress`] counts units of a known
//! total; [`FitProgress`] follows one `train` through what its solvers report.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::learn::observe::{FitStep, Observer};

/// How often the line of a non-terminal run is written.
pub const LOG_EVERY: Duration = Duration::from_secs(5);

/// Counts finished units of work out of a known total; shared by the workers (`&Progress`).
pub struct Progress {
    what: String,
    unit: &'static str,
    total: u64,
    output: Output,
}

enum Output {
    Quiet,
    Bar(ProgressBar),
    Lines {
        done: AtomicU64,
        started: Instant,
        /// Milliseconds after `started` of the last line written.
        last_ms: AtomicU64,
    },
}

impl Progress {
    /// `what` names the work (`evaluating usmo`), `unit` what is counted (`splits`).
    pub fn new(quiet: bool, what: &str, total: usize, unit: &'static str) -> Progress {
        let total = total as u64;
        let output = if quiet {
            Output::Quiet
        } else if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:30}] {pos}/{len} {prefix} {elapsed}, ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_message(what.to_owned());
            bar.set_prefix(unit);
            bar.enable_steady_tick(Duration::from_millis(200));
            Output::Bar(bar)
        } else {
            Output::Lines {
                done: AtomicU64::new(0),
                started: Instant::now(),
                last_ms: AtomicU64::new(0),
            }
        };
        Progress {
            what: what.to_owned(),
            unit,
            total,
            output,
        }
    }

    /// One more unit finished.
    pub fn inc(&self) {
        match &self.output {
            Output::Quiet => {}
            Output::Bar(bar) => bar.inc(1),
            Output::Lines {
                done,
                started,
                last_ms,
            } => {
                // Cheap per unit (a stream has millions): an atomic add and a clock read; the
                // one worker that wins the exchange writes the line.
                let done = done.fetch_add(1, Ordering::Relaxed) + 1;
                let elapsed = started.elapsed();
                let now_ms = elapsed.as_millis() as u64;
                let last = last_ms.load(Ordering::Relaxed);
                let due = now_ms.saturating_sub(last) >= LOG_EVERY.as_millis() as u64;
                let won = || {
                    last_ms
                        .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                };
                // The last unit's line is always written.
                if done == self.total || (due && won()) {
                    eprintln!("{}", self.line(done, elapsed));
                }
            }
        }
    }

    /// `items`, one unit counted as each item's work ends: when the next item is asked for,
    /// and after the last.
    pub fn over<I: Iterator>(&self, items: I) -> Over<'_, I> {
        Over {
            progress: self,
            items,
            started: false,
        }
    }

    /// `evaluating usmo: 12/50 splits, 31 s, ETA 98 s`.
    fn line(&self, done: u64, elapsed: Duration) -> String {
        let eta = match done {
            0 => "unknown".to_owned(),
            _ => {
                let left = elapsed.as_secs_f64() * (self.total - done.min(self.total)) as f64
                    / done as f64;
                format!("{left:.0} s")
            }
        };
        format!(
            "{}: {done}/{} {}, {:.0} s, ETA {eta}",
            self.what,
            self.total,
            self.unit,
            elapsed.as_secs_f64()
        )
    }
}

/// The iterator of [`Progress::over`].
pub struct Over<'a, I> {
    progress: &'a Progress,
    items: I,
    started: bool,
}

impl<I: Iterator> Iterator for Over<'_, I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        if self.started {
            self.progress.inc();
        }
        self.started = true;
        self.items.next()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Output::Bar(bar) = &self.output {
            bar.finish_and_clear();
        }
    }
}

/// Progress of one `neyman train`: the phase, the ranking-depth search's fits with an ETA
/// over the most it may make, and the solver's steps with its stopping measure against the
/// tolerance (the measure falls to the tolerance, not at a known pace, so it has no ETA).
pub struct FitProgress {
    shared: Arc<FitShared>,
}

struct FitShared {
    /// A spinner on a terminal; `None` writes lines, or nothing when `quiet`.
    bar: Option<ProgressBar>,
    quiet: bool,
    state: Mutex<FitState>,
}

struct FitState {
    phase: String,
    phase_started: Instant,
    search: Option<(usize, usize)>,
    solver: Option<FitStep>,
    last_shown: Instant,
}

impl FitProgress {
    pub fn new(quiet: bool) -> FitProgress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        let now = Instant::now();
        FitProgress {
            shared: Arc::new(FitShared {
                bar,
                quiet,
                state: Mutex::new(FitState {
                    phase: String::new(),
                    phase_started: now,
                    search: None,
                    solver: None,
                    last_shown: now,
                }),
            }),
        }
    }

    /// A new phase of the run (`choosing the ranking depth`, `training`).
    pub fn phase(&self, what: &str) {
        let now = Instant::now();
        let mut state = self.shared.lock();
        state.phase = what.to_owned();
        state.phase_started = now;
        state.search = None;
        state.solver = None;
        self.shared.show(&mut state, now, true);
    }

    /// The observer to hand the solvers ([`crate::learn::spec::SolverLimits::observer`]).
    pub fn observer(&self) -> Observer {
        let shared = Arc::clone(&self.shared);
        Observer::new(move |step| {
            let now = Instant::now();
            let mut state = shared.lock();
            match step {
                FitStep::Search { done, most } => state.search = Some((done, most)),
                FitStep::Solver { .. } => state.solver = Some(step),
            }
            shared.show(&mut state, now, false);
        })
    }
}

impl FitShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, FitState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Shows the state: on a terminal at most every 100 ms, as a line every [`LOG_EVERY`].
    fn show(&self, state: &mut FitState, now: Instant, phase_start: bool) {
        if self.quiet {
            return;
        }
        let since = now.duration_since(state.last_shown);
        match &self.bar {
            Some(bar) if phase_start || since >= Duration::from_millis(100) => {
                bar.set_message(describe(state, now));
                state.last_shown = now;
            }
            None if since >= LOG_EVERY => {
                eprintln!("{}", describe(state, now));
                state.last_shown = now;
            }
            _ => {}
        }
    }
}

impl Drop for FitProgress {
    fn drop(&mut self) {
        if let Some(bar) = &self.shared.bar {
            bar.finish_and_clear();
        }
    }
}

/// `choosing the ranking depth: fit 3 of at most 13, 12 s, ETA at most 40 s; ipm: 9
/// iterations, gap 2.1e-4 (stops at 1e-6)`.
fn describe(state: &FitState, now: Instant) -> String {
    let elapsed = now.duration_since(state.phase_started).as_secs_f64();
    let mut line = format!("{}: ", state.phase);
    if let Some((done, most)) = state.search {
        line.push_str(&format!("fit {done} of at most {most}, "));
        line.push_str(&format!("{elapsed:.0} s"));
        if done > 0 {
            let left = elapsed * most.saturating_sub(done) as f64 / done as f64;
            line.push_str(&format!(", ETA at most {left:.0} s"));
        }
    } else {
        line.push_str(&format!("{elapsed:.0} s"));
    }
    if let Some(FitStep::Solver {
        solver,
        iterations,
        gap,
        tol,
    }) = state.solver
    {
        line.push_str(&format!(
            "; {solver}: {iterations} iterations, gap {gap:.1e} (stops at {tol:.0e})"
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_counts_each_item_once_its_work_is_done() {
        let p = Progress::new(false, "counting", 3, "items");
        let Output::Lines { done, .. } = &p.output else {
            // A terminal runs these tests: nothing to count here.
            return;
        };
        let mut seen = Vec::new();
        for i in p.over(0..3) {
            seen.push((i, done.load(Ordering::Relaxed)));
        }
        assert_eq!(seen, vec![(0, 0), (1, 1), (2, 2)]);
        assert_eq!(done.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn the_line_says_counts_elapsed_and_a_linear_eta() {
        let p = Progress::new(true, "evaluating usmo", 50, "splits");
        assert_eq!(
            p.line(10, Duration::from_secs(20)),
            "evaluating usmo: 10/50 splits, 20 s, ETA 80 s"
        );
        assert_eq!(
            p.line(0, Duration::ZERO),
            "evaluating usmo: 0/50 splits, 0 s, ETA unknown"
        );
        assert_eq!(
            p.line(50, Duration::from_secs(100)),
            "evaluating usmo: 50/50 splits, 100 s, ETA 0 s"
        );
    }

    #[test]
    fn a_fit_is_described_by_phase_search_and_solver() {
        let start = Instant::now();
        let mut state = FitState {
            phase: "choosing the ranking depth".into(),
            phase_started: start,
            search: None,
            solver: None,
            last_shown: start,
        };
        let at = start + Duration::from_secs(12);
        assert_eq!(describe(&state, at), "choosing the ranking depth: 12 s");
        state.search = Some((3, 13));
        state.solver = Some(FitStep::Solver {
            solver: "ipm",
            iterations: 9,
            gap: 2.1e-4,
            tol: 1e-6,
        });
        assert_eq!(
            describe(&state, at),
            "choosing the ranking depth: fit 3 of at most 13, 12 s, ETA at most 40 s; ipm: 9 \
             iterations, gap 2.1e-4 (stops at 1e-6)"
        );
    }
}
