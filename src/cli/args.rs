//! The command line, as clap types. Flag names are a contract: scripts call them exactly.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::CliError;
pub use crate::config::{AlgorithmName, KernelName, OobRuleName, ScaleName, ThresholdName};
use crate::data::{Format, LabelledRows, ReadOptions};
use crate::learn::metrics::F1Class;
use crate::learn::s3vm::cut::CutS3vmParams;
use crate::learn::s3vm::exact::CertifyParams;
use crate::learn::s3vm::sdp::ipm::SdpParams;
use crate::learn::spec::{
    AlgorithmSpec, CutS3vmSpec, KernelSpec, LearnerSpec, PriorAuto, PriorEnd, RankTau, Reg,
    SolverLimits, TfplSpec, ThresholdSettings, UsmoSpec,
};
use crate::learn::tfpl::TfplSolver;

#[derive(Debug, Parser)]
#[command(
    name = "neyman",
    version,
    about = "Low-false-positive classifiers from streams"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train a model from a data file and write it to --out.
    Train(TrainArgs),
    /// Score every row of a data file with a model.
    Score(ScoreArgs),
    /// Evaluate an algorithm on a labelled data file over repeated PU splits.
    Eval(EvalArgs),
    /// Bound the positive share of a file's unlabeled rows from held-out scores.
    Prior(PriorArgs),
    /// Model file tools.
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Speed measurements with a baseline from the same run.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Run the daemon on the config's source: with source.kind = "replay" it replays
    /// source.path through windows, retrains, the gate and scoring, then keeps serving HTTP
    /// until SIGINT/SIGTERM; with source.kind = "kafka" it consumes the kafka input topics and
    /// produces scores and dead letters to the kafka output topics.
    Run(RunArgs),
    /// Run the daemon on a recorded stream FILE instead of the config's [source] path.
    Replay(ReplayArgs),
    /// Daemon configuration tools.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Record the [kafka] input topics (positive, unlabeled, negative when set) into a
    /// recorded-stream file.
    Record(RecordArgs),
    /// Recorded-stream tools.
    Stream {
        #[command(subcommand)]
        command: StreamCommand,
    },
    /// The exact S3VM (model (8) with balance (11)) by SDP branch-and-bound: the best
    /// labelling of the unlabeled rows and a safe lower bound on its optimum.
    Certify(Box<CertifyArgs>),
    /// Print a shell completion script on stdout (e.g. `neyman completions bash >
    /// /etc/bash_completion.d/neyman`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) on stdout (e.g. `neyman man > neyman.1; man ./neyman.1`).
    Man,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The daemon's TOML configuration (e.g. config/neyman.toml).
    #[arg(long)]
    pub config: PathBuf,
    /// Replay pace (source.kind = "replay" only): max (virtual time, as fast as possible),
    /// realtime, or xN; default: the config's source.speed.
    #[arg(long)]
    pub speed: Option<String>,
    /// Start without resuming the newest stored model.
    #[arg(long)]
    pub no_resume: bool,
    /// Worker threads of the async runtime (HTTP); the event loop and training run on their
    /// own thread, so the output does not depend on it. One is enough for the API (scoring
    /// runs on blocking threads), and memory that one worker frees while another idles stays
    /// resident until the idle one wakes (src/daemon/memory.rs).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// A recorded stream (JSON Lines, optionally .gz).
    pub file: PathBuf,
    /// The daemon's TOML configuration (e.g. config/neyman.toml).
    #[arg(long)]
    pub config: PathBuf,
    /// Replay pace: max, realtime, or xN; default: the config's source.speed.
    #[arg(long)]
    pub speed: Option<String>,
    /// Start without resuming the newest stored model.
    #[arg(long)]
    pub no_resume: bool,
    /// Keep serving HTTP after the end of input, until SIGINT/SIGTERM (without it the replay
    /// exits at the end of its input).
    #[arg(long, visible_alias = "serve")]
    pub keep_serving: bool,
    /// Worker threads of the async runtime (HTTP); the output does not depend on it. One is
    /// enough for the API (scoring runs on blocking threads); see `run --threads`.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// At the end, print the prequential report on stdout: per block of --block unlabeled
    /// outputs, the observed FPR and TPR against the events' truth (meta.label, or a later
    /// event with the same id on the positive or negative channel), the blocks beyond binomial
    /// noise at tau, figures per model and threshold version, and the gate's rejections by
    /// reason. Needs output.scores to be a file.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
    /// Unlabeled outputs per block of --report and --plot.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub block: u64,
    /// Also draw the per-block FPR (against tau and its noise limit) and TPR, with model
    /// swaps and the start of drifted events marked, as an SVG chart.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// With --report: also run the same stream through a baseline and add its prequential
    /// figures as `baseline` (same blocks, same truth). online-lr: an online logistic
    /// regression (SGD, rate 0.01, online standardised features) flagging scores above the
    /// rolling (1 − tau) quantile of the last recalibrate.window negatives' scores — River's
    /// LogisticRegression + RollingQuantile.
    #[arg(long, value_enum, requires = "report")]
    pub baseline: Option<BaselineName>,
    /// Publish FILE into the config's [kafka] topics (channel → topic, keys, headers and
    /// timestamps kept) instead of running the daemon; exits once every message is
    /// acknowledged.
    #[arg(long, conflicts_with_all = ["speed", "no_resume", "keep_serving", "report", "plot"])]
    pub to_kafka: bool,
}

/// Baselines `replay --baseline` runs beside the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BaselineName {
    /// Online logistic regression with a rolling-quantile threshold.
    OnlineLr,
}

