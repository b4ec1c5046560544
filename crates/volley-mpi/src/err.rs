//! MPI's errors: classes and codes, what each says, error handlers, and the small helpers that
//! read and write the C caller's memory.
//!
//! A code is its class in the low 8 bits and, above them, the slot of a message that says what
//! went wrong in words (the last 63 are kept, so every code stays at most MPI_ERR_LASTCODE): `MPI_Error_class` masks, `MPI_Error_string`
//! prints the class's text and the message. A failure goes to the handler of the communicator
//! it happened on: MPI_ERRORS_ARE_FATAL (the default) prints which function failed, on which
//! rank and why, then ends the job; MPI_ERRORS_RETURN returns the code; a user's handler is
//! called with the communicator and the code.

use crate::abi::{self, class, H};
use crate::state::{self, PHASE_RUNNING};
use std::ffi::c_char;
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use volley_sys::Exclusive;

/// A failed MPI call: its class and what to tell the user.
#[derive(Debug)]
pub struct Fail {
    pub class: c_int,
    pub msg: String,
    /// The code to return as it is, when the program made it (an attribute callback's return
    /// value): None makes a code of volley's own for `class` and `msg`.
    pub code: Option<c_int>,
    /// The communicator whose error handler decides, when not the call's own (a request's).
    pub comm: Option<H>,
}

pub type R<T = ()> = Result<T, Fail>;

pub fn fail(class: c_int, msg: impl Into<String>) -> Fail {
    Fail {
        class,
        msg: msg.into(),
        code: None,
        comm: None,
    }
}

/// A failure the program's own callback reported with error code `code`: returned to the
/// program unchanged when it is a code MPI knows (a predefined or an added one, as MPICH does),
/// else as MPI_ERR_OTHER.
pub fn fail_code(code: c_int, msg: impl Into<String>) -> Fail {
    match class_of(code) {
        Some(class) if code != 0 => Fail {
            class,
            msg: msg.into(),
            code: Some(code),
            comm: None,
        },
        _ => fail(class::OTHER, msg),
    }
}

/// The messages of the latest failures, by slot (codes name them).
struct Messages {
    next: usize,
    slots: Vec<String>,
}
const SLOTS: usize = 63;
static MESSAGES: Exclusive<Messages> = Exclusive::new(Messages {
    next: 0,
    slots: Vec::new(),
});

/// A code for `class` whose string says `msg`.
pub fn code_for(class: c_int, msg: String) -> c_int {
    let Some(mut m) = MESSAGES.try_borrow_mut() else {
        return class;
    };
    if m.slots.len() < SLOTS {
        m.slots.resize(SLOTS, String::new());
    }
    let slot = m.next;
    m.next = (m.next + 1) % SLOTS;
    m.slots[slot] = msg;
    class | (((slot + 1) as c_int) << 8)
}

/// Error classes and codes the program added (MPI_Add_error_class, MPI_Add_error_code), with
/// the strings MPI_Add_error_string gave them. Both come after MPI_ERR_LASTCODE, which the codes
/// volley makes never pass: classes from 0x4000, codes from 0x5000. MPI_LASTUSEDCODE is the
/// largest class (MPI-3.1 section 8.5).
struct Added {
    classes: Vec<String>,
    codes: Vec<(c_int, String)>,
}
static ADDED: std::sync::Mutex<Added> = std::sync::Mutex::new(Added {
    classes: Vec::new(),
    codes: Vec::new(),
});
const FIRST_ADDED_CLASS: c_int = class::LASTCODE + 1;
const LAST_ADDED_CLASS: c_int = 0x4fff;
const FIRST_ADDED_CODE: c_int = LAST_ADDED_CLASS + 1;

fn added() -> std::sync::MutexGuard<'static, Added> {
    ADDED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where an added class or code keeps its string.
fn added_string(a: &mut Added, code: c_int) -> Option<&mut String> {
    if code >= FIRST_ADDED_CODE {
        return a
            .codes
            .get_mut((code - FIRST_ADDED_CODE) as usize)
            .map(|c| &mut c.1);
    }
    if (FIRST_ADDED_CLASS..=LAST_ADDED_CLASS).contains(&code) {
        return a.classes.get_mut((code - FIRST_ADDED_CLASS) as usize);
    }
    None
}

