//! `volley run --hosts ...`: a job over several hosts.
//!
//! The launcher starts one agent per host (`volley agent`, through the `--launch` template, e.g.
//! `ssh {host}` or `ip netns exec {host}`) and talks to it over the agent's standard input and
//! output only, so it works wherever the template gives a pipe (an ssh session does):
//!
//! - the agent creates its host's job segment and doorbells, starts that host's ranks, and relays
//!   their standard output (stderr goes straight through);
//! - each rank opens its network device and sends its address ("card") to its agent over a
//!   socketpair; the agent passes it up as a control line; once the launcher has every rank's
//!   card it sends the whole table down to every agent, which hands it to its ranks;
//! - the agent reports each rank's exit; the launcher tells the agents to stop their ranks when
//!   one fails (unless --keep-going), on a timeout or a signal.
//!
//! The agent's command line is the template's words and `volley agent`, nothing else: what the
//! agent needs (the job's token, the placement, the settings, the program and its arguments)
//! goes down its standard input as the first line, one JSON object. So no remote shell ever
//! splits or interprets a program argument ("two words" stays one, `x;touch f` runs nothing),
//! and the job's secret never shows in `ps`.
//!
//! Control lines start with the byte 0x01 and "volley ". A rank's output line that starts with
//! 0x01 or 0x02 is sent with a 0x02 in front (taken off by the launcher), so no output of a rank
//! can ever be read as a control line.

use crate::run::{exit_code_of, fate_of};
use anyhow::{bail, Context};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use volley::launch::JobLaunch;
use volley::{Config, Fate};

const CTL: &str = "\x01volley ";
/// Escapes a rank's output line that could look like a control line (see the module's doc).
const ESC: u8 = 0x02;

/// Whether a rank's network address (its card, e.g. `udp:127.0.0.1:4000`) is on a loopback
/// interface, which only its own host can reach.
fn on_loopback(card: &str) -> bool {
    // Rank 0's card also carries the job's network key after '|'.
    let card = card.split('|').next().unwrap_or(card);
    if let Some(a) = card.strip_prefix("udp:") {
        return a
            .parse::<std::net::SocketAddrV4>()
            .is_ok_and(|a| a.ip().is_loopback());
    }
    // The loopback interface's hardware address is all zeros.
    card == "eth:00:00:00:00:00:00"
}

/// What the launcher tells an agent, as the first line of its standard input.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct AgentJob {
    node: usize,
    token: String,
    nodes: String,
    tag_output: bool,
    cpus: Option<String>,
    /// `--bind-to`'s value by name.
    bind_to: String,
    grace: f64,
    env: Vec<String>,
    program: Vec<String>,
}

/// One host of `--hosts`: its name and slot count (None: no count given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub slots: Option<usize>,
}

/// A host name goes into the launch template's command line (e.g. as ssh's destination): it
/// must be a host name, never an option or shell syntax.
fn check_host_name(name: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || ".-_@[]%".contains(c);
    if name.is_empty() || name.starts_with('-') || !name.chars().all(ok) {
        return Err(format!(
            "bad host name {name:?}: a host name is letters, digits and . - _ @ [ ] %, and does not start with '-'"
        ));
    }
    Ok(())
}

/// Parses "h1,h2:4,h3" (and the lines of a hostfile, which may use "h slots=4").
pub fn parse_hosts(s: &str) -> Result<Vec<Host>, String> {
    let mut out = Vec::new();
    for item in s
        .split([',', '\n'])
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
    {
        let (name, slots) = if let Some((n, c)) = item.split_once(':') {
            (n.trim(), Some(c.trim()))
        } else if let Some((n, c)) = item.split_once(" slots=") {
            (n.trim(), Some(c.trim()))
        } else {
            (item, None)
        };
        let slots = slots
            .map(|c| {
                c.parse::<usize>().ok().filter(|&x| x > 0).ok_or_else(|| {
                    format!("host {name:?}: slot count {c:?} is not a positive number")
                })
            })
            .transpose()?;
        check_host_name(name)?;
        out.push(Host {
            name: name.to_string(),
            slots,
        });
    }
    if out.is_empty() {
        return Err("no hosts given".into());
    }
    Ok(out)
}

