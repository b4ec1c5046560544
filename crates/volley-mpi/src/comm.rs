//! Communicators, groups and attribute caching.
//!
//! A communicator is a group (its ranks' job ranks, in order) and a context id that keeps its
//! traffic apart from every other communicator's, on this host and across hosts: the core
//! matches on the context, so two communicators never take each other's messages. A new
//! communicator's id is agreed over its parent: each member offers its free ids (a 1,024-bit
//! mask), the masks are AND-reduced, and the lowest id free everywhere is taken (MPICH's scheme).
//! Disjoint communicators made by one split may share an id: they share no rank.

use crate::abi::{self, class, H};
use crate::coll::{
    allgather_bytes, bcast_a, bcast_bytes, exchange, exchange_world, gather_a, gather_bytes,
    TAG_CID, TAG_CREATE_GROUP, TAG_ICREATE, TAG_INTER,
};
use crate::err::{array, array_mut, c_str, fail, get, put, put_str, R};
use crate::nbc::{block_on, Seq};
use crate::state::{contexts, index, rt, CommCore, Keyval, CTX_WORDS, KIND_COMM, KIND_GROUP};
use std::ffi::{c_char, c_void};
use std::os::raw::c_int;
use std::sync::Arc;

/// Agrees on a context id over `parent` (every member calls it).
pub(crate) fn agree_cid(parent: &CommCore) -> R<u32> {
    block_on(agree_cid_a(parent, parent.next_seq()))
}

/// Agrees on a context id over `parent` as its collective `s` (every member calls it, of both
/// groups of an intercommunicator): the AND of the members' offers (`state::Contexts`), the
/// lowest bit of it. Blocking
/// (MPI_Comm_dup) or not (MPI_Comm_idup). When agreements are in flight at once, only the
/// least of them is offered contexts at a member; the others find nothing and try again.
async fn agree_cid_a(parent: &CommCore, s: Seq) -> R<u32> {
    let key = (parent.cid, s.n);
    contexts().begin(key);
    let r = agree_rounds(parent, s, key).await;
    contexts().end(key);
    r
}

async fn agree_rounds(parent: &CommCore, s: Seq, key: (u32, u32)) -> R<u32> {
    let words = CTX_WORDS * 8;
    for attempt in 0u32.. {
        let blocking = s.n & (1 << 31) == 0;
        let (offer, free) = {
            let mut cx = contexts();
            let free = if blocking {
                cx.free_mask()
            } else {
                cx.free_beyond_reserve()
            };
            (cx.offer_to(key, blocking), free)
        };
        // Each member's offer, then its free contexts (to tell "taken everywhere" from "offered
        // to another agreement for now").
        let mine: Vec<u8> = offer
            .iter()
            .chain(free.iter())
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let mut all = vec![0u8; mine.len() * parent.size()];
        let mut agreed = vec![0u8; mine.len()];
        let r = async {
            gather_a(parent, s, 0, &mine, &mut all, TAG_CID).await?;
            if parent.rank == 0 {
                agreed = and_masks(&all, mine.len());
                // An intercommunicator: the two groups' rank 0s trade their groups' ANDs and
                // AND them, so both groups get the same result (and retry together).
                if let Some((remote, _)) = &parent.remote {
                    let tag = s.tag(TAG_INTER);
                    let mut theirs = vec![0u8; agreed.len()];
                    crate::nbc::exchange_world(
                        &parent.coll,
                        &[(remote[0], tag, &agreed)],
                        &mut [(remote[0], tag, &mut theirs)],
                    )
                    .await?;
                    agreed.iter_mut().zip(&theirs).for_each(|(a, b)| *a &= b);
                }
            }
            bcast_a(parent, s, 0, &mut agreed).await
        }
        .await;
        {
            let mut cx = contexts();
            cx.withdraw(&offer);
            r?;
            if let Ok(cid) = lowest_free(&agreed[..words]) {
                // Taken by the members that make a communicator with it (not by those a split
                // leaves out), before any other agreement can run here.
                return Ok(cid);
            }
        }
        // Nothing free at every member: the error says so.
        lowest_free(&agreed[words..])?;
        if attempt > 1_000_000 {
            return Err(fail(
                class::OTHER,
                "communicator creations in flight at once could not agree on a context id",
            ));
        }
        // Another agreement holds the contexts at some member: let it finish.
        if crate::nbc::is_blocking() {
            crate::p2p::progress_nbcs();
        }
        crate::nbc::yield_now().await;
    }
    unreachable!("the loop returns")
}

/// Agrees on a context id among `members` (ranks of `parent`, in group order; this process one
/// of them) only: MPI_Comm_create_group, which the rest of the parent does not call. Linear, to
/// and from the first member, on the parent's collective context with a tag made of the
/// program's (so concurrent calls with different tags keep apart).
pub(crate) fn agree_cid_among(parent: &CommCore, members: &[usize], tag: u32) -> R<u32> {
    let mine: [u64; CTX_WORDS] = contexts().unpledged();
    let bytes: Vec<u8> = mine.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let leader = members[0];
    let mut agreed = bytes.clone();
    if parent.rank == leader {
        let mut all: Vec<Vec<u8>> = members[1..]
            .iter()
            .map(|_| vec![0u8; bytes.len()])
            .collect();
        {
            let mut recvs: Vec<(usize, u32, &mut [u8])> = members[1..]
                .iter()
                .zip(all.iter_mut())
                .map(|(&r, b)| (r, tag, &mut b[..]))
                .collect();
            exchange(parent, &[], &mut recvs)?;
        }
        for chunk in &all {
            for (k, w) in chunk.chunks(8).enumerate() {
                let x = u64::from_ne_bytes(agreed[8 * k..8 * k + 8].try_into().expect("8 bytes"))
                    & u64::from_ne_bytes(w.try_into().expect("8 bytes"));
                agreed[8 * k..8 * k + 8].copy_from_slice(&x.to_ne_bytes());
            }
        }
        let sends: Vec<(usize, u32, &[u8])> = members[1..]
            .iter()
            .map(|&r| (r, tag, &agreed[..]))
            .collect();
        exchange(parent, &sends, &mut [])?;
    } else {
        exchange(parent, &[(leader, tag, &bytes)], &mut [])?;
        exchange(parent, &[], &mut [(leader, tag, &mut agreed)])?;
    }
    lowest_free(&agreed)
}

fn lowest_free(agreed: &[u8]) -> R<u32> {
    for (k, w) in agreed.chunks(8).enumerate() {
        let w = u64::from_ne_bytes(w.try_into().expect("8 bytes"));
        if w != 0 {
            return Ok(k as u32 * 64 + w.trailing_zeros());
        }
    }
    Err(fail(
        class::OTHER,
        "no communicator context is free at every member (1,024 per process): free communicators with MPI_Comm_free",
    ))
}

/// This process's free-context mask, as bytes.
fn mask_bytes() -> R<Vec<u8>> {
    let mine: [u64; CTX_WORDS] = contexts().unpledged();
    Ok(mine.iter().flat_map(|w| w.to_ne_bytes()).collect())
}