pub fn class_of(code: c_int) -> Option<c_int> {
    if code < 0 {
        return None;
    }
    if code >= FIRST_ADDED_CODE {
        return added()
            .codes
            .get((code - FIRST_ADDED_CODE) as usize)
            .map(|c| c.0);
    }
    if code >= FIRST_ADDED_CLASS {
        let known = (code - FIRST_ADDED_CLASS) < added().classes.len() as c_int;
        return known.then_some(code);
    }
    if (crate::tool::terr::FIRST..=crate::tool::terr::LAST).contains(&code) {
        // MPI_T's classes (no slot of volley's codes has these low bytes).
        return Some(code);
    }
    let c = code & 0xff;
    let slot = code >> 8;
    if slot as usize > SLOTS || describe(c).is_none() {
        return None;
    }
    Some(c)
}

/// The text of a class.
pub fn describe(class: c_int) -> Option<&'static str> {
    Some(match class {
        0 => "no error",
        1 => "invalid buffer pointer",
        2 => "invalid count argument",
        3 => "invalid datatype",
        4 => "invalid tag",
        5 => "invalid communicator",
        6 => "invalid rank",
        7 => "invalid request",
        8 => "invalid root",
        9 => "invalid group",
        10 => "invalid operation",
        11 => "invalid topology",
        12 => "invalid dimension argument",
        13 => "invalid argument",
        14 => "unknown error",
        15 => "message truncated: the receive buffer is smaller than the message",
        16 => "other error",
        17 => "internal error in volley's MPI",
        18 => "pending request",
        19 => "error code is in the status",
        31 => "invalid info key",
        32 => "the info key is not set",
        33 => "invalid info value",
        34 => "invalid info object",
        36 => "invalid keyval",
        39 => "out of memory",
        40 => "collective arguments not identical on all processes",
        22 => "invalid assertion (an RMA synchronisation's assert argument)",
        26 => "invalid displacement",
        37 => "invalid lock type",
        47 => "memory cannot be attached or detached (MPI_Win_attach, MPI_Win_detach)",
        48 => "conflicting accesses to a window",
        49 => "target memory is not part of the window",
        50 => "memory cannot be shared",
        51 => "wrong synchronisation of RMA calls (an epoch not open, or open already)",
        52 => "the window's flavor does not allow the operation",
        54 => "invalid session",
        55 => "invalid size",
        60 => "invalid window",
        58 => "operation not supported by volley's MPI",
        61 => "invalid error handler",
        75 => "a process the operation needs has failed (MPIX_ERR_PROC_FAILED)",
        c if (20..=60).contains(&c) => "error (file, RMA, info or spawn class)",
        c if (crate::tool::terr::FIRST..=crate::tool::terr::LAST).contains(&c) => {
            return crate::tool::describe(c)
        }
        _ => return None,
    })
}

/// The full string of a code.
pub fn string_of(code: c_int) -> Option<String> {
    let class = class_of(code)?;
    if let Some(s) = added_string(&mut added(), code) {
        return Some(s.clone());
    }
    let mut s = describe(class)?.to_string();
    let slot = (code >> 8) as usize;
    if slot > 0 {
        if let Some(m) = MESSAGES.try_borrow_mut() {
            if let Some(msg) = m.slots.get(slot - 1).filter(|m| !m.is_empty()) {
                s.push_str(": ");
                s.push_str(msg);
            }
        }
    }
    Some(s)
}

/// The end of every exported call: success, or the failure handed to the error handler of
/// communicator `comm`.
#[inline(always)]
pub fn finish(name: &str, comm: H, r: R) -> c_int {
    match r {
        Ok(()) => 0,
        Err(f) => failed(name, comm, f),
    }
}

/// `finish`'s failure path, out of line: every call pays only for the test of success.
#[cold]
#[inline(never)]
fn failed(name: &str, comm: H, f: Fail) -> c_int {
    match f.code {
        Some(code) => raise_code(name, f.comm.unwrap_or(comm), code, f.msg),
        None => raise(name, f.comm.unwrap_or(comm), f.class, f.msg),
    }
}

/// A failure of `name` on `comm`: the handler decides.
pub fn raise(name: &str, comm: H, class: c_int, msg: String) -> c_int {
    let code = code_for(class, format!("{name}: {msg}"));
    raise_code(name, comm, code, msg)
}

/// A failure of `name` on `comm` with error code `code`: the handler decides.
fn raise_code(name: &str, comm: H, code: c_int, msg: String) -> c_int {
    let handler = state::errhandler_of(comm);
    match handler {
        state::Handler::Return => code,
        state::Handler::User(f) => {
            let mut c = comm;
            let mut e = code;
            // SAFETY: a function the program registered with MPI_Comm_create_errhandler, called
            // as MPI defines (a pointer to the communicator and to the code).
            unsafe { f(&mut c, &mut e) };
            // The code the handler leaves is the one returned, as MPICH does (a handler that
            // sets MPI_SUCCESS makes the call succeed).
            e
        }
        state::Handler::Fatal => fatal(name, &msg),
    }
}

