//! MPI_Pack_external, MPI_Unpack_external and MPI_Pack_external_size: the "external32" data
//! representation (MPI-3.1 sections 4.2 and 13.5.2), which every MPI reads alike: each basic
//! element big-endian, at the sizes the standard's table gives. On x86-64 Linux those sizes are
//! the native ones (long and the address, offset and count types are 8 bytes, wchar_t 4,
//! bool 1), so external32 is the native packed form with each basic element's bytes reversed.
//! A complex number is two reals, each reversed on its own; a pair type (MPI_DOUBLE_INT...) its
//! value and its int. long double (16-byte IEEE quad in external32, x87's 80 bits here) is
//! refused rather than converted.

use crate::abi::{self, class, Aint, H};
use crate::dtype::{committed, predefined, Basic, Dtype};
use crate::err::{fail, get, put, R};
use crate::state::rt;
use std::ffi::{c_char, c_void};
use std::os::raw::c_int;

/// The basic elements of one element of `t`, in typemap order, as runs (bytes each element
/// swaps as a unit, how many in a row).
fn units(t: &Dtype, out: &mut Vec<(usize, usize)>, times: usize) -> R {
    if times == 0 {
        return Ok(());
    }
    if t.combiner == abi::COMBINER_NAMED {
        use Basic::*;
        let b = t.basic.unwrap_or(Byte);
        let one: &[(usize, usize)] = match b {
            Marker => &[],
            I8 | U8 | Bool | Byte => &[(1, 1)],
            I16 | U16 => &[(2, 1)],
            I32 | U32 | F32 => &[(4, 1)],
            I64 | U64 | F64 => &[(8, 1)],
            C32 | TwoInt | TwoF32 => &[(4, 2)],
            C64 | TwoF64 => &[(8, 2)],
            FloatInt => &[(4, 2)],
            DoubleInt | LongInt => &[(8, 1), (4, 1)],
            ShortInt => &[(2, 1), (4, 1)],
            LongDouble | LongDoubleComplex | LongDoubleInt => {
                return Err(fail(
                    class::CONVERSION,
                    format!(
                        "{} has no external32 form in volley (the standard's 16-byte quad is not x87's long double)",
                        t.name
                    ),
                ))
            }
        };
        if one.len() == 1 {
            push(out, one[0].0, one[0].1 * times);
        } else {
            for _ in 0..times {
                for &(u, c) in one {
                    push(out, u, c);
                }
            }
        }
        return Ok(());
    }
    let part = |i: usize| -> R<Dtype> {
        let h = *t
            .types
            .get(i)
            .ok_or_else(|| fail(class::INTERN, "a datatype's parts are missing"))?;
        match t.parts.get(i).cloned().flatten() {
            Some(d) => Ok((*d).clone()),
            None => predefined(h).cloned(),
        }
    };
    if t.combiner == abi::COMBINER_STRUCT {
        // ints: count, then each block's length; types: each block's type.
        let n = t.ints.first().copied().unwrap_or(0).max(0) as usize;
        for _ in 0..times {
            for i in 0..n {
                let bl = t.ints.get(1 + i).copied().unwrap_or(0).max(0) as usize;
                units(&part(i)?, out, bl)?;
            }
        }
        return Ok(());
    }
    // Every other constructor repeats one old type: its packed form is whole old elements.
    let old = part(0)?;
    let per = t.size.checked_div(old.size).unwrap_or(0);
    units(&old, out, per * times)
}

fn push(out: &mut Vec<(usize, usize)>, u: usize, c: usize) {
    if c == 0 {
        return;
    }
    match out.last_mut() {
        Some((lu, lc)) if *lu == u => *lc += c,
        _ => out.push((u, c)),
    }
}

/// Reverses the bytes of each unit of `data`, run by run.
fn swap(data: &mut [u8], runs: &[(usize, usize)]) {
    let mut at = 0;
    for &(u, c) in runs {
        if u == 1 {
            at += c;
            continue;
        }
        for chunk in data[at..at + u * c].chunks_exact_mut(u) {
            chunk.reverse();
        }
        at += u * c;
    }
}