/// The AND of `n` masks laid end to end.
fn and_masks(all: &[u8], len: usize) -> Vec<u8> {
    let mut m = vec![0xffu8; len];
    for chunk in all.chunks(len) {
        for (a, b) in m.iter_mut().zip(chunk) {
            *a &= b;
        }
    }
    m
}

fn u32s(v: &[usize]) -> Vec<u8> {
    v.iter().flat_map(|&x| (x as u32).to_ne_bytes()).collect()
}

fn from_u32s(b: &[u8]) -> Vec<usize> {
    b.chunks(4)
        .map(|c| u32::from_ne_bytes(c.try_into().expect("4 bytes")) as usize)
        .collect()
}

/// Agrees on a context id over both groups of intercommunicator `c` (every member calls it),
/// passing `extra` from each group's leader (rank 0) to the other group: the free masks are
/// AND-ed within each group at its leader, the leaders trade theirs, and each tells its group.
/// Returns the context id and the other group's `extra`.
fn agree_inter(c: &CommCore, extra: u32) -> R<(u32, u32)> {
    let (remote, _) = c.remote.as_ref().expect("an intercommunicator");
    let mine = mask_bytes()?;
    let len = mine.len();
    let mut all = vec![0u8; len * c.size()];
    gather_bytes(c, 0, &mine, &mut all, TAG_INTER)?;
    let mut hdr = [0u8; 8];
    if c.rank == 0 {
        let mut out = extra.to_ne_bytes().to_vec();
        out.extend(and_masks(&all, len));
        let mut theirs = vec![0u8; out.len()];
        exchange_world(
            &c.coll,
            &[(remote[0], TAG_INTER, &out)],
            &mut [(remote[0], TAG_INTER, &mut theirs)],
        )?;
        let both: Vec<u8> = out[4..]
            .iter()
            .zip(&theirs[4..])
            .map(|(a, b)| a & b)
            .collect();
        hdr[..4].copy_from_slice(&lowest_free(&both)?.to_ne_bytes());
        hdr[4..].copy_from_slice(&theirs[..4]);
    }
    bcast_bytes(c, 0, &mut hdr)?;
    let cid = u32::from_ne_bytes(hdr[..4].try_into().expect("4 bytes"));
    let their = u32::from_ne_bytes(hdr[4..].try_into().expect("4 bytes"));
    Ok((cid, their))
}

/// Makes the communicator of `group` with context `cid` and stores it; its handle. Copies the
/// parent's error handler.
pub(crate) fn install(cid: u32, group: Arc<[usize]>, parent: H) -> R<H> {
    install_topo(cid, group, parent, None)
}

/// `install`, with a process topology.
pub(crate) fn install_topo(
    cid: u32,
    group: Arc<[usize]>,
    parent: H,
    topo: Option<Arc<crate::topo::Topo>>,
) -> R<H> {
    let mut rt = rt()?;
    let eh = rt.comm_slot(parent)?.errhandler;
    let mut core = rt.make_comm(cid, group)?;
    core.topo = topo;
    crate::state::ctx_take(cid, true);
    Ok(rt.add_comm(core, eh))
}

/// Runs the copy callbacks of `from`'s attributes for the duplicate `to` (outside the state's
/// borrow: the callbacks may call MPI).
fn copy_attrs(from: H, to: H) -> R {
    let copied = copied_attrs(from)?;
    rt()?.comm_slot_mut(to)?.attrs = copied;
    Ok(())
}

/// The attributes a duplicate of `from` gets: its copy callbacks' results (run outside the
/// state's borrow).
fn copied_attrs(from: H) -> R<Vec<(c_int, usize)>> {
    let attrs = rt()?.comm_slot(from)?.attrs.clone();
    run_copy_callbacks(from, attrs)
}

/// What object `from`'s attributes `attrs` become on its duplicate: each keyval's copy callback
/// decides (MPI_COMM_NULL_COPY_FN and MPI_TYPE_NULL_COPY_FN drop it, the DUP_FNs keep the value).
/// Communicators and datatypes share the keyvals' table and the callbacks' C signature.
pub(crate) fn run_copy_callbacks(from: H, attrs: Vec<(c_int, usize)>) -> R<Vec<(c_int, usize)>> {
    let keyvals = rt()?.keyvals.clone();
    let mut copied = Vec::new();
    for (k, v) in attrs {
        let Some(Some(kv)) = keyvals.get((k - 1) as usize).copied() else {
            continue;
        };
        match kv.copy {
            0 => {}
            1 => copied.push((k, v)),
            f => {
                // SAFETY: a copy callback the program registered with MPI_Comm_create_keyval.
                let f: crate::state::CopyFn = unsafe { std::mem::transmute(f) };
                let mut out: *mut c_void = std::ptr::null_mut();
                let mut flag: c_int = 0;
                // SAFETY: called as MPI defines.
                let rc = unsafe {
                    f(
                        from,
                        k,
                        kv.extra as *mut c_void,
                        v as *mut c_void,
                        &mut out as *mut *mut c_void as *mut c_void,
                        &mut flag,
                    )
                };
                if rc != 0 {
                    return Err(crate::err::fail_code(
                        rc,
                        format!("the copy callback of keyval {k} returned {rc}"),
                    ));
                }
                if flag != 0 {
                    copied.push((k, out as usize));
                }
            }
        }
    }
    Ok(copied)
}

/// Runs the delete callback of one attribute.
pub(crate) fn delete_attr(comm: H, k: c_int, v: usize) -> R {
    let kv = { rt()?.keyvals.get((k - 1) as usize).copied().flatten() };
    if let Some(Keyval { delete, extra, .. }) = kv {
        if delete != 0 {
            // SAFETY: a delete callback the program registered with MPI_Comm_create_keyval.
            let f: crate::state::DeleteFn = unsafe { std::mem::transmute(delete) };
            // SAFETY: called as MPI defines.
            let rc = unsafe { f(comm, k, v as *mut c_void, extra as *mut c_void) };
            if rc != 0 {
                return Err(crate::err::fail_code(
                    rc,
                    format!("the delete callback of keyval {k} returned {rc}"),
                ));
            }
        }
    }
    Ok(())
}

/// Fills the zero entries of `dims` so that the product of all is `nnodes`, as close to each
/// other as possible and in non-increasing order (MPI-3.1 7.5.2). "As close as possible" is read
/// as MPICH reads it (its test suite checks thousands of cases): the smallest difference between
/// the largest and the smallest, then the largest small factors.
fn dims_create(nnodes: c_int, dims: &mut [c_int]) -> R {
    if let Some(&d) = dims.iter().find(|&&d| d < 0) {
        return Err(fail(
            class::DIMS,
            format!("MPI_Dims_create: a dimension is negative ({d})"),
        ));
    }
    let fixed: i64 = dims.iter().filter(|&&d| d > 0).map(|&d| d as i64).product();
    if nnodes as i64 % fixed != 0 {
        return Err(fail(
            class::DIMS,
            format!("MPI_Dims_create: {nnodes} nodes cannot be split over the fixed dimensions (their product is {fixed})"),
        ));
    }
    let left = nnodes as i64 / fixed;
    let free: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] == 0).collect();
    if free.is_empty() {
        return if left == 1 {
            Ok(())
        } else {
            Err(fail(
                class::DIMS,
                format!("MPI_Dims_create: the fixed dimensions multiply to {fixed}, not {nnodes}"),
            ))
        };
    }
    for (&i, g) in free.iter().zip(balanced(left, free.len())) {
        dims[i] = g as c_int;
    }
    Ok(())
}

