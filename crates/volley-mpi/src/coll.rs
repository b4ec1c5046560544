//! The collectives the point-to-point face needs, and reduction operations.
//!
//! These are plain algorithms over the communicator's second context (dissemination barrier,
//! binomial broadcast, reductions folded in rank order at the root, linear gather and scatter,
//! pairwise all-to-all): correct for every size and datatype, not yet tuned to the machine. The
//! collectives issue replaces them with ones that work in the job's shared memory inside a
//! host. Every exchange posts its receives before its sends and waits for all, so no two ranks
//! can wait on each other's sends.

use crate::abi::{self, class, H};
use crate::dtype::{committed, Basic, Dtype, TypeRef};
use crate::err::{fail, from_request, get, put, R};
use crate::state::{handle, index, rt, CommCore, UserFn, UserOp, KIND_OP};
use std::ffi::c_void;
use std::os::raw::c_int;
use volley::{RawBuf, RawBufMut};

/// Tags of the face's own messages on a communicator's second context (program tags, and so
/// synchronous-send acknowledgements, stay below 2^30).
pub const TAG_BARRIER: u32 = (1 << 30) | 1;
pub const TAG_BCAST: u32 = (1 << 30) | 2;
pub const TAG_REDUCE: u32 = (1 << 30) | 3;
pub const TAG_GATHER: u32 = (1 << 30) | 4;
pub const TAG_SCATTER: u32 = (1 << 30) | 5;
pub const TAG_ALLTOALL: u32 = (1 << 30) | 7;
pub const TAG_CID: u32 = (1 << 30) | 8;
pub const TAG_GATHERV: u32 = (1 << 30) | 9;
pub const TAG_SCATTERV: u32 = (1 << 30) | 10;
pub const TAG_ALLGATHERV: u32 = (1 << 30) | 11;
pub const TAG_ALLTOALLV: u32 = (1 << 30) | 12;
pub const TAG_SCAN: u32 = (1 << 30) | 13;
pub const TAG_EXSCAN: u32 = (1 << 30) | 14;
/// MPI_Intercomm_create (on the peer communicator, with 20 bits of the program's tag),
/// MPI_Intercomm_merge and the duplication of an intercommunicator.
pub const TAG_ICREATE: u32 = (1 << 30) | (1 << 28);
pub const TAG_INTER: u32 = (1 << 30) | 15;
/// MPI_Comm_create_group: this bit and 20 bits of the program's tag.
pub const TAG_CREATE_GROUP: u32 = (1 << 30) | (1 << 29);

/// Posts every receive, then every send, then waits for all: one step of a collective.
/// Ranks are the communicator's.
pub fn exchange(
    c: &CommCore,
    sends: &[(usize, u32, &[u8])],
    recvs: &mut [(usize, u32, &mut [u8])],
) -> R {
    let sends: Vec<(usize, u32, &[u8])> =
        sends.iter().map(|&(d, t, b)| (c.group[d], t, b)).collect();
    let mut recvs: Vec<(usize, u32, &mut [u8])> = recvs
        .iter_mut()
        .map(|(s, t, b)| (c.group[*s], *t, &mut **b))
        .collect();
    exchange_world(&c.coll, &sends, &mut recvs)
}

/// Like `exchange`, on endpoint `ep` with job ranks (between the leaders of two groups).
pub fn exchange_world(
    ep: &volley::Endpoint,
    sends: &[(usize, u32, &[u8])],
    recvs: &mut [(usize, u32, &mut [u8])],
) -> R {
    let w = ep.world();
    let mut ids = Vec::with_capacity(sends.len() + recvs.len());
    for (src, tag, buf) in recvs.iter_mut() {
        // SAFETY: the buffer is borrowed until wait_all below returns.
        let lent = unsafe { RawBufMut::new(buf.as_mut_ptr(), buf.len()) };
        ids.push(Some(
            ep.irecv_lent(Some(*src), Some(*tag), lent)
                .map_err(|e| crate::err::from_recv(&e))?,
        ));
    }
    for (dst, tag, data) in sends {
        // SAFETY: the data is borrowed until wait_all below returns.
        let lent = unsafe { RawBuf::new(data.as_ptr(), data.len()) };
        match ep.isend_lent(*dst, *tag, lent) {
            Ok(id) => ids.push(Some(id)),
            Err(e) => {
                // Let what was started finish (its buffers are borrowed here), then fail.
                w.wait_all(&mut ids, |_, _| {});
                return Err(crate::err::from_send(&e));
            }
        }
    }
    let mut err = None;
    w.wait_all(&mut ids, |_, r| {
        if let Err(e) = r {
            err.get_or_insert(from_request(&e));
        }
    });
    err.map_or(Ok(()), Err)
}

pub fn barrier(c: &CommCore) -> R {
    let n = c.size();
    let me = c.rank;
    let mut k = 1;
    while k < n {
        let to = (me + k) % n;
        let from = (me + n - k) % n;
        exchange(
            c,
            &[(to, TAG_BARRIER, &[])],
            &mut [(from, TAG_BARRIER, &mut [])],
        )?;
        k *= 2;
    }
    Ok(())
}