/// The host index of each of `n` ranks: round-robin when no host has a slot count, else the
/// hosts' slots filled in order.
pub fn place(hosts: &[Host], n: usize) -> Result<Vec<usize>, String> {
    if hosts.iter().all(|h| h.slots.is_none()) {
        return Ok((0..n).map(|r| r % hosts.len()).collect());
    }
    let mut v = Vec::with_capacity(n);
    for (i, h) in hosts.iter().enumerate() {
        v.extend(std::iter::repeat_n(i, h.slots.unwrap_or(1)));
    }
    if v.len() < n {
        return Err(format!(
            "{n} ranks but only {} slots on the hosts given; add hosts or slots (host:count)",
            v.len()
        ));
    }
    v.truncate(n);
    Ok(v)
}

fn fate_code(f: Fate) -> String {
    f.code()
}

fn parse_fate(s: &str) -> Fate {
    Fate::from_code(s).unwrap_or(Fate::Unreachable)
}

enum FromAgent {
    Card(usize, String),
    Exit(usize, Fate),
    /// A rank's published counters, in the order of volley's table.
    Counters(usize, Vec<u64>),
    /// The agent of host index `h` closed its output (it ended).
    Gone(usize),
}

/// The words of a --launch template (default `ssh {host}`), {host} where a host's name goes.
pub fn launch_template(launch: Option<&str>) -> Result<Vec<String>, String> {
    let template: Vec<String> = launch
        .unwrap_or("ssh {host}")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if !template.iter().any(|w| w.contains("{host}")) {
        return Err(format!(
            "--launch {:?} has no {{host}} in it: say where the host name goes, e.g. 'ssh {{host}}'",
            launch.unwrap_or("")
        ));
    }
    Ok(template)
}