/// `n` as `k` factors in non-increasing order: of every such way, the one whose largest and
/// smallest factors differ least, and among those the one whose factors, read from the
/// smallest, are largest.
fn balanced(n: i64, k: usize) -> Vec<i64> {
    let divs: Vec<i64> = (1..=n)
        .take_while(|d| d * d <= n)
        .filter(|d| n % d == 0)
        .collect();
    let mut all: Vec<i64> = divs
        .iter()
        .map(|&d| n / d)
        .chain(divs.iter().copied())
        .collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    all.dedup();
    let mut best: Option<Vec<i64>> = None;
    let mut cur = Vec::with_capacity(k);
    search(n, k, n, &all, &mut cur, &mut best);
    best.expect("n = n x 1 x ... x 1 is always a way")
}

fn better(a: &[i64], b: &[i64]) -> bool {
    let spread = |v: &[i64]| v[0] - v[v.len() - 1];
    match spread(a).cmp(&spread(b)) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Greater => false,
        std::cmp::Ordering::Equal => a.iter().rev().gt(b.iter().rev()),
    }
}

/// Extends `cur` with `k` more factors of `m`, each at most `cap`, keeping the best way in
/// `best`; `divs` are the divisors of the whole number, largest first.
fn search(
    m: i64,
    k: usize,
    cap: i64,
    divs: &[i64],
    cur: &mut Vec<i64>,
    best: &mut Option<Vec<i64>>,
) {
    if k == 0 {
        if m == 1 && best.as_ref().is_none_or(|b| better(cur, b)) {
            *best = Some(cur.clone());
        }
        return;
    }
    for &x in divs.iter().filter(|&&x| x <= cap.min(m) && m % x == 0) {
        // k factors of at most x must reach m.
        let mut reach = 1i64;
        for _ in 0..k {
            reach = reach.saturating_mul(x);
            if reach >= m {
                break;
            }
        }
        if reach < m {
            break;
        }
        // The smallest factor is at most x: the spread is at least the largest minus x, and
        // only grows as x shrinks.
        if let (Some(b), Some(&top)) = (best.as_ref(), cur.first()) {
            if top - x > b[0] - b[b.len() - 1] {
                break;
            }
        }
        cur.push(x);
        search(m / x, k - 1, x, divs, cur, best);
        cur.pop();
    }
}

fn group_of(h: H) -> R<Arc<[usize]>> {
    rt()?.group(h)
}

fn new_group(g: Vec<usize>, out: *mut H) -> R {
    let h = rt()?.add_group(Arc::from(g));
    // SAFETY: the caller's output argument.
    unsafe { put(out, h) }
}

fn rank_in(g: &[usize], r: c_int) -> R<usize> {
    if r < 0 || r as usize >= g.len() {
        return Err(fail(
            class::RANK,
            format!("rank {r} is not in the group (it has {} ranks)", g.len()),
        ));
    }
    Ok(r as usize)
}

/// The ranks of (first, last, stride) triples, checked.
fn ranges(g: &[usize], rs: &[[c_int; 3]]) -> R<Vec<usize>> {
    let mut out = Vec::new();
    for &[first, last, stride] in rs {
        if stride == 0 {
            return Err(fail(class::ARG, "a range's stride is 0"));
        }
        let mut r = first;
        while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
            out.push(rank_in(g, r)?);
            r += stride;
        }
    }
    Ok(out)
}

