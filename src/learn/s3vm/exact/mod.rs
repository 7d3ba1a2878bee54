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
//! bound over open nodes and nodes pruned on the gap, capped by the incumbent.

pub mod branching;
pub mod heuristic;
pub mod instance;
pub mod qp24;

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// The boxes of working form (17): L, U and ū.
#[derive(Debug, Clone)]
struct Boxes {
    lower: Vec<f64>,
    upper: Vec<f64>,
    diag_upper: Vec<f64>,
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

/// What the search keeps across nodes: the incumbent, the root boxes OBBT tightened (valid
/// for every point at or below the incumbent, so every node is intersected with them), the
/// counters and the event sink.
struct Search<'a> {
    started: Instant,
    incumbent: Option<Incumbent>,
    /// The root's boxes after OBBT; `None` before the first round.
    global: Option<Boxes>,
    /// The incumbent the last OBBT round ran for.
    obbt_upper: f64,
    sdp_solves: usize,
    root_rounds: usize,
    root_cuts: usize,
    obbt_rounds: usize,
    obbt_seconds: f64,
    events: &'a mut dyn FnMut(&SearchEvent),
}

impl Search<'_> {
    /// Whether `time_limit` seconds have passed since the search started.
    fn past(&self, time_limit: Option<f64>) -> bool {
        time_limit.is_some_and(|t| self.started.elapsed().as_secs_f64() >= t)
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
    pub fn solve(
        &self,
        root: &Relaxation,
        starts: &[Vec<f64>],
        cancel: &AtomicBool,
        events: &mut dyn FnMut(&SearchEvent),
    ) -> Result<Certificate, ExactError> {
        let params = &self.params;
        let n = root.c.nrows();
        let balance = root.balance.as_ref();
        let mut search = Search {
            started: Instant::now(),
            incumbent: None,
            global: None,
            obbt_upper: f64::INFINITY,
            sdp_solves: 0,
            root_rounds: 0,
            root_cuts: 0,
            obbt_rounds: 0,
            obbt_seconds: 0.0,
            events,
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
                Incumbent::offer(&mut search.incumbent, s, sol);
            }
        }
        let mut heap = BinaryHeap::new();
        heap.push(Node {
            boxes: Boxes {
                lower: root.lower.clone(),
                upper: root.upper.clone(),
                diag_upper: root.diag_upper.clone(),
            },
            cuts: root.cuts.clone(),
            bound: f64::NEG_INFINITY,
            id: 0,
        });
        let mut next_id = 1u64;
        let mut nodes = 0usize;
        // The least bound of the nodes pruned on the gap (their subtrees may hold a slightly
        // better labelling).
        let mut pruned_bound = f64::INFINITY;
        let (mut root_lower_bound, mut root_upper_bound) = (f64::NEG_INFINITY, f64::INFINITY);
        let mut status = CertifyStatus::Optimal;
        while let Some(node) = heap.peek() {
            let upper = Incumbent::upper(&search.incumbent);
            if prunable(node.bound, upper, params.gap) {
                if node.bound < upper {
                    pruned_bound = pruned_bound.min(node.bound);
                }
                heap.pop();
                continue;
            }
            if nodes > 0 {
                if cancel.load(Ordering::Relaxed) {
                    status = CertifyStatus::Cancelled;
                    break;
                }
                if search.past(params.time_limit) {
                    status = CertifyStatus::TimeLimit;
                    break;
                }
                if params.node_limit.is_some_and(|m| nodes >= m) {
                    status = CertifyStatus::NodeLimit;
                    break;
                }
            }
            let Some(node) = heap.pop() else { break };
            nodes += 1;
            let outcome = self.evaluate(root, &node, nodes == 1, cancel, &mut search)?;
            if nodes == 1 {
                root_lower_bound = match &outcome {
                    Outcome::Closed(b) | Outcome::Branch { bound: b, .. } => *b,
                };
                root_upper_bound = Incumbent::upper(&search.incumbent);
            }
            match outcome {
                Outcome::Closed(bound) => {
                    if bound < Incumbent::upper(&search.incumbent) {
                        pruned_bound = pruned_bound.min(bound);
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
                            id: next_id,
                        };
                        next_id += 1;
                        child.boxes.lower[point] = child.boxes.lower[point].max(lower);
                        child.boxes.upper[point] = child.boxes.upper[point].min(upper);
                        heap.push(child);
                    }
                }
            }
            let upper = Incumbent::upper(&search.incumbent);
            (search.events)(&SearchEvent::Node(SearchProgress {
                nodes,
                open: heap.len(),
                upper,
                lower: global_lower(&heap, pruned_bound, upper),
                seconds: search.started.elapsed().as_secs_f64(),
            }));
        }
        let Some(best) = search.incumbent else {
            return Err(ExactError::NoIncumbent);
        };
        let upper = best.solution.objective;
        Ok(Certificate {
            status,
            lower_bound: global_lower(&heap, pruned_bound, upper),
            signs: best.signs,
            incumbent: best.solution,
            nodes,
            root_lower_bound,
            root_upper_bound,
            sdp_solves: search.sdp_solves,
            root_rounds: search.root_rounds,
            root_cuts: search.root_cuts,
            obbt_rounds: search.obbt_rounds,
            obbt_seconds: search.obbt_seconds,
        })
    }

    /// One OBBT round (note B.4.1) on the root boxes when it is due — the first incumbent,
    /// or one more than `obbt_rerun` below the last round's — kept as the boxes every node is
    /// intersected with. An infeasible outcome (no point below the incumbent) leaves the
    /// boxes: the nodes then close on their own bounds.
    fn obbt_round(&self, root: &Relaxation, search: &mut Search<'_>) -> Result<(), ExactError> {
        let upper = Incumbent::upper(&search.incumbent);
        let due = upper.is_finite()
            && (search.obbt_upper.is_infinite()
                || upper < search.obbt_upper * (1.0 - self.params.obbt_rerun));
        if !(self.params.cut_loop && due) {
            return Ok(());
        }
        let started = Instant::now();
        let mut relaxation = root.clone();
        if let Some(global) = &search.global {
            relaxation.lower.clone_from(&global.lower);
            relaxation.upper.clone_from(&global.upper);
            relaxation.diag_upper.clone_from(&global.diag_upper);
        }
        let round = self.tighten.obbt(&mut relaxation, upper)?;
        let took = started.elapsed().as_secs_f64();
        search.obbt_upper = upper;
        search.obbt_rounds += 1;
        search.obbt_seconds += took;
        if round.infeasible.is_none() {
            search.global = Some(Boxes {
                lower: relaxation.lower,
                upper: relaxation.upper,
                diag_upper: relaxation.diag_upper,
            });
        }
        (search.events)(&SearchEvent::Obbt(ObbtReport {
            upper,
            changed: round.changed,
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
        search: &mut Search<'_>,
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
            balance: root.balance.clone(),
            rows: root.rows,
            cuts: node.cuts.clone(),
        };
        // Nothing in the node at or below the incumbent (or nothing at all).
        let empty = |search: &Search<'_>, bound: f64| {
            Outcome::Closed(bound.max(Incumbent::upper(&search.incumbent)))
        };
        self.obbt_round(root, search)?;
        if !intersect_global(&mut relaxation, search) {
            return Ok(empty(search, node.bound));
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
                        Incumbent::offer(&mut search.incumbent, signs, sol);
                        Outcome::Closed(value)
                    }
                    None => Outcome::Closed(f64::INFINITY),
                });
            }
            let built = relaxation.build()?;
            let solution = self.sdp.solve(&built.problem);
            search.sdp_solves += 1;
            round += 1;
            let upper = Incumbent::upper(&search.incumbent);
            let safe = built
                .safe_lower_bound(&solution.duals, upper.is_finite().then_some(upper))?
                .value;
            let previous = bound;
            bound = bound.max(safe);
            if is_root {
                search.root_rounds = round;
                search.root_cuts = relaxation.cuts.len();
                (search.events)(&SearchEvent::Root(RootRound {
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
                    Incumbent::offer(&mut search.incumbent, signs, sol);
                }
                tried.push(start.clone());
                // Note B.4.6 step 3: a better incumbent re-runs OBBT (when it is due).
                let rounds = search.obbt_rounds;
                if !out_of_time(search) {
                    self.obbt_round(root, search)?;
                }
                if search.obbt_rounds > rounds && !intersect_global(&mut relaxation, search) {
                    return Ok(empty(search, bound));
                }
            }
            let upper = Incumbent::upper(&search.incumbent);
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
                        return Ok(empty(search, bound));
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
                },
                cuts: relaxation.cuts,
            });
        }
    }
}

/// Intersects the node's boxes with the root's OBBT boxes and projects them (Remark 2);
/// `false` when the node is then empty.
fn intersect_global(relaxation: &mut Relaxation, search: &Search<'_>) -> bool {
    if let Some(global) = &search.global {
        for (i, l) in relaxation.lower.iter_mut().enumerate() {
            *l = l.max(global.lower[i]);
        }
        for (i, u) in relaxation.upper.iter_mut().enumerate() {
            *u = u.min(global.upper[i]);
        }
        for (i, d) in relaxation.diag_upper.iter_mut().enumerate() {
            *d = d.min(global.diag_upper[i]);
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

/// The global safe lower bound: the least of the open nodes' bounds, the gap-pruned nodes'
/// bounds and the incumbent.
fn global_lower(heap: &BinaryHeap<Node>, pruned_bound: f64, upper: f64) -> f64 {
    heap.iter()
        .map(|n| n.bound)
        .fold(pruned_bound.min(upper), f64::min)
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
