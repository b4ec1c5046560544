//! MPI_Pack_external, MPI_Unpack_external and MPI_Pack_external_size: the "external32" data
//! representation (MPI-3.1 sections 4.2 and 13.5.2), which every MPI reads alike: each basic
//! element big-endian, at the sizes of the standard's table 13.2. Most are the native sizes on
//! x86-64 Linux; MPI_LONG and MPI_UNSIGNED_LONG are 4 bytes there (8 here) and MPI_WCHAR 2 (4
//! here), so those are narrowed on the way out (a value that does not fit is
//! MPI_ERR_CONVERSION, nothing is truncated silently) and widened on the way in. A complex
//! number is two reals, each big-endian on its own; a pair type (MPI_DOUBLE_INT...) its value
//! and its int. long double is x87's 80-bit format here and a 16-byte IEEE quad in external32:
//! it is converted both ways (exactly out; back in, rounded to nearest to x87's 64-bit
//! significand).

use crate::abi::{self, class, Aint, H};
use crate::dtype::{committed, predefined, Basic, Dtype};
use crate::err::{fail, get, put, R};
use crate::state::rt;
use std::ffi::{c_char, c_void};
use std::os::raw::c_int;

/// A run of basic elements in typemap order: `count` of them, each `native` bytes here and
/// `ext` bytes in external32, an integer that is `signed` (where the sizes differ), or an x87
/// long double (`x87`: 16 bytes both sides, converted to and from an IEEE quad).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Unit {
    native: usize,
    ext: usize,
    signed: bool,
    x87: bool,
    count: usize,
}

const fn unit(native: usize, ext: usize, signed: bool) -> Unit {
    Unit {
        native,
        ext,
        signed,
        x87: false,
        count: 1,
    }
}

const LONG_DOUBLE: Unit = Unit {
    native: 16,
    ext: 16,
    signed: false,
    x87: true,
    count: 1,
};

/// An x87 extended value (its 16 bytes as stored here: 64-bit significand with the integer bit,
/// then sign and 15-bit exponent, then padding) as an IEEE binary128, big-endian. Exact: the same
/// exponent and bias, the 63 fraction bits at the top of the 112.
fn x87_to_quad(src: &[u8], dst: &mut [u8]) {
    let mant = u64::from_le_bytes(src[..8].try_into().expect("8 bytes"));
    let se = u16::from_le_bytes(src[8..10].try_into().expect("2 bytes"));
    let frac = ((mant & !(1u64 << 63)) as u128) << 49;
    let q = ((se as u128) << 112) | frac;
    dst.copy_from_slice(&q.to_be_bytes());
}

/// An IEEE binary128 (big-endian) as an x87 extended value, its fraction rounded to nearest
/// (even on a tie) to 63 bits.
fn quad_to_x87(src: &[u8], dst: &mut [u8]) {
    let q = u128::from_be_bytes(src.try_into().expect("16 bytes"));
    let sign = (q >> 127) as u16;
    let mut exp = ((q >> 112) & 0x7fff) as u16;
    let frac = q & ((1u128 << 112) - 1);
    let mut m = (frac >> 49) as u64;
    if exp == 0x7fff {
        // Infinity, or a NaN whose payload must not round away to an infinity.
        if frac != 0 && m == 0 {
            m = 1 << 62;
        }
    } else {
        let rest = frac & ((1u128 << 49) - 1);
        let half = 1u128 << 48;
        if rest > half || (rest == half && m & 1 == 1) {
            m += 1;
            if m == 1 << 63 {
                // The fraction overflowed into the integer bit: the next binade.
                m = 0;
                exp += 1;
            }
        }
    }
    let int = if exp != 0 { 1u64 << 63 } else { 0 };
    dst[..8].copy_from_slice(&(int | m).to_le_bytes());
    dst[8..10].copy_from_slice(&((sign << 15) | exp).to_le_bytes());
    dst[10..16].fill(0);
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
            (_, LongDouble) => &[LONG_DOUBLE],
            (_, LongDoubleComplex) => &[LONG_DOUBLE, LONG_DOUBLE],
            (_, LongDoubleInt) => &[LONG_DOUBLE, unit(4, 4, false)],
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
        Some(l) if (l.native, l.ext, l.signed, l.x87) == (u.native, u.ext, u.signed, u.x87) => {
            l.count += u.count
        }
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
            if u.x87 {
                x87_to_quad(src, dst);
            } else if u.native == u.ext {
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
            if u.x87 {
                quad_to_x87(src, dst);
            } else if u.native == u.ext {
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

/// Files in "external32" (`io`): whether every basic element of `t` has the same size in
/// external32 as here (then a view's layout is the same in both, and only byte order and the
/// long double format change).
pub(crate) fn same_layout(t: &Dtype) -> R<bool> {
    let mut runs = Vec::new();
    units(t, &mut runs, 1)?;
    Ok(runs.iter().all(|u| u.native == u.ext))
}

/// The bytes one element of `t` takes in external32.
pub(crate) fn ext32_size(t: &Dtype) -> R<usize> {
    Ok(runs_for(t, 1)?.1)
}

/// `count` elements of `t`, packed here, in external32 (`out` as long as `native`; the caller
/// has checked `same_layout`).
pub(crate) fn to_ext32(t: &Dtype, count: usize, native: &[u8], out: &mut [u8]) -> R {
    let (runs, _) = runs_for(t, count)?;
    to_external(native, out, &runs)
}

/// The other way.
pub(crate) fn from_ext32(t: &Dtype, count: usize, ext: &[u8], out: &mut [u8]) -> R {
    let (runs, _) = runs_for(t, count)?;
    from_external(ext, out, &runs);
    Ok(())
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
    fn long_double_goes_out_as_an_ieee_quad_and_comes_back_exactly() {
        // 1.5 in x87: significand 0xC000..., exponent 0x3fff; in binary128: exponent 0x3fff,
        // fraction 0x8000... (the .5).
        let mut x = [0u8; 16];
        x[..8].copy_from_slice(&0xC000_0000_0000_0000u64.to_le_bytes());
        x[8..10].copy_from_slice(&0x3fffu16.to_le_bytes());
        let mut q = [0u8; 16];
        x87_to_quad(&x, &mut q);
        assert_eq!(u128::from_be_bytes(q), (0x3fffu128 << 112) | (1u128 << 111));
        let mut back = [0u8; 16];
        quad_to_x87(&q, &mut back);
        assert_eq!(back, x);
        // -0.0, an infinity and a denormal survive the round trip too.
        for (m, se) in [(0u64, 0x8000u16), (1u64 << 63, 0x7fff), (5, 0)] {
            x[..8].copy_from_slice(&m.to_le_bytes());
            x[8..10].copy_from_slice(&se.to_le_bytes());
            x87_to_quad(&x, &mut q);
            quad_to_x87(&q, &mut back);
            assert_eq!(back, x, "{m:#x} {se:#x}");
        }
    }

    #[test]
    fn a_quad_rounds_to_nearest_into_x87() {
        // 1 + 2^-63 + 2^-64 (a tie above the last x87 bit, odd) rounds up to 1 + 2^-62.
        let q = (0x3fffu128 << 112) | (1u128 << 49) | (1u128 << 48);
        let mut x = [0u8; 16];
        quad_to_x87(&q.to_be_bytes(), &mut x);
        assert_eq!(
            u64::from_le_bytes(x[..8].try_into().unwrap()),
            (1 << 63) | 2
        );
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