crate::mpi! {
    fn MPI_Comm_size / PMPI_Comm_size(comm: H, size: *mut c_int) [comm] {
        let n = rt()?.comm_slot(comm)?.core.size();
        // SAFETY: the caller's output argument.
        unsafe { put(size, n as c_int) }
    }

    fn MPI_Comm_rank / PMPI_Comm_rank(comm: H, rank: *mut c_int) [comm] {
        let r = rt()?.comm_slot(comm)?.core.rank;
        // SAFETY: the caller's output argument.
        unsafe { put(rank, r as c_int) }
    }

    fn MPI_Comm_dup / PMPI_Comm_dup(comm: H, newcomm: *mut H) [comm] {
        dup(comm, newcomm)
    }

    fn MPI_Comm_idup / PMPI_Comm_idup(comm: H, newcomm: *mut H, request: *mut H) [comm] {
        idup(comm, newcomm, request)
    }

    fn MPI_Comm_idup_with_info / PMPI_Comm_idup_with_info(comm: H, _info: H, newcomm: *mut H, request: *mut H) [comm] {
        // MPI-4.0; volley reads no communicator hints: an idup.
        idup(comm, newcomm, request)
    }

    fn MPI_Comm_dup_with_info / PMPI_Comm_dup_with_info(comm: H, _info: H, newcomm: *mut H) [comm] {
        // volley reads no communicator hints: a dup.
        dup(comm, newcomm)
    }

    fn MPI_Comm_set_info / PMPI_Comm_set_info(comm: H, _info: H) [comm] {
        rt()?.comm(comm)?;
        Ok(())
    }

    fn MPI_Comm_get_info / PMPI_Comm_get_info(comm: H, info_used: *mut H) [comm] {
        rt()?.comm(comm)?;
        // No hints in use: a new, empty info object.
        crate::info::create(info_used)
    }

    fn MPI_Keyval_create / PMPI_Keyval_create(copy_fn: usize, delete_fn: usize, keyval: *mut c_int, extra_state: *mut c_void) {
        // MPI-1's name of MPI_Comm_create_keyval (deprecated, still used).
        create_keyval(copy_fn, delete_fn, keyval, extra_state, crate::state::KeyvalKind::Comm)
    }

    fn MPI_Keyval_free / PMPI_Keyval_free(keyval: *mut c_int) {
        free_keyval(keyval, crate::state::KeyvalKind::Comm)
    }

    fn MPI_Attr_put / PMPI_Attr_put(comm: H, keyval: c_int, attribute_val: *mut c_void) [comm] {
        set_attr(comm, keyval, attribute_val)
    }

    fn MPI_Attr_get / PMPI_Attr_get(comm: H, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) [comm] {
        get_attr(comm, keyval, attribute_val, flag)
    }

    fn MPI_Attr_delete / PMPI_Attr_delete(comm: H, keyval: c_int) [comm] {
        delete_attr_call(comm, keyval)
    }

    fn MPI_Comm_split / PMPI_Comm_split(comm: H, color: c_int, key: c_int, newcomm: *mut H) [comm] {
        split(comm, color, key, newcomm)
    }

    fn MPI_Comm_split_type / PMPI_Comm_split_type(comm: H, split_type: c_int, key: c_int, info: H, newcomm: *mut H) [comm] {
        let color = split_color(comm, split_type, info)?;
        split(comm, color, key, newcomm)
    }

    fn MPI_Comm_create / PMPI_Comm_create(comm: H, group: H, newcomm: *mut H) [comm] {
        let c = rt()?.comm(comm)?;
        if c.is_inter() {
            return create_inter(&c, comm, group, newcomm);
        }
        let g = group_of(group)?;
        if let Some(&w) = g.iter().find(|&&w| c.comm_rank(w) == abi::UNDEFINED || (c.w2c.is_none() && w >= c.size())) {
            return Err(fail(class::GROUP, format!("job rank {w} of the group is not in the communicator")));
        }
        let cid = agree_cid(&c)?;
        let me = rt()?.world.rank();
        let h = if g.contains(&me) { install(cid, g, comm)? } else { abi::COMM_NULL };
        // SAFETY: the caller's output argument.
        unsafe { put(newcomm, h) }
    }

    fn MPI_Comm_create_group / PMPI_Comm_create_group(comm: H, group: H, tag: c_int, newcomm: *mut H) [comm] {
        let c = crate::coll::intra(comm)?;
        let g = group_of(group)?;
        if !(0..=abi::MAX_TAG).contains(&tag) {
            return Err(fail(class::TAG, format!("tag {tag} is invalid: tags are 0 to MPI_TAG_UB")));
        }
        let me = rt()?.world.rank();
        if !g.contains(&me) {
            return Err(fail(class::GROUP, "MPI_Comm_create_group is called by the members of the group only, and this process is not one"));
        }
        let mut members = Vec::with_capacity(g.len());
        for &w in g.iter() {
            let r = c.comm_rank(w);
            if r == abi::UNDEFINED || (c.w2c.is_none() && w >= c.size()) {
                return Err(fail(class::GROUP, format!("job rank {w} of the group is not in the communicator")));
            }
            members.push(r as usize);
        }
        let cid = agree_cid_among(&c, &members, TAG_CREATE_GROUP | (tag as u32 & 0xf_ffff))?;
        let h = install(cid, g, comm)?;
        // SAFETY: the caller's output argument.
        unsafe { put(newcomm, h) }
    }

    fn MPI_Comm_free / PMPI_Comm_free(comm: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(comm)? };
        if h == abi::COMM_WORLD || h == abi::COMM_SELF {
            return Err(fail(class::COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed"));
        }
        let attrs = rt()?.comm_slot(h)?.attrs.clone();
        for (k, v) in attrs {
            delete_attr(h, k, v)?;
        }
        let mut rt = rt()?;
        let i = index(KIND_COMM, h).expect("checked by comm_slot");
        let slot = rt.comms[i].take().expect("checked by comm_slot");
        // Its context is free again when the last operation that holds it ends (CommCore's drop):
        // a request still pending keeps the context's endpoints open (MPI-3.1 6.4.3).
        drop(slot);
        drop(rt);
        // SAFETY: the caller's in-out argument.
        unsafe { put(comm, abi::COMM_NULL) }
    }

    /// MPI-3.1 10.5.4: collective; once every member's communication on the communicator is
    /// complete and matched (the program's part, which a barrier over both groups of an
    /// intercommunicator confirms), it is freed. With no parent or spawned processes in volley,
    /// this is how a program written for them lets go of its other communicators.
    fn MPI_Comm_disconnect / PMPI_Comm_disconnect(comm: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(comm)? };
        if h == abi::COMM_WORLD || h == abi::COMM_SELF {
            return Err(fail(class::COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be disconnected"));
        }
        rt()?.comm_slot(h)?;
        // SAFETY: an internal call on the program's communicator.
        crate::err::rc_ok(unsafe { crate::coll::PMPI_Barrier(h) }, "MPI_Comm_disconnect's barrier")?;
        // SAFETY: the caller's in-out argument, passed on.
        crate::err::rc_ok(unsafe { PMPI_Comm_free(comm) }, "freeing the communicator")
    }

    fn MPI_Comm_compare / PMPI_Comm_compare(comm1: H, comm2: H, result: *mut c_int) {
        let rt = rt()?;
        let (a, b) = (rt.comm(comm1)?, rt.comm(comm2)?);
        let r = if comm1 == comm2 {
            abi::IDENT
        } else if a.group == b.group {
            abi::CONGRUENT
        } else {
            let mut x = a.group.to_vec();
            let mut y = b.group.to_vec();
            x.sort_unstable();
            y.sort_unstable();
            if x == y { abi::SIMILAR } else { abi::UNEQUAL }
        };
        // SAFETY: the caller's output argument.
        unsafe { put(result, r) }
    }

    fn MPI_Comm_test_inter / PMPI_Comm_test_inter(comm: H, flag: *mut c_int) [comm] {
        let inter = rt()?.comm(comm)?.is_inter();
        // SAFETY: the caller's output argument.
        unsafe { put(flag, inter as c_int) }
    }

    fn MPI_Dims_create / PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) {
        if nnodes <= 0 || ndims < 0 {
            return Err(fail(class::DIMS, format!("MPI_Dims_create needs nnodes > 0 and ndims >= 0 (got {nnodes} and {ndims})")));
        }
        // SAFETY: MPI: dims holds ndims entries.
        let d = unsafe { array_mut(dims, ndims)? };
        dims_create(nnodes, d)
    }

    fn MPI_Comm_remote_size / PMPI_Comm_remote_size(comm: H, size: *mut c_int) [comm] {
        let c = rt()?.comm(comm)?;
        let (g, _) = c.remote.as_ref().ok_or_else(|| fail(class::COMM, "MPI_Comm_remote_size needs an intercommunicator"))?;
        // SAFETY: the caller's output argument.
        unsafe { put(size, g.len() as c_int) }
    }

    fn MPI_Comm_remote_group / PMPI_Comm_remote_group(comm: H, group: *mut H) [comm] {
        let c = rt()?.comm(comm)?;
        let (g, _) = c.remote.as_ref().ok_or_else(|| fail(class::COMM, "MPI_Comm_remote_group needs an intercommunicator"))?;
        let h = rt()?.add_group(g.clone());
        // SAFETY: the caller's output argument.
        unsafe { put(group, h) }
    }

    fn MPI_Intercomm_create / PMPI_Intercomm_create(local_comm: H, local_leader: c_int, peer_comm: H, remote_leader: c_int, tag: c_int, newintercomm: *mut H) [local_comm] {
        // Checked first, as MPICH does: a null output is this call's error at every rank, before
        // any argument that only the leaders use.
        if newintercomm.is_null() {
            return Err(fail(class::ARG, "the newintercomm argument is a null pointer"));
        }
        let lc = crate::coll::intra(local_comm)?;
        if local_leader < 0 || local_leader as usize >= lc.size() {
            return Err(fail(class::RANK, format!("local leader {local_leader} is not a rank of the local communicator")));
        }
        if !(0..=abi::MAX_TAG).contains(&tag) {
            return Err(fail(class::TAG, format!("tag {tag} is invalid: tags are 0 to MPI_TAG_UB")));
        }
        let leader = local_leader as usize;
        let mine = mask_bytes()?;
        let len = mine.len();
        let mut all = vec![0u8; len * lc.size()];
        gather_bytes(&lc, leader, &mine, &mut all, TAG_INTER)?;
        // The leader trades (its group's mask, its group) with the remote leader over the peer
        // communicator, then tells its group the context id and the remote group.
        let mut hdr = [0u8; 8];
        let mut their_group = Vec::new();
        if lc.rank == leader {
            let pc = rt()?.comm(peer_comm)?;
            let rl = pc.peer_world_rank(remote_leader)?;
            let t = TAG_ICREATE | (tag as u32 & 0xf_ffff);
            let mut out = and_masks(&all, len);
            out.extend(u32s(&lc.group));
            let out_len = (out.len() as u64).to_ne_bytes();
            let mut in_len = [0u8; 8];
            exchange_world(&pc.coll, &[(rl, t, &out_len)], &mut [(rl, t, &mut in_len)])?;
            let mut theirs = vec![0u8; u64::from_ne_bytes(in_len) as usize];
            if theirs.len() < len {
                return Err(fail(class::INTERN, "the remote leader sent a malformed group"));
            }
            exchange_world(&pc.coll, &[(rl, t, &out)], &mut [(rl, t, &mut theirs)])?;
            let both: Vec<u8> = out[..len].iter().zip(&theirs[..len]).map(|(a, b)| a & b).collect();
            their_group = theirs[len..].to_vec();
            hdr[..4].copy_from_slice(&lowest_free(&both)?.to_ne_bytes());
            hdr[4..].copy_from_slice(&((their_group.len() / 4) as u32).to_ne_bytes());
        }
        bcast_bytes(&lc, leader, &mut hdr)?;
        let cid = u32::from_ne_bytes(hdr[..4].try_into().expect("4 bytes"));
        let n = u32::from_ne_bytes(hdr[4..].try_into().expect("4 bytes")) as usize;
        their_group.resize(n * 4, 0);
        bcast_bytes(&lc, leader, &mut their_group)?;
        let remote: Arc<[usize]> = from_u32s(&their_group).into();
        let mut rt = rt()?;
        let eh = rt.comm_slot(local_comm)?.errhandler;
        let core = rt.make_comm_with(cid, lc.group.clone(), Some(remote))?;
        crate::state::ctx_take(cid, true);
        let h = rt.add_comm(core, eh);
        drop(rt);
        // SAFETY: the caller's output argument.
        unsafe { put(newintercomm, h) }
    }

    fn MPI_Intercomm_merge / PMPI_Intercomm_merge(intercomm: H, high: c_int, newintracomm: *mut H) [intercomm] {
        let c = rt()?.comm(intercomm)?;
        let Some((remote, _)) = &c.remote else {
            return Err(fail(class::COMM, "MPI_Intercomm_merge needs an intercommunicator"));
        };
        let (cid, their_high) = agree_inter(&c, (high != 0) as u32)?;
        // The group that passed high = false comes first; on a tie, the group whose leader has
        // the lower job rank (both groups decide the same way).
        let mine_first = if (high != 0) != (their_high != 0) { high == 0 } else { c.group[0] < remote[0] };
        let merged: Vec<usize> = if mine_first {
            c.group.iter().chain(remote.iter()).copied().collect()
        } else {
            remote.iter().chain(c.group.iter()).copied().collect()
        };
        let h = install(cid, merged.into(), intercomm)?;
        // SAFETY: the caller's output argument.
        unsafe { put(newintracomm, h) }
    }

    fn MPI_Comm_set_name / PMPI_Comm_set_name(comm: H, comm_name: *const c_char) [comm] {
        // SAFETY: MPI: a C string.
        let name = unsafe { c_str(comm_name)? };
        rt()?.comm_slot_mut(comm)?.name = name.chars().take(abi::MAX_OBJECT_NAME - 1).collect();
        Ok(())
    }

    fn MPI_Comm_get_name / PMPI_Comm_get_name(comm: H, comm_name: *mut c_char, resultlen: *mut c_int) [comm] {
        let name = rt()?.comm_slot(comm)?.name.clone();
        // SAFETY: MPI: comm_name holds MPI_MAX_OBJECT_NAME bytes.
        unsafe { put_str(comm_name, abi::MAX_OBJECT_NAME, resultlen, &name) }
    }

    fn MPI_Comm_group / PMPI_Comm_group(comm: H, group: *mut H) [comm] {
        let g = rt()?.comm(comm)?.group.clone();
        let h = rt()?.add_group(g);
        // SAFETY: the caller's output argument.
        unsafe { put(group, h) }
    }

    fn MPI_Comm_create_keyval / PMPI_Comm_create_keyval(copy_fn: usize, delete_fn: usize, keyval: *mut c_int, extra_state: *mut c_void) {
        create_keyval(copy_fn, delete_fn, keyval, extra_state, crate::state::KeyvalKind::Comm)
    }

    fn MPI_Comm_free_keyval / PMPI_Comm_free_keyval(keyval: *mut c_int) {
        free_keyval(keyval, crate::state::KeyvalKind::Comm)
    }

    fn MPI_Comm_set_attr / PMPI_Comm_set_attr(comm: H, keyval: c_int, attribute_val: *mut c_void) [comm] {
        set_attr(comm, keyval, attribute_val)
    }

    fn MPI_Comm_get_attr / PMPI_Comm_get_attr(comm: H, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) [comm] {
        get_attr(comm, keyval, attribute_val, flag)
    }

    fn MPI_Comm_delete_attr / PMPI_Comm_delete_attr(comm: H, keyval: c_int) [comm] {
        delete_attr_call(comm, keyval)
    }

    fn MPI_Group_size / PMPI_Group_size(group: H, size: *mut c_int) {
        let g = group_of(group)?;
        // SAFETY: the caller's output argument.
        unsafe { put(size, g.len() as c_int) }
    }

    fn MPI_Group_rank / PMPI_Group_rank(group: H, rank: *mut c_int) {
        let g = group_of(group)?;
        let me = rt()?.world.rank();
        let r = g.iter().position(|&w| w == me).map(|r| r as c_int).unwrap_or(abi::UNDEFINED);
        // SAFETY: the caller's output argument.
        unsafe { put(rank, r) }
    }

    fn MPI_Group_incl / PMPI_Group_incl(group: H, n: c_int, ranks: *const c_int, newgroup: *mut H) {
        let g = group_of(group)?;
        // SAFETY: MPI: ranks holds n entries.
        let rs = unsafe { array(ranks, n)? };
        let mut out = Vec::with_capacity(rs.len());
        for &r in rs {
            let w = g[rank_in(&g, r)?];
            if out.contains(&w) {
                return Err(fail(class::RANK, format!("rank {r} appears twice")));
            }
            out.push(w);
        }
        new_group(out, newgroup)
    }

    fn MPI_Group_excl / PMPI_Group_excl(group: H, n: c_int, ranks: *const c_int, newgroup: *mut H) {
        let g = group_of(group)?;
        // SAFETY: MPI: ranks holds n entries.
        let rs = unsafe { array(ranks, n)? };
        let mut drop_ = vec![false; g.len()];
        for &r in rs {
            drop_[rank_in(&g, r)?] = true;
        }
        new_group(g.iter().enumerate().filter(|(i, _)| !drop_[*i]).map(|(_, &w)| w).collect(), newgroup)
    }

    fn MPI_Group_range_incl / PMPI_Group_range_incl(group: H, n: c_int, ranges_: *const [c_int; 3], newgroup: *mut H) {
        let g = group_of(group)?;
        // SAFETY: MPI: ranges holds n triples.
        let rs = unsafe { array(ranges_, n)? };
        let idx = ranges(&g, rs)?;
        new_group(idx.into_iter().map(|i| g[i]).collect(), newgroup)
    }

    fn MPI_Group_range_excl / PMPI_Group_range_excl(group: H, n: c_int, ranges_: *const [c_int; 3], newgroup: *mut H) {
        let g = group_of(group)?;
        // SAFETY: MPI: ranges holds n triples.
        let rs = unsafe { array(ranges_, n)? };
        let idx = ranges(&g, rs)?;
        new_group(g.iter().enumerate().filter(|(i, _)| !idx.contains(i)).map(|(_, &w)| w).collect(), newgroup)
    }

    fn MPI_Group_union / PMPI_Group_union(group1: H, group2: H, newgroup: *mut H) {
        let (a, b) = (group_of(group1)?, group_of(group2)?);
        let mut out = a.to_vec();
        out.extend(b.iter().filter(|w| !a.contains(w)));
        new_group(out, newgroup)
    }

    fn MPI_Group_intersection / PMPI_Group_intersection(group1: H, group2: H, newgroup: *mut H) {
        let (a, b) = (group_of(group1)?, group_of(group2)?);
        new_group(a.iter().copied().filter(|w| b.contains(w)).collect(), newgroup)
    }

    fn MPI_Group_difference / PMPI_Group_difference(group1: H, group2: H, newgroup: *mut H) {
        let (a, b) = (group_of(group1)?, group_of(group2)?);
        new_group(a.iter().copied().filter(|w| !b.contains(w)).collect(), newgroup)
    }

    fn MPI_Group_translate_ranks / PMPI_Group_translate_ranks(group1: H, n: c_int, ranks1: *const c_int, group2: H, ranks2: *mut c_int) {
        let (a, b) = (group_of(group1)?, group_of(group2)?);
        // SAFETY: MPI: both arrays hold n entries.
        let (r1, r2) = unsafe { (array(ranks1, n)?, array_mut(ranks2, n)?) };
        for (x, y) in r1.iter().zip(r2.iter_mut()) {
            *y = if *x == abi::PROC_NULL {
                abi::PROC_NULL
            } else {
                let w = a[rank_in(&a, *x)?];
                b.iter().position(|&v| v == w).map(|p| p as c_int).unwrap_or(abi::UNDEFINED)
            };
        }
        Ok(())
    }

    fn MPI_Group_compare / PMPI_Group_compare(group1: H, group2: H, result: *mut c_int) {
        let (a, b) = (group_of(group1)?, group_of(group2)?);
        let r = if a == b {
            abi::IDENT
        } else {
            let mut x = a.to_vec();
            let mut y = b.to_vec();
            x.sort_unstable();
            y.sort_unstable();
            if x == y { abi::SIMILAR } else { abi::UNEQUAL }
        };
        // SAFETY: the caller's output argument.
        unsafe { put(result, r) }
    }

    fn MPI_Group_free / PMPI_Group_free(group: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(group)? };
        if h != abi::GROUP_EMPTY {
            let mut rt = rt()?;
            let i = index(KIND_GROUP, h).ok_or_else(|| fail(class::GROUP, format!("{h:#x} is not a group handle")))?;
            rt.groups.get_mut(i).and_then(|s| s.take()).ok_or_else(|| fail(class::GROUP, format!("{h:#x} is not a group handle (freed already?)")))?;
        }
        // SAFETY: the caller's in-out argument.
        unsafe { put(group, abi::GROUP_NULL) }
    }
}