/// Binomial-tree broadcast of `buf` from `root`.
pub fn bcast_bytes(c: &CommCore, root: usize, buf: &mut [u8]) -> R {
    let n = c.size();
    let rel = (c.rank + n - root) % n;
    let mut mask = 1;
    while mask < n {
        if rel & mask != 0 {
            let src = (rel - mask + root) % n;
            exchange(c, &[], &mut [(src, TAG_BCAST, buf)])?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < n {
            let dst = (rel + mask + root) % n;
            exchange(c, &[(dst, TAG_BCAST, buf)], &mut [])?;
        }
        mask >>= 1;
    }
    Ok(())
}

/// Gathers equal blocks at `root` (`all` holds size blocks there; elsewhere unused).
pub fn gather_bytes(c: &CommCore, root: usize, mine: &[u8], all: &mut [u8], tag: u32) -> R {
    if c.rank != root {
        return exchange(c, &[(root, tag, mine)], &mut []);
    }
    let b = mine.len();
    let mut blocks: Vec<&mut [u8]> = if b == 0 {
        // Empty blocks: still hear from everyone.
        (0..c.size()).map(|_| &mut [][..]).collect()
    } else {
        all.chunks_mut(b).take(c.size()).collect()
    };
    blocks[root].copy_from_slice(mine);
    let mut recvs: Vec<(usize, u32, &mut [u8])> = blocks
        .into_iter()
        .enumerate()
        .filter(|(r, _)| *r != root)
        .map(|(r, blk)| (r, tag, blk))
        .collect();
    exchange(c, &[], &mut recvs)
}

pub fn allgather_bytes(c: &CommCore, mine: &[u8], all: &mut [u8]) -> R {
    gather_bytes(c, 0, mine, all, TAG_GATHER)?;
    bcast_bytes(c, 0, all)
}

/// A reduction operation: predefined, or the program's.
#[derive(Clone, Copy)]
pub enum Op {
    Predefined(H),
    User(UserOp),
}

pub fn op_of(h: H) -> R<Op> {
    match h {
        abi::SUM
        | abi::MIN
        | abi::MAX
        | abi::PROD
        | abi::BAND
        | abi::BOR
        | abi::BXOR
        | abi::LAND
        | abi::LOR
        | abi::LXOR
        | abi::MINLOC
        | abi::MAXLOC
        | abi::REPLACE
        | abi::NO_OP => Ok(Op::Predefined(h)),
        h => {
            let rt = rt()?;
            index(KIND_OP, h)
                .and_then(|i| rt.ops.get(i).copied().flatten())
                .map(Op::User)
                .ok_or_else(|| fail(class::OP, format!("{h:#x} is not an operation handle")))
        }
    }
}

fn op_name(h: H) -> &'static str {
    match h {
        abi::SUM => "MPI_SUM",
        abi::MIN => "MPI_MIN",
        abi::MAX => "MPI_MAX",
        abi::PROD => "MPI_PROD",
        abi::BAND => "MPI_BAND",
        abi::BOR => "MPI_BOR",
        abi::BXOR => "MPI_BXOR",
        abi::LAND => "MPI_LAND",
        abi::LOR => "MPI_LOR",
        abi::LXOR => "MPI_LXOR",
        abi::MINLOC => "MPI_MINLOC",
        abi::MAXLOC => "MPI_MAXLOC",
        abi::REPLACE => "MPI_REPLACE",
        _ => "MPI_NO_OP",
    }
}

macro_rules! each {
    ($t:ty, $a:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        for (o, i) in $a.chunks_exact_mut(S).zip($b.chunks_exact(S)) {
            let $x = <$t>::from_ne_bytes(i.try_into().expect("chunk"));
            let $y = <$t>::from_ne_bytes((&*o).try_into().expect("chunk"));
            let r: $t = $e;
            o.copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

macro_rules! arith {
    ($t:ty, $op:expr, $a:expr, $b:expr, $int:expr) => {{
        match $op {
            abi::SUM => each!($t, $a, $b, |x, y| x + y),
            abi::PROD => each!($t, $a, $b, |x, y| x * y),
            abi::MIN => each!($t, $a, $b, |x, y| if x < y { x } else { y }),
            abi::MAX => each!($t, $a, $b, |x, y| if x > y { x } else { y }),
            abi::LAND => each!(
                $t,
                $a,
                $b,
                |x, y| ((x != (0 as $t)) && (y != (0 as $t))) as u8 as $t
            ),
            abi::LOR => each!(
                $t,
                $a,
                $b,
                |x, y| ((x != (0 as $t)) || (y != (0 as $t))) as u8 as $t
            ),
            abi::LXOR => each!(
                $t,
                $a,
                $b,
                |x, y| ((x != (0 as $t)) != (y != (0 as $t))) as u8 as $t
            ),
            _ => return Err($int),
        }
    }};
}

macro_rules! bits {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        match $op {
            abi::BAND => each!($t, $a, $b, |x, y| x & y),
            abi::BOR => each!($t, $a, $b, |x, y| x | y),
            abi::BXOR => each!($t, $a, $b, |x, y| x ^ y),
            _ => {}
        }
    }};
}

/// MINLOC / MAXLOC on packed (value, int) pairs: the int at `$ioff`, `$ext` bytes a pair.
macro_rules! loc {
    ($t:ty, $op:expr, $a:expr, $b:expr, $ioff:expr, $ext:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        for (o, i) in $a.chunks_exact_mut($ext).zip($b.chunks_exact($ext)) {
            let xv = <$t>::from_ne_bytes(i[..S].try_into().expect("chunk"));
            let xi = i32::from_ne_bytes(i[$ioff..$ioff + 4].try_into().expect("chunk"));
            let yv = <$t>::from_ne_bytes(o[..S].try_into().expect("chunk"));
            let yi = i32::from_ne_bytes(o[$ioff..$ioff + 4].try_into().expect("chunk"));
            let better = if $op == abi::MINLOC { xv < yv } else { xv > yv };
            let (v, k) = if better {
                (xv, xi)
            } else if xv == yv {
                (xv, xi.min(yi))
            } else {
                (yv, yi)
            };
            o[..S].copy_from_slice(&v.to_ne_bytes());
            o[$ioff..$ioff + 4].copy_from_slice(&k.to_ne_bytes());
        }
    }};
}

