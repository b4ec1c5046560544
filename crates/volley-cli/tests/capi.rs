//! volley's C face: the C examples (examples/c) built with `make` and `pkg-config volley` only,
//! run under `volley run`: ping-pong 0 B to 64 MiB every byte checked, an active port with a C
//! handler, the endpoint's descriptor with poll(), and the API used wrongly (its documented
//! codes). Then valgrind over each: no memory error, no leak.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds examples/c once (as a user would: pkg-config finds libvolley through
/// PKG_CONFIG_PATH) into a directory of its own; the directory.
fn built() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let release = Path::new(VOLLEY).parent().unwrap().to_path_buf();
        let pc = release.join("pkgconfig");
        assert!(
            pc.join("volley.pc").exists(),
            "{} is missing: build the C library (cargo build --release --workspace)",
            pc.display()
        );
        let out = std::env::temp_dir().join(format!("volley-capi-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).unwrap();
        let src = repo().join("examples/c");
        for f in [
            "Makefile",
            "check.h",
            "pingpong.c",
            "active.c",
            "poll.c",
            "misuse.c",
        ] {
            std::fs::copy(src.join(f), out.join(f)).unwrap();
        }
        let o = Command::new("make")
            .arg("-C")
            .arg(&out)
            .env("PKG_CONFIG_PATH", &pc)
            .output()
            .expect("run make");
        assert!(
            o.status.success(),
            "make -C examples/c failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        out
    })
}

fn prog(name: &str) -> String {
    built().join(name).display().to_string()
}

#[test]
fn c_pingpong_carries_0_bytes_to_64_mib_intact() {
    let out = ok(volley(&["-n", "2", &prog("pingpong")], &[]));
    for s in [
        0u64,
        1,
        3,
        4,
        5,
        4095,
        4096,
        4097,
        1 << 20,
        (64 << 20) - 1,
        64 << 20,
    ] {
        assert!(
            out.contains(&format!("pingpong size={s} ok")),
            "size {s} missing:\n{out}"
        );
    }
    assert_eq!(out.matches("timing size=").count(), 2, "two timings: {out}");
}

#[test]
fn c_active_port_handler_sees_every_message_in_order() {
    let out = ok(volley(&["-n", "4", &prog("active"), "3000"], &[]));
    assert_eq!(values(&out, "received"), vec!["9000"], "{out}");
    assert_eq!(values(&out, "bad"), vec!["0"], "{out}");
}

#[test]
fn c_poll_on_the_endpoint_descriptor_wakes_once_per_message() {
    let out = ok(volley(&["-n", "2", &prog("poll"), "30"], &[]));
    assert_eq!(values(&out, "received"), vec!["30"], "{out}");
    // Each wake-up is spent once consumed: the descriptor is not left readable (an event loop
    // would spin). A message may find the loop awake, so fewer is fine.
    let sleeps: u64 = values(&out, "sleeps")[0].parse().unwrap();
    assert!(sleeps <= 30, "{sleeps} wake-ups for 30 messages: {out}");
}

#[test]
fn c_api_misuse_gets_the_documented_codes_and_loses_nothing() {
    let out = ok(volley(&["-n", "2", &prog("misuse")], &[]));
    assert_eq!(values(&out, "checks").len(), 2, "{out}");
    assert!(out.matches(" ok").count() >= 2, "{out}");
}

#[test]
fn valgrind_finds_no_error_or_leak_in_the_c_examples() {
    let vg = [
        "valgrind",
        "-q",
        "--error-exitcode=99",
        "--leak-check=full",
        "--errors-for-leak-kinds=definite",
        "--show-leak-kinds=definite",
    ];
    for (p, args) in [
        ("pingpong", &["300000", "notime"][..]),
        ("active", &["300"][..]),
        ("poll", &["5"][..]),
        ("misuse", &[][..]),
    ] {
        let exe = prog(p);
        let mut a = vec!["-n", "2"];
        a.extend_from_slice(&vg);
        a.push(&exe);
        a.extend_from_slice(args);
        // Memcheck cannot see the bytes a helping sender writes into this process's buffer
        // (process_vm_writev from another process): the receiver copies alone under it.
        let o = volley(&a, &[("VOLLEY_SINGLE_COPY_HELP", "off")]);
        let (out, err) = text(&o);
        assert!(
            o.status.success(),
            "{p} under valgrind ({:?}):\n{out}\n{err}",
            o.status
        );
        assert!(!err.contains("=="), "{p}: valgrind reported:\n{err}");
    }
}