#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// The daemon's TOML configuration; its [kafka] section names broker and topics.
    #[arg(long)]
    pub config: PathBuf,
    /// Output: JSON Lines, gzip'd when the name ends in .gz; written atomically at the end.
    #[arg(long)]
    pub out: PathBuf,
    /// Stop after this many messages.
    #[arg(long)]
    pub max_events: Option<u64>,
    /// Stop after this long (e.g. 30s, 10m); without either limit, SIGINT/SIGTERM stops.
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file (with the NEYMAN_* environment applied) and print the effective
    /// configuration: secrets redacted, environment-set keys marked.
    Check {
        /// The TOML file to check (the `NEYMAN_*` variables of the environment apply).
        file: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Turn a labelled data file (labels 1/-1) into a recorded PU stream.
    Make(StreamMakeArgs),
}

#[derive(Debug, Clone, Args)]
pub struct StreamMakeArgs {
    /// Data file with labels 1 and -1: CSV with a header, or LIBSVM/svmlight; optionally .gz.
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
    /// F: the share of positives sent to channel `positive` (the rest go to `unlabeled`).
    #[arg(allow_negative_numbers = true, long)]
    pub pu_labeled_fraction: f64,
    /// G: the share of negatives sent to channel `negative` (the rest go to `unlabeled`).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.0)]
    pub negative_feedback_fraction: f64,
    /// Seed of the channel draws, the order and the arrival gaps.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Mean events per second (exponential gaps).
    #[arg(allow_negative_numbers = true, long)]
    pub rate: f64,
    /// Total events, cycling the rows with fresh ids (default: each row once).
    #[arg(long)]
    pub events: Option<usize>,
    /// Supervised feedback: the events drawn for `positive` (share F) or `negative` (share
    /// G) go to `unlabeled` (they are scored) and a copy with the same id follows on their
    /// labelled channel MS later. --pu-labeled-fraction 1 --negative-feedback-fraction 1 gives
    /// every event its label after it was scored.
    #[arg(allow_negative_numbers = true, long, value_name = "MS")]
    pub feedback_delay_ms: Option<i64>,
    /// Time of the first event, epoch ms (default 2026-01-01T00:00:00Z).
    #[arg(allow_negative_numbers = true, long, default_value_t = crate::stream::make::DEFAULT_START_MS)]
    pub start_ms: i64,
    /// A drift from --at on: `abrupt` (every feature shifts by --drift-size standard
    /// deviations; sparse values scale by 1 + size), `gradual` (the same, ramped in linearly to
    /// the end), `prior` (negatives are skipped with probability size/(1 + size): the odds of a
    /// positive grow by 1 + size), `concept` (the labels of the events whose most evenly
    /// splitting feature is above its median flip with probability size ≤ 1, channels drawn
    /// anew: P(y | x) changes, P(x) does not). Drifted events carry meta.drifted = true.
    #[arg(long, value_enum)]
    pub drift: Option<DriftArg>,
    /// Where the drift starts, as a share of the stream's events, in [0, 1).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.5)]
    pub at: f64,
    /// The drift's strength (see --drift), > 0.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0)]
    pub drift_size: f64,
    /// Keep the rows in file order instead of shuffling each cycle: for files whose rows are a
    /// time series (data/noaa_weather.csv.gz), whose own drift is the point.
    #[arg(long)]
    pub keep_order: bool,
    /// Output: JSON Lines, gzip'd when the name ends in .gz; written atomically.
    #[arg(long)]
    pub out: PathBuf,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
    /// No progress output (a bar on a terminal, else a line every 5 s).
    #[arg(long)]
    pub quiet: bool,
}

/// `stream make --drift`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DriftArg {
    Abrupt,
    Gradual,
    Prior,
    Concept,
}

