//! Process topologies (MPI-3.1 chapter 7): Cartesian grids, graphs and distributed graphs
//! attached to a communicator, the queries on them, and the neighbourhood collectives.
//!
//! A topology is fixed when its communicator is made, so it lives in the communicator's shared
//! part (`CommCore::topo`) and MPI_Comm_dup keeps it. volley does not reorder ranks (`reorder`
//! is accepted and ignored, as the standard allows): rank i of the new communicator is rank i of
//! the old one, and MPI_Cart_map / MPI_Graph_map say so.
//!
//! Neighbourhood collectives send block k to out-neighbour k and receive block j from
//! in-neighbour j, in one step of the communicator's collective context. Between one pair of
//! ranks several blocks may travel (a periodic dimension of size 1 or 2, or a graph with a
//! repeated edge): in a graph they pair up in list order (MPI's non-overtaking rule), and in a
//! Cartesian grid each message carries its direction, so that the block a rank sends towards
//! its positive neighbour always lands in that neighbour's slot for its negative one (the
//! MPI Forum's reading, mpi-forum/mpi-issues#153, which Open MPI follows), even when the two
//! neighbours are one rank.

use crate::abi::{self, class, H};
use crate::coll::{exchange_a, persistent, Kept, P, TAG_NEIGHBOR, TAG_NEIGHBOR_UP};
use crate::comm::{agree_cid, install_topo, split_to};
use crate::dtype::{committed, TypeRef};
use crate::err::{array, array_mut, fail, put, R};
use crate::mpi;
use crate::nbc::{block_on, Nbc};
use crate::state::{rt, CommCore};
use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::Arc;

/// MPI_UNWEIGHTED and MPI_WEIGHTS_EMPTY (the MPI-5.0 ABI's values).
const UNWEIGHTED: usize = 2;
const WEIGHTS_EMPTY: usize = 3;

/// A neighbour (a communicator rank or MPI_PROC_NULL) and the tag kind of its message.
type Peer = (c_int, u32);

/// A communicator's topology.
pub enum Topo {
    Cart {
        dims: Vec<c_int>,
        periods: Vec<bool>,
    },
    /// `index[i]` is the end of node i's neighbours in `edges` (MPI_Graph_create's arrays).
    Graph {
        index: Vec<c_int>,
        edges: Vec<c_int>,
    },
    Dist {
        sources: Vec<c_int>,
        sweights: Vec<c_int>,
        dests: Vec<c_int>,
        dweights: Vec<c_int>,
        weighted: bool,
    },
}

impl Topo {
    fn kind(&self) -> c_int {
        match self {
            Topo::Cart { .. } => 1,
            Topo::Graph { .. } => 2,
            Topo::Dist { .. } => 3,
        }
    }

    /// Node `r`'s neighbours in a graph topology.
    fn graph_neighbors(index: &[c_int], edges: &[c_int], r: usize) -> Vec<c_int> {
        let from = if r == 0 { 0 } else { index[r - 1] as usize };
        edges[from..index[r] as usize].to_vec()
    }

    /// This rank's in- and out-neighbours (communicator ranks, MPI_PROC_NULL at a grid's edge),
    /// each with the tag kind its message carries (see the module's documentation).
    fn neighbourhood(&self, rank: usize) -> (Vec<Peer>, Vec<Peer>) {
        match self {
            Topo::Cart { dims, periods } => {
                let me = coords_of(dims, rank);
                let (mut ins, mut outs) = (Vec::new(), Vec::new());
                for d in 0..dims.len() {
                    let down = step(dims, periods, &me, d, -1);
                    let up = step(dims, periods, &me, d, 1);
                    // From the neighbour below comes what it sent up, and so on.
                    ins.push((down, TAG_NEIGHBOR_UP));
                    ins.push((up, TAG_NEIGHBOR));
                    outs.push((down, TAG_NEIGHBOR));
                    outs.push((up, TAG_NEIGHBOR_UP));
                }
                (ins, outs)
            }
            Topo::Graph { index, edges } => {
                let n: Vec<Peer> = Topo::graph_neighbors(index, edges, rank)
                    .into_iter()
                    .map(|r| (r, TAG_NEIGHBOR))
                    .collect();
                (n.clone(), n)
            }
            Topo::Dist { sources, dests, .. } => (
                sources.iter().map(|&r| (r, TAG_NEIGHBOR)).collect(),
                dests.iter().map(|&r| (r, TAG_NEIGHBOR)).collect(),
            ),
        }
    }
}

/// The coordinates of rank `r` in a grid (row-major: the last dimension varies fastest).
fn coords_of(dims: &[c_int], mut r: usize) -> Vec<c_int> {
    let mut c = vec![0; dims.len()];
    for (x, &d) in c.iter_mut().zip(dims).rev() {
        *x = (r % d as usize) as c_int;
        r /= d as usize;
    }
    c
}

/// The rank at `coords` (wrapped in periodic dimensions); None outside a non-periodic one.
fn rank_at(dims: &[c_int], periods: &[bool], coords: &[c_int]) -> Option<c_int> {
    let mut r: i64 = 0;
    for ((&x, &d), &p) in coords.iter().zip(dims).zip(periods) {
        let x = if p {
            (x as i64).rem_euclid(d as i64)
        } else if (0..d).contains(&x) {
            x as i64
        } else {
            return None;
        };
        r = r * d as i64 + x;
    }
    Some(r as c_int)
}