/// inout = in op inout, element by element, for `count` elements of `t` (packed).
pub fn apply(op: Op, t: &Dtype, dtype_h: H, count: usize, input: &[u8], inout: &mut [u8]) -> R {
    match op {
        Op::User(u) => {
            let mut n = count as c_int;
            let mut h = dtype_h;
            // The program's function sees the elements as the datatype lays them out; packed
            // data of a contiguous type is exactly that. Non-contiguous types are unpacked
            // around the call.
            if t.contig {
                // SAFETY: a function the program registered with MPI_Op_create, called as MPI
                // defines, on count elements of the datatype in each buffer.
                unsafe {
                    (u.f)(
                        input.as_ptr() as *mut c_void,
                        inout.as_mut_ptr() as *mut c_void,
                        &mut n,
                        &mut h,
                    )
                };
            } else {
                let span = (t.extent() as usize) * count;
                let mut a = vec![0u8; span + t.true_ub.max(0) as usize];
                let mut b = a.clone();
                let base = (-t.lb).max(0) as usize;
                // SAFETY: a and b hold count elements of the type from base.
                unsafe {
                    t.unpack(input, a.as_mut_ptr().add(base), count);
                    t.unpack(inout, b.as_mut_ptr().add(base), count);
                    (u.f)(
                        a.as_mut_ptr().add(base) as *mut c_void,
                        b.as_mut_ptr().add(base) as *mut c_void,
                        &mut n,
                        &mut h,
                    );
                    t.pack(b.as_ptr().add(base), count, inout);
                }
            }
            Ok(())
        }
        Op::Predefined(abi::REPLACE) => {
            inout.copy_from_slice(input);
            Ok(())
        }
        Op::Predefined(abi::NO_OP) => Ok(()),
        Op::Predefined(o) => {
            let b = t.basic.ok_or_else(|| {
                fail(
                    class::OP,
                    format!(
                        "{} needs a datatype made of one predefined type",
                        op_name(o)
                    ),
                )
            })?;
            let unsupported = || {
                fail(
                    class::OP,
                    format!("{} is not defined on datatype {:?}", op_name(o), b),
                )
            };
            use Basic::*;
            let bitwise = matches!(o, abi::BAND | abi::BOR | abi::BXOR);
            let loc = matches!(o, abi::MINLOC | abi::MAXLOC);
            match b {
                I8 | U8 | I16 | U16 | I32 | U32 | I64 | U64 | Byte | Bool if bitwise => match b {
                    I8 | U8 | Byte | Bool => bits!(u8, o, inout, input),
                    I16 | U16 => bits!(u16, o, inout, input),
                    I32 | U32 => bits!(u32, o, inout, input),
                    _ => bits!(u64, o, inout, input),
                },
                _ if bitwise => return Err(unsupported()),
                FloatInt | DoubleInt | LongInt | TwoInt | ShortInt if loc => match b {
                    // Packed: the int right after the value.
                    FloatInt => loc!(f32, o, inout, input, 4, 8),
                    DoubleInt => loc!(f64, o, inout, input, 8, 12),
                    LongInt => loc!(i64, o, inout, input, 8, 12),
                    TwoInt => loc!(i32, o, inout, input, 4, 8),
                    _ => loc!(i16, o, inout, input, 2, 6),
                },
                _ if loc => return Err(unsupported()),
                I8 => arith!(i8, o, inout, input, unsupported()),
                U8 => arith!(u8, o, inout, input, unsupported()),
                I16 => arith!(i16, o, inout, input, unsupported()),
                U16 => arith!(u16, o, inout, input, unsupported()),
                I32 => arith!(i32, o, inout, input, unsupported()),
                U32 => arith!(u32, o, inout, input, unsupported()),
                I64 => arith!(i64, o, inout, input, unsupported()),
                U64 => arith!(u64, o, inout, input, unsupported()),
                F32 => arith!(f32, o, inout, input, unsupported()),
                F64 => arith!(f64, o, inout, input, unsupported()),
                Bool if matches!(o, abi::LAND | abi::LOR | abi::LXOR) => {
                    arith!(u8, o, inout, input, unsupported())
                }
                C32 | C64 if matches!(o, abi::SUM | abi::PROD) => {
                    if o == abi::SUM {
                        if b == C32 {
                            each!(f32, inout, input, |x, y| x + y)
                        } else {
                            each!(f64, inout, input, |x, y| x + y)
                        }
                    } else {
                        complex_prod(b == C32, inout, input);
                    }
                }
                _ => return Err(unsupported()),
            }
            Ok(())
        }
    }
}

fn complex_prod(single: bool, inout: &mut [u8], input: &[u8]) {
    if single {
        for (o, i) in inout.chunks_exact_mut(8).zip(input.chunks_exact(8)) {
            let f =
                |s: &[u8], k: usize| f32::from_ne_bytes(s[k * 4..k * 4 + 4].try_into().expect("4"));
            let (a, b, c, d) = (f(i, 0), f(i, 1), f(o, 0), f(o, 1));
            o[..4].copy_from_slice(&(a * c - b * d).to_ne_bytes());
            o[4..].copy_from_slice(&(a * d + b * c).to_ne_bytes());
        }
    } else {
        for (o, i) in inout.chunks_exact_mut(16).zip(input.chunks_exact(16)) {
            let f =
                |s: &[u8], k: usize| f64::from_ne_bytes(s[k * 8..k * 8 + 8].try_into().expect("8"));
            let (a, b, c, d) = (f(i, 0), f(i, 1), f(o, 0), f(o, 1));
            o[..8].copy_from_slice(&(a * c - b * d).to_ne_bytes());
            o[8..].copy_from_slice(&(a * d + b * c).to_ne_bytes());
        }
    }
}

