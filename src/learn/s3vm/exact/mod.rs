//! The exact S3VM (seed 004; note B.4): best-first branch-and-bound over the unlabeled
//! points' signs, each node bounded by relaxation (20) solved by the own SDP engine
//! ([`crate::learn::s3vm::sdp`]) and its **safe** lower bound (note B.4.5), the only bound
//! used for pruning.
//!
//! - This file: the search ([`CertifyValidParams::solve`]), its params, result and error,
//!   and the supervised L2-SVM whose labelling seeds the incumbent ([`supervised`]).
//! - [`qp24`]: QP (24), the exact value of one full labelling (leaves, incumbents).
//! - [`heuristic`]: the 2-opt local search of note B.4.7 (Proposition 2, O(1) pair moves).
//! - [`branching`]: the rank-sum rule of note B.4.8 with the most-fractional fallback.
//! - [`instance`]: model (8) of a dataset (standardised rows, kernel, penalties, C) and a
//!   start labelling that meets a balance row.
//!
//! A node (note B.4.6) is the working form (17): boxes L ≤ x ≤ U and ū (branching sets
//! U_i = −1 in one child and L_i = 1 in the other), the RLT cuts it inherits, and the bound
//! of its parent. Its bounding loop: the boxes intersected with the root's OBBT boxes
//! (note B.4.1, one round once an incumbent exists and again when it falls by `obbt_rerun`)
//! and projected (Remark 2; empty → pruned), then per round relaxation (20), its safe bound
//! with T from the incumbent, the heuristic from x̂, marginals tightening (B.4.4) and RLT
//! separation/removal (B.4.3), re-solving while the bound rises by more than `stall` (a solve
//! that did not converge neither counts as stalled nor drops cuts), at most `max_rounds`
//! solves. Prune when (UB − LB)/UB < `gap` (with `gap` = 0 only when LB ≥ UB),
//! else branch; the children inherit the tightened boxes and the final cut set. A node with
//! every sign fixed is a leaf, solved exactly by QP (24). The global lower bound is the least
//! bound over open, running and gap-pruned nodes, capped by the incumbent. The root is
//! evaluated alone; then `threads` workers each take the best open node, sharing the
//! incumbent, the OBBT boxes and the counters (docs/exact-s3vm.md §6).

pub mod branching;
pub mod heuristic;
pub mod instance;
pub mod qp24;

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use faer::Mat;

