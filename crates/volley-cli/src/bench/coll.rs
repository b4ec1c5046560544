//! `volley bench barrier|bcast|reduce|allreduce|allgather|alltoall|ibarrier|iallreduce`:
//! collectives over N ranks (the i-forms: started, then waited for),
//! volley's MPI beside Open MPI's and MPICH's in one invocation.
//!
//! One small C program (`coll_driver.c`, in this binary) is built with each MPI's own `mpicc`
//! and started by each one's launcher (`volley run`, `mpirun.openmpi`, `mpirun.mpich`), so the
//! three run the same code; the systems take turns, round after round (A B C A B C ...), so
//! drift of the machine hits all alike. Each round gives, per size, the median over 20 batches
//! of a call's latency (the slowest rank's); the table shows the median of the rounds and
//! their spread.

use super::BenchArgs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const TESTS: &[&str] = &[
    "barrier",
    "bcast",
    "reduce",
    "allreduce",
    "allgather",
    "alltoall",
    "ibarrier",
    "iallreduce",
];

const DRIVER: &str = include_str!("coll_driver.c");

/// An MPI to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum System {
    Volley,
    OpenMpi,
    Mpich,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Volley => "volley",
            System::OpenMpi => "openmpi",
            System::Mpich => "mpich",
        }
    }

    fn parse(s: &str) -> Result<System, String> {
        match s.trim() {
            "volley" | "mpi" | "volley-mpi" => Ok(System::Volley),
            "openmpi" | "ompi" => Ok(System::OpenMpi),
            "mpich" => Ok(System::Mpich),
            _ => Err(format!(
                "{s:?}: collectives compare with openmpi and mpich (comma-separated)"
            )),
        }
    }

    fn compiler(self, me: &Path) -> Command {
        match self {
            System::Volley => {
                let mut c = Command::new(me);
                c.arg("mpicc");
                c
            }
            System::OpenMpi => Command::new("mpicc.openmpi"),
            System::Mpich => Command::new("mpicc.mpich"),
        }
    }

    fn launcher(self, me: &Path, n: usize, cpus: Option<&str>, across: Option<&Across>) -> Command {
        if let Some(a) = across {
            return self.launcher_across(me, n, cpus, a);
        }
        let np = n.to_string();
        match self {
            System::Volley => {
                let mut c = Command::new(me);
                c.args(["run", "-n", &np]);
                if let Some(l) = cpus {
                    c.args(["--cpus", l]);
                }
                c
            }
            System::OpenMpi => {
                let mut c = Command::new("mpirun.openmpi");
                c.args(["-np", &np, "--oversubscribe", "--mca", "btl", "self,vader"]);
                match cpus {
                    Some(l) => c.args(["--cpu-set", l, "--bind-to", "core"]),
                    None => c.args(["--bind-to", "none"]),
                };
                c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
                c
            }
            System::Mpich => {
                let mut c = Command::new("mpirun.mpich");
                c.args(["-n", &np]);
                if let Some(l) = cpus {
                    c.args(["-bind-to", &format!("user:{l}")]);
                }
                c
            }
        }
    }

    /// The job over several hosts: volley through its own launcher; Open MPI's mpirun and
    /// MPICH's mpiexec started on the first host through the template (their daemons reach
    /// back to it there), the daemons on every host through the template too (`Across::agent`).
    fn launcher_across(self, me: &Path, n: usize, cpus: Option<&str>, a: &Across) -> Command {
        let np = n.to_string();
        if self == System::Volley {
            let mut c = Command::new(me);
            c.args([
                "run",
                "-n",
                &np,
                "--hosts",
                &a.list,
                "--launch",
                &a.template.join(" "),
            ]);
            if let Some(l) = cpus {
                c.args(["--cpus", l]);
            }
            return c;
        }
        let mut c = Command::new(&a.on_first[0]);
        c.args(&a.on_first[1..]);
        match self {
            System::OpenMpi => {
                // A remote shell does not carry this process's environment: the settings go
                // through env(1) on the first host, and mpirun passes them on.
                c.args([
                    "env",
                    "OMPI_ALLOW_RUN_AS_ROOT=1",
                    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                ]);
                if a.one_machine {
                    // PMIx's shared-memory key store would be one between the hosts too (its
                    // "PMIX ERROR ... dstore_base.c", then a daemon that failed to start).
                    c.arg("PMIX_MCA_gds=hash");
                }
                c.args([
                    "mpirun.openmpi",
                    "-np",
                    &np,
                    "--mca",
                    "btl",
                    // Hosts that are namespaces of one machine share its /dev/shm, and vader's
                    // segments of two hosts' ranks meet there (a crash in its polling, Open MPI
                    // 4.1): TCP, as between machines.
                    if a.one_machine {
                        "self,tcp"
                    } else {
                        "self,vader,tcp"
                    },
                ]);
                c.args(["--host", &a.openmpi_hosts()]);
                if let Some(agent) = &a.agent {
                    c.args(["--mca", "plm_rsh_agent"]).arg(agent);
                }
                match &a.rankfile {
                    // Each rank on its host and on its CPU of the list, as volley's --cpus does
                    // (Open MPI's own --cpu-set would start every host's ranks from the list's
                    // first CPU). The rankfile is the mapping: no other policy beside it.
                    Some(f) if cpus.is_some() => {
                        c.arg("--rankfile").arg(f);
                    }
                    _ => {
                        c.args(["--oversubscribe", "--bind-to", "none"]);
                        if !a.fill() {
                            c.args(["--map-by", "node"]);
                        }
                    }
                }
            }
            System::Mpich => {
                c.args(["mpiexec.hydra", "-n", &np, "-hosts", &a.list]);
                if let Some(agent) = &a.agent {
                    c.args(["-launcher", "rsh", "-launcher-exec"]).arg(agent);
                }
                if let Some(addr) = &a.first_addr {
                    c.args(["-localhost", addr]);
                }
                if a.one_machine {
                    // UCX (Debian's MPICH is ch4:ucx) finds its peers on one machine by its
                    // boot id and would take shared memory between hosts that are namespaces of
                    // it: TCP, as between machines (its ranks of one host then use TCP too).
                    c.args(["-genv", "UCX_TLS", "self,tcp"]);
                }
                // Hydra binds every host's local ranks from the list's start, so ranks of two
                // hosts that are one machine would share CPUs: left to the kernel (said once,
                // in Across::new).
            }
            System::Volley => unreachable!("handled above"),
        }
        c
    }
}

