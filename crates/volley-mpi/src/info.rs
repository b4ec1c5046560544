//! Info objects (MPI-3.1 section 9): ordered (key, value) strings. volley's MPI reads no hints
//! yet; the objects still behave as the standard says, for programs that pass them around.
//!
//! They live in a table of their own, not in the face's state: MPI-4.0 (section 11.2.1) lets a
//! program use them before MPI_Init and after MPI_Finalize, and a handle made before MPI_Init
//! stays good through it.

use crate::abi::{self, class, H};
use crate::err::{c_str, fail, get, put, put_str, R};
use crate::state::{handle, index, KIND_INFO};
use std::ffi::c_char;
use std::os::raw::c_int;
use volley_sys::{Exclusive, ExclusiveGuard};

pub type Info = Vec<(String, String)>;

/// Every info object the program made and has not freed, by handle index.
static INFOS: Exclusive<Vec<Option<Info>>> = Exclusive::new(Vec::new());

fn infos() -> R<ExclusiveGuard<'static, Vec<Option<Info>>>> {
    INFOS.try_borrow_mut().ok_or_else(|| {
        fail(
            class::OTHER,
            "two threads are inside MPI's info functions at once: volley's MPI provides MPI_THREAD_SERIALIZED at most",
        )
    })
}

fn key(k: *const c_char) -> R<String> {
    // SAFETY: MPI: a C string.
    let k = unsafe { c_str(k)? };
    if k.is_empty() || k.len() >= abi::MAX_INFO_KEY {
        return Err(fail(
            class::INFO_KEY,
            format!(
                "info key {k:?} is empty or longer than MPI_MAX_INFO_KEY - 1 ({})",
                abi::MAX_INFO_KEY - 1
            ),
        ));
    }
    Ok(k)
}

fn with<T>(h: H, f: impl FnOnce(&mut Info) -> R<T>) -> R<T> {
    if h == abi::INFO_ENV {
        let mut env = Info::new();
        return f(&mut env);
    }
    let i = index(KIND_INFO, h)
        .ok_or_else(|| fail(class::INFO, format!("{h:#x} is not an info handle")))?;
    let mut all = infos()?;
    let info = all.get_mut(i).and_then(|s| s.as_mut()).ok_or_else(|| {
        fail(
            class::INFO,
            format!("{h:#x} is not an info handle (freed?)"),
        )
    })?;
    f(info)
}

fn store(info: Info, out: *mut H) -> R {
    let i = crate::state::vacant(&mut *infos()?, info);
    // SAFETY: the caller's output argument.
    unsafe { put(out, handle(KIND_INFO, i)) }
}