use super::sdp::ipm::{SdpParams, SdpStatus, SdpValidParams};
use super::sdp::relax::{objective_matrix, Relaxation, RltCut, RowKind};
use super::sdp::tighten::{
    cut_duals, project_boxes, TightenError, TightenParams, TightenValidParams,
};
use super::sdp::SdpError;
use crate::data::Label;
use qp24::Qp24Solution;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExactError {
    #[error("certify: {0}")]
    Param(String),
    #[error("certify: {0}")]
    Labelling(String),
    #[error("QP (24) did not converge in {0} active-set iterations")]
    Qp24NotConverged(usize),
    #[error("certify: {0} failed (non-finite values?)")]
    Numerical(&'static str),
    #[error("certify: no labelling meets the balance row (11) found")]
    NoIncumbent,
    #[error(transparent)]
    Sdp(#[from] SdpError),
    #[error(transparent)]
    Tighten(#[from] TightenError),
}

/// The search's settings (unchecked); [`CertifyParams::check`] validates them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CertifyParams {
    /// Prune a node when (UB − LB)/UB < gap; 0: only when LB ≥ UB.
    pub gap: f64,
    /// Seconds after which the search stops with [`CertifyStatus::TimeLimit`] (the root is
    /// always evaluated).
    pub time_limit: Option<f64>,
    /// Nodes (root counted) after which the search stops with [`CertifyStatus::NodeLimit`].
    pub node_limit: Option<usize>,
    pub sdp: SdpParams,
    /// The node bounding loop of note B.4.6 (marginals tightening, RLT cuts, re-solves) and
    /// OBBT at the root; `false`: one solve of the bare relaxation per node (for comparison).
    pub cut_loop: bool,
    /// Solves per node at most (note B.4.10: 30).
    pub max_rounds: usize,
    /// Re-solve while the safe bound rises by more than this, relative (note B.4.10: 1e-3).
    pub stall: f64,
    /// Re-run OBBT on the root boxes when the incumbent has fallen by more than this,
    /// relative, since the last round (note B.4.6 step 3 re-runs on every improvement; a
    /// round costs 2u small QCQPs, docs/exact-s3vm.md §9).
    pub obbt_rerun: f64,
    /// RLT and tightening tolerances (note B.4.10).
    pub tighten: TightenParams,
    /// Nodes evaluated at once after the root, each on its own thread (the SDP engine is
    /// single-threaded, so on a machine of k cores k nodes cost about what one does). With
    /// 1 a run is deterministic; with more, which node improves the incumbent first depends
    /// on timing, so the node count and among equally good labellings the one returned may
    /// differ between runs; the certified bound is valid either way.
    pub threads: usize,
}

impl Default for CertifyParams {
    fn default() -> CertifyParams {
        CertifyParams {
            gap: Self::DEFAULT_GAP,
            time_limit: None,
            node_limit: None,
            sdp: SdpParams::default(),
            cut_loop: true,
            max_rounds: 30,
            stall: 1e-3,
            obbt_rerun: 1e-2,
            tighten: TightenParams::default(),
            threads: 1,
        }
    }
}

impl CertifyParams {
    /// The authors' prune gap, 0.1 % (note B.4.10).
    pub const DEFAULT_GAP: f64 = 1e-3;

    pub fn check(self) -> Result<CertifyValidParams, ExactError> {
        if !(self.gap >= 0.0 && self.gap < 1.0) {
            return Err(ExactError::Param(format!(
                "the gap must be in [0, 1), got {}",
                self.gap
            )));
        }
        if let Some(t) = self.time_limit {
            if t.is_nan() || t < 0.0 {
                return Err(ExactError::Param(format!(
                    "the time limit must be ≥ 0 seconds, got {t}"
                )));
            }
        }
        if self.node_limit == Some(0) {
            return Err(ExactError::Param("the node limit must be ≥ 1".into()));
        }
        if self.threads == 0 {
            return Err(ExactError::Param("the node threads must be ≥ 1".into()));
        }
        if self.max_rounds == 0 {
            return Err(ExactError::Param("the solves per node must be ≥ 1".into()));
        }
        for (name, v) in [("stall", self.stall), ("obbt_rerun", self.obbt_rerun)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ExactError::Param(format!(
                    "{name} must be finite and ≥ 0, got {v}"
                )));
            }
        }
        Ok(CertifyValidParams {
            params: self,
            sdp: self.sdp.check()?,
            tighten: self.tighten.check()?,
        })
    }
}

/// Checked [`CertifyParams`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CertifyValidParams {
    params: CertifyParams,
    sdp: SdpValidParams,
    tighten: TightenValidParams,
}

/// How the search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CertifyStatus {
    /// No open node is left: the incumbent is within the gap of the optimum.
    Optimal,
    TimeLimit,
    NodeLimit,
    Cancelled,
}

impl CertifyStatus {
    /// The name the reports use (the serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            CertifyStatus::Optimal => "optimal",
            CertifyStatus::TimeLimit => "time_limit",
            CertifyStatus::NodeLimit => "node_limit",
            CertifyStatus::Cancelled => "cancelled",
        }
    }
}

/// The incumbent and the bounds when the search ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Certificate {
    pub status: CertifyStatus,
    /// The incumbent labelling, ±1 per point (labelled points keep their label).
    pub signs: Vec<f64>,
    /// QP (24)'s solution for it; its objective is the value of (8) (with (11)).
    pub incumbent: Qp24Solution,
    /// The global safe lower bound.
    pub lower_bound: f64,
    /// Nodes evaluated, root counted.
    pub nodes: usize,
    pub root_lower_bound: f64,
    /// The incumbent's objective when the root was done.
    pub root_upper_bound: f64,
    pub sdp_solves: usize,
    /// The root's solves (its cutting-plane rounds, the first solve counted) and the size of
    /// its final cut set.
    pub root_rounds: usize,
    pub root_cuts: usize,
    /// OBBT rounds on the root boxes and their seconds.
    pub obbt_rounds: usize,
    pub obbt_seconds: f64,
}

/// (UB − LB)/UB, 0 when LB ≥ UB.
pub fn relative_gap(upper: f64, lower: f64) -> f64 {
    if lower >= upper {
        0.0
    } else {
        (upper - lower) / upper.abs().max(f64::MIN_POSITIVE)
    }
}