impl From<DriftArg> for crate::stream::make::DriftKind {
    fn from(d: DriftArg) -> Self {
        match d {
            DriftArg::Abrupt => Self::Abrupt,
            DriftArg::Gradual => Self::Gradual,
            DriftArg::Prior => Self::Prior,
            DriftArg::Concept => Self::Concept,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The Γ_k projection of τ-FPL: divide & conquer vs sort-and-sweep vs one plain pass.
    Projection(BenchProjectionArgs),
    /// Batched in-process scoring vs naive loops (RBF) and a plain dot product (linear).
    Scoring(BenchScoringArgs),
    /// τ-FPL (linear) training time on a data file up-sampled 1×, 2×, 4×, …: is it linear in n?
    Tfpl(BenchTfplArgs),
    /// CutS3VM training time on the first N rows of a shuffled file at each --n: is it near
    /// linear in n?
    Cuts3vm(Box<BenchCuts3vmArgs>),
    /// The exact S3VM's root SDP relaxation (20) on --rows rows of a shuffled file, solved by
    /// neyman's own interior-point engine and by CSDP (Debian coinor-csdp) in the same run.
    Sdp(Box<BenchSdpArgs>),
    /// The daemon's Kafka pipeline vs a raw consume → produce loop on the same broker, plus
    /// consume-only rate and end-to-end latency at a paced rate.
    Kafka(BenchKafkaArgs),
    /// A recorded stream through the whole daemon (windows, retrains, fresh thresholds, drift,
    /// scoring, the output files) vs the online logistic regression baseline on the same
    /// stream, in alternating rounds.
    Replay(BenchReplayArgs),
}

#[derive(Debug, Clone, Args)]
pub struct BenchCuts3vmArgs {
    /// A fully labelled data file (labels 1 / -1).
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
    /// Sizes: each trains on the first N rows of the file shuffled with --seed.
    #[arg(long, value_delimiter = ',', required = true)]
    pub n: Vec<usize>,
    #[command(flatten)]
    pub labelled: LabelledArgs,
    /// Seed of the shuffle, the hidden labels and the Nyström landmarks.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Fits per size; the median time is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    #[command(flatten)]
    pub model: ModelArgs,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

/// The kernels of the exact S3VM (model (8) takes any; these two are the paper's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExactKernelName {
    Linear,
    Rbf,
}

#[derive(Debug, Clone, Args)]
pub struct BenchSdpArgs {
    /// A fully labelled data file (labels 1 / -1).
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
    /// The instance: the first N rows of the file shuffled with --seed.
    #[arg(long)]
    pub rows: usize,
    #[command(flatten)]
    pub labelled: LabelledArgs,
    /// Seed of the shuffle and of the hidden labels.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// C_l: the penalty c_k of the labelled rows in model (8).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0)]
    pub cl: f64,
    #[command(flatten)]
    pub model: ExactModelArgs,
    /// The own engine stops at this relative primal and dual infeasibility and gap.
    #[arg(allow_negative_numbers = true, long, default_value_t = SdpParams::DEFAULT_TOL)]
    pub tol: f64,
    /// The CSDP binary (Debian package coinor-csdp).
    #[arg(long, default_value = "csdp")]
    pub csdp: String,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

/// Model (8)'s kernel and unlabeled penalty, shared by `bench sdp` and `certify`.
#[derive(Debug, Clone, Args)]
pub struct ExactModelArgs {
    /// δ: the unlabeled rows' penalty is C_u = (l/u)·δ·C_l.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0)]
    pub cu_factor: f64,
    /// The kernel of model (8): linear, or RBF with --gamma (default 1/d).
    #[arg(long, value_enum, default_value = "linear")]
    pub kernel: ExactKernelName,
    /// RBF γ (default 1/n_features).
    #[arg(allow_negative_numbers = true, long)]
    pub gamma: Option<f64>,
}

#[derive(Debug, Clone, Args)]
pub struct CertifyArgs {
    /// The data file: labels 1 / -1 / 0 as they are, or fully labelled with
    /// --labeled-fraction / --labeled-count.
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
    #[command(flatten)]
    pub labelled: LabelledArgs,
    /// Seed of the hidden labels.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// C_l: the penalty c_k of the labelled rows in model (8).
    #[arg(allow_negative_numbers = true, long)]
    pub cl: f64,
    #[command(flatten)]
    pub model: ExactModelArgs,
    /// Drop the balance constraint (11).
    #[arg(long)]
    pub no_balance: bool,
    /// Stop when (objective − lower bound)/objective < this; 0: only exact closure.
    #[arg(allow_negative_numbers = true, long, default_value_t = CertifyParams::DEFAULT_GAP)]
    pub gap: f64,
    /// Seconds after which the search stops with the best labelling and bound so far.
    #[arg(allow_negative_numbers = true, long)]
    pub time_limit: Option<f64>,
    /// Nodes (root counted) after which the search stops.
    #[arg(long)]
    pub node_limit: Option<usize>,
    /// Refuse files with more rows (the SDP is n×n: memory n², time about n³ per node).
    #[arg(long, default_value_t = 600)]
    pub max_rows: usize,
    /// Nodes evaluated at once after the root (one thread each), and the threads of the
    /// bound tightening (OBBT) problems. With 1 a run is deterministic; with more, the node
    /// count and, among equally good labellings, the one returned depend on timing (the
    /// certified bound holds either way; docs/exact-s3vm.md §8).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// A neyman model file whose labelling of the unlabeled rows is valued under the same
    /// objective (compare_objective, compare_gap).
    #[arg(long)]
    pub compare_model: Option<PathBuf>,
    /// Seconds between the search's log lines on stderr.
    #[arg(allow_negative_numbers = true, long, default_value_t = 5.0)]
    pub log_every: f64,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

#[derive(Debug, Clone, Args)]
pub struct BenchReplayArgs {
    /// A recorded stream (JSON Lines, optionally .gz), e.g. one made by `neyman stream make`.
    pub file: PathBuf,
    /// The daemon config to replay with; its output files and state directory are replaced by
    /// a temporary directory per round, its HTTP listener by a free loopback port.
    #[arg(long)]
    pub config: PathBuf,
    /// Rounds: each replays the stream through the daemon, then through the baseline. The
    /// reported rates pool all rounds (all events over all seconds).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Block size of both prequential accountings (as `replay --block`).
    #[arg(long, default_value_t = 1000)]
    pub block: u64,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

#[derive(Debug, Clone, Args)]
pub struct BenchKafkaArgs {
    /// A config with a `[kafka]` section (brokers, security, client settings); the bench makes
    /// its own topics and groups (`neyman-bench-<pid>-<ms>.*`).
    #[arg(long)]
    pub config: PathBuf,
    /// Events for the throughput runs.
    #[arg(long, default_value_t = 200_000)]
    pub events: usize,
    /// Throughput rounds: each runs the raw loop, then the pipeline, on the same events (fresh
    /// consumer groups). Alternating them keeps a machine whose speed drifts from favouring
    /// one side; the reported rates pool all rounds.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Features per event (12 gives ~150-byte events).
    #[arg(long, default_value_t = 12)]
    pub dim: usize,
    /// Events for the latency run, produced at `--rate` per second.
    #[arg(long, default_value_t = 20_000)]
    pub paced_events: usize,
    /// Events per second of the paced run.
    #[arg(long, default_value_t = 5000.0)]
    pub rate: f64,
    /// Keep the bench's topics (`neyman-bench-<pid>-<ms>.*`) for inspection instead of
    /// deleting them at the end.
    #[arg(long)]
    pub keep_topics: bool,
    /// Seed of every random draw, so a run can be repeated exactly.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

#[derive(Debug, Clone, Args)]
pub struct BenchScoringArgs {
    /// A model file (`neyman train` or a daemon state file); its support vectors are used.
    #[arg(long)]
    pub model: PathBuf,
    /// Events scored per repeat (iid N(0,1), dense).
    #[arg(long, default_value_t = 20_000)]
    pub events: usize,
    /// Timed rounds; the median is reported.
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Seed of every random draw, so a run can be repeated exactly.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

#[derive(Debug, Clone, Args)]
pub struct BenchTfplArgs {
    /// Data file with labels 1 / -1 (rows labelled 0 are carried along but not trained on).
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
    /// τ used for ranking: k = ⌊τn⌋ + 1.
    #[arg(allow_negative_numbers = true, long)]
    pub tau: f64,
    /// R, the L2 regularisation weight.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1e-2)]
    pub reg: f64,
    /// Up-sampling factors: each trains on the rows repeated that many times.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub factors: Vec<usize>,
    /// Fits per factor; the median time is reported.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Stop when the gain-relative duality gap ≤ tol (default as `train`: 1e-6).
    #[arg(allow_negative_numbers = true, long)]
    pub tol: Option<f64>,
    /// The solver (as `train --solver`).
    #[arg(long, value_enum, default_value = "auto")]
    pub solver: SolverArg,
    /// Feature scaling, as `train --algo tfpl` does it (then ‖x‖ ≤ 1).
    #[arg(long, value_enum, default_value = "standard")]
    pub scale: ScaleName,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

#[derive(Debug, Clone, Args)]
pub struct BenchProjectionArgs {
    /// Negatives (length of β).
    #[arg(long)]
    pub n: usize,
    /// Positives (length of α); default n.
    #[arg(long)]
    pub m: Option<usize>,
    /// k = max(1, ⌊F·n⌋).
    #[arg(long, default_value_t = 0.01)]
    pub k_fraction: f64,
    /// Timed rounds; the median is reported.
    #[arg(long, default_value_t = 7)]
    pub repeats: usize,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Print a model's metadata as JSON.
    Inspect {
        /// A model file (`neyman train`, or one of a daemon's state directory).
        model: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Csv,
    Libsvm,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Csv => Format::Csv,
            FormatArg::Libsvm => Format::Libsvm,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SolverArg {
    Auto,
    Fista,
    Ipm,
}

impl From<SolverArg> for TfplSolver {
    fn from(s: SolverArg) -> TfplSolver {
        match s {
            SolverArg::Auto => TfplSolver::Auto,
            SolverArg::Fista => TfplSolver::Fista,
            SolverArg::Ipm => TfplSolver::Ipm,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum F1ClassArg {
    Positive,
    Majority,
}

impl From<F1ClassArg> for F1Class {
    fn from(c: F1ClassArg) -> F1Class {
        match c {
            F1ClassArg::Positive => F1Class::Positive,
            F1ClassArg::Majority => F1Class::Majority,
        }
    }
}

/// How a data file is read.
#[derive(Debug, Clone, Args)]
pub struct ReadArgs {
    /// File format; inferred from the extension when absent.
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// CSV column holding the label (1 positive, -1 negative, 0 unlabeled).
    #[arg(long, default_value = "label")]
    pub label_column: String,
    /// CSV column holding the sample id (default: the 0-based row index).
    #[arg(long)]
    pub id_column: Option<String>,
}

/// Where the training samples come from and how they are read.
#[derive(Debug, Clone, Args)]
pub struct DataArgs {
    /// Data file: CSV with a header, or LIBSVM/svmlight; optionally .gz.
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
    /// Treat -1 rows as unlabeled instead of keeping them as evaluation negatives.
    #[arg(long)]
    pub negatives_as_unlabeled: bool,
    /// tfpl: let unlabeled (0) rows count as negatives.
    #[arg(long)]
    pub unlabeled_as_negative: bool,
}

/// The model's hyper-parameters.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// π: the class prior of the positives, in (0, 1); usmo needs it. With the pu-umbrella
    /// threshold it defaults, when --prior-min or --prior-max is `auto`, to the estimate from the
    /// training rows (train and eval, per split), and otherwise in `eval --tau` to the middle of
    /// --prior-min/--prior-max.
    /// cuts3vm: the positive share of the unlabeled rows (b = 2π − 1), default the labelled
    /// rows' positive share clamped to [0.05, 0.95]; `eval --algo cuts3vm` also takes `oracle`,
    /// the true share of the rows made unlabeled in each trial.
    #[arg(allow_negative_numbers = true, long, value_parser = parse_prior)]
    pub prior: Option<PriorArg>,
    /// λ: the regularisation weight (eval picks it by cross-validation when absent).
    #[arg(allow_negative_numbers = true, long)]
    pub lambda: Option<f64>,
    /// tfpl: R, the L2 regularisation weight (train: default 1e-2; eval picks it by
    /// cross-validation when absent).
    #[arg(allow_negative_numbers = true, long)]
    pub reg: Option<f64>,
    /// Kernel (default: rbf for usmo, linear for tfpl).
    #[arg(long, value_enum)]
    pub kernel: Option<KernelName>,
    /// RBF/poly γ (default 1/n_features).
    #[arg(allow_negative_numbers = true, long)]
    pub gamma: Option<f64>,
    /// Polynomial degree.
    #[arg(long, default_value_t = 3)]
    pub degree: u32,
    /// Polynomial coef0.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0)]
    pub coef0: f64,
    /// Feature scaling, fitted on the training rows and stored in the model.
    #[arg(long, value_enum, default_value = "standard")]
    pub scale: ScaleName,
    /// usmo: stop when max l − min r ≤ tol (default 1e-3); tfpl: stop when the relative
    /// duality gap ≤ tol (default 1e-6).
    #[arg(allow_negative_numbers = true, long)]
    pub tol: Option<f64>,
    /// tfpl: the solver. auto: interior point for the linear kernel with at most 512 features
    /// (20–35 iterations whatever R), FISTA otherwise; fista: the paper's accelerated projected
    /// gradient on the dual (any kernel, warm starts); ipm: interior point (linear only).
    #[arg(long, value_enum, default_value = "auto")]
    pub solver: SolverArg,
    /// tfpl: the largest kernel Gram matrix (or the interior-point solver's dense copy of the
    /// rows) in MiB; above it a non-linear kernel is refused and auto uses FISTA.
    #[arg(long, default_value_t = 1024)]
    pub max_gram_mb: usize,
    /// Stop after this many pair steps (reported as converged: false).
    #[arg(long)]
    pub max_iter: Option<u64>,
    /// Stop after this long: seconds (600, 0.5) or a number with ms|s|m|h.
    #[arg(long, value_parser = parse_duration)]
    pub time_limit: Option<Duration>,
    /// Kernel-row cache budget in MiB.
    #[arg(long, default_value_t = 256)]
    pub cache_mb: usize,
    /// cuts3vm: C_l of objective (1), the weight of the labelled rows' hinge sum divided by n
    /// (not LIBSVM's C, which multiplies the plain sum).
    #[arg(allow_negative_numbers = true, long)]
    pub cl: Option<f64>,
    /// cuts3vm: C_u of objective (1), the weight of the unlabeled rows' hinge sum divided by n.
    #[arg(allow_negative_numbers = true, long)]
    pub cu: Option<f64>,
    /// cuts3vm: ε of the outer stop H(w) ≤ ξ + ε (paper eq. 12).
    #[arg(allow_negative_numbers = true, long, default_value_t = CutS3vmParams::DEFAULT_EPSILON)]
    pub epsilon: f64,
    /// cuts3vm: the CCCP inner loop stops when the objective falls by less than this share.
    #[arg(allow_negative_numbers = true, long, default_value_t = CutS3vmParams::DEFAULT_CCCP_TOL)]
    pub cccp_tol: f64,
    /// cuts3vm: landmarks of the explicit Nyström map a non-linear --kernel needs (drawn with
    /// --seed).
    #[arg(long)]
    pub nystrom_rank: Option<usize>,
    /// cuts3vm: cap on the outer rounds (reported as stop_reason max_rounds).
    #[arg(long, default_value_t = CutS3vmParams::DEFAULT_MAX_ROUNDS)]
    pub max_rounds: usize,
    /// cuts3vm: stages of C_u/2^k (k = N … 1) solved before C_u, each from the previous
    /// solution (0: straight to C_u from the labelled-only fit).
    #[arg(long, default_value_t = CutS3vmParams::DEFAULT_ANNEAL_STAGES)]
    pub anneal_stages: u32,
}

/// Which rows of a fully labelled file keep their label (the semi-supervised protocols).
#[derive(Debug, Clone, Args)]
pub struct LabelledArgs {
    /// For fully labelled files: per class, this fraction of the rows (at least one) keep
    /// their label and the others become unlabeled (0), drawn with --seed.
    #[arg(long, conflicts_with = "labeled_count")]
    pub labeled_fraction: Option<f64>,
    /// For fully labelled files: this many rows, drawn uniformly with --seed (redrawn until
    /// both classes appear), keep their label; the others become unlabeled (0).
    #[arg(long)]
    pub labeled_count: Option<usize>,
}

impl LabelledArgs {
    /// The protocol the flags ask for, if any.
    pub fn rule(&self) -> Option<LabelledRows> {
        self.labeled_fraction
            .map(LabelledRows::Fraction)
            .or(self.labeled_count.map(LabelledRows::Count))
    }
}

/// The false-positive target and how the threshold is calibrated.
#[derive(Debug, Clone, Args)]
pub struct ThresholdArgs {
    /// τ: the target false-positive rate. tfpl also ranks at τ (unless --rank-tau); with usmo
    /// it adds a calibrated threshold to the model.
    #[arg(allow_negative_numbers = true, long)]
    pub tau: Option<f64>,
    /// tfpl: the τ used for ranking (k = ⌊τn⌋+1), e.g. 2τ for the paper's "2τ-FPL", or auto
    /// (the default with a threshold): the depth among τ, 2τ, 4τ, … 0.5 whose scorer, fitted on
    /// three quarters of the training rows, flags the most of the other quarter's positives at
    /// FPR ≤ τ there; the report's `rank_tau_search` shows each depth tried.
    #[arg(allow_negative_numbers = true, long, value_parser = parse_rank_tau)]
    pub rank_tau: Option<RankTau>,
    /// Threshold method; default umbrella when the data has negatives, else pu-umbrella. none:
    /// no threshold (every row trains; the model only ranks, as without --tau).
    #[arg(long, value_enum)]
    pub threshold: Option<ThresholdName>,
    /// δ: the allowed probability that the true FPR exceeds τ.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.05)]
    pub delta: f64,
    /// Share of the negatives (umbrella) or of positives and unlabeled rows (pu-umbrella) held
    /// out for calibration.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.5)]
    pub calibration_fraction: f64,
    /// pu-umbrella: lower end of the positive share of the unlabeled data, a number in (0, 1)
    /// or `auto`: a lower confidence bound from the held-out calibration rows scored by the
    /// trained scorer, at δ/2 (the certificate then runs at δ/2; together they hold with
    /// probability ≥ 1 − δ). `auto` ASSUMES AN ANCHOR: no negative scores above the top
    /// --prior-anchor share of the scorer's training positives' scores; where negatives score as
    /// high as the best positives it can exceed the true share and void the FPR promise.
    #[arg(allow_negative_numbers = true, long)]
    pub prior_min: Option<PriorEnd>,
    /// pu-umbrella: upper end of the positive share of the unlabeled data, a number in (0, 1)
    /// or `auto` (from the calibration rows as for --prior-min; valid under SCAR alone).
    #[arg(allow_negative_numbers = true, long)]
    pub prior_max: Option<PriorEnd>,
    /// The anchor share an `auto` --prior-min assumes: the top share of the scorer's training
    /// positives' scores that no negative reaches, in (0, 1].
    #[arg(allow_negative_numbers = true, long, default_value_t = PriorAuto::DEFAULT_ANCHOR)]
    pub prior_anchor: f64,
    /// oob: bootstrap rounds.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// oob: the per-round threshold rule.
    #[arg(long, value_enum, default_value = "quantile")]
    pub oob_rule: OobRuleName,
}

#[derive(Debug, Clone, Args)]
pub struct TrainArgs {
    /// The learner: usmo (positive-unlabeled SVM), tfpl (τ-FPL, FPR-constrained ranking) or
    /// cuts3vm (semi-supervised SVM on labelled positives and negatives plus unlabeled rows).
    #[arg(long, value_enum)]
    pub algo: AlgorithmName,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub labelled: LabelledArgs,
    /// Rows A:B to train on (0-based, half-open, over data rows; applied after PU labelling).
    #[arg(long)]
    pub rows: Option<String>,
    /// For fully labelled files: label this fraction of the positives, make the rest unlabeled.
    #[arg(long)]
    pub pu_labeled_fraction: Option<f64>,
    /// Seed of --pu-labeled-fraction, --labeled-fraction, --labeled-count, the calibration
    /// split and the Nyström landmarks.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub threshold: ThresholdArgs,
    /// Start from this model's solution (same kernel; its scaler is reused).
    #[arg(long)]
    pub warm_start: Option<PathBuf>,
    /// Where to write the model.
    #[arg(long)]
    pub out: PathBuf,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
    /// No progress bar, warnings only.
    #[arg(long)]
    pub quiet: bool,
}

/// `neyman prior`: see `cli/prior.rs`.
#[derive(Debug, Clone, Args)]
pub struct PriorArgs {
    /// The scorer whose held-out scores bound the prior: tfpl ranks the positives against the
    /// unlabeled rows at --rank-tau; usmo needs its own --prior guess and --lambda.
    #[arg(long, value_enum, default_value = "tfpl")]
    pub algo: AlgorithmName,
    #[command(flatten)]
    pub data: DataArgs,
    /// For fully labelled files: label this fraction of the positives, make the rest unlabeled
    /// (the report then also gives the true share, prior_true).
    #[arg(long)]
    pub pu_labeled_fraction: Option<f64>,
    /// Seed of --pu-labeled-fraction and of the held-out split.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub model: ModelArgs,
    /// tfpl: the τ it ranks at (k = ⌊τn⌋+1 of the unlabeled rows).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.5)]
    pub rank_tau: f64,
    /// δ: the probability that [prior_lower_bound, prior_upper_bound] misses π (half per end).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.05)]
    pub delta: f64,
    /// The lower end's assumption: no negative scores above the top ANCHOR share of the
    /// training positives' scores. Where negatives reach that high, the lower end can exceed π
    /// (the upper end needs no assumption).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.2)]
    pub anchor: f64,
    /// Share of the positives and of the unlabeled rows held out to bound π; the rest train
    /// the scorer.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.5)]
    pub calibration_fraction: f64,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

#[derive(Debug, Clone, Args)]
pub struct ScoreArgs {
    /// A model file (`neyman train`, or one of a daemon's state directory).
    #[arg(long)]
    pub model: PathBuf,
    /// Data file; its label column is optional.
    #[arg(long)]
    pub data: PathBuf,
    #[command(flatten)]
    pub read: ReadArgs,
    /// Output file: JSON Lines when it ends in .jsonl or .json, CSV otherwise; stdout (CSV)
    /// when absent.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// With labels in the file, the accuracy, FPR and TPR at the model's threshold go to
    /// stderr as one line (like svm-predict's); `--report json` makes it one JSON object.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtocolArg {
    /// Stratified splits: train on `1 − --test-fraction` of the rows, test on the rest.
    Holdout,
    /// Train on every row (PU-labelled), test on the rows left unlabeled; same as
    /// `--transductive` (usmo without `--tau` only).
    Transductive,
}

/// Baselines `eval --tau` runs on the same splits as `--algo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareArg {
    /// Linear SVM whose threshold is shifted on its training data to training FPR ≤ τ.
    BsSvm,
    /// Cost-sensitive linear SVM thresholded out-of-bootstrap (`--rounds`, `--oob-rule`).
    CsSvmOob,
}

/// eval's false-positive targets and threshold calibration (`--tau` takes a list here).
#[derive(Debug, Clone, Args)]
pub struct EvalThresholdArgs {
    /// τ: the target false-positive rates, comma-separated (e.g. 0.05,0.1). With it, eval runs
    /// the Neyman–Pearson protocol of the τ-FPL paper (Table 3) for every τ.
    #[arg(allow_negative_numbers = true, long, value_delimiter = ',')]
    pub tau: Vec<f64>,
    /// tfpl: the τ used for ranking, one per --tau (e.g. 2τ for the paper's "2τ-FPL"), or auto
    /// (the default): chosen on each split's training rows as in `train`; the report's
    /// `rank_tau_per_split` gives the depths used.
    #[arg(allow_negative_numbers = true, long, value_delimiter = ',', value_parser = parse_rank_tau)]
    pub rank_tau: Vec<RankTau>,
    /// Threshold method; default oob for tfpl, pu-umbrella for usmo and for tfpl with
    /// --pu-labeled-fraction.
    #[arg(long, value_enum)]
    pub threshold: Option<ThresholdName>,
    /// δ: the allowed probability that the true FPR exceeds τ (umbrella methods).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.05)]
    pub delta: f64,
    /// Share of the training negatives (umbrella) or of the training positives and unlabeled
    /// rows (pu-umbrella) held out for calibration.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.5)]
    pub calibration_fraction: f64,
    /// pu-umbrella: lower end of the positive share of the unlabeled data, a number in (0, 1)
    /// or `auto`: a lower confidence bound from the held-out calibration rows scored by the
    /// trained scorer, at δ/2 (the certificate then runs at δ/2; together they hold with
    /// probability ≥ 1 − δ). `auto` ASSUMES AN ANCHOR: no negative scores above the top
    /// --prior-anchor share of the scorer's training positives' scores; where negatives score as
    /// high as the best positives it can exceed the true share and void the FPR promise.
    #[arg(allow_negative_numbers = true, long)]
    pub prior_min: Option<PriorEnd>,
    /// pu-umbrella: upper end of the positive share of the unlabeled data, a number in (0, 1)
    /// or `auto` (from the calibration rows as for --prior-min; valid under SCAR alone).
    #[arg(allow_negative_numbers = true, long)]
    pub prior_max: Option<PriorEnd>,
    /// The anchor share an `auto` --prior-min assumes: the top share of the scorer's training
    /// positives' scores that no negative reaches, in (0, 1].
    #[arg(allow_negative_numbers = true, long, default_value_t = PriorAuto::DEFAULT_ANCHOR)]
    pub prior_anchor: f64,
    /// oob: bootstrap rounds.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// oob: the per-round threshold rule (default npscore, the paper's experiments).
    #[arg(long, value_enum)]
    pub oob_rule: Option<OobRuleName>,
}

#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    /// The learner: usmo (positive-unlabeled SVM), tfpl (τ-FPL, FPR-constrained ranking) or
    /// cuts3vm (semi-supervised SVM on labelled positives and negatives plus unlabeled rows).
    #[arg(long, value_enum)]
    pub algo: AlgorithmName,
    #[command(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    pub labelled: LabelledArgs,
    /// Fraction of the training positives that keep their label (required for usmo; with tfpl
    /// the rest are trained on as negatives together with the true negatives).
    #[arg(long)]
    pub pu_labeled_fraction: Option<f64>,
    /// Random splits; each metric is reported as its mean and standard deviation over them.
    #[arg(long, default_value_t = 10)]
    pub repeats: usize,
    /// Seed of every random draw, so a run can be repeated exactly.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Share of rows held out for testing (stratified), unless --transductive.
    #[arg(long, default_value_t = 0.333)]
    pub test_fraction: f64,
    /// Train on every row and evaluate on the unlabeled rows (the USMO paper's protocol).
    #[arg(long)]
    pub transductive: bool,
    /// The split protocol (default holdout; transductive is the same as --transductive).
    #[arg(long, value_enum)]
    pub protocol: Option<ProtocolArg>,
    /// Cross-validation folds choosing R (tfpl) and C (baselines); default 5. (usmo always
    /// picks λ by 3-fold CV.)
    #[arg(long)]
    pub cv: Option<usize>,
    /// Baselines to run on the same splits (with --tau), comma-separated.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub compare: Vec<CompareArg>,
    /// Write an SVG plot (ROC with the τ line and operating points) here (with --tau).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Which class's F1 to report: the positive class, or the majority class of the
    /// evaluation labels (ties: negative), as the USMO paper does.
    #[arg(long, value_enum, default_value = "positive")]
    pub f1_class: F1ClassArg,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub threshold: EvalThresholdArgs,
    /// `json`: the result as one JSON object on stdout instead of the text summary.
    #[arg(long, value_enum)]
    pub report: Option<ReportFormat>,
    /// Threads running the repeats in parallel (default: every core); the results do not
    /// depend on it.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// No progress output, warnings only.
    #[arg(long)]
    pub quiet: bool,
}

impl ModelArgs {
    /// The kernel flags (the kind's default is the algorithm's: rbf for usmo, linear for tfpl).
    pub fn kernel_spec(&self) -> KernelSpec {
        KernelSpec {
            kind: self.kernel.map(Into::into),
            gamma: self.gamma,
            degree: self.degree,
            coef0: self.coef0,
        }
    }

    pub fn solver_limits(&self) -> SolverLimits {
        SolverLimits {
            tol: self.tol,
            max_iter: self.max_iter,
            time_limit: self.time_limit,
            observer: Default::default(),
        }
    }

    /// USMO's settings; π stays `None` without `--prior`, for the caller to fill in or refuse
    /// ([`ModelArgs::required_prior`]).
    pub fn usmo_spec(&self, lambda: f64) -> UsmoSpec {
        UsmoSpec {
            prior: self.prior_value(),
            lambda,
            cache_bytes: self.cache_mb.saturating_mul(1 << 20),
        }
    }

    /// `--prior` as a number (`None` when absent or `oracle`).
    pub fn prior_value(&self) -> Option<f64> {
        match self.prior {
            Some(PriorArg::Value(v)) => Some(v),
            Some(PriorArg::Oracle) | None => None,
        }
    }

    /// Refuses `--prior oracle` in `command`, which has no hidden labels to take it from.
    pub fn refuse_oracle(&self, command: &str) -> Result<(), CliError> {
        if self.prior == Some(PriorArg::Oracle) {
            return Err(CliError::Usage(format!(
                "--prior oracle is for `eval --algo cuts3vm` (the true share of the rows made \
                 unlabeled); {command} needs a number"
            )));
        }
        Ok(())
    }

    /// `--prior`, where nothing estimates it.
    pub fn required_prior(&self) -> Result<f64, CliError> {
        self.prior_value()
            .ok_or_else(|| CliError::Usage("--algo usmo needs --prior".into()))
    }

    /// CutS3VM's settings; a missing `--cl` or `--cu` is NaN here, which the solver's check
    /// refuses naming the flag (`train` and `eval` ask for them first).
    pub fn cuts3vm_spec(&self) -> CutS3vmSpec {
        CutS3vmSpec {
            prior: self.prior_value(),
            epsilon: self.epsilon,
            cccp_tol: self.cccp_tol,
            max_rounds: self.max_rounds,
            anneal_stages: self.anneal_stages,
            nystrom_rank: self.nystrom_rank,
            ..CutS3vmSpec::new(self.cl.unwrap_or(f64::NAN), self.cu.unwrap_or(f64::NAN))
        }
    }

    /// `--cl` and `--cu`, which cuts3vm requires.
    pub fn require_cl_cu(&self) -> Result<(), CliError> {
        if self.cl.is_none() || self.cu.is_none() {
            return Err(CliError::Usage(
                "--algo cuts3vm needs --cl and --cu (the C_l and C_u of objective (1))".into(),
            ));
        }
        Ok(())
    }

    pub fn tfpl_spec(&self, reg: f64) -> TfplSpec {
        TfplSpec {
            rank_tau: RankTau::Auto,
            reg: Reg::Value(reg),
            solver: self.solver.into(),
            max_gram_bytes: self.max_gram_mb.saturating_mul(1 << 20),
        }
    }

    /// The one place the model flags map into a [`LearnerSpec`]: `regularisation` is λ (usmo)
    /// or R (tfpl), given by the caller (train: the flag or its default; eval: the flag or a
    /// cross-validated choice). No threshold; train adds it from `--tau`. USMO's π is `--prior`
    /// or `None` (see [`ModelArgs::usmo_spec`]).
    pub fn learner_spec(&self, algo: AlgorithmName, regularisation: f64) -> LearnerSpec {
        let algorithm = match algo {
            AlgorithmName::Usmo => AlgorithmSpec::Usmo(self.usmo_spec(regularisation)),
            AlgorithmName::Tfpl => AlgorithmSpec::Tfpl(self.tfpl_spec(regularisation)),
            AlgorithmName::Cuts3vm => AlgorithmSpec::CutS3vm(self.cuts3vm_spec()),
        };
        LearnerSpec {
            algorithm,
            kernel: self.kernel_spec(),
            scale: self.scale.into(),
            limits: self.solver_limits(),
            threshold: None,
            seed: 0,
        }
    }
}

/// R when `--reg` is absent (train; eval chooses R by cross-validation instead).
pub const DEFAULT_REG: f64 = 1e-2;

impl TrainArgs {
    /// The learner `train` fits: the model flags with `--lambda` (required for usmo) or
    /// `--reg` (default [`DEFAULT_REG`]); the threshold flags, if `--tau` (tfpl needs it: it
    /// ranks at `--rank-tau`, else at `--tau`); `--seed`.
    pub fn learner_spec(&self) -> Result<LearnerSpec, CliError> {
        self.model.refuse_oracle("train")?;
        let regularisation = match self.algo {
            AlgorithmName::Usmo => self
                .model
                .lambda
                .ok_or_else(|| CliError::Usage("--algo usmo needs --lambda".into()))?,
            AlgorithmName::Tfpl => {
                if self.threshold.tau.is_none() {
                    return Err(CliError::Usage("--algo tfpl needs --tau".into()));
                }
                self.model.reg.unwrap_or(DEFAULT_REG)
            }
            AlgorithmName::Cuts3vm => {
                self.model.require_cl_cu()?;
                f64::NAN
            }
        };
        let threshold = self.threshold.settings();
        let prior_from_data = threshold.as_ref().is_some_and(|t| t.prior_auto.is_some());
        // With an `auto` end, USMO's π defaults to the training rows' estimate
        // (crate::learn::prior::resolve_training_prior).
        if self.algo == AlgorithmName::Usmo && !prior_from_data {
            self.model.required_prior()?;
        }
        let mut spec = self.model.learner_spec(self.algo, regularisation);
        if let AlgorithmSpec::Tfpl(s) = &mut spec.algorithm {
            // Without a threshold (`--threshold none`) --tau is the rank τ.
            s.rank_tau = match (self.threshold.rank_tau, &threshold) {
                (Some(given), _) => given,
                (None, Some(_)) => RankTau::Auto,
                (None, None) => self.threshold.tau.map_or(RankTau::Auto, RankTau::Value),
            };
        }
        spec.threshold = threshold;
        spec.seed = self.seed;
        Ok(spec)
    }
}

impl ThresholdArgs {
    /// The threshold flags as settings, if `--tau` was given and `--threshold` is not `none`.
    pub fn settings(&self) -> Option<ThresholdSettings> {
        if self.threshold == Some(ThresholdName::None) {
            return None;
        }
        Some(ThresholdSettings {
            method: self.threshold.and_then(ThresholdName::method),
            tau: self.tau?,
            delta: self.delta,
            calibration_fraction: self.calibration_fraction,
            prior_min: self.prior_min.and_then(PriorEnd::value),
            prior_max: self.prior_max.and_then(PriorEnd::value),
            prior_auto: PriorAuto::of(self.prior_min, self.prior_max, self.prior_anchor),
            rounds: self.rounds,
            oob_rule: self.oob_rule.into(),
        })
    }
}

impl ReadArgs {
    /// The reader options; `label_optional` lets a CSV without the label column read as
    /// unlabeled rows.
    pub fn options(&self, label_optional: bool) -> ReadOptions {
        ReadOptions {
            format: self.format.map(Into::into),
            label_column: self.label_column.clone(),
            label_optional,
            id_column: self.id_column.clone(),
        }
    }
}

pub use crate::config::parse_duration;

/// `--prior`: a number, or `oracle` (see [`ModelArgs::prior`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriorArg {
    Value(f64),
    Oracle,
}

/// `--prior`: `oracle` or a number (its range is checked where it is used).
fn parse_prior(text: &str) -> Result<PriorArg, String> {
    if text == "oracle" {
        return Ok(PriorArg::Oracle);
    }
    text.parse::<f64>()
        .map(PriorArg::Value)
        .map_err(|_| format!("expected a number or \"oracle\", got \"{text}\""))
}

/// `--rank-tau`: `auto` or a number (its range is checked where it is used).
fn parse_rank_tau(text: &str) -> Result<RankTau, String> {
    if text == "auto" {
        return Ok(RankTau::Auto);
    }
    text.parse::<f64>()
        .map(RankTau::Value)
        .map_err(|_| format!("expected a number or \"auto\", got \"{text}\""))
}

#[cfg(test)]
mod help_tests {
    use super::*;
    use clap::CommandFactory;

    /// Every (sub)command and every flag or positional has help text (issue 22), so `--help`
    /// documents the whole contract.
    #[test]
    fn every_flag_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(format!("{path} {} (no about)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "neyman", &mut missing);
        assert!(
            missing.is_empty(),
            "{} without help:\n{}",
            missing.len(),
            missing.join("\n")
        );
    }
}
