//! MPI_T, the tool information interface (MPI-3.1 chapter 14): what a performance tool reads of
//! volley without knowing it.
//!
//! - **Control variables** are volley's settings, named by their environment variables
//!   (`VOLLEY_WAIT`, `VOLLEY_EAGER_BYTES`, ...): read-only strings (MPI_CHAR), the value in force
//!   and where it came from, as `volley info` shows them. They are fixed when MPI_Init reads the
//!   environment (and the machine's profile): before it, and after MPI_Finalize, a read is
//!   MPI_T_ERR_NOT_ACCESSIBLE.
//! - **Performance variables** are volley's counters (`volley run --counters` prints the same):
//!   class COUNTER, MPI_UNSIGNED_LONG_LONG, continuous (always counting: no start or stop),
//!   read-only. A handle reads what the counter moved since the handle was allocated (a counter's
//!   starting value is 0, MPI-3.1 14.3.7).
//! - **Categories**: `volley_settings` holds the control variables, `volley_counters` the
//!   performance variables.
//!
//! MPI_T functions return their error classes and call no error handler (MPI-3.1 14.3.10); they
//! work before MPI_Init and after MPI_Finalize, between MPI_T_init_thread and MPI_T_finalize.

use crate::abi::H;
use std::ffi::c_char;
use std::os::raw::{c_int, c_void};
use volley_sys::Exclusive;

/// MPI_T's error classes (the MPI-5.0 ABI's values).
pub mod terr {
    use std::os::raw::c_int;
    pub const SUCCESS: c_int = 0;
    pub const NOT_ACCESSIBLE: c_int = 1001;
    pub const NOT_INITIALIZED: c_int = 1002;
    pub const INVALID: c_int = 1005;
    pub const INVALID_INDEX: c_int = 1006;
    pub const INVALID_SESSION: c_int = 1008;
    pub const INVALID_HANDLE: c_int = 1009;
    pub const INVALID_NAME: c_int = 1010;
    pub const CVAR_SET_NEVER: c_int = 1014;
    pub const PVAR_NO_WRITE: c_int = 1015;
    pub const PVAR_NO_STARTSTOP: c_int = 1016;
    pub const FIRST: c_int = 1000;
    pub const LAST: c_int = 1017;
}

/// The text of an MPI_T error class.
pub fn describe(class: c_int) -> Option<&'static str> {
    Some(match class {
        1000 => "the MPI tool interface cannot be initialised (MPI_T_ERR_CANNOT_INIT)",
        1001 => "the variable cannot be read now: volley's settings and counters exist between MPI_Init and MPI_Finalize (MPI_T_ERR_NOT_ACCESSIBLE)",
        1002 => "the MPI tool interface is not initialised: call MPI_T_init_thread first (MPI_T_ERR_NOT_INITIALIZED)",
        1003 => "not supported by the MPI tool interface (MPI_T_ERR_NOT_SUPPORTED)",
        1004 => "out of memory (MPI_T_ERR_MEMORY)",
        1005 => "invalid argument to an MPI tool function (MPI_T_ERR_INVALID)",
        1006 => "invalid variable or category index (MPI_T_ERR_INVALID_INDEX)",
        1007 => "invalid enumeration item (MPI_T_ERR_INVALID_ITEM)",
        1008 => "invalid performance variable session (MPI_T_ERR_INVALID_SESSION)",
        1009 => "invalid handle (MPI_T_ERR_INVALID_HANDLE)",
        1010 => "no variable or category of that name (MPI_T_ERR_INVALID_NAME)",
        1011 => "out of handles (MPI_T_ERR_OUT_OF_HANDLES)",
        1012 => "out of sessions (MPI_T_ERR_OUT_OF_SESSIONS)",
        1013 => "the control variable cannot be set now (MPI_T_ERR_CVAR_SET_NOT_NOW)",
        1014 => "volley's settings are read-only: set their environment variables before the job starts (MPI_T_ERR_CVAR_SET_NEVER)",
        1015 => "volley's counters are read-only (MPI_T_ERR_PVAR_NO_WRITE)",
        1016 => "volley's counters always count: they cannot be started or stopped (MPI_T_ERR_PVAR_NO_STARTSTOP)",
        1017 => "the performance variable cannot be read and reset at once (MPI_T_ERR_PVAR_NO_ATOMIC)",
        _ => return None,
    })
}