/// The return code of an MPI call the face makes itself, as a failure (`what` says which).
pub fn rc_ok(rc: c_int, what: &str) -> R {
    if rc == 0 {
        Ok(())
    } else {
        Err(fail_code(rc, format!("{what} failed")))
    }
}

/// MPI_Comm_call_errhandler and its kin for windows, files and sessions: calls the handler in
/// force on `h` with `errorcode` (one that returns, or MPI_ERRORS_RETURN, makes the call succeed).
pub fn call_errhandler(name: &str, h: H, errorcode: c_int) -> R {
    match state::errhandler_of(h) {
        state::Handler::Return => Ok(()),
        state::Handler::User(f) => {
            let mut c = h;
            let mut e = errorcode;
            // SAFETY: the program's handler, called as MPI defines (a pointer to the object and
            // to the code).
            unsafe { f(&mut c, &mut e) };
            Ok(())
        }
        state::Handler::Fatal => {
            let class = class_of(errorcode).unwrap_or(class::OTHER);
            fatal(
                name,
                &string_of(errorcode).unwrap_or_else(|| format!("error class {class}")),
            )
        }
    }
}

/// MPI_ERRORS_ARE_FATAL: say what failed, where and why, then end the job (`volley run` stops
/// the other ranks when one exits with an error; Hydra and Slurm are asked to over PMI).
pub fn fatal(name: &str, msg: &str) -> ! {
    let rank = state::world_rank()
        .map(|r| format!("rank {r}"))
        .unwrap_or_else(|| "a rank".into());
    eprintln!(
        "volley MPI: {name} failed on {rank}: {msg}\nvolley MPI: the error handler is MPI_ERRORS_ARE_FATAL, so the job ends (set MPI_ERRORS_RETURN on the communicator to handle errors in the program)"
    );
    volley::abort_job(1, &format!("{name} failed on {rank}"))
}

/// Fails unless MPI is initialised and not finalised.
pub fn running() -> R {
    match state::PHASE.load(Ordering::Acquire) {
        PHASE_RUNNING => Ok(()),
        0 => Err(fail(
            class::OTHER,
            "MPI is not initialised: call MPI_Init (or MPI_Session_init) first",
        )),
        _ => Err(fail(
            class::OTHER,
            "MPI has been finalised: no MPI call may follow MPI_Finalize",
        )),
    }
}

/// Writes `v` to the caller's output argument `p`.
///
/// # Safety
/// `p` is null (an error) or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T) -> R {
    if p.is_null() {
        return Err(fail(class::ARG, "an output argument is a null pointer"));
    }
    // SAFETY: non-null, and valid for a write by the caller's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Reads the caller's argument `p`.
///
/// # Safety
/// `p` is null (an error) or valid for a read of `T`.
pub unsafe fn get<T: Copy>(p: *const T) -> R<T> {
    if p.is_null() {
        return Err(fail(class::ARG, "an argument pointer is null"));
    }
    // SAFETY: non-null, and valid for a read by the caller's contract.
    Ok(unsafe { p.read_unaligned() })
}

/// The caller's array of `n` elements at `p` (empty when `n` is 0, whatever `p` is).
///
/// # Safety
/// `p` is valid for reads of `n` elements when `n > 0`.
pub unsafe fn array<'a, T>(p: *const T, n: c_int) -> R<&'a [T]> {
    if n < 0 {
        return Err(fail(class::COUNT, format!("negative count {n}")));
    }
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(fail(class::ARG, "an array argument is a null pointer"));
    }
    // SAFETY: non-null, and valid for n elements by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) })
}

/// The caller's writable array of `n` elements at `p`.
///
/// # Safety
/// `p` is valid for reads and writes of `n` elements when `n > 0`.
pub unsafe fn array_mut<'a, T>(p: *mut T, n: c_int) -> R<&'a mut [T]> {
    if n < 0 {
        return Err(fail(class::COUNT, format!("negative count {n}")));
    }
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(fail(class::ARG, "an array argument is a null pointer"));
    }
    // SAFETY: non-null, and valid for n elements by the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n as usize) })
}

/// Copies `s` into the caller's string buffer of `cap` bytes (NUL-terminated, cut to fit) and
/// its length into `len`.
///
/// # Safety
/// `buf` is valid for `cap` bytes; `len` for an int.
pub unsafe fn put_str(buf: *mut c_char, cap: usize, len: *mut c_int, s: &str) -> R {
    if buf.is_null() {
        return Err(fail(class::ARG, "the string buffer is a null pointer"));
    }
    let n = s.len().min(cap.saturating_sub(1));
    // SAFETY: buf holds cap bytes by the caller's contract and n + 1 <= cap.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
        *buf.add(n) = 0;
    }
    // SAFETY: as put's.
    unsafe { put(len, n as c_int) }
}

