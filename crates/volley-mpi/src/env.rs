//! The environment: initialisation and finalisation, thread levels, the clock, Abort, versions,
//! error handlers and the predefined attributes.

use crate::abi::{self, class, H};
use crate::err::{fail, get, put, put_str, R};
use crate::state::{self, handle, index, rt, Rt, Slab, KIND_ERRH};
use std::ffi::{c_char, c_void};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

/// MPI_Init and MPI_Init_thread: the world model starts, on the runtime a session started
/// already or on a new one.
fn init(required: c_int) -> R<c_int> {
    match state::WORLD_MODEL.load(Ordering::Acquire) {
        0 => {}
        state::PHASE_RUNNING => {
            return Err(fail(
                class::OTHER,
                "MPI_Init was called twice: call it once per process",
            ))
        }
        _ => {
            return Err(fail(
                class::OTHER,
                "MPI cannot be initialised again after MPI_Finalize",
            ))
        }
    }
    let provided = if state::PHASE.load(Ordering::Acquire) == state::PHASE_RUNNING {
        // A session started the runtime: the world model joins it.
        let mut rt = rt()?;
        rt.thread_level = required.clamp(abi::THREAD_SINGLE, abi::THREAD_SERIALIZED);
        rt.main_thread = std::thread::current().id();
        rt.thread_level
    } else {
        start(required)?
    };
    state::WORLD_MODEL.store(state::PHASE_RUNNING, Ordering::Release);
    Ok(provided)
}

/// Joins the job and builds the face's state: MPI_COMM_WORLD (context 0) and MPI_COMM_SELF
/// (context 1). Once per process: by MPI_Init or the first MPI_Session_init.
pub(crate) fn start(required: c_int) -> R<c_int> {
    if state::PHASE.load(Ordering::Acquire) != 0 {
        return Err(fail(
            class::OTHER,
            "volley's MPI cannot start again once MPI_Finalize and the last MPI_Session_finalize have ended it",
        ));
    }
    volley::collectives::check_env().map_err(|e| crate::err::fatal("MPI_Init", &e))?;
    let world = volley::World::init()
        .map_err(|e| crate::err::fatal("MPI_Init", &format!("cannot join the job: {e}")))?;
    // volley's world is used by one thread at a time: MPI_THREAD_SERIALIZED at most.
    let provided = required.clamp(abi::THREAD_SINGLE, abi::THREAD_SERIALIZED);
    let mut rt = Rt {
        world,
        thread_level: provided,
        main_thread: std::thread::current().id(),
        comms: Vec::new(),
        types: Vec::new(),
        groups: Vec::new(),
        reqs: Slab::default(),
        spare_more: Vec::new(),
        msgs: Slab::default(),
        ops: Vec::new(),
        errhandlers: Vec::new(),
        sessions: Vec::new(),
        keyvals: Vec::new(),
        type_names: Vec::new(),
        type_attrs: Vec::new(),
        f90_types: Vec::new(),
        bsend_buf: None,
        bsend_used: 0,
        orphans: Vec::new(),
        scratch: Some(Box::default()),
        nbcs: Vec::new(),
        deferred: None,
        done_clock: 0,
        wins: Vec::new(),
        io: Default::default(),
    };
    let all: Arc<[usize]> = (0..rt.world.size()).collect();
    let me: Arc<[usize]> = Arc::from(vec![rt.world.rank()]);
    let wc = rt.make_comm(0, all)?;
    let sc = rt.make_comm(1, me)?;
    state::contexts().reset();
    state::ctx_take(0, true);
    state::ctx_take(1, true);
    rt.add_comm(wc, abi::ERRORS_ARE_FATAL);
    rt.add_comm(sc, abi::ERRORS_ARE_FATAL);
    rt.comms[0].as_mut().expect("just made").name = "MPI_COMM_WORLD".into();
    rt.comms[1].as_mut().expect("just made").name = "MPI_COMM_SELF".into();
    ATTRS[ATTR_UNIVERSE].store(rt.world.size() as c_int, Ordering::Relaxed);
    state::install(rt);
    Ok(provided)
}