/// The state of a running search, for whoever shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchProgress {
    pub nodes: usize,
    pub open: usize,
    /// The incumbent's objective (∞ before one is found).
    pub upper: f64,
    pub lower: f64,
    pub seconds: f64,
}

/// One solve of the root's cutting-plane loop (note B.4.6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RootRound {
    /// 1 for the first solve.
    pub round: usize,
    /// Cuts added and removed before this solve, and the cuts it had.
    pub added: usize,
    pub removed: usize,
    pub cuts: usize,
    /// The interior-point iterations of this solve and how it ended.
    pub iterations: usize,
    pub status: SdpStatus,
    /// The root's safe bound so far (the best over its solves) and the incumbent.
    pub lower: f64,
    pub upper: f64,
    pub seconds: f64,
}

/// One OBBT round on the root boxes (note B.4.1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObbtReport {
    /// The incumbent it ran for.
    pub upper: f64,
    /// Entries of L, U, ū moved.
    pub changed: usize,
    /// Seconds of the round; `seconds` since the search started.
    pub took: f64,
    pub seconds: f64,
}

/// What the search tells whoever shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SearchEvent {
    /// After every node.
    Node(SearchProgress),
    Root(RootRound),
    Obbt(ObbtReport),
}

/// The boxes of working form (17): L, U, ū and Lemma 2's t.
#[derive(Debug, Clone)]
struct Boxes {
    lower: Vec<f64>,
    upper: Vec<f64>,
    diag_upper: Vec<f64>,
    diag_lower: Vec<f64>,
}

/// One open node of the tree.
struct Node {
    boxes: Boxes,
    cuts: Vec<RltCut>,
    /// The parent's safe bound (the root: −∞).
    bound: f64,
    /// Creation order: ties between equal bounds go to the older node, so a run is
    /// deterministic.
    id: u64,
}

impl PartialEq for Node {
    fn eq(&self, other: &Node) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Node {}
impl PartialOrd for Node {
    fn partial_cmp(&self, other: &Node) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Node {
    /// The max-heap pops the smallest bound first (best-first, note B.4.9).
    fn cmp(&self, other: &Node) -> CmpOrdering {
        other
            .bound
            .total_cmp(&self.bound)
            .then(other.id.cmp(&self.id))
    }
}

/// The incumbent: the best labelling found and its QP (24) solution.
struct Incumbent {
    signs: Vec<f64>,
    solution: Qp24Solution,
}

impl Incumbent {
    fn upper(this: &Option<Incumbent>) -> f64 {
        this.as_ref()
            .map_or(f64::INFINITY, |i| i.solution.objective)
    }

    fn offer(this: &mut Option<Incumbent>, signs: Vec<f64>, solution: Qp24Solution) {
        if solution.objective < Incumbent::upper(this) {
            *this = Some(Incumbent { signs, solution });
        }
    }
}

/// What the node workers share besides the open nodes: the incumbent, the root boxes OBBT
/// tightened (valid for every point at or below the incumbent, so every node is intersected
/// with them) and the counters.
struct Shared {
    incumbent: Option<Incumbent>,
    /// The root's boxes after OBBT; `None` before the first round.
    global: Option<Boxes>,
    /// The incumbent the last OBBT round ran for.
    obbt_upper: f64,
    /// A worker is running an OBBT round (one at a time; the others go on with their nodes).
    obbt_running: bool,
    sdp_solves: usize,
    root_rounds: usize,
    root_cuts: usize,
    obbt_rounds: usize,
    obbt_seconds: f64,
}

/// What the search keeps across nodes: the shared state and the event sink, each behind a
/// lock so that node workers can run at once (lock order: [`Queue`], then these).
struct Search<'a> {
    started: Instant,
    shared: Mutex<Shared>,
    events: Mutex<&'a mut (dyn FnMut(&SearchEvent) + Send)>,
}

/// A lock whose holder panicked still guards consistent data here (every update is a few
/// assignments), and the panic itself reaches the caller through the thread scope.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Search<'_> {
    /// Whether `time_limit` seconds have passed since the search started.
    fn past(&self, time_limit: Option<f64>) -> bool {
        time_limit.is_some_and(|t| self.started.elapsed().as_secs_f64() >= t)
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        lock(&self.shared)
    }

    fn upper(&self) -> f64 {
        Incumbent::upper(&self.shared().incumbent)
    }

    fn offer(&self, signs: Vec<f64>, solution: Qp24Solution) {
        Incumbent::offer(&mut self.shared().incumbent, signs, solution);
    }

