//! volley's MPI, end to end: the MPI test programs of tests/mpi (written from the standard) built
//! with `volley mpicc` and run by `volley run`, each also built with Debian's MPICH and run by
//! its `mpirun` (so that they test MPI, not volley's reading of it); NetPIPE's NPmpi, unmodified,
//! over shared memory and across network namespaces. Needs libmpi.so next to the volley binary
//! (`cargo build --release --workspace`), MPICH (`mpicc.mpich`) and NetPIPE's source
//! (`./scripts/test` installs both).

mod common;

use common::hosts::Hosts;
use common::netpipe::{check_np_integrity, check_np_run, npmpi};
use common::{counter, text, volley, VOLLEY};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mpi")
}

/// A scratch directory for this test's binaries, removed on drop.
struct Scratch(PathBuf);
impl Scratch {
    fn new(name: &str) -> Scratch {
        // Tests run side by side, some with the same program: one directory each.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("volley-mpi-{name}-{}-{k}", std::process::id()));
        std::fs::create_dir_all(&d).expect("make a scratch directory");
        Scratch(d)
    }
}
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn must(o: Output, what: &str) -> String {
    let (out, err) = text(&o);
    assert!(
        o.status.success(),
        "{what} failed with {:?}\nstdout:\n{out}\nstderr:\n{err}",
        o.status
    );
    out
}

/// Builds tests/mpi/NAME.c with `volley mpicc` (or MPICH's mpicc) into `dir`.
fn build(dir: &Path, name: &str, mpich: bool) -> PathBuf {
    let src = sources().join(format!("{name}.c"));
    let exe = dir.join(if mpich {
        format!("{name}.mpich")
    } else {
        name.to_string()
    });
    let mut c = if mpich {
        Command::new("mpicc.mpich")
    } else {
        let mut c = Command::new(VOLLEY);
        c.arg("mpicc");
        c
    };
    c.args(["-O1", "-Wall", "-o"]).arg(&exe).arg(&src);
    let o = c.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {}: {e}; ./scripts/test installs MPICH",
            if mpich { "mpicc.mpich" } else { VOLLEY }
        )
    });
    must(o, &format!("compiling {name}.c"));
    exe
}

/// Runs `exe` with `n` ranks under volley or MPICH's launcher (with a watchdog either way).
fn launch(exe: &Path, n: usize, mpich: bool) -> Output {
    launch_with(exe, n, mpich, &[], &[])
}

fn launch_with(exe: &Path, n: usize, mpich: bool, args: &[&str], env: &[(&str, &str)]) -> Output {
    let np = n.to_string();
    let exe = exe.to_str().expect("utf-8 path");
    if mpich {
        Command::new("timeout")
            .args(["300", "mpirun.mpich", "-n", &np, exe])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run mpirun.mpich")
    } else {
        let mut full = vec!["-n", &np, exe];
        full.extend_from_slice(args);
        volley(&full, env)
    }
}

/// Builds a test program with both MPIs and runs it with each on `n` ranks; it must pass.
fn passes(name: &str, n: usize) {
    passes_with(name, n, &[], &[]);
}

/// Like `passes`, with arguments for the program and environment for volley's run.
fn passes_with(name: &str, n: usize, args: &[&str], env: &[(&str, &str)]) {
    let s = Scratch::new(name);
    for mpich in [false, true] {
        let exe = build(&s.0, name, mpich);
        let out = must(
            launch_with(&exe, n, mpich, args, env),
            &format!(
                "{name} {args:?} on {}",
                if mpich { "MPICH" } else { "volley" }
            ),
        );
        assert!(
            out.contains(&format!("{name}: ok")),
            "{name}: no ok line:\n{out}"
        );
    }
}

/// Like `passes`, on volley only, with `n` ranks over `hosts` network namespaces (MTU 1500) and
/// `env` for volley's run.
fn passes_on_hosts(name: &str, hosts: usize, n: usize, env: &[(&str, &str)]) {
    let s = Scratch::new(&format!("{name}-net"));
    let exe = build(&s.0, name, false);
    let h = Hosts::new(hosts, 1500);
    let o = h.run(n, env, &[exe.to_str().expect("utf-8 path")]);
    let out = must(o, &format!("{name}, {n} ranks on {hosts} hosts, {env:?}"));
    assert!(
        out.contains(&format!("{name}: ok")),
        "{name}: no ok line:\n{out}"
    );
}

#[test]
fn matching_wildcards_and_order() {
    passes("matching", 4);
}

#[test]
fn matching_with_more_ranks_than_cores() {
    passes("matching", 9);
}

/// MPI_Sendrecv: rings at every size up to 8 MiB (large messages both ways at once), a message
/// here before the call, MPI_PROC_NULL on either side, with itself, wildcards, strided types,
/// order and a truncated receive whose send still goes out; on one host with single copy on
/// and off (its fast paths take the receive or the send first), and on three ranks over two
/// hosts (udp, with loss and reordering).
#[test]
fn sendrecv_exchanges_without_deadlock_and_keeps_order() {
    for n in [1, 2, 3, 4] {
        passes("sendrecv", n);
    }
    passes_with("sendrecv", 3, &[], &[("VOLLEY_SINGLE_COPY", "off")]);
    passes_on_hosts("sendrecv", 2, 3, &[("VOLLEY_TRANSPORT", "udp")]);
    passes_on_hosts(
        "sendrecv",
        2,
        3,
        &[
            ("VOLLEY_TRANSPORT", "udp"),
            ("VOLLEY_FAULTS", "loss=0.02,reorder=0.1,delay_us=50,seed=11"),
        ],
    );
}

/// Many receives posted at once, of many tags and sources, wildcards among them: each message
/// goes to the oldest posted receive that accepts it whether it came before the receives, after
/// them or while they were posted; those that get none cancel; the rest wait in order; wanted
/// messages get past more unwanted ones than a ring holds. With the ranks' rings read directly
/// (4) and through the ready summary (9), and between two hosts over udp.
#[test]
fn many_posted_receives_match_in_mpi_order() {
    for n in [4, 9] {
        passes("many_posted", n);
    }
    passes_on_hosts("many_posted", 2, 4, &[("VOLLEY_TRANSPORT", "udp")]);
}

/// A receive started by MPI_Irecv is posted when the call returns, however volley holds it
/// back: a later probe never sees its message, receives started later (or a blocking one) come
/// after it, large receives and sends both ways do not deadlock, it can be cancelled, and tests
/// alone complete it; on one host and over udp between two.
#[test]
fn irecv_is_posted_when_it_returns() {
    for n in [2, 3] {
        passes("irecv_posted", n);
    }
    passes_on_hosts("irecv_posted", 2, 2, &[("VOLLEY_TRANSPORT", "udp")]);
}

/// MPI_Isendrecv and MPI_Isendrecv_replace (MPI-4.0): rings small and large, several at once,
/// a strided replace, MPI_PROC_NULL, with itself, and a freed request (at 1 rank every exchange
/// is with itself; at 2 both neighbours are one rank).
#[test]
fn isendrecv_completes_both_halves_with_the_receives_status() {
    for n in [1, 2, 3] {
        passes("isendrecv", n);
    }
}