crate::mpi! {
    fn MPI_Info_create / PMPI_Info_create(info: *mut H) {
        create(info)
    }

    fn MPI_Info_set / PMPI_Info_set(info: H, k: *const c_char, value: *const c_char) {
        let k = key(k)?;
        // SAFETY: MPI: a C string.
        let v = unsafe { c_str(value)? };
        if v.len() >= abi::MAX_INFO_VAL {
            return Err(fail(class::INFO_VALUE, format!("info value of {} bytes is longer than MPI_MAX_INFO_VAL - 1", v.len())));
        }
        with(info, |i| {
            match i.iter_mut().find(|e| e.0 == k) {
                Some(e) => e.1 = v,
                None => i.push((k, v)),
            }
            Ok(())
        })
    }

    fn MPI_Info_get / PMPI_Info_get(info: H, k: *const c_char, valuelen: c_int, value: *mut c_char, flag: *mut c_int) {
        let k = key(k)?;
        let v = with(info, |i| Ok(i.iter().find(|e| e.0 == k).map(|e| e.1.clone())))?;
        // SAFETY: the caller's arguments: value holds valuelen + 1 bytes.
        unsafe {
            put(flag, v.is_some() as c_int)?;
            if let Some(v) = v {
                let mut n = 0;
                put_str(value, valuelen.max(0) as usize + 1, &mut n, &v)?;
            }
        }
        Ok(())
    }

    // MPI-4.0 (10.3), the successor of MPI_Info_get and MPI_Info_get_valuelen in one call:
    // `buflen` in is the buffer's size; out, the value's length with its NUL, whether or not
    // it fitted (the value is cut to buflen - 1 characters).
    fn MPI_Info_get_string / PMPI_Info_get_string(info: H, k: *const c_char, buflen: *mut c_int, value: *mut c_char, flag: *mut c_int) {
        let k = key(k)?;
        let v = with(info, |i| Ok(i.iter().find(|e| e.0 == k).map(|e| e.1.clone())))?;
        // SAFETY: the caller's arguments: buflen is readable and writable, value holds *buflen
        // bytes.
        unsafe {
            put(flag, v.is_some() as c_int)?;
            if let Some(v) = v {
                let cap = get(buflen)?;
                if cap > 0 {
                    let mut n = 0;
                    put_str(value, cap as usize, &mut n, &v)?;
                }
                put(buflen, v.len() as c_int + 1)?;
            }
        }
        Ok(())
    }

    fn MPI_Info_get_valuelen / PMPI_Info_get_valuelen(info: H, k: *const c_char, valuelen: *mut c_int, flag: *mut c_int) {
        let k = key(k)?;
        let v = with(info, |i| Ok(i.iter().find(|e| e.0 == k).map(|e| e.1.len())))?;
        // SAFETY: the caller's output arguments.
        unsafe {
            put(flag, v.is_some() as c_int)?;
            if let Some(n) = v {
                put(valuelen, n as c_int)?;
            }
        }
        Ok(())
    }

    fn MPI_Info_delete / PMPI_Info_delete(info: H, k: *const c_char) {
        let k = key(k)?;
        with(info, |i| {
            let before = i.len();
            i.retain(|e| e.0 != k);
            if i.len() == before {
                return Err(fail(class::INFO_NOKEY, format!("info key {k:?} is not set")));
            }
            Ok(())
        })
    }

    fn MPI_Info_dup / PMPI_Info_dup(info: H, newinfo: *mut H) {
        let copy = with(info, |i| Ok(i.clone()))?;
        store(copy, newinfo)
    }

    fn MPI_Info_free / PMPI_Info_free(info: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(info)? };
        {
            let i = index(KIND_INFO, h).ok_or_else(|| fail(class::INFO, format!("{h:#x} is not an info handle made by MPI_Info_create or MPI_Info_dup")))?;
            infos()?.get_mut(i).and_then(|s| s.take()).ok_or_else(|| fail(class::INFO, format!("{h:#x} is not an info handle (freed already?)")))?;
        }
        // SAFETY: the caller's in-out argument.
        unsafe { put(info, abi::INFO_NULL) }
    }

    fn MPI_Info_create_env / PMPI_Info_create_env(argc: c_int, argv: *mut *mut c_char, info: *mut H) {
        // MPI-4.0 11.2.1: what the program was started with, the same before MPI_Init, while it
        // runs and after MPI_Finalize: the command and its arguments, how many processes the
        // launcher started (from its environment, so the same at every moment), the host and the
        // working directory.
        let mut pairs: Info = Vec::new();
        let args: Vec<String> = (0..argc.max(0) as usize)
            .map_while(|i| {
                // SAFETY: MPI: argv holds argc pointers (when not null).
                let p = unsafe { if argv.is_null() { std::ptr::null_mut() } else { *argv.add(i) } };
                // SAFETY: each a C string.
                (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
            })
            .collect();
        if let Some((command, rest)) = args.split_first() {
            pairs.push(("command".into(), command.clone()));
            if !rest.is_empty() {
                pairs.push(("argv".into(), rest.join(" ")));
            }
        }
        let size = [volley::launch::ENV_SIZE, "PMI_SIZE", "SLURM_NTASKS"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.trim().parse::<usize>().ok())
            .unwrap_or(1);
        pairs.push(("maxprocs".into(), size.to_string()));
        if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
            pairs.push(("host".into(), h.trim().to_string()));
        }
        if let Ok(d) = std::env::current_dir() {
            pairs.push(("wdir".into(), d.to_string_lossy().into_owned()));
        }
        store(pairs, info)
    }

    fn MPI_Info_get_nkeys / PMPI_Info_get_nkeys(info: H, nkeys: *mut c_int) {
        let n = with(info, |i| Ok(i.len()))?;
        // SAFETY: the caller's output argument.
        unsafe { put(nkeys, n as c_int) }
    }

    fn MPI_Info_get_nthkey / PMPI_Info_get_nthkey(info: H, n: c_int, k: *mut c_char) {
        let name = with(info, |i| {
            i.get(n.max(0) as usize).filter(|_| n >= 0).map(|e| e.0.clone()).ok_or_else(|| {
                fail(class::ARG, format!("key number {n} does not exist: the info has {} keys", i.len()))
            })
        })?;
        let mut len = 0;
        // SAFETY: MPI: k holds MPI_MAX_INFO_KEY bytes.
        unsafe { put_str(k, abi::MAX_INFO_KEY, &mut len, &name) }
    }
}

/// MPI_Info_create.
/// The value of `k` in info object `h` (None for MPI_INFO_NULL or a key not there).
pub(crate) fn value(h: H, k: &str) -> R<Option<String>> {
    if h == abi::INFO_NULL {
        return Ok(None);
    }
    with(h, |i| Ok(i.iter().find(|e| e.0 == k).map(|e| e.1.clone())))
}

/// Sets `k` to `v` in info object `h` (nothing for MPI_INFO_NULL).
pub(crate) fn set(h: H, k: &str, v: &str) -> R {
    if h == abi::INFO_NULL {
        return Ok(());
    }
    with(h, |i| {
        match i.iter_mut().find(|e| e.0 == k) {
            Some(e) => e.1 = v.to_owned(),
            None => i.push((k.to_owned(), v.to_owned())),
        }
        Ok(())
    })
}

/// The key-value pairs of info object `h`, in order.
pub(crate) fn pairs(h: H) -> R<Info> {
    with(h, |i| Ok(i.clone()))
}

pub(crate) fn create(info: *mut H) -> R {
    store(Info::new(), info)
}
