//! Results: the JSON format every performance figure of the project comes in, and the terminal
//! table, CSV and NetPIPE renderings of it.

use super::stats::Summary;
use super::BenchArgs;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{self, Write};

/// Format tag of the JSON files.
pub const FORMAT: &str = "volley-bench/1";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub format: String,
    pub test: String,
    /// UTC, ISO 8601.
    pub date: String,
    pub machine: Machine,
    pub volley: Revision,
    pub options: BTreeMap<String, String>,
    pub sizes: Vec<u64>,
    pub placement: Placement,
    pub series: Vec<Series>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_model: String,
    pub cores: usize,
    pub kernel: String,
    pub hostname: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Revision {
    pub version: String,
    pub revision: String,
}

/// Where the two ranks ran, and how fast their cores talked before and after the run (a
/// cache-line ping-pong, one-way ns): a run whose probe changed a lot was disturbed.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Placement {
    pub cpus: Option<String>,
    pub probe_before_ns: Option<f64>,
    pub probe_after_ns: Option<f64>,
}

/// One curve: a transport (and waiting mode) over the sizes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Series {
    pub label: String,
    pub transport: String,
    pub points: Vec<Point>,
}

/// One size of one series.
///
/// `time_us` summarises the samples: for pingpong the one-way time (round trip / 2); for stream
/// and bibw the time of a whole stream of `bytes_per_sample`; for rate the time of a window; for
/// overlap the time of isend + computation + wait; for idle the wake-up latency.
/// `mbytes_per_s` = `bytes_per_sample` / `time_us.median` (bytes per µs = MB/s), so that
/// throughput x time = bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub bytes: u64,
    /// Iterations measured (round trips, streams, windows, ...), over all repetitions.
    pub iterations: u64,
    /// Timing samples behind `time_us` (small ping-pongs time batches of 10 round trips).
    pub samples: u64,
    pub time_us: Summary,
    pub bytes_per_sample: u64,
    pub mbytes_per_s: f64,
    pub msgs_per_s: f64,
    /// CPU time (user + system) of rank 0 per iteration, where it means something.
    pub cpu_us_per_iter: Option<f64>,
    /// Test-specific figures: logp's os_us, or_us, g_us, l_us, memcpy_limit_us; overlap's
    /// overlap and t_comm_us; idle's cpu_fraction.
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Placement {
    /// A warning when the core-to-core probe moved by more than 2x during the run: the virtual
    /// CPUs were moved or another process competed, and the figures mix two machines.
    pub fn drift_warning(&self) -> Option<String> {
        let (a, b) = (self.probe_before_ns?, self.probe_after_ns?);
        let ratio = a.max(b) / a.min(b).max(1e-9);
        (ratio > 2.0).then(|| {
            format!("warning: the core-to-core probe moved from {a:.0} ns to {b:.0} ns during the run ({ratio:.1}x): the placement changed or something competed for the CPUs; rerun before trusting these figures")
        })
    }
}

impl Machine {
    pub fn this() -> Machine {
        // The same identity a machine's profile is checked against (`volley tune`).
        let hw = volley::profile::Hardware::this();
        Machine {
            cpu_model: hw.cpu_model,
            cores: hw.cpus,
            kernel: hw.kernel,
            hostname: read_trim("/proc/sys/kernel/hostname"),
        }
    }
}