/// A broadcast's root runs ahead of receivers that pause before each broadcast, then a barrier
/// follows: each receiver still gets every broadcast's data and count (volley's shared-memory
/// barrier once overwrote the count of a broadcast a receiver had not read yet).
#[test]
fn a_barrier_after_broadcasts_the_root_ran_ahead_of() {
    for n in [2, 3] {
        passes("bcast_ahead", n);
    }
}

/// volley's hot path allocates nothing: after a warm-up, point-to-point calls and short
/// collectives between two ranks of one host make no allocation on the calling thread (the
/// program counts glibc's allocator entry points; volley only, as it checks the implementation).
#[test]
fn point_to_point_and_short_collectives_allocate_nothing() {
    let s = Scratch::new("no_alloc");
    let exe = build(&s.0, "no_alloc", false);
    let out = must(launch_with(&exe, 2, false, &[], &[]), "no_alloc on volley");
    assert!(out.contains("no_alloc: ok"), "no_alloc: no ok line:\n{out}");
}

/// MPI_Comm_split_type's MPI-4.0 types on one host (HW_UNGUIDED has no smaller level there).
#[test]
fn split_type_shared_and_hardware_guided_on_one_host() {
    for n in [1, 3, 4] {
        passes("split_type", n);
    }
}

/// MPI_T on volley and MPICH (the program is a tool that knows no MPI in particular); on volley,
/// a setting given in the environment reads back as a control variable with its origin, and
/// the counters that are performance variables move with traffic.
#[test]
fn mpi_t_lists_and_reads_volleys_settings_and_counters() {
    let env = [("VOLLEY_EAGER_BYTES", "12345")];
    for n in [1, 3] {
        passes_with("mpi_t", n, &["VOLLEY_EAGER_BYTES"], &env);
    }
    let s = Scratch::new("mpi_t-values");
    let exe = build(&s.0, "mpi_t", false);
    let out = must(
        launch_with(&exe, 2, false, &["VOLLEY_EAGER_BYTES"], &env),
        "mpi_t on volley",
    );
    assert!(
        out.contains("cvar VOLLEY_EAGER_BYTES = 12345 (environment)"),
        "{out}"
    );
    let moved: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("counters moved: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no counters line:\n{out}"));
    assert!(moved > 0, "no counter moved with traffic:\n{out}");
}

/// MPI-4.0's sessions: MPI started by MPI_Session_init alone, and beside MPI_Init (the world
/// model ending before the last session does).
#[test]
fn sessions_with_and_without_the_world_model() {
    for n in [1, 3] {
        passes("session", n);
        passes_with("session", n, &["world"], &[]);
    }
}

/// MPI-4.0's partitioned communication: rounds with partitions marked ready in every way and
/// watched arriving, init-order matching, and wildcard receives that leave partitioned
/// messages alone.
#[test]
fn partitioned_sends_and_receives() {
    for n in [2, 3] {
        passes("partitioned", n);
    }
}

/// One-sided communication: windows of every flavor, fences, locks, accumulates and atomics,
/// post-start-complete-wait, shared-memory queries and dynamic windows.
#[test]
fn one_sided_windows() {
    for n in [1, 3] {
        passes("rma", n);
    }
}

/// MPI-IO: explicit offsets, strided views, individual and shared file pointers, ordered,
/// non-blocking and split collective accesses, sizes, atomicity, append mode and file errors.
#[test]
fn files_views_and_every_data_access() {
    for n in [1, 3] {
        passes("io", n);
    }
}

#[test]
fn a_large_isend_does_not_stop_a_barrier_behind_it() {
    passes("isend_barrier", 3);
}

#[test]
fn probes_and_matched_probes() {
    passes("probe", 3);
}

/// A rank that starts a non-blocking scan and then waits in MPI_Probe, MPI_Mprobe, a loop of
/// MPI_Iprobe / MPI_Improbe, MPI_Ssend or a blocking collective on another communicator for a
/// rank that goes on only after its scan: the wait moves the scan on (each hung before: only
/// waits, tests and blocking sends and receives did). On one host (shared-memory collectives)
/// and across three hosts.
#[test]
fn every_blocking_call_moves_non_blocking_collectives_on() {
    passes("nbc_progress", 3);
    passes("nbc_progress", 5);
    passes_on_hosts("nbc_progress", 3, 5, &[("VOLLEY_TRANSPORT", "udp")]);
}

/// Matched probes of messages far above the rendezvous threshold: taken out of matching (a
/// later receive with the same envelope gets the next one), received by MPI_Mrecv and
/// MPI_Imrecv into contiguous and strided buffers, truncated, held two at once, and a
/// synchronous send matched by the probe. The message's data stays with its sender until the
/// receive (the program asserts the receiver's peak memory grows by less than half a 16 MiB
/// message). Single copy on and off, and the granted stream with the progress thread.
#[test]
fn matched_probes_of_large_messages_receive_in_place() {
    passes("mprobe_large", 3);
    passes_with("mprobe_large", 2, &[], &[("VOLLEY_SINGLE_COPY", "off")]);
    passes_with(
        "mprobe_large",
        4,
        &[],
        &[
            ("VOLLEY_SINGLE_COPY", "off"),
            ("VOLLEY_PROGRESS_THREAD", "1"),
        ],
    );
}

/// The same with ranks on two hosts over udp and eth (an announced message from another host
/// held by the probe, accepted by the receive), and under the fault device's loss.
#[test]
fn matched_probes_of_large_messages_across_hosts() {
    let s = Scratch::new("mprobe-net");
    let exe = build(&s.0, "mprobe_large", false);
    let h = Hosts::new(2, 1500);
    for (transport, n, faults) in [
        ("udp", 2, ""),
        ("eth", 3, ""),
        ("udp", 4, "loss=0.02,reorder=0.1,delay_us=50,seed=7"),
    ] {
        let mut env = vec![("VOLLEY_TRANSPORT", transport)];
        if !faults.is_empty() {
            env.push(("VOLLEY_FAULTS", faults));
        }
        let o = h.run(n, &env, &[exe.to_str().expect("utf-8 path")]);
        let out = must(
            o,
            &format!("mprobe_large, {n} ranks on 2 hosts over {transport} {faults}"),
        );
        assert!(out.contains("mprobe_large: ok"), "{out}");
    }
}

#[test]
fn truncation_is_an_error_and_loses_nothing_else() {
    passes("truncate", 2);
}

#[test]
fn synchronous_sends_complete_when_matched() {
    passes("ssend", 3);
}

#[test]
fn requests_waits_tests_cancel_and_persistent() {
    passes("requests", 3);
}

#[test]
fn communicators_and_groups() {
    passes("comms", 5);
}

#[test]
fn intercommunicators_create_dup_and_merge() {
    passes("intercomm", 5);
}

