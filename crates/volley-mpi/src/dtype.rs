//! Datatypes: the predefined ones, the constructors, and packing.
//!
//! A datatype is kept flattened: the byte blocks (offset, length) of one element, in typemap
//! order, adjacent blocks merged, with its bounds (lb, ub: the extent) and true bounds. A
//! contiguous type (one block from 0 to its extent) is sent straight from the caller's memory; any
//! other is packed (and unpacked on receipt) block by block.

use crate::abi::{self, class, Aint, Count, H};
use crate::err::{array, fail, get, put, put_str, R};
use crate::state::{self, handle, index, rt, KIND_TYPE};
use std::ffi::{c_char, c_void};
use std::os::raw::c_int;
use std::sync::{Arc, LazyLock};

/// The element a homogeneous datatype is made of, for reductions and MPI_Get_elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basic {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
    LongDouble,
    Bool,
    Byte,
    C32,
    C64,
    LongDoubleComplex,
    /// The value-index pairs of MINLOC and MAXLOC: (value kind, offset of the int).
    FloatInt,
    DoubleInt,
    LongInt,
    TwoInt,
    ShortInt,
    LongDoubleInt,
    /// Fortran's MPI_2REAL and MPI_2DOUBLE_PRECISION: the index is of the value's type.
    TwoF32,
    TwoF64,
    /// MPI_LB and MPI_UB: no data.
    Marker,
}

#[derive(Clone, Debug)]
pub struct Dtype {
    /// Bytes of data in one element.
    pub size: usize,
    pub lb: isize,
    pub ub: isize,
    pub true_lb: isize,
    pub true_ub: isize,
    /// (offset, length) of the data of one element.
    pub blocks: Vec<(isize, usize)>,
    /// One block from 0 to the extent: count elements are count * size bytes in a row.
    pub contig: bool,
    /// The one predefined type it is made of, if any, and how many of them one element holds.
    pub basic: Option<Basic>,
    pub nbasic: usize,
    /// The sizes of the basic elements of one element, in typemap order, as (size, how many in
    /// a row); None when that list would be long (MPI_Get_elements then counts whole basic
    /// elements of equal size only).
    pub runs: Option<Vec<(usize, usize)>>,
    pub name: String,
    pub combiner: c_int,
    pub ints: Vec<c_int>,
    pub aints: Vec<Aint>,
    pub types: Vec<H>,
    /// The made datatypes among `types`, held: the program may free their handles, and
    /// MPI_Type_get_contents hands out new handles to them.
    pub parts: Vec<Option<Arc<Dtype>>>,
    pub committed: bool,
    /// Whether MPI_LB / MPI_UB markers fixed the bounds (they then stay, MPI-1's sticky rule).
    pub lb_marked: bool,
    pub ub_marked: bool,
    /// The alignment C gives a member of this type: its basic type's, or for a derived type the
    /// strictest of its components' (used for a struct's extent, MPI-3.1 4.1.6).
    pub align: usize,
}

/// Where a piecewise pack or unpack stands (see `Dtype::walk`): element, block in it, bytes of
/// the block done, and the offset in the packed form.
#[derive(Clone, Debug, Default)]
pub struct Walk {
    elem: usize,
    block: usize,
    within: usize,
    off: usize,
    /// Every `MARK_EVERY`-th block of one element with the packed offset it starts at, made
    /// the first time a piece is asked for out of order in an element of many blocks (the
    /// network retransmits, and its packets arrive out of order): a seek then costs a binary
    /// search and at most `MARK_EVERY` blocks, not a walk from the element's first block.
    marks: Vec<(usize, usize)>,
}

/// Blocks between two of a walk's marks (see `Walk::marks`).
const MARK_EVERY: usize = 1024;

impl Dtype {
    pub fn extent(&self) -> isize {
        self.ub - self.lb
    }

    fn named(name: &str, basic: Basic, parts: &[(isize, usize)], extent: isize) -> Dtype {
        let size = parts.iter().map(|p| p.1).sum();
        let mut blocks: Vec<(isize, usize)> = Vec::new();
        for &(o, l) in parts {
            push_block(&mut blocks, o, l);
        }
        let contig = blocks.len() == 1 && blocks[0].0 == 0 && blocks[0].1 as isize == extent;
        Dtype {
            size,
            lb: 0,
            ub: extent,
            true_lb: 0,
            true_ub: parts.last().map(|p| p.0 + p.1 as isize).unwrap_or(0),
            blocks,
            contig: contig || (size == 0 && extent == 0),
            basic: Some(basic),
            nbasic: 1,
            runs: Some(parts.iter().filter(|p| p.1 > 0).map(|p| (p.1, 1)).collect()),
            name: name.to_string(),
            combiner: abi::COMBINER_NAMED,
            ints: vec![],
            aints: vec![],
            types: vec![],
            parts: vec![],
            committed: true,
            lb_marked: false,
            ub_marked: false,
            align: basic_alignment(basic),
        }
    }

    /// Copies `count` elements at `src` (the caller's memory) into `out`, packed.
    ///
    /// # Safety
    /// `src` holds `count` elements of this type.
    pub unsafe fn pack(&self, src: *const u8, count: usize, out: &mut [u8]) {
        if self.contig {
            // One run: count * size bytes in a row (one copy, not one per element).
            let n = (count * self.size).min(out.len());
            // SAFETY: a contiguous type's count elements are count * size bytes at src.
            unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), n) };
            return;
        }
        let mut at = 0;
        for i in 0..count {
            let base = src.wrapping_offset(i as isize * self.extent());
            for &(o, l) in &self.blocks {
                // SAFETY: the block lies in element i, which the caller's contract covers.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        base.wrapping_offset(o),
                        out[at..].as_mut_ptr(),
                        l,
                    )
                };
                at += l;
            }
        }
    }

    /// Visits packed bytes `off .. off + n` of `count` elements at `base`: `f(address, position
    /// in the piece, length)` for each contiguous run. `w` remembers where the last piece ended,
    /// so pieces asked for in order cost what they copy (another order starts over from the
    /// first element).
    fn walk(
        &self,
        base: *mut u8,
        count: usize,
        w: &mut Walk,
        off: usize,
        n: usize,
        mut f: impl FnMut(*mut u8, usize, usize),
    ) {
        if self.blocks.is_empty() {
            return;
        }
        if off != w.off {
            let marks = std::mem::take(&mut w.marks);
            *w = Walk {
                marks,
                ..Walk::default()
            };
            self.skip(count, w, off);
        }
        let mut done = 0;
        while done < n && w.elem < count {
            let (o, l) = self.blocks[w.block];
            let take = (l - w.within).min(n - done);
            if take > 0 {
                let at = (w.elem as isize * self.extent()) + o + w.within as isize;
                f(base.wrapping_offset(at), done, take);
            }
            done += take;
            self.advance(w, take);
        }
    }

    /// Moves `w` (at the start) forward to packed offset `off`: whole elements at once, then
    /// block by block (a network retransmission asks for a piece far into a long message).
    fn skip(&self, count: usize, w: &mut Walk, off: usize) {
        if self.size > 0 && w.block == 0 && w.within == 0 {
            let k = ((off - w.off.min(off)) / self.size).min(count - w.elem.min(count));
            w.elem += k;
            w.off += k * self.size;
            let rem = off - w.off.min(off);
            if rem > 0 && w.elem < count && self.blocks.len() > MARK_EVERY {
                if w.marks.is_empty() {
                    let mut at = 0;
                    for (i, &(_, l)) in self.blocks.iter().enumerate() {
                        if i % MARK_EVERY == 0 {
                            w.marks.push((i, at));
                        }
                        at += l;
                    }
                }
                // The last mark at or before `rem` (the first one is block 0, at 0).
                let j = w.marks.partition_point(|&(_, at)| at <= rem) - 1;
                let (block, at) = w.marks[j];
                w.block = block;
                w.off += at;
            }
        }
        while w.off < off && w.elem < count {
            let take = (self.blocks[w.block].1 - w.within).min(off - w.off);
            self.advance(w, take);
        }
    }

    /// Moves `w` on by `take` bytes of its current block (at most what is left of it), to the
    /// next block or element when the block is done.
    #[inline]
    fn advance(&self, w: &mut Walk, take: usize) {
        w.within += take;
        w.off += take;
        if w.within == self.blocks[w.block].1 {
            w.within = 0;
            w.block += 1;
            if w.block == self.blocks.len() {
                w.block = 0;
                w.elem += 1;
            }
        }
    }

    /// Packs bytes `off .. off + out.len()` of the packed form of `count` elements at `src`.
    ///
    /// # Safety
    /// `src` holds `count` elements of this type.
    pub unsafe fn pack_piece(
        &self,
        src: *const u8,
        count: usize,
        w: &mut Walk,
        off: usize,
        out: &mut [u8],
    ) {
        let n = out.len();
        let dst = out.as_mut_ptr();
        self.walk(src as *mut u8, count, w, off, n, |p, at, len| {
            // SAFETY: p runs `len` bytes inside one element's block (the caller's contract);
            // at + len <= out.len().
            unsafe { std::ptr::copy_nonoverlapping(p as *const u8, dst.add(at), len) }
        });
    }

    /// Unpacks `data`, bytes `off ..` of the packed form, into `count` elements at `dst`.
    ///
    /// # Safety
    /// `dst` holds `count` elements of this type.
    pub unsafe fn unpack_piece(
        &self,
        data: &[u8],
        dst: *mut u8,
        count: usize,
        w: &mut Walk,
        off: usize,
    ) {
        let src = data.as_ptr();
        self.walk(dst, count, w, off, data.len(), |p, at, len| {
            // SAFETY: as in pack_piece, the other way.
            unsafe { std::ptr::copy_nonoverlapping(src.add(at), p, len) }
        });
    }

    /// Unpacks `data` (packed elements, possibly fewer bytes than `count` elements hold) into
    /// `dst`; stops where `data` ends.
    ///
    /// # Safety
    /// `dst` holds `count` elements of this type.
    pub unsafe fn unpack(&self, data: &[u8], dst: *mut u8, count: usize) {
        if self.contig {
            let n = data.len().min(count * self.size);
            // SAFETY: dst holds count elements, count * size bytes in a row.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, n) };
            return;
        }
        let mut at = 0;
        'outer: for i in 0..count {
            let base = dst.wrapping_offset(i as isize * self.extent());
            for &(o, l) in &self.blocks {
                if at >= data.len() {
                    break 'outer;
                }
                let n = l.min(data.len() - at);
                // SAFETY: the block lies in element i, which the caller's contract covers.
                unsafe {
                    std::ptr::copy_nonoverlapping(data[at..].as_ptr(), base.wrapping_offset(o), n)
                };
                at += n;
            }
        }
    }

    /// How many basic elements `bytes` of packed data hold (MPI_Get_elements), if whole.
    pub fn elements_in(&self, bytes: usize) -> Option<usize> {
        if self.size == 0 {
            return Some(0);
        }
        let whole = bytes / self.size;
        let mut rest = bytes % self.size;
        let mut n = whole * self.nbasic;
        if let (true, Some(runs)) = (rest > 0, &self.runs) {
            // Part of an element: walk its basic elements.
            for &(s, c) in runs {
                if rest >= s * c {
                    n += c;
                    rest -= s * c;
                } else {
                    n += rest / s;
                    rest %= s;
                    break;
                }
            }
            return (rest == 0).then_some(n);
        }
        if rest > 0 {
            // Part of an element: count the basic elements it covers.
            let b = self.basic_size()?;
            if !rest.is_multiple_of(b) {
                return None;
            }
            n += rest / b;
        }
        Some(n)
    }

    fn basic_size(&self) -> Option<usize> {
        (self.nbasic > 0 && self.size.is_multiple_of(self.nbasic)).then(|| self.size / self.nbasic)
    }
}

