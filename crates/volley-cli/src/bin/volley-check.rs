//! volley-check: scenarios that check volley's guarantees with real processes. The tests run it
//! under `volley run`; users can run it to check an installation:
//!
//!     volley run -n 2 volley-check pingpong 0 1 4096 67108864
//!     volley run -n 4 volley-check alltoall 200
//!
//! Every scenario checks every byte it receives and exits non-zero, saying what went wrong, when a
//! guarantee does not hold. Lines starting with "result:" are for the tests to read.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::time::{Duration, Instant};
use volley::{Fate, RecvError, SendError, Source, World};

type R = Result<(), Box<dyn std::error::Error>>;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// Fills `buf` with bytes that depend on `seed` and the position, eight at a time.
fn fill(buf: &mut [u8], seed: u64) {
    let j = buf.len() / 8;
    let mut chunks = buf.chunks_exact_mut(8);
    for (j, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&splitmix(seed ^ (j as u64).wrapping_mul(0x100000001b3)).to_le_bytes());
    }
    let rest = chunks.into_remainder();
    let last = splitmix(seed ^ (j as u64).wrapping_mul(0x100000001b3)).to_le_bytes();
    rest.copy_from_slice(&last[..rest.len()]);
}

/// Checks `buf` against fill(seed), naming the first wrong byte.
fn check(buf: &[u8], len: usize, seed: u64, what: &str) -> R {
    if buf.len() != len {
        return Err(format!("{what}: got {} bytes, expected {len}", buf.len()).into());
    }
    let mut chunks = buf.chunks_exact(8);
    for (j, c) in (&mut chunks).enumerate() {
        let want = splitmix(seed ^ (j as u64).wrapping_mul(0x100000001b3)).to_le_bytes();
        if c != want {
            let k = (0..8).find(|&k| c[k] != want[k]).unwrap_or(0);
            return Err(format!(
                "{what}: byte {} is {:#04x}, expected {:#04x}",
                j * 8 + k,
                c[k],
                want[k]
            )
            .into());
        }
    }
    let rest = chunks.remainder();
    let j = buf.len() / 8;
    let want = splitmix(seed ^ (j as u64).wrapping_mul(0x100000001b3)).to_le_bytes();
    if rest != &want[..rest.len()] {
        return Err(format!("{what}: tail bytes differ").into());
    }
    Ok(())
}

fn seed_of(round: u64, size: usize, from: usize) -> u64 {
    splitmix(round << 40 ^ (size as u64) << 8 ^ from as u64)
}

/// Rank 0 and 1 bounce one message of each size back and forth, checking every byte, using
/// recv() (in place) and recv_into() alternately.
fn pingpong(w: &World, sizes: &[usize], rounds: u64) -> R {
    if w.size() < 2 {
        return Err("pingpong needs 2 ranks".into());
    }
    if w.rank() > 1 {
        return Ok(());
    }
    let me = w.rank();
    let ep = w.open(7)?;
    ep.target(1 - me, 7)?;
    let max = sizes.iter().copied().max().unwrap_or(0);
    let mut out = vec![0u8; max];
    let mut inb = vec![0u8; max];
    for &size in sizes {
        for round in 0..rounds {
            let use_recv = round % 2 == 0;
            let mut step = |sender: usize| -> R {
                let seed = seed_of(round, size, sender);
                if me == sender {
                    fill(&mut out[..size], seed);
                    ep.send(&out[..size])?;
                } else if use_recv {
                    let m = ep.recv()?;
                    if m.source()
                        != (Source {
                            rank: sender,
                            port: 7,
                        })
                    {
                        return Err(format!("source {:?}", m.source()).into());
                    }
                    check(&m, size, seed, &format!("size {size} round {round} recv"))?;
                } else {
                    let (n, src) = ep.recv_into(&mut inb)?;
                    if src.rank != sender {
                        return Err(format!("source {src:?}").into());
                    }
                    check(
                        &inb[..n],
                        size,
                        seed,
                        &format!("size {size} round {round} recv_into"),
                    )?;
                }
                Ok(())
            };
            step(0)?;
            step(1)?;
        }
        if me == 0 {
            println!("result: pingpong size={size} ok");
        }
    }
    Ok(())
}

/// Every rank sends `count` messages to every rank (itself included), sizes varying across the
/// fragmentation threshold, each carrying (sender, sequence). Receivers check per-sender order,
/// no loss, no duplicate, every byte.
fn alltoall(w: &World, count: u64) -> R {
    let n = w.size();
    let me = w.rank();
    let ep = w.open(9)?;
    let sizes = [0usize, 8, 100, 4096, 70_000, 300_000];
    let size_of = |from: usize, seq: u64| sizes[((seq as usize) + from) % sizes.len()];
    let mut reqs = Vec::new();
    let mut next = vec![0u64; n];
    let expected = count * n as u64;
    let mut got = 0u64;
    let mut buf = vec![0u8; 400_000];
    let receive_one = |m: &[u8], src: Source, next: &mut Vec<u64>| -> R {
        if m.len() < 8 {
            // Zero-byte messages carry no sequence number; their order is checked by position.
            if size_of(src.rank, next[src.rank]) != m.len() {
                return Err(format!(
                    "from {}: unexpected {}-byte message at seq {}",
                    src.rank,
                    m.len(),
                    next[src.rank]
                )
                .into());
            }
        } else {
            let seq = u64::from_le_bytes(m[..8].try_into().unwrap());
            if seq != next[src.rank] {
                return Err(format!(
                    "from rank {}: got seq {seq}, expected {} (loss, duplicate or reorder)",
                    src.rank, next[src.rank]
                )
                .into());
            }
            let size = size_of(src.rank, seq);
            let mut want = vec![0u8; size];
            fill(&mut want, seed_of(seq, size, src.rank));
            want[..8].copy_from_slice(&seq.to_le_bytes());
            if m != &want[..] {
                return Err(format!("from rank {} seq {seq}: content differs", src.rank).into());
            }
        }
        next[src.rank] += 1;
        Ok(())
    };
    for seq in 0..count {
        for k in 0..n {
            let dst = (me + k) % n;
            let size = size_of(me, seq);
            let mut msg = vec![0u8; size];
            fill(&mut msg, seed_of(seq, size, me));
            if size >= 8 {
                msg[..8].copy_from_slice(&seq.to_le_bytes());
            }
            reqs.push(ep.isend_to(dst, 9, msg)?);
        }
        // Drain what has arrived so that queues stay short.
        while let Some(m) = ep.try_recv()? {
            receive_one(&m, m.source(), &mut next)?;
            got += 1;
        }
    }
    while got < expected {
        if got.is_multiple_of(2) {
            let m = ep.recv()?;
            receive_one(&m, m.source(), &mut next)?;
        } else {
            let (len, src) = ep.recv_into(&mut buf)?;
            receive_one(&buf[..len], src, &mut next)?;
        }
        got += 1;
    }
    for (i, r) in reqs.into_iter().enumerate() {
        r.wait()
            .map_err(|e| format!("waiting for send {i} (to rank {}): {e}", (me + i % n) % n))?;
    }
    println!("result: alltoall rank={me} received={got} ok");
    Ok(())
}

/// Ranks 1.. send `count` messages of `size` to rank 0, which reads slowly. Everyone reports its
/// peak resident memory.
fn slow_receiver(w: &World, count: u64, size: usize) -> R {
    let me = w.rank();
    let ep = w.open(3)?;
    if me == 0 {
        let mut next = vec![0u64; w.size()];
        let mut buf = vec![0u8; size];
        for i in 0..count * (w.size() as u64 - 1) {
            if i.is_multiple_of(50) {
                std::thread::sleep(Duration::from_millis(2));
            }
            let (len, src) = ep.recv_into(&mut buf)?;
            let seq = next[src.rank];
            let mut want = vec![0u8; size];
            fill(&mut want, seed_of(seq, size, src.rank));
            if len != size || buf[..len] != want[..] {
                return Err(format!("from rank {} seq {seq}: content differs", src.rank).into());
            }
            next[src.rank] += 1;
        }
        if next.iter().skip(1).any(|&c| c != count) {
            return Err(format!("counts per sender {next:?}, expected {count} each").into());
        }
    } else {
        ep.target(0, 3)?;
        let mut msg = vec![0u8; size];
        for seq in 0..count {
            fill(&mut msg, seed_of(seq, size, me));
            ep.send(&msg)?;
        }
    }
    println!(
        "result: slow rank={me} sent_or_received={} hwm_kib={}",
        count * if me == 0 { w.size() as u64 - 1 } else { 1 },
        volley_sys::peak_rss_kib().unwrap_or(0)
    );
    Ok(())
}

