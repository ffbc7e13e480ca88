//! `quorumlock`: a distributed `flock` for scheduled tasks and scripts, on the Redlock
//! algorithm over independent Redis nodes.
//!
//! - `quorumlock run --resource NAME [--ttl 30s] [--wait 10s | --no-wait] -- CMD ARGS...`
//!   runs a command while holding the lock, keeping it alive, and exits with the
//!   command's status (or a documented code of its own).
//! - `quorumlock status NAME` shows the lock on each node and whether they agree.
//! - `quorumlock release NAME --token T` deletes a lock by its token (for operators).
//! - `quorumlock bench` measures what a lock costs on the nodes, safely.
//!
//! See `quorumlock --help` and docs/cli.md for the options and exit codes.

mod args;
mod bench;
mod duration;
mod exit;
mod nodes;
mod output;
mod release;
mod run;
mod signal;
mod status;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::exit::{CliError, Kind};
use crate::output::Output;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            // --help and --version are "errors" printed to stdout; the rest are usage errors.
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let out = Output {
        json: cli.global.json,
        verbose: cli.global.verbose,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let outcome = match runtime {
        Ok(runtime) => runtime.block_on(dispatch(&cli, out)),
        Err(error) => Err(CliError::new(
            Kind::Os,
            format!("could not start the async runtime: {error}"),
        )),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            out.error(&error);
            ExitCode::from(error.code())
        }
    }
}

/// Runs the subcommand; returns the exit code.
async fn dispatch(cli: &Cli, out: Output) -> Result<u8, CliError> {
    match &cli.command {
        Command::Run(args) => run::run(&cli.global, args, out).await,
        Command::Status(args) => status::status(&cli.global, args, out).await,
        Command::Release(args) => release::release(&cli.global, args, out).await,
        Command::Bench(args) => bench::bench(&cli.global, args, out).await,
    }
}