/// The rank `disp` steps from `me` along dimension `d` (MPI_PROC_NULL off a non-periodic edge).
fn step(dims: &[c_int], periods: &[bool], me: &[c_int], d: usize, disp: c_int) -> c_int {
    let mut c = me.to_vec();
    c[d] = c[d].saturating_add(disp);
    rank_at(dims, periods, &c).unwrap_or(abi::PROC_NULL)
}

/// The topology of `comm`, and the communicator.
fn topo_of(comm: H) -> R<(Arc<CommCore>, Arc<Topo>)> {
    let c = rt()?.comm(comm)?;
    let t = c.topo.clone().ok_or_else(|| {
        fail(
            class::TOPOLOGY,
            "the communicator has no process topology (make one with MPI_Cart_create, MPI_Graph_create or MPI_Dist_graph_create)",
        )
    })?;
    Ok((c, t))
}

/// The topology of `comm`, which must be of `kind` (MPI_CART, MPI_GRAPH or MPI_DIST_GRAPH;
/// `what` names it in the error).
fn topo_kind(comm: H, kind: c_int, what: &str) -> R<(Arc<CommCore>, Arc<Topo>)> {
    let (c, t) = topo_of(comm)?;
    if t.kind() != kind {
        return Err(fail(
            class::TOPOLOGY,
            format!("the communicator's topology is not {what}"),
        ));
    }
    Ok((c, t))
}

fn cart_of(comm: H) -> R<(Arc<CommCore>, Arc<Topo>)> {
    topo_kind(comm, 1, "Cartesian")
}

fn graph_of(comm: H) -> R<(Arc<CommCore>, Arc<Topo>)> {
    topo_kind(comm, 2, "a graph (MPI_Graph_create)")
}

fn dist_of(comm: H) -> R<(Arc<CommCore>, Arc<Topo>)> {
    topo_kind(comm, 3, "a distributed graph (MPI_Dist_graph_create)")
}

/// An intracommunicator, for a topology constructor.
fn intra_for(comm: H, what: &str) -> R<Arc<CommCore>> {
    let c = rt()?.comm(comm)?;
    if c.is_inter() {
        return Err(fail(
            class::COMM,
            format!("{what} needs an intracommunicator"),
        ));
    }
    Ok(c)
}

/// Checks a grid's dimensions against `size` ranks; the number of ranks it holds.
fn grid(dims: &[c_int], size: usize) -> R<usize> {
    let mut n: usize = 1;
    for &d in dims {
        if d <= 0 {
            return Err(fail(
                class::DIMS,
                format!("a grid dimension is {d}: each must be at least 1"),
            ));
        }
        n = n.saturating_mul(d as usize);
    }
    if n > size {
        return Err(fail(
            class::TOPOLOGY,
            format!("the grid holds {n} ranks, more than the communicator's {size}"),
        ));
    }
    Ok(n)
}

/// Checks MPI_Graph_create's arrays for `size` ranks.
fn check_graph(index: &[c_int], edges_len: usize, size: usize) -> R {
    if index.len() > size {
        return Err(fail(
            class::TOPOLOGY,
            format!(
                "the graph has {} nodes, more than the communicator's {size} ranks",
                index.len()
            ),
        ));
    }
    let mut last = 0;
    for &i in index {
        if i < last {
            return Err(fail(
                class::ARG,
                "the graph's index array must not decrease",
            ));
        }
        last = i;
    }
    if last as usize != edges_len {
        return Err(fail(
            class::ARG,
            "the graph's index array does not end at its number of edges",
        ));
    }
    Ok(())
}

/// Weights from the caller: None for MPI_UNWEIGHTED, else `n` of them (none for
/// MPI_WEIGHTS_EMPTY).
fn weights(p: *const c_int, n: c_int) -> R<Option<Vec<c_int>>> {
    match p as usize {
        UNWEIGHTED => Ok(None),
        WEIGHTS_EMPTY => {
            if n > 0 {
                return Err(fail(
                    class::ARG,
                    "MPI_WEIGHTS_EMPTY given for a non-empty list of neighbours",
                ));
            }
            Ok(Some(Vec::new()))
        }
        // SAFETY: MPI: one weight per neighbour.
        _ => Ok(Some(unsafe { array(p, n)? }.to_vec())),
    }
}

fn check_ranks(v: &[c_int], size: usize, what: &str) -> R {
    if let Some(&r) = v.iter().find(|&&r| r < 0 || r as usize >= size) {
        return Err(fail(
            class::RANK,
            format!(
                "{what} {r} is not a rank of the communicator (0 to {})",
                size as i64 - 1
            ),
        ));
    }
    Ok(())
}

/// A communicator with `comm`'s group and topology `t` (distributed graphs: every rank stays).
fn same_group(c: &CommCore, comm: H, t: Topo) -> R<H> {
    let cid = agree_cid(c)?;
    install_topo(cid, c.group.clone(), comm, Some(Arc::new(t)))
}

