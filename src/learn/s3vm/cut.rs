//! CutS3VM: the cutting-plane semi-supervised linear SVM (seed 002: Zhao, Wang & Zhang, KDD
//! 2008; the equations as rebuilt in docs/cuts3vm.md, which also lists where this departs from
//! the paper).
//!
//! Problem (1) with the balance constraint (2): with labels y_i ∈ {±1} on l rows, u unlabeled
//! rows, n = l + u, and f(x) = w·(x − μ_u) + b,
//!
//! ```text
//!   min_w  ½‖w‖² + (C_l/n) Σ_i max(0, 1 − y_i f(x_i)) + (C_u/n) Σ_j max(0, 1 − |f(x_j)|)
//! ```
//!
//! where centring on the unlabeled mean μ_u and fixing b = 2π − 1 makes the unlabeled rows'
//! mean score 2π − 1 (π: the positive share of the unlabeled rows). The centring is never
//! materialised: w·(x − μ_u) = w·x − w·μ_u, so sparse rows stay O(s) per dot product.
//!
//! - Outer loop (Algorithm 1): the 1-slack form (4) over a working set Ω of constraints c;
//!   each round adds the most violated c at the current w (Theorem 3: c_i = 1 iff
//!   y_i f_i < 1, c_j = 1 iff |f_j| < 1, one pass over the rows) and stops when its violation,
//!   the weighted hinge sum H(w), is at most ξ + ε (eq. 12), ξ the least slack of Ω at w.
//! - Inner loop (Algorithm 2, CCCP): |f_j| linearised at the current signs σ_j gives the QP
//!   (17), solved through its dual (19) over {λ ≥ 0, Σλ ≤ 1}; w = Σ λ_k g_k. It stops when the
//!   objective falls by less than `cccp_tol` of itself (G-A4 of the note).
//! - Not in the paper: C_u is raised to its value in `anneal_stages` stages, C_u/2^k for
//!   k = stages … 1, each cutting-plane solve starting from the previous w (the C* loop of
//!   Joachims' TSVM, deterministic annealing in Sindhwani et al.): CCCP is local, and a full
//!   C_u from the labelled-only w settles in a nearer optimum. On g50c-style data (20 trials
//!   each of 5 instances, docs/cuts3vm.md) 4 stages raised the paired gain over the
//!   labelled-only baseline from 1.9–2.8 to 2.2–3.2 points. A warm start skips the stages.
//! - The first iterate is the labelled-only fit of the same objective (C_u = 0, the same
//!   centring and b), not random (G-A2); [`CutS3vmValidParams::labelled_only`] is that fit.
//!   Being convex, it stops at ε·min(1, H(w₀)) rather than ε: at 1 % labelled rows its whole
//!   hinge sum is about 0.01, and an additive ε = 0.1 would leave it at w = 0.
//! - Not in the paper: at the `max_constraints` cap the constraint inactive (λ = 0) for the
//!   most rounds makes room, which bounds memory at |Ω|·d values. Constraints are not dropped
//!   earlier: measured on ionosphere (C_l 1024), dropping after 10 or 20 idle rounds made the
//!   outer loop cycle (no convergence in 2 000 rounds) where keeping them converged in 575;
//!   caps on rounds, constraints and CCCP steps end the fit with the reason named
//!   ([`StopReason`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::data::rows::dense_dot;
use crate::data::{Dataset, Label, RowRef, Rows};
use crate::learn::kernel::{Kernel, KernelExpansion};
use crate::learn::observe::{FitStep, Observer};
use crate::learn::s3vm::nystrom::{NystromError, NystromMap, NystromSpec};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CutError {
    #[error("cuts3vm: {0}")]
    Param(String),
    #[error("cuts3vm needs {0}")]
    Needs(String),
    #[error("cuts3vm warm start: {0}")]
    WarmStart(String),
    #[error("cuts3vm: the solution is not finite (features too large? scale them)")]
    NonFinite,
    #[error(transparent)]
    Nystrom(#[from] NystromError),
}

/// CutS3VM's settings (unchecked); [`CutS3vmParams::check`] validates them.
#[derive(Debug, Clone, PartialEq)]
pub struct CutS3vmParams {
    /// C_l of objective (1): the weight of the labelled rows' hinge sum divided by n.
    pub cl: f64,
    /// C_u of objective (1): the weight of the unlabeled rows' hat-loss sum divided by n.
    pub cu: f64,
    /// π, the positive share of the unlabeled rows; b = 2π − 1 after centring (eq. 2).
    pub prior: f64,
    /// ε of the outer stop H(w) ≤ ξ + ε (eq. 12).
    pub epsilon: f64,
    /// CCCP stops when the objective falls by less than this share of itself.
    pub cccp_tol: f64,
    pub max_rounds: usize,
    pub max_constraints: usize,
    pub max_cccp_steps: usize,
    /// Stages of C_u below its value solved first (0: straight to C_u).
    pub anneal_stages: u32,
    pub time_limit: Option<Duration>,
    /// A non-linear kernel through an explicit Nyström map; `None`: linear on the rows.
    pub nystrom: Option<NystromSpec>,
    pub observer: Observer,
}

impl CutS3vmParams {
    pub const DEFAULT_EPSILON: f64 = 0.1;
    pub const DEFAULT_CCCP_TOL: f64 = 0.01;
    /// Rounds grow with C (1-slack cutting planes need O(C/ε)): ionosphere at C_l = 1024 took
    /// 312–1 581 over all stages (docs/cuts3vm.md).
    pub const DEFAULT_MAX_ROUNDS: usize = 2000;
    pub const DEFAULT_MAX_CONSTRAINTS: usize = 200;
    /// The paper measured about 2 CCCP steps a round and never 10 (Table 3).
    pub const DEFAULT_MAX_CCCP_STEPS: usize = 20;
    pub const DEFAULT_ANNEAL_STAGES: u32 = 4;

    pub fn new(cl: f64, cu: f64, prior: f64) -> CutS3vmParams {
        CutS3vmParams {
            cl,
            cu,
            prior,
            epsilon: Self::DEFAULT_EPSILON,
            cccp_tol: Self::DEFAULT_CCCP_TOL,
            max_rounds: Self::DEFAULT_MAX_ROUNDS,
            max_constraints: Self::DEFAULT_MAX_CONSTRAINTS,
            max_cccp_steps: Self::DEFAULT_MAX_CCCP_STEPS,
            anneal_stages: Self::DEFAULT_ANNEAL_STAGES,
            time_limit: None,
            nystrom: None,
            observer: Observer::default(),
        }
    }

    pub fn check(self) -> Result<CutS3vmValidParams, CutError> {
        let param = |m: String| CutError::Param(m);
        crate::learn::positive_finite("--cl", self.cl).map_err(param)?;
        if !(self.cu.is_finite() && self.cu >= 0.0) {
            return Err(param(format!(
                "--cu must be finite and >= 0, got {}",
                self.cu
            )));
        }
        if !(self.prior > 0.0 && self.prior < 1.0) {
            return Err(param(format!(
                "--prior (the positive share of the unlabeled rows) must be in (0, 1), got {}",
                self.prior
            )));
        }
        crate::learn::positive_finite("--epsilon", self.epsilon).map_err(param)?;
        if !(self.cccp_tol > 0.0 && self.cccp_tol < 1.0) {
            return Err(param(format!(
                "--cccp-tol must be in (0, 1), got {}",
                self.cccp_tol
            )));
        }
        if self.max_rounds == 0 || self.max_cccp_steps == 0 {
            return Err(param(
                "the round and CCCP-step caps must be at least 1".into(),
            ));
        }
        if self.max_constraints < 2 {
            return Err(param(format!(
                "the constraint cap must be at least 2, got {}",
                self.max_constraints
            )));
        }
        if let Some(spec) = &self.nystrom {
            spec.kernel
                .check()
                .map_err(|e| CutError::Param(e.to_string()))?;
            if spec.rank == 0 {
                return Err(NystromError::ZeroRank.into());
            }
        }
        Ok(CutS3vmValidParams(self))
    }
}

/// Checked [`CutS3vmParams`].
#[derive(Debug, Clone, PartialEq)]
pub struct CutS3vmValidParams(CutS3vmParams);

impl std::ops::Deref for CutS3vmValidParams {
    type Target = CutS3vmParams;
    fn deref(&self) -> &CutS3vmParams {
        &self.0
    }
}

/// Why the outer loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// H(w) ≤ ξ + ε.
    Converged,
    MaxRounds,
    /// Every constraint of the full working set was active, so none could make room.
    MaxConstraints,
    TimeLimit,
    Cancelled,
}