/// MPI_Comm_create of an intercommunicator (MPI-3.1 section 6.4.2): each group passes a subgroup
/// of itself; the two subgroups form the new intercommunicator (MPI_COMM_NULL outside them, or
/// when either is empty). The leaders trade the subgroups.
fn create_inter(c: &CommCore, comm: H, group: H, newcomm: *mut H) -> R {
    let (remote, _) = c.remote.as_ref().expect("an intercommunicator");
    let g = group_of(group)?;
    if let Some(&w) = g.iter().find(|&&w| !c.group.contains(&w)) {
        return Err(fail(
            class::GROUP,
            format!("job rank {w} of the group is not in the intercommunicator's local group"),
        ));
    }
    let mut len = [0u8; 8];
    let mut theirs = Vec::new();
    if c.rank == 0 {
        let out = u32s(&g);
        let out_len = (out.len() as u64).to_ne_bytes();
        exchange_world(
            &c.coll,
            &[(remote[0], TAG_INTER, &out_len)],
            &mut [(remote[0], TAG_INTER, &mut len)],
        )?;
        theirs = vec![0u8; u64::from_ne_bytes(len) as usize];
        exchange_world(
            &c.coll,
            &[(remote[0], TAG_INTER, &out)],
            &mut [(remote[0], TAG_INTER, &mut theirs)],
        )?;
    }
    bcast_bytes(c, 0, &mut len)?;
    theirs.resize(u64::from_ne_bytes(len) as usize, 0);
    bcast_bytes(c, 0, &mut theirs)?;
    let (cid, _) = agree_inter(c, 0)?;
    let their_g: Arc<[usize]> = from_u32s(&theirs).into();
    let me = rt()?.world.rank();
    if !g.contains(&me) || their_g.is_empty() {
        // SAFETY: the caller's output argument.
        return unsafe { put(newcomm, abi::COMM_NULL) };
    }
    let mut rt = rt()?;
    let eh = rt.comm_slot(comm)?.errhandler;
    let core = rt.make_comm_with(cid, g, Some(their_g))?;
    crate::state::ctx_take(cid, true);
    let h = rt.add_comm(core, eh);
    drop(rt);
    // SAFETY: the caller's output argument.
    unsafe { put(newcomm, h) }
}