/// Exchanges the edges of MPI_Dist_graph_create: `out[r]` holds, for rank r, triples (what,
/// other rank, weight), `what` 0 for an edge into r and 1 for an edge out of r. Every rank's
/// lists, in the order of the ranks that gave them.
fn exchange_edges(c: &CommCore, out: &[Vec<c_int>]) -> R<Vec<Vec<c_int>>> {
    let n = c.size();
    let counts: Vec<Vec<u8>> = out
        .iter()
        .map(|v| (v.len() as u32).to_ne_bytes().to_vec())
        .collect();
    let mut theirs = vec![0usize; n];
    let s = c.next_seq();
    let tag = s.tag(crate::coll::TAG_ALLTOALL);
    let mine = c.rank;
    let mut got: Vec<Vec<u8>> = vec![vec![0u8; 4]; n];
    block_on(exchange_blocks(c, tag, &counts, &mut got))?;
    for (r, b) in got.iter().enumerate() {
        theirs[r] = if r == mine {
            out[r].len()
        } else {
            u32::from_ne_bytes(b[..4].try_into().expect("4")) as usize
        };
    }
    let blocks: Vec<Vec<u8>> = out
        .iter()
        .map(|v| v.iter().flat_map(|x| x.to_ne_bytes()).collect())
        .collect();
    let mut got: Vec<Vec<u8>> = theirs.iter().map(|&k| vec![0u8; 4 * k]).collect();
    let s = c.next_seq();
    block_on(exchange_blocks(
        c,
        s.tag(crate::coll::TAG_ALLTOALL),
        &blocks,
        &mut got,
    ))?;
    got[mine] = blocks[mine].clone();
    Ok(got
        .iter()
        .map(|b| {
            b.chunks_exact(4)
                .map(|x| c_int::from_ne_bytes(x.try_into().expect("4")))
                .collect()
        })
        .collect())
}

/// Sends `blocks[r]` to every other rank r and receives `got[r]` from it.
async fn exchange_blocks(c: &CommCore, tag: u32, blocks: &[Vec<u8>], got: &mut [Vec<u8>]) -> R {
    let me = c.rank;
    let sends: Vec<(usize, u32, &[u8])> = blocks
        .iter()
        .enumerate()
        .filter(|(r, _)| *r != me)
        .map(|(r, b)| (r, tag, &b[..]))
        .collect();
    let mut recvs: Vec<(usize, u32, &mut [u8])> = got
        .iter_mut()
        .enumerate()
        .filter(|(r, _)| *r != me)
        .map(|(r, b)| (r, tag, &mut b[..]))
        .collect();
    exchange_a(c, &sends, &mut recvs).await
}

/// One side of a neighbourhood collective: per neighbour, where its block is, its type and its
/// element count.
pub(crate) type Blocks = Vec<(P, TypeRef, usize)>;

/// A neighbourhood collective as a future: `sends[k]` to out-neighbour k, `recvs[j]` from
/// in-neighbour j (packed when it starts, unpacked when the step completes).
/// How many neighbours this rank receives from and sends to on `comm` (a persistent
/// neighbourhood collective copies its arrays of those lengths).
fn degrees(comm: H) -> R<(usize, usize)> {
    let (c, t) = topo_of(comm)?;
    let (ins, outs) = t.neighbourhood(c.rank);
    Ok((ins.len(), outs.len()))
}

fn neighbor_op(
    comm: H,
    sends: impl FnOnce(usize) -> R<Blocks>,
    recvs: impl FnOnce(usize) -> R<Blocks>,
) -> R<Nbc> {
    let (c, t) = topo_of(comm)?;
    let (ins, outs) = t.neighbourhood(c.rank);
    let sends = sends(outs.len())?;
    let recvs = recvs(ins.len())?;
    let data: Vec<Vec<u8>> = sends
        .iter()
        .map(|(p, t, n)| {
            let mut v = vec![0u8; n * t.size];
            // SAFETY: MPI: the send buffer holds n elements of the datatype at p.
            unsafe { t.pack(p.get() as *const u8, *n, &mut v) };
            v
        })
        .collect();
    let s = c.next_seq();
    Ok(Nbc::new(async move {
        let mut got: Vec<Vec<u8>> = recvs
            .iter()
            .map(|(_, t, n)| vec![0u8; n * t.size])
            .collect();
        {
            let sends: Vec<(usize, u32, &[u8])> = outs
                .iter()
                .zip(&data)
                .filter(|((r, _), _)| *r != abi::PROC_NULL)
                .map(|(&(r, k), b)| (r as usize, s.tag(k), &b[..]))
                .collect();
            let mut rs: Vec<(usize, u32, &mut [u8])> = ins
                .iter()
                .zip(got.iter_mut())
                .filter(|((r, _), _)| *r != abi::PROC_NULL)
                .map(|(&(r, k), b)| (r as usize, s.tag(k), &mut b[..]))
                .collect();
            exchange_a(&c, &sends, &mut rs).await?;
        }
        for (((r, _), b), (p, t, n)) in ins.iter().zip(&got).zip(&recvs) {
            if *r != abi::PROC_NULL {
                // SAFETY: MPI: the receive buffer holds n elements of the datatype at p.
                unsafe { t.unpack(b, p.get() as *mut u8, *n) };
            }
        }
        Ok(None)
    }))
}

fn type_of(h: H) -> R<TypeRef> {
    committed(&*rt()?, h)
}

