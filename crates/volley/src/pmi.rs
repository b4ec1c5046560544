//! A client of the Process Management Interface that cluster launchers speak to their ranks:
//! PMI-1 (MPICH's Hydra `mpiexec`) and PMI-2 (Slurm's `srun --mpi=pmi2`, and Hydra too). Both are
//! small text protocols over a descriptor (`PMI_FD`) or a TCP port (`PMI_PORT` + `PMI_ID`) the
//! launcher passes; volley speaks them itself rather than link a PMI library.
//!
//! What volley uses: who it is (rank, size), a key-value space private to the job (put, fence,
//! get) through which the ranks trade their host identity, process id and network address
//! card, and finalize/abort. Values are escaped so that any bytes survive the wire: bytes
//! outside `[A-Za-z0-9._:/+-]` travel as `%XX`.
//!
//! Every read has a deadline (`VOLLEY_PMI_TIMEOUT_MS`, default 120 s): a launcher that answers
//! garbage, closes the descriptor or never answers ends start-up with an error that says so,
//! never a hang.

use crate::error::InitError;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Which protocol, and so which launcher family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// PMI-1 text lines (Hydra's default).
    Pmi1,
    /// PMI-2 length-prefixed commands (Slurm's `--mpi=pmi2`; Hydra also serves it).
    Pmi2,
}

impl Flavor {
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Pmi1 => "PMI-1",
            Flavor::Pmi2 => "PMI-2",
        }
    }
}

/// The variables through which a PMI launcher reaches its ranks. `volley run` removes them from
/// what its own ranks inherit: started inside a Slurm step, its ranks are its own, not srun's.
pub const PMI_VARS: &[&str] = &[
    "PMI_FD",
    "PMI_PORT",
    "PMI_ID",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_JOBID",
];

enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(b),
            Conn::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(b),
            Conn::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The connection of this process's world, while it is open (a global so that an abort from
/// anywhere, even with the world borrowed, can reach the launcher).
pub(crate) static CONN: std::sync::Mutex<Option<Pmi>> = std::sync::Mutex::new(None);

/// What the launcher said about the job, for `volley info`: its name for the job, the
/// application number and its map of ranks to nodes. None when no PMI launcher started it.
pub fn launcher_details() -> Option<String> {
    let mut g = CONN.lock().unwrap_or_else(|e| e.into_inner());
    let p = g.as_mut()?;
    let map = p.process_mapping();
    Some(format!(
        "{} job {:?}, appnum {}, process mapping {}",
        p.flavor.name(),
        p.job_name(),
        p.appnum(),
        map.map(|m| match parse_mapping(&m, p.size) {
            Some(n) => format!("{m} (node of each rank: {n:?})"),
            None => format!("{m} (not understood)"),
        })
        .unwrap_or_else(|| "not given".into())
    ))
}