/// Where a collective's ranks run when they span hosts (`--hosts`, `--launch`).
pub struct Across {
    /// As given to --hosts.
    list: String,
    hosts: Vec<crate::multi::Host>,
    /// The host index of each rank (volley's placement, which the others are told to follow).
    placed: Vec<usize>,
    /// The launch template's words, {host} in them.
    template: Vec<String>,
    /// The template for the first host: mpirun and mpiexec run there.
    on_first: Vec<String>,
    /// A script that starts a command on a host through the template, for Open MPI's and
    /// Hydra's rsh launchers; None where the template is ssh, their default.
    agent: Option<PathBuf>,
    /// Open MPI's rankfile: rank i on its host and on the i-th CPU of --cpus.
    rankfile: Option<PathBuf>,
    /// The first host's address, where Hydra's proxies reach mpiexec.
    first_addr: Option<String>,
    /// Whether the hosts are one machine (network namespaces of it: one boot id).
    one_machine: bool,
}

impl Across {
    /// Checks the hosts and writes the agent (and the rankfile) into `dir`.
    pub fn new(
        list: &str,
        launch: Option<&str>,
        n: usize,
        cpus: Option<&str>,
        dir: &Path,
    ) -> Result<Across, String> {
        let hosts = crate::multi::parse_hosts(list).map_err(|e| format!("--hosts: {e}"))?;
        let placed = crate::multi::place(&hosts, n).map_err(|e| format!("--hosts: {e}"))?;
        let template = crate::multi::launch_template(launch)?;
        let on =
            |h: &str| -> Vec<String> { template.iter().map(|w| w.replace("{host}", h)).collect() };
        // `cmd` run on host `h` through the template, its standard output.
        let output_on = |h: &str, cmd: &[&str]| {
            let w = on(h);
            let mut c = Command::new(&w[0]);
            c.args(&w[1..]).args(cmd);
            run_for(c, Duration::from_secs(30)).ok()
        };
        let on_first = on(&hosts[0].name);
        let agent = if template[0] == "ssh" {
            None
        } else {
            // Both launchers hand the agent the host, then the command as words of one shell
            // line.
            let words: Vec<String> = template
                .iter()
                .map(|w| w.replace("{host}", "\"$host\""))
                .collect();
            let f = dir.join("agent");
            let text = format!(
                "#!/bin/sh\n# Starts a command on a host for mpirun or mpiexec, as volley bench --launch says.\nhost=$1; shift\nexec {} sh -c \"$*\"\n",
                words.join(" ")
            );
            std::fs::write(&f, text).map_err(|e| format!("{}: {e}", f.display()))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("{}: {e}", f.display()))?;
            Some(f)
        };
        if cpus.is_some() {
            eprintln!("volley bench: --cpus binds volley's and Open MPI's ranks across hosts; MPICH's are left to the kernel (Hydra would bind every host's ranks from the list's first CPU)");
        }
        let rankfile = match cpus {
            Some(l) => {
                let cpus = crate::run::parse_cpus(l)?;
                let text: String = placed
                    .iter()
                    .enumerate()
                    .map(|(r, &h)| {
                        format!("rank {r}={} slot={}\n", hosts[h].name, cpus[r % cpus.len()])
                    })
                    .collect();
                let f = dir.join("rankfile");
                std::fs::write(&f, text).map_err(|e| format!("{}: {e}", f.display()))?;
                Some(f)
            }
            None => None,
        };
        // Where Hydra's proxies find mpiexec: the first host's own first address (its name
        // may resolve to a loopback address there, or nowhere).
        let first_addr = output_on(&hosts[0].name, &["hostname", "-I"])
            .and_then(|o| o.split_whitespace().next().map(str::to_string));
        let boot_ids: Vec<Option<String>> = hosts
            .iter()
            .map(|h| output_on(&h.name, &["cat", "/proc/sys/kernel/random/boot_id"]))
            .collect();
        let one_machine = boot_ids[0].is_some() && boot_ids.iter().all(|b| *b == boot_ids[0]);
        if one_machine {
            eprintln!(
                "volley bench: the hosts are one machine (one boot id): Open MPI and MPICH run over TCP alone (--mca btl self,tcp; UCX_TLS=self,tcp), their ranks of one host too, since their shared memory would cross between the hosts; volley tells hosts by their names"
            );
        }
        Ok(Across {
            list: list.to_string(),
            hosts,
            placed,
            template,
            on_first,
            agent,
            rankfile,
            first_addr,
            one_machine,
        })
    }

    /// Whether ranks fill each host's slots in order (else round-robin).
    fn fill(&self) -> bool {
        self.hosts.iter().any(|h| h.slots.is_some())
    }

    /// Open MPI's --host: each host with as many slots as ranks placed on it.
    fn openmpi_hosts(&self) -> String {
        self.hosts
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let k = self.placed.iter().filter(|&&p| p == i).count();
                (k > 0).then(|| format!("{}:{k}", h.name))
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// For the table's heading.
    fn describe(&self) -> String {
        format!(
            "on hosts {} (started with '{}')",
            self.list,
            self.template.join(" ")
        )
    }
}