/// Longest basic-element list a datatype keeps for MPI_Get_elements.
const MAX_RUNS: usize = 4096;

fn push_run(runs: &mut Vec<(usize, usize)>, size: usize, count: usize) {
    if count == 0 {
        return;
    }
    match runs.last_mut() {
        Some(last) if last.0 == size => last.1 += count,
        _ => runs.push((size, count)),
    }
}

fn push_block(blocks: &mut Vec<(isize, usize)>, o: isize, l: usize) {
    if l == 0 {
        return;
    }
    if let Some(last) = blocks.last_mut() {
        if last.0 + last.1 as isize == o {
            last.1 += l;
            return;
        }
    }
    blocks.push((o, l));
}

/// The predefined datatypes, by handle - 0x200.
static PREDEFINED: LazyLock<Vec<Option<Dtype>>> = LazyLock::new(|| {
    use Basic::*;
    let mut t: Vec<Option<Dtype>> = vec![None; abi::DATATYPE_END - abi::DATATYPE_NULL];
    let mut one = |h: usize, name: &str, b: Basic, size: usize| {
        t[h - 0x200] = Some(Dtype::named(name, b, &[(0, size)], size as isize));
    };
    one(0x201, "MPI_AINT", I64, 8);
    one(0x202, "MPI_COUNT", I64, 8);
    one(0x203, "MPI_OFFSET", I64, 8);
    one(0x207, "MPI_PACKED", Byte, 1);
    one(0x208, "MPI_SHORT", I16, 2);
    one(0x209, "MPI_INT", I32, 4);
    one(0x20a, "MPI_LONG", I64, 8);
    // MPI_LONG_LONG and MPI_LONG_LONG_INT are one handle (as MPI_C_COMPLEX and
    // MPI_C_FLOAT_COMPLEX are): its name is the one both readings accept, as in MPICH.
    one(0x20b, "MPI_LONG_LONG_INT", I64, 8);
    one(0x20c, "MPI_UNSIGNED_SHORT", U16, 2);
    one(0x20d, "MPI_UNSIGNED", U32, 4);
    one(0x20e, "MPI_UNSIGNED_LONG", U64, 8);
    one(0x20f, "MPI_UNSIGNED_LONG_LONG", U64, 8);
    one(0x210, "MPI_FLOAT", F32, 4);
    one(0x212, "MPI_C_COMPLEX", C32, 8);
    one(0x213, "MPI_CXX_FLOAT_COMPLEX", C32, 8);
    one(0x214, "MPI_DOUBLE", F64, 8);
    one(0x216, "MPI_C_DOUBLE_COMPLEX", C64, 16);
    one(0x217, "MPI_CXX_DOUBLE_COMPLEX", C64, 16);
    one(0x220, "MPI_LONG_DOUBLE", LongDouble, 16);
    one(0x224, "MPI_C_LONG_DOUBLE_COMPLEX", LongDoubleComplex, 32);
    one(0x225, "MPI_CXX_LONG_DOUBLE_COMPLEX", LongDoubleComplex, 32);
    one(0x238, "MPI_C_BOOL", Bool, 1);
    one(0x239, "MPI_CXX_BOOL", Bool, 1);
    one(0x23c, "MPI_WCHAR", I32, 4);
    one(0x240, "MPI_INT8_T", I8, 1);
    one(0x241, "MPI_UINT8_T", U8, 1);
    one(0x243, "MPI_CHAR", I8, 1);
    one(0x244, "MPI_SIGNED_CHAR", I8, 1);
    one(0x245, "MPI_UNSIGNED_CHAR", U8, 1);
    one(0x247, "MPI_BYTE", Byte, 1);
    one(0x248, "MPI_INT16_T", I16, 2);
    one(0x249, "MPI_UINT16_T", U16, 2);
    one(0x250, "MPI_INT32_T", I32, 4);
    one(0x251, "MPI_UINT32_T", U32, 4);
    one(0x258, "MPI_INT64_T", I64, 8);
    one(0x259, "MPI_UINT64_T", U64, 8);
    // The pair types, laid out as C lays out struct { value; int; }.
    let mut pair = |h: usize, name: &str, b: Basic, vsize: usize, ioff: isize, extent: isize| {
        let mut d = Dtype::named(name, b, &[(0, vsize), (ioff, 4)], extent);
        d.nbasic = 2;
        t[h - 0x200] = Some(d);
    };
    pair(0x228, "MPI_FLOAT_INT", FloatInt, 4, 4, 8);
    pair(0x229, "MPI_DOUBLE_INT", DoubleInt, 8, 8, 16);
    pair(0x22a, "MPI_LONG_INT", LongInt, 8, 8, 16);
    pair(0x22b, "MPI_2INT", TwoInt, 4, 4, 8);
    pair(0x22c, "MPI_SHORT_INT", ShortInt, 2, 4, 8);
    pair(0x22d, "MPI_LONG_DOUBLE_INT", LongDoubleInt, 16, 16, 32);
    // Fortran's named types, usable from C (MPI-3.1 section 3.2.2 and the ABI's handles),
    // with gfortran's default kinds: INTEGER, REAL and LOGICAL of 4 bytes, DOUBLE PRECISION 8.
    // LOGICAL is 4 bytes that are 0 (.FALSE.) or not.
    for (h, name, b, size) in [
        (0x218, "MPI_LOGICAL", I32, 4),
        (0x219, "MPI_INTEGER", I32, 4),
        (0x21a, "MPI_REAL", F32, 4),
        (0x21b, "MPI_COMPLEX", C32, 8),
        (0x21c, "MPI_DOUBLE_PRECISION", F64, 8),
        (0x21d, "MPI_DOUBLE_COMPLEX", C64, 16),
        (0x2c1, "MPI_INTEGER1", I8, 1),
        (0x2c3, "MPI_CHARACTER", I8, 1),
        (0x2c9, "MPI_INTEGER2", I16, 2),
        (0x2d1, "MPI_INTEGER4", I32, 4),
        (0x2d2, "MPI_REAL4", F32, 4),
        (0x2d9, "MPI_INTEGER8", I64, 8),
        (0x2da, "MPI_REAL8", F64, 8),
        (0x2db, "MPI_COMPLEX8", C32, 8),
        (0x2e3, "MPI_COMPLEX16", C64, 16),
    ] {
        t[h - 0x200] = Some(Dtype::named(name, b, &[(0, size)], size as isize));
    }
    // Fortran's pairs for MINLOC and MAXLOC: the index has the value's type.
    for (h, name, b, v) in [
        (0x230, "MPI_2REAL", TwoF32, 4usize),
        (0x231, "MPI_2DOUBLE_PRECISION", TwoF64, 8),
        (0x232, "MPI_2INTEGER", TwoInt, 4),
    ] {
        let mut d = Dtype::named(name, b, &[(0, v), (v as isize, v)], 2 * v as isize);
        d.nbasic = 2;
        t[h - 0x200] = Some(d);
    }
    for (h, name) in [(0x2f0, "MPI_LB"), (0x2f1, "MPI_UB")] {
        let mut d = Dtype::named(name, Marker, &[], 0);
        d.nbasic = 0;
        t[h - 0x200] = Some(d);
    }
    t
});

