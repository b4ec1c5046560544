//! Collectives on intercommunicators (MPI-3.1 5.2.2): data goes between the two groups. In a
//! rooted one the root passes MPI_ROOT, the rest of its group MPI_PROC_NULL (they take no part),
//! and the other group names the root's rank in the root's group; an all-to-all one gives each
//! process what the other group sent (Allreduce: the reduction of the other group's data).
//!
//! Plain, direct algorithms: every message goes straight between the two processes concerned
//! in one step of the collective context (a reduction folds the other group's contributions in
//! their rank order at each receiver). Correct for every size; not tuned (intercommunicator
//! collectives are rare in programs, and the collectives issue tunes the intracommunicator
//! ones). Not here: Reduce_scatter with per-rank counts (each group would need the other's
//! counts), and Scan/Exscan, which MPI does not define on intercommunicators.

use crate::abi::{self, class, H};
use crate::coll::{apply, at, count, done, op_of, packed, unpacked, Op, P};
use crate::dtype::{committed, TypeRef};
use crate::err::{array, fail, R};
use crate::nbc::Nbc;
use crate::state::{rt, CommCore};
use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::Arc;

/// The tag kind of intercommunicator collectives (with the collective's sequence number).
const TAG: u32 = (1 << 30) | 17;

/// `comm` if it names an intercommunicator.
pub fn of(comm: H) -> R<Option<Arc<CommCore>>> {
    let c = rt()?.comm(comm)?;
    Ok(c.is_inter().then_some(c))
}

fn remote(c: &CommCore) -> &[usize] {
    &c.remote.as_ref().expect("an intercommunicator").0
}

/// What a process's part in a rooted collective is.
enum Role {
    /// The root (MPI_ROOT).
    Root,
    /// In the root's group, not the root (MPI_PROC_NULL): nothing to do.
    Idle,
    /// In the other group; the root's rank in its group.
    Leaf(usize),
}

fn role(c: &CommCore, root: c_int) -> R<Role> {
    match root {
        abi::ROOT => Ok(Role::Root),
        abi::PROC_NULL => Ok(Role::Idle),
        r if r >= 0 && (r as usize) < remote(c).len() => Ok(Role::Leaf(r as usize)),
        r => Err(fail(
            class::ROOT,
            format!(
                "root {r}: on an intercommunicator the root passes MPI_ROOT, the rest of its group MPI_PROC_NULL, and the other group the root's rank (0 to {})",
                remote(c).len() as i64 - 1
            ),
        )),
    }
}

/// One step with the other group: `sends` (remote rank, packed data), `recvs` (remote rank,
/// bytes); `finish` gets what came, in the order of `recvs`.
fn step(
    c: Arc<CommCore>,
    sends: Vec<(usize, Vec<u8>)>,
    recvs: Vec<(usize, usize)>,
    finish: impl FnOnce(&[Vec<u8>]) -> R + Send + 'static,
) -> Nbc {
    let s = c.next_seq();
    done(async move {
        let tag = s.tag(TAG);
        let far = remote(&c);
        let mut got: Vec<Vec<u8>> = recvs.iter().map(|&(_, b)| vec![0u8; b]).collect();
        {
            let sends: Vec<(usize, u32, &[u8])> =
                sends.iter().map(|(r, b)| (far[*r], tag, &b[..])).collect();
            let mut rs: Vec<(usize, u32, &mut [u8])> = recvs
                .iter()
                .zip(got.iter_mut())
                .map(|(&(r, _), b)| (far[r], tag, &mut b[..]))
                .collect();
            crate::nbc::exchange_world(&c.coll, &sends, &mut rs).await?;
        }
        finish(&got)
    })
}

fn ty(h: H) -> R<TypeRef> {
    committed(&*rt()?, h)
}

fn ints<'a>(p: *const c_int, n: usize) -> R<&'a [c_int]> {
    // SAFETY: MPI: one entry per rank of the other group.
    let v = unsafe { array(p, n as c_int)? };
    if let Some(x) = v.iter().find(|&&x| x < 0) {
        return Err(fail(class::COUNT, format!("a count is negative ({x})")));
    }
    Ok(v)
}

pub fn no_in_place(p: *const c_void, what: &str) -> R {
    if p as usize == abi::IN_PLACE {
        return Err(fail(
            class::BUFFER,
            format!("{what}: MPI_IN_PLACE is not allowed on an intercommunicator"),
        ));
    }
    Ok(())
}

/// Folds the other group's contributions in their rank order: x0 op x1 op ... (MPI's
/// operations are associative, so right to left is the same).
fn fold(op: Op, t: &TypeRef, th: H, n: usize, parts: &[Vec<u8>]) -> R<Vec<u8>> {
    let mut acc = parts.last().cloned().unwrap_or_default();
    for x in parts.iter().rev().skip(1) {
        apply(op, t, th, n, x, &mut acc)?;
    }
    Ok(acc)
}