/// Takes the runtime down unless a session still uses it (MPI_Finalize, and the last
/// MPI_Session_finalize after it or without MPI_Init).
pub(crate) fn stop_unless_sessions() -> R {
    {
        let mut rt = rt()?;
        if rt.sessions.iter().any(Option::is_some)
            || state::WORLD_MODEL.load(Ordering::Acquire) == state::PHASE_RUNNING
        {
            return Ok(());
        }
        // Buffered sends and requests the program freed finish first.
        crate::p2p::finish_all(&mut rt);
    }
    // Closing the world sends what is queued and tells the peers this rank is done.
    drop(state::uninstall());
    Ok(())
}

/// The values the predefined attributes point to (MPI_Comm_get_attr hands out their addresses).
static ATTRS: [AtomicI32; 6] = [
    AtomicI32::new(abi::MAX_TAG),
    AtomicI32::new(abi::PROC_NULL),
    AtomicI32::new(abi::ANY_SOURCE),
    AtomicI32::new(0),
    AtomicI32::new(0),
    AtomicI32::new(0),
];
const ATTR_UNIVERSE: usize = 5;

/// The address of a predefined attribute's value, if `keyval` names one.
pub fn predefined_attr(keyval: c_int) -> Option<*mut c_void> {
    let i = match keyval {
        abi::TAG_UB => 0,
        abi::HOST => 1,
        abi::IO => 2,
        abi::WTIME_IS_GLOBAL => 3,
        abi::APPNUM => 4,
        abi::UNIVERSE_SIZE => ATTR_UNIVERSE,
        abi::LASTUSEDCODE => return Some(&LASTUSED as *const AtomicI32 as *mut c_void),
        _ => return None,
    };
    Some(&ATTRS[i] as *const AtomicI32 as *mut c_void)
}
static LASTUSED: AtomicI32 = AtomicI32::new(class::LASTCODE);

/// MPI_Add_error_class made `class`: MPI_LASTUSEDCODE, the largest class, is at least it.
pub fn note_last_used(class: c_int) {
    LASTUSED.fetch_max(class, std::sync::atomic::Ordering::Relaxed);
}

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// MPI_Wtime: seconds on the monotonic clock (nanosecond resolution), from a fixed point in this
/// process's life. Needs no initialisation.
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> f64 {
    EPOCH.elapsed().as_secs_f64()
}
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> f64 {
    PMPI_Wtime()
}
/// MPI_Wtick: the clock's resolution.
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> f64 {
    1e-9
}
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> f64 {
    PMPI_Wtick()
}

/// MPI_Pcontrol: profiling control. Without a profiling tool there is nothing to control; a tool
/// that wraps it sees the call. (C declares it variadic; the level is the only argument read.)
#[no_mangle]
pub extern "C" fn PMPI_Pcontrol(_level: c_int) -> c_int {
    0
}
#[no_mangle]
pub extern "C" fn MPI_Pcontrol(level: c_int) -> c_int {
    PMPI_Pcontrol(level)
}

const LIBRARY_VERSION: &str = concat!(
    "volley MPI ",
    env!("CARGO_PKG_VERSION"),
    " (MPI 3.1 point-to-point, communicators, groups, datatypes, blocking and non-blocking collectives; on volley's shared-memory rings and network protocol)"
);

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut c_char, buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