/// Runs `cmd` to its end or until `limit`, and returns its standard output.
fn run_for(mut cmd: Command, limit: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let t = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if t.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "still running after {} s: stopped",
                    limit.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    }
    let o = child.wait_with_output().map_err(|e| e.to_string())?;
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        return Err(format!("failed ({}):\n{out}{err}", o.status));
    }
    Ok(out)
}

/// `size -> median_us` from the driver's output.
fn parse(out: &str) -> BTreeMap<u64, f64> {
    let mut m = BTreeMap::new();
    for line in out.lines().filter(|l| l.starts_with("result: ")) {
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .map(str::to_string)
        };
        if let (Some(s), Some(t)) = (field("size="), field("median_us=")) {
            if let (Ok(s), Ok(t)) = (s.parse(), t.parse()) {
                m.insert(s, t);
            }
        }
    }
    m
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `first`, then the MPIs named in `list`, each once; 2 and a word on stderr for a name that
/// is none.
fn systems_of(first: &[System], list: &[&str]) -> Result<Vec<System>, i32> {
    let mut systems = first.to_vec();
    for s in list {
        match System::parse(s) {
            Ok(m) if !systems.contains(&m) => systems.push(m),
            Ok(_) => {}
            Err(e) => {
                eprintln!("volley bench: --vs: {e}");
                return Err(2);
            }
        }
    }
    Ok(systems)
}