/// Rank 0 streams messages of `size` bytes to rank 1 for `ms` milliseconds, then an empty one
/// that ends the stream; rank 1 reports the rate over the first `ms` after its first message (a
/// sustained flow, for sharing a link with other flows).
fn stream_for(w: &World, ms: u64, size: usize) -> R {
    let me = w.rank();
    let ep = w.open(3)?;
    if me == 0 {
        ep.target(1, 3)?;
        let msg = vec![0x5au8; size];
        let end = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < end {
            ep.send(&msg)?;
        }
        ep.send(&[])?;
    } else if me == 1 {
        // The rate over the first `ms` of the stream (what the sender queued before it
        // stopped still arrives, later, and is not counted).
        let mut buf = vec![0u8; size];
        let (mut bytes, mut first) = (0u64, None::<Instant>);
        loop {
            let (len, _) = ep.recv_into(&mut buf)?;
            if len == 0 {
                break;
            }
            let f = *first.get_or_insert_with(Instant::now);
            if f.elapsed() <= Duration::from_millis(ms) {
                bytes += len as u64;
            }
        }
        println!(
            "result: stream bytes={bytes} mbytes_per_s={:.1}",
            bytes as f64 / (ms as f64 / 1e3) / 1e6
        );
    }
    Ok(())
}

/// Where the rings into this rank live: for each local sender, `mode:nodes:page`.
fn numa(w: &World) -> R {
    let n = w.info().local_size;
    let mut rings = Vec::new();
    for src in 0..n {
        let (mode, nodes, page) = w.ring_numa(src)?;
        let nodes: Vec<String> = nodes.iter().map(|x| x.to_string()).collect();
        rings.push(format!("{mode}:{}:{page}", nodes.join("+")));
    }
    let home = volley_sys::numa::node_of_cpus(&volley_sys::allowed_cpus())
        .map_or("-".to_string(), |x| x.to_string());
    println!(
        "result: numa rank={} home={home} rings={}",
        w.rank(),
        rings.join(",")
    );
    Ok(())
}

/// Ranks 0 and 1 ping-pong 8-byte messages on their own port while every other rank sleeps on
/// another port until rank 0 says done: what a receive costs with many local peers (issue 14,
/// point 1). Prints the median one-way time of 5 batches; checks every message.
fn crowd(w: &World, iters: u64) -> R {
    let (me, n) = (w.rank(), w.size());
    let ep = w.open(3)?;
    let done = w.open(4)?;
    if me >= 2 {
        done.set_wait_mode(volley::WaitMode::Block);
        // Started and asleep before the pair measures (starting 254 processes on 2 cores
        // otherwise overlaps the measurement).
        done.send_to(0, 5, &[0])?;
        let m = done.recv()?;
        if m.len() != 1 {
            return Err("a done message of the wrong size".into());
        }
        println!("result: crowd rank={me} ok");
        return Ok(());
    }
    let peer = 1 - me;
    if me == 0 {
        let ready = w.open(5)?;
        for _ in 2..n {
            ready.recv()?;
        }
        ep.send_to(1, 3, &[0; 8])?;
    } else {
        let mut go = [0u8; 8];
        ep.recv_into(&mut go)?;
    }
    let mut batches = Vec::new();
    let mut buf = [0u8; 8];
    for b in 0..6u64 {
        let t0 = std::time::Instant::now();
        for i in 0..iters {
            let v = b * iters + i;
            if me == 0 {
                ep.send_to(peer, 3, &v.to_le_bytes())?;
                ep.recv_into(&mut buf)?;
            } else {
                ep.recv_into(&mut buf)?;
                ep.send_to(peer, 3, &buf)?;
            }
            if u64::from_le_bytes(buf) != v {
                return Err(format!("message {v} arrived as {}", u64::from_le_bytes(buf)).into());
            }
        }
        if b > 0 {
            batches.push(t0.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64);
        }
    }
    batches.sort_by(|a, b| a.total_cmp(b));
    if me == 0 {
        for r in 2..n {
            done.send_to(r, 4, &[1])?;
        }
        println!(
            "result: crowd ranks={n} one_way_us={:.3} ok",
            batches[batches.len() / 2]
        );
    }
    Ok(())
}

