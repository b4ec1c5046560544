//! `volley bench` and `volley plot`: every test mode runs a tiny sweep (volley and the TCP
//! baseline, as real processes), and what comes out must be well formed and agree with itself.
//! These tests check behaviour, never speed.

mod common;
use common::VOLLEY;
use serde_json::Value;
use std::process::Command;

/// A scratch directory of one test's files, removed when the test is done with it (also when
/// it fails): each CI run used to leave one behind.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("volley-bench-test-{}-{k}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    fn file(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SIZES: [u64; 3] = [8, 4096, 100_000];
const REPS: u64 = 2;
const ITERS: u64 = 20;
const STREAM: u64 = 200_000;
const WINDOW: u64 = 8;

/// Runs `volley bench TEST` on a tiny sweep with TCP beside volley; returns the parsed JSON.
fn bench(test: &str, extra: &[&str]) -> Value {
    let scratch = Scratch::new();
    let json = scratch.file(&format!("{test}.json"));
    let mut args = vec![
        "bench".to_string(),
        test.into(),
        "--sizes".into(),
        "8,4K,100000".into(),
        "--vs".into(),
        "tcp".into(),
        "--reps".into(),
        REPS.to_string(),
        "--iters".into(),
        ITERS.to_string(),
        "--budget-ms".into(),
        "5".into(),
        "--stream-bytes".into(),
        STREAM.to_string(),
        "--window".into(),
        WINDOW.to_string(),
        "--idle-ms".into(),
        "20".into(),
        "--json".into(),
        json.to_str().unwrap().into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let o = Command::new(VOLLEY).args(&args).output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        o.status.success(),
        "volley bench {test} failed\n{out}\n{err}"
    );
    assert!(
        out.contains(&format!("# volley bench {test}")),
        "table missing:\n{out}"
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("well-formed JSON")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks everything every result must satisfy, and returns the series by transport.
fn check_common(r: &Value, test: &str) -> Vec<(String, Vec<Value>)> {
    assert_eq!(r["format"], "volley-bench/1");
    assert_eq!(r["test"], test);
    let date = r["date"].as_str().unwrap();
    assert_eq!(date.len(), 20, "{date}");
    assert!(
        date.ends_with('Z') && &date[4..5] == "-" && &date[10..11] == "T",
        "{date}"
    );
    assert!(r["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(!r["machine"]["kernel"].as_str().unwrap().is_empty());
    assert!(!r["volley"]["revision"].as_str().unwrap().is_empty());
    for k in ["probe_before_ns", "probe_after_ns"] {
        assert!(f(&r["placement"][k]) > 0.0, "{k}");
    }
    let mut out = Vec::new();
    for s in r["series"].as_array().unwrap() {
        let points = s["points"].as_array().unwrap().clone();
        for p in &points {
            let t = &p["time_us"];
            let (min, med, p99, max, trim) = (
                f(&t["min"]),
                f(&t["median"]),
                f(&t["p99"]),
                f(&t["max"]),
                f(&t["trim80"]),
            );
            assert!(min > 0.0 && min <= med && med <= p99 && p99 <= max, "{t}");
            assert!(min <= trim && trim <= max, "{t}");
            assert_eq!(t["n"], p["samples"]);
            // Throughput x time = bytes.
            let bytes = f(&p["bytes_per_sample"]);
            let tp = f(&p["mbytes_per_s"]);
            assert!(
                (tp * med - bytes).abs() <= 1e-6 * bytes.max(1.0),
                "throughput {tp} x time {med} != {bytes}"
            );
            assert!(p["iterations"].as_u64().unwrap() >= REPS, "{p}");
        }
        out.push((s["transport"].as_str().unwrap().to_string(), points));
    }
    out
}

fn sizes_of(points: &[Value]) -> Vec<u64> {
    points
        .iter()
        .map(|p| p["bytes"].as_u64().unwrap())
        .collect()
}

#[test]
fn pingpong_json_agrees_with_itself_and_netpipe_output_parses_back() {
    let scratch = Scratch::new();
    let np = scratch.file("np");
    let r = bench("pingpong", &["--netpipe", np.to_str().unwrap()]);
    let series = check_common(&r, "pingpong");
    let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["volley-shm", "tcp"]);
    for (name, points) in &series {
        assert_eq!(sizes_of(points), SIZES, "{name}");
        for p in points {
            // One message each way per iteration; at least the asked number per repetition.
            assert_eq!(p["bytes_per_sample"], p["bytes"]);
            assert!(p["iterations"].as_u64().unwrap() >= REPS * ITERS, "{p}");
            assert!(f(&p["cpu_us_per_iter"]) >= 0.0);
        }
    }
    // NetPIPE format: one file per transport, which parses back to the same sizes and times.
    for (name, points) in &series {
        let file = format!("{}.{name}", np.display());
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), SIZES.len(), "{text}");
        let out = scratch.file(&format!("import-{name}.json"));
        let st = Command::new(VOLLEY)
            .args([
                "import-netpipe",
                &file,
                "--label",
                "back",
                "-o",
                out.to_str().unwrap(),
            ])
            .status()
            .unwrap();
        assert!(st.success());
        let back: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let bp = back["series"][0]["points"].as_array().unwrap();
        assert_eq!(sizes_of(bp), SIZES);
        for (a, b) in points.iter().zip(bp) {
            let (ta, tb) = (f(&a["time_us"]["median"]), f(&b["time_us"]["median"]));
            assert!(
                (ta - tb).abs() <= 0.011,
                "{name}: {ta} vs {tb} after the NetPIPE round trip"
            );
        }
    }
}

/// Kernel UDP beside volley, blocking and polled without blocking (`udp-busy`, sockperf's
/// `--nonblocked`: issue 15's yardstick for busy-polled latency across hosts): both ping-pong
/// every size, a message of several datagrams included, and both are left out, with a word
/// why, of a test that needs flow control.
#[test]
fn kernel_udp_runs_blocking_and_busy_polled() {
    let scratch = Scratch::new();
    let json = scratch.file("udp.json");
    let o = Command::new(VOLLEY)
        .args(["bench", "pingpong", "--sizes", "8,4K,100000", "--vs"])
        .args([
            "udp,udp-busy",
            "--reps",
            "2",
            "--iters",
            "20",
            "--budget-ms",
            "5",
        ])
        .args(["--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let series = check_common(&r, "pingpong");
    let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["volley-shm", "udp", "udp-busy"]);
    for (name, points) in &series {
        assert_eq!(sizes_of(points), [8, 4096, 100_000], "{name}");
    }
    let o = Command::new(VOLLEY)
        .args(["bench", "stream", "--sizes", "8", "--vs", "udp-busy"])
        .args(["--reps", "1", "--budget-ms", "5", "--stream-bytes", "10000"])
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("udp-busy left out") && err.contains("no flow control"),
        "{err}"
    );
    assert!(!out.contains("## udp-busy"), "{out}");
}

#[test]
fn stream_bibw_and_rate_count_what_they_move() {
    for test in ["stream", "bibw", "rate"] {
        let r = bench(test, &[]);
        let series = check_common(&r, test);
        assert_eq!(series.len(), 2, "{test}: volley and tcp");
        for (name, points) in &series {
            assert_eq!(sizes_of(points), SIZES, "{test} {name}");
            for p in points {
                let size = p["bytes"].as_u64().unwrap();
                let per = p["bytes_per_sample"].as_u64().unwrap();
                let want = match test {
                    "stream" => (STREAM / size).clamp(1, 100_000) * size,
                    "bibw" => 2 * (STREAM / size).clamp(1, 100_000) * size,
                    _ => WINDOW * size,
                };
                assert_eq!(per, want, "{test} {name} size {size}");
                assert!(f(&p["msgs_per_s"]) > 0.0);
            }
        }
    }
}

#[test]
fn logp_reports_the_cost_model_beside_its_limit() {
    let r = bench("logp", &[]);
    for (name, points) in check_common(&r, "logp") {
        assert_eq!(sizes_of(&points), SIZES, "{name}");
        for p in &points {
            for k in ["os_us", "or_us", "g_us", "l_us", "memcpy_limit_us"] {
                let v = f(&p["extra"][k]);
                assert!(v >= 0.0 && v.is_finite(), "{name} {k} = {v}");
            }
        }
    }
}

#[test]
fn overlap_runs_where_non_blocking_sends_exist() {
    let r = bench("overlap", &[]);
    let series = check_common(&r, "overlap");
    // Kernel sockets have no non-blocking send of a whole message: left out, with a word why.
    assert_eq!(series.len(), 1);
    assert_eq!(series[0].0, "volley-shm");
    for p in &series[0].1 {
        let o = f(&p["extra"]["overlap"]);
        assert!((0.0..=1.0).contains(&o), "{o}");
        assert!(f(&p["extra"]["t_comm_us"]) > 0.0);
    }
}

/// Each waiting mode, beside the floor of a blocked wake-up on this machine (a bare eventfd the
/// leader writes, issue 14 point 3) and a kernel socket's blocking read.
#[test]
fn idle_measures_each_waiting_mode() {
    let r = bench("idle", &[]);
    let series = check_common(&r, "idle");
    let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "volley-shm/busy",
            "volley-shm/block",
            "volley-shm/spin",
            "eventfd/blocking",
            "tcp/blocking"
        ]
    );
    for (name, points) in &series {
        assert_eq!(sizes_of(points), [8]);
        let cpu = f(&points[0]["extra"]["cpu_fraction"]);
        assert!((0.0..=1.5).contains(&cpu), "{name}: cpu fraction {cpu}");
    }
}