#[test]
fn attribute_caching() {
    passes("attrs", 2);
    // The delete callback of MPI_COMM_SELF's attribute ran in MPI_Finalize.
    let s = Scratch::new("attrs-finalize");
    for mpich in [false, true] {
        let exe = build(&s.0, "attrs", mpich);
        let out = must(launch(&exe, 2, mpich), "attrs");
        assert!(out.contains("deleted at MPI_Finalize"), "{out}");
    }
}

#[test]
fn every_datatype_constructor_and_packing() {
    passes("datatypes", 4);
}

#[test]
fn fortran_named_types_from_c_and_type_match_size() {
    passes("fortran_types", 3);
}

#[test]
fn added_error_classes_codes_and_strings() {
    passes("errors_dyn", 2);
}

#[test]
fn datatype_attributes_follow_dup_and_free() {
    passes("type_attrs", 2);
}

#[test]
fn external32_packing_is_big_endian_at_the_standard_sizes() {
    passes("pack_external", 2);
}

#[test]
fn aliased_collective_buffers_are_refused_before_anything_moves() {
    passes("coll_alias", 3);
}

#[test]
fn removed_mpi1_functions_names_and_failed_dups() {
    passes("oldapi", 3);
}

#[test]
fn darray_owns_what_the_block_and_cyclic_rules_give() {
    passes("darray", 4);
}

#[test]
fn collectives_give_the_standard_results() {
    passes("collectives", 5);
}

/// Short collectives on communicators of one host meet in the job segment (barrier, bcast,
/// reduce and allreduce up to a slot's 4 KiB): back to back with racing roots, interleaved
/// kinds, MPI_IN_PLACE, a non-commutative operation in rank order, a derived datatype, a
/// barrier that really waits for the last rank, more communicators alive than there are slots
/// and communicators freed and made again with other members, sleeping ranks. The results equal
/// the serial computation, on volley and on MPICH.
#[test]
fn short_collectives_in_shared_memory_give_the_standard_results() {
    for n in [1, 2, 3, 4, 5, 8] {
        passes("coll_shm", n);
    }
}

/// Gather, scatter and alltoall meet in the segment too (a rank's blocks written once, read
/// where they are wanted): back to back with racing roots and sizes on both sides of a slot's
/// 4 KiB, MPI_IN_PLACE, a vector type against its contiguous signature, the -v forms, every
/// kind after every kind, communicators freed and remade, sleepy ranks, zero counts. On volley
/// and on MPICH; then on volley with sleeping waits and with 16 ranks on two cores.
#[test]
fn gather_scatter_and_alltoall_in_shared_memory_give_the_standard_results() {
    for n in [1, 2, 3, 4, 5, 8] {
        passes("coll_shm_blocks", n);
    }
    let s = Scratch::new("coll_shm_blocks");
    let exe = build(&s.0, "coll_shm_blocks", false);
    let exe = exe.to_str().expect("utf-8 path");
    for (n, wait) in [("5", "block"), ("16", "spin")] {
        let o = volley(&["-n", n, exe], &[("VOLLEY_WAIT", wait)]);
        let (out, err) = text(&o);
        assert!(
            o.status.success() && out.contains("coll_shm_blocks: ok"),
            "{n} ranks, VOLLEY_WAIT={wait}: {:?}\n{out}\n{err}",
            o.status
        );
    }
}

/// The same program in every waiting mode and with 16 ranks on two cores, where ranks sleep
/// on their doorbells in the middle of collectives and must be woken by the flags they wait
/// for; the counters show that the segment was used, and that the communicators beyond the
/// slots fell back to messages.
#[test]
fn shared_memory_collectives_wake_sleepers_and_fall_back_when_slots_run_out() {
    let s = Scratch::new("coll_shm");
    let exe = build(&s.0, "coll_shm", false);
    let exe = exe.to_str().expect("utf-8 path");
    for (n, wait) in [
        ("3", "block"),
        ("4", "busy"),
        ("16", "spin"),
        ("8", "block"),
    ] {
        let o = volley(&["--counters", "-n", n, exe], &[("VOLLEY_WAIT", wait)]);
        let (out, err) = text(&o);
        assert!(
            o.status.success() && out.contains("coll_shm: ok"),
            "{n} ranks, VOLLEY_WAIT={wait}: {:?}\n{out}\n{err}",
            o.status
        );
        let total = |name: &str| -> u64 {
            let line = out
                .lines()
                .chain(err.lines())
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("no {name} in the counters:\n{out}\n{err}"));
            // Per rank, then the total, then the unit.
            let nums: Vec<u64> = line
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            *nums.last().expect("a total")
        };
        assert!(
            total("coll_slots_claimed ") > 0,
            "{n} ranks: no slots claimed"
        );
        // With 8 ranks and more, every communicator of the program's churn has two ranks or
        // more, and 17 of them live at once beside the world's.
        if n.parse::<usize>().expect("a count") >= 8 {
            assert!(
                total("coll_slots_missing ") > 0,
                "{n} ranks: more communicators than slots, yet none fell back"
            );
        }
    }
}

/// Every size class (0, 1, odd, over the eager threshold and a pipeline's chunk), on 1 to 8
/// ranks (powers of two and not), on the world, a reversed split and an uneven one, with a
/// non-commutative operation: each result equals the serial computation.
#[test]
fn collectives_at_every_size_class_and_rank_count() {
    for n in [1, 2, 3, 4, 5, 8] {
        passes("coll_sizes", n);
    }
}

/// Persistent collectives (MPI-4.0): started again and again with fresh buffer contents,
/// started in different orders at different ranks (they match by their inits), mixed with
/// other collectives, tested for inactive and freed; at 1, 3 and 4 ranks.
#[test]
fn persistent_collectives_restart_and_match_by_their_inits() {
    for n in [1, 3, 4] {
        passes("pcoll", n);
    }
}

/// Broadcasts whose ranks pass different counts: every rank away from the root is told, by the
/// blocking and the non-blocking call, and the communicator works on (at 2 ranks and at 4, where
/// the broadcast goes through the segment's slots).
#[test]
fn a_broadcast_with_mismatched_counts_is_an_error_not_garbage() {
    for n in [2, 3, 4] {
        passes("coll_mismatch", n);
    }
}

/// Long allreduces (past every switch to a bandwidth algorithm): sums in place and not, maxima,
/// MAXLOC on a padded pair type, lengths the rank count does not divide,
/// a reversed communicator; the results equal the serial computation and the send buffers come
/// back unchanged. On volley also with cross-memory reads refused (the fallback by messages).
#[test]
fn long_allreduces_give_the_serial_results() {
    for n in [2, 3, 4] {
        passes("allreduce_long", n);
    }
    passes_with("allreduce_long", 3, &[], &[("VOLLEY_SINGLE_COPY", "off")]);
}