/// A token around every rank `laps` times, each adding its rank (the sum is checked); then each
/// rank reports the memory it holds of its own (private pages, from /proc/self/smaps_rollup) and
/// rank 0 the size of the job's shared segment as mapped (/proc/self/maps, the mapping named
/// after the job's token): what a job of this many ranks costs the host.
fn ring_and_memory(w: &World, laps: u64) -> R {
    let (me, n) = (w.rank(), w.size());
    let ep = w.open(2)?;
    ep.target((me + 1) % n, 2)?;
    let mut token = 0u64;
    for _ in 0..laps {
        if me == 0 {
            ep.send(&token.to_le_bytes())?;
            let m = ep.recv()?;
            token = u64::from_le_bytes(m[..8].try_into()?);
        } else {
            let m = ep.recv()?;
            let t = u64::from_le_bytes(m[..8].try_into()?) + me as u64;
            drop(m);
            ep.send(&t.to_le_bytes())?;
        }
    }
    let private_kib: u64 = std::fs::read_to_string("/proc/self/smaps_rollup")?
        .lines()
        .filter(|l| l.starts_with("Private_"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    println!("result: ring rank={me} private_kib={private_kib}");
    if me == 0 {
        let want = laps * (n as u64 * (n as u64 - 1) / 2);
        if token != want {
            return Err(format!("ring token {token}, expected {want}").into());
        }
        let name = format!("volley-{:016x}", w.token());
        let seg: u64 = std::fs::read_to_string("/proc/self/maps")?
            .lines()
            .filter(|l| l.contains(&name))
            .filter_map(|l| {
                let (a, b) = l.split_whitespace().next()?.split_once('-')?;
                Some(u64::from_str_radix(b, 16).ok()? - u64::from_str_radix(a, 16).ok()?)
            })
            .sum();
        println!("result: ring laps={laps} token={token} ok segment_bytes={seg}");
    }
    Ok(())
}

/// Ranks 1.. send `count` messages of `size` to rank 0, which keeps every message `recv()` lends
/// it until all have arrived (none dropped early), then checks them all: holding lent messages
/// must not stop later ones.
fn keep_lent(w: &World, count: u64, size: usize) -> R {
    let me = w.rank();
    let ep = w.open(3)?;
    if me == 0 {
        let total = count * (w.size() as u64 - 1);
        let mut kept = Vec::with_capacity(total as usize);
        for _ in 0..total {
            kept.push(ep.recv()?);
        }
        let in_place = kept.iter().filter(|m| m.is_in_place()).count();
        let mut next = vec![0u64; w.size()];
        for m in &kept {
            let src = m.source().rank;
            let seq = next[src];
            check(
                m,
                size,
                seed_of(seq, size, src),
                &format!("from rank {src} seq {seq}"),
            )?;
            next[src] += 1;
        }
        if next.iter().skip(1).any(|&c| c != count) {
            return Err(format!("counts per sender {next:?}, expected {count} each").into());
        }
        println!("result: kept={} in_place={in_place}", kept.len());
    } else {
        ep.target(0, 3)?;
        let mut msg = vec![0u8; size];
        for seq in 0..count {
            fill(&mut msg, seed_of(seq, size, me));
            ep.send(&msg)?;
        }
    }
    Ok(())
}

/// Ranks 1.. start `count` non-blocking sends of `size` bytes each to rank 0 (more than its
/// rings hold, so most are still queued) and leave at once through `process::exit(0)`, without
/// dropping their world; rank 0 starts reading only after a pause, and checks every message.
fn exit_with_queued_sends(w: &World, count: u64, size: usize) -> R {
    let me = w.rank();
    let ep = w.open(9)?;
    if me != 0 {
        let mut reqs = Vec::new();
        for seq in 0..count {
            let mut msg = vec![0u8; size];
            fill(&mut msg, seed_of(seq, size, me));
            reqs.push(ep.isend_tagged(0, 7, msg)?);
        }
        let queued = reqs
            .iter_mut()
            .map(|r| r.test())
            .filter(|t| !matches!(t, Ok(true)))
            .count();
        println!("result: exiting rank={me} queued={queued}");
        std::process::exit(0);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut buf = vec![0u8; size];
    let mut next = vec![0u64; w.size()];
    for _ in 0..count * (w.size() as u64 - 1) {
        let st = ep.recv_matching(None, Some(7), &mut buf)?;
        let (src, seq) = (st.source, next[st.source]);
        check(
            &buf[..st.len],
            size,
            seed_of(seq, size, src),
            &format!("from {src} seq {seq}"),
        )?;
        next[src] += 1;
    }
    println!("result: received={}", next.iter().sum::<u64>());
    Ok(())
}

/// Rank `victim` (1 unless named) kills itself with SIGKILL (or, with `exit`, exits with code 3
/// through `_exit`, without closing its world) in the middle of a ping-pong; the other rank must
/// get a peer-lost error and report how long after the last good exchange it came.
fn killed_peer(w: &World, exit: bool, victim: usize) -> R {
    // Under `mpiexec.hydra -disable-auto-cleanup` the survivors of a failed rank get SIGUSR1, which
    // would end them before they report what volley told them.
    volley_sys::unix::ignore_signal(libc::SIGUSR1)?;
    if w.size() != 2 || victim > 1 {
        return Err("killed-peer needs exactly 2 ranks (victim 0 or 1)".into());
    }
    let me = w.rank();
    let ep = w.open(5)?;
    ep.target(1 - me, 5)?;
    let mut buf = [0u8; 64];
    if me == victim {
        for i in 0.. {
            ep.recv_into(&mut buf)?;
            if i == 500 {
                if exit {
                    // Not std::process::exit: its atexit handler would close the world.
                    volley_sys::exit_now(3);
                }
                volley_sys::kill(std::process::id(), libc_sigkill())?;
            }
            ep.send(&buf)?;
        }
        unreachable!()
    }
    let mut last_ok = Instant::now();
    loop {
        let r = ep.send(&buf).map_err(|e| match e {
            SendError::PeerLost(l) => RecvError::PeerLost(l),
            other => panic!("unexpected send error {other}"),
        });
        let r = r.and_then(|_| ep.recv_into(&mut buf).map(|_| ()));
        match r {
            Ok(()) => last_ok = Instant::now(),
            Err(RecvError::PeerLost(l)) => {
                let ms = last_ok.elapsed().as_millis();
                println!(
                    "result: peer-lost rank={} fate={:?} after_ms={ms} error=\"{l}\"",
                    l.rank, l.fate
                );
                // On another host the survivor cannot see the signal, only the silence; under a
                // foreign launcher, only that the process ended.
                return if l.rank == victim
                    && matches!(l.fate, Fate::Killed(9) | Fate::Unreachable | Fate::Vanished)
                {
                    Ok(())
                } else {
                    Err(format!("wrong peer-lost error: {l}").into())
                };
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Rank 1 (on another host) starts a large message to rank 0 and is killed while it is on its
/// way; rank 0's receive of it (blocking, or a request) fails with peer-lost in bounded time,
/// and the loan of its buffer ends (the request's scope returns).
fn lost_while_placing(w: &World, request: bool) -> R {
    if w.size() != 2 {
        return Err("lost-placing needs exactly 2 ranks".into());
    }
    let ep = w.open(12)?;
    // Large enough that it is still on its way when the sender dies: 256 MiB take about 180 ms
    // at udp's 1.5 GB/s on an idle development machine (128 MiB killed after 100 ms sometimes
    // arrived whole first).
    let len = 256 << 20;
    if w.rank() == 1 {
        let mut r = ep.isend_tagged(0, 3, vec![7u8; len])?;
        // Announced, accepted, under way for a moment: then gone.
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            r.test()?;
        }
        volley_sys::kill(std::process::id(), libc_sigkill())?;
        return Err("still alive after SIGKILL".into());
    }
    let mut buf = vec![0u8; len];
    let t = Instant::now();
    let r = if request {
        w.scope(|s| -> Result<volley::Status, volley::RequestError> {
            let id = s.irecv(&ep, Some(1), Some(3), &mut buf)?;
            w.wait(id)
        })
    } else {
        ep.recv_matching(Some(1), Some(3), &mut buf)
            .map_err(volley::RequestError::from)
    };
    match r {
        Err(volley::RequestError::Recv(RecvError::PeerLost(l))) if l.rank == 1 => {
            println!(
                "result: placing-lost rank={} after_ms={} placed_some={}",
                l.rank,
                t.elapsed().as_millis(),
                buf.contains(&7)
            );
            Ok(())
        }
        other => Err(format!("a receive whose sender died gave {other:?}").into()),
    }
}

fn libc_sigkill() -> i32 {
    9
}

/// Ranks 1.. send `count` messages to rank 0's active port; the handler checks them and replies to
/// each sender's endpoint once it has all of that sender's messages.
fn active(w: &World, count: u64) -> R {
    use std::sync::{Arc, Mutex};
    let me = w.rank();
    if me == 0 {
        // Handlers are Send (the world may move between threads): share through Arc<Mutex>.
        let seen: Arc<Mutex<HashMap<usize, u64>>> = Arc::default();
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let reply = w.open(11)?;
        let (s2, e2) = (seen.clone(), errors.clone());
        let _port = w.bind(10, move |msg: &[u8], src: Source| {
            let mut s = s2.lock().expect("not poisoned");
            let c = s.entry(src.rank).or_insert(0);
            let size = 1 + (*c as usize * 977) % 100_000;
            let mut want = vec![0u8; size];
            fill(&mut want, seed_of(*c, size, src.rank));
            if msg != &want[..] {
                e2.lock()
                    .expect("not poisoned")
                    .push(format!("from {} #{c}: content or order wrong", src.rank));
            }
            *c += 1;
            if *c == count {
                // Handlers may send: tell the sender we have everything.
                if let Err(e) = reply.send_to(src.rank, 11, b"done") {
                    e2.lock()
                        .expect("not poisoned")
                        .push(format!("reply failed: {e}"));
                }
            }
        })?;
        let total = count * (w.size() as u64 - 1);
        while seen.lock().expect("not poisoned").values().sum::<u64>() < total {
            w.progress_wait()?;
        }
        if let Some(e) = errors.lock().expect("not poisoned").first() {
            return Err(e.clone().into());
        }
        println!("result: active handled={total} ok");
    } else {
        let ep = w.open(11)?;
        ep.target(0, 10)?;
        for c in 0..count {
            let size = 1 + (c as usize * 977) % 100_000;
            let mut msg = vec![0u8; size];
            fill(&mut msg, seed_of(c, size, me));
            ep.send(&msg)?;
        }
        let m = ep.recv()?;
        if &*m != b"done" {
            return Err("bad reply".into());
        }
    }
    Ok(())
}

/// Rank 0 waits on the endpoint's descriptor with poll(2); rank 1 sends after a pause, then
/// waits for rank 0's answer: it stays alive, so the descriptor must wake for the message
/// itself, not for news of the sender's end.
fn fd_wait(w: &World) -> R {
    use std::os::fd::AsRawFd;
    let ep = w.open(4)?;
    if w.rank() == 1 {
        std::thread::sleep(Duration::from_millis(300));
        ep.send_to(0, 4, b"wake up")?;
        if &*ep.recv()? != b"got it" {
            return Err("wrong answer".into());
        }
        return Ok(());
    }
    if w.rank() != 0 {
        return Ok(());
    }
    let mut wakeups = 0;
    loop {
        if let Some(m) = ep.try_recv()? {
            if &*m != b"wake up" {
                return Err("wrong message".into());
            }
            ep.send_to(1, 4, b"got it")?;
            println!("result: fd wakeups={wakeups} ok");
            return Ok(());
        }
        if volley_sys::poll_readable(ep.as_raw_fd(), Duration::from_secs(10)) {
            wakeups += 1;
        } else {
            return Err("descriptor never became readable".into());
        }
    }
}

/// Rank 1 sends 100 bytes; rank 0 first offers a 10-byte buffer (must be an error naming both
/// sizes, the message kept), then a large enough one.
fn too_small(w: &World) -> R {
    let ep = w.open(6)?;
    let mut msg = vec![0u8; 100];
    fill(&mut msg, 42);
    if w.rank() == 1 {
        ep.send_to(0, 6, &msg)?;
        return Ok(());
    }
    if w.rank() != 0 {
        return Ok(());
    }
    let mut small = [0u8; 10];
    match ep.recv_into(&mut small) {
        Err(
            e @ RecvError::BufferTooSmall {
                message: 100,
                buffer: 10,
                ..
            },
        ) => println!("result: error=\"{e}\""),
        other => return Err(format!("expected BufferTooSmall, got {other:?}").into()),
    }
    let mut big = [0u8; 200];
    let (n, _) = ep.recv_into(&mut big)?;
    check(&big[..n], 100, 42, "after too-small")?;
    println!("result: toosmall ok");
    Ok(())
}

/// A blocking send to this rank itself: a message that fits the ring arrives; one larger than
/// the ring fails at once with an error that says why (only this thread could receive it).
fn send_to_self(w: &World) -> R {
    let ep = w.open(9)?;
    let me = w.rank();
    ep.send_to(me, 9, b"hello")?;
    let mut buf = [0u8; 16];
    let (n, src) = ep.recv_into(&mut buf)?;
    if &buf[..n] != b"hello" || src.rank != me {
        return Err("the small message to itself came back wrong".into());
    }
    let huge = vec![1u8; 64 << 20];
    match ep.send_to(me, 9, &huge) {
        Err(e @ SendError::ToSelfTooLarge { .. }) => println!("result: error=\"{e}\""),
        other => return Err(format!("expected ToSelfTooLarge, got {other:?}").into()),
    }
    println!("result: self ok");
    Ok(())
}

/// One message of `size` bytes from rank 0 to rank 1, received into a caller buffer.
fn big(w: &World, size: usize) -> R {
    let ep = w.open(8)?;
    if w.rank() == 0 {
        let mut msg = vec![0u8; size];
        fill(&mut msg, 99);
        ep.send_to(1, 8, &msg)?;
        let ack = ep.recv()?;
        if &*ack != b"ok" {
            return Err("no ack".into());
        }
        println!("result: big size={size} ok");
    } else if w.rank() == 1 {
        let mut buf = vec![0u8; size];
        let (n, _) = ep.recv_into(&mut buf)?;
        check(&buf[..n], size, 99, "big message")?;
        ep.send_to(0, 8, b"ok")?;
    }
    Ok(())
}

/// Rank 1 sends to port 21 (unread for now, one message fragmented), then to port 20, then to an
/// active port. Rank 0 must get port 20's messages first, the active message while port 21's
/// still wait, and port 21's last, each port in order.
fn ports(w: &World) -> R {
    let sizes = [10usize, 150_000, 3, 0];
    if w.rank() == 1 {
        let ep = w.open(1)?;
        // isend: with single copy on, a blocking send of the large one would wait until rank 0
        // copies it, and rank 0 reads port 20 first.
        let mut reqs = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let mut m = vec![0u8; n];
            fill(&mut m, 21 + i as u64);
            reqs.push(ep.isend_to(0, 21, m)?);
        }
        for (i, &n) in sizes.iter().enumerate() {
            let mut m = vec![0u8; n];
            fill(&mut m, 20 + 100 * i as u64);
            ep.send_to(0, 20, &m)?;
        }
        ep.send_to(0, 22, b"active")?;
        for r in reqs {
            r.wait()?;
        }
        ep.recv()?; // wait for rank 0 to finish before closing
        return Ok(());
    }
    if w.rank() != 0 {
        return Ok(());
    }
    let p20 = w.open(20)?;
    let p21 = w.open(21)?;
    // A port open twice, and the reserved one, are refused, each with its own reason.
    match w.open(20) {
        Err(e @ volley::OpenError::PortInUse { .. }) => println!("result: error=\"{e}\""),
        other => return Err(format!("open(20) twice: {:?}", other.map(|_| ())).into()),
    }
    match w.open(u32::MAX) {
        Err(e @ volley::OpenError::Reserved { .. }) => println!("result: error=\"{e}\""),
        other => return Err(format!("open(u32::MAX): {:?}", other.map(|_| ())).into()),
    }
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let h = hits.clone();
    let _active = w.bind(22, move |m: &[u8], _| {
        assert_eq!(m, b"active");
        h.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    })?;
    for (i, &n) in sizes.iter().enumerate() {
        let m = p20.recv()?;
        check(&m, n, 20 + 100 * i as u64, &format!("port 20 message {i}"))?;
    }
    while hits.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        w.progress_wait()?;
    }
    let mut buf = vec![0u8; 200_000];
    for (i, &n) in sizes.iter().enumerate() {
        let (len, _) = p21.recv_into(&mut buf)?;
        check(
            &buf[..len],
            n,
            21 + i as u64,
            &format!("port 21 message {i}"),
        )?;
    }
    p21.send_to(1, 1, b"bye")?;
    println!("result: ports ok");
    Ok(())
}

/// Rank 1 does not read at first. Rank 0 try_sends until WouldBlock (the ring's worth, no more),
/// queues more with isend (incomplete while rank 1 sleeps), then rank 1 reads everything in
/// order and rank 0's requests complete.
fn backpressure(w: &World) -> R {
    let size = 1000usize;
    let ep = w.open(12)?;
    if w.rank() == 0 {
        ep.target(1, 12)?;
        let mut accepted = 0u64;
        let mut msg = vec![0u8; size];
        loop {
            fill(&mut msg, accepted);
            match ep.try_send(&msg) {
                Ok(()) => accepted += 1,
                Err(SendError::WouldBlock { rank: 1 }) => break,
                Err(e) => return Err(e.into()),
            }
            if accepted > 1_000_000 {
                return Err("try_send never reported WouldBlock".into());
            }
        }
        let mut reqs = Vec::new();
        for k in 0..20 {
            let mut m = vec![0u8; size];
            fill(&mut m, accepted + k);
            reqs.push(ep.isend(m)?);
        }
        let queued_incomplete = reqs
            .iter_mut()
            .filter_map(|r| r.test().ok())
            .filter(|done| !done)
            .count();
        if queued_incomplete == 0 {
            return Err("isend completed although the receiver reads nothing".into());
        }
        for r in reqs {
            r.wait()?;
        }
        ep.send(&[])?; // end marker
        let ack = ep.recv()?;
        let got = u64::from_le_bytes(ack[..8].try_into()?);
        if got != accepted + 20 {
            return Err(format!("receiver got {got} messages, {} were sent", accepted + 20).into());
        }
        println!("result: backpressure accepted={accepted} queued_incomplete={queued_incomplete} received={got}");
    } else if w.rank() == 1 {
        std::thread::sleep(Duration::from_millis(300));
        let mut seq = 0;
        loop {
            let m = ep.recv()?;
            if m.is_empty() {
                break;
            }
            check(&m, size, seq, &format!("message {seq}"))?;
            seq += 1;
        }
        ep.send_to(0, 12, &seq.to_le_bytes())?;
    }
    Ok(())
}

/// Rank 0 waits for a message that rank 1 sends after `ms` milliseconds; rank 0 reports the CPU
/// it used while waiting (as a fraction of the wall time) and how long after the send it woke.
/// With `near` (a job across hosts), the sender is the first other rank on rank 0's host and the
/// wait a matched receive from it, which looks at the shared-memory rings only, while a message
/// from the last rank on another host arrives over the network early on: the packets must not
/// keep the wait awake. Rank 0 then receives that message too and checks it.
fn idle(w: &World, ms: u64, near: bool) -> R {
    let ep = w.open(14)?;
    if near {
        ep.use_matching();
    }
    let nodes = &w.info().nodes;
    let (waker, far) = if near {
        let waker = (1..w.size()).find(|&r| nodes[r] == nodes[0]);
        let far = (1..w.size()).rev().find(|&r| nodes[r] != nodes[0]);
        let (Some(waker), Some(far)) = (waker, far) else {
            return Err("idle near needs a second rank on rank 0's host and one on another".into());
        };
        (waker, Some(far))
    } else {
        (1, None)
    };
    let note = b"from another host, while rank 0 waits";
    if w.rank() == waker {
        std::thread::sleep(Duration::from_millis(ms));
        let t = volley_sys::monotonic_ns().to_le_bytes();
        if near {
            ep.send_tagged(0, 14, &t)?;
        } else {
            ep.send_to(0, 14, &t)?;
        }
    } else if far == Some(w.rank()) {
        std::thread::sleep(Duration::from_millis(ms / 10));
        ep.send_tagged(0, 15, note)?;
    } else if w.rank() == 0 {
        let cpu0 = volley_sys::cpu_time();
        let t0 = Instant::now();
        let mut m = [0u8; 8];
        if near {
            ep.recv_matching(Some(waker), Some(14), &mut m)?;
        } else {
            let got = ep.recv()?;
            m.copy_from_slice(got.get(..8).ok_or("a short message")?);
        }
        let now = volley_sys::monotonic_ns();
        let wall = t0.elapsed();
        let cpu = volley_sys::cpu_time() - cpu0;
        let sent = u64::from_le_bytes(m);
        if let Some(far) = far {
            let mut got = [0u8; 64];
            let st = ep.recv_matching(Some(far), Some(15), &mut got)?;
            if &got[..st.len] != note {
                return Err(
                    format!("rank {far}'s message arrived altered: {:?}", &got[..st.len]).into(),
                );
            }
        }
        println!(
            "result: idle waited_ms={} cpu_fraction={:.4} wake_us={:.1}",
            wall.as_millis(),
            cpu.as_secs_f64() / wall.as_secs_f64(),
            now.saturating_sub(sent) as f64 / 1e3
        );
    }
    Ok(())
}

/// Rank 0 starts a non-blocking send of `size` bytes to rank 1, then computes without calling
/// volley for up to `max_ms`, looking only at whether the send has completed. With "thread", it
/// starts the progress thread first. Rank 1 receives and checks every byte.
fn overlap(w: &World, size: usize, max_ms: u64, thread: bool, matched: bool) -> R {
    let ep = w.open(15)?;
    if matched {
        // Matched on both sides: the large message goes by rendezvous.
        ep.use_matching();
    }
    if w.rank() == 0 {
        if thread {
            w.start_progress_thread()?;
        }
        let mut msg = vec![0u8; size];
        fill(&mut msg, 15);
        let req = ep.isend_to(1, 15, msg)?;
        let t = Instant::now();
        let mut acc = 0u64;
        let mut completed = false;
        while t.elapsed() < Duration::from_millis(max_ms) {
            // Computation that touches no volley state.
            for i in 0..100_000u64 {
                acc = acc.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
            if req.is_complete() {
                completed = true;
                break;
            }
        }
        std::hint::black_box(acc);
        println!(
            "result: overlap thread={thread} completed_during_compute={completed} compute_ms={}",
            t.elapsed().as_millis()
        );
        let back = req.wait()?;
        check(&back, size, 15, "buffer given back")?;
        if matched {
            ep.recv_matching(Some(1), None, &mut [0u8; 2])?;
        } else {
            ep.recv()?;
        }
    } else if w.rank() == 1 {
        let mut buf = vec![0u8; size];
        let n = if matched {
            ep.recv_matching(Some(0), None, &mut buf)?.len
        } else {
            ep.recv_into(&mut buf)?.0
        };
        check(&buf[..n], size, 15, "overlapped message")?;
        ep.send_to(0, 15, b"ok")?;
    }
    Ok(())
}

/// Rank 0 writes messages of every size up to the record limit straight into the ring with
/// send_with (no copy on its side); rank 1 checks them in order.
fn send_with(w: &World) -> R {
    let ep = w.open(16)?;
    let max = w.max_inline();
    let sizes: Vec<usize> = [0, 1, 63, 64, 4096, max - 1, max]
        .into_iter()
        .cycle()
        .take(70)
        .collect();
    if w.rank() == 0 {
        ep.target(1, 16)?;
        for (k, &n) in sizes.iter().enumerate() {
            ep.send_with(n, |buf| fill(buf, k as u64))?;
        }
        match ep.send_with(max + 1, |_| unreachable!("too large")) {
            Err(e @ SendError::TooLargeForSendWith { .. }) => println!("result: error=\"{e}\""),
            other => return Err(format!("expected TooLargeForSendWith, got {other:?}").into()),
        }
        ep.recv()?;
    } else if w.rank() == 1 {
        for (k, &n) in sizes.iter().enumerate() {
            let m = ep.recv()?;
            check(&m, n, k as u64, &format!("send_with message {k}"))?;
        }
        ep.send_to(0, 16, b"ok")?;
        println!("result: send_with received={} ok", sizes.len());
    }
    Ok(())
}

/// Prints who this process is; with "self", also sends a message to itself.
/// Two ranks say they are ready, stay quiet for `ms` (while the test sends forged packets at
/// them), then trade one message on port 3: it must be the genuine one, and neither rank may
/// have been told the other left.
fn quiet(w: &World, ms: u64) -> R {
    let ep = w.open(3)?;
    println!("result: quiet ready token={:016x}", w.token());
    std::io::Write::flush(&mut std::io::stdout())?;
    std::thread::sleep(Duration::from_millis(ms));
    if w.rank() == 0 {
        ep.send_to(1, 3, b"genuine")?;
        let m = ep.recv()?;
        if &*m != b"genuine" || m.source().rank != 1 {
            return Err(format!("rank 0 got {:?} from {:?}", &*m, m.source()).into());
        }
    } else if w.rank() == 1 {
        let m = ep.recv()?;
        if &*m != b"genuine" || m.source().rank != 0 {
            return Err(format!("rank 1 got {:?} from {:?}", &*m, m.source()).into());
        }
        ep.send_to(0, 3, &m)?;
    }
    println!("result: quiet ok");
    Ok(())
}

fn whoami(w: &World, selfsend: bool) -> R {
    println!(
        "result: rank={} size={} local_rank={} node={} token={:016x}",
        w.rank(),
        w.size(),
        w.local_rank(),
        w.node_id(),
        w.token()
    );
    if selfsend {
        let ep = w.open(1)?;
        ep.send_to(w.rank(), 1, b"to myself")?;
        let m = ep.recv()?;
        if &*m != b"to myself" || m.source().rank != w.rank() {
            return Err("self-send failed".into());
        }
        println!("result: selfsend ok");
    }
    Ok(())
}

/// Matched receives: every rank but 0 sends `count` messages to rank 0's port 40 with tag
/// `i % 3` and sizes from 0 B to several ring records. Rank 0 probes, then takes them with
/// exact, any-source, any-tag and fully wild patterns, and checks that each is the first
/// unreceived message of its sender that the pattern accepts (MPI's order) and intact.
fn matching(w: &World, count: u64) -> R {
    use std::collections::BTreeSet;
    let n = w.size();
    let me = w.rank();
    if n < 2 {
        return Err("match needs at least 2 ranks".into());
    }
    let sizes = [0usize, 8, 100, 4096, 70_000, 13];
    let size_of = |from: usize, i: u64| sizes[(i as usize + from) % sizes.len()];
    let ep = w.open(40)?;
    if me != 0 {
        // Non-blocking: rank 0 takes the messages in another order than they were sent, which a
        // blocking send of a large (rendezvous) message would wait on forever, in MPI too.
        let mut reqs = Vec::new();
        for i in 0..count {
            let size = size_of(me, i);
            let mut m = vec![0u8; size];
            fill(&mut m, seed_of(i, size, me));
            reqs.push(ep.isend_tagged(0, (i % 3) as u32, m)?);
        }
        for r in reqs {
            r.wait()?;
        }
        // Stay until rank 0 has checked everything.
        let mut done = [0u8; 4];
        ep.recv_matching(Some(0), Some(7), &mut done)?;
        return Ok(());
    }
    // What each sender still has for us.
    let mut left: Vec<BTreeSet<u64>> = (0..n)
        .map(|r| {
            if r == 0 {
                BTreeSet::new()
            } else {
                (0..count).collect()
            }
        })
        .collect();
    let mut buf = vec![0u8; 100_000];
    let mut take = |src: Option<usize>, tag: Option<u32>, left: &mut Vec<BTreeSet<u64>>| -> R {
        let st = ep.recv_matching(src, tag, &mut buf)?;
        if src.is_some_and(|s| s != st.source) || tag.is_some_and(|t| t != st.tag) {
            return Err(format!("{st:?} does not match source {src:?} tag {tag:?}").into());
        }
        let want = *left[st.source]
            .iter()
            .find(|&&i| tag.is_none_or(|t| i % 3 == t as u64))
            .ok_or_else(|| format!("{st:?}: nothing more was expected from that sender"))?;
        left[st.source].remove(&want);
        let size = size_of(st.source, want);
        if st.tag as u64 != want % 3 || st.len != size {
            return Err(format!(
                "{st:?}: expected message {want} (tag {}, {size} B)",
                want % 3
            )
            .into());
        }
        let mut m = vec![0u8; size];
        fill(&mut m, seed_of(want, size, st.source));
        if buf[..size] != m[..] {
            return Err(format!(
                "{st:?}: not message {want} of rank {}: order or content wrong",
                st.source
            )
            .into());
        }
        Ok(())
    };
    // A probe says what the receive will take, and leaves it queued.
    let st = ep.probe(Some(1), Some(2))?;
    if (st.source, st.tag, st.len) != (1, 2, size_of(1, 2)) {
        return Err(format!("probe saw {st:?}, expected message 2 of rank 1").into());
    }
    if ep.iprobe(None, Some(99))?.is_some() {
        return Err("iprobe matched a tag nobody sent".into());
    }
    // Too small a buffer: an error naming both sizes, and the message stays queued.
    let mut small = vec![0u8; st.len - 1];
    match ep.recv_matching(Some(1), Some(2), &mut small) {
        Err(volley::RecvError::BufferTooSmall {
            message, buffer, ..
        }) if message == st.len && buffer == st.len - 1 => {}
        other => return Err(format!("expected BufferTooSmall, got {other:?}").into()),
    }
    let tag2_from_1 = (0..count).filter(|i| i % 3 == 2).count();
    for _ in 0..tag2_from_1 {
        take(Some(1), Some(2), &mut left)?;
    }
    let tag1 = (1..n)
        .map(|_| (0..count).filter(|i| i % 3 == 1).count())
        .sum::<usize>();
    for _ in 0..tag1 {
        take(None, Some(1), &mut left)?;
    }
    if n > 2 {
        // One exact-source, any-tag receive from the last rank.
        take(Some(n - 1), None, &mut left)?;
    }
    while left.iter().any(|l| !l.is_empty()) {
        take(None, None, &mut left)?;
    }
    if let Some(st) = ep.iprobe(None, None)? {
        return Err(format!("a message nobody sent is queued: {st:?}").into());
    }
    for r in 1..n {
        ep.send_tagged(r, 7, b"done")?;
    }
    println!("result: match received={} ok", count * (n as u64 - 1));
    Ok(())
}

/// Requests on the caller's buffers (World::scope): posted receives match in the order posted,
/// with exact and wildcard patterns; wait any, some and all; test all; cancel; a handle used
/// twice; and a 3 MiB receive posted before its message arrives, and a 600 KB one after, both landing
/// in the caller's buffer. Every byte is checked after the scope has given the buffers back.
fn requests(w: &World, count: u64) -> R {
    use volley::{RequestError, RequestId};
    let n = w.size();
    let me = w.rank();
    if n < 2 {
        return Err("requests needs at least 2 ranks".into());
    }
    let sizes = [0usize, 8, 100, 4096, 70_000, 13, 300_000];
    let size_of = |from: usize, i: u64| sizes[(i as usize + from) % sizes.len()];
    // The receive posted first takes a message larger than the ring; the one posted after its
    // message arrived takes one that fits in the ring (an unreceived message holds its ring
    // space, and a larger one would hold back the sender's later messages until received: rings
    // are not yet drained into unexpected-message buffers).
    let (big_len, after_len) = ((3 << 20) + 5, 600_005);
    let ep = &w.open(41)?;
    if me != 0 {
        let msgs: Vec<Vec<u8>> = (0..count)
            .map(|i| {
                let size = size_of(me, i);
                let mut m = vec![0u8; size];
                fill(&mut m, seed_of(i, size, me));
                m
            })
            .collect();
        let mut big_after = vec![0u8; after_len];
        fill(&mut big_after, seed_of(10, after_len, me));
        let mut big_before = vec![0u8; big_len];
        fill(&mut big_before, seed_of(9, big_len, me));
        let mut go = [0u8; 2];
        let go = &mut go;
        w.scope(|s| -> R {
            let mut ids: Vec<Option<RequestId>> = Vec::new();
            if me == 1 {
                // Two tag-5 messages, A then B, for the two receives rank 0 posts.
                ids.push(Some(s.isend(ep, 0, 5, b"A-first")?));
                ids.push(Some(s.isend(ep, 0, 5, b"B-second")?));
            }
            for (i, m) in msgs.iter().enumerate() {
                ids.push(Some(s.isend(ep, 0, (i % 3) as u32, m)?));
            }
            if me == 1 {
                // A large message whose receive rank 0 posts first (it says "go" once it has),
                // then one it receives only after seeing it arrive.
                let g = s.irecv(ep, Some(0), Some(8), go)?;
                w.wait(g)?;
                ids.push(Some(s.isend(ep, 0, 9, &big_before)?));
                ids.push(Some(s.isend(ep, 0, 10, &big_after)?));
            }
            let mut errs = Vec::new();
            w.wait_all(&mut ids, |i, r| {
                if let Err(e) = r {
                    errs.push(format!("send {i}: {e}"));
                }
            });
            if !errs.is_empty() {
                return Err(errs.join("; ").into());
            }
            if ids.iter().any(Option::is_some) {
                return Err("wait_all left a request in the list".into());
            }
            Ok(())
        })?;
        // Stay until rank 0 has checked everything.
        let mut done = [0u8; 4];
        ep.recv_matching(Some(0), Some(7), &mut done)?;
        return Ok(());
    }
    let mut bufs: Vec<Vec<Vec<u8>>> = (0..n)
        .map(|r| {
            if r == 0 {
                Vec::new()
            } else {
                (0..count).map(|i| vec![0xEEu8; size_of(r, i)]).collect()
            }
        })
        .collect();
    let mut slots: Vec<Vec<Option<&mut [u8]>>> = bufs
        .iter_mut()
        .map(|v| v.iter_mut().map(|b| Some(&mut b[..])).collect())
        .collect();
    let (mut a, mut b, mut never) = ([0u8; 16], [0u8; 16], [0u8; 4]);
    let (mut big9, mut big10) = (vec![0u8; big_len], vec![0u8; after_len]);
    let (a_ref, b_ref, never_ref) = (&mut a, &mut b, &mut never);
    let (big9_ref, big10_ref) = (&mut big9[..], &mut big10[..]);
    let staging = |w: &World| {
        w.counters()
            .into_iter()
            .find(|(k, _)| *k == "staging_copies")
            .map(|(_, v)| v)
            .unwrap_or(0)
    };
    let (received, staged) =
        w.scope(move |s| -> Result<(u64, u64), Box<dyn std::error::Error>> {
            // Posting order decides: the any-source receive, posted first, takes A; the exact one B.
            let ra = s.irecv(ep, None, Some(5), a_ref)?;
            let rb = s.irecv(ep, Some(1), Some(5), b_ref)?;
            // Cancelled before anything matched it; its handle is then spent.
            let rc = s.irecv(ep, None, Some(99), never_ref)?;
            if !w.cancel(rc) {
                return Err("cancel refused a receive nothing had matched".into());
            }
            match w.wait(rc) {
                Err(RequestError::Cancelled) => {}
                other => return Err(format!("a cancelled receive completed with {other:?}").into()),
            }
            match w.wait(rc) {
                Err(RequestError::Stale { .. }) => {}
                other => return Err(format!("a spent handle gave {other:?}").into()),
            }
            let r9 = s.irecv(ep, Some(1), Some(9), big9_ref)?;
            // Exact (source, tag) receives, posted tag by tag; for the last of 3+ senders, any-tag
            // receives, which take its messages in the order sent.
            let mut ids: Vec<Option<RequestId>> = Vec::new();
            let mut what: Vec<(usize, u64)> = Vec::new();
            for (r, slots) in slots.iter_mut().enumerate().skip(1) {
                if r == n - 1 && n > 2 {
                    for (i, slot) in slots.iter_mut().enumerate() {
                        ids.push(Some(s.irecv(ep, Some(r), None, slot.take().unwrap())?));
                        what.push((r, i as u64));
                    }
                } else {
                    for t in 0..3u64 {
                        for i in (t..count).step_by(3) {
                            let buf = slots[i as usize].take().unwrap();
                            ids.push(Some(s.irecv(ep, Some(r), Some(t as u32), buf)?));
                            what.push((r, i));
                        }
                    }
                }
            }
            let mut seen = vec![false; ids.len()];
            let mut check = |k: usize, res: Result<volley::Status, RequestError>| -> R {
                let st = res.map_err(|e| format!("receive {k}: {e}"))?;
                let (r, i) = what[k];
                if seen[k] {
                    return Err(format!("receive {k} completed twice").into());
                }
                seen[k] = true;
                if (st.source, st.tag as u64, st.len) != (r, i % 3, size_of(r, i)) {
                    return Err(
                        format!("receive {k} for message {i} of rank {r} got {st:?}").into(),
                    );
                }
                Ok(())
            };
            // A third by wait_any, a third by wait_some, the rest by wait_all.
            for _ in 0..ids.len() / 3 {
                let (k, res) = w.wait_any(&mut ids).ok_or("wait_any found no request")?;
                if ids[k].is_some() {
                    return Err("wait_any left the completed request in the list".into());
                }
                check(k, res)?;
            }
            let mut errs: Vec<String> = Vec::new();
            let mut some = 0;
            while some < ids.len() / 3 {
                let got = w.wait_some(&mut ids, |k, res| {
                    if let Err(e) = check(k, res) {
                        errs.push(e.to_string());
                    }
                });
                if got == 0 {
                    return Err("wait_some returned with requests still active".into());
                }
                some += got;
            }
            w.wait_all(&mut ids, |k, res| {
                if let Err(e) = check(k, res) {
                    errs.push(e.to_string());
                }
            });
            if !errs.is_empty() {
                return Err(errs.join("; ").into());
            }
            if seen.iter().any(|s| !s) || w.wait_any(&mut ids).is_some() {
                return Err("a receive never completed".into());
            }
            // A and B by test_all.
            let mut pair = [Some(ra), Some(rb)];
            let mut got = [None, None];
            while !w.test_all(&mut pair, |k, res| got[k] = Some(res)) {}
            let sa = got[0].take().unwrap()?;
            let sb = got[1].take().unwrap()?;
            if (sa.source, sa.tag, sa.len, sb.source, sb.tag, sb.len) != (1, 5, 7, 1, 5, 8) {
                return Err(format!("posting order broken: A {sa:?}, B {sb:?}").into());
            }
            // The large receive posted before its message, then one posted after: rank 1 sends them
            // once every small message is in, and neither passes through a staging buffer.
            let staging_before = staging(w);
            ep.send_tagged(1, 8, b"go")?;
            let st = w.wait(r9)?;
            while ep.iprobe(Some(1), Some(10))?.is_none() {}
            let r10 = s.irecv(ep, Some(1), Some(10), big10_ref)?;
            let st10 = w.wait(r10)?;
            if st.len != big_len || st10.len != after_len {
                return Err(format!("large receives got {st:?} and {st10:?}").into());
            }
            Ok((what.len() as u64 + 4, staging(w) - staging_before))
        })?;
    for (r, msgs) in bufs.iter().enumerate() {
        for (i, m) in msgs.iter().enumerate() {
            check(
                m,
                size_of(r, i as u64),
                seed_of(i as u64, m.len(), r),
                "request",
            )?;
        }
    }
    if &a[..7] != b"A-first" || &b[..8] != b"B-second" {
        return Err("the tag-5 pair landed in the wrong buffers".into());
    }
    if never != [0u8; 4] {
        return Err("a cancelled receive wrote its buffer".into());
    }
    check(
        &big9,
        big_len,
        seed_of(9, big_len, 1),
        "large, posted first",
    )?;
    check(
        &big10,
        after_len,
        seed_of(10, after_len, 1),
        "large, posted after",
    )?;
    for r in 1..n {
        ep.send_tagged(r, 7, b"done")?;
    }
    println!("result: requests received={received} staging={staged} ok");
    Ok(())
}

/// Unexpected messages drained out of full rings: each sender first starts a 3 MiB message
/// (tag 1, larger than its ring), then sends small ones (tag 2) with blocking sends. Rank 0
/// receives the small ones first, which only works if the large one is moved out of the ring
/// (as MPI requires: a pair's messages may be received in another order than sent), then the
/// large one. Senders are taken one after the other, so the budget for drained messages
/// (VOLLEY_UNEXPECTED_BYTES) need hold only one large message at a time. With `rendezvous`
/// every rank declares its endpoint matched first, so the large message goes as a request to
/// send: only that small record is drained, whatever the budget, and the data is streamed once
/// the receive matches it.
fn unexpected(w: &World, count: u64, rendezvous: bool) -> R {
    let n = w.size();
    let me = w.rank();
    let ep = w.open(42)?;
    if rendezvous {
        ep.use_matching();
    }
    let big_len = (3 << 20) + 3;
    let small = |r: usize, i: u64| {
        let size = 1000 + (i as usize % 100);
        let mut m = vec![0u8; size];
        fill(&mut m, seed_of(i, size, r));
        m
    };
    if me != 0 {
        let mut big = vec![0u8; big_len];
        fill(&mut big, seed_of(1000, big_len, me));
        let req = ep.isend_tagged(0, 1, big)?;
        for i in 0..count {
            ep.send_tagged(0, 2, &small(me, i))?;
        }
        req.wait()?;
        let mut done = [0u8; 4];
        ep.recv_matching(Some(0), Some(7), &mut done)?;
        let c = w.counters();
        let get = |name: &str| c.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v);
        println!(
            "result: unexpected-sender rendezvous={} streams={} single={}",
            get("rendezvous_sends"),
            get("rendezvous_streams"),
            get("single_copy_sends")
        );
        return Ok(());
    }
    let mut buf = vec![0u8; big_len];
    let mut received = 0;
    for r in 1..n {
        for i in 0..count {
            let st = ep.recv_matching(Some(r), Some(2), &mut buf)?;
            let want = small(r, i);
            if st.len != want.len() || buf[..st.len] != want[..] {
                return Err(format!("small message {i} of rank {r}: wrong length or bytes").into());
            }
            received += 1;
        }
        let st = ep.recv_matching(Some(r), Some(1), &mut buf)?;
        check(
            &buf[..st.len],
            big_len,
            seed_of(1000, big_len, r),
            "drained large message",
        )?;
        received += 1;
    }
    for r in 1..n {
        ep.send_tagged(r, 7, b"done")?;
    }
    let drained = w
        .counters()
        .into_iter()
        .find(|(k, _)| *k == "drained")
        .map_or(0, |(_, v)| v);
    println!("result: unexpected received={received} drained={drained} ok");
    Ok(())
}

/// Active-port handlers run while a rank waits in a matched receive or a request, as in any
/// volley call that waits: rank 1 sends an active message to rank 0's port 44 and waits for the
/// handler's answer before it sends the tagged message rank 0 is waiting for.
fn active_while_matching(w: &World) -> R {
    if w.size() != 2 {
        return Err("active-match needs exactly 2 ranks".into());
    }
    let ep = w.open(45)?;
    if w.rank() == 0 {
        let answer = w.open(46)?;
        let _port = w.bind(44, move |msg: &[u8], src: Source| {
            let _ = answer.send_to(src.rank, 47, msg);
        })?;
        let mut buf = [0u8; 8];
        // A blocking matched receive, then a posted one waited for.
        let st = ep.recv_matching(Some(1), Some(7), &mut buf)?;
        let mut buf2 = [0u8; 8];
        let st2 = w.scope(|s| -> Result<volley::Status, Box<dyn std::error::Error>> {
            let r = s.irecv(&ep, Some(1), Some(8), &mut buf2)?;
            Ok(w.wait(r)?)
        })?;
        if (st.len, st2.len) != (5, 5) || &buf[..5] != b"first" || &buf2[..5] != b"again" {
            return Err(format!("got {st:?} {st2:?}").into());
        }
        println!("result: active-match handled=2 ok");
    } else {
        let back = w.open(47)?;
        for (word, tag) in [(&b"first"[..], 7), (&b"again"[..], 8)] {
            back.send_to(0, 44, word)?;
            let m = back.recv()?;
            if &*m != word {
                return Err("the handler's answer is wrong".into());
            }
            ep.send_tagged(0, tag, word)?;
        }
    }
    Ok(())
}

/// A World is Send: its endpoint moves to a new thread, exchanges messages there, comes back,
/// works on the main thread, and moves again. Every message is checked.
fn threads(w: &World, rounds: u64) -> R {
    if w.size() != 2 {
        return Err("threads needs exactly 2 ranks".into());
    }
    let me = w.rank();
    let ep = w.open(30)?;
    ep.target(1 - me, 30)?;
    fn work(ep: &volley::Endpoint, me: usize, hop: u64, rounds: u64) -> R {
        for i in 0..rounds {
            let seed = hop * 1_000_003 + i;
            let size = 1 + (i as usize * 7919) % 200_000;
            let mut m = vec![0u8; size];
            fill(&mut m, seed);
            if me == 0 {
                ep.send(&m)?;
                check(&ep.recv()?, size, seed, "echo")?;
            } else {
                let got = ep.recv()?;
                check(&got, size, seed, "message")?;
                ep.send(&got)?;
            }
        }
        Ok(())
    }
    let main_thread = std::thread::current().id();
    let mut ep = ep;
    for hop in 0..3 {
        if hop % 2 == 0 {
            let (back, on) = std::thread::spawn(move || {
                let r = work(&ep, me, hop, rounds).map_err(|e| e.to_string());
                (ep, (std::thread::current().id(), r))
            })
            .join()
            .map_err(|_| "the worker thread panicked")?;
            ep = back;
            if on.0 == main_thread {
                return Err("the worker ran on the main thread".into());
            }
            on.1?;
        } else {
            work(&ep, me, hop, rounds)?;
        }
    }
    println!("result: threads hops=3 rounds={rounds} ok");
    Ok(())
}

/// Completed requests are handed over in the order they completed, not in the order of the
/// caller's list: rank 1 sends `count` numbered messages, rank 0 posts as many receives from
/// any source with any tag once they have all arrived (each takes the next message, in posting
/// order), then waits for all of them through a list in the reverse order. The completions must
/// come in message order: a program that waits for any of several such receives takes the
/// messages in the order they came (HPC Challenge's MPIRandomAccess counts on it).
fn completion_order(w: &World, count: u64) -> R {
    if w.size() != 2 {
        return Err("completion-order needs 2 ranks".into());
    }
    let ep = &w.open(43)?;
    let count = count as usize;
    if w.rank() == 1 {
        for i in 0..count {
            ep.send_tagged(0, 1, &[i as u8])?;
        }
        ep.send_tagged(0, 2, b"sent")?;
        let mut done = [0u8; 4];
        ep.recv_matching(Some(0), Some(3), &mut done)?;
        return Ok(());
    }
    let mut sent = [0u8; 4];
    ep.recv_matching(Some(1), Some(2), &mut sent)?;
    let mut bufs = vec![[0xFFu8; 1]; count];
    let mut order = Vec::new();
    w.scope(|s| -> R {
        let mut posted = Vec::new();
        for b in bufs.iter_mut() {
            posted.push(Some(s.irecv(ep, None, None, b)?));
        }
        // The list, last posted first.
        let mut ids: Vec<_> = posted.into_iter().rev().collect();
        w.wait_all(&mut ids, |i, r| order.push((i, r.map(|st| st.len))));
        Ok(())
    })?;
    let got: Vec<u8> = order.iter().map(|&(i, _)| bufs[count - 1 - i][0]).collect();
    let want: Vec<u8> = (0..count as u8).collect();
    if order.iter().any(|(_, r)| !matches!(r, Ok(1))) || got != want {
        return Err(format!(
            "completions came in the order {got:?} of the messages (list positions {:?}), not {want:?}",
            order.iter().map(|o| o.0).collect::<Vec<_>>()
        )
        .into());
    }
    ep.send_tagged(1, 3, b"done")?;
    println!("result: completion-order {count} in message order");
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| {
        args.get(i)
            .map(|v| v.parse::<u64>().expect("number"))
            .unwrap_or(d)
    };
    let world = match World::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("volley-check: {e}");
            std::process::exit(3);
        }
    };
    let r = match args.first().map(String::as_str) {
        Some("pingpong") => {
            let sizes: Vec<usize> = args[1..].iter().map(|s| s.parse().expect("size")).collect();
            let rounds = std::env::var("ROUNDS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(3);
            pingpong(&world, &sizes, rounds)
        }
        Some("alltoall") => alltoall(&world, num(1, 100)),
        Some("ring") => ring_and_memory(&world, num(1, 10)),
        Some("crowd") => crowd(&world, num(1, 20000)),
        Some("numa") => numa(&world),
        Some("threads") => threads(&world, num(1, 200)),
        Some("match") => matching(&world, num(1, 30)),
        Some("requests") => requests(&world, num(1, 30)),
        Some("completion-order") => completion_order(&world, num(1, 6)),
        Some("unexpected") => unexpected(
            &world,
            num(1, 200),
            args.get(2).is_some_and(|a| a == "rendezvous"),
        ),
        Some("active-match") => active_while_matching(&world),
        Some("slow") => slow_receiver(&world, num(1, 1000), num(2, 65536) as usize),
        Some("stream") => stream_for(&world, num(1, 3000), num(2, 1 << 20) as usize),
        Some("killed-peer") => killed_peer(
            &world,
            args.iter().any(|a| a == "exit"),
            args.iter()
                .find_map(|a| a.strip_prefix("victim="))
                .map_or(1, |v| v.parse().expect("victim=RANK")),
        ),
        Some("lost-placing") => {
            lost_while_placing(&world, args.get(1).map(String::as_str) == Some("request"))
        }
        Some("active") => active(&world, num(1, 500)),
        Some("fd") => fd_wait(&world),
        Some("toosmall") => too_small(&world),
        Some("self") => send_to_self(&world),
        Some("big") => big(&world, num(1, 1 << 30) as usize),
        Some("exit-queued") => exit_with_queued_sends(&world, num(1, 200), num(2, 4000) as usize),
        Some("keep") => keep_lent(&world, num(1, 1000), num(2, 100) as usize),
        Some("hold") => {
            println!(
                "result: hold pid={} token={:016x}",
                std::process::id(),
                world.token()
            );
            loop {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some("ports") => ports(&world),
        Some("quiet") => quiet(&world, num(1, 3000)),
        Some("idle") => idle(
            &world,
            num(1, 2000),
            args.get(2).map(String::as_str) == Some("near"),
        ),
        Some("send-with") => send_with(&world),
        Some("overlap") => overlap(
            &world,
            num(1, 32 << 20) as usize,
            num(2, 10_000),
            args.iter().skip(3).any(|a| a == "thread"),
            args.iter().skip(3).any(|a| a == "matched"),
        ),
        Some("backpressure") => backpressure(&world),
        Some("whoami") => whoami(&world, args.get(1).map(String::as_str) == Some("self")),
        _ => {
            eprintln!("usage: volley-check pingpong SIZES... | alltoall N | slow N SIZE | killed-peer [exit] | active N | fd | toosmall | self | big SIZE | ports | backpressure | idle MS [near] | overlap SIZE MAX_MS [thread] [matched] | send-with | whoami [self] | hold | threads N | match N | requests N | unexpected N [rendezvous] | active-match");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("volley-check rank {}: FAILED: {e}", world.rank());
        std::process::exit(1);
    }
}
