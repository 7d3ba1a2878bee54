//! ROC charts as SVG (plotters' SVG backend, no font files: text is emitted as `<text>` and
//! laid out by the viewer, so the build needs no system font libraries).
//!
//! One chart shows every curve on FPR × TPR, a vertical line at the target τ, each curve's
//! operating point (the threshold it picked) and, in bands below the TPR = 0 line, each curve's
//! spread of per-split test FPRs: a horizontal bar from the smallest to the largest with a tick
//! per split, so a reader sees at once how often the test FPR crossed τ.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::CliError;

/// One chart.
#[derive(Debug, Clone, PartialEq)]
pub struct RocPlot {
    pub title: String,
    /// The target false-positive rate, drawn as a vertical line.
    pub tau: f64,
    pub curves: Vec<RocCurve>,
}

/// One method's ROC with its markers.
#[derive(Debug, Clone, PartialEq)]
pub struct RocCurve {
    pub label: String,
    /// (FPR, TPR) vertices in drawing order, e.g. from [`roc_points`].
    pub points: Vec<(f64, f64)>,
    /// (FPR, TPR) at the chosen threshold.
    pub operating_point: Option<(f64, f64)>,
    /// Test FPR of every split, drawn as a strip below the x axis.
    pub split_fprs: Vec<f64>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("cannot plot: {0}")]
    Invalid(String),
    #[error("drawing the chart failed: {0}")]
    Draw(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Bad values are the caller's data (exit 1), as are write failures.
impl From<PlotError> for CliError {
    fn from(e: PlotError) -> CliError {
        match e {
            PlotError::Io { path, source } => CliError::File {
                path,
                message: source.to_string(),
            },
            other => CliError::Training(other.to_string()),
        }
    }
}

/// The exact empirical ROC of `scores` (higher = more positive) against `positive`: the
/// vertices (FPR, TPR) from (0, 0) to (1, 1) as the threshold sweeps down. Rows with equal
/// scores are crossed together, so a tie between positives and negatives is one diagonal
/// segment (the expected ROC under random tie-breaking), never an optimistic staircase.
/// Scores are ordered by `f64::total_cmp` (a NaN counts as above every number). When one class
/// is empty its rate is undefined and the result is empty; `positive` and `scores` are paired
/// up to the shorter length.
pub fn roc_points(scores: &[f64], positive: &[bool]) -> Vec<(f64, f64)> {
    let len = scores.len().min(positive.len());
    let n_pos = positive[..len].iter().filter(|&&p| p).count();
    let n_neg = len - n_pos;
    if n_pos == 0 || n_neg == 0 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..len).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut points = vec![(0.0, 0.0)];
    let (mut tp, mut fp) = (0usize, 0usize);
    let mut i = 0;
    while i < len {
        let score = scores[order[i]];
        while i < len && scores[order[i]].total_cmp(&score).is_eq() {
            if positive[order[i]] {
                tp += 1;
            } else {
                fp += 1;
            }
            i += 1;
        }
        points.push((fp as f64 / n_neg as f64, tp as f64 / n_pos as f64));
    }
    points
}

/// Writes `plot` as an SVG file at `path`.
pub fn write_roc_svg(path: &Path, plot: &RocPlot) -> Result<(), PlotError> {
    let svg = roc_svg(plot)?;
    std::fs::write(path, svg).map_err(|source| PlotError::Io {
        path: path.display().to_string(),
        source,
    })
}

const WIDTH: u32 = 800;
const HEIGHT: u32 = 600;
/// Height (in TPR units) of one curve's split-FPR band below the axis.
const BAND: f64 = 0.05;

/// Tableau 10: distinct on screen and in grey-scale print.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The right end of the FPR axis: the region a Neyman–Pearson reader looks at, i.e. at least
/// [0, max(0.2, 4τ)], widened to show every marked FPR, at most [0, 1].
fn fpr_window(plot: &RocPlot) -> f64 {
    let marked = plot
        .curves
        .iter()
        .flat_map(|c| {
            c.split_fprs
                .iter()
                .copied()
                .chain(c.operating_point.map(|p| p.0))
        })
        .fold(plot.tau, f64::max);
    (4.0 * plot.tau).max(0.2).max(1.1 * marked).min(1.0)
}

/// The part of a monotone curve with FPR ≤ `x_max`, cut at `x_max` by linear interpolation.
fn clip(points: &[(f64, f64)], x_max: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len());
    for (k, &(x, y)) in points.iter().enumerate() {
        if x <= x_max {
            out.push((x, y));
            continue;
        }
        if let Some(&(px, py)) = k.checked_sub(1).map(|j| &points[j]) {
            if px < x_max {
                out.push((x_max, py + (y - py) * (x_max - px) / (x - px)));
            }
        }
        break;
    }
    out
}

