//! CSDP (Borchers; Debian package `coinor-csdp`, binary `csdp`) as the reference solver for
//! neyman's own SDP engine: an [`SdpProblem`] written as an SDPA sparse file (`.dat-s`), the
//! binary run on it, and its solution file read back into the engine's sign conventions.
//!
//! CSDP maximises tr(F₀X) subject to tr(F_k X) = c_k, X ⪰ 0, with dual min cᵀy s.t.
//! Σ y_k F_k − F₀ = Z ⪰ 0. neyman minimises ⟨C̃, Y⟩, so F₀ = −C̃, and the inequality rows'
//! slacks become a diagonal block: X = blkdiag(Y, diag(s)). CSDP's y is then minus neyman's
//! multipliers, and its Z is neyman's dual slack C̃ − Σ y_k A_k.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use faer::Mat;

use crate::learn::s3vm::sdp::{SdpProblem, Sense};

#[derive(Debug, thiserror::Error)]
pub enum CsdpError {
    #[error(
        "the CSDP solver `{0}` was not found: install the Debian package coinor-csdp \
         (apt-get install coinor-csdp), or name the binary with --csdp"
    )]
    NotFound(String),
    #[error("csdp: {0}")]
    Io(#[from] std::io::Error),
    #[error("csdp exited with code {code} ({meaning}); its last output:\n{tail}")]
    Failed {
        code: i32,
        meaning: &'static str,
        tail: String,
    },
    #[error("csdp's solution file: {0}")]
    Parse(String),
}

/// CSDP's answer in neyman's conventions.
#[derive(Debug, Clone)]
pub struct CsdpSolution {
    /// 0: solved; 3: partial success (full accuracy not reached).
    pub code: i32,
    /// ⟨C̃, Y⟩ at CSDP's Y.
    pub primal_objective: f64,
    /// bᵀy with y = −(CSDP's y).
    pub dual_objective: f64,
    pub primal: Mat<f64>,
    pub duals: Vec<f64>,
    pub dual_slack: Mat<f64>,
    /// Wall-clock seconds of the `csdp` process (reading the file included).
    pub seconds: f64,
    /// CSDP's iteration count, from its log.
    pub iterations: Option<usize>,
}

/// The SDPA sparse text of `problem` (block 1: Y; block 2, when there are inequality rows: the
/// slacks, a diagonal block).
pub fn sdpa_text(problem: &SdpProblem) -> String {
    let n = problem.order();
    let rows = problem.constraints();
    let slacks = rows.iter().filter(|r| r.sense != Sense::Eq).count();
    let mut out = String::new();
    // `write!` into a String cannot fail.
    let _ = writeln!(out, "\"neyman sdp: minimise <C, Y> as CSDP's max <-C, Y>");
    let _ = writeln!(out, "{}", rows.len());
    if slacks > 0 {
        let _ = writeln!(out, "2\n{n} -{slacks}");
    } else {
        let _ = writeln!(out, "1\n{n}");
    }
    let rhs: Vec<String> = rows.iter().map(|r| format!("{:e}", r.rhs)).collect();
    let _ = writeln!(out, "{}", rhs.join(" "));
    let c = problem.objective();
    for j in 0..n {
        for i in 0..=j {
            if c[(i, j)] != 0.0 {
                let _ = writeln!(out, "0 1 {} {} {:e}", i + 1, j + 1, -c[(i, j)]);
            }
        }
    }
    let mut slack = 0;
    for (k, row) in rows.iter().enumerate() {
        for &(i, j, v) in &row.entries {
            // SDPA lists matrix entries; a row coefficient v of Y_ij (i ≠ j) is A_ij = v/2.
            let value = if i == j { v } else { 0.5 * v };
            let _ = writeln!(out, "{} 1 {} {} {:e}", k + 1, i + 1, j + 1, value);
        }
        let g = match row.sense {
            Sense::Eq => continue,
            Sense::Ge => -1.0,
            Sense::Le => 1.0,
        };
        slack += 1;
        let _ = writeln!(out, "{} 2 {slack} {slack} {g:e}", k + 1);
    }
    out
}

/// The contents of CSDP's solution file, in neyman's signs.
#[derive(Debug, Clone)]
pub struct SolutionFile {
    pub duals: Vec<f64>,
    pub dual_slack: Mat<f64>,
    /// Y, the PSD block of CSDP's X (the slacks' block is not kept).
    pub primal: Mat<f64>,
}

