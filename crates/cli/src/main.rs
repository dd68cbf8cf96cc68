//! `ullstack`: the command-line face of the project. Argument parsing and dispatch only: the
//! flags and their help; how flags overlay a config file and which go together are decided in
//! the crate that owns the idea (`server::config::overrides`, `client::bench::overrides`,
//! `study::options`), and every subcommand's work, and the tables and lines it reports, live
//! in its crate (`sim`, `workload`, `server`, `client`, `fleet`, `study`, `harness`,
//! `calibrate`).

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod bench;
mod calibrate;
mod place;
mod remote;
mod serve;
mod sim;
mod study;
mod trace;

/// Latency QoS on ultra-low-latency NVMe flash: simulate the whole I/O path, serve remote flash
/// with per-tenant SLOs, and benchmark it.
#[derive(Parser, Debug)]
#[command(
    name = "ullstack",
    version,
    propagate_version = true,
    after_help = "Start here:\n  \
    ullstack sim                                   the default co-run (apache + pagerank), co-run vs alone\n  \
    ullstack sim --device zssd --job JOB.fio       one fio job straight into a simulated SSD\n  \
    ullstack sim --device zssd --trace FILE        replay a block trace (blkparse, MSR, SPC, ...)\n  \
    ullstack trace stats FILE                      what a block trace holds\n  \
    ullstack serve --memory 1GiB                   a remote-flash server (NBD and own protocol)\n  \
    ullstack bench --help                          load a running server, per-tenant latency\n  \
    ullstack study ull --quick                     a study: many runs, plots, report.html\n\n\
    Every subcommand has its own --help."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a deterministic simulation (device-level with --device/--job, or a full system).
    Sim(sim::SimArgs),
    /// Serve remote flash over the ullstack protocol and NBD, with per-tenant QoS.
    Serve(serve::ServeArgs),
    /// Generate load against a running `ullstack serve` and report per-tenant latency.
    Bench(bench::BenchArgs),
    // `study` and `place` take their help from their argument structs' doc comments (the one-line
    // summary and the examples under `--help`); a doc comment here would replace both.
    Study(study::StudyArgs),
    Place(place::PlaceArgs),
    /// Measure a device, file or the SSD model and fit the QoS device profile.
    Calibrate(calibrate::CalibrateArgs),
    /// Work with block traces (`trace stats FILE`).
    Trace(trace::TraceArgs),
}

/// Parses the command line. `study --help`'s closing part counts every study's runs from the
/// catalogue (~21 M instructions, 2.5 % of a 200 K-I/O `sim` run), so it is built only when the
/// command line asks for help.
fn parse_cli() -> Cli {
    let mut command = Cli::command();
    if std::env::args_os().any(|a| a == "--help" || a == "-h" || a == "help") {
        command = command.mut_subcommand("study", |sub| {
            sub.after_long_help(::study::listing::help_text())
        });
    }
    Cli::from_arg_matches_mut(&mut command.get_matches()).unwrap_or_else(|e| e.exit())
}

fn main() -> ExitCode {
    let cli = parse_cli();
    let result = match cli.command {
        Command::Sim(args) => sim::run(args),
        Command::Serve(args) => match serve::run(args) {
            Ok(code) => return ExitCode::from(code),
            Err(e) => Err(e),
        },
        Command::Bench(args) => bench::run(args),
        Command::Study(args) => study::run(args),
        Command::Place(args) => place::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Trace(args) => trace::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The message chain names the bad value; a backtrace (anyhow prints one when
            // RUST_BACKTRACE is set) would only bury it.
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, `outer: cause: root`, each cause said once: many of
/// our error types already print their source in their own message (`cannot read F: No such
/// file or directory`), and anyhow's `{:#}` would repeat it.
fn error_chain(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    /// An error that prints its source in its own message and also returns it as its source.
    #[derive(Debug)]
    struct SaysItsSource {
        source: std::io::Error,
    }

    impl std::fmt::Display for SaysItsSource {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot read job file x.fio: {}", self.source)
        }
    }

    impl std::error::Error for SaysItsSource {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = anyhow::Error::new(SaysItsSource { source: io() });
        assert_eq!(error_chain(&e), "cannot read job file x.fio: no such file");
        let e = anyhow::Error::new(io()).context("loading the study");
        assert_eq!(error_chain(&e), "loading the study: no such file");
    }
}