/// A long allreduce reads the other ranks' buffers where this machine copies once from a size
/// the reads reach, and goes by messages where it never does (a profile of `volley tune` that
/// found the pipelined copy faster at every size, here its setting): the counters say which ran,
/// and the results are the serial ones either way.
#[test]
fn long_allreduces_read_across_only_where_single_copy_pays() {
    let s = Scratch::new("allreduce_long");
    let exe = build(&s.0, "allreduce_long", false);
    let run = |env: &[(&str, &str)]| {
        let mut all = vec![("VOLLEY_PROFILE", "none"), ("VOLLEY_COUNTERS", "1")];
        all.extend_from_slice(env);
        let o = launch_with(&exe, 2, false, &[], &all);
        let (out, err) = text(&o);
        assert!(
            o.status.success() && out.contains("allreduce_long: ok"),
            "{env:?}: {:?}\n{out}\n{err}",
            o.status
        );
        (
            counter(&err, "coll_cross_bytes"),
            counter(&err, "single_copy_sends"),
        )
    };
    // The built-in window (single copy from 32 KiB): a 1 MiB allreduce's 512 KiB slices are
    // read across.
    let (cross, _) = run(&[]);
    assert!(cross >= 1 << 20, "read across: {cross} bytes");
    // Single copy from 1 GiB only: no read would be a quarter of that.
    let (cross, single) = run(&[("VOLLEY_SINGLE_COPY_THRESHOLD", "1073741824")]);
    assert_eq!((cross, single), (0, 0));
}

/// Every algorithm volley can choose gives the same results at every size: each forced for
/// every call (`VOLLEY_COLL_*`; where one cannot run a call, such as Rabenseifner with the
/// non-commutative operation, that call falls back to the default), at rank counts that are and
/// are not powers of two.
#[test]
fn every_collective_algorithm_forced_gives_the_standard_results() {
    let s = Scratch::new("coll_sizes");
    let exe = build(&s.0, "coll_sizes", false);
    let sets: [&[(&str, &str)]; 4] = [
        &[
            ("VOLLEY_COLL_BCAST", "scatter_ring"),
            ("VOLLEY_COLL_REDUCE", "binomial"),
            ("VOLLEY_COLL_ALLREDUCE", "rabenseifner"),
            ("VOLLEY_COLL_ALLGATHER", "ring"),
            ("VOLLEY_COLL_ALLTOALL", "pairwise"),
            ("VOLLEY_COLL_REDUCE_SCATTER", "pairwise"),
        ],
        &[
            ("VOLLEY_COLL_BCAST", "binomial"),
            ("VOLLEY_COLL_REDUCE", "linear"),
            ("VOLLEY_COLL_ALLREDUCE", "recursive_doubling"),
            ("VOLLEY_COLL_ALLGATHER", "recursive_doubling"),
            ("VOLLEY_COLL_ALLTOALL", "linear"),
            ("VOLLEY_COLL_REDUCE_SCATTER", "reduce_scatterv"),
        ],
        &[
            ("VOLLEY_COLL_ALLREDUCE", "reduce_bcast"),
            ("VOLLEY_COLL_ALLGATHER", "gather_bcast"),
            ("VOLLEY_COLL_ALLTOALL", "bruck"),
            ("VOLLEY_COLL_BARRIER", "dissemination"),
        ],
        // Every size by reading the other ranks' buffers (an allreduce's slices split at every
        // size; an allgather in place and not).
        &[
            ("VOLLEY_COLL_ALLREDUCE", "direct"),
            ("VOLLEY_COLL_ALLGATHER", "direct"),
        ],
    ];
    for env in sets {
        for n in [2, 3, 4, 6, 8] {
            let out = must(
                launch_with(&exe, n, false, &[], env),
                &format!("coll_sizes on {n} ranks with {env:?}"),
            );
            assert!(out.contains("coll_sizes: ok"), "{env:?} {n}: {out}");
        }
    }
}

/// A forced algorithm that does not exist is refused at MPI_Init with the list of those that do.
#[test]
fn an_unknown_collective_algorithm_is_refused_at_init() {
    let s = Scratch::new("coll_sizes");
    let exe = build(&s.0, "coll_sizes", false);
    let o = launch_with(&exe, 2, false, &[], &[("VOLLEY_COLL_BCAST", "fastest")]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("VOLLEY_COLL_BCAST") && err.contains("scatter_ring"),
        "{err}"
    );
}

#[test]
fn collectives_on_a_world_of_one() {
    passes("collectives", 1);
}

#[test]
fn non_contiguous_datatypes_move_piece_by_piece() {
    passes("vector", 2);
}

#[test]
fn non_contiguous_datatypes_with_single_copy_and_an_idle_rank() {
    passes_with(
        "vector",
        3,
        &[],
        &[("VOLLEY_SINGLE_COPY_THRESHOLD", "65536")],
    );
}