/// Entry point for the collective tests.
pub fn bench(args: &BenchArgs, sizes: Vec<u64>) -> i32 {
    let list: Vec<&str> = args
        .vs
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .collect();
    match systems_of(&[System::Volley], &list) {
        Ok(systems) => finish(run(args, args.ranks, &systems, None, sizes)),
        Err(code) => code,
    }
}

/// Whether `s` names an MPI for `--vs` (the ping-pong then runs the driver under it; there
/// "volley" is volley's own ping-pong, not its MPI).
pub fn is_mpi(s: &str) -> bool {
    s.trim() != "volley" && System::parse(s).is_ok()
}

/// `volley bench pingpong --vs` with MPIs: volley's own ping-pong (a `volley bench pingpong`
/// run, with the kernel transports in `kernel` beside it) and the driver's MPI ping-pong under
/// volley's MPI ("mpi"), Open MPI and MPICH, taking turns round after round. The table gives
/// each one-way latency and its ratio to volley's own: what an MPI adds.
pub fn pingpong(args: &BenchArgs, sizes: Vec<u64>, mpis: &[&str], kernel: &[&str]) -> i32 {
    if args.cold {
        eprintln!("volley bench: --cold compares volley with the kernel's transports, not with MPIs (the MPI ping-pong reuses its buffers)");
        return 2;
    }
    match systems_of(&[], mpis) {
        Ok(systems) => finish(run(args, 2, &systems, Some(kernel), sizes)),
        Err(code) => code,
    }
}

fn finish(r: Result<(), String>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("volley bench: {e}");
            1
        }
    }
}

/// What takes a turn in a round: volley's own two-rank bench (ping-pong only), or the driver
/// built with an MPI.
enum Turn {
    Native,
    Driver(System, PathBuf),
}

/// Rows of `volley bench pingpong --csv`: (transport, bytes, median one-way us).
fn parse_csv(text: &str) -> Vec<(String, u64, f64)> {
    let mut v = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 6 {
            continue;
        }
        if let (Ok(b), Ok(t)) = (f[2].parse(), f[5].parse()) {
            v.push((f[1].to_string(), b, t));
        }
    }
    v
}