/// The settings shown as control variables: the environment variable and what it sets. Every one
/// is among the settings `volley::Config` reports (`sources`; a unit test holds them to it).
const CVARS: &[(&str, &str)] = &[
    ("VOLLEY_PROGRESS_THREAD", "1 when a progress thread moves transfers on while the rank computes"),
    ("VOLLEY_WAIT", "how a blocked call waits: busy-polling, blocking, or spinning then blocking (the default)"),
    ("VOLLEY_SPIN_US", "the longest a waiting call spins before it sleeps, in microseconds"),
    ("VOLLEY_SHM_RING_BYTES", "bytes of each shared-memory ring (one per ordered pair of ranks of a host)"),
    ("VOLLEY_SHM_RECORD_BYTES", "the largest record in a ring; larger messages are fragmented"),
    ("VOLLEY_OVERSUBSCRIBED", "1 when the host runs more ranks than it has CPUs (waits then give the CPU away)"),
    ("VOLLEY_YIELD_EVERY", "a spinning wait gives its CPU away every this many passes"),
    ("VOLLEY_SPIN_OVERSUBSCRIBED_US", "with more ranks than CPUs, the longest a waiting call spins before it sleeps, in microseconds"),
    ("VOLLEY_MEMBARRIER", "whether a rank about to sleep makes the other CPUs execute a barrier, so senders need no fence per message"),
    ("VOLLEY_SHM_SUMMARY", "whether receives find their messages through the ready summary instead of every peer's ring"),
    ("VOLLEY_NUMA", "whether rings and collective slots are placed on their rank's NUMA node"),
    ("VOLLEY_SHM_DIR", "where the job segment lives (an anonymous memfd by default)"),
    ("VOLLEY_SINGLE_COPY", "whether large messages inside a host may go by single copy (process_vm_readv)"),
    ("VOLLEY_SINGLE_COPY_HELP", "whether a sender waiting for its single-copy rendezvous helps its receiver copy"),
    ("VOLLEY_SINGLE_COPY_HELP_FROM", "the smallest message, in bytes, whose sender helps copy"),
    ("VOLLEY_PROFILE", "the machine's transfer-mode profile in force (`volley tune` writes it) and where it was looked for"),
    ("VOLLEY_SINGLE_COPY_THRESHOLD", "the smallest message, in bytes, that goes by single copy"),
    ("VOLLEY_SINGLE_COPY_MAX", "the largest message, in bytes, that goes by single copy"),
    ("VOLLEY_UNEXPECTED_BYTES", "bytes of unexpected messages a rank may take out of full rings before their senders wait"),
    ("VOLLEY_EAGER_BYTES", "the largest message sent eagerly inside a host; a larger one goes by rendezvous"),
];

/// Characters a control variable's value may take, its NUL included: what a buffer for
/// MPI_T_cvar_read holds (the `count` MPI_T_cvar_handle_alloc gives).
const CVAR_CHARS: usize = 256;

const CATEGORIES: &[(&str, &str)] = &[
    (
        "volley_settings",
        "volley's settings, by environment variable (as `volley info` shows them)",
    ),
    (
        "volley_counters",
        "volley's counters (as `volley run --counters` prints them)",
    ),
];

/// The datatypes MPI_T reports (mpi.h's handles).
const MPI_CHAR: H = 0x243;
const MPI_UNSIGNED_LONG_LONG: H = 0x20f;

const VERBOSITY_USER_DETAIL: c_int = 1;
const VERBOSITY_TUNER_BASIC: c_int = 3;
const BIND_NO_OBJECT: c_int = 0;
const SCOPE_READONLY: c_int = 1;
const PVAR_CLASS_COUNTER: c_int = 6;
/// MPI_T_PVAR_ALL_HANDLES.
const ALL_HANDLES: usize = 1;

/// Live sessions and handles; handles are small numbers (0 is the null handle, and 1 for a
/// performance variable handle is MPI_T_PVAR_ALL_HANDLES).
#[derive(Default)]
struct Tool {
    /// MPI_T_init_thread calls not yet matched by MPI_T_finalize.
    inits: usize,
    /// Control variable handles: the variable's index.
    cvar_handles: Vec<Option<usize>>,
    /// Sessions: live or not.
    sessions: Vec<bool>,
    /// Performance variable handles: (session, variable, the counter's value at allocation).
    pvar_handles: Vec<Option<(usize, usize, u64)>>,
}