crate::mpi! {
    fn MPI_Init / PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) {
        init(abi::THREAD_SINGLE).map(|_| ())
    }

    fn MPI_Init_thread / PMPI_Init_thread(_argc: *mut c_int, _argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) {
        let p = init(required)?;
        // SAFETY: the caller's output argument.
        unsafe { put(provided, p) }
    }

    fn MPI_Initialized / PMPI_Initialized(flag: *mut c_int) {
        let f = state::WORLD_MODEL.load(Ordering::Acquire) != 0;
        // SAFETY: the caller's output argument.
        unsafe { put(flag, f as c_int) }
    }

    fn MPI_Finalized / PMPI_Finalized(flag: *mut c_int) {
        let f = state::WORLD_MODEL.load(Ordering::Acquire) == state::PHASE_FINALIZED;
        // SAFETY: the caller's output argument.
        unsafe { put(flag, f as c_int) }
    }

    fn MPI_Finalize / PMPI_Finalize() {
        if state::WORLD_MODEL.load(Ordering::Acquire) != state::PHASE_RUNNING {
            return Err(fail(class::OTHER, "MPI_Finalize without MPI_Init, or twice"));
        }
        // MPI_COMM_SELF's attributes are deleted first, as if it were freed, then
        // MPI_COMM_WORLD's; each in the reverse order they were set (MPI-3.1 section 8.7.1).
        for comm in [abi::COMM_SELF, abi::COMM_WORLD] {
            let attrs = std::mem::take(&mut rt()?.comm_slot_mut(comm)?.attrs);
            for &(k, v) in attrs.iter().rev() {
                crate::comm::delete_attr(comm, k, v)?;
            }
        }
        state::WORLD_MODEL.store(state::PHASE_FINALIZED, Ordering::Release);
        stop_unless_sessions()
    }

    fn MPI_Query_thread / PMPI_Query_thread(provided: *mut c_int) {
        let p = rt()?.thread_level;
        // SAFETY: the caller's output argument.
        unsafe { put(provided, p) }
    }

    fn MPI_Is_thread_main / PMPI_Is_thread_main(flag: *mut c_int) {
        let main = rt()?.main_thread == std::thread::current().id();
        // SAFETY: the caller's output argument.
        unsafe { put(flag, main as c_int) }
    }

    fn MPI_Abort / PMPI_Abort(comm: H, errorcode: c_int) {
        let rank = state::world_rank().map(|r| r.to_string()).unwrap_or_else(|| "?".into());
        let _ = comm;
        eprintln!("volley MPI: MPI_Abort called on rank {rank} with error code {errorcode}; the job ends");
        // volley run stops every other rank when one exits with an error, and exits with this
        // rank's code; Hydra and Slurm are asked to over PMI. (An exit code is 8 bits: 256 would
        // read as success, so it stays 255.)
        let code = if errorcode != 0 && errorcode & 0xff == 0 { 255 } else { errorcode & 0xff };
        volley::abort_job(if code == 0 { 1 } else { code }, &format!("MPI_Abort({errorcode}) on rank {rank}"))
    }

    fn MPI_Get_processor_name / PMPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) {
        // SAFETY: MPI: name holds MPI_MAX_PROCESSOR_NAME bytes.
        unsafe { put_str(name, abi::MAX_PROCESSOR_NAME, resultlen, &hostname()) }
    }

    fn MPI_Get_version / PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) {
        // SAFETY: the caller's output arguments.
        unsafe {
            put(version, 3)?;
            put(subversion, 1)
        }
    }

    fn MPI_Get_library_version / PMPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) {
        // SAFETY: MPI: version holds MPI_MAX_LIBRARY_VERSION_STRING bytes.
        unsafe { put_str(version, abi::MAX_LIBRARY_VERSION_STRING, resultlen, LIBRARY_VERSION) }
    }

    fn MPI_Comm_set_errhandler / PMPI_Comm_set_errhandler(comm: H, errhandler: H) [comm] {
        state::check_errhandler(errhandler)?;
        rt()?.comm_slot_mut(comm)?.errhandler = errhandler;
        Ok(())
    }

    fn MPI_Comm_get_errhandler / PMPI_Comm_get_errhandler(comm: H, errhandler: *mut H) [comm] {
        let h = rt()?.comm_slot(comm)?.errhandler;
        // SAFETY: the caller's output argument.
        unsafe { put(errhandler, h) }
    }

    fn MPI_Comm_create_errhandler / PMPI_Comm_create_errhandler(function: Option<state::ErrFn>, errhandler: *mut H) {
        let f = function.ok_or_else(|| fail(class::ARG, "the error handler function is a null pointer"))?;
        let mut rt = rt()?;
        rt.errhandlers.push(Some(f));
        let h = handle(KIND_ERRH, rt.errhandlers.len() - 1);
        // SAFETY: the caller's output argument.
        unsafe { put(errhandler, h) }
    }

    fn MPI_Errhandler_free / PMPI_Errhandler_free(errhandler: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(errhandler)? };
        // A handler in use by a communicator stays usable (MPI frees it when unused); volley
        // keeps user handlers for the process's life, a few bytes each.
        if !matches!(h, abi::ERRORS_ARE_FATAL | abi::ERRORS_RETURN | abi::ERRORS_ABORT) && index(KIND_ERRH, h).is_none() {
            return Err(fail(class::ERRHANDLER, format!("{h:#x} is not an error handler")));
        }
        // SAFETY: the caller's in-out argument.
        unsafe { put(errhandler, abi::ERRHANDLER_NULL) }
    }

    fn MPI_Comm_call_errhandler / PMPI_Comm_call_errhandler(comm: H, errorcode: c_int) {
        {
            rt()?.comm_slot(comm)?;
        }
        crate::err::call_errhandler("MPI_Comm_call_errhandler", comm, errorcode)
    }
}

