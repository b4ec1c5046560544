//! The sessions model (MPI-4.0 section 11.3): a library starts MPI for itself with
//! MPI_Session_init, makes a group from a process set and a communicator from the group, without
//! MPI_Init or MPI_COMM_WORLD, beside the world model or without it.
//!
//! The runtime (the job, the segment, the face's state) is one per process: the first of
//! MPI_Init and MPI_Session_init starts it, and the last of MPI_Finalize and
//! MPI_Session_finalize ends it; volley cannot start it again after that (MPI-4.0 allows it; a
//! process joins its job once). Two process sets: `mpi://WORLD` (every rank of the job) and
//! `mpi://SELF` (this one), their names read without regard to case. A communicator made from a
//! group (MPI_Comm_create_from_group) agrees its context among the group's members on the
//! world's context, kept apart from other creations by its own tag bits and 20 bits of a hash of
//! the program's string tag (MPI makes the string unique among creations in flight at once).

use crate::abi::{self, class, H};
use crate::err::{c_str, fail, get, put, R};
use crate::state::{handle, index, rt, ErrFn, KIND_ERRH, KIND_SESSION};
use std::ffi::c_char;
use std::os::raw::c_int;
use std::sync::Arc;

pub const SESSION_NULL: H = 0x120;

const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

/// The thread levels' names, as the info key `thread_level` spells them.
const LEVELS: [(&str, c_int); 4] = [
    ("MPI_THREAD_SINGLE", abi::THREAD_SINGLE),
    ("MPI_THREAD_FUNNELED", abi::THREAD_FUNNELED),
    ("MPI_THREAD_SERIALIZED", abi::THREAD_SERIALIZED),
    ("MPI_THREAD_MULTIPLE", abi::THREAD_MULTIPLE),
];

/// The index of live session `h`.
fn live(h: H) -> R<usize> {
    let bad = || {
        fail(
            class::SESSION,
            format!("{h:#x} is not a session (finalised already?)"),
        )
    };
    let i = index(KIND_SESSION, h).ok_or_else(bad)?;
    rt()?
        .sessions
        .get(i)
        .copied()
        .flatten()
        .map(|_| i)
        .ok_or_else(bad)
}

/// The members of process set `name`, by job rank.
fn pset(name: &str) -> R<Arc<[usize]>> {
    let rt = rt()?;
    if name.eq_ignore_ascii_case(PSETS[0]) {
        Ok((0..rt.world.size()).collect())
    } else if name.eq_ignore_ascii_case(PSETS[1]) {
        Ok(Arc::from(vec![rt.world.rank()]))
    } else {
        Err(fail(
            class::ARG,
            format!("no process set is named {name:?}: volley has mpi://WORLD and mpi://SELF"),
        ))
    }
}