    fn emit(&self, event: &SearchEvent) {
        (lock(&self.events))(event);
    }
}

/// The open nodes and the nodes being evaluated.
struct Queue {
    heap: BinaryHeap<Node>,
    /// The id and inherited bound of each node a worker is evaluating: they count in the
    /// global bound until settled.
    running: Vec<(u64, f64)>,
    next_id: u64,
    /// Nodes taken so far, root counted.
    nodes: usize,
    /// The least bound of the nodes pruned on the gap (their subtrees may hold a slightly
    /// better labelling).
    pruned_bound: f64,
    /// Why the search stops before the tree is closed, once a worker saw it.
    stop: Option<CertifyStatus>,
    /// The first error a worker met; the others stop after their node.
    error: Option<ExactError>,
}

impl Queue {
    /// Records what evaluating a node gave: its bound if it closed, else its two children.
    fn settle(&mut self, outcome: Outcome, upper: f64) {
        match outcome {
            Outcome::Closed(bound) => {
                if bound < upper {
                    self.pruned_bound = self.pruned_bound.min(bound);
                }
            }
            Outcome::Branch {
                bound,
                point,
                boxes,
                cuts,
            } => {
                for (lower, upper) in [(f64::NEG_INFINITY, -1.0), (1.0, f64::INFINITY)] {
                    let mut child = Node {
                        boxes: boxes.clone(),
                        cuts: cuts.clone(),
                        bound,
                        id: self.next_id,
                    };
                    self.next_id += 1;
                    child.boxes.lower[point] = child.boxes.lower[point].max(lower);
                    child.boxes.upper[point] = child.boxes.upper[point].min(upper);
                    self.heap.push(child);
                }
            }
        }
    }

    /// The global safe lower bound: the least of the open and running nodes' bounds, the
    /// gap-pruned nodes' bounds and the incumbent.
    fn global_lower(&self, upper: f64) -> f64 {
        self.heap
            .iter()
            .map(|n| n.bound)
            .chain(self.running.iter().map(|r| r.1))
            .fold(self.pruned_bound.min(upper), f64::min)
    }

    fn progress(&self, upper: f64, search: &Search<'_>) -> SearchEvent {
        SearchEvent::Node(SearchProgress {
            nodes: self.nodes,
            open: self.heap.len() + self.running.len(),
            upper,
            lower: self.global_lower(upper),
            seconds: search.started.elapsed().as_secs_f64(),
        })
    }
}

/// Whether a node of bound `lower` can go: LB ≥ UB, or (UB − LB)/UB < gap.
fn prunable(lower: f64, upper: f64, gap: f64) -> bool {
    lower >= upper || (upper.is_finite() && upper - lower < gap * upper.abs())
}

/// The sign a node fixes for point i, if any (L_i ≥ 1 or U_i ≤ −1 after projection).
fn fixed_sign(lower: f64, upper: f64) -> Option<f64> {
    if lower > -1.0 {
        Some(1.0)
    } else if upper < 1.0 {
        Some(-1.0)
    } else {
        None
    }
}