/// The caller's NUL-terminated string.
///
/// # Safety
/// `p` is null (an error) or a valid C string.
pub unsafe fn c_str(p: *const c_char) -> R<String> {
    if p.is_null() {
        return Err(fail(class::ARG, "a string argument is a null pointer"));
    }
    // SAFETY: a valid NUL-terminated string by the caller's contract.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned())
}

/// What a core receive error is in MPI's terms.
pub fn from_recv(e: &volley::RecvError) -> Fail {
    use volley::RecvError as E;
    let class = match e {
        E::BufferTooSmall { .. } | E::Truncated { .. } => class::TRUNCATE,
        E::PeerLost(_) | E::NoSenders { .. } => class::PROC_FAILED,
        E::NoSuchRank { .. } => class::RANK,
        // More than this rank's buffer holds is a truncation; less, MPICH's "collective size
        // mismatch", of class MPI_ERR_OTHER.
        E::CollectiveMismatch { theirs, mine, .. } if theirs > mine => class::TRUNCATE,
        _ => class::OTHER,
    };
    fail(class, e.to_string())
}

/// What a core send error is in MPI's terms.
pub fn from_send(e: &volley::SendError) -> Fail {
    use volley::SendError as E;
    let class = match e {
        E::PeerLost(_) => class::PROC_FAILED,
        E::NoSuchRank { .. } => class::RANK,
        _ => class::OTHER,
    };
    fail(class, e.to_string())
}

pub fn from_request(e: &volley::RequestError) -> Fail {
    match e {
        volley::RequestError::Send(s) => from_send(s),
        volley::RequestError::Recv(r) => from_recv(r),
        other => fail(class::REQUEST, other.to_string()),
    }
}

crate::mpi! {
    fn MPI_Error_string / PMPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) {
        let s = string_of(errorcode).ok_or_else(|| {
            fail(class::ARG, format!("{errorcode} is not an error code of volley's MPI"))
        })?;
        // SAFETY: MPI: string holds MPI_MAX_ERROR_STRING bytes.
        unsafe { put_str(string, abi::MAX_ERROR_STRING, resultlen, &s) }
    }

    fn MPI_Add_error_class / PMPI_Add_error_class(errorclass: *mut c_int) {
        let c = {
            let mut a = added();
            let c = FIRST_ADDED_CLASS + a.classes.len() as c_int;
            if c > LAST_ADDED_CLASS {
                return Err(fail(class::OTHER, format!("MPI_Add_error_class: volley keeps at most {} added error classes, and all are taken", LAST_ADDED_CLASS - FIRST_ADDED_CLASS + 1)));
            }
            a.classes.push(String::new());
            c
        };
        crate::env::note_last_used(c);
        // SAFETY: the caller's output argument.
        unsafe { put(errorclass, c) }
    }

    fn MPI_Add_error_code / PMPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) {
        if class_of(errorclass) != Some(errorclass) {
            return Err(fail(class::ARG, format!("MPI_Add_error_code: {errorclass} is not an error class (a predefined one, or one MPI_Add_error_class returned)")));
        }
        let code = {
            let mut a = added();
            let code = FIRST_ADDED_CODE + a.codes.len() as c_int;
            a.codes.push((errorclass, String::new()));
            code
        };
        // SAFETY: the caller's output argument.
        unsafe { put(errorcode, code) }
    }

    fn MPI_Add_error_string / PMPI_Add_error_string(errorcode: c_int, string: *const c_char) {
        // SAFETY: MPI: a null-terminated string.
        let text = unsafe { c_str(string)? };
        if text.len() >= abi::MAX_ERROR_STRING {
            return Err(fail(class::ARG, format!("MPI_Add_error_string: the string has {} bytes; MPI_MAX_ERROR_STRING is {}", text.len(), abi::MAX_ERROR_STRING)));
        }
        let mut a = added();
        let slot = added_string(&mut a, errorcode).ok_or_else(|| {
            fail(class::ARG, format!("MPI_Add_error_string: {errorcode} is not an error class or code that MPI_Add_error_class or MPI_Add_error_code made (predefined ones keep their strings)"))
        })?;
        *slot = text;
        Ok(())
    }

    fn MPI_Error_class / PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) {
        let c = class_of(errorcode).ok_or_else(|| {
            fail(class::ARG, format!("{errorcode} is not an error code of volley's MPI"))
        })?;
        // SAFETY: the caller's output argument.
        unsafe { put(errorclass, c) }
    }
}