fn nonneg(n: c_int, what: &str) -> R<usize> {
    if n < 0 {
        return Err(fail(class::COUNT, format!("the {what} {n} is negative")));
    }
    Ok(n as usize)
}

/// `k` blocks of `n` elements of `t` one after the other from `base`.
pub(crate) fn regular(base: *const c_void, n: c_int, t: H, k: usize, what: &str) -> R<Blocks> {
    let n = nonneg(n, what)?;
    let t = type_of(t)?;
    let stride = t.extent() * n as isize;
    Ok((0..k)
        .map(|i| {
            (
                P::new((base as *const u8).wrapping_offset(stride * i as isize)),
                t.clone(),
                n,
            )
        })
        .collect())
}

/// `k` blocks with their counts and displacements (in elements of `t`).
pub(crate) fn varied(
    base: *const c_void,
    counts: *const c_int,
    displs: *const c_int,
    t: H,
    k: usize,
) -> R<Blocks> {
    // SAFETY: MPI: one count and one displacement per neighbour.
    let (cs, ds) = unsafe { (array(counts, k as c_int)?, array(displs, k as c_int)?) };
    let t = type_of(t)?;
    cs.iter()
        .zip(ds)
        .map(|(&n, &d)| {
            let n = nonneg(n, "count")?;
            Ok((
                P::new((base as *const u8).wrapping_offset(d as isize * t.extent())),
                t.clone(),
                n,
            ))
        })
        .collect()
}

/// `k` blocks with their counts, byte displacements and types (the w-variant).
fn typed(
    base: *const c_void,
    counts: *const c_int,
    displs: *const abi::Aint,
    types: *const H,
    k: usize,
) -> R<Blocks> {
    // SAFETY: MPI: one count, displacement and datatype per neighbour.
    let (cs, ds, ts) = unsafe {
        (
            array(counts, k as c_int)?,
            array(displs, k as c_int)?,
            array(types, k as c_int)?,
        )
    };
    let rt = rt()?;
    cs.iter()
        .zip(ds)
        .zip(ts)
        .map(|((&n, &d), &t)| {
            let n = nonneg(n, "count")?;
            Ok((
                P::new((base as *const u8).wrapping_offset(d)),
                committed(&rt, t)?,
                n,
            ))
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn allgather_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    comm: H,
) -> R<Nbc> {
    neighbor_op(
        comm,
        |k| {
            let one = regular(sendbuf, sendcount, sendtype, 1, "send count")?.remove(0);
            Ok(vec![one; k])
        },
        |k| regular(recvbuf, recvcount, recvtype, k, "receive count"),
    )
}

#[allow(clippy::too_many_arguments)]
fn allgatherv_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: H,
    comm: H,
) -> R<Nbc> {
    neighbor_op(
        comm,
        |k| {
            let one = regular(sendbuf, sendcount, sendtype, 1, "send count")?.remove(0);
            Ok(vec![one; k])
        },
        |k| varied(recvbuf, recvcounts, displs, recvtype, k),
    )
}

#[allow(clippy::too_many_arguments)]
fn alltoall_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    comm: H,
) -> R<Nbc> {
    neighbor_op(
        comm,
        |k| regular(sendbuf, sendcount, sendtype, k, "send count"),
        |k| regular(recvbuf, recvcount, recvtype, k, "receive count"),
    )
}

#[allow(clippy::too_many_arguments)]
fn alltoallv_op(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: H,
    comm: H,
) -> R<Nbc> {
    neighbor_op(
        comm,
        |k| varied(sendbuf, sendcounts, sdispls, sendtype, k),
        |k| varied(recvbuf, recvcounts, rdispls, recvtype, k),
    )
}

#[allow(clippy::too_many_arguments)]
fn alltoallw_op(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const abi::Aint,
    sendtypes: *const H,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const abi::Aint,
    recvtypes: *const H,
    comm: H,
) -> R<Nbc> {
    neighbor_op(
        comm,
        |k| typed(sendbuf, sendcounts, sdispls, sendtypes, k),
        |k| typed(recvbuf, recvcounts, rdispls, recvtypes, k),
    )
}

fn run(op: R<Nbc>) -> R {
    block_on(op?).map(|_| ())
}

fn start(op: impl FnOnce() -> R<Nbc>, comm: H, request: *mut H) -> R {
    crate::p2p::start_nbc(crate::nbc::starting(op)?, comm, request)
}

/// Writes MPI_COMM_NULL to a creation's output, when it is a pointer (a null one is reported
/// by the creation itself).
fn null_out(out: *mut H) {
    if !out.is_null() {
        // SAFETY: MPI: a non-null output argument points at a handle the call may write.
        unsafe { *out = abi::COMM_NULL };
    }
}