/// MPI_Comm_split of an intercommunicator (MPI-3.1 section 6.4.2): each group splits by color;
/// the local and remote parts of one color form a new intercommunicator (MPI_COMM_NULL when the
/// other group has none of that color). The leaders trade their groups' (color, key) tables.
fn split_inter(c: &CommCore, comm: H, color: c_int, key: c_int, newcomm: *mut H) -> R {
    let (remote, _) = c.remote.as_ref().expect("an intercommunicator");
    if color < 0 && color != abi::UNDEFINED {
        return Err(fail(
            class::ARG,
            format!("color {color} is negative (use MPI_UNDEFINED to stay out)"),
        ));
    }
    let mine: Vec<u8> = [color, key].iter().flat_map(|v| v.to_ne_bytes()).collect();
    let mut local = vec![0u8; 8 * c.size()];
    allgather_bytes(c, &mine, &mut local)?;
    let mut theirs = vec![0u8; 8 * remote.len()];
    if c.rank == 0 {
        exchange_world(
            &c.coll,
            &[(remote[0], TAG_INTER, &local)],
            &mut [(remote[0], TAG_INTER, &mut theirs)],
        )?;
    }
    bcast_bytes(c, 0, &mut theirs)?;
    let (cid, _) = agree_inter(c, 0)?;
    let table = |t: &[u8], g: &[usize]| -> Vec<(c_int, c_int, usize)> {
        g.iter()
            .enumerate()
            .map(|(r, &w)| {
                let col = c_int::from_ne_bytes(t[8 * r..8 * r + 4].try_into().expect("4"));
                let k = c_int::from_ne_bytes(t[8 * r + 4..8 * r + 8].try_into().expect("4"));
                (col, k, w)
            })
            .collect()
    };
    let pick = |t: Vec<(c_int, c_int, usize)>| -> Arc<[usize]> {
        let mut m: Vec<(c_int, usize, usize)> = t
            .into_iter()
            .enumerate()
            .filter(|(_, (col, _, _))| *col == color)
            .map(|(r, (_, k, w))| (k, r, w))
            .collect();
        m.sort();
        m.into_iter().map(|(_, _, w)| w).collect()
    };
    let mine_g = pick(table(&local, &c.group));
    let their_g = pick(table(&theirs, remote));
    if color == abi::UNDEFINED || their_g.is_empty() {
        // SAFETY: the caller's output argument.
        return unsafe { put(newcomm, abi::COMM_NULL) };
    }
    let mut rt = rt()?;
    let eh = rt.comm_slot(comm)?.errhandler;
    let core = rt.make_comm_with(cid, mine_g, Some(their_g))?;
    crate::state::ctx_take(cid, true);
    let h = rt.add_comm(core, eh);
    drop(rt);
    // SAFETY: the caller's output argument.
    unsafe { put(newcomm, h) }
}