#[test]
fn plot_makes_valid_svg_and_png() {
    let r = bench("pingpong", &["--label", "ci"]);
    let scratch = Scratch::new();
    let json = scratch.file("plot-input.json");
    std::fs::write(&json, serde_json::to_string(&r).unwrap()).unwrap();
    let np = scratch.file("peer.np.out");
    std::fs::write(
        &np,
        "       8 20.0   0.00000040\n    4096 8000.0   0.0000041\n",
    )
    .unwrap();
    let svg = scratch.file("fig.svg");
    let png = scratch.file("fig.png");
    for out in [&svg, &png] {
        let o = Command::new(VOLLEY)
            .args([
                "plot",
                json.to_str().unwrap(),
                &format!("{}=NetPIPE peer", np.display()),
                "-o",
                out.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(
        s.starts_with("<svg") && s.trim_end().ends_with("</svg>"),
        "not an SVG document"
    );
    for label in [
        "ci volley-shm",
        "ci tcp",
        "NetPIPE peer",
        "message size (bytes)",
        "Latency",
        "Throughput",
    ] {
        assert!(s.contains(label), "SVG lacks {label:?}");
    }
    assert!(
        s.matches("<polyline").count() >= 6,
        "one curve per series and panel"
    );
    let p = std::fs::read(&png).unwrap();
    assert_eq!(&p[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&p[12..16], b"IHDR");
    let (w, h) = (
        u32::from_be_bytes(p[16..20].try_into().unwrap()),
        u32::from_be_bytes(p[20..24].try_into().unwrap()),
    );
    assert_eq!((w, h), (1400, 560));
    assert!(
        p.len() > 10_000,
        "PNG of {} bytes is suspiciously empty",
        p.len()
    );

    // Bad input: a clear error, not a crash.
    let o = Command::new(VOLLEY)
        .args(["plot", "/nonexistent.json", "-o", svg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent.json"));
    let o = Command::new(VOLLEY)
        .args(["plot", json.to_str().unwrap(), "-o", "x.gif"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains(".svg or .png"));
}

#[test]
fn bad_bench_options_are_clear_errors() {
    for (args, want) in [
        (vec!["bench", "nosuch"], "unknown test"),
        (vec!["bench", "pingpong", "--sizes", "abc"], "not a size"),
        (
            vec!["bench", "pingpong", "--vs", "carrier-pigeon"],
            "unknown transport",
        ),
    ] {
        let o = Command::new(VOLLEY).args(&args).output().unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// The header line of a comparison table (`bytes ...`) and the numbers of the row for `size`:
/// the size, then each median with its spread, then the ratios.
fn table_row(out: &str, size: &str) -> (String, Vec<f64>) {
    let head = out
        .lines()
        .find(|l| l.trim_start().starts_with("bytes"))
        .unwrap_or_else(|| panic!("no header:\n{out}"));
    let row = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(size))
        .unwrap_or_else(|| panic!("no row for {size}:\n{out}"));
    let nums = row
        .split(|c: char| c.is_whitespace() || "()-x".contains(c))
        .filter_map(|w| w.parse().ok())
        .collect();
    (head.to_string(), nums)
}

/// A collective table's row for `size` with volley, Open MPI and MPICH: three medians with
/// their spread, then two ratios, all positive numbers.
fn three_mpis_row(out: &str, size: &str, test: &str) {
    let (_, nums) = table_row(out, size);
    assert_eq!(nums.len(), 1 + 3 * 3 + 2, "{test} {size}: {nums:?}");
    assert!(
        nums[1..].iter().all(|&x| x > 0.0 && x.is_finite()),
        "{test} {size}: {nums:?}"
    );
}

/// MPIs beside volley's own ping-pong: volley's bench, then the driver's MPI ping-pong built
/// with volley's, Open MPI's and MPICH's mpicc, in turn; each column a one-way latency, each
/// ratio a column over volley's own (what that MPI adds), kernel transports in the same table.
#[test]
fn pingpong_bench_puts_mpis_beside_volley_itself() {
    let o = Command::new(VOLLEY)
        .args([
            "bench",
            "pingpong",
            "--sizes",
            "8,64K",
            "--vs",
            "mpi,openmpi,mpich,tcp",
        ])
        .args(["--reps", "2", "--budget-ms", "20", "--iters", "50"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}\n{err}");
    let (head, _) = table_row(&out, "8");
    let cols: Vec<&str> = head.split_whitespace().collect();
    for col in [
        "tcp",
        "volley-mpi",
        "openmpi",
        "mpich",
        "volley-mpi/volley",
        "openmpi/volley",
        "mpich/volley",
        "tcp/volley",
    ] {
        assert!(cols.contains(&col), "{col}: {head}");
    }
    assert!(cols[1].starts_with("volley"), "volley's own first: {head}");
    for size in ["8", "65536"] {
        let (_, nums) = table_row(&out, size);
        // Five medians with their spread, then four ratios.
        assert_eq!(nums.len(), 1 + 5 * 3 + 4, "{size}: {nums:?}");
        assert!(
            nums[1..].iter().all(|&x| x > 0.0 && x.is_finite()),
            "{size}: {nums:?}"
        );
        // Each ratio is its column's median over volley's.
        for k in 1..5 {
            let want = nums[1 + 3 * k] / nums[1];
            let got = nums[16 + k - 1];
            assert!(
                (got - want).abs() <= 0.01 + 0.01 * want,
                "{size}: ratio {k}: {nums:?}"
            );
        }
    }
    assert!(!err.contains("left out"), "{err}");
    // MPIs compare only where the driver measures.
    let o = Command::new(VOLLEY)
        .args(["bench", "stream", "--vs", "openmpi"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("MPIs compare in the pingpong"));
}

/// The collective tests: one C driver built with volley's, Open MPI's and MPICH's mpicc, run by
/// each one's launcher in turn; the table has a row per size with a latency for each MPI and
/// volley's ratio to each, and the build directory is gone afterwards.
#[test]
fn collective_bench_runs_volley_beside_open_mpi_and_mpich() {
    // A temporary directory of this test's own, so that another test's bench running meanwhile
    // does not read as left behind.
    let tmp = Scratch::new();
    for test in ["allreduce", "barrier", "alltoall", "iallreduce"] {
        let o = Command::new(VOLLEY)
            .args(["bench", test, "-n", "2", "--sizes", "8,64K", "--vs"])
            .args(["openmpi,mpich", "--reps", "2", "--budget-ms", "20"])
            .env("TMPDIR", &tmp.0)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{test}: {out}\n{err}");
        let (head, _) = table_row(&out, "8");
        for col in ["volley", "openmpi", "mpich", "vs openmpi", "vs mpich"] {
            assert!(head.contains(col), "{test}: {head}");
        }
        for size in ["8", "65536"] {
            // Three medians (with their spread), then two ratios: all positive numbers.
            three_mpis_row(&out, size, test);
        }
        assert!(
            !out.contains("left out") && !err.contains("left out"),
            "{err}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&tmp.0)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("volley-bench-coll-")
        })
        .collect();
    assert!(left.is_empty(), "build directories left: {left:?}");
}

/// A barrier carries no data: without --sizes its table has one row (0 bytes), a latency.
#[test]
fn barrier_bench_has_one_row_unless_sizes_are_given() {
    let o = Command::new(VOLLEY)
        .args([
            "bench",
            "barrier",
            "-n",
            "2",
            "--reps",
            "1",
            "--budget-ms",
            "20",
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    let rows = out
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .count();
    assert_eq!(rows, 1, "{out}");
    let (_, nums) = table_row(&out, "0");
    assert!(nums.len() == 4 && nums[1] > 0.0, "{out}");
}

/// Collectives over two hosts (network namespaces of this machine): volley through its own
/// launcher, Open MPI's mpirun and MPICH's mpiexec started in the first namespace with their
/// daemons in each through the same template, placed as `volley run` places (round-robin, or
/// filling each host's slots). Each MPI's driver says its ranks ran in both namespaces, and every
/// median and ratio is a number.
#[test]
fn collective_bench_spans_hosts_for_every_mpi() {
    let h = common::hosts::Hosts::new(2, 1500);
    let list = h.list();
    let filled = format!("{}:1,{}:1", h.names[0], h.names[1]);
    for (test, hosts, cpus) in [
        ("allreduce", list.as_str(), Some("0,1")),
        ("barrier", filled.as_str(), None),
    ] {
        let mut c = Command::new(VOLLEY);
        c.args(["bench", test, "-n", "2", "--sizes", "8,4K", "--vs"])
            .args(["openmpi,mpich", "--reps", "1", "--budget-ms", "20"])
            .args(["--hosts", hosts, "--launch", "ip netns exec {host}"])
            .env("VOLLEY_TRANSPORT", "udp")
            .env("VOLLEY_PROFILE", "none");
        if let Some(l) = cpus {
            c.args(["--cpus", l]);
        }
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{test}: {out}\n{err}");
        assert!(
            out.contains("# network namespaces the ranks ran in: volley 2, openmpi 2, mpich 2"),
            "{test}: {out}\n{err}"
        );
        for size in ["8", "4096"] {
            three_mpis_row(&out, size, test);
        }
    }
    // Hosts place a collective's ranks; the two-rank tests run under `volley run --hosts`.
    let o = Command::new(VOLLEY)
        .args(["bench", "pingpong", "--hosts", &list])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("places the ranks of a collective"));
    let o = Command::new(VOLLEY)
        .args([
            "bench",
            "barrier",
            "--hosts",
            &list,
            "--launch",
            "ip netns exec",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("has no {host}"));
}