/// What a fit did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutS3vmReport {
    /// Outer rounds (constraints added), the labelled-only first iterate's included.
    pub rounds: u64,
    /// |Ω| at the end.
    pub constraints: usize,
    pub cccp_steps: u64,
    /// CCCP loops ended by the step cap rather than `cccp_tol`.
    pub cccp_capped: u64,
    /// Objective (1) at w: ½‖w‖² + H(w).
    pub objective: f64,
    /// The least slack of the working set at w.
    pub xi: f64,
    /// H(w): the weighted hinge sum, the most violated constraint's violation (Theorem 3).
    pub hinge_sum: f64,
    pub converged: bool,
    pub stop_reason: StopReason,
    /// Rounds of the labelled-only first iterate (0 after a warm start).
    pub first_iterate_rounds: u64,
    /// C_u stages solved before C_u itself (0 after a warm start).
    pub anneal_stages: u32,
    pub train_seconds: f64,
}

/// A trained CutS3VM: score = w·(φ(x) − μ_u) + b, > 0 meaning label +1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutS3vmModel {
    /// The scorer: linear with bias b − w·μ_u, or over the Nyström landmarks.
    pub expansion: KernelExpansion,
    /// w over the features the solver saw (the rows, or φ of them).
    pub w: Vec<f64>,
    pub w_dot_mu: f64,
    pub b: f64,
    pub prior: f64,
    pub cl: f64,
    pub cu: f64,
    pub epsilon: f64,
    pub nystrom: Option<NystromMap>,
    pub report: CutS3vmReport,
}

impl CutS3vmValidParams {
    /// The labelled-only fit of the same objective: C_u = 0 under the same centring and
    /// b = 2π − 1 (CutS3VM's own first iterate, and `eval`'s baseline).
    pub fn labelled_only(&self) -> CutS3vmValidParams {
        CutS3vmValidParams(CutS3vmParams {
            cu: 0.0,
            ..self.0.clone()
        })
    }