/// MPI_Comm_split: every member says (color, key); members of one color form a communicator,
/// ordered by key, then by rank in the parent.
fn split(comm: H, color: c_int, key: c_int, newcomm: *mut H) -> R {
    let c = rt()?.comm(comm)?;
    if c.is_inter() {
        return split_inter(&c, comm, color, key, newcomm);
    }
    let h = split_to(&c, comm, color, key, None)?;
    // SAFETY: the caller's output argument.
    unsafe { put(newcomm, h) }
}

/// MPI_Comm_split of intracommunicator `c` (handle `comm`): the new communicator's handle
/// (MPI_COMM_NULL for MPI_UNDEFINED), with topology `topo`.
pub(crate) fn split_to(
    c: &CommCore,
    comm: H,
    color: c_int,
    key: c_int,
    topo: Option<Arc<crate::topo::Topo>>,
) -> R<H> {
    if color < 0 && color != abi::UNDEFINED {
        return Err(fail(
            class::ARG,
            format!("color {color} is negative (use MPI_UNDEFINED to stay out)"),
        ));
    }
    let mine: Vec<u8> = [color, key].iter().flat_map(|v| v.to_ne_bytes()).collect();
    let mut all = vec![0u8; 8 * c.size()];
    allgather_bytes(c, &mine, &mut all)?;
    let cid = agree_cid(c)?;
    if color == abi::UNDEFINED {
        return Ok(abi::COMM_NULL);
    }
    let mut members: Vec<(c_int, usize)> = Vec::new();
    for r in 0..c.size() {
        let col = c_int::from_ne_bytes(all[8 * r..8 * r + 4].try_into().expect("4"));
        let k = c_int::from_ne_bytes(all[8 * r + 4..8 * r + 8].try_into().expect("4"));
        if col == color {
            members.push((k, r));
        }
    }
    members.sort();
    let group: Arc<[usize]> = members.iter().map(|&(_, r)| c.group[r]).collect();
    install_topo(cid, group, comm, topo)
}

/// MPI_Comm_idup (and MPI_Comm_idup_with_info): the new communicator's context agreed by a
/// non-blocking collective, made when its request completes.
fn idup(comm: H, newcomm: *mut H, request: *mut H) -> R {
    let c = rt()?.comm(comm)?;
    if newcomm.is_null() {
        return Err(fail(class::ARG, "the newcomm argument is a null pointer"));
    }
    // The copy callbacks run now (they may call MPI); their results go with the new
    // communicator when it is made.
    let copied = copied_attrs(comm)?;
    let eh = rt()?.comm_slot(comm)?.errhandler;
    let s = crate::nbc::starting(|| c.next_seq());
    let out = crate::coll::P::new(newcomm);
    let f = async move {
        let remote = c.remote.as_ref().map(|(r, _)| r.clone());
        let cid = agree_cid_a(&c, s).await?;
        let group = c.group.clone();
        let topo = c.topo.clone();
        let finish: crate::nbc::Finish = Box::new(move |rt: &mut crate::state::Rt| {
            let mut core = rt.make_comm_with(cid, group, remote)?;
            core.topo = topo;
            crate::state::ctx_take(cid, true);
            let h = rt.add_comm(core, eh);
            rt.comm_slot_mut(h)?.attrs = copied;
            // SAFETY: the program's output argument, which MPI lets it read only once the
            // request completed.
            unsafe { put(out.get() as *mut H, h) }
        });
        Ok(Some(finish))
    };
    crate::p2p::start_nbc(crate::nbc::Nbc::new(f), comm, request)
}

/// MPI_Comm_dup (and MPI_Comm_dup_with_info).
fn dup(comm: H, newcomm: *mut H) -> R {
    let c = rt()?.comm(comm)?;
    let h = if let Some((remote, _)) = &c.remote {
        let (cid, _) = agree_inter(&c, 0)?;
        let mut rt = rt()?;
        let eh = rt.comm_slot(comm)?.errhandler;
        let core = rt.make_comm_with(cid, c.group.clone(), Some(remote.clone()))?;
        crate::state::ctx_take(cid, true);
        rt.add_comm(core, eh)
    } else {
        let cid = agree_cid(&c)?;
        install_topo(cid, c.group.clone(), comm, c.topo.clone())?
    };
    if let Err(e) = copy_attrs(comm, h) {
        // A copy callback failed: no new communicator (MPI-3.1 section 6.7.2).
        let mut rt = rt()?;
        let slot = index(KIND_COMM, h)
            .and_then(|i| rt.comms.get_mut(i))
            .and_then(|s| s.take());
        drop(slot);
        drop(rt);
        // SAFETY: the caller's output argument.
        unsafe { put(newcomm, abi::COMM_NULL)? };
        return Err(e);
    }
    // SAFETY: the caller's output argument.
    unsafe { put(newcomm, h) }
}