/// The sizes of the predefined types whose data is one block of their size (every single
/// value type; not the pair types), by handle - DATATYPE_NULL; 0 for any other handle. The
/// point-to-point fast paths read this instead of the lazily built table above (checked
/// against it in a test).
static CONTIG_SIZE: [u8; abi::DATATYPE_END - abi::DATATYPE_NULL] = {
    let mut t = [0u8; abi::DATATYPE_END - abi::DATATYPE_NULL];
    let sizes: &[(usize, u8)] = &[
        (0x201, 8),
        (0x202, 8),
        (0x203, 8),
        (0x207, 1),
        (0x208, 2),
        (0x209, 4),
        (0x20a, 8),
        (0x20b, 8),
        (0x20c, 2),
        (0x20d, 4),
        (0x20e, 8),
        (0x20f, 8),
        (0x210, 4),
        (0x212, 8),
        (0x213, 8),
        (0x214, 8),
        (0x216, 16),
        (0x217, 16),
        (0x220, 16),
        (0x224, 32),
        (0x225, 32),
        (0x238, 1),
        (0x239, 1),
        (0x23c, 4),
        (0x240, 1),
        (0x241, 1),
        (0x243, 1),
        (0x244, 1),
        (0x245, 1),
        (0x247, 1),
        (0x248, 2),
        (0x249, 2),
        (0x250, 4),
        (0x251, 4),
        (0x258, 8),
        (0x259, 8),
        (0x218, 4),
        (0x219, 4),
        (0x21a, 4),
        (0x21b, 8),
        (0x21c, 8),
        (0x21d, 16),
        (0x2c1, 1),
        (0x2c3, 1),
        (0x2c9, 2),
        (0x2d1, 4),
        (0x2d2, 4),
        (0x2d9, 8),
        (0x2da, 8),
        (0x2db, 8),
        (0x2e3, 16),
    ];
    let mut i = 0;
    while i < sizes.len() {
        t[sizes[i].0 - abi::DATATYPE_NULL] = sizes[i].1;
        i += 1;
    }
    t
};

/// The size of datatype `h` if it is a predefined type whose data is one block of that size
/// (see `CONTIG_SIZE`): one table look, no state. None: ask `committed`.
#[inline(always)]
pub fn predefined_contig_size(h: H) -> Option<usize> {
    match CONTIG_SIZE.get(h.wrapping_sub(abi::DATATYPE_NULL)) {
        Some(&s) if s != 0 => Some(s as usize),
        _ => None,
    }
}

/// A datatype the program named: predefined (static) or made by a constructor.
#[derive(Clone)]
pub enum TypeRef {
    Static(&'static Dtype),
    Made(Arc<Dtype>),
}

impl std::ops::Deref for TypeRef {
    type Target = Dtype;
    fn deref(&self) -> &Dtype {
        match self {
            TypeRef::Static(d) => d,
            TypeRef::Made(d) => d,
        }
    }
}

/// The indices of dimension `d` (of `g` elements, distributed `dist` with argument `darg` over
/// `p` processes) that the process at coordinate `c` owns, as runs (start, length) in increasing
/// order (MPI-3.1 section 4.1.4: a block distribution gives each process one block of darg
/// elements, by default ceil(g / p); a cyclic one deals blocks of darg, by default 1, round the
/// processes).
fn darray_runs(
    d: usize,
    g: c_int,
    dist: c_int,
    darg: c_int,
    p: c_int,
    c: c_int,
) -> R<Vec<(i32, i32)>> {
    if g < 1 {
        return Err(fail(
            class::ARG,
            format!("dimension {d}: global size {g} is not positive"),
        ));
    }
    if darg != abi::DISTRIBUTE_DFLT_DARG && darg < 1 {
        return Err(fail(class::ARG, format!("dimension {d}: distribution argument {darg} is neither positive nor MPI_DISTRIBUTE_DFLT_DARG")));
    }
    match dist {
        abi::DISTRIBUTE_NONE => {
            if p != 1 {
                return Err(fail(class::ARG, format!("dimension {d} is not distributed (MPI_DISTRIBUTE_NONE) but has {p} processes")));
            }
            Ok(vec![(0, g)])
        }
        abi::DISTRIBUTE_BLOCK => {
            let b = if darg == abi::DISTRIBUTE_DFLT_DARG { (g + p - 1) / p } else { darg };
            if (b as i64) * (p as i64) < g as i64 {
                return Err(fail(class::ARG, format!("dimension {d}: blocks of {b} on {p} processes do not cover {g} elements")));
            }
            let start = c * b;
            let n = (g - start).min(b);
            Ok(if n > 0 { vec![(start, n)] } else { vec![] })
        }
        abi::DISTRIBUTE_CYCLIC => {
            let b = if darg == abi::DISTRIBUTE_DFLT_DARG { 1 } else { darg };
            let mut runs = Vec::new();
            let mut a = c as i64 * b as i64;
            while a < g as i64 {
                runs.push((a as i32, (g as i64 - a).min(b as i64) as i32));
                a += p as i64 * b as i64;
            }
            Ok(runs)
        }
        other => Err(fail(class::ARG, format!("dimension {d}: distribution {other} is none of MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC and MPI_DISTRIBUTE_NONE"))),
    }
}

/// Predefined datatype `h`.
pub fn predefined(h: H) -> R<&'static Dtype> {
    if (abi::DATATYPE_NULL..abi::DATATYPE_END).contains(&h) {
        if let Some(d) = PREDEFINED[h - abi::DATATYPE_NULL].as_ref() {
            return Ok(d);
        }
    }
    Err(bad_type(h))
}

/// The attributes set on datatype `h`: (keyval, value).
fn type_attrs_of(h: H) -> R<Vec<(c_int, usize)>> {
    Ok(rt()?
        .type_attrs
        .iter()
        .filter(|a| a.0 == h)
        .map(|a| (a.1, a.2))
        .collect())
}

/// The optional predefined types volley has a handle for but does not carry: their names and
/// what they would be.
fn lacking(h: H) -> Option<(&'static str, &'static str)> {
    match h {
        0x2ca => Some(("MPI_REAL2", "a 2-byte real")),
        0x2d3 => Some(("MPI_COMPLEX4", "two 2-byte reals")),
        0x2e1 => Some(("MPI_INTEGER16", "a 16-byte integer")),
        0x2e2 => Some(("MPI_REAL16", "a 16-byte real")),
        0x2eb => Some(("MPI_COMPLEX32", "two 16-byte reals")),
        _ => None,
    }
}

fn bad_type(h: H) -> crate::err::Fail {
    if h == abi::DATATYPE_NULL {
        return fail(class::TYPE, "the datatype is MPI_DATATYPE_NULL");
    }
    if let Some((name, what)) = lacking(h) {
        return fail(
            class::TYPE,
            format!("{name} ({what}) is not supported by volley: use a type of another size"),
        );
    }
    fail(
        class::TYPE,
        format!("{h:#x} is not a datatype handle (freed, or never made)"),
    )
}

/// The datatype `h` names (committed or not).
#[inline]
pub fn lookup(rt: &state::Rt, h: H) -> R<TypeRef> {
    if (abi::DATATYPE_NULL..abi::DATATYPE_END).contains(&h) {
        return PREDEFINED[h - abi::DATATYPE_NULL]
            .as_ref()
            .map(TypeRef::Static)
            .ok_or_else(|| bad_type(h));
    }
    index(KIND_TYPE, h)
        .and_then(|i| rt.types.get(i).cloned().flatten())
        .map(TypeRef::Made)
        .ok_or_else(|| bad_type(h))
}

/// The size of datatype `h`. A predefined type's is known without the face's state, so that a
/// generalized request's query function (which MPI runs inside a wait, with the state held) can
/// call MPI_Status_set_elements on one.
pub fn size_of(h: H) -> R<usize> {
    if (abi::DATATYPE_NULL..abi::DATATYPE_END).contains(&h) {
        return PREDEFINED[h - abi::DATATYPE_NULL]
            .as_ref()
            .map(|t| t.size)
            .ok_or_else(|| bad_type(h));
    }
    Ok(lookup(&*state::rt()?, h)?.size)
}