mpi! {
    fn MPI_Topo_test / PMPI_Topo_test(comm: H, status: *mut c_int) [comm] {
        let c = rt()?.comm(comm)?;
        let kind = c.topo.as_ref().map_or(abi::UNDEFINED, |t| t.kind());
        // SAFETY: the caller's output argument.
        unsafe { put(status, kind) }
    }

    fn MPI_Cart_create / PMPI_Cart_create(comm_old: H, ndims: c_int, dims: *const c_int, periods: *const c_int, _reorder: c_int, comm_cart: *mut H) [comm_old] {
        // A call that fails leaves no communicator: MPI_COMM_NULL, as MPICH answers.
        null_out(comm_cart);
        let c = intra_for(comm_old, "MPI_Cart_create")?;
        if ndims < 0 {
            return Err(fail(class::DIMS, format!("ndims {ndims} is negative")));
        }
        // SAFETY: MPI: ndims entries each.
        let (d, p) = unsafe { (array(dims, ndims)?, array(periods, ndims)?) };
        let n = grid(d, c.size())?;
        let topo = Topo::Cart { dims: d.to_vec(), periods: p.iter().map(|&x| x != 0).collect() };
        let color = if c.rank < n { 0 } else { abi::UNDEFINED };
        let h = split_to(&c, comm_old, color, c.rank as c_int, Some(Arc::new(topo)))?;
        // SAFETY: the caller's output argument.
        unsafe { put(comm_cart, h) }
    }

    fn MPI_Cartdim_get / PMPI_Cartdim_get(comm: H, ndims: *mut c_int) [comm] {
        let (_, t) = cart_of(comm)?;
        let Topo::Cart { dims, .. } = &*t else { unreachable!("checked by cart_of") };
        // SAFETY: the caller's output argument.
        unsafe { put(ndims, dims.len() as c_int) }
    }

    fn MPI_Cart_get / PMPI_Cart_get(comm: H, maxdims: c_int, dims: *mut c_int, periods: *mut c_int, coords: *mut c_int) [comm] {
        let (c, t) = cart_of(comm)?;
        let Topo::Cart { dims: d, periods: p } = &*t else { unreachable!("checked by cart_of") };
        let k = d.len().min(maxdims.max(0) as usize) as c_int;
        let me = coords_of(d, c.rank);
        // SAFETY: MPI: maxdims entries each.
        let (od, op, oc) = unsafe { (array_mut(dims, k)?, array_mut(periods, k)?, array_mut(coords, k)?) };
        for i in 0..k as usize {
            od[i] = d[i];
            op[i] = p[i] as c_int;
            oc[i] = me[i];
        }
        Ok(())
    }

    fn MPI_Cart_rank / PMPI_Cart_rank(comm: H, coords: *const c_int, rank: *mut c_int) [comm] {
        let (_, t) = cart_of(comm)?;
        let Topo::Cart { dims, periods } = &*t else { unreachable!("checked by cart_of") };
        // SAFETY: MPI: one coordinate per dimension.
        let x = unsafe { array(coords, dims.len() as c_int)? };
        let r = rank_at(dims, periods, x).ok_or_else(|| fail(class::ARG, format!("coordinates {x:?} lie outside the grid {dims:?} in a non-periodic dimension")))?;
        // SAFETY: the caller's output argument.
        unsafe { put(rank, r) }
    }

    fn MPI_Cart_coords / PMPI_Cart_coords(comm: H, rank: c_int, maxdims: c_int, coords: *mut c_int) [comm] {
        let (c, t) = cart_of(comm)?;
        let Topo::Cart { dims, .. } = &*t else { unreachable!("checked by cart_of") };
        if rank < 0 || rank as usize >= c.size() {
            return Err(fail(class::RANK, format!("rank {rank} is not in the grid (0 to {})", c.size() as i64 - 1)));
        }
        if (maxdims.max(0) as usize) < dims.len() {
            return Err(fail(class::ARG, format!("maxdims {maxdims} is less than the grid's {} dimensions", dims.len())));
        }
        let me = coords_of(dims, rank as usize);
        // SAFETY: MPI: maxdims entries.
        let out = unsafe { array_mut(coords, dims.len() as c_int)? };
        out.copy_from_slice(&me);
        Ok(())
    }

    fn MPI_Cart_shift / PMPI_Cart_shift(comm: H, direction: c_int, disp: c_int, rank_source: *mut c_int, rank_dest: *mut c_int) [comm] {
        let (c, t) = cart_of(comm)?;
        let Topo::Cart { dims, periods } = &*t else { unreachable!("checked by cart_of") };
        if direction < 0 || direction as usize >= dims.len() {
            return Err(fail(class::ARG, format!("direction {direction} is not a dimension of the grid (0 to {})", dims.len() as i64 - 1)));
        }
        let me = coords_of(dims, c.rank);
        let d = direction as usize;
        let (src, dst) = (step(dims, periods, &me, d, disp.saturating_neg()), step(dims, periods, &me, d, disp));
        // SAFETY: the caller's output arguments.
        unsafe {
            put(rank_source, src)?;
            put(rank_dest, dst)
        }
    }

    fn MPI_Cart_sub / PMPI_Cart_sub(comm: H, remain_dims: *const c_int, newcomm: *mut H) [comm] {
        let (c, t) = cart_of(comm)?;
        let Topo::Cart { dims, periods } = &*t else { unreachable!("checked by cart_of") };
        // SAFETY: MPI: one flag per dimension.
        let keep = unsafe { array(remain_dims, dims.len() as c_int)? };
        let me = coords_of(dims, c.rank);
        // Ranks that agree on the dropped coordinates form one grid, in their old order.
        let mut color: i64 = 0;
        let (mut sd, mut sp) = (Vec::new(), Vec::new());
        for i in 0..dims.len() {
            if keep[i] != 0 {
                sd.push(dims[i]);
                sp.push(periods[i]);
            } else {
                color = color * dims[i] as i64 + me[i] as i64;
            }
        }
        let sub = Topo::Cart { dims: sd, periods: sp };
        let h = split_to(&c, comm, color as c_int, c.rank as c_int, Some(Arc::new(sub)))?;
        // SAFETY: the caller's output argument.
        unsafe { put(newcomm, h) }
    }

    fn MPI_Cart_map / PMPI_Cart_map(comm: H, ndims: c_int, dims: *const c_int, _periods: *const c_int, newrank: *mut c_int) [comm] {
        let c = intra_for(comm, "MPI_Cart_map")?;
        if ndims < 0 {
            return Err(fail(class::DIMS, format!("ndims {ndims} is negative")));
        }
        // SAFETY: MPI: ndims entries.
        let d = unsafe { array(dims, ndims)? };
        let n = grid(d, c.size())?;
        // volley keeps the ranks' order.
        let r = if c.rank < n { c.rank as c_int } else { abi::UNDEFINED };
        // SAFETY: the caller's output argument.
        unsafe { put(newrank, r) }
    }

    fn MPI_Graph_create / PMPI_Graph_create(comm_old: H, nnodes: c_int, index: *const c_int, edges: *const c_int, _reorder: c_int, comm_graph: *mut H) [comm_old] {
        // A call that fails leaves no communicator: MPI_COMM_NULL, as MPICH answers.
        null_out(comm_graph);
        let c = intra_for(comm_old, "MPI_Graph_create")?;
        if nnodes < 0 {
            return Err(fail(class::ARG, format!("nnodes {nnodes} is negative")));
        }
        // SAFETY: MPI: nnodes entries.
        let ix = unsafe { array(index, nnodes)? };
        let ne = ix.last().copied().unwrap_or(0);
        // SAFETY: MPI: index[nnodes-1] edges.
        let ed = unsafe { array(edges, ne)? };
        check_graph(ix, ed.len(), c.size())?;
        check_ranks(ed, ix.len(), "edge to node")?;
        let topo = Topo::Graph { index: ix.to_vec(), edges: ed.to_vec() };
        let color = if c.rank < ix.len() { 0 } else { abi::UNDEFINED };
        let h = split_to(&c, comm_old, color, c.rank as c_int, Some(Arc::new(topo)))?;
        // SAFETY: the caller's output argument.
        unsafe { put(comm_graph, h) }
    }

    fn MPI_Graphdims_get / PMPI_Graphdims_get(comm: H, nnodes: *mut c_int, nedges: *mut c_int) [comm] {
        let (_, t) = graph_of(comm)?;
        let Topo::Graph { index, edges } = &*t else { unreachable!("checked by graph_of") };
        // SAFETY: the caller's output arguments.
        unsafe {
            put(nnodes, index.len() as c_int)?;
            put(nedges, edges.len() as c_int)
        }
    }

    fn MPI_Graph_get / PMPI_Graph_get(comm: H, maxindex: c_int, maxedges: c_int, index: *mut c_int, edges: *mut c_int) [comm] {
        let (_, t) = graph_of(comm)?;
        let Topo::Graph { index: ix, edges: ed } = &*t else { unreachable!("checked by graph_of") };
        let (ki, ke) = (ix.len().min(maxindex.max(0) as usize), ed.len().min(maxedges.max(0) as usize));
        // SAFETY: MPI: maxindex and maxedges entries.
        let (oi, oe) = unsafe { (array_mut(index, ki as c_int)?, array_mut(edges, ke as c_int)?) };
        oi.copy_from_slice(&ix[..ki]);
        oe.copy_from_slice(&ed[..ke]);
        Ok(())
    }

    fn MPI_Graph_neighbors_count / PMPI_Graph_neighbors_count(comm: H, rank: c_int, nneighbors: *mut c_int) [comm] {
        let (_, t) = graph_of(comm)?;
        let Topo::Graph { index, edges } = &*t else { unreachable!("checked by graph_of") };
        check_ranks(&[rank], index.len(), "rank")?;
        let n = Topo::graph_neighbors(index, edges, rank as usize).len();
        // SAFETY: the caller's output argument.
        unsafe { put(nneighbors, n as c_int) }
    }

    fn MPI_Graph_neighbors / PMPI_Graph_neighbors(comm: H, rank: c_int, maxneighbors: c_int, neighbors: *mut c_int) [comm] {
        let (_, t) = graph_of(comm)?;
        let Topo::Graph { index, edges } = &*t else { unreachable!("checked by graph_of") };
        check_ranks(&[rank], index.len(), "rank")?;
        let n = Topo::graph_neighbors(index, edges, rank as usize);
        let k = n.len().min(maxneighbors.max(0) as usize);
        // SAFETY: MPI: maxneighbors entries.
        let out = unsafe { array_mut(neighbors, k as c_int)? };
        out.copy_from_slice(&n[..k]);
        Ok(())
    }

    fn MPI_Graph_map / PMPI_Graph_map(comm: H, nnodes: c_int, index: *const c_int, edges: *const c_int, newrank: *mut c_int) [comm] {
        let c = intra_for(comm, "MPI_Graph_map")?;
        if nnodes < 0 {
            return Err(fail(class::ARG, format!("nnodes {nnodes} is negative")));
        }
        // SAFETY: MPI: nnodes entries.
        let ix = unsafe { array(index, nnodes)? };
        let ne = ix.last().copied().unwrap_or(0);
        // SAFETY: MPI: index[nnodes-1] edges.
        let ed = unsafe { array(edges, ne)? };
        check_graph(ix, ed.len(), c.size())?;
        let r = if c.rank < ix.len() { c.rank as c_int } else { abi::UNDEFINED };
        // SAFETY: the caller's output argument.
        unsafe { put(newrank, r) }
    }

    fn MPI_Dist_graph_create_adjacent / PMPI_Dist_graph_create_adjacent(comm_old: H, indegree: c_int, sources: *const c_int, sourceweights: *const c_int, outdegree: c_int, destinations: *const c_int, destweights: *const c_int, _info: H, _reorder: c_int, comm_dist_graph: *mut H) [comm_old] {
        // A call that fails leaves no communicator: MPI_COMM_NULL, as MPICH answers.
        null_out(comm_dist_graph);
        let c = intra_for(comm_old, "MPI_Dist_graph_create_adjacent")?;
        // SAFETY: MPI: indegree sources and outdegree destinations.
        let (src, dst) = unsafe { (array(sources, indegree)?, array(destinations, outdegree)?) };
        check_ranks(src, c.size(), "source")?;
        check_ranks(dst, c.size(), "destination")?;
        let (sw, dw) = (weights(sourceweights, indegree)?, weights(destweights, outdegree)?);
        let weighted = sw.is_some() && dw.is_some();
        let topo = Topo::Dist {
            sources: src.to_vec(),
            sweights: sw.unwrap_or_default(),
            dests: dst.to_vec(),
            dweights: dw.unwrap_or_default(),
            weighted,
        };
        let h = same_group(&c, comm_old, topo)?;
        // SAFETY: the caller's output argument.
        unsafe { put(comm_dist_graph, h) }
    }

    fn MPI_Dist_graph_create / PMPI_Dist_graph_create(comm_old: H, n: c_int, sources: *const c_int, degrees: *const c_int, destinations: *const c_int, weights_: *const c_int, _info: H, _reorder: c_int, comm_dist_graph: *mut H) [comm_old] {
        // A call that fails leaves no communicator: MPI_COMM_NULL, as MPICH answers.
        null_out(comm_dist_graph);
        let c = intra_for(comm_old, "MPI_Dist_graph_create")?;
        // SAFETY: MPI: n sources and n degrees.
        let (src, deg) = unsafe { (array(sources, n)?, array(degrees, n)?) };
        check_ranks(src, c.size(), "source")?;
        if let Some(&d) = deg.iter().find(|&&d| d < 0) {
            return Err(fail(class::ARG, format!("a degree is negative ({d})")));
        }
        let total: i64 = deg.iter().map(|&d| d as i64).sum();
        let total = c_int::try_from(total).map_err(|_| fail(class::ARG, "the degrees add up to more than an int"))?;
        // SAFETY: MPI: the sum of the degrees destinations.
        let dst = unsafe { array(destinations, total)? };
        check_ranks(dst, c.size(), "destination")?;
        let w = weights(weights_, total)?;
        let weighted = w.is_some();
        // Each edge goes to both of its ends: its source as an out-edge, its destination as an
        // in-edge.
        let mut out: Vec<Vec<c_int>> = vec![Vec::new(); c.size()];
        let mut e = 0;
        for (&s, &d) in src.iter().zip(deg) {
            for _ in 0..d {
                let (t, wt) = (dst[e], w.as_ref().map_or(1, |w| w[e]));
                out[s as usize].extend([1, t, wt]);
                out[t as usize].extend([0, s, wt]);
                e += 1;
            }
        }
        let got = exchange_edges(&c, &out)?;
        let (mut sources, mut sweights, mut dests, mut dweights) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for list in &got {
            for x in list.chunks_exact(3) {
                if x[0] == 0 {
                    sources.push(x[1]);
                    sweights.push(x[2]);
                } else {
                    dests.push(x[1]);
                    dweights.push(x[2]);
                }
            }
        }
        let h = same_group(&c, comm_old, Topo::Dist { sources, sweights, dests, dweights, weighted })?;
        // SAFETY: the caller's output argument.
        unsafe { put(comm_dist_graph, h) }
    }

    fn MPI_Dist_graph_neighbors_count / PMPI_Dist_graph_neighbors_count(comm: H, indegree: *mut c_int, outdegree: *mut c_int, weighted: *mut c_int) [comm] {
        let (c, t) = dist_of(comm)?;
        let (ins, outs) = t.neighbourhood(c.rank);
        let w = matches!(*t, Topo::Dist { weighted: true, .. });
        // SAFETY: the caller's output arguments.
        unsafe {
            put(indegree, ins.len() as c_int)?;
            put(outdegree, outs.len() as c_int)?;
            put(weighted, w as c_int)
        }
    }

    fn MPI_Dist_graph_neighbors / PMPI_Dist_graph_neighbors(comm: H, maxindegree: c_int, sources: *mut c_int, sourceweights: *mut c_int, maxoutdegree: c_int, destinations: *mut c_int, destweights: *mut c_int) [comm] {
        let (c, t) = dist_of(comm)?;
        let (ins, outs) = t.neighbourhood(c.rank);
        let (ki, ko) = (ins.len().min(maxindegree.max(0) as usize), outs.len().min(maxoutdegree.max(0) as usize));
        // SAFETY: MPI: maxindegree and maxoutdegree entries.
        let (os, od) = unsafe { (array_mut(sources, ki as c_int)?, array_mut(destinations, ko as c_int)?) };
        for (o, &(r, _)) in os.iter_mut().zip(&ins) {
            *o = r;
        }
        for (o, &(r, _)) in od.iter_mut().zip(&outs) {
            *o = r;
        }
        if let Topo::Dist { sweights, dweights, weighted: true, .. } = &*t {
            for (p, w, k) in [(sourceweights, sweights, ki), (destweights, dweights, ko)] {
                if k > 0 && !matches!(p as usize, UNWEIGHTED | WEIGHTS_EMPTY) {
                    // SAFETY: MPI: as many weights as neighbours asked for.
                    unsafe { array_mut(p, k as c_int)? }.copy_from_slice(&w[..k]);
                }
            }
        }
        Ok(())
    }

    fn MPI_Neighbor_allgather / PMPI_Neighbor_allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H) [comm] {
        run(allgather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
    }

    fn MPI_Ineighbor_allgather / PMPI_Ineighbor_allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H, request: *mut H) [comm] {
        start(|| allgather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), comm, request)
    }

    fn MPI_Neighbor_allgatherv / PMPI_Neighbor_allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, comm: H) [comm] {
        run(allgatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm))
    }

    fn MPI_Ineighbor_allgatherv / PMPI_Ineighbor_allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, comm: H, request: *mut H) [comm] {
        start(|| allgatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm), comm, request)
    }

    fn MPI_Neighbor_alltoall / PMPI_Neighbor_alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H) [comm] {
        run(alltoall_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
    }

    fn MPI_Ineighbor_alltoall / PMPI_Ineighbor_alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H, request: *mut H) [comm] {
        start(|| alltoall_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), comm, request)
    }

    fn MPI_Neighbor_alltoallv / PMPI_Neighbor_alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: H, comm: H) [comm] {
        run(alltoallv_op(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm))
    }

    fn MPI_Ineighbor_alltoallv / PMPI_Ineighbor_alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: H, comm: H, request: *mut H) [comm] {
        start(|| alltoallv_op(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm), comm, request)
    }

    fn MPI_Neighbor_alltoallw / PMPI_Neighbor_alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const abi::Aint, sendtypes: *const H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const abi::Aint, recvtypes: *const H, comm: H) [comm] {
        run(alltoallw_op(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm))
    }

    fn MPI_Ineighbor_alltoallw / PMPI_Ineighbor_alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const abi::Aint, sendtypes: *const H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const abi::Aint, recvtypes: *const H, comm: H, request: *mut H) [comm] {
        start(|| alltoallw_op(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm), comm, request)
    }

    // MPI-4.0's persistent neighbourhood collectives, as coll.rs's.
    fn MPI_Neighbor_allgather_init / PMPI_Neighbor_allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H, _info: H, request: *mut H) [comm] {
        persistent!(comm, request, [sendbuf, recvbuf], [], allgather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
    }

    fn MPI_Neighbor_allgatherv_init / PMPI_Neighbor_allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, comm: H, _info: H, request: *mut H) [comm] {
        let (ins, _) = degrees(comm)?;
        let recvcounts = Kept::of(recvcounts, ins);
        let displs = Kept::of(displs, ins);
        persistent!(comm, request, [sendbuf, recvbuf], [recvcounts, displs], allgatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm))
    }

    fn MPI_Neighbor_alltoall_init / PMPI_Neighbor_alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H, _info: H, request: *mut H) [comm] {
        persistent!(comm, request, [sendbuf, recvbuf], [], alltoall_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
    }

    fn MPI_Neighbor_alltoallv_init / PMPI_Neighbor_alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: H, comm: H, _info: H, request: *mut H) [comm] {
        let (ins, outs) = degrees(comm)?;
        let sendcounts = Kept::of(sendcounts, outs);
        let sdispls = Kept::of(sdispls, outs);
        let recvcounts = Kept::of(recvcounts, ins);
        let rdispls = Kept::of(rdispls, ins);
        persistent!(comm, request, [sendbuf, recvbuf], [sendcounts, sdispls, recvcounts, rdispls], alltoallv_op(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm))
    }

    fn MPI_Neighbor_alltoallw_init / PMPI_Neighbor_alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const abi::Aint, sendtypes: *const H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const abi::Aint, recvtypes: *const H, comm: H, _info: H, request: *mut H) [comm] {
        let (ins, outs) = degrees(comm)?;
        let sendcounts = Kept::of(sendcounts, outs);
        let sdispls = Kept::of(sdispls, outs);
        let sendtypes = Kept::of(sendtypes, outs);
        let recvcounts = Kept::of(recvcounts, ins);
        let rdispls = Kept::of(rdispls, ins);
        let recvtypes = Kept::of(recvtypes, ins);
        persistent!(comm, request, [sendbuf, recvbuf], [sendcounts, sdispls, sendtypes, recvcounts, rdispls, recvtypes], alltoallw_op(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm))
    }
}