/// MPI_Comm_create_keyval (and MPI-1's MPI_Keyval_create).
pub(crate) fn create_keyval(
    copy_fn: usize,
    delete_fn: usize,
    keyval: *mut c_int,
    extra_state: *mut c_void,
    kind: crate::state::KeyvalKind,
) -> R {
    let mut rt = rt()?;
    rt.keyvals.push(Some(Keyval {
        copy: copy_fn,
        delete: delete_fn,
        extra: extra_state as usize,
        kind,
    }));
    let k = rt.keyvals.len() as c_int;
    // SAFETY: the caller's output argument.
    unsafe { put(keyval, k) }
}

/// MPI_Comm_free_keyval (and MPI_Keyval_free).
pub(crate) fn free_keyval(keyval: *mut c_int, kind: crate::state::KeyvalKind) -> R {
    // SAFETY: the caller's in-out argument.
    let k = unsafe { get(keyval)? };
    // Attributes already set with it keep working until deleted (MPI-3.1 section 6.7.2):
    // the callbacks stay known.
    rt()?.keyval(k, kind, true)?;
    // SAFETY: the caller's in-out argument.
    unsafe { put(keyval, abi::KEYVAL_INVALID) }
}

/// MPI_Comm_set_attr (and MPI_Attr_put).
fn set_attr(comm: H, keyval: c_int, attribute_val: *mut c_void) -> R {
    if crate::env::predefined_attr(keyval).is_some() {
        return Err(fail(
            class::KEYVAL,
            format!("keyval {keyval} is predefined and read-only"),
        ));
    }
    let old = {
        let rt = rt()?;
        rt.keyval(keyval, crate::state::KeyvalKind::Comm, true)?;
        rt.comm_slot(comm)?
            .attrs
            .iter()
            .find(|a| a.0 == keyval)
            .copied()
    };
    if let Some((k, v)) = old {
        delete_attr(comm, k, v)?;
    }
    let mut rt = rt()?;
    let s = rt.comm_slot_mut(comm)?;
    s.attrs.retain(|a| a.0 != keyval);
    s.attrs.push((keyval, attribute_val as usize));
    Ok(())
}

/// MPI_Comm_get_attr (and MPI_Attr_get).
fn get_attr(comm: H, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) -> R {
    let rt = rt()?;
    rt.comm_slot(comm)?;
    let v = match crate::env::predefined_attr(keyval) {
        Some(p) => Some(p as usize),
        None => {
            rt.keyval(keyval, crate::state::KeyvalKind::Comm, false)?;
            rt.comm_slot(comm)?
                .attrs
                .iter()
                .find(|a| a.0 == keyval)
                .map(|a| a.1)
        }
    };
    // SAFETY: MPI: attribute_val points to a void*, flag to an int.
    unsafe {
        put(flag, v.is_some() as c_int)?;
        if let Some(v) = v {
            put(attribute_val as *mut usize, v)?;
        }
    }
    Ok(())
}

/// MPI_Comm_delete_attr (and MPI-1's MPI_Attr_delete).
fn delete_attr_call(comm: H, keyval: c_int) -> R {
    rt()?.keyval(keyval, crate::state::KeyvalKind::Comm, false)?;
    let old = {
        rt()?
            .comm_slot(comm)?
            .attrs
            .iter()
            .find(|a| a.0 == keyval)
            .copied()
    };
    let Some((k, v)) = old else {
        return Err(fail(
            class::KEYVAL,
            format!("no attribute with keyval {keyval} is set on the communicator"),
        ));
    };
    delete_attr(comm, k, v)?;
    rt()?.comm_slot_mut(comm)?.attrs.retain(|a| a.0 != keyval);
    Ok(())
}

/// The one hardware resource volley's MPI knows ranks to share: a host (its shared memory).
const HW_SHARED_MEMORY: &str = "mpi_shared_memory";

/// This rank's colour in MPI_Comm_split_type (MPI-4.0 section 7.4.2): its host for
/// MPI_COMM_TYPE_SHARED; for MPI_COMM_TYPE_HW_GUIDED its host when the info's
/// `mpi_hw_resource_type` is `mpi_shared_memory` (the value every MPI knows), else none (the
/// rank gets MPI_COMM_NULL, as the standard says for a missing key or a resource the
/// implementation does not know); for MPI_COMM_TYPE_HW_UNGUIDED its host when the communicator
/// spans several hosts (the next level down, said in the info's `mpi_hw_resource_type`), else
/// none (a communicator inside one host has no smaller level volley knows: MPI_COMM_NULL).
/// Every member computes the same answer from the communicator's membership.
fn split_color(comm: H, split_type: c_int, info: H) -> R<c_int> {
    let here = || -> R<c_int> { Ok(rt()?.world.node_id() as c_int) };
    match split_type {
        abi::COMM_TYPE_SHARED => here(),
        abi::UNDEFINED => Ok(abi::UNDEFINED),
        abi::COMM_TYPE_HW_GUIDED => {
            match crate::info::value(info, "mpi_hw_resource_type")? {
                Some(v) if v == HW_SHARED_MEMORY => here(),
                _ => Ok(abi::UNDEFINED),
            }
        }
        abi::COMM_TYPE_HW_UNGUIDED => {
            let spans = {
                let rt = rt()?;
                let c = rt.comm(comm)?;
                if c.is_inter() {
                    return Err(fail(class::COMM, "MPI_Comm_split_type takes an intracommunicator"));
                }
                let mut members = (0..c.size()).map(|r| c.peer_world_rank(r as c_int));
                members.try_fold(false, |far, w| Ok::<_, crate::err::Fail>(far || !rt.world.on_this_host(w?)))?
            };
            if !spans {
                return Ok(abi::UNDEFINED);
            }
            crate::info::set(info, "mpi_hw_resource_type", HW_SHARED_MEMORY)?;
            here()
        }
        _ => Err(fail(class::ARG, format!("split type {split_type}: volley's MPI knows MPI_COMM_TYPE_SHARED (the ranks of one host), MPI_COMM_TYPE_HW_GUIDED (with mpi_hw_resource_type mpi_shared_memory), MPI_COMM_TYPE_HW_UNGUIDED and MPI_UNDEFINED"))),
    }
}

#[cfg(test)]
mod tests {
    use super::balanced;

    #[test]
    fn dims_are_balanced_as_mpich_balances_them() {
        // From MPICH's test suite (topo/baddims.h): closest largest and smallest first, then
        // the largest small factors.
        for (n, k, want) in [
            (72, 2, &[9, 8][..]),
            (180, 2, &[15, 12]),
            (1323, 2, &[49, 27]),
            (228072, 3, &[86, 52, 51]),
            (555408, 4, &[38, 29, 24, 21]),
            (117936, 5, &[14, 13, 9, 9, 8]),
            (712656, 5, &[101, 14, 9, 8, 7]),
            (938448, 6, &[19, 14, 9, 8, 7, 7]),
        ] {
            assert_eq!(balanced(n, k), want, "{n} in {k} dimensions");
        }
        assert_eq!(balanced(1, 3), [1, 1, 1]);
        assert_eq!(balanced(7, 3), [7, 1, 1]);
        assert_eq!(balanced(16, 4), [2, 2, 2, 2]);
        assert_eq!(balanced(12, 2), [4, 3]);
        assert_eq!(balanced(2 * 3 * 5 * 7 * 11 * 13, 1), [30030]);
    }
}