/// Measures: `native` is Some(kernel transports) for the ping-pong, whose first column is
/// volley's own bench; None for a collective, whose first system is volley's MPI.
fn run(
    args: &BenchArgs,
    n: usize,
    systems: &[System],
    native: Option<&[&str]>,
    sizes: Vec<u64>,
) -> Result<(), String> {
    if n < 1 {
        return Err("--ranks must be at least 1".into());
    }
    let p2p = native.is_some();
    let me = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let dir = std::env::temp_dir().join(format!("volley-bench-coll-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _clean = Clean(dir.clone());
    let across = match (&args.hosts, p2p) {
        (Some(list), false) => Some(Across::new(
            list,
            args.launch.as_deref(),
            n,
            args.cpus.as_deref(),
            &dir,
        )?),
        _ => None,
    };
    let src = dir.join("coll_driver.c");
    std::fs::write(&src, DRIVER).map_err(|e| format!("{}: {e}", src.display()))?;
    let mut turns = Vec::new();
    if p2p {
        turns.push(Turn::Native);
    }
    // Build the driver with each MPI; one that cannot be built is left out, with a word why.
    for &m in systems {
        let exe = dir.join(format!("coll_{}", m.name()));
        let mut c = m.compiler(&me);
        c.args(["-O2", "-o"]).arg(&exe).arg(&src);
        match c.output() {
            Ok(o) if o.status.success() => turns.push(Turn::Driver(m, exe)),
            Ok(o) => eprintln!(
                "volley bench: {} left out: its mpicc failed: {}",
                m.name(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => eprintln!(
                "volley bench: {} left out: cannot run its mpicc ({:?}): {e}",
                m.name(),
                c.get_program()
            ),
        }
    }
    if turns.is_empty() {
        return Err("nothing to measure".into());
    }
    let list: Vec<String> = sizes.iter().map(|s| s.to_string()).collect();
    let mut driver_args = vec![args.test.clone(), args.budget_ms.to_string()];
    driver_args.extend(list.iter().cloned());
    // Round after round, the systems in turn; columns in the order they first report.
    let mut cols: Vec<String> = Vec::new();
    let mut got: BTreeMap<(String, u64), Vec<f64>> = BTreeMap::new();
    let limit = Duration::from_millis(args.budget_ms * 8 * sizes.len() as u64 + 120_000);
    let csv = dir.join("native.csv");
    // How many network namespaces each MPI's ranks ran in (the driver says).
    let mut spread: BTreeMap<String, usize> = BTreeMap::new();
    for round in 0..args.reps {
        for t in &turns {
            let rows = match t {
                Turn::Native => {
                    let mut c = Command::new(&me);
                    c.args(["bench", "pingpong", "--reps", "1", "--sizes"])
                        .arg(list.join(","))
                        .args(["--budget-ms", &args.budget_ms.to_string()])
                        .args(["--iters", &args.iters.to_string(), "--csv"])
                        .arg(&csv);
                    if let Some(k) = native.filter(|k| !k.is_empty()) {
                        c.args(["--vs", &k.join(",")]);
                    }
                    if let Some(l) = args.cpus.as_deref() {
                        c.args(["--cpus", l]);
                    }
                    run_for(c, limit).map_err(|e| format!("volley round {}: {e}", round + 1))?;
                    let text = std::fs::read_to_string(&csv)
                        .map_err(|e| format!("{}: {e}", csv.display()))?;
                    parse_csv(&text)
                }
                Turn::Driver(m, exe) => {
                    let start = || {
                        let mut c = m.launcher(&me, n, args.cpus.as_deref(), across.as_ref());
                        c.arg(exe).args(&driver_args);
                        run_for(c, limit)
                    };
                    // Another MPI's launcher that fails to start its job now and then (Open
                    // MPI's daemons across namespaces; MPICH's UCX, whose ranks sometimes find
                    // no transport to each other between namespaces, for a second or so) gets
                    // three more tries, half a second apart and more, each said on stderr;
                    // volley's own failures are never retried.
                    let tries = if *m == System::Volley { 1 } else { 4 };
                    let mut attempt = 1;
                    let out = loop {
                        match start() {
                            Ok(out) => break out,
                            Err(e) if attempt < tries => {
                                eprintln!(
                                    "volley bench: {} round {} failed, trying it again: {}",
                                    m.name(),
                                    round + 1,
                                    e.lines().next().unwrap_or("")
                                );
                                std::thread::sleep(std::time::Duration::from_millis(
                                    500 * attempt as u64,
                                ));
                                attempt += 1;
                            }
                            Err(e) => return Err(format!("{} round {}: {e}", m.name(), round + 1)),
                        }
                    };
                    let name = match m {
                        System::Volley if p2p => "volley-mpi".to_string(),
                        m => m.name().to_string(),
                    };
                    if let Some(d) = out
                        .lines()
                        .find_map(|l| l.strip_prefix("netns: distinct="))
                        .and_then(|d| d.trim().parse::<usize>().ok())
                    {
                        spread.insert(name.clone(), d);
                    }
                    parse(&out)
                        .into_iter()
                        .map(|(s, v)| (name.clone(), s, v))
                        .collect()
                }
            };
            for (col, size, v) in rows {
                if !cols.contains(&col) {
                    cols.push(col.clone());
                }
                got.entry((col, size)).or_default().push(v);
            }
        }
    }
    // The table.
    println!(
        "# volley bench {}, {n} ranks{}{}, {} in us: median of {} rounds (min-max of the rounds' medians), systems interleaved",
        args.test,
        across
            .as_ref()
            .map(|a| format!(" {}", a.describe()))
            .unwrap_or_default(),
        args.cpus
            .as_deref()
            .map(|c| format!(" on CPUs {c}"))
            .unwrap_or_default(),
        if p2p { "one-way latency" } else { "per-call latency" },
        args.reps
    );
    // Ratios: for the ping-pong, each other column over volley's own (what it adds); for a
    // collective, volley's over each other MPI's (below 1: volley is faster).
    let ratio_head = |c: &str| {
        if p2p {
            format!("{c}/volley")
        } else {
            format!("vs {c}")
        }
    };
    let mut head = format!("{:>10}", "bytes");
    for c in &cols {
        head.push_str(&format!(" {:>24}", c));
    }
    for c in cols.iter().skip(1) {
        head.push_str(&format!(" {:>14}", ratio_head(c)));
    }
    println!("{head}");
    for &size in &sizes {
        let mut row = format!("{size:>10}");
        let mut meds = Vec::new();
        for c in &cols {
            let mut v = got.get(&(c.clone(), size)).cloned().unwrap_or_default();
            let (lo, hi) = v
                .iter()
                .fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
            let med = median(&mut v);
            meds.push(med);
            row.push_str(&format!(" {:>24}", format!("{med:.3} ({lo:.3}-{hi:.3})")));
        }
        for m in meds.iter().skip(1) {
            let r = if p2p { m / meds[0] } else { meds[0] / m };
            row.push_str(&format!(" {:>14}", format!("{}x", ratio(r))));
        }
        println!("{row}");
    }
    if across.is_some() {
        let each: Vec<String> = cols
            .iter()
            .filter_map(|c| spread.get(c).map(|d| format!("{c} {d}")))
            .collect();
        println!("# network namespaces the ranks ran in: {}", each.join(", "));
    }
    Ok(())
}

/// A ratio with two decimals, or as many as it takes to show two significant digits (a system
/// stalled for a millisecond beside one taking 0.2 us must not read 0.00x).
fn ratio(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 || r >= 0.01 {
        return format!("{r:.2}");
    }
    let decimals = (1.0 - r.log10().floor()) as usize;
    format!("{r:.decimals$}")
}

/// Removes the build directory when the run ends, however it ends.
struct Clean(PathBuf);

impl Drop for Clean {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_lines_are_read_and_others_ignored() {
        let out = "noise\nresult: size=8 calls=64 batches=20 median_us=1.500 min_us=1.2\nresult: size=1048576 calls=1 batches=20 median_us=812.250 min_us=800\n";
        let m = parse(out);
        assert_eq!(m.len(), 2);
        assert_eq!(m[&8], 1.5);
        assert_eq!(m[&1048576], 812.25);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(System::parse("tcp").is_err());
    }

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(ratio(0.93), "0.93");
        assert_eq!(ratio(2.5), "2.50");
        assert_eq!(ratio(0.000107), "0.00011");
        assert_eq!(ratio(0.0123), "0.01");
        assert_eq!(ratio(0.0099), "0.0099");
    }
}