/// Reduces every rank's `mine` (count packed elements) into `out` at `root`, in rank order.
#[allow(clippy::too_many_arguments)]
pub fn reduce_bytes(
    c: &CommCore,
    root: usize,
    op: Op,
    t: &Dtype,
    th: H,
    count: usize,
    mine: &[u8],
    out: &mut [u8],
) -> R {
    let (n, b) = (c.size(), mine.len());
    let mut all = if c.rank == root {
        vec![0u8; b * n]
    } else {
        Vec::new()
    };
    gather_bytes(c, root, mine, &mut all, TAG_REDUCE)?;
    if c.rank != root || b == 0 {
        return Ok(());
    }
    // acc = x0 op x1 op ... : fold left, x_r <- acc op x_r.
    let mut acc = all[..b].to_vec();
    for r in 1..n {
        let x = &mut all[r * b..(r + 1) * b];
        apply(op, t, th, count, &acc, x)?;
        acc.copy_from_slice(x);
    }
    out.copy_from_slice(&acc);
    Ok(())
}

/// The communicator and datatype of a collective call.
fn args(comm: H, dtype: H) -> R<(std::sync::Arc<CommCore>, TypeRef)> {
    let c = intra(comm)?;
    let rt = rt()?;
    Ok((c, committed(&rt, dtype)?))
}

/// The intracommunicator `comm` names: collectives on intercommunicators are not implemented.
pub fn intra(comm: H) -> R<std::sync::Arc<CommCore>> {
    let c = rt()?.comm(comm)?;
    if c.is_inter() {
        return Err(fail(
            class::COMM,
            "collective operations on intercommunicators are not implemented in volley's MPI yet; merge it with MPI_Intercomm_merge first",
        ));
    }
    Ok(c)
}

fn root_of(c: &CommCore, root: c_int) -> R<usize> {
    if root < 0 || root as usize >= c.size() {
        return Err(fail(
            class::ROOT,
            format!(
                "root {root} is not a rank of the communicator (0 to {})",
                c.size() as i64 - 1
            ),
        ));
    }
    Ok(root as usize)
}

fn count(n: c_int) -> R<usize> {
    if n < 0 {
        return Err(fail(class::COUNT, format!("count {n} is negative")));
    }
    Ok(n as usize)
}

/// Packs count elements at p (or copies, when contiguous).
fn packed(t: &Dtype, p: *const c_void, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n * t.size];
    // SAFETY: MPI: p holds n elements of the datatype.
    unsafe { t.pack(p as *const u8, n, &mut v) };
    v
}

fn unpacked(t: &Dtype, data: &[u8], p: *mut c_void, n: usize) {
    // SAFETY: MPI: p holds n elements of the datatype.
    unsafe { t.unpack(data, p as *mut u8, n) };
}

fn in_place(p: *const c_void) -> bool {
    p as usize == abi::IN_PLACE
}

