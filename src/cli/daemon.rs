//! `neyman run` and `neyman replay`: the arguments of [`crate::daemon::run`].
//!
//! `run --config FILE` runs the config's source: `[source] kind = "replay"` replays its `path`
//! and keeps serving HTTP after the stream ends; `kind = "kafka"` runs on the `[kafka]`
//! topics. `replay FILE --config FILE` replays FILE instead and exits at the end of input
//! unless `--keep-serving` (`--serve`); `--report json` prints its prequential report
//! ([`crate::daemon::ReplayReport`]) and `--plot FILE.svg` draws it. SIGINT/SIGTERM stop either (see [`crate::daemon`]).

use std::path::Path;

use super::args::{BaselineName, ReplayArgs, RunArgs};
use super::CliError;
use crate::config::{parse_speed, LoadedConfig, SourceKind};
use crate::daemon::baseline::online_lr;
use crate::daemon::{shutdown_signal, Options, Source};
use crate::stream::event::EventLimits;

/// Loads and checks the configuration (exit 2 on any problem).
pub fn load_config(path: &Path) -> Result<LoadedConfig, CliError> {
    LoadedConfig::load(path).map_err(|e| CliError::Usage(e.to_string()))
}

pub fn run(args: &RunArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    let config = loaded.config;
    let source = match config.source.kind {
        SourceKind::Kafka => Source::Kafka,
        SourceKind::Http => Source::Http,
        SourceKind::Replay => {
            let path = config.source.path.clone().ok_or_else(|| {
                CliError::Usage("source.path: required for kind = \"replay\"".into())
            })?;
            Source::Replay {
                path,
                speed: speed(args.speed.as_deref(), &config.source.speed)?,
            }
        }
    };
    // `run` is the service: it keeps answering HTTP after a recorded stream ends.
    let options = Options {
        source,
        resume: !args.no_resume,
        keep_serving: true,
        threads: args.threads,
        report_block: None,
    };
    let finished = crate::daemon::run(config, options, shutdown_signal())?;
    show_summary(&finished.summary);
    Ok(())
}

/// The daemon logs its one-line summary at `info`; with `log.level` above that the line is
/// printed on stderr all the same, since it is the command's answer, not a log.
fn show_summary(summary: &crate::daemon::Summary) {
    if !tracing::enabled!(tracing::Level::INFO) {
        eprintln!("{summary}");
    }
}

pub fn replay(args: &ReplayArgs, loaded: LoadedConfig) -> Result<(), CliError> {
    if args.to_kafka {
        return super::kafka::replay_to_kafka(args, loaded);
    }
    let config = loaded.config;
    let wants_report = args.report.is_some() || args.plot.is_some();
    if args.report.is_some() && config.output.scores.as_os_str() == "-" {
        return Err(CliError::Usage(
            "--report json prints to stdout, where output.scores = \"-\" writes the scores: set output.scores to a file (NEYMAN_OUTPUT_SCORES=FILE)".into(),
        ));
    }
    let options = Options {
        source: Source::Replay {
            path: args.file.clone(),
            speed: speed(args.speed.as_deref(), &config.source.speed)?,
        },
        resume: !args.no_resume,
        keep_serving: args.keep_serving,
        threads: args.threads,
        report_block: wants_report.then(|| usize::try_from(args.block).unwrap_or(usize::MAX)),
    };
    let recalibrate_window = config.recalibrate.window;
    let limits = EventLimits {
        max_bytes: config.scoring.max_event_bytes,
        max_features: config.scoring.max_features,
        ..EventLimits::default()
    };
    let finished = crate::daemon::run(config, options, shutdown_signal())?;
    show_summary(&finished.summary);
    let Some(report) = finished.report else {
        return Ok(());
    };
    if let Some(path) = &args.plot {
        super::plot_blocks::write_blocks_svg(path, &report.prequential)?;
    }
    if args.report.is_some() {
        let mut json = serde_json::to_value(&report)
            .map_err(|e| CliError::Training(format!("the report: {e}")))?;
        if let (Some(BaselineName::OnlineLr), Some(fields)) = (args.baseline, json.as_object_mut())
        {
            let (block, tau) = (report.prequential.block, report.prequential.tau);
            let baseline = online_lr(&args.file, block, tau, recalibrate_window, &limits)
                .map_err(|e| CliError::file(&args.file, e))?;
            let baseline = serde_json::to_value(&baseline)
                .map_err(|e| CliError::Training(format!("the baseline report: {e}")))?;
            fields.insert("baseline".into(), baseline);
        }
        println!("{json}");
    }
    Ok(())
}

/// `--speed`, else `[source] speed`: `None` for max.
fn speed(flag: Option<&str>, configured: &str) -> Result<Option<f64>, CliError> {
    let text = flag.unwrap_or(configured);
    parse_speed(text).ok_or_else(|| {
        CliError::Usage(format!("--speed {text:?}: use max, realtime or xN (N > 0)"))
    })
}
