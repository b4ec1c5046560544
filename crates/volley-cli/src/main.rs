//! The `volley` command. Layer 3: uses the public `volley` API and `volley-sys`; nothing uses it.
#![forbid(unsafe_code)]

mod bench;
mod bind;
mod info;
mod mpicc;
mod mpirun;
mod multi;
mod plot;
mod run;
mod tune;

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
    /// Measure ping-pong latency, throughput, message rate, cost-model parameters, overlap and
    /// idle cost, with kernel transports beside volley in the same run.
    Bench(bench::BenchArgs),
    /// Measure where single copy beats the pipelined copy on this machine (hot and cold buffers,
    /// in seconds) and write the profile every volley process reads at start.
    Tune(tune::TuneArgs),
    /// Draw latency and throughput against message size from bench results (SVG or PNG).
    Plot(plot::PlotArgs),
    /// Convert NetPIPE output (np.out) into a volley result file.
    ImportNetpipe(plot::ImportArgs),
    /// Compile and link a C MPI program against volley's MPI (mpi.h, libmpi.so); -show prints
    /// the compiler command instead.
    #[command(disable_help_flag = true)]
    Mpicc {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Like mpicc, for C++.
    #[command(disable_help_flag = true)]
    Mpicxx {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run an MPI program with mpirun's common options (-np N, --hosts, --bind-to core,
    /// --oversubscribe, -genv): translated to `volley run`.
    #[command(disable_help_flag = true)]
    Mpirun {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The same as mpirun.
    #[command(disable_help_flag = true)]
    Mpiexec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Show the transports and modes found on this machine, which are usable and why not, and
    /// the settings in force with where each came from.
    Info {
        /// Also say what a job of this many ranks per host needs (rings, segment).
        #[arg(short = 'n', long = "np", value_name = "N")]
        n: Option<usize>,
    },
    /// One host's part of a job over several hosts (started by `volley run --hosts`).
    #[command(hide = true)]
    Agent(multi::AgentArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.cmd {
        Cmd::Run(args) => run::run(args),
        Cmd::Bench(args) => bench::bench(args),
        Cmd::Tune(args) => tune::tune(args),
        Cmd::Plot(args) => plot::plot(args),
        Cmd::ImportNetpipe(args) => plot::import_netpipe(args),
        Cmd::Mpicc { args } => mpicc::run(false, args),
        Cmd::Mpicxx { args } => mpicc::run(true, args),
        Cmd::Mpirun { args } => mpirun::run("mpirun", args),
        Cmd::Mpiexec { args } => mpirun::run("mpiexec", args),
        Cmd::Info { n } => info::info(n),
        Cmd::Agent(args) => multi::agent(args),
    };
    std::process::exit(code);
}