    pub fn fit(&self, data: &Dataset, cancel: &AtomicBool) -> Result<CutS3vmModel, CutError> {
        self.fit_with(None, data, cancel)
    }

    /// Trains on `data` (scaled rows; labels 1 / −1 / 0), from `previous`'s w when given
    /// (its Nyström map is kept, so w keeps its meaning), else from the labelled-only fit.
    pub fn fit_with(
        &self,
        previous: Option<&CutS3vmModel>,
        data: &Dataset,
        cancel: &AtomicBool,
    ) -> Result<CutS3vmModel, CutError> {
        let start = Instant::now();
        let (p, n) = (data.count(Label::Positive), data.count(Label::Negative));
        if p == 0 || n == 0 {
            return Err(CutError::Needs(format!(
                "labelled rows of both classes (1 and -1); the data has {p} positive and {n} \
                 negative"
            )));
        }
        let map = match (&self.nystrom, previous) {
            (None, _) => None,
            (
                Some(_),
                Some(CutS3vmModel {
                    nystrom: Some(map), ..
                }),
            ) => Some(map.clone()),
            (Some(spec), _) => Some(NystromMap::fit(spec, &data.rows)?),
        };
        let mapped = map.as_ref().map(|m| m.transform(&data.rows));
        let rows = mapped.as_ref().unwrap_or(&data.rows);
        let deadline = self.time_limit.map(|t| start + t);
        let problem = Problem::new(rows, &data.labels, self.prior, self.cl, self.cu);
        let mut totals = Totals::default();
        let w0 = match previous {
            Some(prev) => {
                if prev.w.len() != rows.n_features() {
                    return Err(CutError::WarmStart(format!(
                        "the previous w has {} features, the data {}",
                        prev.w.len(),
                        rows.n_features()
                    )));
                }
                prev.w.clone()
            }
            None => vec![0.0; rows.n_features()],
        };
        // C_u/n of each solve: on a cold start with unlabeled rows, the labelled-only first
        // iterate (0) and the annealing stages C_u/2^k before C_u itself.
        let cold = previous.is_none() && problem.wu > 0.0;
        let stages = if cold { self.anneal_stages } else { 0 };
        let earlier: Vec<f64> = cold
            .then_some(0.0)
            .into_iter()
            .chain(
                (1..=stages)
                    .rev()
                    .map(|k| problem.wu / f64::from(2u32.pow(k))),
            )
            .collect();
        let mut w = w0;
        for wu in earlier {
            let stage = problem.with_cu(wu);
            let run = Solve::new(&stage, self, deadline, cancel).run(w, totals.rounds_left(self));
            totals.add(&run);
            if wu == 0.0 {
                totals.first_iterate_rounds = run.rounds;
            } else {
                totals.anneal_stages += 1;
            }
            if run.stop_reason != StopReason::Converged {
                return self.model(&problem, map, run, totals, start);
            }
            w = run.w;
        }
        let run = Solve::new(&problem, self, deadline, cancel).run(w, totals.rounds_left(self));
        totals.add(&run);
        self.model(&problem, map, run, totals, start)
    }

    fn model(
        &self,
        problem: &Problem<'_>,
        map: Option<NystromMap>,
        run: Run,
        totals: Totals,
        start: Instant,
    ) -> Result<CutS3vmModel, CutError> {
        // H(w) of objective (1) itself: a fit stopped in a stage (labelled-only or a lower
        // C_u) has its run's sum under that stage's weights.
        let mut f = Vec::new();
        problem.values(&run.w, &mut f);
        let hinge = problem.most_violated(&f).2;
        if !run.w.iter().all(|v| v.is_finite()) || !hinge.is_finite() {
            return Err(CutError::NonFinite);
        }
        let w_dot_mu = dense_dot(&run.w, &problem.mu);
        let bias = problem.b - w_dot_mu;
        let expansion = match &map {
            Some(m) => {
                KernelExpansion::new(m.kernel, m.landmarks.clone(), m.coefficients(&run.w), bias)
            }
            None => KernelExpansion::new(
                Kernel::Linear,
                Rows::dense(
                    ndarray::Array2::from_shape_vec((1, run.w.len()), run.w.clone())
                        .expect("one row of w's length"),
                ),
                vec![1.0],
                bias,
            ),
        };
        let report = CutS3vmReport {
            rounds: totals.rounds,
            constraints: run.constraints,
            cccp_steps: totals.cccp_steps,
            cccp_capped: totals.cccp_capped,
            objective: 0.5 * dense_dot(&run.w, &run.w) + hinge,
            xi: run.xi,
            hinge_sum: hinge,
            converged: run.stop_reason == StopReason::Converged,
            stop_reason: run.stop_reason,
            first_iterate_rounds: totals.first_iterate_rounds,
            anneal_stages: totals.anneal_stages,
            train_seconds: start.elapsed().as_secs_f64(),
        };
        Ok(CutS3vmModel {
            expansion,
            w: run.w,
            w_dot_mu,
            b: problem.b,
            prior: self.prior,
            cl: self.cl,
            cu: self.cu,
            epsilon: self.epsilon,
            nystrom: map,
            report,
        })
    }
}