/// The datatype `h` names, for communication: it must be committed.
#[inline]
pub fn committed(rt: &state::Rt, h: H) -> R<TypeRef> {
    let t = lookup(rt, h)?;
    if !t.committed {
        return Err(fail(
            class::TYPE,
            format!(
                "datatype {} is not committed: call MPI_Type_commit before communicating with it",
                t.name_or(h)
            ),
        ));
    }
    Ok(t)
}

impl Dtype {
    fn name_or(&self, h: H) -> String {
        if self.name.is_empty() {
            format!("{h:#x}")
        } else {
            self.name.clone()
        }
    }
}

/// A part of a new type: `count` elements of `t` from displacement `disp` (bytes), spaced by
/// `t`'s extent.
struct Part<'a> {
    disp: isize,
    count: usize,
    t: &'a Dtype,
}

/// Builds a type from its parts, in typemap order.
fn build(parts: &[Part], combiner: c_int) -> Dtype {
    let mut blocks = Vec::new();
    let (mut lb, mut ub) = (isize::MAX, isize::MIN);
    let (mut tlb, mut tub) = (isize::MAX, isize::MIN);
    let (mut mlb, mut mub): (Option<isize>, Option<isize>) = (None, None);
    let mut size = 0usize;
    let mut basic: Option<Option<Basic>> = None;
    let mut nbasic = 0;
    let mut runs: Option<Vec<(usize, usize)>> = Some(Vec::new());
    let mut align = 1;
    for p in parts {
        let is_lb = p.t.basic == Some(Basic::Marker) && p.t.name == "MPI_LB";
        let is_ub = p.t.basic == Some(Basic::Marker) && p.t.name == "MPI_UB";
        if is_lb {
            mlb = Some(mlb.map_or(p.disp, |m| m.min(p.disp)));
            continue;
        }
        if is_ub {
            mub = Some(mub.map_or(p.disp, |m| m.max(p.disp)));
            continue;
        }
        if p.count == 0 {
            continue;
        }
        align = align.max(p.t.align);
        let ext = p.t.extent();
        match p.t.blocks[..] {
            // Copies of one block as long as the extent lie end to end: one block, made in one
            // step (MPI_Type_contiguous(2^31 - 1, MPI_BYTE) took seconds block by block).
            [(o, l)] if ext > 0 && l as isize == ext => {
                push_block(&mut blocks, p.disp + o, l * p.count);
            }
            _ => {
                for i in 0..p.count {
                    let base = p.disp + i as isize * ext;
                    for &(o, l) in &p.t.blocks {
                        push_block(&mut blocks, base + o, l);
                    }
                }
            }
        }
        let first = p.disp;
        let last = p.disp + (p.count as isize - 1) * ext;
        lb = lb.min(first.min(last) + p.t.lb);
        ub = ub.max(first.max(last) + p.t.ub);
        if p.t.size > 0 {
            tlb = tlb.min(first.min(last) + p.t.true_lb);
            tub = tub.max(first.max(last) + p.t.true_ub);
        }
        // With a negative extent the last copy lies below the first: the marked bounds come
        // from whichever is lower (lb) and higher (ub), as the unmarked ones do.
        if p.t.lb_marked {
            let l = first.min(last) + p.t.lb;
            mlb = Some(mlb.map_or(l, |m| m.min(l)));
        }
        if p.t.ub_marked {
            let u = first.max(last) + p.t.ub;
            mub = Some(mub.map_or(u, |m| m.max(u)));
        }
        size += p.count * p.t.size;
        nbasic += p.count * p.t.nbasic;
        runs = match (runs, &p.t.runs) {
            (Some(mut r), Some(tr)) => {
                if tr.len() == 1 {
                    push_run(&mut r, tr[0].0, tr[0].1 * p.count);
                } else {
                    for _ in 0..p.count {
                        for &(s, c) in tr {
                            push_run(&mut r, s, c);
                        }
                        if r.len() > MAX_RUNS {
                            break;
                        }
                    }
                }
                (r.len() <= MAX_RUNS).then_some(r)
            }
            _ => None,
        };
        basic = Some(match basic {
            None => p.t.basic,
            Some(b) if b == p.t.basic => b,
            Some(_) => None,
        });
    }
    if lb == isize::MAX {
        lb = 0;
        ub = 0;
    }
    if tlb == isize::MAX {
        tlb = 0;
        tub = 0;
    }
    let lb = mlb.unwrap_or(lb);
    let ub = mub.unwrap_or(ub);
    let contig = (blocks.is_empty() && ub == lb)
        || (blocks.len() == 1 && blocks[0].0 == 0 && lb == 0 && blocks[0].1 as isize == ub);
    Dtype {
        size,
        lb,
        ub,
        true_lb: tlb,
        true_ub: tub,
        blocks,
        contig,
        basic: basic.flatten(),
        nbasic,
        runs,
        name: String::new(),
        combiner,
        ints: vec![],
        aints: vec![],
        types: vec![],
        parts: vec![],
        committed: false,
        lb_marked: mlb.is_some(),
        ub_marked: mub.is_some(),
        align,
    }
}

fn count_of(n: c_int, what: &str) -> R<usize> {
    if n < 0 {
        return Err(fail(class::COUNT, format!("{what} is negative ({n})")));
    }
    Ok(n as usize)
}

/// The bytes of the real that SELECTED_REAL_KIND(p, r) gives (gfortran on x86-64: 4 bytes
/// hold 6 digits and a range of 37, 8 bytes 15 and 307, the x87 extended 18 and 4931); either
/// may be MPI_UNDEFINED, not both (MPI-3.1 17.2.5).
fn f90_real_size(p: c_int, r: c_int, call: &str) -> R<usize> {
    if p == abi::UNDEFINED && r == abi::UNDEFINED {
        return Err(fail(
            class::ARG,
            format!("{call} needs the precision p or the range r (both are MPI_UNDEFINED)"),
        ));
    }
    let p = if p == abi::UNDEFINED { 0 } else { p };
    let r = if r == abi::UNDEFINED { 0 } else { r };
    match (p, r) {
        (..=6, ..=37) => Ok(4),
        (..=15, ..=307) => Ok(8),
        (..=18, ..=4931) => Ok(16),
        _ => Err(fail(class::ARG, format!("{call}: no real type volley carries has {p} decimal digits and a range of {r} (at most 18 digits and a range of 4931: long double)"))),
    }
}

/// The predefined datatype for one (combiner, p, r) of MPI_Type_create_f90_*: the named type
/// `base` with that combiner and those integers as its contents, made on the first call and
/// the same handle on every later one (MPI-3.1 17.2.5: it cannot be freed).
fn f90_type(combiner: c_int, ints: Vec<c_int>, base: H, out: *mut H) -> R {
    let (p, r) = if ints.len() == 2 {
        (ints[0], ints[1])
    } else {
        (0, ints[0])
    };
    let known = rt()?
        .f90_types
        .iter()
        .find(|t| (t.0, t.1, t.2) == (combiner, p, r))
        .map(|t| t.3);
    if let Some(h) = known {
        // SAFETY: the caller's output argument.
        return unsafe { put(out, h) };
    }
    let mut d = (*old(base)?).clone();
    d.combiner = combiner;
    d.name = String::new();
    store(d, ints, vec![], vec![], out)?;
    // SAFETY: store wrote the new handle there.
    let h = unsafe { get(out)? };
    rt()?.f90_types.push((combiner, p, r, h));
    Ok(())
}

/// Stores a new type and writes its handle.
fn store(mut d: Dtype, ints: Vec<c_int>, aints: Vec<Aint>, types: Vec<H>, out: *mut H) -> R {
    let mut rt = rt()?;
    d.parts = types
        .iter()
        .map(|&h| index(KIND_TYPE, h).and_then(|i| rt.types.get(i).cloned().flatten()))
        .collect();
    d.ints = ints;
    d.aints = aints;
    d.types = types;
    let d = Arc::new(d);
    let i = state::vacant(&mut rt.types, d);
    // SAFETY: the caller's output argument.
    unsafe { put(out, handle(KIND_TYPE, i)) }
}

pub(crate) fn old(h: H) -> R<TypeRef> {
    let rt = rt()?;
    let t = lookup(&rt, h)?;
    Ok(t)
}