/// Reads CSDP's solution file (the y line, then `1 block i j value` entries of Z and
/// `2 block i j value` entries of X) for `problem`.
pub fn read_solution(text: &str, problem: &SdpProblem) -> Result<SolutionFile, CsdpError> {
    let n = problem.order();
    let m = problem.constraints().len();
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let first = lines
        .next()
        .ok_or_else(|| CsdpError::Parse("empty".into()))?;
    let duals = first
        .split_whitespace()
        .map(|t| parse(t).map(|v| -v))
        .collect::<Result<Vec<f64>, _>>()?;
    if duals.len() != m {
        return Err(CsdpError::Parse(format!(
            "{} multipliers for {m} rows",
            duals.len()
        )));
    }
    let mut z = Mat::zeros(n, n);
    let mut y = Mat::zeros(n, n);
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [which, block, i, j, value] = fields[..] else {
            return Err(CsdpError::Parse(format!("bad line {line:?}")));
        };
        if block != "1" {
            continue;
        }
        let index = |t: &str| -> Result<usize, CsdpError> {
            t.parse::<usize>()
                .ok()
                .filter(|&i| (1..=n).contains(&i))
                .map(|i| i - 1)
                .ok_or_else(|| CsdpError::Parse(format!("bad index in {line:?}")))
        };
        let (i, j, value) = (index(i)?, index(j)?, parse(value)?);
        let target = match which {
            "1" => &mut z,
            "2" => &mut y,
            _ => return Err(CsdpError::Parse(format!("bad matrix in {line:?}"))),
        };
        target[(i, j)] = value;
        target[(j, i)] = value;
    }
    Ok(SolutionFile {
        duals,
        dual_slack: z,
        primal: y,
    })
}

fn parse(token: &str) -> Result<f64, CsdpError> {
    token
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| CsdpError::Parse(format!("bad number {token:?}")))
}

/// What CSDP's exit codes mean (its manual, "Return codes").
fn meaning(code: i32) -> &'static str {
    match code {
        0 => "solved",
        1 => "the primal problem is infeasible",
        2 => "the dual problem is infeasible",
        3 => "partial success: full accuracy not reached",
        4 => "maximum iterations reached",
        5 => "stuck at the edge of primal feasibility",
        6 => "stuck at the edge of dual feasibility",
        7 => "lack of progress",
        8 => "X, Z or O was singular",
        9 => "NaN or Inf values detected",
        _ => "an error",
    }
}

/// Runs `binary` (e.g. `csdp`) on `problem` in a fresh temporary directory and reads its
/// answer. Exit codes 0 and 3 return a solution; the others are [`CsdpError::Failed`].
pub fn solve(problem: &SdpProblem, binary: &str) -> Result<CsdpSolution, CsdpError> {
    let dir = TempDir::new()?;
    let input = dir.0.join("problem.dat-s");
    let output = dir.0.join("problem.sol");
    std::fs::write(&input, sdpa_text(problem))?;
    let start = Instant::now();
    let run = Command::new(binary)
        .arg(&input)
        .arg(&output)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CsdpError::NotFound(binary.to_string()),
            _ => CsdpError::Io(e),
        })?;
    let seconds = start.elapsed().as_secs_f64();
    let log = String::from_utf8_lossy(&run.stdout).into_owned();
    let code = run.status.code().unwrap_or(-1);
    if code != 0 && code != 3 {
        let tail: Vec<&str> = log.lines().rev().take(8).collect();
        return Err(CsdpError::Failed {
            code,
            meaning: meaning(code),
            tail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        });
    }
    let text = std::fs::read_to_string(&output)?;
    let SolutionFile {
        duals,
        dual_slack,
        primal,
    } = read_solution(&text, problem)?;
    let dual_objective = problem
        .constraints()
        .iter()
        .zip(&duals)
        .map(|(r, y)| r.rhs * y)
        .sum();
    Ok(CsdpSolution {
        code,
        primal_objective: problem.objective_value(&primal),
        dual_objective,
        primal,
        duals,
        dual_slack,
        seconds,
        iterations: iterations(&log),
    })
}

/// The last "Iter: k" of CSDP's log.
fn iterations(log: &str) -> Option<usize> {
    log.lines()
        .rev()
        .filter_map(|l| l.trim_start().strip_prefix("Iter:"))
        .find_map(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// A directory under the system temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> std::io::Result<TempDir> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "neyman-csdp-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path)?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(Path::new(&self.0));
    }
}