/// The same program with its two ranks on two hosts (network namespaces), over udp and eth and
/// under the fault device's loss and reordering: a non-contiguous message above the network's
/// rendezvous threshold is packed into each packet as it goes (again for a packet that goes
/// again) and unpacked from each as it comes, so neither side's peak memory grows by the
/// message's size (the program asserts under half of it), and every value arrives.
#[test]
fn non_contiguous_datatypes_move_piece_by_piece_across_hosts() {
    let s = Scratch::new("vector-net");
    let exe = build(&s.0, "vector", false);
    let h = Hosts::new(2, 1500);
    for (transport, faults) in [
        ("udp", ""),
        ("eth", ""),
        ("udp", "loss=0.02,reorder=0.1,delay_us=50,seed=5"),
    ] {
        let mut env = vec![("VOLLEY_TRANSPORT", transport), ("VOLLEY_COUNTERS", "1")];
        if !faults.is_empty() {
            env.push(("VOLLEY_FAULTS", faults));
        }
        let o = h.run(2, &env, &[exe.to_str().expect("utf-8 path")]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let out = must(
            o,
            &format!("vector, 2 ranks on 2 hosts over {transport} {faults}"),
        );
        assert!(out.contains("vector: ok"), "{out}");
        if !faults.is_empty() {
            // Packets were lost, so fragments went again: packed a second time.
            let again: u64 = ["net_retransmits_fast", "net_retransmits_timeout"]
                .iter()
                .flat_map(|name| {
                    err.lines().filter_map(move |l| {
                        let mut w = l.split_whitespace().skip_while(|w| w != name);
                        w.nth(1)?.parse::<u64>().ok()
                    })
                })
                .sum();
            assert!(again > 0, "nothing went again under loss:\n{err}");
        }
    }
}

/// Large messages by single copy, which the waiting sender helps copy (volley_shm::coop): every
/// byte lands in place whichever side waits; a sender whose writes are refused leaves its
/// chunks to the receiver, and with helping off the receiver copies alone.
#[test]
fn large_messages_arrive_whole_when_both_sides_copy() {
    passes("large", 2);
    let s = Scratch::new("large-helped");
    let exe = build(&s.0, "large", false);
    // Every size by single copy, and helped from the smallest that has two chunks.
    let all = [
        ("VOLLEY_SINGLE_COPY_MAX", "1000000000"),
        ("VOLLEY_SINGLE_COPY_HELP_FROM", "0"),
        ("VOLLEY_COUNTERS", "1"),
    ];
    for (var, val) in [
        ("VOLLEY_SINGLE_COPY_HELP", "auto"),
        ("VOLLEY_SIMULATE_HELP_REFUSAL", "1"),
        ("VOLLEY_SINGLE_COPY_HELP", "off"),
    ] {
        let mut env = all.to_vec();
        env.push((var, val));
        let o = launch_with(&exe, 2, false, &[], &env);
        let (out, err) = text(&o);
        assert!(
            o.status.success() && out.contains("large: ok"),
            "{var}={val}:\n{out}\n{err}"
        );
        // 7 sizes x 5 ways x 3 rounds each way, all by single copy.
        assert_eq!(
            counter(&err, "single_copy_recvs"),
            210,
            "{var}={val}: {err}"
        );
        let (copies, chunks) = (
            counter(&err, "copies_helped"),
            counter(&err, "chunks_helped"),
        );
        match val {
            "auto" => assert!(copies > 0 && chunks > 0, "nobody helped: {err}"),
            "1" => assert!(copies > 0 && chunks == 0, "{err}"),
            _ => assert_eq!(copies + chunks, 0, "{err}"),
        }
    }
}

#[test]
fn large_messages_to_oneself() {
    passes("selfsend", 2);
}

#[test]
fn communicator_contexts_are_given_back() {
    passes("contexts", 2);
}

#[test]
fn nonblocking_collectives_and_comm_idup() {
    passes("nbc", 4);
}

#[test]
fn nonblocking_collectives_with_more_ranks_than_cores() {
    passes("nbc", 9);
}

/// Short non-blocking collectives of one host's ranks meet in the segment (a group of their
/// own, driven by the program's tests and waits): several in flight, completed in different
/// orders on different ranks, long runs beside blocking ones, a late starter; at 3 ranks (on
/// volley and MPICH), and at 16 on two cores, the most that meet there (volley only: MPICH's
/// busy-polling ranks take minutes when 16 share two cores).
#[test]
fn nonblocking_collectives_in_shared_memory() {
    passes("nbc_shm", 3);
    let s = Scratch::new("nbc_shm16");
    let exe = build(&s.0, "nbc_shm", false);
    let out = must(
        launch_with(&exe, 16, false, &[], &[]),
        "nbc_shm on 16 ranks",
    );
    assert!(out.contains("nbc_shm: ok"), "{out}");
}

#[test]
fn topologies_and_neighbourhood_collectives() {
    passes("topo", 4);
}

#[test]
fn neighbourhood_collectives_where_a_rank_is_its_own_neighbour() {
    // Two ranks in a periodic ring, and a periodic dimension of size 1: the neighbours below
    // and above are one rank (MPI-3.1 errata, mpi-forum/mpi-issues#153).
    passes("topo", 2);
}

#[test]
fn info_objects() {
    passes("info", 2);
}

#[test]
fn mpirun_and_mpiexec_names_take_other_mpis_options() {
    let s = Scratch::new("mpirun");
    let exe = build(&s.0, "matching", false);
    let dir = Path::new(VOLLEY).parent().unwrap();
    for (name, args) in [
        (
            "mpirun",
            vec![
                "-np",
                "3",
                "--oversubscribe",
                "--allow-run-as-root",
                "--mca",
                "btl",
                "self,vader",
                "--bind-to",
                "core",
            ],
        ),
        ("mpiexec", vec!["-n", "2", "-genv", "SOME_VAR", "1", "-l"]),
    ] {
        let o = Command::new("timeout")
            .arg("300")
            .arg(dir.join(name))
            .args(&args)
            .arg(&exe)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {name}: {e}"));
        let out = must(o, name);
        assert!(out.contains("matching: ok"), "{name}: {out}");
    }
    // An option it does not know is refused, naming it.
    let o = Command::new(dir.join("mpirun"))
        .args(["-n", "2", "--frobnicate", "x"])
        .output()
        .expect("run mpirun");
    let (_, err) = text(&o);
    assert!(!o.status.success() && err.contains("--frobnicate"), "{err}");
}

#[test]
fn error_handlers_classes_and_strings() {
    passes("errors", 2);
}

#[test]
fn a_flood_of_unexpected_large_messages_keeps_memory_bounded() {
    // Received in the order sent: the ring is the eager limit, the sender waits.
    passes_with("flood", 2, &[], &[]);
}

#[test]
fn a_flood_received_last_first_keeps_memory_bounded() {
    // Last first: every earlier message stays unexpected, a request to send in the ring, its
    // data in the sender's memory until a receive matches it (streamed through the ring then).
    passes_with("flood", 2, &["reverse"], &[]);
}

#[test]
fn a_flood_received_last_first_keeps_memory_bounded_with_single_copy() {
    // The same by single copy: the receive copies each message out of the sender's memory.
    passes_with(
        "flood",
        2,
        &["reverse"],
        &[("VOLLEY_SINGLE_COPY_THRESHOLD", "65536")],
    );
}

/// More unreceived small messages than the receiver may hold, in front of one it looks for: MPI's
/// progress rule says it is found, and every byte arrives once the rest are received in order
/// (volley, MPICH). On volley with a 64 KiB limit and 40 MB of them: found early (the sender
/// turns to requests to send once the receiver asks), the receiver's memory grows by far less
/// than the flood (MPICH holds all of it), and no limit is reported.
#[test]
fn unreceived_small_messages_beyond_the_limit_neither_block_nor_pile_up() {
    passes("unexpected_budget", 2);
    let s = Scratch::new("unexpected_budget_small");
    let exe = build(&s.0, "unexpected_budget", false);
    for env in [
        vec![("VOLLEY_UNEXPECTED_BYTES", "65536")],
        vec![
            ("VOLLEY_UNEXPECTED_BYTES", "65536"),
            ("VOLLEY_PROGRESS_THREAD", "1"),
        ],
    ] {
        let o = launch_with(&exe, 2, false, &["40000"], &env);
        let (_, err) = text(&o);
        let out = must(o, &format!("unexpected_budget 40000 with {env:?}"));
        assert!(
            out.contains("unexpected_budget: ok (tag 2 found early: yes"),
            "{env:?}: {out}"
        );
        let grew: u64 = out
            .split("peak memory grew ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|k| k.parse().ok())
            .unwrap_or_else(|| panic!("no growth figure: {out}"));
        assert!(
            grew < 20 << 10,
            "{env:?}: rank 0 grew by {grew} KiB holding a 40 MB flood:\n{out}"
        );
        assert!(!err.contains("VOLLEY_UNEXPECTED_BYTES"), "{env:?}: {err}");
    }
}

#[test]
fn large_messages_received_in_another_order_than_sent() {
    passes("order", 2);
}

#[test]
fn large_messages_in_another_order_with_the_progress_thread() {
    passes_with("order", 2, &[], &[("VOLLEY_PROGRESS_THREAD", "1")]);
}

#[test]
fn large_messages_in_another_order_by_single_copy_with_an_idle_rank() {
    passes_with(
        "order",
        3,
        &[],
        &[("VOLLEY_SINGLE_COPY_THRESHOLD", "65536")],
    );
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let s = Scratch::new("abort");
    for mpich in [false, true] {
        let exe = build(&s.0, "abort", mpich);
        let o = launch(&exe, 4, mpich);
        let (out, err) = text(&o);
        assert_eq!(
            o.status.code(),
            Some(7),
            "{}: stdout:\n{out}\nstderr:\n{err}",
            if mpich { "MPICH" } else { "volley" }
        );
        assert!(
            !out.contains("not stopped"),
            "a rank outlived MPI_Abort:\n{out}"
        );
    }
}

/// A sender killed after a matched probe took its large message (the data still in its memory,
/// or on its host): the MPI_Mrecv fails with MPIX_ERR_PROC_FAILED, by single copy, by the granted
/// stream, and across hosts over udp.
#[test]
fn a_matched_probe_of_a_dead_sender_fails_its_receive() {
    let s = Scratch::new("killed-mprobe");
    let exe = build(&s.0, "killed_mprobe", false);
    let check = |o: std::process::Output, what: &str| {
        let (out, err) = text(&o);
        assert_eq!(
            o.status.code(),
            Some(128 + 9),
            "{what}: stdout:\n{out}\nstderr:\n{err}"
        );
        assert!(
            out.contains("killed_mprobe: rank 0's MPI_Mrecv from the dead rank failed")
                && out.contains("MPIX_ERR_PROC_FAILED"),
            "{what}: stdout:\n{out}\nstderr:\n{err}"
        );
    };
    for sc in ["auto", "off"] {
        let o = volley(
            &["--keep-going", "-n", "3", exe.to_str().unwrap()],
            &[("VOLLEY_SINGLE_COPY", sc)],
        );
        check(o, &format!("one host, single copy {sc}"));
    }
    let h = Hosts::new(2, 1500);
    let o = h.run_with(
        &["--keep-going"],
        2,
        &[("VOLLEY_TRANSPORT", "udp")],
        &[exe.to_str().unwrap()],
    );
    check(o, "two hosts over udp");
    let exe = build(&s.0, "killed_mprobe", true);
    let o = launch(&exe, 3, true);
    assert!(
        !o.status.success() && o.status.code() != Some(124),
        "MPICH: {:?}",
        o.status
    );
}

/// Test `name` of a killed rank on volley, 3 ranks: the other ranks run on (--keep-going) and
/// the job exits with the killed rank's status. Its output (stdout, stderr).
fn volley_with_a_killed_rank(dir: &Path, name: &str) -> (String, String) {
    let exe = build(dir, name, false);
    let o = volley(&["--keep-going", "-n", "3", exe.to_str().unwrap()], &[]);
    let (out, err) = text(&o);
    assert_eq!(
        o.status.code(),
        Some(128 + 9),
        "{name}: stdout:\n{out}\nstderr:\n{err}"
    );
    (out, err)
}

/// Test `name` of a killed rank built with MPICH, 3 ranks: its launcher ends the whole job
/// when a rank dies, so the job must end, with a failure (not run into the harness's timeout).
fn mpich_ends_the_job(dir: &Path, name: &str) {
    let exe = build(dir, name, true);
    let o = launch(&exe, 3, true);
    assert!(
        !o.status.success() && o.status.code() != Some(124),
        "MPICH, {name}: {:?}",
        o.status
    );
}

#[test]
fn a_dead_peer_is_an_error_not_a_hang() {
    let s = Scratch::new("killed");
    // volley: rank 0's receive fails with MPIX_ERR_PROC_FAILED.
    let (out, err) = volley_with_a_killed_rank(&s.0, "killed");
    assert!(
        out.contains("killed: rank 0's receive from the dead rank failed")
            && out.contains("MPIX_ERR_PROC_FAILED"),
        "stdout:\n{out}\nstderr:\n{err}"
    );
    mpich_ends_the_job(&s.0, "killed");
}

/// A receive polled with MPI_Test, MPI_Testany and MPI_Testsome while its sender dies: the
/// test fails (no receive pending forever), also for a receive posted after the death; a
/// receive from a live rank beside them still completes. Tests that find nothing new skip the
/// progress pass (`World::still_pending`): this is what they must not skip.
#[test]
fn a_polled_receive_from_a_dead_peer_fails() {
    let s = Scratch::new("killed-poll");
    let (out, err) = volley_with_a_killed_rank(&s.0, "killed_poll");
    for how in 0..3 {
        assert!(
            out.contains(&format!(
                "killed_poll: test {how} of a receive from the dead rank failed"
            )),
            "test {how}: stdout:\n{out}\nstderr:\n{err}"
        );
    }
    assert!(
        out.contains("killed_poll: the live rank's message arrived"),
        "stdout:\n{out}\nstderr:\n{err}"
    );
    mpich_ends_the_job(&s.0, "killed_poll");
}

#[test]
fn singleton_init_without_a_launcher() {
    let s = Scratch::new("singleton");
    for mpich in [false, true] {
        let exe = build(&s.0, "singleton", mpich);
        let mut c = Command::new(&exe);
        for (k, _) in
            std::env::vars().filter(|(k, _)| k.starts_with("VOLLEY_") || k.starts_with("PMI"))
        {
            c.env_remove(k);
        }
        let out = must(c.output().expect("run the singleton"), "singleton");
        assert!(out.contains("singleton: ok"), "{out}");
    }
}

#[test]
fn mpicc_show_prints_the_command() {
    let o = Command::new(VOLLEY)
        .args(["mpicc", "-show", "x.c", "-o", "x"])
        .output()
        .expect("run volley mpicc");
    let out = must(o, "volley mpicc -show");
    assert!(
        out.contains("-lmpi") && out.contains("-Wl,-rpath,") && out.contains("x.c"),
        "{out}"
    );
    let pc = Path::new(VOLLEY)
        .parent()
        .unwrap()
        .join("pkgconfig/volley-mpi.pc");
    let pc = std::fs::read_to_string(&pc).expect("volley mpicc writes pkgconfig/volley-mpi.pc");
    assert!(pc.contains("Libs:") && pc.contains("-lmpi"), "{pc}");
}

/// MPI_Allreduce adds floating-point contributions in recursive doubling's association (pairs
/// of neighbours first, then a balanced tree), as MPICH and Open MPI do: the same bits as
/// theirs, for short vectors through the segment and long ones by recursive halving, with
/// rank counts that are and are not powers of two.
#[test]
fn allreduce_adds_in_the_order_mpich_does() {
    for n in [3, 4, 6, 8] {
        passes("allreduce_order", n);
    }
}

/// What build systems ask an MPI wrapper: Open MPI's -showme:compile and -showme:link, MPICH's
/// -compile-info and -link-info, and `-show` alone (the whole link command); then CMake's own
/// FindMPI, given volley's mpicc, finds the library and builds a test program that passes.
#[test]
fn build_systems_find_volley_mpi() {
    let ask = |flag: &str| {
        let o = Command::new(VOLLEY)
            .args(["mpicc", flag])
            .output()
            .expect("run volley mpicc");
        must(o, &format!("volley mpicc {flag}"))
    };
    assert!(ask("-showme:compile").trim().starts_with("-I"));
    let link = ask("-showme:link");
    assert!(link.contains("-lmpi") && link.contains("-L"), "{link}");
    assert!(ask("-showme:libs").trim() == "mpi");
    assert!(ask("-compile-info").contains("-I"));
    assert!(ask("-link-info").contains("-lmpi"));
    assert!(ask("-show").contains("-lmpi"));
    let o = Command::new(VOLLEY)
        .args(["mpicc", "-showme:nonsense"])
        .output()
        .expect("run volley mpicc");
    assert!(!o.status.success() && text(&o).1.contains("-showme:compile"));

    let s = Scratch::new("cmake");
    let src = sources();
    std::fs::write(
        s.0.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.10)\nproject(findmpi C)\nfind_package(MPI REQUIRED)\n\
             add_executable(truncate {}/truncate.c)\ntarget_include_directories(truncate PRIVATE {})\n\
             target_link_libraries(truncate MPI::MPI_C)\n",
            src.display(),
            src.display()
        ),
    )
    .expect("write CMakeLists.txt");
    let mpicc = Path::new(VOLLEY).parent().unwrap().join("mpicc");
    let build = s.0.join("build");
    let o = Command::new("cmake")
        .args(["-S", s.0.to_str().unwrap(), "-B", build.to_str().unwrap()])
        .arg(format!("-DMPI_C_COMPILER={}", mpicc.display()))
        .output()
        .expect("run cmake (apt-get install cmake)");
    let out = must(o, "cmake with FindMPI");
    assert!(out.contains("Found MPI_C"), "{out}");
    let o = Command::new("cmake")
        .args(["--build", build.to_str().unwrap()])
        .output()
        .expect("run cmake --build");
    must(o, "cmake --build");
    let exe = build.join("truncate");
    let out = must(
        launch_with(&exe, 2, false, &[], &[]),
        "truncate built by CMake",
    );
    assert!(out.contains("truncate: ok"), "{out}");
}

