//! `quorumlock`: a distributed `flock` for scheduled tasks and scripts, on the Redlock
//! algorithm over independent Redis nodes.
//!
//! - `quorumlock run --resource NAME [--ttl 30s] [--wait 10s | --no-wait] -- CMD ARGS...`
//!   runs a command while holding the lock, keeping it alive, and exits with the
//!   command's status (or a documented code of its own).
//!   `--shared` takes it shared (as `flock -s`), `--permits K` one of K permits.
//! - `quorumlock status NAME` shows the lock on each node and whether they agree.
//! - `quorumlock release NAME --token T` deletes a lock by its token (for operators).
//! - `quorumlock bench` measures what a lock costs on the nodes, safely.
//!
//! - `quorumlock manual` prints docs/cli.md, built in.
//!
//! See `quorumlock --help` and docs/cli.md for the options and exit codes.

// The idiom lints this binary passes, declared so that it keeps passing them; the
// library's other lints are about exported items, and a binary exports none.
#![warn(rust_2018_idioms)]

mod args;
mod bench;
mod duration;
mod exit;
mod explain;
mod guardian;
mod hold;
mod node_url;
mod nodes;
mod output;
mod release;
mod run;
mod signal;
mod status;
mod terms;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::args::{Cli, Command, GlobalArgs};
use crate::exit::{CliError, Kind};
use crate::output::Output;

fn main() -> ExitCode {
    // A `run`'s guardian (see `guardian`): before the parser, the runtime and the logs,
    // none of which it needs.
    let words: Vec<String> = std::env::args().skip(1).collect();
    if words.first().map(String::as_str) == Some(guardian::COMMAND) {
        return ExitCode::from(guardian::serve(&words[1..]));
    }
    let mut cli = match Cli::try_parse() {
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
        verbose: cli.global.verbose > 0,
        quiet: cli.global.quiet,
    };
    if let Err(error) = args::env::apply(&mut cli.global, |name| std::env::var_os(name)) {
        out.error(&error);
        return ExitCode::from(error.code());
    }
    init_logs(&cli.global);
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

/// The text of docs/cli.md, so that an installed binary carries its manual. The crate's
/// README.md is that file (a link to it), which also makes it the crate's page.
const MANUAL_TEXT: &str = include_str!("../README.md");

/// Installs the log subscriber: RUST_LOG when set (tracing's env-filter syntax), else the
/// library's warnings with -v and its debug logs with -vv; none by default, so that
/// stderr holds only quorumlock's own lines (and JSON lines with --json).
fn init_logs(global: &GlobalArgs) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => {
            EnvFilter::try_new(spec.trim()).unwrap_or_else(|error| {
                eprintln!("quorumlock: warning: RUST_LOG ignored, it did not parse: {error}");
                EnvFilter::new("warn")
            })
        }
        _ if global.quiet => return,
        _ => match global.verbose {
            0 => return,
            1 => EnvFilter::new("warn"),
            _ => EnvFilter::new("warn,quorumlock=debug"),
        },
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second subscriber cannot be installed; none is, so the results are ignored.
    if global.json {
        let _ = builder.json().try_init();
    } else {
        let _ = builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init();
    }
}

/// Runs the subcommand; returns the exit code.
async fn dispatch(cli: &Cli, out: Output) -> Result<u8, CliError> {
    match &cli.command {
        Command::Run(args) => run::run(&cli.global, args, out).await,
        Command::Status(args) => status::status(&cli.global, args, out).await,
        Command::Release(args) => release::release(&cli.global, args, out).await,
        Command::Manual => {
            out.manual(MANUAL_TEXT);
            Ok(0)
        }
        Command::Bench(args) => bench::bench(&cli.global, args, out).await,
    }
}