impl CertifyValidParams {
    /// The branch-and-bound from the root relaxation `root` (its C, boxes — the labelled
    /// points' signs — and balance row; its cuts are the root's). `starts` are labellings
    /// (±1 per point) the incumbent is first sought from, each through QP (24) and the local
    /// search; `cancel` set stops the search with [`CertifyStatus::Cancelled`]; `events`
    /// sees the state after every node, each root cutting-plane round and each OBBT round.
    /// The root is evaluated alone, then `threads` workers take the best open nodes.
    pub fn solve(
        &self,
        root: &Relaxation,
        starts: &[Vec<f64>],
        cancel: &AtomicBool,
        events: &mut (dyn FnMut(&SearchEvent) + Send),
    ) -> Result<Certificate, ExactError> {
        let n = root.c.nrows();
        let balance = root.balance.as_ref();
        let search = Search {
            started: Instant::now(),
            shared: Mutex::new(Shared {
                incumbent: None,
                global: None,
                obbt_upper: f64::INFINITY,
                obbt_running: false,
                sdp_solves: 0,
                root_rounds: 0,
                root_cuts: 0,
                obbt_rounds: 0,
                obbt_seconds: 0.0,
            }),
            events: Mutex::new(events),
        };
        let root_free: Vec<usize> = (0..n)
            .filter(|&i| fixed_sign(root.lower[i], root.upper[i]).is_none())
            .collect();
        for signs in starts {
            if signs.len() != n {
                return Err(ExactError::Labelling(format!(
                    "a start labelling has {} signs for {n} points",
                    signs.len()
                )));
            }
            if let Some((s, sol)) = heuristic::improve(&root.c, signs, &root_free, balance)? {
                search.offer(s, sol);
            }
        }
        let root_node = Node {
            boxes: Boxes {
                lower: root.lower.clone(),
                upper: root.upper.clone(),
                diag_upper: root.diag_upper.clone(),
                diag_lower: root.diag_lower.clone(),
            },
            cuts: root.cuts.clone(),
            bound: f64::NEG_INFINITY,
            id: 0,
        };
        let mut queue = Queue {
            heap: BinaryHeap::new(),
            running: Vec::new(),
            next_id: 1,
            nodes: 1,
            pruned_bound: f64::INFINITY,
            stop: None,
            error: None,
        };
        let outcome = self.evaluate(root, &root_node, true, cancel, &search)?;
        let root_lower_bound = match &outcome {
            Outcome::Closed(b) | Outcome::Branch { bound: b, .. } => *b,
        };
        let root_upper_bound = search.upper();
        queue.settle(outcome, root_upper_bound);
        search.emit(&queue.progress(root_upper_bound, &search));
        let queue = Mutex::new(queue);
        let wake = Condvar::new();
        if self.params.threads == 1 {
            self.work(root, cancel, &search, &queue, &wake);
        } else {
            std::thread::scope(|scope| {
                for _ in 0..self.params.threads {
                    scope.spawn(|| self.work(root, cancel, &search, &queue, &wake));
                }
            });
        }
        let queue = queue.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = queue.error {
            return Err(e);
        }
        let shared = search
            .shared
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(best) = shared.incumbent else {
            return Err(ExactError::NoIncumbent);
        };
        let upper = best.solution.objective;
        Ok(Certificate {
            status: queue.stop.unwrap_or(CertifyStatus::Optimal),
            lower_bound: queue.global_lower(upper),
            signs: best.signs,
            incumbent: best.solution,
            nodes: queue.nodes,
            root_lower_bound,
            root_upper_bound,
            sdp_solves: shared.sdp_solves,
            root_rounds: shared.root_rounds,
            root_cuts: shared.root_cuts,
            obbt_rounds: shared.obbt_rounds,
            obbt_seconds: shared.obbt_seconds,
        })
    }

    /// One node worker: takes the best open node (pruning those within the gap of the
    /// incumbent), evaluates it and settles the outcome, until the tree is closed, a limit
    /// is reached, the search is cancelled or a worker met an error. A worker that finds no
    /// open node while others still evaluate waits for their children.
    fn work(
        &self,
        root: &Relaxation,
        cancel: &AtomicBool,
        search: &Search<'_>,
        queue: &Mutex<Queue>,
        wake: &Condvar,
    ) {
        let params = &self.params;
        loop {
            let node = {
                let mut q = lock(queue);
                loop {
                    if q.stop.is_some() || q.error.is_some() {
                        return;
                    }
                    let upper = search.upper();
                    if let Some(node) = q.heap.peek() {
                        if prunable(node.bound, upper, params.gap) {
                            if node.bound < upper {
                                q.pruned_bound = q.pruned_bound.min(node.bound);
                            }
                            q.heap.pop();
                            continue;
                        }
                        let stop = if cancel.load(Ordering::Relaxed) {
                            Some(CertifyStatus::Cancelled)
                        } else if search.past(params.time_limit) {
                            Some(CertifyStatus::TimeLimit)
                        } else if params.node_limit.is_some_and(|m| q.nodes >= m) {
                            Some(CertifyStatus::NodeLimit)
                        } else {
                            None
                        };
                        if stop.is_some() {
                            q.stop = stop;
                            wake.notify_all();
                            return;
                        }
                        if let Some(node) = q.heap.pop() {
                            q.nodes += 1;
                            q.running.push((node.id, node.bound));
                            break node;
                        }
                    }
                    if q.running.is_empty() {
                        wake.notify_all();
                        return;
                    }
                    q = wake.wait(q).unwrap_or_else(PoisonError::into_inner);
                }
            };
            let outcome = self.evaluate(root, &node, false, cancel, search);
            let mut q = lock(queue);
            q.running.retain(|r| r.0 != node.id);
            match outcome {
                Ok(outcome) => q.settle(outcome, search.upper()),
                Err(e) => {
                    q.error.get_or_insert(e);
                }
            }
            search.emit(&q.progress(search.upper(), search));
            wake.notify_all();
        }
    }