/// Seconds since the epoch as an ISO 8601 UTC date (civil-from-days, no time-zone database).
pub fn iso_date(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

impl Results {
    pub fn new(
        test: &str,
        a: &BenchArgs,
        sizes: Vec<u64>,
        placement: Placement,
        series: Vec<Series>,
    ) -> Results {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut options = BTreeMap::new();
        options.insert("iters".into(), a.iters.to_string());
        options.insert("budget_ms".into(), a.budget_ms.to_string());
        options.insert("reps".into(), a.reps.to_string());
        options.insert("stream_bytes".into(), a.stream_bytes.to_string());
        options.insert("window".into(), a.window.to_string());
        options.insert("vs".into(), a.vs.clone().unwrap_or_default());
        options.insert("perturb".into(), a.perturb.to_string());
        options.insert("cold".into(), a.cold.to_string());
        options.insert(
            "wait".into(),
            std::env::var("VOLLEY_WAIT").unwrap_or_else(|_| "spin".into()),
        );
        Results {
            format: FORMAT.into(),
            test: test.into(),
            date: iso_date(secs),
            machine: Machine::this(),
            volley: Revision {
                version: env!("CARGO_PKG_VERSION").into(),
                revision: option_env!("VOLLEY_GIT_REVISION")
                    .unwrap_or("unknown")
                    .into(),
            },
            options,
            sizes,
            placement,
            series,
        }
    }
}

fn open_out(path: &str) -> io::Result<Box<dyn Write>> {
    Ok(if path == "-" {
        Box::new(io::stdout().lock())
    } else {
        Box::new(io::BufWriter::new(std::fs::File::create(path)?))
    })
}

/// Writes the outputs the options ask for; the table goes to standard output unless JSON or CSV
/// went there.
pub fn emit(r: &Results, a: &BenchArgs) -> io::Result<()> {
    let mut stdout_taken = false;
    if let Some(p) = &a.json {
        let mut w = open_out(p)?;
        serde_json::to_writer_pretty(&mut w, r).map_err(io::Error::other)?;
        writeln!(w)?;
        stdout_taken |= p == "-";
    }
    if let Some(p) = &a.csv {
        let mut w = open_out(p)?;
        write_csv(r, &mut w)?;
        stdout_taken |= p == "-";
    }
    if let Some(p) = &a.netpipe {
        for s in &r.series {
            let path = if r.series.len() == 1 {
                p.clone()
            } else {
                format!("{p}.{}", s.transport.replace('/', "-"))
            };
            let mut w = open_out(&path)?;
            write_netpipe(s, &mut w)?;
        }
    }
    if !stdout_taken {
        write_table(r, &mut io::stdout().lock())?;
    }
    Ok(())
}

pub fn write_csv(r: &Results, w: &mut dyn Write) -> io::Result<()> {
    writeln!(w, "test,transport,bytes,iterations,trim80_us,median_us,min_us,p99_us,max_us,mbytes_per_s,msgs_per_s,cpu_us_per_iter")?;
    for s in &r.series {
        for p in &s.points {
            let t = &p.time_us;
            writeln!(
                w,
                "{},{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.2},{:.1},{}",
                r.test,
                s.transport,
                p.bytes,
                p.iterations,
                t.trim80,
                t.median,
                t.min,
                t.p99,
                t.max,
                p.mbytes_per_s,
                p.msgs_per_s,
                p.cpu_us_per_iter
                    .map(|c| format!("{c:.4}"))
                    .unwrap_or_default()
            )?;
        }
    }
    Ok(())
}

/// NetPIPE's np.out: bytes, throughput in Mbps (10^6 bits/s), time in seconds, one line per size.
pub fn write_netpipe(s: &Series, w: &mut dyn Write) -> io::Result<()> {
    for p in &s.points {
        let secs = p.time_us.median / 1e6;
        let mbps = if secs > 0.0 {
            p.bytes_per_sample as f64 * 8.0 / secs / 1e6
        } else {
            0.0
        };
        writeln!(w, "{:8} {:.6} {:12.8}", p.bytes, mbps, secs)?;
    }
    Ok(())
}

/// Reads NetPIPE's np.out back (ping-pong: the time is one-way).
pub fn parse_netpipe(text: &str, label: &str, transport: &str) -> Result<Series, String> {
    let mut points = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f.len() < 3 {
            return Err(format!(
                "line {}: expected bytes, Mbps and seconds: {line:?}",
                i + 1
            ));
        }
        let bytes: u64 = f[0]
            .parse()
            .map_err(|_| format!("line {}: bad byte count {:?}", i + 1, f[0]))?;
        let secs: f64 = f[2]
            .parse()
            .map_err(|_| format!("line {}: bad time {:?}", i + 1, f[2]))?;
        let us = secs * 1e6;
        let t = Summary {
            n: 1,
            trim80: us,
            median: us,
            min: us,
            p99: us,
            max: us,
        };
        points.push(Point {
            bytes,
            iterations: 0,
            samples: 1,
            time_us: t,
            bytes_per_sample: bytes,
            mbytes_per_s: if us > 0.0 { bytes as f64 / us } else { 0.0 },
            msgs_per_s: if us > 0.0 { 1e6 / us } else { 0.0 },
            cpu_us_per_iter: None,
            extra: BTreeMap::new(),
        });
    }
    if points.is_empty() {
        return Err("no data lines".into());
    }
    Ok(Series {
        label: label.into(),
        transport: transport.into(),
        points,
    })
}