static TOOL: Exclusive<Option<Tool>> = Exclusive::new(None);

type T<V> = Result<V, c_int>;

/// Runs `f` with the interface's state, once initialised.
fn with<V>(f: impl FnOnce(&mut Tool) -> T<V>) -> T<V> {
    let mut g = TOOL.try_borrow_mut().ok_or(terr::INVALID)?;
    match g.as_mut() {
        Some(t) if t.inits > 0 => f(t),
        _ => Err(terr::NOT_INITIALIZED),
    }
}

fn initialised() -> T<()> {
    with(|_| Ok(()))
}

/// The counters' names, units and meanings, in table order.
fn pvars() -> &'static [volley::CounterInfo] {
    static TABLE: std::sync::OnceLock<Vec<volley::CounterInfo>> = std::sync::OnceLock::new();
    TABLE.get_or_init(volley::counter_table)
}

fn pvar_names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| pvars().iter().map(|c| c.display_name()).collect())
}

fn pvar_desc(i: usize) -> String {
    let c = &pvars()[i];
    format!("{} ({})", c.description, c.unit)
}

/// The counters' values now, while MPI runs.
fn counter_values() -> T<Vec<u64>> {
    let rt = crate::state::rt().map_err(|_| terr::NOT_ACCESSIBLE)?;
    Ok(rt.world.counter_values())
}

/// A control variable's value and where it came from, while MPI runs.
fn cvar_value(i: usize) -> T<String> {
    let rt = crate::state::rt().map_err(|_| terr::NOT_ACCESSIBLE)?;
    let name = CVARS[i].0;
    rt.world
        .config()
        .sources
        .iter()
        .find(|s| s.0 == name)
        .map(|(_, v, from)| format!("{v} ({from})"))
        .ok_or(terr::NOT_ACCESSIBLE)
}

/// Writes `s` for an MPI_T (string, length) pair (MPI-3.1 14.3.3): with no length, nothing; with
/// no buffer or a length of 0, the length the whole string needs, its NUL included; else as much
/// as fits with a NUL, and the characters written, the NUL included.
///
/// # Safety
/// `buf`, where not null, holds `*len` bytes; `len` is null or valid.
unsafe fn put_tstr(buf: *mut c_char, len: *mut c_int, s: &str) {
    if len.is_null() {
        return;
    }
    // SAFETY: len is valid (the caller's contract) and not null.
    let cap = unsafe { *len };
    if buf.is_null() || cap <= 0 {
        // SAFETY: as above.
        unsafe { *len = s.len() as c_int + 1 };
        return;
    }
    let n = s.len().min(cap as usize - 1);
    // SAFETY: buf holds cap > n bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
        *len = n as c_int + 1;
    }
}

/// Stores `v` at `p` where `p` is not null (MPI_T's optional outputs).
///
/// # Safety
/// `p` is null or valid for a write.
unsafe fn opt<V>(p: *mut V, v: V) {
    if !p.is_null() {
        // SAFETY: the caller's contract.
        unsafe { p.write(v) };
    }
}

/// Stores `v` at `p`, which must not be null.
///
/// # Safety
/// `p` is null or valid for a write.
unsafe fn out<V>(p: *mut V, v: V) -> T<()> {
    if p.is_null() {
        return Err(terr::INVALID);
    }
    // SAFETY: the caller's contract, and not null.
    unsafe { p.write(v) };
    Ok(())
}

/// The caller's name argument.
///
/// # Safety
/// `p` is null or a C string.
unsafe fn name_arg(p: *const c_char) -> T<String> {
    if p.is_null() {
        return Err(terr::INVALID);
    }
    // SAFETY: a valid C string by the caller's contract.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned())
}

fn index_of(i: c_int, n: usize) -> T<usize> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < n)
        .ok_or(terr::INVALID_INDEX)
}

/// Copies the indices `0..n`, at most `len` of them, to `out`.
///
/// # Safety
/// `out` holds `len` ints (or is null with `len` 0).
unsafe fn indices(len: c_int, out: *mut c_int, n: usize) -> T<()> {
    let k = (len.max(0) as usize).min(n);
    if k > 0 && out.is_null() {
        return Err(terr::INVALID);
    }
    for i in 0..k {
        // SAFETY: out holds len >= k ints.
        unsafe { *out.add(i) = i as c_int };
    }
    Ok(())
}