/// The launcher's side of a job over several hosts.
pub fn launch(a: &crate::run::RunArgs, hosts: Vec<Host>) -> anyhow::Result<i32> {
    let nodes = place(&hosts, a.n).map_err(anyhow::Error::msg)?;
    let template = launch_template(a.launch.as_deref()).map_err(anyhow::Error::msg)?;
    let exe =
        std::env::current_exe().context("cannot find the volley executable to start the agents")?;
    let token = volley_sys::random_u64();
    let nodes_s: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    let nodes_s = nodes_s.join(",");
    // The settings travel with the command line: a remote shell does not pass our environment.
    let envs: Vec<String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("VOLLEY_"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();

    let got_signal = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register_usize(sig, got_signal.clone(), sig as usize)?;
    }
    let (tx, rx) = mpsc::channel::<FromAgent>();
    let mut agents: Vec<(usize, Child, Option<std::process::ChildStdin>)> = Vec::new();
    let used: Vec<usize> = {
        let mut u: Vec<usize> = nodes.clone();
        u.sort_unstable();
        u.dedup();
        u
    };
    for &h in &used {
        let words: Vec<String> = template
            .iter()
            .map(|w| w.replace("{host}", &hosts[h].name))
            .collect();
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..]).arg(&exe).arg("agent");
        let job = AgentJob {
            node: h,
            token: format!("{token:016x}"),
            nodes: nodes_s.clone(),
            tag_output: a.tag_output,
            cpus: a.cpus.clone(),
            bind_to: a.bind_to.name().into(),
            grace: a.grace,
            env: envs.clone(),
            program: a.program.clone(),
        };
        let mut job_line = serde_json::to_string(&job).context("encoding the agent's job")?;
        job_line.push('\n');
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| {
            format!(
                "cannot start the agent for host {} with {:?}",
                hosts[h].name, words
            )
        })?;
        let out = child.stdout.take().expect("piped");
        let mut stdin = child.stdin.take();
        if let Some(w) = stdin.as_mut() {
            // An agent that died at once closed its input: its exit says why, below.
            let _ = w.write_all(job_line.as_bytes()).and_then(|_| w.flush());
        }
        let tx = tx.clone();
        std::thread::spawn(move || {
            let r = BufReader::new(out);
            for line in r.split(b'\n') {
                let Ok(line) = line else { break };
                if let Some(c) = line.strip_prefix(CTL.as_bytes()) {
                    let c = String::from_utf8_lossy(c);
                    let w: Vec<&str> = c.split_whitespace().collect();
                    match w.as_slice() {
                        ["card", r, addr] => {
                            if let Ok(r) = r.parse() {
                                let _ = tx.send(FromAgent::Card(r, addr.to_string()));
                            }
                        }
                        ["exit", r, f] => {
                            if let Ok(r) = r.parse() {
                                let _ = tx.send(FromAgent::Exit(r, parse_fate(f)));
                            }
                        }
                        ["counters", r, v] => {
                            let values: Option<Vec<u64>> =
                                v.split(',').map(|x| x.parse().ok()).collect();
                            if let (Ok(r), Some(values)) = (r.parse(), values) {
                                let _ = tx.send(FromAgent::Counters(r, values));
                            }
                        }
                        _ => {}
                    }
                } else {
                    let line = line.strip_prefix(&[ESC]).unwrap_or(&line);
                    let mut o = std::io::stdout().lock();
                    let _ = o
                        .write_all(line)
                        .and_then(|_| o.write_all(b"\n"))
                        .and_then(|_| o.flush());
                }
            }
            let _ = tx.send(FromAgent::Gone(h));
        });
        agents.push((h, child, stdin));
    }
    drop(tx);

    let start = Instant::now();
    let deadline = a
        .timeout
        .map(|s| start + Duration::from_secs_f64(s.max(0.0)));
    let mut cards: Vec<Option<String>> = vec![None; a.n];
    let mut table_sent = false;
    let mut fates: Vec<Option<Fate>> = vec![None; a.n];
    let mut counters: Vec<Option<Vec<u64>>> = vec![None; a.n];
    let mut first_failure: Option<(usize, Fate)> = None;
    let mut stopped = false;
    let mut timed_out = false;
    let mut gone = 0;
    let tell = |agents: &mut Vec<(usize, Child, Option<std::process::ChildStdin>)>, line: &str| {
        for (_, _, s) in agents.iter_mut() {
            if let Some(s) = s.as_mut() {
                let _ = s.write_all(line.as_bytes()).and_then(|_| s.flush());
            }
        }
    };
    let stop = |agents: &mut Vec<(usize, Child, Option<std::process::ChildStdin>)>| {
        for (_, _, s) in agents.iter_mut() {
            if let Some(s) = s.as_mut() {
                let _ = s.write_all(b"kill\n").and_then(|_| s.flush());
            }
        }
    };
    while gone < used.len() {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(FromAgent::Card(r, addr)) if r < a.n => {
                if used.len() > 1 && on_loopback(&addr) && first_failure.is_none() && !stopped {
                    // Other hosts cannot reach it: the job would wait for the peer timeout and
                    // then blame the peer (issue 16, defect 9).
                    eprintln!(
                        "volley run: rank {r} (on {}) has the address {addr}, on the loopback interface, which the other hosts cannot reach: set VOLLEY_NET_IF to an interface the hosts share (or leave it unset to pick one); stopping the job",
                        hosts[nodes[r]].name
                    );
                    first_failure = Some((r, Fate::Unreachable));
                    stop(&mut agents);
                    stopped = true;
                }
                cards[r] = Some(addr);
                if !table_sent && cards.iter().all(Option::is_some) {
                    let t: Vec<String> = cards
                        .iter()
                        .map(|c| c.clone().unwrap_or_default())
                        .collect();
                    let line = format!("table {}\n", t.join(" "));
                    for (_, _, s) in agents.iter_mut() {
                        if let Some(s) = s.as_mut() {
                            let _ = s.write_all(line.as_bytes()).and_then(|_| s.flush());
                        }
                    }
                    table_sent = true;
                }
            }
            Ok(FromAgent::Exit(r, f)) if r < a.n => {
                fates[r] = Some(f);
                if f.is_failure() {
                    // Every host hears of it now: ranks there waiting on it get peer-lost at
                    // once, not after the peer timeout (issue 16, defect 5).
                    tell(&mut agents, &format!("lost {r} {}\n", fate_code(f)));
                }
                if f.is_failure() && first_failure.is_none() && !stopped {
                    first_failure = Some((r, f));
                    eprintln!("volley run: rank {r} (on {}) {f}", hosts[nodes[r]].name);
                    if !a.keep_going {
                        eprintln!("volley run: stopping the other ranks (use --keep-going to let them run on)");
                        stop(&mut agents);
                        stopped = true;
                    }
                }
            }
            Ok(FromAgent::Counters(r, v)) if r < a.n => counters[r] = Some(v),
            Ok(FromAgent::Gone(h)) => {
                gone += 1;
                // An agent that ends before every rank of its host reported an exit could not
                // start them (a mistyped host, a failing template) or died: the job cannot
                // complete, so it stops now rather than leave the other hosts' ranks waiting for
                // the address table for ever (issue 16, defect 4a).
                let lost: Vec<usize> = (0..a.n)
                    .filter(|&r| nodes[r] == h && fates[r].is_none())
                    .collect();
                if !lost.is_empty() {
                    for &r in &lost {
                        fates[r] = Some(Fate::Unreachable);
                        tell(&mut agents, &format!("lost {r} unreachable\n"));
                    }
                    if first_failure.is_none() && !stopped {
                        eprintln!(
                            "volley run: the agent on host {} ended before its {} rank(s) did: it could not start them, or it died (check the host name and --launch {:?}); stopping the job",
                            hosts[h].name,
                            lost.len(),
                            template.join(" ")
                        );
                        first_failure = Some((lost[0], Fate::Unreachable));
                        stop(&mut agents);
                        stopped = true;
                    }
                }
            }
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if got_signal.swap(0, Ordering::SeqCst) != 0 && !stopped {
            stop(&mut agents);
            stopped = true;
        }
        if let Some(d) = deadline {
            if !timed_out && Instant::now() >= d {
                timed_out = true;
                eprintln!(
                    "volley run: timed out after {} s; stopping the ranks",
                    a.timeout.unwrap_or(0.0)
                );
                stop(&mut agents);
                stopped = true;
            }
        }
    }
    for (h, mut c, s) in agents {
        drop(s);
        let st = c.wait()?;
        if !st.success() && first_failure.is_none() && !stopped {
            // The agent itself failed (could not start, or the template failed).
            let code = st.code().unwrap_or(128 + st.signal().unwrap_or(9));
            eprintln!("volley run: the agent on {} ended with {st}", hosts[h].name);
            first_failure = Some((usize::MAX, Fate::Exited(code)));
        }
    }
    let _ = std::io::stdout().flush();
    if a.counters {
        crate::run::print_counters(&counters);
    }
    if timed_out {
        return Ok(124);
    }
    if let Some((_, f)) = first_failure {
        return Ok(exit_code_of(f));
    }
    if let Some(f) = fates.iter().flatten().find(|f| f.is_failure()) {
        return Ok(exit_code_of(*f));
    }
    if fates.iter().any(Option::is_none) {
        eprintln!("volley run: some ranks never reported an exit");
        return Ok(255);
    }
    Ok(0)
}