fn fmt_bytes(b: u64) -> String {
    match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// The aligned table: one row per size, for each transport the median time and the throughput
/// (and the test's own figures).
pub fn write_table(r: &Results, w: &mut dyn Write) -> io::Result<()> {
    let time_name = match r.test.as_str() {
        "pingpong" | "logp" => "1way_us",
        "stream" | "bibw" => "stream_us",
        "rate" => "window_us",
        "idle" => "wake_us",
        _ => "time_us",
    };
    writeln!(
        w,
        "# volley bench {} — {} ({} cores), kernel {}, volley {} ({})",
        r.test,
        r.machine.cpu_model,
        r.machine.cores,
        r.machine.kernel,
        r.volley.version,
        r.volley.revision
    )?;
    let probe = |p: Option<f64>| {
        p.map(|v| format!("{v:.1} ns"))
            .unwrap_or_else(|| "n/a".into())
    };
    writeln!(
        w,
        "# cpus {}; core-to-core probe before {}, after {}; medians of {} repetition(s), interleaved",
        r.placement.cpus.as_deref().unwrap_or("unpinned"),
        probe(r.placement.probe_before_ns),
        probe(r.placement.probe_after_ns),
        r.options.get("reps").map(String::as_str).unwrap_or("?")
    )?;
    if let Some(warning) = r.placement.drift_warning() {
        eprintln!("volley bench: {warning}");
        writeln!(w, "# {warning}")?;
    }
    let extras: Vec<String> = r
        .series
        .first()
        .and_then(|s| s.points.first())
        .map(|p| p.extra.keys().cloned().collect())
        .unwrap_or_default();
    for s in &r.series {
        writeln!(w, "\n## {}", s.label)?;
        write!(
            w,
            "{:>8} {:>10} {:>12} {:>12} {:>12} {:>12}",
            "bytes", "iters", time_name, "trim80_us", "p99_us", "MB/s"
        )?;
        for e in &extras {
            write!(w, " {e:>14}")?;
        }
        writeln!(w, " {:>10}", "cpu_us/it")?;
        for p in &s.points {
            write!(
                w,
                "{:>8} {:>10} {:>12.3} {:>12.3} {:>12.3} {:>12.1}",
                fmt_bytes(p.bytes),
                p.iterations,
                p.time_us.median,
                p.time_us.trim80,
                p.time_us.p99,
                p.mbytes_per_s
            )?;
            for e in &extras {
                write!(w, " {:>14.4}", p.extra.get(e).copied().unwrap_or(f64::NAN))?;
            }
            writeln!(
                w,
                " {:>10}",
                p.cpu_us_per_iter
                    .map(|c| format!("{c:.3}"))
                    .unwrap_or_else(|| "-".into())
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_flagged_beyond_2x() {
        let p = |a, b| Placement {
            cpus: None,
            probe_before_ns: Some(a),
            probe_after_ns: Some(b),
        };
        assert!(p(50.0, 90.0).drift_warning().is_none());
        assert!(p(50.0, 260.0)
            .drift_warning()
            .unwrap()
            .contains("50 ns to 260 ns"));
        assert!(p(260.0, 50.0).drift_warning().is_some());
        assert!(Placement::default().drift_warning().is_none());
    }

    #[test]
    fn dates() {
        assert_eq!(iso_date(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_date(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso_date(1_795_000_000), "2026-11-18T11:06:40Z");
    }

    #[test]
    fn netpipe_round_trip() {
        let s = parse_netpipe(
            "       1 20.407844   0.00000037\n   65536 46442.036499   0.00001077\n",
            "np",
            "ompi",
        )
        .unwrap();
        assert_eq!(s.points.len(), 2);
        assert_eq!(s.points[1].bytes, 65536);
        assert!((s.points[1].time_us.median - 10.77).abs() < 1e-6);
        let mut out = Vec::new();
        write_netpipe(&s, &mut out).unwrap();
        let back = parse_netpipe(std::str::from_utf8(&out).unwrap(), "np", "ompi").unwrap();
        for (a, b) in s.points.iter().zip(&back.points) {
            assert_eq!(a.bytes, b.bytes);
            assert!((a.time_us.median - b.time_us.median).abs() < 1e-5);
        }
        // Throughput in Mbps is recomputed from bytes and time, as NetPIPE does.
        let line = std::str::from_utf8(&out)
            .unwrap()
            .lines()
            .nth(1)
            .unwrap()
            .to_string();
        let mbps: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!((mbps - 65536.0 * 8.0 / 10.77).abs() / mbps < 1e-6, "{line}");
        assert!(parse_netpipe("garbage here", "x", "y").is_err());
        assert!(parse_netpipe("", "x", "y").is_err());
    }
}
