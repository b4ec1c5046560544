//! MPI_Pack_external, MPI_Unpack_external and MPI_Pack_external_size: the "external32" data
//! representation (MPI-3.1 sections 4.2 and 13.5.2), which every MPI reads alike: each basic
//! element big-endian, at the sizes of the standard's table 13.2. Most are the native sizes on
//! x86-64 Linux; MPI_LONG and MPI_UNSIGNED_LONG are 4 bytes there (8 here) and MPI_WCHAR 2 (4
//! here), so those are narrowed on the way out (a value that does not fit is
//! MPI_ERR_CONVERSION, nothing is truncated silently) and widened on the way in. A complex
//! number is two reals, each big-endian on its own; a pair type (MPI_DOUBLE_INT...) its value
//! and its int. long double (a 16-byte IEEE quad in external32, x87's 80 bits here) is refused
//! rather than converted.

use crate::abi::{self, class, Aint, H};
use crate::dtype::{committed, predefined, Basic, Dtype};
use crate::err::{fail, get, put, R};
use crate::state::rt;
use std::ffi::{c_char, c_void};
use std::os::raw::c_int;

/// A run of basic elements in typemap order: `count` of them, each `native` bytes here and
/// `ext` bytes in external32, an integer that is `signed` (where the sizes differ).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Unit {
    native: usize,
    ext: usize,
    signed: bool,
    count: usize,
}

const fn unit(native: usize, ext: usize, signed: bool) -> Unit {
    Unit {
        native,
        ext,
        signed,
        count: 1,
    }
}