crate::mpi! {
    fn MPI_Barrier / PMPI_Barrier(comm: H) [comm] {
        let c = intra(comm)?;
        barrier(&c)
    }

    fn MPI_Bcast / PMPI_Bcast(buffer: *mut c_void, count_: c_int, datatype: H, root: c_int, comm: H) [comm] {
        let (c, t) = args(comm, datatype)?;
        let n = count(count_)?;
        let root = root_of(&c, root)?;
        let mut data = if c.rank == root { packed(&t, buffer, n) } else { vec![0u8; n * t.size] };
        bcast_bytes(&c, root, &mut data)?;
        if c.rank != root {
            unpacked(&t, &data, buffer, n);
        }
        Ok(())
    }

    fn MPI_Reduce / PMPI_Reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, root: c_int, comm: H) [comm] {
        let (c, t) = args(comm, datatype)?;
        let n = count(count_)?;
        let root = root_of(&c, root)?;
        let op = op_of(op)?;
        let src = if in_place(sendbuf) && c.rank == root { recvbuf as *const c_void } else { sendbuf };
        let mine = packed(&t, src, n);
        let mut out = vec![0u8; mine.len()];
        reduce_bytes(&c, root, op, &t, datatype, n, &mine, &mut out)?;
        if c.rank == root {
            unpacked(&t, &out, recvbuf, n);
        }
        Ok(())
    }

    fn MPI_Allreduce / PMPI_Allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H) [comm] {
        let (c, t) = args(comm, datatype)?;
        let n = count(count_)?;
        let op = op_of(op)?;
        let src = if in_place(sendbuf) { recvbuf as *const c_void } else { sendbuf };
        let mine = packed(&t, src, n);
        let mut out = vec![0u8; mine.len()];
        reduce_bytes(&c, 0, op, &t, datatype, n, &mine, &mut out)?;
        bcast_bytes(&c, 0, &mut out)?;
        unpacked(&t, &out, recvbuf, n);
        Ok(())
    }

    fn MPI_Gather / PMPI_Gather(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H) [comm] {
        let c = intra(comm)?;
        let root = root_of(&c, root)?;
        let is_root = c.rank == root;
        let (rt_, st_) = {
            let rt = rt()?;
            let r = if is_root { Some(committed(&rt, recvtype)?) } else { None };
            let s = if is_root && in_place(sendbuf) { None } else { Some(committed(&rt, sendtype)?) };
            (r, s)
        };
        let rn = if is_root { count(recvcount)? } else { 0 };
        let mine = match &st_ {
            Some(t) => packed(t, sendbuf, count(sendcount)?),
            None => {
                let t = rt_.as_ref().expect("root");
                // MPI_IN_PLACE: the root's block is already in place in recvbuf.
                let at = (recvbuf as *const u8).wrapping_offset(root as isize * rn as isize * t.extent());
                packed(t, at as *const c_void, rn)
            }
        };
        let mut all = vec![0u8; if is_root { mine.len() * c.size() } else { 0 }];
        if is_root && rn * rt_.as_ref().expect("root").size != mine.len() {
            return Err(fail(class::TRUNCATE, format!("MPI_Gather: the root receives {} bytes per rank, this rank sends {}", rn * rt_.as_ref().expect("root").size, mine.len())));
        }
        gather_bytes(&c, root, &mine, &mut all, TAG_GATHER)?;
        if is_root {
            let t = rt_.expect("root");
            let b = mine.len();
            for r in 0..c.size() {
                let at = (recvbuf as *mut u8).wrapping_offset(r as isize * rn as isize * t.extent());
                unpacked(&t, &all[r * b..(r + 1) * b], at as *mut c_void, rn);
            }
        }
        Ok(())
    }

    fn MPI_Scatter / PMPI_Scatter(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H) [comm] {
        let c = intra(comm)?;
        let root = root_of(&c, root)?;
        let is_root = c.rank == root;
        let place = is_root && in_place(recvbuf);
        let (st_, rt_) = {
            let rt = rt()?;
            let s = if is_root { Some(committed(&rt, sendtype)?) } else { None };
            let r = if place { None } else { Some(committed(&rt, recvtype)?) };
            (s, r)
        };
        let n = c.size();
        if is_root {
            let t = st_.expect("root");
            let sn = count(sendcount)?;
            let b = sn * t.size;
            let blocks: Vec<Vec<u8>> = (0..n)
                .map(|r| packed(&t, (sendbuf as *const u8).wrapping_offset(r as isize * sn as isize * t.extent()) as *const c_void, sn))
                .collect();
            let sends: Vec<(usize, u32, &[u8])> = (0..n).filter(|&r| r != root).map(|r| (r, TAG_SCATTER, &blocks[r][..])).collect();
            exchange(&c, &sends, &mut [])?;
            if let Some(t2) = rt_ {
                let rn = count(recvcount)?;
                if rn * t2.size != b {
                    return Err(fail(class::TRUNCATE, "MPI_Scatter: send and receive block sizes differ at the root"));
                }
                unpacked(&t2, &blocks[root], recvbuf, rn);
            }
        } else {
            let t = rt_.expect("not root");
            let rn = count(recvcount)?;
            let mut v = vec![0u8; rn * t.size];
            exchange(&c, &[], &mut [(root, TAG_SCATTER, &mut v)])?;
            unpacked(&t, &v, recvbuf, rn);
        }
        Ok(())
    }

    fn MPI_Allgather / PMPI_Allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H) [comm] {
        let c = intra(comm)?;
        let (st_, rt_) = {
            let rt = rt()?;
            let s = if in_place(sendbuf) { None } else { Some(committed(&rt, sendtype)?) };
            (s, committed(&rt, recvtype)?)
        };
        let rn = count(recvcount)?;
        let mine = match &st_ {
            Some(t) => packed(t, sendbuf, count(sendcount)?),
            None => packed(&rt_, (recvbuf as *const u8).wrapping_offset(c.rank as isize * rn as isize * rt_.extent()) as *const c_void, rn),
        };
        if mine.len() != rn * rt_.size {
            return Err(fail(class::TRUNCATE, format!("MPI_Allgather: each rank receives {} bytes per rank, this rank sends {}", rn * rt_.size, mine.len())));
        }
        let mut all = vec![0u8; mine.len() * c.size()];
        allgather_bytes(&c, &mine, &mut all)?;
        let b = mine.len();
        for r in 0..c.size() {
            let at = (recvbuf as *mut u8).wrapping_offset(r as isize * rn as isize * rt_.extent());
            unpacked(&rt_, &all[r * b..(r + 1) * b], at as *mut c_void, rn);
        }
        Ok(())
    }

    fn MPI_Alltoall / PMPI_Alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H) [comm] {
        let c = intra(comm)?;
        let place = in_place(sendbuf);
        let (st_, rt_) = {
            let rt = rt()?;
            let s = if place { None } else { Some(committed(&rt, sendtype)?) };
            (s, committed(&rt, recvtype)?)
        };
        let n = c.size();
        let rn = count(recvcount)?;
        let blocks: Vec<Vec<u8>> = match &st_ {
            Some(t) => {
                let sn = count(sendcount)?;
                (0..n).map(|r| packed(t, (sendbuf as *const u8).wrapping_offset(r as isize * sn as isize * t.extent()) as *const c_void, sn)).collect()
            }
            None => (0..n).map(|r| packed(&rt_, (recvbuf as *const u8).wrapping_offset(r as isize * rn as isize * rt_.extent()) as *const c_void, rn)).collect(),
        };
        let b = rn * rt_.size;
        if blocks.iter().any(|x| x.len() != b) {
            return Err(fail(class::TRUNCATE, "MPI_Alltoall: send and receive block sizes differ"));
        }
        all_to_all_bytes(&c, TAG_ALLTOALL, &blocks, &vec![b; n], |r, data| {
            let at = (recvbuf as *mut u8).wrapping_offset(r as isize * rn as isize * rt_.extent());
            unpacked(&rt_, data, at as *mut c_void, rn);
        })
    }

    fn MPI_Op_create / PMPI_Op_create(user_fn: Option<UserFn>, commute: c_int, op: *mut H) {
        let f = user_fn.ok_or_else(|| fail(class::ARG, "the operation's function is a null pointer"))?;
        let mut rt = rt()?;
        // A freed operation's entry is reused.
        let h = handle(KIND_OP, crate::state::vacant(&mut rt.ops, UserOp { f, commute: commute != 0 }));
        // SAFETY: the caller's output argument.
        unsafe { put(op, h) }
    }

    fn MPI_Op_free / PMPI_Op_free(op: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(op)? };
        let mut rt = rt()?;
        let i = index(KIND_OP, h).ok_or_else(|| fail(class::OP, "only operations made by MPI_Op_create can be freed"))?;
        rt.ops.get_mut(i).and_then(|s| s.take()).ok_or_else(|| fail(class::OP, format!("{h:#x} is not an operation handle")))?;
        drop(rt);
        // SAFETY: the caller's in-out argument.
        unsafe { put(op, abi::OP_NULL) }
    }

    fn MPI_Op_commutative / PMPI_Op_commutative(op: H, commute: *mut c_int) {
        let c = match op_of(op)? {
            Op::Predefined(_) => true,
            Op::User(u) => u.commute,
        };
        // SAFETY: the caller's output argument.
        unsafe { put(commute, c as c_int) }
    }
}