crate::mpi! {
    fn MPI_Alloc_mem / PMPI_Alloc_mem(size: abi::Aint, _info: H, baseptr: *mut c_void) {
        if size < 0 {
            return Err(fail(class::ARG, format!("MPI_Alloc_mem: size {size} is negative")));
        }
        // Plain memory: volley registers nothing with the network (no RDMA to pin for).
        // SAFETY: malloc of a checked size; a null result is reported.
        let p = unsafe { libc::malloc((size as usize).max(1)) };
        if p.is_null() {
            return Err(fail(class::NO_MEM, format!("MPI_Alloc_mem: cannot allocate {size} bytes")));
        }
        // SAFETY: MPI: baseptr points to a pointer.
        unsafe { put(baseptr as *mut *mut c_void, p) }
    }

    fn MPI_Free_mem / PMPI_Free_mem(base: *mut c_void) {
        // SAFETY: MPI: base came from MPI_Alloc_mem (malloc), freed once.
        unsafe { libc::free(base) };
        Ok(())
    }

    fn MPI_Comm_get_parent / PMPI_Comm_get_parent(parent: *mut H) {
        rt()?;
        // No dynamic processes: no parent.
        // SAFETY: the caller's output argument.
        unsafe { put(parent, abi::COMM_NULL) }
    }

    fn MPI_Status_set_elements / PMPI_Status_set_elements(status: *mut abi::Status, datatype: H, count: c_int) {
        let size = crate::dtype::size_of(datatype)?;
        // SAFETY: the caller's status.
        let mut st = unsafe { get(status)? };
        st.set_bytes((count.max(0) as u64) * size as u64);
        // SAFETY: the caller's status.
        unsafe { put(status, st) }
    }

    fn MPI_Status_set_elements_x / PMPI_Status_set_elements_x(status: *mut abi::Status, datatype: H, count: abi::Count) {
        let size = crate::dtype::size_of(datatype)?;
        // SAFETY: the caller's status.
        let mut st = unsafe { get(status)? };
        st.set_bytes((count.max(0) as u64) * size as u64);
        // SAFETY: the caller's status.
        unsafe { put(status, st) }
    }

    fn MPI_Status_set_cancelled / PMPI_Status_set_cancelled(status: *mut abi::Status, flag: c_int) {
        // SAFETY: the caller's status.
        let mut st = unsafe { get(status)? };
        st.internal[2] = (flag != 0) as c_int;
        // SAFETY: the caller's status.
        unsafe { put(status, st) }
    }
}

