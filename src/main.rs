//! The `neyman` command line: parses flags and hands each subcommand to `neyman::cli`.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use neyman::cli::{
    self,
    args::{BenchCommand, Cli, Command, ConfigCommand, ModelCommand, StreamCommand},
    CliError,
};
use neyman::config::{LoadedConfig, LogFormat};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (index 15 in the `mi_option_e` enum of both bundled
/// versions). By default mimalloc hands emptied pages back to the OS after 10 ms; librdkafka
/// allocates and frees buffers per fetch and per produce batch, so the kernel zeroed fresh
/// pages for it all the time (a fifth of its broker thread in `neyman bench kafka`). One second
/// keeps them for the next batches; memory still goes back to the OS when the load drops.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

fn init_tracing(default_level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter);
    if json {
        builder.event_format(cli::log::JsonLines).init();
    } else {
        builder.init();
    }
}

/// The daemon's logging comes from its config, so the config is read (and checked) first.
fn with_daemon_config(
    path: &Path,
    run: impl FnOnce(LoadedConfig) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let loaded = cli::daemon::load_config(path)?;
    let log = &loaded.config.log;
    init_tracing(&log.level, log.format == LogFormat::Json);
    run(loaded)
}

fn main() -> ExitCode {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets a process-wide allocator option (an atomic store in mimalloc); any
        // value is valid for this option.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
    let parsed = Cli::parse();
    let quiet = match &parsed.command {
        Command::Train(a) => a.quiet,
        Command::Eval(a) => a.quiet,
        _ => false,
    };
    if !matches!(parsed.command, Command::Run(_) | Command::Replay(_)) {
        init_tracing(if quiet { "error" } else { "warn" }, false);
    }
    let cancel = AtomicBool::new(false);
    let result = match &parsed.command {
        Command::Train(a) => cli::train(a, &cancel),
        Command::Score(a) => cli::score(a),
        Command::Eval(a) => cli::eval(a, &cancel),
        Command::Prior(a) => cli::prior::prior(a, &cancel),
        Command::Model {
            command: ModelCommand::Inspect { model },
        } => cli::inspect(model),
        Command::Bench {
            command: BenchCommand::Projection(a),
        } => cli::bench::projection(a),
        Command::Bench {
            command: BenchCommand::Scoring(a),
        } => cli::bench::scoring(a),
        Command::Stream {
            command: StreamCommand::Make(a),
        } => cli::stream::make(a),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => cli::config_check(file),
        Command::Run(a) => with_daemon_config(&a.config, |c| cli::daemon::run(a, c)),
        Command::Replay(a) => with_daemon_config(&a.config, |c| cli::daemon::replay(a, c)),
        Command::Bench {
            command: BenchCommand::Tfpl(a),
        } => cli::bench::tfpl(a, &cancel),
        Command::Bench {
            command: BenchCommand::Kafka(a),
        } => cli::bench_kafka::kafka(a),
        Command::Bench {
            command: BenchCommand::Cuts3vm(a),
        } => cli::s3vm::bench(a, &cancel),
        Command::Bench {
            command: BenchCommand::Sdp(a),
        } => cli::sdp::bench(a),
        Command::Bench {
            command: BenchCommand::Replay(a),
        } => cli::daemon::load_config(&a.config).and_then(|c| cli::bench::replay(a, c)),
        Command::Record(a) => {
            cli::daemon::load_config(&a.config).and_then(|c| cli::kafka::record(a, c))
        }
        Command::Certify(a) => cli::certify::certify(a),
        Command::Completions { shell } => cli::completions(*shell),
        Command::Man => cli::man_page(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