pub fn barrier(c: Arc<CommCore>) -> R<Nbc> {
    let m = remote(&c).len();
    Ok(step(
        c,
        (0..m).map(|r| (r, Vec::new())).collect(),
        (0..m).map(|r| (r, 0)).collect(),
        |_| Ok(()),
    ))
}

pub fn bcast(c: Arc<CommCore>, buf: *mut c_void, n: c_int, dt: H, root: c_int) -> R<Nbc> {
    let n = count(n)?;
    let m = remote(&c).len();
    Ok(match role(&c, root)? {
        Role::Root => {
            let t = ty(dt)?;
            let data = packed(&t, buf, n);
            step(
                c,
                (0..m).map(|r| (r, data.clone())).collect(),
                Vec::new(),
                |_| Ok(()),
            )
        }
        Role::Idle => step(c, Vec::new(), Vec::new(), |_| Ok(())),
        Role::Leaf(root) => {
            let t = ty(dt)?;
            let buf = P::new(buf);
            step(c, Vec::new(), vec![(root, n * t.size)], move |got| {
                unpacked(&t, &got[0], buf.get(), n);
                Ok(())
            })
        }
    })
}

/// Gather (`counts`/`displs` None: `rc` each at r * rc) and Gatherv.
#[allow(clippy::too_many_arguments)]
pub fn gather(
    c: Arc<CommCore>,
    sendbuf: *const c_void,
    sc: c_int,
    st: H,
    recvbuf: *mut c_void,
    rc: c_int,
    counts: *const c_int,
    displs: *const c_int,
    rt_: H,
    root: c_int,
    vector: bool,
) -> R<Nbc> {
    Ok(match role(&c, root)? {
        Role::Root => {
            let t = ty(rt_)?;
            gathered(c, Vec::new(), t, recvbuf, rc, counts, displs, vector)?
        }
        Role::Idle => step(c, Vec::new(), Vec::new(), |_| Ok(())),
        Role::Leaf(root) => {
            no_in_place(sendbuf, "MPI_Gather")?;
            let t = ty(st)?;
            let data = packed(&t, sendbuf, count(sc)?);
            step(c, vec![(root, data)], Vec::new(), |_| Ok(()))
        }
    })
}

/// Scatter and Scatterv (`vector`).
#[allow(clippy::too_many_arguments)]
pub fn scatter(
    c: Arc<CommCore>,
    sendbuf: *const c_void,
    sc: c_int,
    counts: *const c_int,
    displs: *const c_int,
    st: H,
    recvbuf: *mut c_void,
    rc: c_int,
    rt_: H,
    root: c_int,
    vector: bool,
) -> R<Nbc> {
    let m = remote(&c).len();
    Ok(match role(&c, root)? {
        Role::Root => {
            let t = ty(st)?;
            let blocks: Vec<(usize, Vec<u8>)> = if vector {
                let (cs, ds) = (ints(counts, m)?, ints(displs, m)?);
                (0..m)
                    .map(|r| {
                        (
                            r,
                            packed(&t, at(sendbuf, ds[r] as isize, &t), cs[r] as usize),
                        )
                    })
                    .collect()
            } else {
                let sc = count(sc)?;
                (0..m)
                    .map(|r| (r, packed(&t, at(sendbuf, (r * sc) as isize, &t), sc)))
                    .collect()
            };
            step(c, blocks, Vec::new(), |_| Ok(()))
        }
        Role::Idle => step(c, Vec::new(), Vec::new(), |_| Ok(())),
        Role::Leaf(root) => {
            no_in_place(recvbuf, "MPI_Scatter")?;
            let t = ty(rt_)?;
            let n = count(rc)?;
            let buf = P::new(recvbuf);
            step(c, Vec::new(), vec![(root, n * t.size)], move |got| {
                unpacked(&t, &got[0], buf.get(), n);
                Ok(())
            })
        }
    })
}

/// Allgather and Allgatherv (`vector`): every process of the other group's data.
#[allow(clippy::too_many_arguments)]
pub fn allgather(
    c: Arc<CommCore>,
    sendbuf: *const c_void,
    sc: c_int,
    st: H,
    recvbuf: *mut c_void,
    rc: c_int,
    counts: *const c_int,
    displs: *const c_int,
    rt_: H,
    vector: bool,
) -> R<Nbc> {
    no_in_place(sendbuf, "MPI_Allgather")?;
    let m = remote(&c).len();
    let (s, t) = (ty(st)?, ty(rt_)?);
    let data = packed(&s, sendbuf, count(sc)?);
    let sends = (0..m).map(|r| (r, data.clone())).collect();
    gathered(c, sends, t, recvbuf, rc, counts, displs, vector)
}