    /// One OBBT round (note B.4.1) on the root boxes when it is due — the first incumbent,
    /// or one more than `obbt_rerun` below the last round's — kept as the boxes every node is
    /// intersected with. An infeasible outcome (no point below the incumbent) leaves the
    /// boxes: the nodes then close on their own bounds.
    fn obbt_round(&self, root: &Relaxation, search: &Search<'_>) -> Result<(), ExactError> {
        let (upper, boxes) = {
            let mut shared = search.shared();
            let upper = Incumbent::upper(&shared.incumbent);
            let due = upper.is_finite()
                && !shared.obbt_running
                && (shared.obbt_upper.is_infinite()
                    || upper < shared.obbt_upper * (1.0 - self.params.obbt_rerun));
            if !(self.params.cut_loop && due) {
                return Ok(());
            }
            shared.obbt_running = true;
            (upper, shared.global.clone())
        };
        let started = Instant::now();
        let mut relaxation = root.clone();
        if let Some(global) = boxes {
            relaxation.lower = global.lower;
            relaxation.upper = global.upper;
            relaxation.diag_upper = global.diag_upper;
            relaxation.diag_lower = global.diag_lower;
        }
        let round = self.tighten.obbt(&mut relaxation, upper);
        let took = started.elapsed().as_secs_f64();
        let changed = {
            let mut shared = search.shared();
            shared.obbt_running = false;
            let round = round?;
            shared.obbt_upper = upper;
            shared.obbt_rounds += 1;
            shared.obbt_seconds += took;
            if round.infeasible.is_none() {
                shared.global = Some(Boxes {
                    lower: relaxation.lower,
                    upper: relaxation.upper,
                    diag_upper: relaxation.diag_upper,
                    diag_lower: relaxation.diag_lower,
                });
            }
            round.changed
        };
        search.emit(&SearchEvent::Obbt(ObbtReport {
            upper,
            changed,
            took,
            seconds: search.started.elapsed().as_secs_f64(),
        }));
        Ok(())
    }