/// Each rank of a pair starts 100 MiB of non-blocking sends to the other before either
/// receives (more than any layer buffers): MPI_Isend returns at once, so it completes, intact
/// and in order; on one host (volley and MPICH) and across two namespaces over udp, where the
/// network engine's full queue used to keep MPI_Isend waiting for a receiver that was itself
/// waiting in MPI_Isend.
#[test]
fn isends_both_ways_before_any_receive_complete() {
    passes("isend_flood", 2);
    let s = Scratch::new("isend-flood-net");
    let exe = build(&s.0, "isend_flood", false);
    let h = Hosts::new(2, 1500);
    for transport in ["udp", "eth"] {
        let o = h.run(
            2,
            &[("VOLLEY_TRANSPORT", transport)],
            &[exe.to_str().expect("utf-8 path")],
        );
        let out = must(
            o,
            &format!("isend_flood, 2 ranks on 2 hosts over {transport}"),
        );
        assert!(out.contains("isend_flood: ok"), "{out}");
    }
}

/// MPI_Comm_split_type with ranks on three hosts: MPI_COMM_TYPE_SHARED and HW_GUIDED by
/// `mpi_shared_memory` give each host's two ranks, and HW_UNGUIDED splits the world by host.
#[test]
fn split_type_across_namespaces_splits_by_host() {
    let s = Scratch::new("split-net");
    let exe = build(&s.0, "split_type", false);
    let h = Hosts::new(3, 1500);
    let o = h.run(
        6,
        &[("VOLLEY_TRANSPORT", "udp")],
        &[exe.to_str().expect("utf-8 path")],
    );
    let out = must(o, "split_type, 6 ranks on 3 hosts");
    assert!(out.contains("split_type: ok"), "{out}");
    assert!(
        out.contains("unguided: 2"),
        "HW_UNGUIDED did not split by host:\n{out}"
    );
}