#[derive(Default)]
struct Totals {
    rounds: u64,
    cccp_steps: u64,
    cccp_capped: u64,
    first_iterate_rounds: u64,
    anneal_stages: u32,
}

impl Totals {
    /// The rounds `max_rounds` leaves after the solves so far: the cap is on the whole fit.
    fn rounds_left(&self, params: &CutS3vmParams) -> u64 {
        (params.max_rounds as u64).saturating_sub(self.rounds)
    }

    fn add(&mut self, run: &Run) {
        self.rounds += run.rounds;
        self.cccp_steps += run.cccp_steps;
        self.cccp_capped += run.cccp_capped;
    }
}

/// The data of objective (1) as the solver sees it.
struct Problem<'a> {
    rows: &'a Rows,
    /// +1 / −1 for a labelled row, 0 for an unlabeled one.
    y: Vec<i8>,
    /// μ_u; zeros without unlabeled rows.
    mu: Vec<f64>,
    mu_sq: f64,
    /// b = 2π − 1.
    b: f64,
    /// C_l/n and C_u/n (0 without unlabeled rows).
    wl: f64,
    wu: f64,
}

impl<'a> Problem<'a> {
    fn new(rows: &'a Rows, labels: &[Label], prior: f64, cl: f64, cu: f64) -> Problem<'a> {
        let y: Vec<i8> = labels.iter().map(|l| l.code()).collect();
        let unlabeled: Vec<f64> = y.iter().map(|&v| f64::from(u8::from(v == 0))).collect();
        let u = unlabeled.iter().sum::<f64>();
        let mut mu = Vec::new();
        rows.transpose_times(&unlabeled, &mut mu);
        if u > 0.0 {
            mu.iter_mut().for_each(|m| *m /= u);
        }
        let n = y.len() as f64;
        Problem {
            rows,
            mu_sq: dense_dot(&mu, &mu),
            mu,
            b: 2.0 * prior - 1.0,
            wl: cl / n,
            wu: if u > 0.0 { cu / n } else { 0.0 },
            y,
        }
    }

    fn with_cu(&self, cu_over_n: f64) -> Problem<'a> {
        Problem {
            rows: self.rows,
            y: self.y.clone(),
            mu: self.mu.clone(),
            mu_sq: self.mu_sq,
            b: self.b,
            wl: self.wl,
            wu: cu_over_n,
        }
    }

    fn n(&self) -> usize {
        self.y.len()
    }

    /// f_k = w·x_k − w·μ_u + b for every row.
    fn values(&self, w: &[f64], out: &mut Vec<f64>) {
        let shift = self.b - dense_dot(w, &self.mu);
        let w = RowRef::Dense(w);
        out.clear();
        out.extend((0..self.n()).map(|k| self.rows.row(k).dot(&w) + shift));
    }

    /// The weight of row k in a constraint and its term: C_l/n·y_k·f_k for a labelled row,
    /// C_u/n·|f_k| for an unlabeled one (0 when C_u = 0).
    fn margin_term(&self, k: usize, f: f64) -> f64 {
        match self.y[k] {
            0 => self.wu * f.abs(),
            y => self.wl * f64::from(y) * f,
        }
    }

    fn weight(&self, k: usize) -> f64 {
        if self.y[k] == 0 {
            self.wu
        } else {
            self.wl
        }
    }

    /// Theorem 3: the most violated constraint at `f` (c_k = 1 iff row k is inside its margin
    /// and weighs something), its a = Σ c_k weight_k, and its violation H(w).
    fn most_violated(&self, f: &[f64]) -> (Vec<u64>, f64, f64) {
        let mut members = vec![0u64; self.n().div_ceil(64)];
        let (mut a, mut hinge) = (0.0, 0.0);
        for (k, &fk) in f.iter().enumerate() {
            let weight = self.weight(k);
            let margin = if self.y[k] == 0 {
                fk.abs()
            } else {
                f64::from(self.y[k]) * fk
            };
            if weight > 0.0 && margin < 1.0 {
                members[k / 64] |= 1 << (k % 64);
                a += weight;
                hinge += weight * (1.0 - margin);
            }
        }
        (members, a, hinge)
    }
}

/// One constraint c_k of the working set, with its linearisation at the current signs σ:
/// g_k = raw − m·μ_u and s_k = m·b (eq. 18), where raw = C_l/n Σ c_i y_i x_i + C_u/n Σ c_j σ_j
/// x_j and m the same sums without x.
struct Cut {
    members: Vec<u64>,
    a: f64,
    raw: Vec<f64>,
    m: f64,
    /// raw·μ_u, so g_k·g_h needs no centred vector.
    raw_mu: f64,
    /// Rounds in a row with λ_k = 0.
    idle: usize,
}

impl Cut {
    fn contains(&self, k: usize) -> bool {
        self.members[k / 64] >> (k % 64) & 1 == 1
    }

    fn members(&self) -> impl Iterator<Item = usize> + '_ {
        self.members.iter().enumerate().flat_map(|(word, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let k = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    word * 64 + k
                })
            })
        })
    }
}