/// Reduces every rank's `mine` (the sum of `counts` elements, packed) at rank 0 and scatters the
/// result: rank r gets `counts[r]` elements. Returns this rank's block (MPI_Reduce_scatter and
/// MPI_Reduce_scatter_block).
fn reduce_scatter(
    c: &CommCore,
    op: Op,
    t: &Dtype,
    th: H,
    counts: &[usize],
    mine: &[u8],
) -> R<Vec<u8>> {
    let total: usize = counts.iter().sum();
    let mut all = vec![0u8; mine.len()];
    reduce_bytes(c, 0, op, t, th, total, mine, &mut all)?;
    let mut block = vec![0u8; counts[c.rank] * t.size];
    if c.rank == 0 {
        let mut sends: Vec<(usize, u32, &[u8])> = Vec::with_capacity(counts.len());
        let mut off = counts[0] * t.size;
        for (r, &k) in counts.iter().enumerate().skip(1) {
            sends.push((r, TAG_SCATTERV, &all[off..off + k * t.size]));
            off += k * t.size;
        }
        exchange(c, &sends, &mut [])?;
        let b = block.len();
        block.copy_from_slice(&all[..b]);
    } else {
        exchange(c, &[], &mut [(0, TAG_SCATTERV, &mut block)])?;
    }
    Ok(block)
}

/// The address of element `i` of type `t` from `base`.
fn at(base: *const c_void, i: isize, t: &Dtype) -> *const c_void {
    (base as *const u8).wrapping_offset(i * t.extent()) as *const c_void
}

/// An array of `n` ints from the caller.
fn ints<'a>(p: *const c_int, n: usize) -> R<&'a [c_int]> {
    // SAFETY: MPI: the array holds one entry per rank of the communicator.
    unsafe { crate::err::array(p, n as c_int) }
}

fn nonneg(v: &[c_int], what: &str) -> R {
    if let Some(x) = v.iter().find(|&&x| x < 0) {
        return Err(fail(class::COUNT, format!("a {what} is negative ({x})")));
    }
    Ok(())
}

/// Every rank sends `blocks[r]` to rank r and receives `sizes[r]` bytes from it; what came
/// from r is handed to `put(r, bytes)`. The rank's own block is handed over without a message.
fn all_to_all_bytes(
    c: &CommCore,
    tag: u32,
    blocks: &[Vec<u8>],
    sizes: &[usize],
    mut put: impl FnMut(usize, &[u8]),
) -> R {
    let n = c.size();
    let mut got: Vec<Vec<u8>> = sizes.iter().map(|&b| vec![0u8; b]).collect();
    {
        let sends: Vec<(usize, u32, &[u8])> = (0..n)
            .filter(|&r| r != c.rank)
            .map(|r| (r, tag, &blocks[r][..]))
            .collect();
        let mut recvs: Vec<(usize, u32, &mut [u8])> = got
            .iter_mut()
            .enumerate()
            .filter(|(r, _)| *r != c.rank)
            .map(|(r, b)| (r, tag, &mut b[..]))
            .collect();
        exchange(c, &sends, &mut recvs)?;
    }
    for (r, b) in got.iter().enumerate() {
        if r == c.rank {
            put(r, &blocks[r]);
        } else {
            put(r, b);
        }
    }
    Ok(())
}

fn two_types(
    st: H,
    rt_: H,
    send_needed: bool,
    recv_needed: bool,
) -> R<(Option<TypeRef>, Option<TypeRef>)> {
    let rt = rt()?;
    let s = if send_needed {
        Some(committed(&rt, st)?)
    } else {
        None
    };
    let r = if recv_needed {
        Some(committed(&rt, rt_)?)
    } else {
        None
    };
    Ok((s, r))
}

