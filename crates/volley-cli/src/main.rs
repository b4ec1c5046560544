//! The `volley` command. Layer 3: uses the public `volley` API and `volley-sys`; nothing uses it.
#![forbid(unsafe_code)]

mod run;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "volley",
    version,
    about = "Lightweight message passing for clusters of commodity machines"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start N processes of PROGRAM on this machine as the ranks of one job.
    Run(run::RunArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Run(args) => run::run(args),
    };
    std::process::exit(code);
}