/// Ends the whole job with exit code `code` (1 if `code` would read as success): a foreign
/// launcher (Hydra, Slurm) is asked over PMI to stop every rank; under `volley run` the non-zero
/// exit does it (the launcher stops the other ranks when one fails). Never returns.
pub fn abort_job(code: i32, why: &str) -> ! {
    // An exit code is 8 bits: one that reads as 0 would say success.
    let code = if code & 0xff == 0 { 1 } else { code & 0xff };
    crate::world::ABORTING.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Ok(mut p) = CONN.try_lock() {
        if let Some(p) = p.as_mut() {
            p.abort(code, why);
            // The launcher kills the job; exit anyway if it is slow to.
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    std::process::exit(code)
}

/// The longest line or command volley accepts from a launcher: PMI values are at most 1 KiB,
/// so anything far longer is garbage, not a reply.
const MAX_REPLY: usize = 64 * 1024;

/// A connection to the launcher's PMI server.
pub struct Pmi {
    flavor: Flavor,
    conn: BufReader<Conn>,
    rank: usize,
    size: usize,
    appnum: i64,
    /// PMI-1's kvsname or PMI-2's job id: names the job's key-value space.
    kvs: String,
    /// The longest value the server takes (escaped).
    val_max: usize,
    key_max: usize,
    finalized: bool,
    timeout: Duration,
}

fn err(flavor: Flavor, why: impl Into<String>) -> InitError {
    InitError::Pmi {
        flavor: flavor.name(),
        why: why.into(),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Escapes `v` for the wire: any byte outside a small safe set becomes `%XX`.
pub fn escape(v: &[u8]) -> String {
    let mut s = String::with_capacity(v.len());
    for &b in v {
        if b.is_ascii_alphanumeric() || b"._:/+-".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// The inverse of [`escape`]; None if `s` is not something [`escape`] wrote.
pub fn unescape(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// Which protocol the environment asks for, if any: `VOLLEY_PMI=1|2` forces one; otherwise a
/// launcher that set `PMI_JOBID` or runs under Slurm gets PMI-2, and any other that set `PMI_FD`
/// or `PMI_PORT` PMI-1.
pub fn detect() -> Result<Option<Flavor>, InitError> {
    let has_fd = env("PMI_FD").is_some() || env("PMI_PORT").is_some();
    let forced = match env("VOLLEY_PMI").as_deref() {
        None | Some("auto") => None,
        Some("1") => Some(Flavor::Pmi1),
        Some("2") => Some(Flavor::Pmi2),
        Some(v) => {
            return Err(InitError::Env {
                var: "VOLLEY_PMI",
                value: v.into(),
                why: "must be 1 (PMI-1), 2 (PMI-2) or auto".into(),
            })
        }
    };
    if !has_fd {
        return Ok(None);
    }
    Ok(Some(forced.unwrap_or(
        if env("PMI_JOBID").is_some() || env("SLURM_STEP_ID").is_some() {
            Flavor::Pmi2
        } else {
            Flavor::Pmi1
        },
    )))
}

fn pmi_timeout() -> Result<Duration, InitError> {
    match env("VOLLEY_PMI_TIMEOUT_MS") {
        None => Ok(Duration::from_secs(120)),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(ms) if (100..=86_400_000).contains(&ms) => Ok(Duration::from_millis(ms)),
            _ => Err(InitError::Env {
                var: "VOLLEY_PMI_TIMEOUT_MS",
                value: v,
                why: "must be a number of milliseconds from 100 to 86400000".into(),
            }),
        },
    }
}

/// Splits `k=v` words (PMI-1: separated by spaces; PMI-2: by `;`, with `;;` an escaped `;`).
fn fields(flavor: Flavor, line: &str) -> Vec<(String, String)> {
    let words: Vec<String> = match flavor {
        Flavor::Pmi1 => line.split_whitespace().map(String::from).collect(),
        Flavor::Pmi2 => {
            let mut out = Vec::new();
            let mut cur = String::new();
            let mut it = line.chars().peekable();
            while let Some(c) = it.next() {
                if c == ';' {
                    if it.peek() == Some(&';') {
                        it.next();
                        cur.push(';');
                    } else {
                        out.push(std::mem::take(&mut cur));
                    }
                } else {
                    cur.push(c);
                }
            }
            if !cur.is_empty() {
                out.push(cur);
            }
            out
        }
    };
    words
        .into_iter()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

fn field<'a>(f: &'a [(String, String)], k: &str) -> Option<&'a str> {
    f.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str())
}

impl Pmi {
    /// Connects to the launcher's PMI server and introduces this process. `Ok(None)`: no PMI
    /// launcher in the environment.
    pub fn connect() -> Result<Option<Pmi>, InitError> {
        let Some(flavor) = detect()? else {
            return Ok(None);
        };
        let timeout = pmi_timeout()?;
        let num = |name: &'static str| -> Result<Option<i64>, InitError> {
            env(name)
                .map(|v| {
                    v.trim().parse::<i64>().map_err(|e| InitError::Env {
                        var: name,
                        value: v.clone(),
                        why: format!(
                            "not a number ({e}); the launcher's PMI environment is broken"
                        ),
                    })
                })
                .transpose()
        };
        let (conn, port_id) = if let Some(fd) = num("PMI_FD")? {
            if fd <= 2 || fd > i32::MAX as i64 {
                return Err(InitError::Env {
                    var: "PMI_FD",
                    value: fd.to_string(),
                    why: "must name a descriptor above 2 that the launcher passed".into(),
                });
            }
            let fd = fd as RawFd;
            if std::fs::metadata(format!("/proc/self/fd/{fd}")).is_err() {
                return Err(InitError::Env {
                    var: "PMI_FD",
                    value: fd.to_string(),
                    why: "no such open descriptor in this process (was the variable inherited from another job?)".into(),
                });
            }
            let owned = volley_sys::adopt_fd(fd);
            (Conn::Unix(UnixStream::from(owned)), None)
        } else {
            let port = env("PMI_PORT").unwrap_or_default();
            let s = TcpStream::connect(port.as_str())
                .map_err(|e| err(flavor, format!("cannot connect to PMI_PORT={port}: {e}")))?;
            let _ = s.set_nodelay(true);
            (Conn::Tcp(s), num("PMI_ID")?)
        };
        match &conn {
            Conn::Unix(s) => s.set_read_timeout(Some(timeout)),
            Conn::Tcp(s) => s.set_read_timeout(Some(timeout)),
        }
        .map_err(|e| err(flavor, format!("cannot set a read timeout: {e}")))?;
        let mut p = Pmi {
            flavor,
            conn: BufReader::new(conn),
            rank: num("PMI_RANK")?.unwrap_or(-1).max(-1) as usize,
            size: num("PMI_SIZE")?.unwrap_or(0).max(0) as usize,
            appnum: 0,
            kvs: String::new(),
            val_max: 1024,
            key_max: 64,
            finalized: false,
            timeout,
        };
        match flavor {
            Flavor::Pmi1 => p.init1(port_id)?,
            Flavor::Pmi2 => p.init2()?,
        }
        if p.size == 0 || p.rank >= p.size {
            return Err(err(
                flavor,
                format!(
                    "the launcher says this is rank {} of {} ranks",
                    p.rank as i64, p.size
                ),
            ));
        }
        Ok(Some(p))
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn size(&self) -> usize {
        self.size
    }
    pub fn appnum(&self) -> i64 {
        self.appnum
    }
    /// The job's name in the launcher (PMI-1 kvsname, PMI-2 job id).
    pub fn job_name(&self) -> &str {
        &self.kvs
    }

    fn send(&mut self, msg: &str) -> Result<(), InitError> {
        let flavor = self.flavor;
        let wire = match flavor {
            Flavor::Pmi1 => format!("{msg}\n"),
            Flavor::Pmi2 => format!("{:<6}{msg}", msg.len()),
        };
        // PMI-1 servers read a command of at most 1,024 bytes; PMI-2 values are at most 1,024.
        if wire.len() > 1024 + 6 {
            return Err(err(
                flavor,
                format!(
                    "a command of {} bytes is longer than PMI carries",
                    wire.len()
                ),
            ));
        }
        // One write per command: Slurm's server takes what one read returns as one command.
        self.conn
            .get_mut()
            .write_all(wire.as_bytes())
            .map_err(|e| {
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) {
                    err(flavor, format!("the launcher closed the PMI connection ({e} while sending: did it die, or end the job?)"))
                } else {
                    err(flavor, format!("sending to the launcher failed: {e}"))
                }
            })
    }

    /// Reads one reply: a line (PMI-1) or a length-prefixed command (PMI-2).
    fn recv(&mut self) -> Result<Vec<(String, String)>, InitError> {
        let flavor = self.flavor;
        let timeout = self.timeout;
        let io = move |e: std::io::Error| {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                err(flavor, format!("the launcher did not answer within {} ms (VOLLEY_PMI_TIMEOUT_MS: is it a PMI launcher, and did every rank start?)", timeout.as_millis()))
            } else if e.kind() == std::io::ErrorKind::ConnectionReset {
                // A launcher that closes its end with our request unread resets the connection.
                err(
                    flavor,
                    format!("the launcher closed the PMI connection ({e} while reading: did it die, or end the job?)"),
                )
            } else {
                err(flavor, format!("reading from the launcher failed: {e}"))
            }
        };
        let text = match flavor {
            Flavor::Pmi1 => {
                let mut line = Vec::new();
                let n = (&mut self.conn)
                    .take(MAX_REPLY as u64)
                    .read_until(b'\n', &mut line)
                    .map_err(io)?;
                if n == 0 {
                    return Err(err(
                        flavor,
                        "the launcher closed the PMI connection (did it die, or end the job?)",
                    ));
                }
                if !line.ends_with(b"\n") {
                    return Err(err(flavor, format!("the launcher sent a reply of {} bytes without an end of line; it does not speak PMI-1 (set VOLLEY_PMI=2?)", line.len())));
                }
                String::from_utf8(line)
                    .map_err(|_| err(flavor, "the launcher's reply is not text"))?
            }
            Flavor::Pmi2 => {
                let mut len = [0u8; 6];
                self.conn.read_exact(&mut len).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        err(
                            flavor,
                            "the launcher closed the PMI connection (did it die, or end the job?)",
                        )
                    } else {
                        io(e)
                    }
                })?;
                let n: usize = std::str::from_utf8(&len)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .filter(|&n| n <= MAX_REPLY)
                    .ok_or_else(|| {
                        err(flavor, format!("the launcher's reply does not start with a length ({:?}); it does not speak PMI-2 (set VOLLEY_PMI=1?)", String::from_utf8_lossy(&len)))
                    })?;
                let mut body = vec![0u8; n];
                self.conn.read_exact(&mut body).map_err(io)?;
                String::from_utf8(body)
                    .map_err(|_| err(flavor, "the launcher's reply is not text"))?
            }
        };
        let f = fields(flavor, text.trim_end());
        if field(&f, "cmd").is_none() {
            return Err(err(
                flavor,
                format!(
                    "the launcher sent something that is not a PMI reply: {:?}",
                    trunc(&text)
                ),
            ));
        }
        Ok(f)
    }

    /// Sends `msg` and reads the reply, which must be command `want` with rc 0.
    fn call(&mut self, msg: &str, want: &str) -> Result<Vec<(String, String)>, InitError> {
        self.send(msg)?;
        let f = self.recv()?;
        let cmd = field(&f, "cmd").unwrap_or("");
        if cmd != want {
            return Err(err(
                self.flavor,
                format!(
                    "asked {:?}, the launcher answered {cmd:?} (expected {want:?})",
                    trunc(msg)
                ),
            ));
        }
        if let Some(rc) = field(&f, "rc") {
            if rc.trim() != "0" {
                let why = field(&f, "msg").or(field(&f, "errmsg")).unwrap_or("");
                return Err(err(
                    self.flavor,
                    format!("the launcher refused {:?}: rc={rc} {why}", trunc(msg)),
                ));
            }
        }
        Ok(f)
    }

    fn init1(&mut self, port_id: Option<i64>) -> Result<(), InitError> {
        if let Some(id) = port_id {
            // Over PMI_PORT the server first learns which process this is, then says who it is.
            self.call(&format!("cmd=initack pmiid={id}"), "initack")?;
            for _ in 0..3 {
                let f = self.recv()?;
                if field(&f, "cmd") != Some("set") {
                    return Err(err(
                        self.flavor,
                        "the launcher's initack was not followed by set size/rank/debug",
                    ));
                }
                if let Some(v) = field(&f, "size") {
                    self.size = v.parse().map_err(|_| err(self.flavor, "bad size"))?;
                }
                if let Some(v) = field(&f, "rank") {
                    self.rank = v.parse().map_err(|_| err(self.flavor, "bad rank"))?;
                }
            }
        }
        let f = self.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
        )?;
        if field(&f, "pmi_version") != Some("1") {
            return Err(err(
                self.flavor,
                format!(
                    "the launcher speaks PMI version {:?}, not 1 (set VOLLEY_PMI=2?)",
                    field(&f, "pmi_version")
                ),
            ));
        }
        let f = self.call("cmd=get_maxes", "maxes")?;
        let num = |k: &str, d: usize| field(&f, k).and_then(|v| v.parse().ok()).unwrap_or(d);
        self.val_max = num("vallen_max", 1024);
        self.key_max = num("keylen_max", 64);
        let f = self.call("cmd=get_appnum", "appnum")?;
        self.appnum = field(&f, "appnum")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let f = self.call("cmd=get_my_kvsname", "my_kvsname")?;
        self.kvs = field(&f, "kvsname")
            .ok_or_else(|| err(self.flavor, "the launcher's my_kvsname has no kvsname"))?
            .to_string();
        Ok(())
    }

    fn init2(&mut self) -> Result<(), InitError> {
        // The first message is a PMI-1 text line for both protocols: Slurm fixes the protocol of
        // the connection from it (a PMI-2 command before it gets a text reply).
        self.flavor = Flavor::Pmi1;
        let f = self.call(
            "cmd=init pmi_version=2 pmi_subversion=0",
            "response_to_init",
        );
        self.flavor = Flavor::Pmi2;
        let f = f?;
        if field(&f, "pmi_version") != Some("2") {
            return Err(err(
                self.flavor,
                format!(
                    "the launcher speaks PMI version {:?}, not 2 (set VOLLEY_PMI=1?)",
                    field(&f, "pmi_version")
                ),
            ));
        }
        let jobid = env("PMI_JOBID").unwrap_or_else(|| "0".into());
        // Slurm requires all three fields; Hydra maps the connection to the rank by pmirank.
        let rank = if self.rank == usize::MAX {
            env("PMI_ID").unwrap_or_else(|| "0".into())
        } else {
            self.rank.to_string()
        };
        let msg = format!("cmd=fullinit;pmijobid={jobid};pmirank={rank};threaded=FALSE;");
        let f = self.call(&msg, "fullinit-response")?;
        let num = |k: &str| field(&f, k).and_then(|v| v.trim().parse::<i64>().ok());
        if let Some(r) = num("rank") {
            self.rank = r.max(0) as usize;
        }
        if let Some(s) = num("size") {
            self.size = s.max(0) as usize;
        }
        self.appnum = num("appnum").unwrap_or(0);
        let f = self.call("cmd=job-getid;", "job-getid-response")?;
        self.kvs = field(&f, "jobid").unwrap_or(&jobid).to_string();
        Ok(())
    }

    /// Publishes `value` under `key` in the job's key-value space; visible to the others after
    /// the next [`Pmi::fence`].
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), InitError> {
        let v = escape(value);
        if v.len() > self.val_max || key.len() > self.key_max {
            return Err(err(
                self.flavor,
                format!("the value for {key} is {} bytes escaped; the launcher takes at most {} (a key at most {})", v.len(), self.val_max, self.key_max),
            ));
        }
        match self.flavor {
            Flavor::Pmi1 => {
                let m = format!("cmd=put kvsname={} key={key} value={v}", self.kvs);
                self.call(&m, "put_result")?;
            }
            Flavor::Pmi2 => {
                self.call(
                    &format!("cmd=kvs-put;key={key};value={v};"),
                    "kvs-put-response",
                )?;
            }
        }
        Ok(())
    }

    /// Waits until every rank reached its fence; what each put before it is then visible.
    pub fn fence(&mut self) -> Result<(), InitError> {
        match self.flavor {
            Flavor::Pmi1 => self.call("cmd=barrier_in", "barrier_out").map(drop),
            Flavor::Pmi2 => self.call("cmd=kvs-fence;", "kvs-fence-response").map(drop),
        }
    }

    /// Reads what some rank put under `key` before the last fence.
    pub fn get(&mut self, key: &str) -> Result<Vec<u8>, InitError> {
        let f = match self.flavor {
            Flavor::Pmi1 => {
                let m = format!("cmd=get kvsname={} key={key}", self.kvs);
                self.call(&m, "get_result")?
            }
            Flavor::Pmi2 => {
                let m = format!(
                    "cmd=kvs-get;jobid={};srcid=-1;key={key};",
                    self.kvs.replace(';', ";;")
                );
                let f = self.call(&m, "kvs-get-response")?;
                if field(&f, "found") != Some("TRUE") {
                    return Err(err(
                        self.flavor,
                        format!("key {key} not found in the job's key-value space"),
                    ));
                }
                f
            }
        };
        let v = field(&f, "value").ok_or_else(|| {
            err(
                self.flavor,
                format!("the launcher's answer for key {key} has no value"),
            )
        })?;
        unescape(v).ok_or_else(|| {
            err(
                self.flavor,
                format!(
                    "the value for key {key} is not one volley wrote: {:?}",
                    trunc(v)
                ),
            )
        })
    }

    /// The launcher's map of ranks to nodes (`PMI_process_mapping`), if it gives one.
    pub fn process_mapping(&mut self) -> Option<String> {
        match self.flavor {
            Flavor::Pmi1 => {
                let m = format!("cmd=get kvsname={} key=PMI_process_mapping", self.kvs);
                let f = self.call(&m, "get_result").ok()?;
                field(&f, "value").map(String::from)
            }
            Flavor::Pmi2 => {
                let f = self
                    .call(
                        "cmd=info-getjobattr;key=PMI_process_mapping;",
                        "info-getjobattr-response",
                    )
                    .ok()?;
                (field(&f, "found") == Some("TRUE"))
                    .then(|| field(&f, "value").map(String::from))
                    .flatten()
            }
        }
    }

    /// Tells the launcher this rank is done with PMI (it closed its world normally).
    pub fn finalize(&mut self) -> Result<(), InitError> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        match self.flavor {
            Flavor::Pmi1 => self.call("cmd=finalize", "finalize_ack").map(drop),
            Flavor::Pmi2 => self.call("cmd=finalize;", "finalize-response").map(drop),
        }
    }

    /// Asks the launcher to end the whole job with `code`; does not wait for an answer.
    pub fn abort(&mut self, code: i32, msg: &str) {
        let m: String = msg
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        // Hydra (no PMI_JOBID) serves no PMI-2 abort, but reads each message as either protocol:
        // the PMI-1 line ends the job there with `code`. Slurm kills the step (exit code 137).
        let _ = match self.flavor {
            Flavor::Pmi2 if env("PMI_JOBID").is_some() => {
                let m: String = m.chars().filter(|&c| c != ';').take(200).collect();
                self.send(&format!("cmd=abort;isworld=TRUE;msg={m};"))
            }
            _ => {
                let flavor = self.flavor;
                self.flavor = Flavor::Pmi1;
                let r = self.send(&format!("cmd=abort exitcode={code}"));
                self.flavor = flavor;
                r
            }
        };
    }
}