/// How one solve ended.
struct Run {
    w: Vec<f64>,
    rounds: u64,
    cccp_steps: u64,
    cccp_capped: u64,
    constraints: usize,
    xi: f64,
    stop_reason: StopReason,
}

/// The state of Algorithm 1 on one problem.
struct Solve<'p, 'a> {
    problem: &'p Problem<'a>,
    params: &'p CutS3vmParams,
    deadline: Option<Instant>,
    cancel: &'p AtomicBool,
    cuts: Vec<Cut>,
    /// G_kh = g_k·g_h.
    gram: Vec<Vec<f64>>,
    lambda: Vec<f64>,
    /// σ_j of the current linearisation (+1 for f_j = 0, G-A6), per row (unused for labelled).
    sigma: Vec<i8>,
}

impl<'p, 'a> Solve<'p, 'a> {
    fn new(
        problem: &'p Problem<'a>,
        params: &'p CutS3vmParams,
        deadline: Option<Instant>,
        cancel: &'p AtomicBool,
    ) -> Solve<'p, 'a> {
        Solve {
            problem,
            params,
            deadline,
            cancel,
            cuts: Vec::new(),
            gram: Vec::new(),
            lambda: Vec::new(),
            sigma: vec![1; problem.n()],
        }
    }

    /// Algorithm 1 from `w`, adding at most `max_rounds` constraints.
    fn run(mut self, mut w: Vec<f64>, max_rounds: u64) -> Run {
        let problem = self.problem;
        let mut f = Vec::new();
        problem.values(&w, &mut f);
        self.relinearise(&f);
        let (mut rounds, mut cccp_steps, mut cccp_capped) = (0u64, 0u64, 0u64);
        let epsilon = match problem.wu {
            // The labelled-only problem is convex and its whole hinge sum can be below ε (1 %
            // labelled rows at C_l = 1: H(0) ≈ 0.01), which would stop it at w = 0; ε is then
            // relative to the starting violation.
            0.0 => self.params.epsilon * problem.most_violated(&f).2.min(1.0),
            _ => self.params.epsilon,
        };
        let stop_reason = loop {
            let (members, a, hinge) = problem.most_violated(&f);
            let xi = self.slack(&f);
            self.params.observer.report(FitStep::Solver {
                solver: "cuts3vm",
                iterations: rounds,
                gap: hinge - xi,
                tol: epsilon,
            });
            if hinge <= xi + epsilon {
                break StopReason::Converged;
            }
            if self.cancel.load(Ordering::Relaxed) {
                break StopReason::Cancelled;
            }
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                break StopReason::TimeLimit;
            }
            if rounds >= max_rounds {
                break StopReason::MaxRounds;
            }
            if self.cuts.len() >= self.params.max_constraints && !self.drop_longest_idle() {
                break StopReason::MaxConstraints;
            }
            self.add(members, a);
            rounds += 1;
            // CCCP (Algorithm 2) from w, whose slack over Ω now includes the new cut.
            let mut objective = 0.5 * dense_dot(&w, &w) + self.slack(&f);
            let mut steps = 0;
            loop {
                w = self.solve_dual(QP_TOL_SHARE * epsilon);
                problem.values(&w, &mut f);
                steps += 1;
                let next = 0.5 * dense_dot(&w, &w) + self.slack(&f);
                let settled = objective - next < self.params.cccp_tol * objective;
                objective = next;
                // Without unlabeled terms the QP is the problem itself: one solve is exact.
                if settled || problem.wu == 0.0 {
                    break;
                }
                if steps >= self.params.max_cccp_steps {
                    cccp_capped += 1;
                    break;
                }
                self.relinearise(&f);
            }
            cccp_steps += steps as u64;
            self.relinearise(&f);
            self.count_idle();
        };
        Run {
            xi: self.slack(&f),
            w,
            rounds,
            cccp_steps,
            cccp_capped,
            constraints: self.cuts.len(),
            stop_reason,
        }
    }

    /// ξ of the working set at `f`: max(0, max_k a_k − Σ_{c_k} margin terms), with |f_j| (not
    /// its linearisation), so (w, ξ) is feasible for problem (13).
    fn slack(&self, f: &[f64]) -> f64 {
        let terms: Vec<f64> = f
            .iter()
            .enumerate()
            .map(|(k, &fk)| self.problem.margin_term(k, fk))
            .collect();
        self.cuts
            .iter()
            .map(|cut| cut.a - cut.members().map(|k| terms[k]).sum::<f64>())
            .fold(0.0, f64::max)
    }

    /// Sets σ to the signs of `f` and moves every cut's linearisation with the rows whose sign
    /// flipped (note A.4: O(flips·s) per cut), refreshing the Gram rows that changed.
    fn relinearise(&mut self, f: &[f64]) {
        let problem = self.problem;
        let mut flips = Vec::new();
        for (k, &fk) in f.iter().enumerate() {
            let sign = if fk < 0.0 { -1 } else { 1 };
            if problem.y[k] == 0 && sign != self.sigma[k] {
                self.sigma[k] = sign;
                flips.push(k);
            }
        }
        if flips.is_empty() || problem.wu == 0.0 {
            return;
        }
        let mut changed = Vec::new();
        for (index, cut) in self.cuts.iter_mut().enumerate() {
            let inside: Vec<usize> = flips.iter().copied().filter(|&k| cut.contains(k)).collect();
            let moved = !inside.is_empty();
            for k in inside {
                // σ went from −sign to sign: the term moves by 2·sign·C_u/n.
                let step = 2.0 * f64::from(self.sigma[k]) * problem.wu;
                add_row(&mut cut.raw, problem.rows.row(k), step);
                cut.m += step;
            }
            if moved {
                cut.raw_mu = dense_dot(&cut.raw, &problem.mu);
                changed.push(index);
            }
        }
        for index in changed {
            self.refresh_gram_row(index);
        }
    }

    fn add(&mut self, members: Vec<u64>, a: f64) {
        let problem = self.problem;
        let mut raw = vec![0.0; problem.mu.len()];
        let mut m = 0.0;
        let mut cut = Cut {
            members,
            a,
            raw: Vec::new(),
            m: 0.0,
            raw_mu: 0.0,
            idle: 0,
        };
        for k in cut.members() {
            let coefficient = match problem.y[k] {
                0 => problem.wu * f64::from(self.sigma[k]),
                y => problem.wl * f64::from(y),
            };
            add_row(&mut raw, problem.rows.row(k), coefficient);
            m += coefficient;
        }
        cut.raw_mu = dense_dot(&raw, &problem.mu);
        cut.raw = raw;
        cut.m = m;
        self.cuts.push(cut);
        self.lambda.push(0.0);
        self.gram.iter_mut().for_each(|row| row.push(0.0));
        self.gram.push(vec![0.0; self.cuts.len()]);
        self.refresh_gram_row(self.cuts.len() - 1);
    }

    /// G_kh = raw_k·raw_h − m_h·raw_k·μ − m_k·raw_h·μ + m_k·m_h·‖μ‖², for h over all cuts.
    fn refresh_gram_row(&mut self, k: usize) {
        let mu_sq = self.problem.mu_sq;
        for h in 0..self.cuts.len() {
            let (ck, ch) = (&self.cuts[k], &self.cuts[h]);
            let value = dense_dot(&ck.raw, &ch.raw) - ch.m * ck.raw_mu - ck.m * ch.raw_mu
                + ck.m * ch.m * mu_sq;
            self.gram[k][h] = value;
            self.gram[h][k] = value;
        }
    }

    /// w of the QP (17) at the current linearisation, through its dual (19), to `tol`.
    fn solve_dual(&mut self, tol: f64) -> Vec<f64> {
        let b = self.problem.b;
        let p: Vec<f64> = self.cuts.iter().map(|c| c.a - c.m * b).collect();
        solve_capped_simplex_qp(&self.gram, &p, &mut self.lambda, tol);
        let mut w = vec![0.0; self.problem.mu.len()];
        let mut m = 0.0;
        for (cut, &l) in self.cuts.iter().zip(&self.lambda) {
            if l > 0.0 {
                w.iter_mut().zip(&cut.raw).for_each(|(w, r)| *w += l * r);
                m += l * cut.m;
            }
        }
        w.iter_mut()
            .zip(&self.problem.mu)
            .for_each(|(w, mu)| *w -= m * mu);
        w
    }

    /// Counts each constraint's rounds of inactivity.
    fn count_idle(&mut self) {
        for (cut, &l) in self.cuts.iter_mut().zip(&self.lambda) {
            cut.idle = if l > 0.0 { 0 } else { cut.idle + 1 };
        }
    }

    /// Makes room at the constraint cap: drops the longest idle constraint, if any is idle.
    fn drop_longest_idle(&mut self) -> bool {
        let longest = (0..self.cuts.len())
            .filter(|&k| self.cuts[k].idle > 0)
            .max_by_key(|&k| self.cuts[k].idle);
        match longest {
            Some(k) => {
                self.remove(k);
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, k: usize) {
        self.cuts.remove(k);
        self.lambda.remove(k);
        self.gram.remove(k);
        self.gram.iter_mut().for_each(|row| {
            row.remove(k);
        });
    }
}

/// out += c·x.
fn add_row(out: &mut [f64], x: RowRef<'_>, c: f64) {
    match x {
        RowRef::Dense(x) => out.iter_mut().zip(x).for_each(|(o, x)| *o += c * x),
        RowRef::Sparse { indices, values } => {
            for (&i, &v) in indices.iter().zip(values) {
                out[i as usize] += c * v;
            }
        }
    }
}

/// The dual QP's tolerance as a share of ε: the slacks of the working set's constraints at its
/// solution agree to this share of ε, far below what the outer stopping test resolves.
const QP_TOL_SHARE: f64 = 1e-3;

/// The least curvature the pair choice assumes, relative to the diagonal: pairs of identical
/// constraints have none, and the exact step then moves all the mass.
const CURVATURE_FLOOR: f64 = 1e-12;

/// Steps of the dual QP solver before it returns what it has (it converges in far fewer on
/// working sets of a few hundred constraints).
const QP_MAX_STEPS: usize = 1_000_000;

/// min ½λᵀGλ − pᵀλ over {λ ≥ 0, Σλ ≤ 1} (dual (19) as a minimisation), from `lambda`.
///
/// A slack coordinate λ_s = 1 − Σλ (with G's row and p at 0) makes the set a simplex, on
/// which the pairwise step of SMO is exact: move mass from the coordinate with the largest
/// gradient among those with mass to the one with the smallest gradient, by the exact line
/// minimiser clipped to the mass available. At the optimum every coordinate with mass has the
/// smallest gradient. The gradient of coordinate k is −(the slack constraint k needs at
/// w = Σλg), so the spread between the largest gradient with mass and the smallest is in ξ's
/// units, and it bounds the duality gap; the steps stop when it is at most `tol` (or 1e-12 of
/// the problem's scale, below which rounding decides).
pub fn solve_capped_simplex_qp(gram: &[Vec<f64>], p: &[f64], lambda: &mut [f64], tol: f64) {
    let m = p.len();
    let scale = p
        .iter()
        .map(|v| v.abs())
        .chain((0..m).map(|k| gram[k][k].abs()))
        .fold(f64::MIN_POSITIVE, f64::max);
    let tol = tol.max(1e-12 * scale);
    lambda.iter_mut().for_each(|l| *l = l.max(0.0));
    let total: f64 = lambda.iter().sum();
    if total > 1.0 {
        lambda.iter_mut().for_each(|l| *l /= total);
    }
    let mut slack = (1.0 - lambda.iter().sum::<f64>()).max(0.0);
    let mut grad: Vec<f64> = (0..m).map(|k| dense_dot(&gram[k], lambda) - p[k]).collect();
    // Index m is the slack coordinate: gradient 0, no curvature.
    let entry = |k: usize, h: usize| if k == m || h == m { 0.0 } else { gram[k][h] };
    for _ in 0..QP_MAX_STEPS {
        let grad_of = |k: usize, grad: &[f64]| if k == m { 0.0 } else { grad[k] };
        let mass = |k: usize| if k == m { slack } else { lambda[k] };
        let up = (0..=m)
            .filter(|&k| mass(k) > 0.0)
            .max_by(|&a, &b| grad_of(a, &grad).total_cmp(&grad_of(b, &grad)));
        let Some(up) = up else { break };
        let top = grad_of(up, &grad);
        let lowest = (0..=m)
            .map(|k| grad_of(k, &grad))
            .fold(f64::INFINITY, f64::min);
        if top - lowest <= tol {
            break;
        }
        // Second-order choice (Fan, Chen & Lin 2005): the partner with the largest decrease
        // (g_up − g_k)² / κ among those with a smaller gradient.
        let curvature_with = |k: usize| {
            (entry(k, k) + entry(up, up) - 2.0 * entry(k, up))
                .max(CURVATURE_FLOOR * (1.0 + entry(up, up)))
        };
        let down = (0..=m)
            .filter(|&k| grad_of(k, &grad) < top)
            .max_by(|&a, &b| {
                let gain = |k: usize| (top - grad_of(k, &grad)).powi(2) / curvature_with(k);
                gain(a).total_cmp(&gain(b))
            })
            .unwrap_or(up);
        if down == up {
            break;
        }
        let spread = top - grad_of(down, &grad);
        let curvature = entry(down, down) + entry(up, up) - 2.0 * entry(down, up);
        let available = mass(up);
        let t = if curvature > 0.0 {
            (spread / curvature).min(available)
        } else {
            available
        };
        if up == m {
            slack = if t == available { 0.0 } else { slack - t };
        } else {
            lambda[up] = if t == available { 0.0 } else { lambda[up] - t };
        }
        if down == m {
            slack += t;
        } else {
            lambda[down] += t;
        }
        for (k, g) in grad.iter_mut().enumerate() {
            *g += t * (entry(k, down) - entry(k, up));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array2;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Two Gaussian clusters along the first axis, `labelled` rows labelled per class.
    pub(crate) fn clusters(
        n: usize,
        d: usize,
        labelled: usize,
        seed: u64,
    ) -> (Dataset, Vec<Label>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut truth = Vec::new();
        let rows = Array2::from_shape_fn((n, d), |(i, j)| {
            let positive = i % 2 == 0;
            let centre = if j == 0 {
                if positive {
                    1.5
                } else {
                    -1.5
                }
            } else {
                0.0
            };
            let (u1, u2): (f64, f64) = (rng.gen::<f64>().max(1e-12), rng.gen());
            centre + (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        });
        let labels: Vec<Label> = (0..n)
            .map(|i| {
                let label = if i % 2 == 0 {
                    Label::Positive
                } else {
                    Label::Negative
                };
                truth.push(label);
                if i < 2 * labelled {
                    label
                } else {
                    Label::Unlabeled
                }
            })
            .collect();
        let data = Dataset {
            rows: Rows::dense(rows),
            labels,
            ids: (0..n).map(|i| i.to_string()).collect(),
        };
        (data, truth)
    }

    fn fit(data: &Dataset, params: CutS3vmParams) -> CutS3vmModel {
        params
            .check()
            .unwrap()
            .fit(data, &AtomicBool::new(false))
            .unwrap()
    }

    /// Theorem 2 and eq. 12 at a converged stop: ξ ≤ H(w) ≤ ξ + ε, and the reported
    /// objective is ½‖w‖² + H(w) recomputed from the model's own scores.
    #[test]
    fn a_converged_fit_meets_the_stopping_test_and_its_objective() {
        let (data, _) = clusters(300, 4, 10, 3);
        let mut params = CutS3vmParams::new(10.0, 1.0, 0.5);
        params.epsilon = 0.01;
        let model = fit(&data, params);
        let r = &model.report;
        assert!(r.converged, "{r:?}");
        assert!(
            r.xi <= r.hinge_sum + 1e-12 && r.hinge_sum <= r.xi + 0.01,
            "{r:?}"
        );
        let mut scores = vec![0.0; data.len()];
        model.expansion.decision_batch(&data.rows, &mut scores);
        let n = data.len() as f64;
        let hinge: f64 = scores
            .iter()
            .zip(&data.labels)
            .map(|(&f, label)| match label {
                Label::Unlabeled => 1.0 / n * (1.0 - f.abs()).max(0.0),
                l => 10.0 / n * (1.0 - f64::from(l.code()) * f).max(0.0),
            })
            .sum();
        assert!(
            (hinge - r.hinge_sum).abs() < 1e-9,
            "{hinge} vs {}",
            r.hinge_sum
        );
        let objective = 0.5 * dense_dot(&model.w, &model.w) + hinge;
        assert!((objective - r.objective).abs() < 1e-9);
    }

    /// The balance constraint (2): the unlabeled rows' mean score is b = 2π − 1.
    #[test]
    fn the_unlabeled_mean_score_is_two_pi_minus_one() {
        let (data, _) = clusters(200, 3, 5, 4);
        let model = fit(&data, CutS3vmParams::new(1.0, 1.0, 0.3));
        let unlabeled = data.indices_of(Label::Unlabeled);
        let mut scores = vec![0.0; unlabeled.len()];
        model
            .expansion
            .decision_batch(&data.rows.select(&unlabeled), &mut scores);
        let mean = scores.iter().sum::<f64>() / scores.len() as f64;
        assert!((mean - (2.0 * 0.3 - 1.0)).abs() < 1e-9, "mean {mean}");
    }

    /// On two separated clusters the unlabeled rows pull the boundary into the gap: the
    /// transductive accuracy is near 1 with five labels per class.
    #[test]
    fn unlabeled_rows_find_the_low_density_gap() {
        let (data, truth) = clusters(400, 2, 5, 5);
        let model = fit(&data, CutS3vmParams::new(1.0, 1.0, 0.5));
        let unlabeled = data.indices_of(Label::Unlabeled);
        let right = unlabeled
            .iter()
            .filter(|&&i| {
                let f = model.expansion.decision_row(data.rows.row(i));
                (f > 0.0) == (truth[i] == Label::Positive)
            })
            .count();
        let accuracy = right as f64 / unlabeled.len() as f64;
        assert!(accuracy > 0.9, "accuracy {accuracy}");
    }

    #[test]
    fn one_labelled_class_and_bad_settings_are_refused() {
        let (mut data, _) = clusters(50, 2, 3, 6);
        for l in data.labels.iter_mut() {
            if *l == Label::Negative {
                *l = Label::Unlabeled;
            }
        }
        let err = CutS3vmParams::new(1.0, 1.0, 0.5)
            .check()
            .unwrap()
            .fit(&data, &AtomicBool::new(false))
            .unwrap_err();
        assert!(err.to_string().contains("both classes"), "{err}");
        for (cl, cu, prior) in [
            (0.0, 1.0, 0.5),
            (1.0, -1.0, 0.5),
            (1.0, 1.0, 1.0),
            (1.0, 1.0, 0.0),
        ] {
            assert!(CutS3vmParams::new(cl, cu, prior).check().is_err());
        }
    }

    /// The dual QP solver against brute force on random problems: no feasible point scores
    /// lower, and the optimality conditions hold.
    #[test]
    fn the_capped_simplex_qp_meets_its_optimality_conditions() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        for trial in 0..200 {
            let (m, d) = (rng.gen_range(1..8), rng.gen_range(1..5));
            let g: Vec<Vec<f64>> = (0..m)
                .map(|_| (0..d).map(|_| rng.gen::<f64>() * 2.0 - 1.0).collect())
                .collect();
            let gram: Vec<Vec<f64>> = (0..m)
                .map(|a| (0..m).map(|b| dense_dot(&g[a], &g[b])).collect())
                .collect();
            let p: Vec<f64> = (0..m).map(|_| rng.gen::<f64>() * 2.0 - 0.5).collect();
            let mut lambda = vec![0.0; m];
            solve_capped_simplex_qp(&gram, &p, &mut lambda, 0.0);
            let objective = |l: &[f64]| {
                let gl: Vec<f64> = (0..m).map(|k| dense_dot(&gram[k], l)).collect();
                0.5 * dense_dot(l, &gl) - dense_dot(&p, l)
            };
            let best = objective(&lambda);
            assert!(lambda.iter().all(|&l| l >= 0.0));
            assert!(lambda.iter().sum::<f64>() <= 1.0 + 1e-12);
            for _ in 0..200 {
                let mut other: Vec<f64> = (0..m).map(|_| rng.gen::<f64>()).collect();
                let s: f64 = other.iter().sum::<f64>() + rng.gen::<f64>();
                other.iter_mut().for_each(|v| *v /= s);
                assert!(objective(&other) >= best - 1e-9, "trial {trial}");
            }
        }
    }
}