/// MPI_*_c2f and MPI_*_f2c: every handle volley makes fits a positive C int (see `state`), so a
/// Fortran handle is the same number.
macro_rules! fortran_handles {
    ($($c2f:ident $pc2f:ident $f2c:ident $pf2c:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $pc2f(h: H) -> c_int {
            h as c_int
        }
        #[no_mangle]
        pub extern "C" fn $c2f(h: H) -> c_int {
            $pc2f(h)
        }
        #[no_mangle]
        pub extern "C" fn $pf2c(f: c_int) -> H {
            f as u32 as H
        }
        #[no_mangle]
        pub extern "C" fn $f2c(f: c_int) -> H {
            $pf2c(f)
        }
    )*};
}

fortran_handles! {
    MPI_Comm_c2f PMPI_Comm_c2f MPI_Comm_f2c PMPI_Comm_f2c,
    MPI_Type_c2f PMPI_Type_c2f MPI_Type_f2c PMPI_Type_f2c,
    MPI_Group_c2f PMPI_Group_c2f MPI_Group_f2c PMPI_Group_f2c,
    MPI_Request_c2f PMPI_Request_c2f MPI_Request_f2c PMPI_Request_f2c,
    MPI_Op_c2f PMPI_Op_c2f MPI_Op_f2c PMPI_Op_f2c,
    MPI_Info_c2f PMPI_Info_c2f MPI_Info_f2c PMPI_Info_f2c,
    MPI_Errhandler_c2f PMPI_Errhandler_c2f MPI_Errhandler_f2c PMPI_Errhandler_f2c,
    MPI_Message_c2f PMPI_Message_c2f MPI_Message_f2c PMPI_Message_f2c,
    MPI_Session_c2f PMPI_Session_c2f MPI_Session_f2c PMPI_Session_f2c,
    MPI_Win_c2f PMPI_Win_c2f MPI_Win_f2c PMPI_Win_f2c,
    MPI_File_c2f PMPI_File_c2f MPI_File_f2c PMPI_File_f2c,
}

/// Fortran's status: MPI_F_STATUS_SIZE integers, the C status's fields in their order
/// (MPI_F_SOURCE 0, MPI_F_TAG 1, MPI_F_ERROR 2, then the hidden ones).
const F_STATUS_SIZE: usize = 8;
const _: () = assert!(std::mem::size_of::<abi::Status>() == F_STATUS_SIZE * 4);

crate::mpi! {
    fn MPI_Status_c2f / PMPI_Status_c2f(c_status: *const abi::Status, f_status: *mut c_int) {
        if c_status.is_null() || f_status.is_null() {
            return Err(fail(class::ARG, "MPI_Status_c2f needs a status (not MPI_STATUS_IGNORE) and a Fortran status array"));
        }
        // SAFETY: MPI: c_status is a status, f_status holds MPI_F_STATUS_SIZE integers; both
        // checked not null. The status is eight C ints (asserted above).
        unsafe { std::ptr::copy_nonoverlapping(c_status as *const c_int, f_status, F_STATUS_SIZE) };
        Ok(())
    }

    fn MPI_Status_f2c / PMPI_Status_f2c(f_status: *const c_int, c_status: *mut abi::Status) {
        if c_status.is_null() || f_status.is_null() {
            return Err(fail(class::ARG, "MPI_Status_f2c needs a Fortran status array and a status (not MPI_STATUS_IGNORE)"));
        }
        // SAFETY: as in MPI_Status_c2f, the other way.
        unsafe { std::ptr::copy_nonoverlapping(f_status, c_status as *mut c_int, F_STATUS_SIZE) };
        Ok(())
    }
}