/// FNV-1a of the string tag, folded to 20 bits.
fn tag_hash(tag: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in tag.bytes() {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (h ^ (h >> 20)) & 0xf_ffff
}

/// A new info object holding `pairs`.
fn info_of(pairs: &[(&str, String)], out: *mut H) -> R {
    crate::info::create(out)?;
    // SAFETY: just written by create.
    let h = unsafe { get(out)? };
    for (k, v) in pairs {
        crate::info::set(h, k, v)?;
    }
    Ok(())
}

crate::mpi! {
    fn MPI_Session_init / PMPI_Session_init(info: H, errhandler: H, session: *mut H) [errhandler] {
        if session.is_null() {
            return Err(fail(class::ARG, "the session argument is a null pointer"));
        }
        let asked = crate::info::value(info, "thread_level")?;
        let required = match asked.as_deref() {
            None => abi::THREAD_SINGLE,
            Some(v) => LEVELS.iter().find(|l| l.0.eq_ignore_ascii_case(v.trim())).map(|l| l.1).ok_or_else(|| {
                fail(class::INFO_VALUE, format!("thread_level {v:?} is not a thread level (MPI_THREAD_SINGLE ... MPI_THREAD_MULTIPLE)"))
            })?,
        };
        if crate::state::PHASE.load(std::sync::atomic::Ordering::Acquire) != crate::state::PHASE_RUNNING {
            crate::env::start(required)?;
        }
        crate::state::check_errhandler(errhandler)?;
        let h = {
            let mut rt = rt()?;
            let i = crate::state::vacant(&mut rt.sessions, errhandler);
            handle(KIND_SESSION, i)
        };
        // SAFETY: the caller's output argument (checked not null).
        unsafe { put(session, h) }
    }

    fn MPI_Session_finalize / PMPI_Session_finalize(session: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(session)? };
        let i = live(h)?;
        rt()?.sessions[i] = None;
        crate::env::stop_unless_sessions()?;
        // SAFETY: as above.
        unsafe { put(session, SESSION_NULL) }
    }

    fn MPI_Session_get_info / PMPI_Session_get_info(session: H, info_used: *mut H) [session] {
        live(session)?;
        let level = rt()?.thread_level;
        let name = LEVELS.iter().find(|l| l.1 == level).map_or("MPI_THREAD_SINGLE", |l| l.0);
        info_of(&[("thread_level", name.to_string())], info_used)
    }

    fn MPI_Session_get_num_psets / PMPI_Session_get_num_psets(session: H, _info: H, npset_names: *mut c_int) [session] {
        live(session)?;
        // SAFETY: the caller's output argument.
        unsafe { put(npset_names, PSETS.len() as c_int) }
    }

    fn MPI_Session_get_nth_pset / PMPI_Session_get_nth_pset(session: H, _info: H, n: c_int, pset_len: *mut c_int, pset_name: *mut c_char) [session] {
        live(session)?;
        let name = usize::try_from(n).ok().and_then(|n| PSETS.get(n)).ok_or_else(|| {
            fail(class::ARG, format!("process set {n}: volley has {} (0 to {})", PSETS.len(), PSETS.len() - 1))
        })?;
        // SAFETY: the caller's in-out argument.
        let cap = unsafe { get(pset_len)? };
        if cap <= 0 {
            // MPI-4.0 11.3.2: a length of 0 asks for the length the name needs, its NUL included.
            // SAFETY: as above.
            return unsafe { put(pset_len, name.len() as c_int + 1) };
        }
        let mut written = 0;
        // SAFETY: MPI: pset_name holds *pset_len bytes.
        unsafe { crate::err::put_str(pset_name, cap as usize, &mut written, name) }
    }

    fn MPI_Session_get_pset_info / PMPI_Session_get_pset_info(session: H, pset_name: *const c_char, info: *mut H) [session] {
        live(session)?;
        // SAFETY: the caller's C string.
        let name = unsafe { c_str(pset_name)? };
        let size = pset(&name)?.len();
        info_of(&[("mpi_size", size.to_string())], info)
    }

    fn MPI_Group_from_session_pset / PMPI_Group_from_session_pset(session: H, pset_name: *const c_char, newgroup: *mut H) [session] {
        live(session)?;
        // SAFETY: the caller's C string.
        let name = unsafe { c_str(pset_name)? };
        let g = pset(&name)?;
        let h = rt()?.add_group(g);
        // SAFETY: the caller's output argument.
        unsafe { put(newgroup, h) }
    }

    fn MPI_Comm_create_from_group / PMPI_Comm_create_from_group(group: H, stringtag: *const c_char, _info: H, errhandler: H, newcomm: *mut H) [errhandler] {
        // SAFETY: the caller's C string.
        let tag = unsafe { c_str(stringtag)? };
        crate::state::check_errhandler(errhandler)?;
        let (world, g, me) = {
            let rt = rt()?;
            (rt.comm(abi::COMM_WORLD)?, rt.group(group)?, rt.world.rank())
        };
        if !g.contains(&me) {
            return Err(fail(class::GROUP, "MPI_Comm_create_from_group is called by the members of the group only, and this process is not one"));
        }
        // The world communicator's ranks are the job's.
        let cid = crate::comm::agree_cid_among(&world, &g, crate::coll::TAG_CREATE_FROM_GROUP | tag_hash(&tag))?;
        let h = crate::comm::install(cid, g, abi::COMM_WORLD)?;
        rt()?.comm_slot_mut(h)?.errhandler = errhandler;
        // SAFETY: the caller's output argument.
        unsafe { put(newcomm, h) }
    }

    fn MPI_Session_create_errhandler / PMPI_Session_create_errhandler(function: Option<ErrFn>, errhandler: *mut H) {
        // A session's handler is called as a communicator's is: with the handle's address and
        // the code.
        let f = function.ok_or_else(|| fail(class::ARG, "the error handler function is a null pointer"))?;
        let mut rt = rt()?;
        rt.errhandlers.push(Some(f));
        let h = handle(KIND_ERRH, rt.errhandlers.len() - 1);
        // SAFETY: the caller's output argument.
        unsafe { put(errhandler, h) }
    }

    fn MPI_Session_set_errhandler / PMPI_Session_set_errhandler(session: H, errhandler: H) [session] {
        let i = live(session)?;
        crate::state::check_errhandler(errhandler)?;
        rt()?.sessions[i] = Some(errhandler);
        Ok(())
    }

    fn MPI_Session_get_errhandler / PMPI_Session_get_errhandler(session: H, errhandler: *mut H) [session] {
        let i = live(session)?;
        let h = rt()?.sessions[i].expect("live");
        // SAFETY: the caller's output argument.
        unsafe { put(errhandler, h) }
    }

    fn MPI_Session_call_errhandler / PMPI_Session_call_errhandler(session: H, errorcode: c_int) [session] {
        live(session)?;
        crate::err::call_errhandler("MPI_Session_call_errhandler", session, errorcode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_tags_hash_into_twenty_bits_and_apart() {
        let a = tag_hash("org.mpi-forum.mpi-v4_0.example-ex10_8");
        let b = tag_hash("org.mpi-forum.mpi-v4_0.example-ex10_9");
        assert!(a < 1 << 20 && b < 1 << 20);
        assert_ne!(a, b);
        assert_eq!(a, tag_hash("org.mpi-forum.mpi-v4_0.example-ex10_8"));
    }
}