crate::mpi! {
    fn MPI_Gatherv / PMPI_Gatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, root: c_int, comm: H) [comm] {
        let c = intra(comm)?;
        let root = root_of(&c, root)?;
        let is_root = c.rank == root;
        let place = is_root && in_place(sendbuf);
        let (st_, rt_) = two_types(sendtype, recvtype, !place, is_root)?;
        if !is_root {
            let t = st_.expect("sender");
            let mine = packed(&t, sendbuf, count(sendcount)?);
            return exchange(&c, &[(root, TAG_GATHERV, &mine)], &mut []);
        }
        let t = rt_.expect("root");
        let n = c.size();
        let (rc, ds) = (ints(recvcounts, n)?, ints(displs, n)?);
        nonneg(rc, "receive count")?;
        let mut got: Vec<Vec<u8>> = rc.iter().map(|&k| vec![0u8; k as usize * t.size]).collect();
        if let Some(s) = &st_ {
            let mine = packed(s, sendbuf, count(sendcount)?);
            if mine.len() != got[root].len() {
                return Err(fail(class::TRUNCATE, format!("MPI_Gatherv: the root sends itself {} bytes but expects {}", mine.len(), got[root].len())));
            }
            got[root] = mine;
        }
        {
            let mut recvs: Vec<(usize, u32, &mut [u8])> = got.iter_mut().enumerate().filter(|(r, _)| *r != root).map(|(r, b)| (r, TAG_GATHERV, &mut b[..])).collect();
            exchange(&c, &[], &mut recvs)?;
        }
        for r in 0..n {
            if r == root && place {
                continue;
            }
            unpacked(&t, &got[r], at(recvbuf, ds[r] as isize, &t) as *mut c_void, rc[r] as usize);
        }
        Ok(())
    }

    fn MPI_Scatterv / PMPI_Scatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H) [comm] {
        let c = intra(comm)?;
        let root = root_of(&c, root)?;
        let is_root = c.rank == root;
        let place = is_root && in_place(recvbuf);
        let (st_, rt_) = two_types(sendtype, recvtype, is_root, !place)?;
        if !is_root {
            let t = rt_.expect("receiver");
            let rn = count(recvcount)?;
            let mut v = vec![0u8; rn * t.size];
            exchange(&c, &[], &mut [(root, TAG_SCATTERV, &mut v)])?;
            unpacked(&t, &v, recvbuf, rn);
            return Ok(());
        }
        let t = st_.expect("root");
        let n = c.size();
        let (sc, ds) = (ints(sendcounts, n)?, ints(displs, n)?);
        nonneg(sc, "send count")?;
        let blocks: Vec<Vec<u8>> = (0..n).map(|r| packed(&t, at(sendbuf, ds[r] as isize, &t), sc[r] as usize)).collect();
        let sends: Vec<(usize, u32, &[u8])> = (0..n).filter(|&r| r != root).map(|r| (r, TAG_SCATTERV, &blocks[r][..])).collect();
        exchange(&c, &sends, &mut [])?;
        if let Some(r) = rt_ {
            let rn = count(recvcount)?;
            if rn * r.size != blocks[root].len() {
                return Err(fail(class::TRUNCATE, "MPI_Scatterv: the root's own block and its receive size differ"));
            }
            unpacked(&r, &blocks[root], recvbuf, rn);
        }
        Ok(())
    }

    fn MPI_Allgatherv / PMPI_Allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, comm: H) [comm] {
        let c = intra(comm)?;
        let place = in_place(sendbuf);
        let (st_, rt_) = two_types(sendtype, recvtype, !place, true)?;
        let t = rt_.expect("receiver");
        let n = c.size();
        let (rc, ds) = (ints(recvcounts, n)?, ints(displs, n)?);
        nonneg(rc, "receive count")?;
        let mine = match &st_ {
            Some(s) => packed(s, sendbuf, count(sendcount)?),
            None => packed(&t, at(recvbuf, ds[c.rank] as isize, &t), rc[c.rank] as usize),
        };
        if mine.len() != rc[c.rank] as usize * t.size {
            return Err(fail(class::TRUNCATE, "MPI_Allgatherv: this rank's block and its receive count differ"));
        }
        let blocks: Vec<Vec<u8>> = vec![mine; n];
        let sizes: Vec<usize> = rc.iter().map(|&k| k as usize * t.size).collect();
        all_to_all_bytes(&c, TAG_ALLGATHERV, &blocks, &sizes, |r, b| {
            unpacked(&t, b, at(recvbuf, ds[r] as isize, &t) as *mut c_void, rc[r] as usize);
        })
    }

    fn MPI_Alltoallv / PMPI_Alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: H, comm: H) [comm] {
        let c = intra(comm)?;
        let place = in_place(sendbuf);
        let (st_, rt_) = two_types(sendtype, recvtype, !place, true)?;
        let t = rt_.expect("receiver");
        let n = c.size();
        let (rc, rd) = (ints(recvcounts, n)?, ints(rdispls, n)?);
        nonneg(rc, "receive count")?;
        let blocks: Vec<Vec<u8>> = match &st_ {
            Some(s) => {
                let (sc, sd) = (ints(sendcounts, n)?, ints(sdispls, n)?);
                nonneg(sc, "send count")?;
                (0..n).map(|r| packed(s, at(sendbuf, sd[r] as isize, s), sc[r] as usize)).collect()
            }
            // MPI_IN_PLACE: what goes to r is where r's data will land.
            None => (0..n).map(|r| packed(&t, at(recvbuf, rd[r] as isize, &t), rc[r] as usize)).collect(),
        };
        let sizes: Vec<usize> = rc.iter().map(|&k| k as usize * t.size).collect();
        all_to_all_bytes(&c, TAG_ALLTOALLV, &blocks, &sizes, |r, b| {
            unpacked(&t, b, at(recvbuf, rd[r] as isize, &t) as *mut c_void, rc[r] as usize);
        })
    }

    fn MPI_Alltoallw / PMPI_Alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const H, comm: H) [comm] {
        let c = intra(comm)?;
        let n = c.size();
        let place = in_place(sendbuf);
        let (rc, rd) = (ints(recvcounts, n)?, ints(rdispls, n)?);
        nonneg(rc, "receive count")?;
        // SAFETY: MPI: one datatype per rank.
        let rts = unsafe { crate::err::array(recvtypes, n as c_int)? };
        let rtypes: Vec<TypeRef> = { let rt = rt()?; rts.iter().map(|&h| committed(&rt, h)).collect::<R<_>>()? };
        // Displacements of alltoallw are in bytes.
        let byte_at = |base: *const c_void, d: c_int| (base as *const u8).wrapping_offset(d as isize) as *const c_void;
        let blocks: Vec<Vec<u8>> = if place {
            (0..n).map(|r| packed(&rtypes[r], byte_at(recvbuf, rd[r]), rc[r] as usize)).collect()
        } else {
            let (sc, sd) = (ints(sendcounts, n)?, ints(sdispls, n)?);
            nonneg(sc, "send count")?;
            // SAFETY: MPI: one datatype per rank.
            let sts = unsafe { crate::err::array(sendtypes, n as c_int)? };
            let stypes: Vec<TypeRef> = { let rt = rt()?; sts.iter().map(|&h| committed(&rt, h)).collect::<R<_>>()? };
            (0..n).map(|r| packed(&stypes[r], byte_at(sendbuf, sd[r]), sc[r] as usize)).collect()
        };
        let sizes: Vec<usize> = (0..n).map(|r| rc[r] as usize * rtypes[r].size).collect();
        all_to_all_bytes(&c, TAG_ALLTOALLV, &blocks, &sizes, |r, b| {
            unpacked(&rtypes[r], b, byte_at(recvbuf, rd[r]) as *mut c_void, rc[r] as usize);
        })
    }

    fn MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: H, op: H, comm: H) [comm] {
        let (c, t) = args(comm, datatype)?;
        let k = count(recvcount)?;
        let n = c.size();
        let op = op_of(op)?;
        let src = if in_place(sendbuf) { recvbuf as *const c_void } else { sendbuf };
        let mine = packed(&t, src, k * n);
        let block = reduce_scatter(&c, op, &t, datatype, &vec![k; n], &mine)?;
        unpacked(&t, &block, recvbuf, k);
        Ok(())
    }

    fn MPI_Reduce_scatter / PMPI_Reduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: H, op: H, comm: H) [comm] {
        let (c, t) = args(comm, datatype)?;
        let n = c.size();
        let rc = ints(recvcounts, n)?;
        nonneg(rc, "receive count")?;
        let total: usize = rc.iter().map(|&k| k as usize).sum();
        let op = op_of(op)?;
        let src = if in_place(sendbuf) { recvbuf as *const c_void } else { sendbuf };
        let mine = packed(&t, src, total);
        let counts: Vec<usize> = rc.iter().map(|&k| k as usize).collect();
        let block = reduce_scatter(&c, op, &t, datatype, &counts, &mine)?;
        unpacked(&t, &block, recvbuf, rc[c.rank] as usize);
        Ok(())
    }

    fn MPI_Scan / PMPI_Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H) [comm] {
        let (c, t) = args(comm, datatype)?;
        let k = count(count_)?;
        let op = op_of(op)?;
        let src = if in_place(sendbuf) { recvbuf as *const c_void } else { sendbuf };
        let mut acc = packed(&t, src, k);
        // A chain in rank order: prefix(r) = prefix(r - 1) op x_r.
        if c.rank > 0 {
            let mut prev = vec![0u8; acc.len()];
            exchange(&c, &[], &mut [(c.rank - 1, TAG_SCAN, &mut prev)])?;
            apply(op, &t, datatype, k, &prev, &mut acc)?;
        }
        if c.rank + 1 < c.size() {
            exchange(&c, &[(c.rank + 1, TAG_SCAN, &acc)], &mut [])?;
        }
        unpacked(&t, &acc, recvbuf, k);
        Ok(())
    }

    fn MPI_Exscan / PMPI_Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H) [comm] {
        let (c, t) = args(comm, datatype)?;
        let k = count(count_)?;
        let op = op_of(op)?;
        let src = if in_place(sendbuf) { recvbuf as *const c_void } else { sendbuf };
        let mine = packed(&t, src, k);
        // Rank r receives x_0 op ... op x_{r-1}; rank 0's receive buffer is left as it is.
        let mut out = mine.clone();
        if c.rank > 0 {
            let mut prev = vec![0u8; mine.len()];
            exchange(&c, &[], &mut [(c.rank - 1, TAG_EXSCAN, &mut prev)])?;
            out.copy_from_slice(&mine);
            apply(op, &t, datatype, k, &prev, &mut out)?;
            unpacked(&t, &prev, recvbuf, k);
        }
        if c.rank + 1 < c.size() {
            exchange(&c, &[(c.rank + 1, TAG_EXSCAN, &out)], &mut [])?;
        }
        Ok(())
    }

    fn MPI_Reduce_local / PMPI_Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count_: c_int, datatype: H, op: H) {
        let t = { let rt = rt()?; committed(&rt, datatype)? };
        let k = count(count_)?;
        let op = op_of(op)?;
        let a = packed(&t, inbuf, k);
        let mut b = packed(&t, inoutbuf, k);
        apply(op, &t, datatype, k, &a, &mut b)?;
        unpacked(&t, &b, inoutbuf, k);
        Ok(())
    }
}