fn trunc(s: &str) -> String {
    let s = s.trim_end();
    if s.len() > 120 {
        let mut end = 120;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s.to_string()
    }
}

/// Parses a PMI_process_mapping value, `(vector,(start,nodes,ranks_per_node),...)`, into the
/// node of each of `size` ranks. The blocks repeat until every rank has a node (Hydra says
/// `(vector,(0,1,1))` for any number of ranks on one host). None if malformed or empty.
pub fn parse_mapping(v: &str, size: usize) -> Option<Vec<usize>> {
    let inner = v.trim().strip_prefix("(vector,")?.strip_suffix(')')?;
    let mut blocks = Vec::new();
    for block in inner.split("),") {
        let b = block.trim().trim_start_matches('(').trim_end_matches(')');
        let n: Vec<usize> = b
            .split(',')
            .map(|x| x.trim().parse().ok())
            .collect::<Option<_>>()?;
        let [start, count, per] = n[..] else {
            return None;
        };
        start.checked_add(count)?;
        // A block of no nodes or no ranks places nobody: skipped, so that each pass below
        // places at least one rank per block it visits.
        if count > 0 && per > 0 {
            blocks.push((start, count, per));
        }
    }
    let mut nodes = Vec::with_capacity(size);
    while nodes.len() < size {
        let before = nodes.len();
        for &(start, count, per) in &blocks {
            // Stop as soon as every rank has its node: a block may claim far more nodes and
            // ranks than the job has (a hang, when the loops ran to its end regardless).
            for node in start..start + count {
                if nodes.len() == size {
                    break;
                }
                nodes.extend(std::iter::repeat_n(node, per.min(size - nodes.len())));
            }
        }
        if nodes.len() == before {
            return None;
        }
    }
    Some(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255u8).collect();
        let e = escape(&all);
        assert!(!e.contains([' ', '=', ';', '\n']));
        assert_eq!(unescape(&e).unwrap(), all);
        assert_eq!(unescape("%4"), None);
        assert_eq!(unescape("%zz"), None);
    }

    #[test]
    fn pmi2_fields_unescape_semicolons() {
        let f = fields(
            Flavor::Pmi2,
            "cmd=kvs-get-response;rc=0;found=TRUE;value=a;;b;",
        );
        assert_eq!(field(&f, "value"), Some("a;b"));
        assert_eq!(field(&f, "found"), Some("TRUE"));
    }

    #[test]
    fn mappings() {
        assert_eq!(parse_mapping("(vector,(0,2,2))", 4), Some(vec![0, 0, 1, 1]));
        assert_eq!(
            parse_mapping("(vector,(0,1,3),(1,1,1))", 4),
            Some(vec![0, 0, 0, 1])
        );
        // The pattern repeats until every rank has a node.
        assert_eq!(parse_mapping("(vector,(0,1,1))", 3), Some(vec![0, 0, 0]));
        assert_eq!(
            parse_mapping("(vector,(0,2,1))", 5),
            Some(vec![0, 1, 0, 1, 0])
        );
        assert_eq!(parse_mapping("(vector,(0,0,1))", 3), None);
        assert_eq!(parse_mapping("garbage", 3), None);
    }
}