/// NetPIPE in its three modes over the whole size range (1 byte to 8 MiB): plain blocking sends
/// and receives with its perturbed sizes, asynchronous receives (`-a`: MPI_Irecv posted before
/// the send) and synchronous sends (`-S`: MPI_Ssend) at its 46 unperturbed sizes (a third of the
/// time); then its integrity check with synchronous sends (`-i`: every word of every message
/// checked on arrival; NetPIPE exits at the first wrong one).
#[test]
fn netpipe_unmodified_on_shared_memory_in_all_three_modes() {
    let s = Scratch::new("netpipe");
    let exe = npmpi(&s.0);
    for (mode, flags) in [
        ("plain", &[][..]),
        ("asynchronous receives", &["-a", "-p", "0"][..]),
        ("synchronous sends", &["-S", "-p", "0"][..]),
        ("integrity check, synchronous sends", &["-S", "-i"][..]),
    ] {
        let out = s.0.join(format!("np{}.out", flags.concat()));
        let mut args = vec![
            "-n",
            "2",
            exe.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend(flags);
        let o = volley(&args, &[]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        must(o, &format!("NPmpi ({mode})"));
        check_np_run(&out, &err, flags, mode);
    }
}

/// The collective programs with ranks on three hosts (network namespaces), two on each or one
/// host with one (so the world's short collectives go through the hosts' leaders, and
/// communicators split inside one host meet in its segment), over udp and eth, and with the
/// fault device's loss and reordering: every result equals the serial computation.
#[test]
fn collectives_across_namespaces_over_udp_and_eth_also_with_loss_and_reordering() {
    let s = Scratch::new("coll-net");
    let progs = [
        ("coll_sizes", build(&s.0, "coll_sizes", false)),
        ("coll_shm", build(&s.0, "coll_shm", false)),
    ];
    // Six ranks: two on each host; five: one host with one rank (its own leader).
    let cases = [
        ("udp", "", 6),
        ("eth", "", 6),
        ("udp", "", 5),
        ("udp", "loss=0.02,reorder=0.1,delay_us=50,seed=11", 6),
        ("eth", "loss=0.02,reorder=0.1,delay_us=50,seed=12", 6),
    ];
    for (transport, faults, n) in cases {
        let h = Hosts::new(3, 1500);
        let mut env = vec![("VOLLEY_TRANSPORT", transport), ("VOLLEY_COUNTERS", "1")];
        if !faults.is_empty() {
            env.push(("VOLLEY_FAULTS", faults));
        }
        for (name, exe) in &progs {
            let o = h.run(n, &env, &[exe.to_str().expect("utf-8 path")]);
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            let out = must(
                o,
                &format!("{name}, {n} ranks on 3 hosts over {transport} {faults}"),
            );
            assert!(out.contains(&format!("{name}: ok")), "{name}: {out}");
            // The world's short collectives went through the hosts' leaders: each host's two
            // ranks claimed collective slots.
            let claimed: u64 = err
                .lines()
                .filter_map(|l| {
                    let mut w = l
                        .split_whitespace()
                        .skip_while(|w| *w != "coll_slots_claimed");
                    w.nth(1)?.parse::<u64>().ok()
                })
                .sum();
            assert!(claimed >= 4, "{name}: {claimed} slots claimed:\n{err}");
        }
    }
}

/// Across two namespaces NetPIPE measures over udp with its perturbed sizes and over eth at its
/// unperturbed ones, both up to 8 MiB, then runs its integrity check over eth (every word of
/// every message checked on arrival).
#[test]
fn netpipe_unmodified_across_namespaces_over_udp_and_eth() {
    let s = Scratch::new("netpipe-net");
    let exe = npmpi(&s.0);
    for (transport, flags) in [
        ("udp", &[][..]),
        ("eth", &["-p", "0"][..]),
        ("eth", &["-i"][..]),
    ] {
        let h = Hosts::new(2, 1500);
        let out = s.0.join(format!("np-{transport}{}.out", flags.concat()));
        let mut args = vec![
            exe.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-u",
            "8388608",
        ];
        args.extend(flags);
        let o = h.run(2, &[("VOLLEY_TRANSPORT", transport)], &args);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        let what = format!("NPmpi over {transport} {flags:?}");
        must(o, &what);
        check_np_run(&out, &err, flags, &what);
    }
}

/// NPmpi started by MPICH's Hydra (volley finds its ranks through Hydra's PMI), with NetPIPE's
/// integrity check: every word of every message checked on arrival.
#[test]
fn netpipe_unmodified_under_hydra() {
    let s = Scratch::new("netpipe-hydra");
    let exe = npmpi(&s.0);
    let out = s.0.join("np-hydra.out");
    let o = Command::new("timeout")
        .args(["-k", "5", "300", "mpiexec.hydra", "-n", "2"])
        .arg(&exe)
        .arg("-o")
        .arg(&out)
        .arg("-i")
        .stdin(Stdio::null())
        .output()
        .expect("run mpiexec.hydra (Debian package mpich)");
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    must(o, "NPmpi under mpiexec.hydra");
    check_np_integrity(&out, &err, "hydra");
}

/// The HPC Challenge suite (HPCC 1.5.0 from Debian's source package, unmodified: HPL, DGEMM,
/// STREAM, PTRANS, RandomAccess, FFT and the b_eff latency and bandwidth rings, all over MPI),
/// built with its own makefile and `volley mpicc` against OpenBLAS, with its sample input (a
/// 2 x 2 process grid): at 4 ranks, and at 5 (RandomAccess and FFT on a rank count that is not a
/// power of two, HPL on 4 of them), every check the suite makes passes. Built with MPICH and run
/// by its launcher at 4 ranks too, the same checks pass there.
#[test]
fn hpc_challenge_unmodified_passes_its_own_checks() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/hpcc/hpcc-1.5.0");
    assert!(
        src.join("hpl/setup/Make.Linux_PII_CBLAS").exists(),
        "{} is missing: ./scripts/test fetches HPCC's source (apt-get source hpcc)",
        src.display()
    );
    let s = Scratch::new("hpcc");
    for (mpich, ranks) in [(false, &[4, 5][..]), (true, &[4][..])] {
        let dir = s.0.join(if mpich { "mpich" } else { "volley" });
        must(
            Command::new("cp")
                .arg("-r")
                .arg(&src)
                .arg(&dir)
                .output()
                .expect("run cp"),
            "copying HPCC's source",
        );
        let cc = if mpich {
            "mpicc.mpich".to_string()
        } else {
            format!("{} mpicc", VOLLEY)
        };
        // The CBLAS makefile of HPL's samples, with this MPI's compiler and OpenBLAS.
        let make = std::fs::read_to_string(src.join("hpl/setup/Make.Linux_PII_CBLAS"))
            .expect("HPL's sample makefile");
        let make: String = make
            .lines()
            .map(|l| {
                let key = l.split('=').next().unwrap_or("").trim();
                match key {
                    "ARCH" => "ARCH = t".to_string(),
                    "TOPdir" => "TOPdir = ../../..".to_string(),
                    "MPdir" | "MPinc" | "MPlib" | "LAdir" | "LAinc" => format!("{key} ="),
                    "LAlib" => "LAlib = -lopenblas".to_string(),
                    "CC" | "LINKER" => format!("{key} = {cc}"),
                    "CCFLAGS" => "CCFLAGS = $(HPL_DEFS) -O2 -fcommon".to_string(),
                    _ => l.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join("hpl/Make.t"), make + "\n").expect("write the makefile");
        // Two jobs: 11 s instead of 19 on two cores when the neighbour test is waiting.
        let o = Command::new("make")
            .arg("-C")
            .arg(&dir)
            .arg("-j2")
            .arg("arch=t")
            .output()
            .expect("run make");
        must(o, "building HPCC");
        std::fs::copy(dir.join("_hpccinf.txt"), dir.join("hpccinf.txt")).expect("input file");
        for &n in ranks {
            let _ = std::fs::remove_file(dir.join("hpccoutf.txt"));
            let np = n.to_string();
            let o = if mpich {
                Command::new("timeout")
                    .args(["600", "mpirun.mpich", "-n", &np, "./hpcc"])
                    .current_dir(&dir)
                    .stdin(Stdio::null())
                    .output()
                    .expect("run mpirun.mpich")
            } else {
                Command::new(VOLLEY)
                    .args(["run", "-n", &np, "--timeout", "600", "./hpcc"])
                    .current_dir(&dir)
                    .stdin(Stdio::null())
                    .output()
                    .expect("run volley")
            };
            let what = format!(
                "HPCC at {n} ranks on {}",
                if mpich { "MPICH" } else { "volley" }
            );
            must(o, &what);
            let out = std::fs::read_to_string(dir.join("hpccoutf.txt")).expect("hpccoutf.txt");
            check_hpcc(&out, &what);
        }
    }
}

/// Every check HPCC's output reports passed: HPL's residuals, STREAM's validation, every
/// RandomAccess verification, PTRANS's and the FFTs' errors.
fn check_hpcc(out: &str, what: &str) {
    let has = |s: &str| out.contains(s);
    let count = |s: &str| out.lines().filter(|l| l.contains(s)).count();
    assert!(
        has("End of HPC Challenge tests."),
        "{what}: did not finish:\n{out}"
    );
    assert!(
        has("0 tests completed and failed residual checks") && !has("FAILED"),
        "{what}: HPL failed its residual check:\n{out}"
    );
    assert!(
        count("tests completed and passed residual checks") >= 2,
        "{what}: HPL ran no test:\n{out}"
    );
    assert!(
        has("Solution Validates"),
        "{what}: STREAM did not validate:\n{out}"
    );
    let ra: Vec<&str> = out.lines().filter(|l| l.starts_with("Found ")).collect();
    assert!(
        ra.len() >= 4 && ra.iter().all(|l| l.ends_with("(passed).")),
        "{what}: a RandomAccess verification failed: {ra:?}"
    );
    let node_errors: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("Node(s) with error"))
        .collect();
    assert!(
        !node_errors.is_empty()
            && node_errors
                .iter()
                .all(|l| l.trim_end() == "Node(s) with error 0"),
        "{what}: PTRANS or FFT found errors: {node_errors:?}"
    );
    let max_err = out
        .lines()
        .find_map(|l| l.strip_prefix("MPIFFT_maxErr="))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(f64::INFINITY);
    assert!(max_err < 1e-10, "{what}: MPI FFT error {max_err}");
}