    /// Bounds one node by the loop of note B.4.6: the node's boxes (intersected with the
    /// OBBT boxes) projected (Remark 2); then per round relaxation (20), its safe bound, the
    /// heuristic from x̂ when its labelling is new here, marginals tightening (B.4.4) and cut
    /// management (B.4.3), until the bound stalls (`stall`), `max_rounds` solves, the node
    /// prunes, or nothing changed. Every tightening keeps each point of the node at or below
    /// the incumbent, so the best bound over the rounds bounds the node (a node with no such
    /// point closes at the incumbent). A node whose signs are all fixed is a leaf, solved
    /// exactly by QP (24).
    fn evaluate(
        &self,
        root: &Relaxation,
        node: &Node,
        is_root: bool,
        cancel: &AtomicBool,
        search: &Search<'_>,
    ) -> Result<Outcome, ExactError> {
        let n = root.c.nrows();
        let balance = root.balance.as_ref();
        let params = &self.params;
        let out_of_time =
            |search: &Search<'_>| cancel.load(Ordering::Relaxed) || search.past(params.time_limit);
        let mut relaxation = Relaxation {
            c: root.c.clone(),
            lower: node.boxes.lower.clone(),
            upper: node.boxes.upper.clone(),
            diag_upper: node.boxes.diag_upper.clone(),
            diag_lower: node.boxes.diag_lower.clone(),
            balance: root.balance.clone(),
            rows: root.rows,
            cuts: node.cuts.clone(),
        };
        // Nothing in the node at or below the incumbent (or nothing at all).
        let empty = |bound: f64| Outcome::Closed(bound.max(search.upper()));
        self.obbt_round(root, search)?;
        if !intersect_global(&mut relaxation, search) {
            return Ok(empty(node.bound));
        }
        let mut bound = node.bound;
        let mut tried: Vec<Vec<f64>> = Vec::new();
        let (mut added, mut removed) = (0usize, 0usize);
        let mut round = 0usize;
        loop {
            let signs_fixed: Vec<Option<f64>> = (0..n)
                .map(|i| fixed_sign(relaxation.lower[i], relaxation.upper[i]))
                .collect();
            let undecided: Vec<usize> = (0..n).filter(|&i| signs_fixed[i].is_none()).collect();
            if undecided.is_empty() {
                let signs: Vec<f64> = signs_fixed.iter().map(|s| s.unwrap_or(1.0)).collect();
                return Ok(match qp24::solve(&root.c, &signs, balance)? {
                    Some(sol) => {
                        let value = sol.objective;
                        search.offer(signs, sol);
                        Outcome::Closed(value)
                    }
                    None => Outcome::Closed(f64::INFINITY),
                });
            }
            let built = relaxation.build()?;
            // A time limit or a cancel interrupts the solve (its safe bound still holds), but
            // not the root's first one: the root is always evaluated.
            let first = is_root && round == 0;
            let solution = self.sdp.solve_until(&built.problem, &|| {
                cancel.load(Ordering::Relaxed) || (!first && search.past(params.time_limit))
            });
            search.shared().sdp_solves += 1;
            round += 1;
            let upper = search.upper();
            let safe = built
                .safe_lower_bound(&solution.duals, upper.is_finite().then_some(upper))?
                .value;
            let previous = bound;
            bound = bound.max(safe);
            if is_root {
                {
                    let mut shared = search.shared();
                    shared.root_rounds = round;
                    shared.root_cuts = relaxation.cuts.len();
                }
                search.emit(&SearchEvent::Root(RootRound {
                    round,
                    added,
                    removed,
                    cuts: relaxation.cuts.len(),
                    iterations: solution.iterations,
                    status: solution.status,
                    lower: bound,
                    upper,
                    seconds: search.started.elapsed().as_secs_f64(),
                }));
            }
            if solution.status == SdpStatus::Infeasible || prunable(bound, upper, params.gap) {
                return Ok(Outcome::Closed(bound));
            }
            let y = &solution.primal;
            let x_hat: Vec<f64> = (0..n).map(|i| y[(i, n)]).collect();
            let start: Vec<f64> = (0..n)
                .map(|i| signs_fixed[i].unwrap_or(if x_hat[i] < 0.0 { -1.0 } else { 1.0 }))
                .collect();
            if !tried.contains(&start) {
                if let Some((signs, sol)) =
                    heuristic::improve(&root.c, &start, &undecided, balance)?
                {
                    search.offer(signs, sol);
                }
                tried.push(start.clone());
                // Note B.4.6 step 3: a better incumbent re-runs OBBT (when it is due).
                let rounds = search.shared().obbt_rounds;
                if !out_of_time(search) {
                    self.obbt_round(root, search)?;
                }
                if search.shared().obbt_rounds > rounds
                    && !intersect_global(&mut relaxation, search)
                {
                    return Ok(empty(bound));
                }
            }
            let upper = search.upper();
            if prunable(bound, upper, params.gap) {
                return Ok(Outcome::Closed(bound));
            }
            // A solve that ran out of iterations or into numerical trouble still gives a safe
            // bound, but its multipliers are not converged: a bound that did not rise then does
            // not mean the cuts stopped paying, and a small |dual| does not mean the cut is
            // inactive (docs/exact-s3vm.md §8).
            let converged = matches!(solution.status, SdpStatus::Optimal | SdpStatus::Stalled);
            let stalled =
                converged && round > 1 && bound - previous <= params.stall * previous.abs();
            if params.cut_loop && round < params.max_rounds && !stalled && !out_of_time(search) {
                let mut changed = 0;
                if upper.is_finite() {
                    let marginals = self.tighten.tighten_marginals(
                        &mut relaxation,
                        &built,
                        y,
                        &solution.duals,
                        upper,
                    )?;
                    if marginals.infeasible.is_some() {
                        return Ok(empty(bound));
                    }
                    changed = marginals.changed;
                }
                let duals = cut_duals(&built, &solution.duals)?;
                let mut cuts = self.tighten.separate_cuts(&relaxation, y, &duals)?;
                if !converged {
                    cuts.drop.clear();
                }
                (added, removed) = (cuts.add.len(), cuts.drop.len());
                relaxation.cuts = cuts.apply(&relaxation.cuts);
                // Else the same relaxation would give the same bound.
                if changed > 0 || added > 0 {
                    continue;
                }
            }
            let x_bar = qp24::solve(&root.c, &start, balance)?.map(|s| s.x);
            let mut diag_duals = vec![0.0; n];
            for (kind, &dual) in built.kinds.iter().zip(&solution.duals) {
                if let RowKind::DiagLower(i) = *kind {
                    diag_duals[i] = dual;
                }
            }
            let view = branching::NodeView {
                c: &root.c,
                x_hat: &x_hat,
                y,
                diag_duals: &diag_duals,
                x_bar: x_bar.as_deref(),
                lower: &relaxation.lower,
                upper: &relaxation.upper,
            };
            let point = branching::choose(&view, &undecided);
            return Ok(Outcome::Branch {
                bound,
                point,
                boxes: Boxes {
                    lower: relaxation.lower,
                    upper: relaxation.upper,
                    diag_upper: relaxation.diag_upper,
                    diag_lower: relaxation.diag_lower,
                },
                cuts: relaxation.cuts,
            });
        }
    }
}

