//! The `neyman` command line: parses flags and hands each subcommand to `neyman::cli`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use neyman::cli::{
    self,
    args::{BenchCommand, Cli, Command, ModelCommand},
};

fn main() -> ExitCode {
    let parsed = Cli::parse();
    let quiet = match &parsed.command {
        Command::Train(a) => a.quiet,
        Command::Eval(a) => a.quiet,
        _ => false,
    };
    let default_level = if quiet { "error" } else { "warn" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    let cancel = AtomicBool::new(false);
    let result = match &parsed.command {
        Command::Train(a) => cli::train(a, &cancel),
        Command::Score(a) => cli::score(a),
        Command::Eval(a) => cli::eval(a, &cancel),
        Command::Model {
            command: ModelCommand::Inspect { model },
        } => cli::inspect(model),
        Command::Bench {
            command: BenchCommand::Projection(a),
        } => cli::bench::projection(a),
        Command::Bench {
            command: BenchCommand::Tfpl(a),
        } => cli::bench::tfpl(a, &cancel),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