fn check(plot: &RocPlot) -> Result<(), PlotError> {
    let rate = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
    if !rate(plot.tau) {
        return Err(PlotError::Invalid(format!(
            "tau must be in [0, 1], got {}",
            plot.tau
        )));
    }
    for c in &plot.curves {
        let points = c.points.iter().chain(c.operating_point.iter());
        if let Some(p) = points.into_iter().find(|(x, y)| !rate(*x) || !rate(*y)) {
            return Err(PlotError::Invalid(format!(
                "curve {:?} has the point {p:?} outside [0, 1]²",
                c.label
            )));
        }
        if let Some(f) = c.split_fprs.iter().find(|f| !rate(**f)) {
            return Err(PlotError::Invalid(format!(
                "curve {:?} has the split FPR {f} outside [0, 1]",
                c.label
            )));
        }
    }
    Ok(())
}

/// The chart as an SVG document.
pub fn roc_svg(plot: &RocPlot) -> Result<String, PlotError> {
    check(plot)?;
    let mut svg = String::new();
    draw(plot, &mut svg).map_err(|e| PlotError::Draw(e.to_string()))?;
    Ok(svg)
}

fn draw(plot: &RocPlot, svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let x_max = fpr_window(plot);
    let strips = plot
        .curves
        .iter()
        .filter(|c| !c.split_fprs.is_empty())
        .count();
    let y_min = -BAND * strips as f64;
    {
        let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(&plot.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(55)
            .build_cartesian_2d(0.0..x_max, y_min..1.0)?;
        chart
            .configure_mesh()
            .x_desc("false-positive rate")
            .y_desc("true-positive rate")
            // The bands below 0 hold the split strips, not TPR values.
            .y_label_formatter(&|v| {
                if *v < 0.0 {
                    String::new()
                } else {
                    format!("{v:.1}")
                }
            })
            .x_label_formatter(&|v| format!("{v:.2}"))
            .light_line_style(TRANSPARENT)
            .draw()?;
        if y_min < 0.0 {
            chart.draw_series(LineSeries::new([(0.0, 0.0), (x_max, 0.0)], BLACK))?;
        }
        chart.draw_series(DashedLineSeries::new(
            [(plot.tau, y_min), (plot.tau, 1.0)],
            6,
            4,
            BLACK.stroke_width(1),
        ))?;
        let mut band = 0;
        for (i, c) in plot.curves.iter().enumerate() {
            let col = color(i);
            chart.draw_series(LineSeries::new(clip(&c.points, x_max), col.stroke_width(2)))?;
            if let Some((x, y)) = c.operating_point.filter(|p| p.0 <= x_max) {
                chart.draw_series([Circle::new((x, y), 6, col.filled())])?;
                chart.draw_series([Circle::new((x, y), 6, BLACK.stroke_width(1))])?;
            }
            if c.split_fprs.is_empty() {
                continue;
            }
            band += 1;
            let mid = -BAND * (band as f64 - 0.5);
            let (lo, hi) = c
                .split_fprs
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &f| {
                    (lo.min(f), hi.max(f))
                });
            chart.draw_series(LineSeries::new([(lo, mid), (hi, mid)], col.stroke_width(2)))?;
            for &f in &c.split_fprs {
                chart.draw_series(LineSeries::new(
                    [(f, mid - 0.3 * BAND), (f, mid + 0.3 * BAND)],
                    col.stroke_width(1),
                ))?;
            }
        }
        // The legend, drawn by hand in data coordinates so it sits in the lower right just
        // above TPR = 0 (plotters' own legend box would cover the split strips).
        let rows = plot.curves.len() + 1;
        let (left, right) = (0.6 * x_max, 0.98 * x_max);
        let row = 0.055;
        let (bottom, top) = (0.03, 0.03 + row * rows as f64 + 0.02);
        chart.draw_series([
            Rectangle::new([(left, bottom), (right, top)], WHITE.mix(0.9).filled()),
            Rectangle::new([(left, bottom), (right, top)], BLACK.stroke_width(1)),
        ])?;
        let span = right - left;
        let font = ("sans-serif", 13)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        let entry = |k: usize| top - 0.01 - row * (k as f64 + 0.5);
        let y = entry(0);
        let mid = left + 0.07 * span;
        chart.draw_series(LineSeries::new(
            [(mid, y - 0.4 * row), (mid, y + 0.4 * row)],
            BLACK.stroke_width(1),
        ))?;
        chart.draw_series([Text::new(
            format!("τ = {}", plot.tau),
            (left + 0.15 * span, y),
            font.clone(),
        )])?;
        for (i, c) in plot.curves.iter().enumerate() {
            let y = entry(i + 1);
            chart.draw_series(LineSeries::new(
                [(left + 0.03 * span, y), (left + 0.11 * span, y)],
                color(i).stroke_width(2),
            ))?;
            chart.draw_series([Text::new(
                c.label.clone(),
                (left + 0.15 * span, y),
                font.clone(),
            )])?;
        }
        root.present()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roc_points_cross_ties_diagonally() {
        // Sorted: 0.9 (+) | 0.8 (+, −) | 0.7 (−) | 0.5 (+, −) with 3 positives, 3 negatives.
        let scores = [0.5, 0.8, 0.9, 0.7, 0.8, 0.5];
        let positive = [true, false, true, false, true, false];
        let third = 1.0 / 3.0;
        let two = 2.0 / 3.0;
        assert_eq!(
            roc_points(&scores, &positive),
            vec![
                (0.0, 0.0),
                (0.0, third),
                (third, two),
                (two, two),
                (1.0, 1.0)
            ]
        );
        // All tied: one diagonal.
        assert_eq!(
            roc_points(&[1.0; 4], &[true, false, false, true]),
            vec![(0.0, 0.0), (1.0, 1.0)]
        );
        assert!(roc_points(&[1.0, 2.0], &[true, true]).is_empty());
    }

    #[test]
    fn clipping_cuts_at_the_window() {
        let pts = [(0.0, 0.0), (0.1, 0.5), (0.3, 0.7), (1.0, 1.0)];
        assert_eq!(clip(&pts, 0.2), vec![(0.0, 0.0), (0.1, 0.5), (0.2, 0.6)]);
        assert_eq!(clip(&pts, 1.0), pts.to_vec());
        assert_eq!(clip(&pts, 0.1), vec![(0.0, 0.0), (0.1, 0.5)]);
    }

    /// (stroke colour, vertex count) of every `<polyline>`.
    fn polylines(svg: &str) -> Vec<(String, usize)> {
        let attr = |el: &str, name: &str| {
            let start = el.find(&format!("{name}=\"")).expect("attribute") + name.len() + 2;
            let end = start + el[start..].find('"').expect("closing quote");
            el[start..end].to_owned()
        };
        svg.split("<polyline")
            .skip(1)
            .map(|el| {
                (
                    attr(el, "stroke"),
                    attr(el, "points").split_whitespace().count(),
                )
            })
            .collect()
    }

    #[test]
    fn svg_has_one_polyline_per_curve_and_the_markers() {
        let curve = |label: &str, n: usize| RocCurve {
            label: label.into(),
            points: (0..n)
                .map(|k| {
                    let x = k as f64 / (n - 1) as f64;
                    (x, x.sqrt())
                })
                .collect(),
            operating_point: Some((0.1, 0.4)),
            split_fprs: vec![0.05, 0.1, 0.2],
        };
        let plot = RocPlot {
            title: "spambase <τ-FPL & CS-SVM>".into(),
            tau: 0.3,
            curves: vec![curve("tfpl", 7), curve("cs-svm", 11)],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("roc.svg");
        write_roc_svg(&path, &plot).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.trim_end().ends_with("</svg>"));
        let lines = polylines(&svg);
        // Per curve colour: the curve itself (its own vertex count), and two-point lines for the
        // strip bar, one tick per split and the legend entry.
        for (colour, vertices) in [("#1F77B4", 7), ("#FF7F0E", 11)] {
            let mut mine: Vec<usize> = lines
                .iter()
                .filter(|(c, _)| c == colour)
                .map(|(_, n)| *n)
                .collect();
            mine.sort();
            assert_eq!(mine, vec![2, 2, 2, 2, 2, vertices], "{colour}");
        }
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains("spambase &lt;τ-FPL &amp; CS-SVM&gt;"));
        assert!(
            svg.contains(">tfpl<") || svg.contains("tfpl\n"),
            "legend text"
        );
        assert!(svg.contains("τ = 0.3"));
    }

    #[test]
    fn bad_values_are_refused() {
        let plot = |tau: f64, p: (f64, f64), f: f64| RocPlot {
            title: String::new(),
            tau,
            curves: vec![RocCurve {
                label: "a".into(),
                points: vec![(0.0, 0.0), p],
                operating_point: None,
                split_fprs: vec![f],
            }],
        };
        assert!(roc_svg(&plot(0.05, (1.0, 1.0), 0.1)).is_ok());
        assert!(matches!(
            roc_svg(&plot(f64::NAN, (1.0, 1.0), 0.1)),
            Err(PlotError::Invalid(m)) if m.contains("tau")
        ));
        assert!(matches!(
            roc_svg(&plot(0.05, (1.5, 1.0), 0.1)),
            Err(PlotError::Invalid(m)) if m.contains("(1.5, 1.0)")
        ));
        assert!(matches!(
            roc_svg(&plot(0.05, (1.0, 1.0), -0.1)),
            Err(PlotError::Invalid(m)) if m.contains("split FPR")
        ));
        let dir = tempfile::tempdir().unwrap();
        let err = write_roc_svg(
            &dir.path().join("missing/roc.svg"),
            &plot(0.05, (1.0, 1.0), 0.1),
        )
        .unwrap_err();
        assert!(matches!(err, PlotError::Io { .. }));
    }
}