/// Intersects the node's boxes with the root's OBBT boxes and projects them (Remark 2);
/// `false` when the node is then empty.
fn intersect_global(relaxation: &mut Relaxation, search: &Search<'_>) -> bool {
    if let Some(global) = &search.shared().global {
        for (i, l) in relaxation.lower.iter_mut().enumerate() {
            *l = l.max(global.lower[i]);
        }
        for (i, u) in relaxation.upper.iter_mut().enumerate() {
            *u = u.min(global.upper[i]);
        }
        for (i, d) in relaxation.diag_upper.iter_mut().enumerate() {
            *d = d.min(global.diag_upper[i]);
        }
        for (i, t) in relaxation.diag_lower.iter_mut().enumerate() {
            *t = t.max(global.diag_lower[i]);
        }
    }
    project_boxes(relaxation).is_ok()
}

/// What evaluating a node gave.
enum Outcome {
    /// Pruned, infeasible or a leaf, with its bound (∞ for an infeasible one).
    Closed(f64),
    /// Branch on `point`; the children inherit `bound` and the node's final `boxes` and
    /// `cuts`.
    Branch {
        bound: f64,
        point: usize,
        boxes: Boxes,
        cuts: Vec<RltCut>,
    },
}

/// The supervised L2-SVM of model (8) on the labelled points alone (no balance row; the
/// baseline of note B.5 and the first incumbent's labelling, note B.4.7): QP (24) on their
/// C_L = ½(K_LL + D_L)⁻¹, then the decision value f(t) = Σ_k (K̂_L⁻¹x)_k k(t, x_k) (note B.1)
/// of every point. Returns f and the labelling: the labelled points' labels, sign(f)
/// (0 → +1) elsewhere.
pub fn supervised(
    gram: &Mat<f64>,
    penalties: &[f64],
    labels: &[Label],
) -> Result<(Vec<f64>, Vec<f64>), ExactError> {
    let n = gram.nrows();
    let labelled: Vec<usize> = (0..n).filter(|&i| labels[i] != Label::Unlabeled).collect();
    if labelled.is_empty() || labels.len() != n || penalties.len() != n {
        return Err(ExactError::Labelling(
            "the supervised L2-SVM needs labelled points and one label and penalty per point"
                .into(),
        ));
    }
    let m = labelled.len();
    let k_ll = Mat::from_fn(m, m, |a, b| gram[(labelled[a], labelled[b])]);
    let pen: Vec<f64> = labelled.iter().map(|&i| penalties[i]).collect();
    let c_l = objective_matrix(&k_ll, &pen)?;
    let signs_l: Vec<f64> = labelled
        .iter()
        .map(|&i| f64::from(labels[i].code()))
        .collect();
    let sol = qp24::solve(&c_l, &signs_l, None)?.ok_or(ExactError::Numerical(
        "the supervised L2-SVM (QP (24) without balance is always feasible)",
    ))?;
    // K̂_L⁻¹ x = 2·C_L x.
    let weights: Vec<f64> = (0..m)
        .map(|a| 2.0 * (0..m).map(|b| c_l[(a, b)] * sol.x[b]).sum::<f64>())
        .collect();
    let f: Vec<f64> = (0..n)
        .map(|t| {
            labelled
                .iter()
                .zip(&weights)
                .map(|(&k, w)| w * gram[(t, k)])
                .sum()
        })
        .collect();
    let signs = (0..n)
        .map(|t| match labels[t] {
            Label::Unlabeled => {
                if f[t] < 0.0 {
                    -1.0
                } else {
                    1.0
                }
            }
            l => f64::from(l.code()),
        })
        .collect();
    Ok((f, signs))
}