/// Fuzzing the PMI client's parsers on stable Rust (issue 16, defect 11): proptest properties
/// with a fixed budget of cases (`VOLLEY_FUZZ_CASES`, `VOLLEY_FUZZ_SEED` change it), run by
/// `cargo test --release -p volley --lib pmi::fuzz`. Replies start from real PMI-1 lines and
/// PMI-2 length-prefixed commands and are then mutated, or are random bytes; they reach the
/// client through a real socket, as a launcher's do.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::Index;
    use proptest::test_runner::RngSeed;
    use std::net::Shutdown;

    fn config(cases: u32) -> ProptestConfig {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        ProptestConfig {
            cases: env("VOLLEY_FUZZ_CASES").map_or(cases, |c| c as u32),
            rng_seed: RngSeed::Fixed(env("VOLLEY_FUZZ_SEED").unwrap_or(0x766f_6c6c_6579)),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// A client whose launcher has said `replies` and then closed its sending side (what the
    /// client sends is taken and never read, so no call blocks).
    fn scripted(flavor: Flavor, replies: Vec<u8>) -> (Pmi, UnixStream) {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        ours.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut w = theirs.try_clone().expect("clone");
        let writer = std::thread::spawn(move || {
            let _ = w.write_all(&replies);
            let _ = w.shutdown(Shutdown::Write);
        });
        let p = Pmi {
            flavor,
            conn: BufReader::new(Conn::Unix(ours)),
            rank: 0,
            size: 1,
            appnum: 0,
            kvs: "kvs_1".into(),
            val_max: 1024,
            key_max: 64,
            finalized: false,
            timeout: Duration::from_secs(5),
        };
        writer.join().expect("writer");
        (p, theirs)
    }

    /// A reply as a launcher writes it.
    fn encode(flavor: Flavor, f: &[(String, String)]) -> Vec<u8> {
        match flavor {
            Flavor::Pmi1 => {
                let words: Vec<String> = f.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{}\n", words.join(" ")).into_bytes()
            }
            Flavor::Pmi2 => {
                let body: String = f
                    .iter()
                    .map(|(k, v)| format!("{}={};", k.replace(';', ";;"), v.replace(';', ";;")))
                    .collect();
                format!("{:<6}{body}", body.len()).into_bytes()
            }
        }
    }

    fn flavor() -> impl Strategy<Value = Flavor> {
        prop_oneof![Just(Flavor::Pmi1), Just(Flavor::Pmi2)]
    }

    /// Fields of a valid reply: `cmd` first, then keys without `=` (nor whitespace in PMI-1,
    /// nor `;` in PMI-2: its `;;` escape cannot tell an escaped `;` at the start of a word from
    /// a separator followed by one, and no launcher's key has one) and values without
    /// whitespace in PMI-1, anything printable in PMI-2.
    fn reply(flavor: Flavor) -> impl Strategy<Value = Vec<(String, String)>> {
        let (key, val) = match flavor {
            Flavor::Pmi1 => ("[!-<>-~]{1,12}", "[!-~]{0,40}"),
            Flavor::Pmi2 => ("[ -:<>-~]{1,12}", "[ -~]{0,40}"),
        };
        ("[a-z_-]{1,20}", proptest::collection::vec((key, val), 0..8)).prop_map(|(cmd, rest)| {
            let mut f = vec![("cmd".to_string(), cmd)];
            f.extend(rest);
            f
        })
    }

    #[derive(Clone, Debug)]
    enum Mutation {
        Flip(Index),
        Truncate(Index),
        Splice(Index, Vec<u8>),
        Overwrite(Index, Vec<u8>),
        Append(Vec<u8>),
    }

    fn mutation() -> impl Strategy<Value = Mutation> {
        let junk = || proptest::collection::vec(any::<u8>(), 0..16);
        prop_oneof![
            any::<Index>().prop_map(Mutation::Flip),
            any::<Index>().prop_map(Mutation::Truncate),
            (any::<Index>(), junk()).prop_map(|(i, j)| Mutation::Splice(i, j)),
            (any::<Index>(), junk()).prop_map(|(i, j)| Mutation::Overwrite(i, j)),
            junk().prop_map(Mutation::Append),
        ]
    }

    fn mutate(b: &mut Vec<u8>, m: &Mutation) {
        match m {
            Mutation::Flip(i) if !b.is_empty() => {
                let bit = i.index(b.len() * 8);
                b[bit / 8] ^= 1 << (bit % 8);
            }
            Mutation::Flip(_) => {}
            Mutation::Truncate(i) => b.truncate(i.index(b.len() + 1)),
            Mutation::Splice(i, j) => {
                let at = i.index(b.len() + 1);
                b.splice(at..at, j.iter().copied());
            }
            Mutation::Overwrite(i, j) => {
                let at = i.index(b.len() + 1);
                let end = (at + j.len()).min(b.len());
                b[at..end].copy_from_slice(&j[..end - at]);
            }
            Mutation::Append(j) => b.extend_from_slice(j),
        }
    }

    /// Reads replies until an error (the launcher closed at the end of the script, at the
    /// latest): none may panic, and every one taken names its command.
    fn read_all(flavor: Flavor, bytes: Vec<u8>) -> Vec<Vec<(String, String)>> {
        let (mut p, _theirs) = scripted(flavor, bytes);
        let mut got = Vec::new();
        for _ in 0..100 {
            match p.recv() {
                Ok(f) => {
                    assert!(field(&f, "cmd").is_some(), "a reply without cmd: {f:?}");
                    got.push(f);
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    return got;
                }
            }
        }
        panic!("100 replies from a script of at most a few")
    }

    /// A launcher's side of the handshake, `get` of `value` under key `k` and the process
    /// mapping, as real replies.
    fn transcript(flavor: Flavor, value: &[u8], mapping: &str) -> Vec<u8> {
        let r = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let v = escape(value);
        let mut out = Vec::new();
        match flavor {
            Flavor::Pmi1 => {
                for f in [
                    r(&[
                        ("cmd", "response_to_init"),
                        ("pmi_version", "1"),
                        ("pmi_subversion", "1"),
                        ("rc", "0"),
                    ]),
                    r(&[
                        ("cmd", "maxes"),
                        ("kvsname_max", "256"),
                        ("keylen_max", "64"),
                        ("vallen_max", "1024"),
                    ]),
                    r(&[("cmd", "appnum"), ("appnum", "0")]),
                    r(&[("cmd", "my_kvsname"), ("kvsname", "kvs_42_0")]),
                    r(&[("cmd", "get_result"), ("rc", "0"), ("value", &v)]),
                    r(&[("cmd", "get_result"), ("rc", "0"), ("value", mapping)]),
                ] {
                    out.extend(encode(flavor, &f));
                }
            }
            Flavor::Pmi2 => {
                // The first reply is a PMI-1 line, whichever protocol (see `init2`).
                out.extend(encode(
                    Flavor::Pmi1,
                    &r(&[
                        ("cmd", "response_to_init"),
                        ("pmi_version", "2"),
                        ("pmi_subversion", "0"),
                        ("rc", "0"),
                    ]),
                ));
                for f in [
                    r(&[
                        ("cmd", "fullinit-response"),
                        ("rc", "0"),
                        ("rank", "0"),
                        ("size", "1"),
                        ("appnum", "0"),
                    ]),
                    r(&[
                        ("cmd", "job-getid-response"),
                        ("rc", "0"),
                        ("jobid", "job;7"),
                    ]),
                    r(&[
                        ("cmd", "kvs-get-response"),
                        ("rc", "0"),
                        ("found", "TRUE"),
                        ("value", &v),
                    ]),
                    r(&[
                        ("cmd", "info-getjobattr-response"),
                        ("rc", "0"),
                        ("found", "TRUE"),
                        ("value", mapping),
                    ]),
                ] {
                    out.extend(encode(flavor, &f));
                }
            }
        }
        out
    }

    /// The calls a rank makes over the transcript: every one answers Ok or Err, never a panic.
    fn converse(flavor: Flavor, bytes: Vec<u8>) -> Result<(Vec<u8>, Option<String>), InitError> {
        let (mut p, _theirs) = scripted(flavor, bytes);
        match flavor {
            Flavor::Pmi1 => p.init1(None)?,
            Flavor::Pmi2 => p.init2()?,
        }
        let v = p.get("k")?;
        Ok((v, p.process_mapping()))
    }

    proptest! {
        #![proptest_config(config(2000))]

        /// A valid reply of either protocol parses to exactly its fields.
        #[test]
        fn valid_replies_parse_exactly(
            (flavor, f) in flavor().prop_flat_map(|fl| (Just(fl), reply(fl)))
        ) {
            let got = read_all(flavor, encode(flavor, &f));
            prop_assert_eq!(got, vec![f]);
        }

        /// Random bytes, and valid replies with bits flipped, cut short, bytes spliced in or
        /// written over or added, never make the client panic (or hang: the launcher closes).
        #[test]
        fn mutated_replies_never_panic(
            (flavor, f) in flavor().prop_flat_map(|fl| (Just(fl), reply(fl))),
            more in proptest::collection::vec(mutation(), 1..4),
            random in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut b = encode(flavor, &f);
            b.extend(encode(flavor, &f));
            for m in &more {
                mutate(&mut b, m);
            }
            read_all(flavor, b);
            read_all(flavor, random.clone());
            // A length prefix followed by anything.
            let mut b = format!("{:<6}", random.len()).into_bytes();
            b.extend(&random);
            read_all(Flavor::Pmi2, b);
        }

        /// The whole conversation a rank has with its launcher (init, a get, the process
        /// mapping): a valid transcript gives back exactly the value stored; a mutated one
        /// gives Ok or an error, never a panic.
        #[test]
        fn conversations_with_a_launcher(
            flavor in flavor(),
            value in proptest::collection::vec(any::<u8>(), 0..200),
            blocks in proptest::collection::vec((0usize..4, 1usize..4, 1usize..4), 1..4),
            muts in proptest::collection::vec(mutation(), 0..4),
        ) {
            let mapping = format!(
                "(vector,{})",
                blocks.iter().map(|(s, c, p)| format!("({s},{c},{p})")).collect::<Vec<_>>().join(",")
            );
            let t = transcript(flavor, &value, &mapping);
            let (v, m) = converse(flavor, t.clone()).expect("a valid transcript");
            prop_assert_eq!(v, value.clone());
            prop_assert_eq!(m.as_deref(), Some(mapping.as_str()));
            let mut t = t;
            for m in &muts {
                mutate(&mut t, m);
            }
            if let Err(e) = converse(flavor, t) {
                prop_assert!(!e.to_string().is_empty());
            }
        }

        /// Splitting fields never panics on any text; PMI-2's `;;` escape round-trips.
        #[test]
        fn fields_of_any_text(
            s in ".{0,200}",
            f in proptest::collection::vec(("[^=;]{1,10}", ".{0,20}"), 0..8),
        ) {
            fields(Flavor::Pmi1, &s);
            fields(Flavor::Pmi2, &s);
            let enc: String = f
                .iter()
                .map(|(k, v)| format!("{}={};", k.replace(';', ";;"), v.replace(';', ";;")))
                .collect();
            prop_assert_eq!(fields(Flavor::Pmi2, &enc), f);
            let _ = trunc(&s);
        }

        /// Values survive the wire whatever their bytes; unescaping any text never panics.
        #[test]
        fn escape_round_trips(v in proptest::collection::vec(any::<u8>(), 0..300), s in ".{0,100}") {
            let e = escape(&v);
            prop_assert!(e.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:/+-%".contains(&b)));
            prop_assert_eq!(unescape(&e), Some(v));
            if let Some(u) = unescape(&s) {
                prop_assert!(u.len() <= s.len());
            }
        }

        /// A process mapping of any text and any numbers never panics, and comes back at once
        /// even when a block claims more nodes and ranks than exist; a valid one places every
        /// rank as its blocks say, repeating them.
        #[test]
        fn process_mappings(
            s in ".{0,60}",
            nums in proptest::collection::vec(
                prop_oneof![0usize..5, Just(usize::MAX), any::<usize>(), (0usize..64).prop_map(|d| usize::MAX - d)],
                3..9,
            ),
            blocks in proptest::collection::vec((0usize..8, 0usize..4, 0usize..4), 1..4),
            size in 0usize..300,
        ) {
            parse_mapping(&s, size);
            let odd = format!(
                "(vector,{})",
                nums.chunks(3).map(|c| format!("({})", c.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","))).collect::<Vec<_>>().join(",")
            );
            if let Some(n) = parse_mapping(&odd, size) {
                prop_assert_eq!(n.len(), size);
            }
            let m = format!(
                "(vector,{})",
                blocks.iter().map(|(s, c, p)| format!("({s},{c},{p})")).collect::<Vec<_>>().join(",")
            );
            let pattern: Vec<usize> = blocks
                .iter()
                .flat_map(|&(s, c, p)| (s..s + c).flat_map(move |n| std::iter::repeat_n(n, p)))
                .collect();
            let want = if pattern.is_empty() && size > 0 {
                None
            } else {
                Some((0..size).map(|i| pattern[i % pattern.len()]).collect::<Vec<_>>())
            };
            prop_assert_eq!(parse_mapping(&m, size), want);
        }
    }

    /// What `process_mappings` found: a block claiming 10^12 nodes for a job of two ranks ran
    /// its loops to the end (hours) after the two ranks had their nodes.
    #[test]
    fn a_mapping_claiming_huge_blocks_returns_at_once() {
        let t = std::time::Instant::now();
        assert_eq!(
            parse_mapping("(vector,(0,1000000000000,1))", 2),
            Some(vec![0, 1])
        );
        assert_eq!(
            parse_mapping(
                "(vector,(0,18446744073709551615,0),(1,1,18446744073709551615))",
                3
            ),
            Some(vec![1, 1, 1])
        );
        assert_eq!(
            parse_mapping("(vector,(1,18446744073709551615,1))", 1),
            None
        );
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
