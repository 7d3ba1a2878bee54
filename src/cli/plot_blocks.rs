//! The prequential chart of `neyman replay --plot FILE.svg`: per block, the observed FPR
//! against τ and the block's binomial noise limit (the false-positive share a scorer sitting
//! exactly at τ exceeds with probability below 0.05, [`crate::engine::prequential::NOISE_LEVEL`]),
//! the observed TPR, and vertical markers where a retrained model took over (solid) and where
//! drifted events begin (dashed). Text is emitted as SVG `<text>`, as in [`super::plot`].

use std::path::Path;

use plotters::prelude::*;

use super::plot::PlotError;
use crate::engine::prequential::{PrequentialReport, NOISE_LEVEL};
use crate::learn::threshold::binomial_upper_tail;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 500;
const FPR: RGBColor = RGBColor(214, 39, 40);
const TPR: RGBColor = RGBColor(31, 119, 180);
const SWAP: RGBColor = RGBColor(127, 127, 127);
const DRIFT: RGBColor = RGBColor(148, 103, 189);

/// The smallest false-positive share of `negatives` that is beyond noise at τ.
fn noise_limit(negatives: u64, tau: f64) -> f64 {
    let n = negatives as usize;
    (0..=n)
        .find(|&k| binomial_upper_tail(n, k, tau) < NOISE_LEVEL)
        .map_or(1.0, |k| k as f64 / n as f64)
}

/// Writes the chart of `report` to `path`.
pub fn write_blocks_svg(path: &Path, report: &PrequentialReport) -> Result<(), PlotError> {
    if report.blocks.is_empty() {
        return Err(PlotError::Invalid("the replay scored no events".into()));
    }
    let mut svg = String::new();
    draw(report, &mut svg).map_err(|e| PlotError::Draw(e.to_string()))?;
    std::fs::write(path, svg).map_err(|source| PlotError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn draw(report: &PrequentialReport, svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let blocks = &report.blocks;
    let x_max = blocks.len() as f64;
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "prequential FPR and TPR, blocks of {} ({} of {} beyond noise at τ = {})",
                report.block, report.blocks_beyond_noise, report.blocks_with_negatives, report.tau
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..x_max, 0.0..1.0)?;
    chart
        .configure_mesh()
        .x_desc("block")
        .y_desc("rate")
        .light_line_style(TRANSPARENT)
        .draw()?;
    // Markers first, so the rates are drawn over them.
    let mut previous_model = None;
    let mut drift_marked = false;
    for (i, b) in blocks.iter().enumerate() {
        let x = i as f64;
        if let (Some(prev), Some((model, _))) = (previous_model, b.first_version) {
            if model != prev {
                chart.draw_series(LineSeries::new([(x, 0.0), (x, 1.0)], SWAP.mix(0.4)))?;
            }
        }
        if let Some((model, _)) = b.last_version {
            previous_model = Some(model);
        }
        if b.drifted > 0 && !drift_marked {
            drift_marked = true;
            chart.draw_series(DashedLineSeries::new(
                [(x, 0.0), (x, 1.0)],
                6,
                4,
                DRIFT.stroke_width(2),
            ))?;
        }
    }
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, report.tau), (x_max, report.tau)],
            6,
            4,
            BLACK.stroke_width(1),
        ))?
        .label(format!("τ = {}", report.tau))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
    let step = |value: &dyn Fn(usize) -> Option<f64>| -> Vec<(f64, f64)> {
        (0..blocks.len())
            .filter_map(|i| value(i).map(|v| [(i as f64, v), (i as f64 + 1.0, v)]))
            .flatten()
            .collect()
    };
    chart
        .draw_series(LineSeries::new(
            step(&|i| {
                (blocks[i].counts.negatives > 0)
                    .then(|| noise_limit(blocks[i].counts.negatives, report.tau))
            }),
            FPR.mix(0.35).stroke_width(1),
        ))?
        .label("noise limit")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], FPR.mix(0.35)));
    chart
        .draw_series(LineSeries::new(
            step(&|i| blocks[i].fpr),
            FPR.stroke_width(2),
        ))?
        .label("FPR")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], FPR.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            step(&|i| blocks[i].tpr),
            TPR.stroke_width(2),
        ))?
        .label("TPR")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], TPR.stroke_width(2)));
    chart
        .draw_series(
            blocks
                .iter()
                .filter(|b| b.beyond_noise)
                .filter_map(|b| b.fpr.map(|f| (b.index as f64 + 0.5, f)))
                .map(|p| Circle::new(p, 4, FPR.filled())),
        )?
        .label("beyond noise")
        .legend(|(x, y)| Circle::new((x + 10, y), 4, FPR.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::prequential::Prequential;

    /// At τ = 5 % and 100 negatives, 10 false positives are beyond noise
    /// (P(Bin(100, 0.05) ≥ 10) ≈ 0.028) and 9 are not (≈ 0.063).
    #[test]
    fn the_noise_limit_is_the_first_significant_share() {
        assert_eq!(noise_limit(100, 0.05), 0.10);
        assert_eq!(noise_limit(0, 0.05), 1.0);
    }

    #[test]
    fn an_empty_replay_is_refused_and_a_chart_is_svg() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("blocks.svg");
        let empty = Prequential::new(10, 0.05).finish();
        assert!(matches!(
            write_blocks_svg(&path, &empty),
            Err(PlotError::Invalid(_))
        ));
        let mut p = Prequential::new(2, 0.05);
        for i in 0..6 {
            let mut meta = serde_json::Map::new();
            meta.insert(
                "label".into(),
                serde_json::json!(if i % 2 == 0 { 1 } else { -1 }),
            );
            p.observe_score(&crate::engine::scoring::ScoreOutput {
                id: format!("e{i}"),
                ts: Some(i),
                score: Some(0.0),
                flagged: Some(i < 3),
                threshold: Some(0.5),
                certified: Some(true),
                model_version: Some(1 + i as u64 / 4),
                threshold_version: Some(0),
                status: crate::engine::scoring::ScoreStatus::Scored,
                meta: Some(meta),
            });
        }
        write_blocks_svg(&path, &p.finish()).expect("drawn");
        let svg = std::fs::read_to_string(&path).expect("written");
        assert!(svg.starts_with("<svg") && svg.contains("TPR") && svg.contains("τ = 0.05"));
    }
}