crate::mpi! {
    fn MPI_Type_match_size / PMPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut H) {
        // MPI-3.1 section 17.2.5: a predefined type of the class and size (the sized Fortran
        // types, which C can use too).
        let h = match (typeclass, size) {
            (abi::TYPECLASS_INTEGER, 1) => 0x2c1,
            (abi::TYPECLASS_INTEGER, 2) => 0x2c9,
            (abi::TYPECLASS_INTEGER, 4) => 0x2d1,
            (abi::TYPECLASS_INTEGER, 8) => 0x2d9,
            (abi::TYPECLASS_REAL, 4) => 0x2d2,
            (abi::TYPECLASS_REAL, 8) => 0x2da,
            (abi::TYPECLASS_COMPLEX, 8) => 0x2db,
            (abi::TYPECLASS_COMPLEX, 16) => 0x2e3,
            // C's long double (x87 extended in 16 bytes on x86-64), and its complex: the
            // predefined types of that size volley carries (MPICH answers the same).
            (abi::TYPECLASS_REAL, 16) => 0x220,
            (abi::TYPECLASS_COMPLEX, 32) => 0x224,
            (abi::TYPECLASS_INTEGER | abi::TYPECLASS_REAL | abi::TYPECLASS_COMPLEX, _) => {
                return Err(fail(class::ARG, format!("no predefined type of this class has {size} bytes: volley has integers of 1, 2, 4 and 8 bytes, reals of 4, 8 and 16 (long double), complex numbers of 8, 16 and 32")));
            }
            _ => {
                return Err(fail(class::ARG, format!("typeclass {typeclass} is none of MPI_TYPECLASS_INTEGER, MPI_TYPECLASS_REAL and MPI_TYPECLASS_COMPLEX")));
            }
        };
        // SAFETY: the caller's output argument.
        unsafe { put(datatype, h) }
    }

    fn MPI_Type_create_f90_integer / PMPI_Type_create_f90_integer(r: c_int, newtype: *mut H) {
        // SELECTED_INT_KIND(r) of gfortran: the smallest integer with at least r decimal
        // digits (1, 2, 4 and 8 bytes hold 2, 4, 9 and 18).
        let base = match r {
            abi::UNDEFINED => return Err(fail(class::ARG, "MPI_Type_create_f90_integer needs the decimal range r (MPI_UNDEFINED given)")),
            ..=2 => 0x2c1,
            3..=4 => 0x2c9,
            5..=9 => 0x2d1,
            10..=18 => 0x2d9,
            _ => return Err(fail(class::ARG, format!("no integer type volley carries has a range of {r} decimal digits (at most 18: 8 bytes)"))),
        };
        f90_type(abi::COMBINER_F90_INTEGER, vec![r], base, newtype)
    }

    fn MPI_Type_create_f90_real / PMPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut H) {
        let base = f90_real_size(p, r, "MPI_Type_create_f90_real")?;
        let base = match base { 4 => 0x2d2, 8 => 0x2da, _ => 0x220 };
        f90_type(abi::COMBINER_F90_REAL, vec![p, r], base, newtype)
    }

    fn MPI_Type_create_f90_complex / PMPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut H) {
        let base = f90_real_size(p, r, "MPI_Type_create_f90_complex")?;
        let base = match base { 4 => 0x2db, 8 => 0x2e3, _ => 0x224 };
        f90_type(abi::COMBINER_F90_COMPLEX, vec![p, r], base, newtype)
    }

    fn MPI_Type_size / PMPI_Type_size(datatype: H, size: *mut c_int) {
        let t = old(datatype)?;
        let s = c_int::try_from(t.size).unwrap_or(abi::UNDEFINED);
        // SAFETY: the caller's output argument.
        unsafe { put(size, s) }
    }

    fn MPI_Type_size_x / PMPI_Type_size_x(datatype: H, size: *mut Count) {
        let t = old(datatype)?;
        // SAFETY: the caller's output argument.
        unsafe { put(size, t.size as Count) }
    }

    fn MPI_Type_get_extent / PMPI_Type_get_extent(datatype: H, lb: *mut Aint, extent: *mut Aint) {
        let t = old(datatype)?;
        // SAFETY: the caller's output arguments.
        unsafe {
            put(lb, t.lb)?;
            put(extent, t.extent())
        }
    }

    fn MPI_Type_get_extent_x / PMPI_Type_get_extent_x(datatype: H, lb: *mut Count, extent: *mut Count) {
        let t = old(datatype)?;
        // SAFETY: the caller's output arguments.
        unsafe {
            put(lb, t.lb as Count)?;
            put(extent, t.extent() as Count)
        }
    }

    fn MPI_Type_get_true_extent / PMPI_Type_get_true_extent(datatype: H, true_lb: *mut Aint, true_extent: *mut Aint) {
        let t = old(datatype)?;
        // SAFETY: the caller's output arguments.
        unsafe {
            put(true_lb, t.true_lb)?;
            put(true_extent, t.true_ub - t.true_lb)
        }
    }

    fn MPI_Type_get_true_extent_x / PMPI_Type_get_true_extent_x(datatype: H, true_lb: *mut Count, true_extent: *mut Count) {
        let t = old(datatype)?;
        // SAFETY: the caller's output arguments.
        unsafe {
            put(true_lb, t.true_lb as Count)?;
            put(true_extent, (t.true_ub - t.true_lb) as Count)
        }
    }

    fn MPI_Type_contiguous / PMPI_Type_contiguous(count: c_int, oldtype: H, newtype: *mut H) {
        let n = count_of(count, "count")?;
        let t = old(oldtype)?;
        let d = build(&[Part { disp: 0, count: n, t: &t }], abi::COMBINER_CONTIGUOUS);
        store(d, vec![count], vec![], vec![oldtype], newtype)
    }

    fn MPI_Type_vector / PMPI_Type_vector(count: c_int, blocklength: c_int, stride: c_int, oldtype: H, newtype: *mut H) {
        let n = count_of(count, "count")?;
        let bl = count_of(blocklength, "blocklength")?;
        let t = old(oldtype)?;
        let parts: Vec<Part> = (0..n)
            .map(|i| Part { disp: i as isize * stride as isize * t.extent(), count: bl, t: &t })
            .collect();
        let d = build(&parts, abi::COMBINER_VECTOR);
        store(d, vec![count, blocklength, stride], vec![], vec![oldtype], newtype)
    }

    fn MPI_Type_create_hvector / PMPI_Type_create_hvector(count: c_int, blocklength: c_int, stride: Aint, oldtype: H, newtype: *mut H) {
        let n = count_of(count, "count")?;
        let bl = count_of(blocklength, "blocklength")?;
        let t = old(oldtype)?;
        let parts: Vec<Part> = (0..n)
            .map(|i| Part { disp: i as isize * stride, count: bl, t: &t })
            .collect();
        let d = build(&parts, abi::COMBINER_HVECTOR);
        store(d, vec![count, blocklength], vec![stride], vec![oldtype], newtype)
    }

    fn MPI_Type_indexed / PMPI_Type_indexed(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const c_int, oldtype: H, newtype: *mut H) {
        // SAFETY: MPI: both arrays hold count entries.
        let (bls, ds) = unsafe { (array(array_of_blocklengths, count)?, array(array_of_displacements, count)?) };
        let t = old(oldtype)?;
        let mut parts = Vec::with_capacity(bls.len());
        for (&b, &d) in bls.iter().zip(ds) {
            parts.push(Part { disp: d as isize * t.extent(), count: count_of(b, "a block length")?, t: &t });
        }
        let d = build(&parts, abi::COMBINER_INDEXED);
        let mut ints = vec![count];
        ints.extend_from_slice(bls);
        ints.extend_from_slice(ds);
        store(d, ints, vec![], vec![oldtype], newtype)
    }

    fn MPI_Type_create_hindexed / PMPI_Type_create_hindexed(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const Aint, oldtype: H, newtype: *mut H) {
        // SAFETY: MPI: both arrays hold count entries.
        let (bls, ds) = unsafe { (array(array_of_blocklengths, count)?, array(array_of_displacements, count)?) };
        let t = old(oldtype)?;
        let mut parts = Vec::with_capacity(bls.len());
        for (&b, &d) in bls.iter().zip(ds) {
            parts.push(Part { disp: d, count: count_of(b, "a block length")?, t: &t });
        }
        let d = build(&parts, abi::COMBINER_HINDEXED);
        let mut ints = vec![count];
        ints.extend_from_slice(bls);
        store(d, ints, ds.to_vec(), vec![oldtype], newtype)
    }

    fn MPI_Type_create_indexed_block / PMPI_Type_create_indexed_block(count: c_int, blocklength: c_int, array_of_displacements: *const c_int, oldtype: H, newtype: *mut H) {
        // SAFETY: MPI: the array holds count entries.
        let ds = unsafe { array(array_of_displacements, count)? };
        let bl = count_of(blocklength, "blocklength")?;
        let t = old(oldtype)?;
        let parts: Vec<Part> = ds.iter().map(|&d| Part { disp: d as isize * t.extent(), count: bl, t: &t }).collect();
        let d = build(&parts, abi::COMBINER_INDEXED_BLOCK);
        let mut ints = vec![count, blocklength];
        ints.extend_from_slice(ds);
        store(d, ints, vec![], vec![oldtype], newtype)
    }

    fn MPI_Type_create_hindexed_block / PMPI_Type_create_hindexed_block(count: c_int, blocklength: c_int, array_of_displacements: *const Aint, oldtype: H, newtype: *mut H) {
        // SAFETY: MPI: the array holds count entries.
        let ds = unsafe { array(array_of_displacements, count)? };
        let bl = count_of(blocklength, "blocklength")?;
        let t = old(oldtype)?;
        // Displacements in bytes (MPI-3.1 4.1.2).
        let parts: Vec<Part> = ds.iter().map(|&d| Part { disp: d, count: bl, t: &t }).collect();
        let d = build(&parts, abi::COMBINER_HINDEXED_BLOCK);
        store(d, vec![count, blocklength], ds.to_vec(), vec![oldtype], newtype)
    }

    fn MPI_Type_create_struct / PMPI_Type_create_struct(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const Aint, array_of_types: *const H, newtype: *mut H) {
        // SAFETY: MPI: the three arrays hold count entries.
        let (bls, ds, ts) = unsafe {
            (array(array_of_blocklengths, count)?, array(array_of_displacements, count)?, array(array_of_types, count)?)
        };
        let olds: Vec<TypeRef> = ts.iter().map(|&h| old(h)).collect::<R<_>>()?;
        let mut parts = Vec::with_capacity(olds.len());
        for ((&b, &d), t) in bls.iter().zip(ds).zip(&olds) {
            parts.push(Part { disp: d, count: count_of(b, "a block length")?, t });
        }
        let mut d = build(&parts, abi::COMBINER_STRUCT);
        // C's struct rule for the extent: padded to the strictest alignment of its members
        // (MPI-3.1 section 4.1.6), so that an array of such structs lines up.
        if !d.ub_marked {
            let align = olds.iter().map(|t| alignment(t)).max().unwrap_or(1) as isize;
            let ext = d.ub - d.lb;
            let padded = (ext + align - 1) / align * align;
            d.ub = d.lb + padded;
            d.contig = d.blocks.len() == 1 && d.blocks[0].0 == 0 && d.lb == 0 && d.blocks[0].1 as isize == d.ub;
        }
        let mut ints = vec![count];
        ints.extend_from_slice(bls);
        store(d, ints, ds.to_vec(), ts.to_vec(), newtype)
    }

    fn MPI_Type_create_subarray / PMPI_Type_create_subarray(ndims: c_int, array_of_sizes: *const c_int, array_of_subsizes: *const c_int, array_of_starts: *const c_int, order: c_int, oldtype: H, newtype: *mut H) {
        // SAFETY: MPI: the three arrays hold ndims entries.
        let (sz, sub, st) = unsafe {
            (array(array_of_sizes, ndims)?, array(array_of_subsizes, ndims)?, array(array_of_starts, ndims)?)
        };
        if ndims < 1 {
            return Err(fail(class::ARG, format!("ndims must be at least 1, not {ndims}")));
        }
        for d in 0..sz.len() {
            if sz[d] < 1 || sub[d] < 1 || sub[d] > sz[d] || st[d] < 0 || st[d] > sz[d] - sub[d] {
                return Err(fail(class::ARG, format!(
                    "dimension {d}: size {}, subsize {}, start {} do not describe a subarray (need 1 <= subsize <= size and 0 <= start <= size - subsize)",
                    sz[d], sub[d], st[d])));
            }
        }
        if order != abi::ORDER_C && order != abi::ORDER_FORTRAN {
            return Err(fail(class::ARG, format!("order {order} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN")));
        }
        let t = old(oldtype)?;
        // Dimensions from the slowest-varying to the fastest.
        let dims: Vec<usize> = if order == abi::ORDER_C { (0..sz.len()).collect() } else { (0..sz.len()).rev().collect() };
        let last = *dims.last().expect("ndims >= 1");
        // Byte stride of each dimension.
        let mut stride = vec![0isize; sz.len()];
        let mut s = t.extent();
        for &d in dims.iter().rev() {
            stride[d] = s;
            s *= sz[d] as isize;
        }
        let total = s;
        // One part per row of the fastest dimension.
        let mut parts = Vec::new();
        let mut idx = vec![0i32; sz.len()];
        loop {
            let mut disp = 0isize;
            for &d in &dims {
                let i = if d == last { 0 } else { idx[d] };
                disp += (st[d] + i) as isize * stride[d];
            }
            parts.push(Part { disp, count: sub[last] as usize, t: &t });
            // Next row: odometer over every dimension but the fastest.
            let mut k = dims.len() as isize - 2;
            loop {
                if k < 0 {
                    break;
                }
                let d = dims[k as usize];
                idx[d] += 1;
                if idx[d] < sub[d] {
                    break;
                }
                idx[d] = 0;
                k -= 1;
            }
            if k < 0 {
                break;
            }
        }
        let mut d = build(&parts, abi::COMBINER_SUBARRAY);
        d.lb = 0;
        d.ub = total;
        d.contig = d.blocks.len() == 1 && d.blocks[0].0 == 0 && d.blocks[0].1 as isize == total;
        let mut ints = vec![ndims];
        ints.extend_from_slice(sz);
        ints.extend_from_slice(sub);
        ints.extend_from_slice(st);
        ints.push(order);
        store(d, ints, vec![], vec![oldtype], newtype)
    }

    #[allow(clippy::too_many_arguments)]
    fn MPI_Type_create_darray / PMPI_Type_create_darray(size: c_int, rank: c_int, ndims: c_int, array_of_gsizes: *const c_int, array_of_distribs: *const c_int, array_of_dargs: *const c_int, array_of_psizes: *const c_int, order: c_int, oldtype: H, newtype: *mut H) {
        // SAFETY: MPI: the four arrays hold ndims entries.
        let (gs, dist, dargs, ps) = unsafe {
            (array(array_of_gsizes, ndims)?, array(array_of_distribs, ndims)?, array(array_of_dargs, ndims)?, array(array_of_psizes, ndims)?)
        };
        if ndims < 1 {
            return Err(fail(class::ARG, format!("ndims must be at least 1, not {ndims}")));
        }
        if order != abi::ORDER_C && order != abi::ORDER_FORTRAN {
            return Err(fail(class::ARG, format!("order {order} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN")));
        }
        if ps.iter().any(|&p| p < 1) || ps.iter().map(|&p| p as i64).product::<i64>() != size as i64 {
            return Err(fail(class::ARG, format!("the process grid {ps:?} does not hold exactly size = {size} processes")));
        }
        if rank < 0 || rank >= size {
            return Err(fail(class::RANK, format!("rank {rank} is not in 0..{size}")));
        }
        // The process grid is numbered in row-major order whatever the array's order
        // (MPI-3.1 section 4.1.4).
        let mut coords = vec![0i32; ps.len()];
        let mut r = rank;
        for d in (0..ps.len()).rev() {
            coords[d] = r % ps[d];
            r /= ps[d];
        }
        let mut runs = Vec::with_capacity(ps.len());
        for d in 0..ps.len() {
            runs.push(darray_runs(d, gs[d], dist[d], dargs[d], ps[d], coords[d])?);
        }
        let t = old(oldtype)?;
        let dims: Vec<usize> = if order == abi::ORDER_C { (0..gs.len()).collect() } else { (0..gs.len()).rev().collect() };
        let last = *dims.last().expect("ndims >= 1");
        let mut stride = vec![0isize; gs.len()];
        let mut s = t.extent();
        for &d in dims.iter().rev() {
            stride[d] = s;
            s *= gs[d] as isize;
        }
        let total = s;
        // The indices this process owns in each dimension but the fastest, one by one; in the
        // fastest, its runs: one part per run, in the array's memory order.
        let owned: Vec<Vec<i32>> = runs.iter().map(|r| r.iter().flat_map(|&(a, n)| a..a + n).collect()).collect();
        let mut parts = Vec::new();
        if dims.iter().all(|&d| d == last || !owned[d].is_empty()) {
            let mut idx = vec![0usize; gs.len()];
            'rows: loop {
                let mut base = 0isize;
                for &d in &dims {
                    if d != last {
                        base += owned[d][idx[d]] as isize * stride[d];
                    }
                }
                for &(a, n) in &runs[last] {
                    parts.push(Part { disp: base + a as isize * stride[last], count: n as usize, t: &t });
                }
                let mut k = dims.len() as isize - 2;
                loop {
                    if k < 0 {
                        break 'rows;
                    }
                    let d = dims[k as usize];
                    idx[d] += 1;
                    if idx[d] < owned[d].len() {
                        break;
                    }
                    idx[d] = 0;
                    k -= 1;
                }
            }
        }
        let mut d = build(&parts, abi::COMBINER_DARRAY);
        d.lb = 0;
        d.ub = total;
        d.contig = d.blocks.len() == 1 && d.blocks[0].0 == 0 && d.blocks[0].1 as isize == total;
        let mut ints = vec![size, rank, ndims];
        ints.extend_from_slice(gs);
        ints.extend_from_slice(dist);
        ints.extend_from_slice(dargs);
        ints.extend_from_slice(ps);
        ints.push(order);
        store(d, ints, vec![], vec![oldtype], newtype)
    }

    fn MPI_Type_create_resized / PMPI_Type_create_resized(oldtype: H, lb: Aint, extent: Aint, newtype: *mut H) {
        let t = old(oldtype)?;
        let mut d = build(&[Part { disp: 0, count: 1, t: &t }], abi::COMBINER_RESIZED);
        d.lb = lb;
        d.ub = lb + extent;
        d.lb_marked = true;
        d.ub_marked = true;
        d.contig = d.blocks.len() == 1 && d.blocks[0].0 == 0 && lb == 0 && d.blocks[0].1 as isize == extent;
        store(d, vec![], vec![lb, extent], vec![oldtype], newtype)
    }

    fn MPI_Type_dup / PMPI_Type_dup(oldtype: H, newtype: *mut H) {
        let t = old(oldtype)?;
        let mut d = (*t).clone();
        d.combiner = abi::COMBINER_DUP;
        d.name = String::new();
        store(d, vec![], vec![], vec![oldtype], newtype)?;
        // The attributes go to the duplicate as their copy callbacks say (MPI-3.1 6.7.4), run
        // outside the state's borrow (they may call MPI).
        let attrs = type_attrs_of(oldtype)?;
        if !attrs.is_empty() {
            // SAFETY: store wrote the new handle there.
            let h = unsafe { get(newtype)? };
            match crate::comm::run_copy_callbacks(oldtype, attrs) {
                Ok(copied) => rt()?.type_attrs.extend(copied.into_iter().map(|(k, v)| (h, k, v))),
                Err(e) => {
                    // A callback refused: no duplicate, and the program is told so with
                    // MPI_DATATYPE_NULL (as MPI_Comm_dup answers MPI_COMM_NULL).
                    if let Some(i) = index(KIND_TYPE, h) {
                        rt()?.types.get_mut(i).and_then(|s| s.take());
                    }
                    // SAFETY: the caller's output argument.
                    unsafe { put(newtype, abi::DATATYPE_NULL)? };
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn MPI_Type_create_keyval / PMPI_Type_create_keyval(copy_fn: usize, delete_fn: usize, keyval: *mut c_int, extra_state: *mut c_void) {
        crate::comm::create_keyval(copy_fn, delete_fn, keyval, extra_state, state::KeyvalKind::Type)
    }

    fn MPI_Type_free_keyval / PMPI_Type_free_keyval(keyval: *mut c_int) {
        crate::comm::free_keyval(keyval, state::KeyvalKind::Type)
    }

    fn MPI_Type_set_attr / PMPI_Type_set_attr(datatype: H, keyval: c_int, attribute_val: *mut c_void) {
        let old = {
            let rt = rt()?;
            lookup(&rt, datatype)?;
            rt.keyval(keyval, state::KeyvalKind::Type, true)?;
            rt.type_attrs.iter().find(|a| a.0 == datatype && a.1 == keyval).copied()
        };
        // A value set again is deleted first, as MPI_Type_delete_attr would.
        if let Some((_, k, v)) = old {
            crate::comm::delete_attr(datatype, k, v)?;
        }
        let mut rt = rt()?;
        rt.type_attrs.retain(|a| !(a.0 == datatype && a.1 == keyval));
        rt.type_attrs.push((datatype, keyval, attribute_val as usize));
        Ok(())
    }

    fn MPI_Type_get_attr / PMPI_Type_get_attr(datatype: H, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) {
        let v = {
            let rt = rt()?;
            lookup(&rt, datatype)?;
            rt.keyval(keyval, state::KeyvalKind::Type, false)?;
            rt.type_attrs.iter().find(|a| a.0 == datatype && a.1 == keyval).map(|a| a.2)
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

    fn MPI_Type_delete_attr / PMPI_Type_delete_attr(datatype: H, keyval: c_int) {
        let old = {
            let rt = rt()?;
            lookup(&rt, datatype)?;
            rt.keyval(keyval, state::KeyvalKind::Type, false)?;
            rt.type_attrs.iter().find(|a| a.0 == datatype && a.1 == keyval).copied()
        };
        let Some((_, k, v)) = old else {
            return Err(fail(class::KEYVAL, format!("no attribute with keyval {keyval} is set on the datatype")));
        };
        crate::comm::delete_attr(datatype, k, v)?;
        rt()?.type_attrs.retain(|a| !(a.0 == datatype && a.1 == keyval));
        Ok(())
    }

    fn MPI_Type_commit / PMPI_Type_commit(datatype: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(datatype)? };
        let mut rt = rt()?;
        if (abi::DATATYPE_NULL..abi::DATATYPE_END).contains(&h) {
            lookup(&rt, h)?;
            return Ok(());
        }
        let i = index(KIND_TYPE, h).ok_or_else(|| bad_type(h))?;
        let slot = rt.types.get_mut(i).and_then(|s| s.as_mut()).ok_or_else(|| bad_type(h))?;
        Arc::make_mut(slot).committed = true;
        Ok(())
    }

    fn MPI_Type_free / PMPI_Type_free(datatype: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(datatype)? };
        if (abi::DATATYPE_NULL..abi::DATATYPE_END).contains(&h) {
            return Err(fail(class::TYPE, "a predefined datatype cannot be freed"));
        }
        if rt()?.f90_types.iter().any(|t| t.3 == h) {
            return Err(fail(class::TYPE, "a datatype from MPI_Type_create_f90_integer, _real or _complex is predefined and cannot be freed"));
        }
        {
            let rt = rt()?;
            let i = index(KIND_TYPE, h).ok_or_else(|| bad_type(h))?;
            rt.types.get(i).and_then(|s| s.as_ref()).ok_or_else(|| bad_type(h))?;
        }
        // Its attributes' delete callbacks run first, outside the state's borrow.
        for (k, v) in type_attrs_of(h)? {
            crate::comm::delete_attr(h, k, v)?;
        }
        let mut rt = rt()?;
        rt.type_attrs.retain(|a| a.0 != h);
        let i = index(KIND_TYPE, h).ok_or_else(|| bad_type(h))?;
        // Operations in flight hold their own reference (MPI lets a type be freed meanwhile).
        rt.types.get_mut(i).and_then(|s| s.take()).ok_or_else(|| bad_type(h))?;
        drop(rt);
        // SAFETY: the caller's in-out argument.
        unsafe { put(datatype, abi::DATATYPE_NULL) }
    }

    fn MPI_Type_set_name / PMPI_Type_set_name(datatype: H, type_name: *const c_char) {
        // SAFETY: MPI: a C string.
        let name = unsafe { crate::err::c_str(type_name)? };
        let mut rt = rt()?;
        if (abi::DATATYPE_NULL..abi::DATATYPE_END).contains(&datatype) {
            lookup(&rt, datatype)?;
            rt.type_names.retain(|(h, _)| *h != datatype);
            rt.type_names.push((datatype, name));
            return Ok(());
        }
        let i = index(KIND_TYPE, datatype).ok_or_else(|| bad_type(datatype))?;
        let slot = rt.types.get_mut(i).and_then(|s| s.as_mut()).ok_or_else(|| bad_type(datatype))?;
        Arc::make_mut(slot).name = name;
        Ok(())
    }

    fn MPI_Type_get_name / PMPI_Type_get_name(datatype: H, type_name: *mut c_char, resultlen: *mut c_int) {
        let renamed = rt()?.type_names.iter().find(|(h, _)| *h == datatype).map(|(_, n)| n.clone());
        if let Some(n) = renamed {
            // SAFETY: MPI: type_name holds MPI_MAX_OBJECT_NAME bytes.
            return unsafe { put_str(type_name, abi::MAX_OBJECT_NAME, resultlen, &n) };
        }
        // An optional type volley does not carry still has its name (it names a handle).
        if let Some((name, _)) = lacking(datatype) {
            // SAFETY: MPI: type_name holds MPI_MAX_OBJECT_NAME bytes.
            return unsafe { put_str(type_name, abi::MAX_OBJECT_NAME, resultlen, name) };
        }
        let t = old(datatype)?;
        // SAFETY: MPI: type_name holds MPI_MAX_OBJECT_NAME bytes.
        unsafe { put_str(type_name, abi::MAX_OBJECT_NAME, resultlen, &t.name) }
    }

    fn MPI_Type_get_envelope / PMPI_Type_get_envelope(datatype: H, num_integers: *mut c_int, num_addresses: *mut c_int, num_datatypes: *mut c_int, combiner: *mut c_int) {
        let t = old(datatype)?;
        // SAFETY: the caller's output arguments.
        unsafe {
            put(num_integers, t.ints.len() as c_int)?;
            put(num_addresses, t.aints.len() as c_int)?;
            put(num_datatypes, t.types.len() as c_int)?;
            put(combiner, t.combiner)
        }
    }

    fn MPI_Type_get_contents / PMPI_Type_get_contents(datatype: H, max_integers: c_int, max_addresses: c_int, max_datatypes: c_int, array_of_integers: *mut c_int, array_of_addresses: *mut Aint, array_of_datatypes: *mut H) {
        let t = old(datatype)?;
        if t.combiner == abi::COMBINER_NAMED {
            return Err(fail(class::ARG, "MPI_Type_get_contents is erroneous on a predefined datatype (its combiner is MPI_COMBINER_NAMED)"));
        }
        if (max_integers as usize) < t.ints.len() || (max_addresses as usize) < t.aints.len() || (max_datatypes as usize) < t.types.len() {
            return Err(fail(class::ARG, "an output array is smaller than MPI_Type_get_envelope said it must be"));
        }
        // A made datatype comes back as a new handle the program frees (MPI-3.1 4.1.13), also
        // when it freed the one it built with; a predefined one as itself.
        let types: Vec<H> = {
            let mut rt = rt()?;
            t.types
                .iter()
                .zip(&t.parts)
                .map(|(&h, part)| match part {
                    Some(d) => handle(KIND_TYPE, state::vacant(&mut rt.types, d.clone())),
                    None => h,
                })
                .collect()
        };
        // SAFETY: MPI: the arrays hold the max_* entries, which hold the contents.
        unsafe {
            crate::err::array_mut(array_of_integers, t.ints.len() as c_int)?.copy_from_slice(&t.ints);
            crate::err::array_mut(array_of_addresses, t.aints.len() as c_int)?.copy_from_slice(&t.aints);
            crate::err::array_mut(array_of_datatypes, t.types.len() as c_int)?.copy_from_slice(&types);
        }
        Ok(())
    }

    fn MPI_Pack / PMPI_Pack(inbuf: *const std::ffi::c_void, incount: c_int, datatype: H, outbuf: *mut std::ffi::c_void, outsize: c_int, position: *mut c_int, comm: H) [comm] {
        let n = count_of(incount, "incount")?;
        let t = { let rt = rt()?; rt.comm(comm)?; committed(&rt, datatype)? };
        // SAFETY: the caller's in-out argument.
        let pos = unsafe { get(position)? };
        let need = n * t.size;
        if pos < 0 || outsize < 0 || pos as usize + need > outsize as usize {
            return Err(fail(class::TRUNCATE, format!(
                "MPI_Pack: {need} bytes do not fit at position {pos} of a {outsize}-byte buffer")));
        }
        // SAFETY: MPI: outbuf holds outsize bytes, inbuf incount elements of the type.
        unsafe {
            let out = std::slice::from_raw_parts_mut((outbuf as *mut u8).add(pos as usize), need);
            t.pack(inbuf as *const u8, n, out);
            put(position, pos + need as c_int)
        }
    }

    fn MPI_Unpack / PMPI_Unpack(inbuf: *const std::ffi::c_void, insize: c_int, position: *mut c_int, outbuf: *mut std::ffi::c_void, outcount: c_int, datatype: H, comm: H) [comm] {
        let n = count_of(outcount, "outcount")?;
        let t = { let rt = rt()?; rt.comm(comm)?; committed(&rt, datatype)? };
        // SAFETY: the caller's in-out argument.
        let pos = unsafe { get(position)? };
        let need = n * t.size;
        if pos < 0 || insize < 0 || pos as usize + need > insize as usize {
            return Err(fail(class::TRUNCATE, format!(
                "MPI_Unpack: {need} bytes wanted at position {pos} of a {insize}-byte buffer")));
        }
        // SAFETY: MPI: inbuf holds insize bytes, outbuf outcount elements of the type.
        unsafe {
            let data = std::slice::from_raw_parts((inbuf as *const u8).add(pos as usize), need);
            t.unpack(data, outbuf as *mut u8, n);
            put(position, pos + need as c_int)
        }
    }

    fn MPI_Pack_size / PMPI_Pack_size(incount: c_int, datatype: H, comm: H, size: *mut c_int) [comm] {
        let n = count_of(incount, "incount")?;
        let t = { let rt = rt()?; rt.comm(comm)?; lookup(&rt, datatype)? };
        // SAFETY: the caller's output argument.
        unsafe { put(size, (n * t.size) as c_int) }
    }

    fn MPI_Get_address / PMPI_Get_address(location: *const std::ffi::c_void, address: *mut Aint) {
        // SAFETY: the caller's output argument.
        unsafe { put(address, location as Aint) }
    }
}

/// MPI_Aint_add: address arithmetic as the standard defines it (no MPI state needed).
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: Aint, disp: Aint) -> Aint {
    base.wrapping_add(disp)
}
#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: Aint, disp: Aint) -> Aint {
    PMPI_Aint_add(base, disp)
}
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(addr1: Aint, addr2: Aint) -> Aint {
    addr1.wrapping_sub(addr2)
}
#[no_mangle]
pub extern "C" fn MPI_Aint_diff(addr1: Aint, addr2: Aint) -> Aint {
    PMPI_Aint_diff(addr1, addr2)
}

/// The alignment C gives a member of this basic type.
fn basic_alignment(b: Basic) -> usize {
    use Basic::*;
    match b {
        I8 | U8 | Bool | Byte | Marker => 1,
        I16 | U16 => 2,
        I32 | U32 | F32 | C32 | TwoInt | FloatInt | ShortInt | TwoF32 => 4,
        LongDouble | LongDoubleComplex | LongDoubleInt => 16,
        _ => 8,
    }
}

/// The alignment C gives a member of this type.
fn alignment(t: &Dtype) -> usize {
    t.align
}

#[cfg(test)]
mod walk_tests {
    use super::*;

    /// Pieces of a type of many blocks asked for in any order, again and backwards (as the
    /// network asks for retransmissions and delivers packets out of order), pack and unpack the
    /// same bytes as one pass in order; the marks that seeks use are made once.
    #[test]
    fn pieces_in_any_order_pack_and_unpack_as_in_order() {
        // MPI_INT (mpi.h).
        let int = predefined(0x209).expect("MPI_INT");
        // Every other int of 5,000, then a gap: one element of 5,000 blocks, two elements.
        let mut t = int.clone();
        t.blocks = (0..5000).map(|k| (8 * k as isize, 4)).collect();
        t.size = 5000 * 4;
        t.lb = 0;
        t.ub = 8 * 5000 + 16;
        t.contig = false;
        let count = 2;
        let src: Vec<u8> = (0..t.extent() as usize * count)
            .map(|i| (i * 7 % 253) as u8)
            .collect();
        let total = t.size * count;
        let mut whole = vec![0u8; total];
        let mut w = Walk::default();
        // SAFETY: src holds `count` elements of the type.
        unsafe { t.pack_piece(src.as_ptr(), count, &mut w, 0, &mut whole) };
        // Pieces of 1,472 bytes (a packet's payload) in a scrambled order, some twice.
        let piece = 1472;
        let n = total.div_ceil(piece);
        let mut order: Vec<usize> = (0..n).map(|i| (i * 17 + 5) % n).collect();
        order.extend([n - 1, 0, n / 2]);
        let mut w = Walk::default();
        let mut dst = vec![0u8; src.len()];
        let mut uw = Walk::default();
        for &i in &order {
            let off = i * piece;
            let len = piece.min(total - off);
            let mut out = vec![0u8; len];
            // SAFETY: as above; dst holds as many elements as src.
            unsafe {
                t.pack_piece(src.as_ptr(), count, &mut w, off, &mut out);
                t.unpack_piece(&out, dst.as_mut_ptr(), count, &mut uw, off);
            }
            assert!(out == whole[off..off + len], "piece at {off} packed wrong");
        }
        assert_eq!(w.marks.len(), 5000usize.div_ceil(MARK_EVERY));
        for k in 0..count {
            for b in 0..5000 {
                let at = k * t.extent() as usize + 8 * b;
                assert_eq!(dst[at..at + 4], src[at..at + 4], "element {k} block {b}");
                assert_eq!(dst[at + 4..at + 8], [0; 4], "a gap was written");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_size_table_agrees_with_the_predefined_types() {
        let mut fast = 0;
        for h in abi::DATATYPE_NULL..abi::DATATYPE_END {
            let t = PREDEFINED[h - abi::DATATYPE_NULL].as_ref();
            match predefined_contig_size(h) {
                Some(s) => {
                    let t = t.unwrap_or_else(|| panic!("{h:#x} has a fast size but no type"));
                    assert!(
                        t.contig && t.committed,
                        "{h:#x} ({}) is not contiguous",
                        t.name
                    );
                    assert_eq!(s, t.size, "{h:#x} ({})", t.name);
                    assert_eq!(s as isize, t.ub - t.lb, "{h:#x} ({})", t.name);
                    fast += 1;
                }
                // Only the pair types (two basic elements) and unused handles are left out.
                None => assert!(t.is_none_or(|t| t.nbasic == 2 || t.size == 0), "{h:#x}"),
            }
        }
        assert_eq!(fast, 51);
        assert_eq!(predefined_contig_size(abi::DATATYPE_NULL), None);
        assert_eq!(predefined_contig_size(0), None);
        assert_eq!(predefined_contig_size(usize::MAX), None);
    }
}