/// Checks the representation's name.
///
/// # Safety
/// `datarep` is a C string.
unsafe fn check_rep(datarep: *const c_char) -> R {
    // SAFETY: per the contract.
    let rep = unsafe { crate::err::c_str(datarep)? };
    if rep != "external32" {
        return Err(fail(
            class::UNSUPPORTED_DATAREP,
            format!("data representation {rep:?}: volley's MPI knows \"external32\" only"),
        ));
    }
    Ok(())
}

fn runs_for(t: &Dtype, count: usize) -> R<Vec<(usize, usize)>> {
    let mut one = Vec::new();
    units(t, &mut one, 1)?;
    let n: usize = one.iter().map(|&(u, c)| u * c).sum();
    if n != t.size {
        return Err(fail(
            class::INTERN,
            format!(
                "external32: the basic elements of {} add up to {n} bytes, not {}",
                t.name, t.size
            ),
        ));
    }
    let mut all = Vec::with_capacity(one.len());
    if one.len() == 1 {
        push(&mut all, one[0].0, one[0].1 * count);
    } else {
        for _ in 0..count {
            for &(u, c) in &one {
                push(&mut all, u, c);
            }
        }
    }
    Ok(all)
}

fn count_of(n: c_int, what: &str) -> R<usize> {
    usize::try_from(n).map_err(|_| fail(class::COUNT, format!("{what} {n} is negative")))
}

crate::mpi! {
    fn MPI_Pack_external_size / PMPI_Pack_external_size(datarep: *const c_char, incount: c_int, datatype: H, size: *mut Aint) {
        // SAFETY: MPI: a C string.
        unsafe { check_rep(datarep)? };
        let n = count_of(incount, "incount")?;
        let t = { let rt = rt()?; committed(&rt, datatype)? };
        runs_for(&t, 1)?;
        // SAFETY: the caller's output argument.
        unsafe { put(size, (n * t.size) as Aint) }
    }

    fn MPI_Pack_external / PMPI_Pack_external(datarep: *const c_char, inbuf: *const c_void, incount: c_int, datatype: H, outbuf: *mut c_void, outsize: Aint, position: *mut Aint) {
        // SAFETY: MPI: a C string.
        unsafe { check_rep(datarep)? };
        let n = count_of(incount, "incount")?;
        let t = { let rt = rt()?; committed(&rt, datatype)? };
        let runs = runs_for(&t, n)?;
        // SAFETY: the caller's in-out argument.
        let pos = unsafe { get(position)? };
        let need = n * t.size;
        if pos < 0 || outsize < 0 || pos as usize + need > outsize as usize {
            return Err(fail(class::TRUNCATE, format!(
                "MPI_Pack_external: {need} bytes do not fit at position {pos} of a {outsize}-byte buffer")));
        }
        // SAFETY: MPI: outbuf holds outsize bytes, inbuf incount elements of the type.
        unsafe {
            let out = std::slice::from_raw_parts_mut((outbuf as *mut u8).add(pos as usize), need);
            t.pack(inbuf as *const u8, n, out);
            swap(out, &runs);
            put(position, pos + need as Aint)
        }
    }

    fn MPI_Unpack_external / PMPI_Unpack_external(datarep: *const c_char, inbuf: *const c_void, insize: Aint, position: *mut Aint, outbuf: *mut c_void, outcount: c_int, datatype: H) {
        // SAFETY: MPI: a C string.
        unsafe { check_rep(datarep)? };
        let n = count_of(outcount, "outcount")?;
        let t = { let rt = rt()?; committed(&rt, datatype)? };
        let runs = runs_for(&t, n)?;
        // SAFETY: the caller's in-out argument.
        let pos = unsafe { get(position)? };
        let need = n * t.size;
        if pos < 0 || insize < 0 || pos as usize + need > insize as usize {
            return Err(fail(class::TRUNCATE, format!(
                "MPI_Unpack_external: {need} bytes wanted at position {pos} of a {insize}-byte buffer")));
        }
        // SAFETY: MPI: inbuf holds insize bytes, outbuf outcount elements of the type.
        unsafe {
            let mut data = std::slice::from_raw_parts((inbuf as *const u8).add(pos as usize), need).to_vec();
            swap(&mut data, &runs);
            t.unpack(&data, outbuf as *mut u8, n);
            put(position, pos + need as Aint)
        }
    }
}