/// A step that sends `sends` and receives a block from every rank of the other group into
/// `recvbuf`: `rc` elements each at r * rc, or (`vector`) `counts[r]` at `displs[r]`
/// (Gather(v) at the root, Allgather(v)).
#[allow(clippy::too_many_arguments)]
fn gathered(
    c: Arc<CommCore>,
    sends: Vec<(usize, Vec<u8>)>,
    t: TypeRef,
    recvbuf: *mut c_void,
    rc: c_int,
    counts: *const c_int,
    displs: *const c_int,
    vector: bool,
) -> R<Nbc> {
    let m = remote(&c).len();
    let (cs, ds): (Vec<usize>, Vec<isize>) = if vector {
        let (cs, ds) = (ints(counts, m)?, ints(displs, m)?);
        (
            cs.iter().map(|&x| x as usize).collect(),
            ds.iter().map(|&x| x as isize).collect(),
        )
    } else {
        let rc = count(rc)?;
        (vec![rc; m], (0..m).map(|r| (r * rc) as isize).collect())
    };
    let recvs = (0..m).map(|r| (r, cs[r] * t.size)).collect();
    let buf = P::new(recvbuf);
    Ok(step(c, sends, recvs, move |got| {
        for r in 0..got.len() {
            unpacked(&t, &got[r], at(buf.get(), ds[r], &t) as *mut c_void, cs[r]);
        }
        Ok(())
    }))
}

/// One side of an all-to-all: per remote rank, where its block is, its type and its count.
pub type Side = crate::topo::Blocks;

/// Alltoallw's side: counts, byte displacements (ints) and a datatype per remote rank.
pub fn typed(
    base: *const c_void,
    counts: *const c_int,
    displs: *const c_int,
    types: *const H,
    m: usize,
) -> R<Side> {
    let (cs, ds) = (ints(counts, m)?, ints(displs, m)?);
    // SAFETY: MPI: one datatype per rank of the other group.
    let ts = unsafe { array(types, m as c_int)? };
    let rt = rt()?;
    (0..m)
        .map(|r| {
            Ok((
                P::new((base as *const u8).wrapping_offset(ds[r] as isize)),
                committed(&rt, ts[r])?,
                cs[r] as usize,
            ))
        })
        .collect()
}

/// Alltoall, Alltoallv and Alltoallw: block r to the other group's rank r, and from it.
pub fn alltoall(
    c: Arc<CommCore>,
    sends: impl FnOnce(usize) -> R<Side>,
    recvs: impl FnOnce(usize) -> R<Side>,
) -> R<Nbc> {
    let m = remote(&c).len();
    let sends = sends(m)?;
    let recvs = recvs(m)?;
    let out: Vec<(usize, Vec<u8>)> = sends
        .iter()
        .enumerate()
        .map(|(r, (p, t, n))| (r, packed(t, p.get(), *n)))
        .collect();
    let sizes = recvs
        .iter()
        .enumerate()
        .map(|(r, (_, t, n))| (r, n * t.size))
        .collect();
    Ok(step(c, out, sizes, move |got| {
        for ((p, t, n), b) in recvs.iter().zip(got) {
            unpacked(t, b, p.get(), *n);
        }
        Ok(())
    }))
}

/// Reduce (`root`) and Allreduce (`root` None): the reduction of the other group's data.
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    c: Arc<CommCore>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    n: c_int,
    dt: H,
    op: H,
    root: Option<c_int>,
) -> R<Nbc> {
    let n = count(n)?;
    let m = remote(&c).len();
    let t = ty(dt)?;
    let op = op_of(op)?;
    let buf = P::new(recvbuf);
    let fin = move |t: TypeRef| {
        move |got: &[Vec<u8>]| {
            let acc = fold(op, &t, dt, n, got)?;
            unpacked(&t, &acc, buf.get(), n);
            Ok(())
        }
    };
    Ok(match root.map(|r| role(&c, r)).transpose()? {
        None => {
            no_in_place(sendbuf, "MPI_Allreduce")?;
            let data = packed(&t, sendbuf, n);
            let recvs = (0..m).map(|r| (r, data.len())).collect();
            step(
                c,
                (0..m).map(|r| (r, data.clone())).collect(),
                recvs,
                fin(t),
            )
        }
        Some(Role::Root) => step(
            c,
            Vec::new(),
            (0..m).map(|r| (r, n * t.size)).collect(),
            fin(t),
        ),
        Some(Role::Idle) => step(c, Vec::new(), Vec::new(), |_| Ok(())),
        Some(Role::Leaf(root)) => {
            no_in_place(sendbuf, "MPI_Reduce")?;
            step(c, vec![(root, packed(&t, sendbuf, n))], Vec::new(), |_| {
                Ok(())
            })
        }
    })
}