/// The basic elements of `times` elements of `t`, appended to `out`.
fn units(t: &Dtype, out: &mut Vec<Unit>, times: usize) -> R {
    if times == 0 {
        return Ok(());
    }
    if t.combiner == abi::COMBINER_NAMED {
        use Basic::*;
        let b = t.basic.unwrap_or(Byte);
        let one: &[Unit] = match (t.name.as_str(), b) {
            (_, Marker) => &[],
            ("MPI_LONG", _) => &[unit(8, 4, true)],
            ("MPI_UNSIGNED_LONG", _) => &[unit(8, 4, false)],
            ("MPI_WCHAR", _) => &[unit(4, 2, false)],
            ("MPI_LONG_INT", _) => &[unit(8, 4, true), unit(4, 4, true)],
            (_, I8 | U8 | Bool | Byte) => &[unit(1, 1, false)],
            (_, I16 | U16) => &[unit(2, 2, false)],
            (_, I32 | U32 | F32) => &[unit(4, 4, false)],
            (_, I64 | U64 | F64) => &[unit(8, 8, false)],
            (_, C32 | TwoInt | TwoF32 | FloatInt) => &[unit(4, 4, false), unit(4, 4, false)],
            (_, C64 | TwoF64) => &[unit(8, 8, false), unit(8, 8, false)],
            (_, DoubleInt | LongInt) => &[unit(8, 8, false), unit(4, 4, false)],
            (_, ShortInt) => &[unit(2, 2, false), unit(4, 4, false)],
            (_, LongDouble | LongDoubleComplex | LongDoubleInt) => {
                return Err(fail(
                    class::CONVERSION,
                    format!(
                        "{} has no external32 form in volley (the standard's 16-byte quad is not x87's long double)",
                        t.name
                    ),
                ))
            }
        };
        if let [u] = one {
            push(out, Unit { count: times, ..*u });
        } else {
            for _ in 0..times {
                for &u in one {
                    push(out, u);
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

fn push(out: &mut Vec<Unit>, u: Unit) {
    if u.count == 0 {
        return;
    }
    match out.last_mut() {
        Some(l) if (l.native, l.ext, l.signed) == (u.native, u.ext, u.signed) => l.count += u.count,
        _ => out.push(u),
    }
}

/// Native packed bytes to external32 (`out` holds the external size).
fn to_external(native: &[u8], out: &mut [u8], runs: &[Unit]) -> R {
    let (mut i, mut o) = (0, 0);
    for u in runs {
        for _ in 0..u.count {
            let src = &native[i..i + u.native];
            let dst = &mut out[o..o + u.ext];
            if u.native == u.ext {
                dst.copy_from_slice(src);
                dst.reverse();
            } else {
                // Narrowing an integer (8 -> 4 bytes, 4 -> 2): it must fit.
                let mut b = [0u8; 8];
                b[..u.native].copy_from_slice(src);
                let v = u64::from_le_bytes(b);
                let bits = 8 * u.ext as u32;
                let fits = if u.signed {
                    let s = (v << (64 - 8 * u.native as u32)) as i64 >> (64 - 8 * u.native as u32);
                    s >= -(1i64 << (bits - 1)) && s < (1i64 << (bits - 1))
                } else {
                    v >> bits == 0
                };
                if !fits {
                    return Err(fail(
                        class::CONVERSION,
                        format!(
                            "a {}-byte value does not fit external32's {} bytes",
                            u.native, u.ext
                        ),
                    ));
                }
                dst.copy_from_slice(&v.to_be_bytes()[8 - u.ext..]);
            }
            i += u.native;
            o += u.ext;
        }
    }
    Ok(())
}

/// External32 bytes to the native packed form (`out` holds the native size).
fn from_external(ext: &[u8], out: &mut [u8], runs: &[Unit]) {
    let (mut i, mut o) = (0, 0);
    for u in runs {
        for _ in 0..u.count {
            let src = &ext[i..i + u.ext];
            let dst = &mut out[o..o + u.native];
            if u.native == u.ext {
                dst.copy_from_slice(src);
                dst.reverse();
            } else {
                // Widening: sign-extended for a signed integer.
                let mut b = [0u8; 8];
                b[8 - u.ext..].copy_from_slice(src);
                let mut v = u64::from_be_bytes(b);
                if u.signed && src[0] & 0x80 != 0 {
                    v |= !0u64 << (8 * u.ext);
                }
                dst.copy_from_slice(&v.to_le_bytes()[..u.native]);
            }
            i += u.ext;
            o += u.native;
        }
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

/// The units of `count` elements of `t`, and their external32 size.
fn runs_for(t: &Dtype, count: usize) -> R<(Vec<Unit>, usize)> {
    let mut runs = Vec::new();
    units(t, &mut runs, count)?;
    let native: usize = runs.iter().map(|u| u.native * u.count).sum();
    if native != count * t.size {
        return Err(fail(
            class::INTERN,
            format!(
                "external32: the basic elements of {} add up to {native} bytes, not {}",
                t.name,
                count * t.size
            ),
        ));
    }
    let ext = runs.iter().map(|u| u.ext * u.count).sum();
    Ok((runs, ext))
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
        let (_, ext) = runs_for(&t, n)?;
        // SAFETY: the caller's output argument.
        unsafe { put(size, ext as Aint) }
    }

    fn MPI_Pack_external / PMPI_Pack_external(datarep: *const c_char, inbuf: *const c_void, incount: c_int, datatype: H, outbuf: *mut c_void, outsize: Aint, position: *mut Aint) {
        // SAFETY: MPI: a C string.
        unsafe { check_rep(datarep)? };
        let n = count_of(incount, "incount")?;
        let t = { let rt = rt()?; committed(&rt, datatype)? };
        let (runs, need) = runs_for(&t, n)?;
        // SAFETY: the caller's in-out argument.
        let pos = unsafe { get(position)? };
        if pos < 0 || outsize < 0 || pos as usize + need > outsize as usize {
            return Err(fail(class::TRUNCATE, format!(
                "MPI_Pack_external: {need} bytes do not fit at position {pos} of a {outsize}-byte buffer")));
        }
        let mut native = vec![0u8; n * t.size];
        // SAFETY: MPI: inbuf holds incount elements of the type; outbuf outsize bytes.
        unsafe {
            t.pack(inbuf as *const u8, n, &mut native);
            let out = std::slice::from_raw_parts_mut((outbuf as *mut u8).add(pos as usize), need);
            to_external(&native, out, &runs)?;
            put(position, pos + need as Aint)
        }
    }

    fn MPI_Unpack_external / PMPI_Unpack_external(datarep: *const c_char, inbuf: *const c_void, insize: Aint, position: *mut Aint, outbuf: *mut c_void, outcount: c_int, datatype: H) {
        // SAFETY: MPI: a C string.
        unsafe { check_rep(datarep)? };
        let n = count_of(outcount, "outcount")?;
        let t = { let rt = rt()?; committed(&rt, datatype)? };
        let (runs, need) = runs_for(&t, n)?;
        // SAFETY: the caller's in-out argument.
        let pos = unsafe { get(position)? };
        if pos < 0 || insize < 0 || pos as usize + need > insize as usize {
            return Err(fail(class::TRUNCATE, format!(
                "MPI_Unpack_external: {need} bytes wanted at position {pos} of a {insize}-byte buffer")));
        }
        let mut native = vec![0u8; n * t.size];
        // SAFETY: MPI: inbuf holds insize bytes, outbuf outcount elements of the type.
        unsafe {
            let data = std::slice::from_raw_parts((inbuf as *const u8).add(pos as usize), need);
            from_external(data, &mut native, &runs);
            t.unpack(&native, outbuf as *mut u8, n);
            put(position, pos + need as Aint)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_narrow_to_four_bytes_and_widen_back_with_their_sign() {
        let runs = [Unit {
            count: 2,
            ..unit(8, 4, true)
        }];
        let mut native = Vec::new();
        native.extend_from_slice(&(-3i64).to_le_bytes());
        native.extend_from_slice(&0x11223344i64.to_le_bytes());
        let mut ext = [0u8; 8];
        to_external(&native, &mut ext, &runs).expect("fits");
        assert_eq!(ext, [0xff, 0xff, 0xff, 0xfd, 0x11, 0x22, 0x33, 0x44]);
        let mut back = [0u8; 16];
        from_external(&ext, &mut back, &runs);
        assert_eq!(&back[..], &native[..]);
    }

    #[test]
    fn a_long_too_large_for_external32_is_a_conversion_error_not_a_truncation() {
        let runs = [unit(8, 4, true)];
        let native = (1i64 << 40).to_le_bytes();
        let mut ext = [0u8; 4];
        let e = to_external(&native, &mut ext, &runs).expect_err("does not fit");
        assert_eq!(e.class, class::CONVERSION);
        let runs = [unit(8, 4, false)];
        let native = (u32::MAX as u64 + 1).to_le_bytes();
        assert!(to_external(&native, &mut ext, &runs).is_err());
    }
}