/// A free place for `v` in `table`, and its index.
fn slot<V>(table: &mut Vec<Option<V>>, v: V) -> usize {
    crate::state::vacant(table, v)
}

/// Defines an exported MPI_T function and its PMPI twin; the body returns `T<()>` and its error
/// is the function's return value (no error handler runs for MPI_T).
macro_rules! tool {
    ($(
        fn $name:ident / $pname:ident ( $($a:ident : $t:ty),* $(,)? ) $body:block
    )*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> c_int {
            #[allow(clippy::redundant_closure_call)]
            let r: T<()> = (|| $body)();
            r.err().unwrap_or(terr::SUCCESS)
        }
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            // SAFETY: the same contract as the caller's, passed on unchanged.
            unsafe { $pname($($a),*) }
        }
    )*};
}

tool! {
    fn MPI_T_init_thread / PMPI_T_init_thread(required: c_int, provided: *mut c_int) {
        {
            let mut g = TOOL.try_borrow_mut().ok_or(terr::INVALID)?;
            g.get_or_insert_with(Tool::default).inits += 1;
        }
        // What the MPI face provides: at most MPI_THREAD_SERIALIZED (2).
        // SAFETY: the caller's output argument.
        unsafe { out(provided, required.clamp(0, 2)) }
    }

    fn MPI_T_finalize / PMPI_T_finalize() {
        let mut g = TOOL.try_borrow_mut().ok_or(terr::INVALID)?;
        match g.as_mut() {
            Some(t) if t.inits > 0 => {
                t.inits -= 1;
                if t.inits == 0 {
                    // Handles and sessions end with the interface (MPI-3.1 14.3.4).
                    *t = Tool::default();
                }
                Ok(())
            }
            _ => Err(terr::NOT_INITIALIZED),
        }
    }

    fn MPI_T_enum_get_info / PMPI_T_enum_get_info(_enumtype: *mut c_void, _num: *mut c_int, _name: *mut c_char, _name_len: *mut c_int) {
        // No variable of volley's is an enumeration: every enumeration handle is invalid.
        initialised()?;
        Err(terr::INVALID_HANDLE)
    }

    fn MPI_T_enum_get_item / PMPI_T_enum_get_item(_enumtype: *mut c_void, _index: c_int, _value: *mut c_int, _name: *mut c_char, _name_len: *mut c_int) {
        initialised()?;
        Err(terr::INVALID_HANDLE)
    }

    fn MPI_T_cvar_get_num / PMPI_T_cvar_get_num(num_cvar: *mut c_int) {
        initialised()?;
        // SAFETY: the caller's output argument.
        unsafe { out(num_cvar, CVARS.len() as c_int) }
    }

    fn MPI_T_cvar_get_info / PMPI_T_cvar_get_info(cvar_index: c_int, name: *mut c_char, name_len: *mut c_int, verbosity: *mut c_int, datatype: *mut H, enumtype: *mut *mut c_void, desc: *mut c_char, desc_len: *mut c_int, binding: *mut c_int, scope: *mut c_int) {
        initialised()?;
        let (n, d) = CVARS[index_of(cvar_index, CVARS.len())?];
        // SAFETY: the caller's arguments, each null or valid.
        unsafe {
            put_tstr(name, name_len, n);
            put_tstr(desc, desc_len, d);
            opt(verbosity, VERBOSITY_TUNER_BASIC);
            opt(datatype, MPI_CHAR);
            opt(enumtype, std::ptr::null_mut());
            opt(binding, BIND_NO_OBJECT);
            opt(scope, SCOPE_READONLY);
        }
        Ok(())
    }

    fn MPI_T_cvar_get_index / PMPI_T_cvar_get_index(name: *const c_char, cvar_index: *mut c_int) {
        initialised()?;
        // SAFETY: the caller's C string.
        let n = unsafe { name_arg(name)? };
        let i = CVARS.iter().position(|c| c.0 == n).ok_or(terr::INVALID_NAME)?;
        // SAFETY: the caller's output argument.
        unsafe { out(cvar_index, i as c_int) }
    }

    fn MPI_T_cvar_handle_alloc / PMPI_T_cvar_handle_alloc(cvar_index: c_int, _obj_handle: *mut c_void, handle: *mut usize, count: *mut c_int) {
        let i = index_of(cvar_index, CVARS.len());
        let h = with(|t| {
            let i = i?;
            Ok(slot(&mut t.cvar_handles, i) + 1)
        })?;
        // SAFETY: the caller's output arguments.
        unsafe {
            out(handle, h)?;
            out(count, CVAR_CHARS as c_int)
        }
    }

    fn MPI_T_cvar_handle_free / PMPI_T_cvar_handle_free(handle: *mut usize) {
        if handle.is_null() {
            return Err(terr::INVALID);
        }
        // SAFETY: the caller's in-out argument, not null.
        let h = unsafe { *handle };
        with(|t| {
            h.checked_sub(1)
                .and_then(|k| t.cvar_handles.get_mut(k))
                .and_then(Option::take)
                .ok_or(terr::INVALID_HANDLE)
        })?;
        // SAFETY: as above.
        unsafe { *handle = 0 };
        Ok(())
    }

    fn MPI_T_cvar_read / PMPI_T_cvar_read(handle: usize, buf: *mut c_void) {
        let i = with(|t| {
            handle
                .checked_sub(1)
                .and_then(|k| t.cvar_handles.get(k).copied().flatten())
                .ok_or(terr::INVALID_HANDLE)
        })?;
        if buf.is_null() {
            return Err(terr::INVALID);
        }
        let v = cvar_value(i)?;
        let mut n = CVAR_CHARS as c_int;
        // SAFETY: MPI-3.1 14.3.6: buf holds `count` (CVAR_CHARS) elements of the variable's
        // datatype, chars here.
        unsafe { put_tstr(buf as *mut c_char, &mut n, &v) };
        Ok(())
    }

    fn MPI_T_cvar_write / PMPI_T_cvar_write(handle: usize, _buf: *const c_void) {
        with(|t| {
            handle
                .checked_sub(1)
                .and_then(|k| t.cvar_handles.get(k).copied().flatten())
                .ok_or(terr::INVALID_HANDLE)
        })?;
        Err(terr::CVAR_SET_NEVER)
    }

    fn MPI_T_pvar_get_num / PMPI_T_pvar_get_num(num_pvar: *mut c_int) {
        initialised()?;
        // SAFETY: the caller's output argument.
        unsafe { out(num_pvar, pvars().len() as c_int) }
    }

    fn MPI_T_pvar_get_info / PMPI_T_pvar_get_info(pvar_index: c_int, name: *mut c_char, name_len: *mut c_int, verbosity: *mut c_int, var_class: *mut c_int, datatype: *mut H, enumtype: *mut *mut c_void, desc: *mut c_char, desc_len: *mut c_int, binding: *mut c_int, readonly: *mut c_int, continuous: *mut c_int, atomic: *mut c_int) {
        initialised()?;
        let i = index_of(pvar_index, pvars().len())?;
        // SAFETY: the caller's arguments, each null or valid.
        unsafe {
            put_tstr(name, name_len, &pvar_names()[i]);
            put_tstr(desc, desc_len, &pvar_desc(i));
            opt(verbosity, VERBOSITY_USER_DETAIL);
            opt(var_class, PVAR_CLASS_COUNTER);
            opt(datatype, MPI_UNSIGNED_LONG_LONG);
            opt(enumtype, std::ptr::null_mut());
            opt(binding, BIND_NO_OBJECT);
            opt(readonly, 1);
            opt(continuous, 1);
            opt(atomic, 0);
        }
        Ok(())
    }

    fn MPI_T_pvar_get_index / PMPI_T_pvar_get_index(name: *const c_char, var_class: c_int, pvar_index: *mut c_int) {
        initialised()?;
        // SAFETY: the caller's C string.
        let n = unsafe { name_arg(name)? };
        let i = pvar_names()
            .iter()
            .position(|p| *p == n)
            .filter(|_| var_class == PVAR_CLASS_COUNTER)
            .ok_or(terr::INVALID_NAME)?;
        // SAFETY: the caller's output argument.
        unsafe { out(pvar_index, i as c_int) }
    }

    fn MPI_T_pvar_session_create / PMPI_T_pvar_session_create(session: *mut usize) {
        let s = with(|t| {
            t.sessions.push(true);
            Ok(t.sessions.len())
        })?;
        // SAFETY: the caller's output argument.
        unsafe { out(session, s) }
    }

    fn MPI_T_pvar_session_free / PMPI_T_pvar_session_free(session: *mut usize) {
        if session.is_null() {
            return Err(terr::INVALID);
        }
        // SAFETY: the caller's in-out argument, not null.
        let s = unsafe { *session };
        with(|t| {
            let k = live_session(t, s)?;
            t.sessions[k] = false;
            // Its handles go with it.
            for h in t.pvar_handles.iter_mut() {
                if h.is_some_and(|(hs, _, _)| hs == k) {
                    *h = None;
                }
            }
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { *session = 0 };
        Ok(())
    }

    fn MPI_T_pvar_handle_alloc / PMPI_T_pvar_handle_alloc(session: usize, pvar_index: c_int, _obj_handle: *mut c_void, handle: *mut usize, count: *mut c_int) {
        let i = index_of(pvar_index, pvars().len());
        // Before MPI_Init (or after MPI_Finalize) the counters stand at 0.
        let base = match i {
            Ok(i) => counter_values().ok().and_then(|v| v.get(i).copied()).unwrap_or(0),
            Err(_) => 0,
        };
        let h = with(|t| {
            let k = live_session(t, session)?;
            let i = i?;
            // Handle numbers start at 2: 1 is MPI_T_PVAR_ALL_HANDLES.
            Ok(slot(&mut t.pvar_handles, (k, i, base)) + 2)
        })?;
        // SAFETY: the caller's output arguments.
        unsafe {
            out(handle, h)?;
            out(count, 1)
        }
    }

    fn MPI_T_pvar_handle_free / PMPI_T_pvar_handle_free(session: usize, handle: *mut usize) {
        if handle.is_null() {
            return Err(terr::INVALID);
        }
        // SAFETY: the caller's in-out argument, not null.
        let h = unsafe { *handle };
        with(|t| {
            let k = live_session(t, session)?;
            let slot = pvar_slot(t, k, h)?;
            t.pvar_handles[slot] = None;
            Ok(())
        })?;
        // SAFETY: as above.
        unsafe { *handle = 0 };
        Ok(())
    }

    fn MPI_T_pvar_start / PMPI_T_pvar_start(session: usize, handle: usize) {
        start_stop(session, handle)
    }

    fn MPI_T_pvar_stop / PMPI_T_pvar_stop(session: usize, handle: usize) {
        start_stop(session, handle)
    }

    fn MPI_T_pvar_read / PMPI_T_pvar_read(session: usize, handle: usize, buf: *mut c_void) {
        let (i, base) = with(|t| {
            let k = live_session(t, session)?;
            if handle == ALL_HANDLES {
                return Err(terr::INVALID_HANDLE);
            }
            let (_, i, base) = t.pvar_handles[pvar_slot(t, k, handle)?].expect("live");
            Ok((i, base))
        })?;
        if buf.is_null() {
            return Err(terr::INVALID);
        }
        let now = counter_values().map(|v| v[i]).unwrap_or(base);
        // SAFETY: MPI-3.1 14.3.7: buf holds `count` (1) elements of the variable's datatype,
        // an unsigned long long.
        unsafe { (buf as *mut u64).write_unaligned(now.wrapping_sub(base)) };
        Ok(())
    }

    fn MPI_T_pvar_write / PMPI_T_pvar_write(session: usize, handle: usize, _buf: *const c_void) {
        check_handle(session, handle)?;
        Err(terr::PVAR_NO_WRITE)
    }

    fn MPI_T_pvar_reset / PMPI_T_pvar_reset(session: usize, handle: usize) {
        check_handle(session, handle)?;
        // Every variable is read-only: MPI_T_PVAR_ALL_HANDLES resets none of them, which is
        // not an error (MPI-3.1 14.3.7); one handle is.
        if handle == ALL_HANDLES { Ok(()) } else { Err(terr::PVAR_NO_WRITE) }
    }

    fn MPI_T_pvar_readreset / PMPI_T_pvar_readreset(session: usize, handle: usize, _buf: *mut c_void) {
        if handle == ALL_HANDLES {
            return Err(terr::INVALID_HANDLE);
        }
        check_handle(session, handle)?;
        Err(terr::PVAR_NO_WRITE)
    }

    fn MPI_T_category_get_num / PMPI_T_category_get_num(num_cat: *mut c_int) {
        initialised()?;
        // SAFETY: the caller's output argument.
        unsafe { out(num_cat, CATEGORIES.len() as c_int) }
    }

    fn MPI_T_category_get_info / PMPI_T_category_get_info(cat_index: c_int, name: *mut c_char, name_len: *mut c_int, desc: *mut c_char, desc_len: *mut c_int, num_cvars: *mut c_int, num_pvars: *mut c_int, num_categories: *mut c_int) {
        initialised()?;
        let c = index_of(cat_index, CATEGORIES.len())?;
        let (n, d) = CATEGORIES[c];
        let (cv, pv) = if c == 0 { (CVARS.len(), 0) } else { (0, pvars().len()) };
        // SAFETY: the caller's arguments, each null or valid.
        unsafe {
            put_tstr(name, name_len, n);
            put_tstr(desc, desc_len, d);
            opt(num_cvars, cv as c_int);
            opt(num_pvars, pv as c_int);
            opt(num_categories, 0);
        }
        Ok(())
    }

    fn MPI_T_category_get_index / PMPI_T_category_get_index(name: *const c_char, cat_index: *mut c_int) {
        initialised()?;
        // SAFETY: the caller's C string.
        let n = unsafe { name_arg(name)? };
        let i = CATEGORIES.iter().position(|c| c.0 == n).ok_or(terr::INVALID_NAME)?;
        // SAFETY: the caller's output argument.
        unsafe { out(cat_index, i as c_int) }
    }

    fn MPI_T_category_get_cvars / PMPI_T_category_get_cvars(cat_index: c_int, len: c_int, out_: *mut c_int) {
        initialised()?;
        let c = index_of(cat_index, CATEGORIES.len())?;
        // SAFETY: MPI: out_ holds len ints.
        unsafe { indices(len, out_, if c == 0 { CVARS.len() } else { 0 }) }
    }

    fn MPI_T_category_get_pvars / PMPI_T_category_get_pvars(cat_index: c_int, len: c_int, out_: *mut c_int) {
        initialised()?;
        let c = index_of(cat_index, CATEGORIES.len())?;
        // SAFETY: MPI: out_ holds len ints.
        unsafe { indices(len, out_, if c == 1 { pvars().len() } else { 0 }) }
    }

    fn MPI_T_category_get_categories / PMPI_T_category_get_categories(cat_index: c_int, _len: c_int, _out: *mut c_int) {
        initialised()?;
        // No category holds another.
        index_of(cat_index, CATEGORIES.len()).map(|_| ())
    }

    fn MPI_T_category_changed / PMPI_T_category_changed(stamp: *mut c_int) {
        initialised()?;
        // The categories never change.
        // SAFETY: the caller's output argument.
        unsafe { out(stamp, 0) }
    }
}

/// The index of live session `s` (a handle: index + 1).
fn live_session(t: &Tool, s: usize) -> T<usize> {
    s.checked_sub(1)
        .filter(|&k| t.sessions.get(k) == Some(&true))
        .ok_or(terr::INVALID_SESSION)
}

/// The slot of performance variable handle `h` of session `k`.
fn pvar_slot(t: &Tool, k: usize, h: usize) -> T<usize> {
    h.checked_sub(2)
        .filter(|&i| {
            t.pvar_handles
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|(s, _, _)| s == k)
        })
        .ok_or(terr::INVALID_HANDLE)
}

/// A live handle of a live session (or MPI_T_PVAR_ALL_HANDLES).
fn check_handle(session: usize, handle: usize) -> T<()> {
    with(|t| {
        let k = live_session(t, session)?;
        if handle != ALL_HANDLES {
            pvar_slot(t, k, handle)?;
        }
        Ok(())
    })
}

/// MPI_T_pvar_start and stop: every variable is continuous, so one handle is an error and all
/// handles of the session is nothing to do (MPI-3.1 14.3.7).
fn start_stop(session: usize, handle: usize) -> T<()> {
    check_handle(session, handle)?;
    if handle == ALL_HANDLES {
        Ok(())
    } else {
        Err(terr::PVAR_NO_STARTSTOP)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_control_variable_is_a_setting_volley_reports() {
        let cfg = volley::Config::from_env(2).expect("the default settings");
        for (name, _) in CVARS {
            assert!(
                cfg.sources.iter().any(|s| s.0 == *name),
                "{name} is not among volley's settings"
            );
        }
        for s in &cfg.sources {
            assert!(
                CVARS.iter().any(|c| c.0 == s.0),
                "volley's setting {} is no control variable",
                s.0
            );
        }
    }

    #[test]
    fn every_error_class_has_its_text() {
        for c in terr::FIRST..=terr::LAST {
            assert!(describe(c).is_some(), "{c}");
        }
    }
}
