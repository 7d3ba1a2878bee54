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
//!
//! A node (note B.4.6) is the working form (17): boxes L ≤ x ≤ U (branching sets U_i = −1 in
//! one child and L_i = 1 in the other), the RLT cuts it inherits (none are separated here
//! yet; bound tightening and cut separation plug in on the node's boxes, the incumbent UB
//! and the cut set), and the bound of its parent. Its relaxation's safe bound, with
//! T = 1 + UB/λ_min(C) from the incumbent, decides: prune when (UB − LB)/UB < `gap` (with
//! `gap` = 0 only when LB ≥ UB), else run the heuristic from the relaxation's x̂ and branch.
//! A node with every sign fixed is a leaf, solved exactly by QP (24). The global lower bound
//! is the least bound over open nodes and nodes pruned on the gap, capped by the incumbent.

pub mod branching;
pub mod heuristic;
pub mod qp24;

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use faer::Mat;

use super::sdp::ipm::{SdpParams, SdpStatus, SdpValidParams};
use super::sdp::relax::{objective_matrix, Relaxation, RltCut, RowKind};
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
}

impl Default for CertifyParams {
    fn default() -> CertifyParams {
        CertifyParams {
            gap: Self::DEFAULT_GAP,
            time_limit: None,
            node_limit: None,
            sdp: SdpParams::default(),
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
        Ok(CertifyValidParams {
            params: self,
            sdp: self.sdp.check()?,
        })
    }
}

/// Checked [`CertifyParams`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CertifyValidParams {
    params: CertifyParams,
    sdp: SdpValidParams,
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

/// One open node of the tree.
struct Node {
    lower: Vec<f64>,
    upper: Vec<f64>,
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
    /// search; `cancel` set stops the search with [`CertifyStatus::Cancelled`]; `progress`
    /// sees the state after every node.
    pub fn solve(
        &self,
        root: &Relaxation,
        starts: &[Vec<f64>],
        cancel: &AtomicBool,
        progress: &mut dyn FnMut(&SearchProgress),
    ) -> Result<Certificate, ExactError> {
        let started = Instant::now();
        let params = &self.params;
        let n = root.c.nrows();
        let balance = root.balance.as_ref();
        let mut incumbent: Option<Incumbent> = None;
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
                Incumbent::offer(&mut incumbent, s, sol);
            }
        }
        let mut heap = BinaryHeap::new();
        heap.push(Node {
            lower: root.lower.clone(),
            upper: root.upper.clone(),
            cuts: root.cuts.clone(),
            bound: f64::NEG_INFINITY,
            id: 0,
        });
        let mut next_id = 1u64;
        let (mut nodes, mut sdp_solves) = (0usize, 0usize);
        // The least bound of the nodes pruned on the gap (their subtrees may hold a slightly
        // better labelling).
        let mut pruned_bound = f64::INFINITY;
        let (mut root_lower_bound, mut root_upper_bound) = (f64::NEG_INFINITY, f64::INFINITY);
        let mut status = CertifyStatus::Optimal;
        while let Some(node) = heap.peek() {
            let upper = Incumbent::upper(&incumbent);
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
                if params
                    .time_limit
                    .is_some_and(|t| started.elapsed().as_secs_f64() >= t)
                {
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
            let outcome = self.evaluate(root, &node, &mut incumbent, &mut sdp_solves)?;
            if nodes == 1 {
                root_lower_bound = match &outcome {
                    Outcome::Closed(b) | Outcome::Branch { bound: b, .. } => *b,
                };
                root_upper_bound = Incumbent::upper(&incumbent);
            }
            match outcome {
                Outcome::Closed(bound) => {
                    if bound < Incumbent::upper(&incumbent) {
                        pruned_bound = pruned_bound.min(bound);
                    }
                }
                Outcome::Branch { bound, point } => {
                    for (lower, upper) in [(f64::NEG_INFINITY, -1.0), (1.0, f64::INFINITY)] {
                        let mut child = Node {
                            lower: node.lower.clone(),
                            upper: node.upper.clone(),
                            cuts: node.cuts.clone(),
                            bound,
                            id: next_id,
                        };
                        next_id += 1;
                        child.lower[point] = child.lower[point].max(lower);
                        child.upper[point] = child.upper[point].min(upper);
                        heap.push(child);
                    }
                }
            }
            let upper = Incumbent::upper(&incumbent);
            progress(&SearchProgress {
                nodes,
                open: heap.len(),
                upper,
                lower: global_lower(&heap, pruned_bound, upper),
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        let Some(best) = incumbent else {
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
            sdp_solves,
        })
    }

    /// Bounds one node: a leaf by QP (24); otherwise relaxation (20), its safe bound, the
    /// heuristic from x̂ and the branching point.
    fn evaluate(
        &self,
        root: &Relaxation,
        node: &Node,
        incumbent: &mut Option<Incumbent>,
        sdp_solves: &mut usize,
    ) -> Result<Outcome, ExactError> {
        let n = root.c.nrows();
        let balance = root.balance.as_ref();
        let signs_fixed: Vec<Option<f64>> = (0..n)
            .map(|i| fixed_sign(node.lower[i], node.upper[i]))
            .collect();
        let undecided: Vec<usize> = (0..n).filter(|&i| signs_fixed[i].is_none()).collect();
        if undecided.is_empty() {
            let signs: Vec<f64> = signs_fixed.iter().map(|s| s.unwrap_or(1.0)).collect();
            return Ok(match qp24::solve(&root.c, &signs, balance)? {
                Some(sol) => {
                    let value = sol.objective;
                    Incumbent::offer(incumbent, signs, sol);
                    Outcome::Closed(value)
                }
                None => Outcome::Closed(f64::INFINITY),
            });
        }
        let relaxation = Relaxation {
            c: root.c.clone(),
            lower: node.lower.clone(),
            upper: node.upper.clone(),
            diag_upper: node
                .lower
                .iter()
                .zip(&node.upper)
                .map(|(l, u)| (l * l).max(u * u))
                .collect(),
            balance: root.balance.clone(),
            rows: root.rows,
            cuts: node.cuts.clone(),
        };
        let built = relaxation.build()?;
        let solution = self.sdp.solve(&built.problem);
        *sdp_solves += 1;
        let upper = Incumbent::upper(incumbent);
        let safe = built
            .safe_lower_bound(&solution.duals, upper.is_finite().then_some(upper))?
            .value;
        let bound = node.bound.max(safe);
        if solution.status == SdpStatus::Infeasible || prunable(bound, upper, self.params.gap) {
            return Ok(Outcome::Closed(bound));
        }
        let y = &solution.primal;
        let x_hat: Vec<f64> = (0..n).map(|i| y[(i, n)]).collect();
        let start: Vec<f64> = (0..n)
            .map(|i| signs_fixed[i].unwrap_or(if x_hat[i] < 0.0 { -1.0 } else { 1.0 }))
            .collect();
        let x_bar = qp24::solve(&root.c, &start, balance)?.map(|s| s.x);
        if let Some((signs, sol)) = heuristic::improve(&root.c, &start, &undecided, balance)? {
            Incumbent::offer(incumbent, signs, sol);
        }
        if prunable(bound, Incumbent::upper(incumbent), self.params.gap) {
            return Ok(Outcome::Closed(bound));
        }
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
            lower: &node.lower,
            upper: &node.upper,
        };
        Ok(Outcome::Branch {
            bound,
            point: branching::choose(&view, &undecided),
        })
    }
}

/// What evaluating a node gave.
enum Outcome {
    /// Pruned, infeasible or a leaf, with its bound (∞ for an infeasible one).
    Closed(f64),
    /// Branch on `point`; the children inherit `bound`.
    Branch { bound: f64, point: usize },
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