/// Reduce_scatter_block: this process's block of the reduction of the other group's vectors
/// (each `rc` elements per process of this group).
/// MPI_Reduce_scatter (MPI-3.1 5.10.1): each group's vectors (the sum of its own counts long;
/// both groups' sums are equal) reduced over that group and scattered over the other in the
/// other's counts. The groups first trade their counts (a process knows only its own group's),
/// then every process sends each remote process its block and folds what it gets in the
/// other group's rank order.
pub fn reduce_scatter(
    c: Arc<CommCore>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    dt: H,
    op: H,
) -> R<Nbc> {
    no_in_place(sendbuf, "MPI_Reduce_scatter")?;
    let mine_counts: Vec<usize> = ints(recvcounts, c.size())?
        .iter()
        .map(|&k| k as usize)
        .collect();
    let total: usize = mine_counts.iter().sum();
    let m = remote(&c).len();
    let t = ty(dt)?;
    let op = op_of(op)?;
    let mine = packed(&t, sendbuf, total);
    let (s1, s2) = (c.next_seq(), c.next_seq());
    let buf = P::new(recvbuf);
    Ok(done(async move {
        let far = remote(&c);
        let n = mine_counts[c.rank];
        // 1. This group's counts to every remote process; the other group's from each.
        let tag = s1.tag(TAG);
        let ours: Vec<u8> = mine_counts
            .iter()
            .flat_map(|&k| (k as u64).to_le_bytes())
            .collect();
        let mut theirs: Vec<Vec<u8>> = (0..m).map(|_| vec![0u8; 8 * m]).collect();
        {
            let sends: Vec<(usize, u32, &[u8])> =
                far.iter().map(|&r| (r, tag, &ours[..])).collect();
            let mut rs: Vec<(usize, u32, &mut [u8])> = far
                .iter()
                .zip(theirs.iter_mut())
                .map(|(&r, b)| (r, tag, &mut b[..]))
                .collect();
            crate::nbc::exchange_world(&c.coll, &sends, &mut rs).await?;
        }
        let rc: Vec<usize> = theirs[0]
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
            .collect();
        if rc.iter().sum::<usize>() != total {
            return Err(fail(
                class::COUNT,
                format!(
                    "MPI_Reduce_scatter: this group's counts add up to {total} elements, the other group's to {}; they must be equal",
                    rc.iter().sum::<usize>()
                ),
            ));
        }
        // 2. Block j of this process's vector to remote process j; this process's block of
        // each remote vector.
        let tag = s2.tag(TAG);
        let mut off = 0;
        let blocks: Vec<&[u8]> = rc
            .iter()
            .map(|&k| {
                let b = &mine[off * t.size..(off + k) * t.size];
                off += k;
                b
            })
            .collect();
        let mut got: Vec<Vec<u8>> = (0..m).map(|_| vec![0u8; n * t.size]).collect();
        {
            let sends: Vec<(usize, u32, &[u8])> = far
                .iter()
                .zip(&blocks)
                .map(|(&r, b)| (r, tag, *b))
                .collect();
            let mut rs: Vec<(usize, u32, &mut [u8])> = far
                .iter()
                .zip(got.iter_mut())
                .map(|(&r, b)| (r, tag, &mut b[..]))
                .collect();
            crate::nbc::exchange_world(&c.coll, &sends, &mut rs).await?;
        }
        let acc = fold(op, &t, dt, n, &got)?;
        unpacked(&t, &acc, buf.get(), n);
        Ok(())
    }))
}

pub fn reduce_scatter_block(
    c: Arc<CommCore>,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    rc: c_int,
    dt: H,
    op: H,
) -> R<Nbc> {
    no_in_place(sendbuf, "MPI_Reduce_scatter_block")?;
    let n = count(rc)?;
    let m = remote(&c).len();
    let t = ty(dt)?;
    let op = op_of(op)?;
    // This process's vector has this group's size times recvcount elements (MPI-3.1 5.10.1),
    // reduced over this group and scattered over the other: a block for each of its ranks,
    // as long as the other group's recvcount (the two vectors are the same length).
    let total = c.size() * n;
    if !total.is_multiple_of(m) {
        return Err(fail(
            class::COUNT,
            format!(
                "MPI_Reduce_scatter_block: this group's vectors ({} ranks x {n} elements) do not split into equal blocks for the other group's {m} ranks",
                c.size()
            ),
        ));
    }
    let k = total / m;
    let sends = (0..m)
        .map(|r| (r, packed(&t, at(sendbuf, (r * k) as isize, &t), k)))
        .collect();
    let recvs = (0..m).map(|r| (r, n * t.size)).collect();
    let buf = P::new(recvbuf);
    Ok(step(c, sends, recvs, move |got| {
        let acc = fold(op, &t, dt, n, got)?;
        unpacked(&t, &acc, buf.get(), n);
        Ok(())
    }))
}