/// `volley agent` takes no options: its job comes down its standard input (see the module's doc).
#[derive(clap::Args, Debug)]
pub struct AgentArgs {}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(line.as_bytes()).and_then(|_| o.flush());
}

/// `volley agent`: one host's part of a job, started by the launcher (not by hand).
pub fn agent(a: AgentArgs) -> i32 {
    match agent_inner(a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("volley agent: {e:#}");
            2
        }
    }
}

fn agent_inner(_: AgentArgs) -> anyhow::Result<i32> {
    let mut input = BufReader::new(std::io::stdin());
    let mut first = String::new();
    input
        .read_line(&mut first)
        .context("reading the job from the launcher")?;
    let a: AgentJob = serde_json::from_str(first.trim_end()).with_context(|| {
        "the first line of input is not a job from `volley run`: the agent is started by the launcher, not by hand"
    })?;
    if a.program.is_empty() {
        bail!("the job names no program");
    }
    for e in &a.env {
        if let Some((k, v)) = e.split_once('=') {
            std::env::set_var(k, v);
        }
    }
    let token = u64::from_str_radix(&a.token, 16).context("bad --token")?;
    let nodes: Vec<usize> = a
        .nodes
        .split(',')
        .map(|x| x.parse())
        .collect::<Result<_, _>>()
        .context("bad --nodes")?;
    let mine: Vec<usize> = (0..nodes.len()).filter(|&r| nodes[r] == a.node).collect();
    if mine.is_empty() {
        bail!("no rank is placed on node {}", a.node);
    }
    let bind = <crate::bind::BindTo as clap::ValueEnum>::from_str(&a.bind_to, false)
        .map_err(|e| anyhow::anyhow!("bad bind_to from the launcher: {e}"))?;
    let plan = crate::bind::Plan::new(a.cpus.as_deref(), bind).map_err(anyhow::Error::msg)?;
    let cfg = Config::from_env(mine.len())?;
    let homes = plan.homes(mine.len(), |li| mine[li]);
    let job = JobLaunch::create_with_token(mine.len(), &cfg, token, &homes)?;
    let me = std::process::id();
    let mut children: Vec<(usize, Child, Option<Fate>)> = Vec::new();
    let mut boots: Vec<UnixStream> = Vec::new();
    let out_lock = Arc::new(Mutex::new(()));
    for (li, &g) in mine.iter().enumerate() {
        let (ours, theirs) = UnixStream::pair()?;
        let mut cmd = Command::new(&a.program[0]);
        for v in volley::launch::OWNED_VARS
            .iter()
            .chain(volley::launch::PMI_VARS)
        {
            cmd.env_remove(v);
        }
        cmd.args(&a.program[1..])
            .envs(job.env_for_node(li, g, &nodes, a.node, theirs.as_raw_fd()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if a.tag_output {
            cmd.stderr(Stdio::piped());
        }
        let mut inherit = job.inherited_fds();
        inherit.push(theirs.as_raw_fd());
        volley_sys::prepare_child(
            &mut cmd,
            volley_sys::ChildSetup {
                inherit,
                // Bound by job rank: with one rank per host, rank 0 and rank 1 still get
                // different CPUs when the "hosts" share a machine (namespaces, containers);
                // on separate machines each host's ranks still get distinct CPUs.
                cpus: plan.for_rank(g),
                parent: me,
            },
        );
        let mut child = cmd.spawn().map_err(|e| {
            anyhow::anyhow!(
                "cannot start {:?} for rank {g}: {e}; {}",
                a.program[0],
                crate::run::spawn_advice(&e, mine.len())
            )
        })?;
        drop(theirs);
        let tag = a.tag_output;
        if let Some(o) = child.stdout.take() {
            let lock = out_lock.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for line in BufReader::new(o).split(b'\n') {
                    let Ok(line) = line else { break };
                    out.clear();
                    if tag {
                        let _ = write!(out, "[{g}] ");
                    } else if matches!(line.first(), Some(&b) if b == CTL.as_bytes()[0] || b == ESC)
                    {
                        out.push(ESC);
                    }
                    out.extend_from_slice(&line);
                    out.push(b'\n');
                    let _g = lock.lock();
                    let mut w = std::io::stdout().lock();
                    let _ = w.write_all(&out).and_then(|_| w.flush());
                }
            });
        }
        if let Some(e) = child.stderr.take() {
            std::thread::spawn(move || {
                // Every agent of the job writes to the same stderr: a line goes out in one
                // write, so that lines of ranks on different hosts never interleave mid-line.
                let mut out = Vec::new();
                for line in BufReader::new(e).split(b'\n') {
                    let Ok(line) = line else { break };
                    out.clear();
                    let _ = write!(out, "[{g}] ");
                    out.extend_from_slice(&line);
                    out.push(b'\n');
                    let _ = std::io::stderr().lock().write_all(&out);
                }
            });
        }
        boots.push(ours);
        children.push((g, child, None));
    }
    // Cards up, as they come.
    for (li, b) in boots.iter().enumerate() {
        let b = b.try_clone()?;
        let lock = out_lock.clone();
        let g = mine[li];
        std::thread::spawn(move || {
            let mut line = String::new();
            if BufReader::new(b).read_line(&mut line).is_ok() {
                let w: Vec<&str> = line.split_whitespace().collect();
                if let ["card", _, addr] = w.as_slice() {
                    let _g = lock.lock();
                    say(&format!("{CTL}card {g} {addr}\n"));
                }
            }
        });
    }
    // Orders down: the table, then perhaps "kill". End of input means the launcher is gone.
    let (otx, orx) = mpsc::channel::<String>();
    // A rank that ends wakes the loop too (SIGCHLD, through a socket pair, as a "child" order).
    let (wake_rx, wake_tx) = UnixStream::pair()?;
    signal_hook::low_level::pipe::register(libc::SIGCHLD, wake_tx)?;
    let ctx = otx.clone();
    std::thread::spawn(move || {
        let mut b = [0u8; 64];
        while matches!((&wake_rx).read(&mut b), Ok(n) if n > 0) {
            if ctx.send("child".into()).is_err() {
                return;
            }
        }
    });
    std::thread::spawn(move || {
        for line in input.lines() {
            let Ok(line) = line else { break };
            if otx.send(line).is_err() {
                return;
            }
        }
        let _ = otx.send("kill".into());
    });
    let grace = Duration::from_secs_f64(a.grace.max(0.0));
    let mut killing: Option<Instant> = None;
    let mut killed = false;
    let mut first_failure: Option<Fate> = None;
    let mut woken: Option<String> = None;
    loop {
        while let Some(order) = woken.take().or_else(|| orx.try_recv().ok()) {
            if order.starts_with("table ") || order.starts_with("lost ") {
                for b in boots.iter_mut() {
                    let _ = b
                        .write_all(order.as_bytes())
                        .and_then(|_| b.write_all(b"\n"));
                }
            } else if order == "kill" && killing.is_none() {
                killing = Some(Instant::now());
                for (_, c, f) in &children {
                    if f.is_none() {
                        let _ = volley_sys::kill_group(c.id(), libc::SIGTERM);
                    }
                }
            }
        }
        if let Some(t) = killing {
            if !killed && t.elapsed() >= grace {
                killed = true;
                for (_, c, f) in &children {
                    if f.is_none() {
                        let _ = volley_sys::kill_group(c.id(), libc::SIGKILL);
                    }
                }
            }
        }
        // Only when a child has ended (see run.rs).
        let ended = volley_sys::ended_child().is_some();
        for (li, (g, c, f)) in children.iter_mut().enumerate() {
            if f.is_some() || !ended {
                continue;
            }
            if let Ok(Some(st)) = c.try_wait() {
                let fate = fate_of(st);
                *f = Some(fate);
                job.rank_ended(li, fate);
                if fate.is_failure() && first_failure.is_none() {
                    first_failure = Some(fate);
                }
                let _g = out_lock.lock();
                if let Some(v) = job.rank_counters(li) {
                    let v: Vec<String> = v.iter().map(u64::to_string).collect();
                    say(&format!("{CTL}counters {g} {}\n", v.join(",")));
                }
                say(&format!("{CTL}exit {g} {}\n", fate_code(fate)));
            }
        }
        if children.iter().all(|c| c.2.is_some()) {
            break;
        }
        // Until an order comes, a rank ends or the grace ends; at most a second (see run.rs:
        // a loop that looked every 2 ms took the ranks' CPUs 500 times a second).
        let t = match killing {
            Some(t0) if !killed => (t0 + grace).saturating_duration_since(Instant::now()),
            _ => Duration::from_secs(1),
        };
        woken = orx
            .recv_timeout(t.clamp(Duration::from_millis(1), Duration::from_secs(1)))
            .ok();
    }
    // What a rank left running in its process group goes with the job (see run.rs).
    for (_, c, _) in &children {
        let _ = volley_sys::kill_group(c.id(), libc::SIGKILL);
    }
    // Let the output threads finish their last lines.
    std::thread::sleep(Duration::from_millis(20));
    Ok(first_failure.map_or(0, exit_code_of))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_with_and_without_slots() {
        let h = parse_hosts("a,b:4, c").unwrap();
        assert_eq!(
            h[1],
            Host {
                name: "b".into(),
                slots: Some(4)
            }
        );
        assert_eq!(h[2].slots, None);
        let h = parse_hosts("# cluster\nnode1 slots=2\nnode2\n").unwrap();
        assert_eq!(
            (h[0].name.as_str(), h[0].slots, h.len()),
            ("node1", Some(2), 2)
        );
        assert!(parse_hosts("a:0").unwrap_err().contains("positive"));
        assert!(parse_hosts(" , ").unwrap_err().contains("no hosts"));
    }

    #[test]
    fn placement_is_round_robin_without_slots_and_fills_in_order_with_them() {
        let h = parse_hosts("a,b").unwrap();
        assert_eq!(place(&h, 5).unwrap(), vec![0, 1, 0, 1, 0]);
        let h = parse_hosts("a:3,b:2").unwrap();
        assert_eq!(place(&h, 4).unwrap(), vec![0, 0, 0, 1]);
        assert!(place(&h, 6).unwrap_err().contains("only 5 slots"));
    }
}
