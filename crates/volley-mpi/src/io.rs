//! MPI-IO (MPI-3.1 chapter 13): files opened by a group of ranks, views, and every data access
//! (explicit offsets, individual and shared file pointers; blocking, non-blocking, collective and
//! split collective), on the POSIX files of the machine the ranks run on.
//!
//! How it works:
//! - Every rank opens the file itself (rank 0 first, so that MPI_MODE_CREATE and
//!   MPI_MODE_EXCL decide once); the open is agreed: either every rank has the file or every rank
//!   gets the same error. Files of ranks on several machines need a file system they all see
//!   (as with every MPI).
//! - A view (displacement, etype, filetype) maps the data a call moves onto byte ranges of the
//!   file: the filetype's flattened blocks, tiled from the displacement at its extent. A call
//!   turns its request into those ranges and moves each with one pread or pwrite (ranges that
//!   touch are merged), straight from the program's buffer when its datatype is contiguous, else
//!   through one packed copy. Reading past the end of the file returns what is there: the
//!   status's count says how much.
//! - Collective calls do what their independent forms do (MPI lets an implementation choose;
//!   the page cache makes every rank's writes visible to the others at once on one machine).
//!   Non-blocking calls complete at the call and return a completed request; split collectives
//!   do the work in the `_begin` call and hand the status over in `_end`.
//! - The shared file pointer lives in a small side file every rank of the file opened: in
//!   /dev/shm when the ranks share a machine, else a hidden file beside the file. Rank 0 unlinks
//!   it as soon as every rank has it open, so nothing is left behind. Each shared access moves
//!   it under an open-file-description lock (fcntl F_OFD_SETLKW); the ordered calls take one
//!   move for the whole group and place each rank's data in rank order.
//! - Atomic mode (MPI_File_set_atomicity) takes the same kind of lock on the file's bytes a call
//!   touches, shared for reads and exclusive for writes.
//! - Data representations: "native"; "internal" (the same here); "external32" for types
//!   whose basic elements have their native sizes in it (all but MPI_LONG, MPI_UNSIGNED_LONG and
//!   MPI_WCHAR on x86-64: the layout of the view is then the same, and each element is turned
//!   big-endian, long double to an IEEE quad, on the way out and back); and a representation
//!   registered with MPI_Register_datarep whose conversion functions are null (no conversion).
//!   Registered conversions, and external32 for the other types, are refused with
//!   MPI_ERR_UNSUPPORTED_DATAREP.
//! - Errors on a file go to its error handler, MPI_ERRORS_RETURN unless the program set another
//!   (on the file, or on MPI_FILE_NULL for files opened later: MPI-3.1 13.7).

use crate::abi::{self, class, Aint, Status, H};
use crate::dtype::{committed, lookup, TypeRef};
use crate::err::{c_str, fail, fail_code, get, put, put_str, rc_ok as ok, R};
use crate::state::{handle, index, rt, KIND_FILE, KIND_TYPE};
use std::ffi::c_void;
use std::fs::{File as OsFile, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::raw::{c_char, c_int};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub type Offset = i64;

pub const FILE_NULL: H = 0x118;
const BYTE: H = 0x247;
const INT: H = 0x209;
const INT64: H = 0x258;

const MODE_APPEND: c_int = 1;
const MODE_CREATE: c_int = 2;
const MODE_DELETE_ON_CLOSE: c_int = 4;
const MODE_EXCL: c_int = 8;
const MODE_RDONLY: c_int = 16;
const MODE_RDWR: c_int = 32;
const MODE_SEQUENTIAL: c_int = 64;
const MODE_UNIQUE_OPEN: c_int = 128;
const MODE_WRONLY: c_int = 256;
const MODES: c_int = MODE_APPEND
    | MODE_CREATE
    | MODE_DELETE_ON_CLOSE
    | MODE_EXCL
    | MODE_RDONLY
    | MODE_RDWR
    | MODE_SEQUENTIAL
    | MODE_UNIQUE_OPEN
    | MODE_WRONLY;

const SEEK_CUR: c_int = 601;
const SEEK_END: c_int = 602;
const SEEK_SET: c_int = 603;
const DISPLACEMENT_CURRENT: Offset = -255;
const MAX_DATAREP_STRING: usize = 128;

const ERR_ACCESS: c_int = 20;
const ERR_AMODE: c_int = 21;
const ERR_BAD_FILE: c_int = 23;
const ERR_DUP_DATAREP: c_int = 27;
const ERR_FILE_EXISTS: c_int = 28;
const ERR_FILE: c_int = 30;
const ERR_IO: c_int = 35;
const ERR_NO_SPACE: c_int = 41;
const ERR_NO_SUCH_FILE: c_int = 42;
const ERR_QUOTA: c_int = 45;
const ERR_READ_ONLY: c_int = 46;

/// The face's MPI-IO state.
pub struct IoState {
    pub files: Vec<Option<Box<File>>>,
    /// MPI_FILE_NULL's error handler: the one files opened from now on start with.
    pub null_errhandler: H,
    /// MPI_Register_datarep's representations: (name, read, write, extent function, extra).
    datareps: Vec<(String, usize, usize, usize, usize)>,
    /// Side files made so far (their names must differ within a process).
    made: u64,
}

impl Default for IoState {
    fn default() -> Self {
        IoState {
            files: Vec::new(),
            null_errhandler: abi::ERRORS_RETURN,
            datareps: Vec::new(),
            made: 0,
        }
    }
}

/// A file view (MPI-3.1 13.3).
#[derive(Clone)]
struct View {
    disp: u64,
    etype_h: H,
    etype: TypeRef,
    ftype_h: H,
    ftype: TypeRef,
    rep: String,
    /// Data in the file is in external32 (converted on the way in and out).
    ext32: bool,
    /// The filetype's blocks with data (offset from the tile's start, length), and where each
    /// starts in the tile's data.
    blocks: Vec<(u64, usize)>,
    starts: Vec<usize>,
}

impl View {
    /// The view a file opens with: bytes from offset 0, "native".
    fn bytes() -> R<View> {
        let b = crate::dtype::predefined(BYTE)?;
        Ok(View {
            disp: 0,
            etype_h: BYTE,
            etype: TypeRef::Static(b),
            ftype_h: BYTE,
            ftype: TypeRef::Static(b),
            rep: "native".into(),
            ext32: false,
            blocks: vec![(0, 1)],
            starts: vec![0],
        })
    }

    fn esize(&self) -> u64 {
        self.etype.size as u64
    }

    /// A filetype whose data is one run from the tile's start to its extent.
    fn contiguous(&self) -> bool {
        self.blocks.len() == 1
            && self.blocks[0].0 == 0
            && self.blocks[0].1 as isize == self.ftype.extent()
    }

    /// Calls `f(file offset, offset in the request, length)` for the file ranges of bytes `pos ..
    /// pos + len` of the view's data, in order, ranges that touch merged; stops where `f` says
    /// false.
    fn map(&self, pos: u64, len: usize, mut f: impl FnMut(u64, usize, usize) -> R<bool>) -> R {
        if len == 0 {
            return Ok(());
        }
        if self.contiguous() {
            f(self.disp + pos, 0, len)?;
            return Ok(());
        }
        if self.blocks.is_empty() {
            return Err(fail(
                ERR_IO,
                format!("{len} bytes through a view whose filetype holds no data: such a view takes only accesses of no data; set a view with data first"),
            ));
        }
        let tile_data = self.ftype.size as u64;
        let ext = self.ftype.extent() as u64;
        let mut tile = pos / tile_data;
        let within = (pos % tile_data) as usize;
        let mut b = self.starts.partition_point(|&s| s <= within) - 1;
        let mut into = within - self.starts[b];
        let mut done = 0;
        // The range gathered so far: (file offset, request offset, length).
        let mut run: Option<(u64, usize, usize)> = None;
        while done < len {
            let (o, l) = self.blocks[b];
            let take = (l - into).min(len - done);
            let off = self.disp + tile * ext + o + into as u64;
            run = match run {
                Some((ro, rr, rl)) if ro + rl as u64 == off => Some((ro, rr, rl + take)),
                Some((ro, rr, rl)) => {
                    if !f(ro, rr, rl)? {
                        return Ok(());
                    }
                    Some((off, done, take))
                }
                None => Some((off, done, take)),
            };
            done += take;
            into = 0;
            b += 1;
            if b == self.blocks.len() {
                b = 0;
                tile += 1;
            }
        }
        if let Some((ro, rr, rl)) = run {
            f(ro, rr, rl)?;
        }
        Ok(())
    }

    /// Bytes of the view's data that lie before file offset `end` (where the end of a file of
    /// `end` bytes is, in the view). Per block: the tiles whose copy of it starts below `end`,
    /// whole but for the last (blocks may lie anywhere, also past the extent).
    fn data_below(&self, end: u64) -> u64 {
        if end <= self.disp {
            return 0;
        }
        let rel = end - self.disp;
        if self.contiguous() {
            return rel;
        }
        let ext = self.ftype.extent() as u64;
        self.blocks
            .iter()
            .filter(|&&(o, _)| rel > o)
            .map(|&(o, l)| {
                let past = rel - o;
                (past / ext) * l as u64 + (past % ext).min(l as u64)
            })
            .sum()
    }

    /// The file offset of byte `pos` of the view's data (the displacement for a view with no
    /// data there).
    fn byte_offset(&self, pos: u64) -> u64 {
        let mut at = self.disp;
        let _ = self.map(pos, 1, |off, _, _| {
            at = off;
            Ok(false)
        });
        at
    }
}

/// Where the shared file pointer lives.
enum Shared {
    /// A file of one rank keeps it here.
    Local(Offset),
    /// The side file every rank has open.
    File(OsFile),
    /// Why there is none (a side file could not be made): shared accesses fail with this.
    None(String),
}

/// A split collective begun and not yet ended.
struct Split {
    what: &'static str,
    buf: usize,
    status: Status,
}

/// An open file.
pub struct File {
    /// The file's own communicator (a duplicate of the program's; errors return).
    comm: H,
    os: OsFile,
    path: PathBuf,
    amode: c_int,
    errhandler: H,
    atomic: bool,
    view: View,
    /// This rank's rank in `comm`, and its size.
    rank: usize,
    size: usize,
    /// The individual file pointer, in etypes of the view.
    pos: Offset,
    shared: Shared,
    info: Vec<(String, String)>,
    split: Option<Split>,
}

fn bad_file(h: H) -> crate::Fail {
    fail(
        ERR_FILE,
        format!("{h:#x} is not an open file (closed, or never opened)"),
    )
}

/// The open file `h` names.
fn with<T>(h: H, f: impl FnOnce(&mut File) -> R<T>) -> R<T> {
    let mut rt = rt()?;
    let file = index(KIND_FILE, h)
        .and_then(|i| rt.io.files.get_mut(i))
        .and_then(|f| f.as_deref_mut())
        .ok_or_else(|| bad_file(h))?;
    f(file)
}

/// The error handler of file `h` (MPI_FILE_NULL's for MPI_FILE_NULL and for what is not a file).
pub fn errhandler(rt: &crate::state::Rt, h: H) -> H {
    index(KIND_FILE, h)
        .and_then(|i| rt.io.files.get(i))
        .and_then(|f| f.as_ref())
        .map_or(rt.io.null_errhandler, |f| f.errhandler)
}

/// Whether `h` is a file handle or MPI_FILE_NULL (errors on it go to a file's handler).
pub fn is_file(h: H) -> bool {
    h == FILE_NULL || index(KIND_FILE, h).is_some()
}

/// The error class of a failed file operation.
fn io_class(e: &io::Error) -> c_int {
    match e.raw_os_error() {
        Some(libc::ENOENT) => ERR_NO_SUCH_FILE,
        Some(libc::EEXIST) => ERR_FILE_EXISTS,
        Some(libc::EACCES) | Some(libc::EPERM) => ERR_ACCESS,
        Some(libc::EROFS) => ERR_READ_ONLY,
        Some(libc::ENOSPC) => ERR_NO_SPACE,
        Some(libc::EDQUOT) => ERR_QUOTA,
        Some(libc::EISDIR)
        | Some(libc::ENOTDIR)
        | Some(libc::ENAMETOOLONG)
        | Some(libc::EINVAL) => ERR_BAD_FILE,
        _ => ERR_IO,
    }
}

fn io_fail(e: &io::Error, what: String) -> crate::Fail {
    fail(io_class(e), format!("{what}: {e}"))
}

/// The file system prefixes ROMIO accepts before a name ("ufs:/tmp/x"): the file is the rest.
fn strip_prefix(name: &str) -> &str {
    for p in [
        "ufs:", "nfs:", "file:", "lustre:", "gpfs:", "pvfs2:", "xfs:",
    ] {
        if let Some(rest) = name.strip_prefix(p) {
            return rest;
        }
    }
    name
}

fn check_amode(amode: c_int) -> R {
    let access = [MODE_RDONLY, MODE_RDWR, MODE_WRONLY]
        .iter()
        .filter(|&&m| amode & m != 0)
        .count();
    let why = if amode & !MODES != 0 {
        Some("it has bits no MPI_MODE_ constant has")
    } else if access != 1 {
        Some("exactly one of MPI_MODE_RDONLY, MPI_MODE_RDWR and MPI_MODE_WRONLY is needed")
    } else if amode & MODE_RDONLY != 0 && amode & (MODE_CREATE | MODE_EXCL) != 0 {
        Some("MPI_MODE_RDONLY with MPI_MODE_CREATE or MPI_MODE_EXCL")
    } else if amode & MODE_RDWR != 0 && amode & MODE_SEQUENTIAL != 0 {
        Some("MPI_MODE_RDWR with MPI_MODE_SEQUENTIAL")
    } else {
        None
    };
    match why {
        Some(w) => Err(fail(ERR_AMODE, format!("access mode {amode:#x}: {w}"))),
        None => Ok(()),
    }
}

/// An int agreed over `comm`: the minimum of every rank's.
fn min_over(v: c_int, comm: H, what: &str) -> R<c_int> {
    let mut out: c_int = 0;
    // SAFETY: one int each way.
    ok(
        unsafe {
            crate::coll::PMPI_Allreduce(
                &v as *const c_int as *const c_void,
                &mut out as *mut c_int as *mut c_void,
                1,
                INT,
                abi::MIN,
                comm,
            )
        },
        what,
    )?;
    Ok(out)
}

/// `v` from rank 0 of `comm` to every rank.
fn bcast<T: Copy>(v: &mut T, comm: H, what: &str) -> R {
    // SAFETY: v is a plain value of size_of::<T>() bytes.
    ok(
        unsafe {
            crate::coll::PMPI_Bcast(
                v as *mut T as *mut c_void,
                std::mem::size_of::<T>() as c_int,
                BYTE,
                0,
                comm,
            )
        },
        what,
    )
}

fn barrier(comm: H, what: &str) -> R {
    // SAFETY: an internal call on the file's communicator.
    ok(unsafe { crate::coll::PMPI_Barrier(comm) }, what)
}

/// Every rank's value of `v`, over `comm`.
fn allgather_i64(v: i64, comm: H, n: usize, what: &str) -> R<Vec<i64>> {
    let mut all = vec![0i64; n];
    // SAFETY: one i64 each; `all` holds one per rank.
    ok(
        unsafe {
            crate::coll::PMPI_Allgather(
                &v as *const i64 as *const c_void,
                1,
                INT64,
                all.as_mut_ptr() as *mut c_void,
                1,
                INT64,
                comm,
            )
        },
        what,
    )?;
    Ok(all)
}

/// An outcome every rank of `comm` agrees on: this rank's failure, or, when it has none but
/// another rank failed, `other` (MPI_ERR_IO); else this rank's value.
fn agree<T>(mine: R<T>, comm: H, other: &str) -> R<T> {
    let good = min_over(mine.is_ok() as c_int, comm, "agreeing on the outcome")?;
    match mine {
        Err(e) => Err(e),
        Ok(_) if good == 0 => Err(fail(ERR_IO, other.to_string())),
        Ok(v) => Ok(v),
    }
}

/// Takes (`kind` F_RDLCK or F_WRLCK) or drops (F_UNLCK) an open-file-description lock on bytes
/// `start .. start + len` of `f` (len 0: to the end), waiting for it.
fn ofd_lock(f: &OsFile, kind: c_int, start: u64, len: u64) -> io::Result<()> {
    // SAFETY: flock is a plain C struct; zeroed is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    loop {
        // SAFETY: fcntl on an open descriptor with a valid flock.
        let rc = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLKW, &fl) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

impl Shared {
    /// Moves the shared pointer on by `by` etypes; where it was.
    fn fetch_add(&mut self, by: Offset) -> R<Offset> {
        match self {
            Shared::Local(p) => {
                let was = *p;
                *p += by;
                Ok(was)
            }
            Shared::File(f) => {
                let io = |e: io::Error| io_fail(&e, "moving the shared file pointer".into());
                ofd_lock(f, libc::F_WRLCK, 0, 0).map_err(io)?;
                let was = read_ptr(f);
                let r = was.and_then(|w| {
                    if by != 0 {
                        f.write_all_at(&(w + by).to_ne_bytes(), 0)?;
                    }
                    Ok(w)
                });
                let _ = ofd_lock(f, libc::F_UNLCK, 0, 0);
                r.map_err(io)
            }
            Shared::None(why) => Err(fail(class::UNSUPPORTED_OPERATION, why.clone())),
        }
    }

    fn set(&mut self, to: Offset) -> R {
        match self {
            Shared::Local(p) => {
                *p = to;
                Ok(())
            }
            Shared::File(f) => f
                .write_all_at(&to.to_ne_bytes(), 0)
                .map_err(|e| io_fail(&e, "setting the shared file pointer".into())),
            Shared::None(why) => Err(fail(class::UNSUPPORTED_OPERATION, why.clone())),
        }
    }

    fn get(&mut self) -> R<Offset> {
        self.fetch_add(0)
    }
}

fn read_ptr(f: &OsFile) -> io::Result<Offset> {
    let mut b = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match f.read_at(&mut b[got..], got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    Ok(if got == 8 { i64::from_ne_bytes(b) } else { 0 })
}

/// A key naming this machine's kernel and PID namespace (ranks that agree share /dev/shm).
fn machine_key() -> i64 {
    crate::win::machine_key() as i64
}

/// Removes a file when dropped: rank 0's side file, on every way out of `make_shared` (after
/// the others have it open, or on a failure before).
struct Unlink(Option<PathBuf>);

impl Drop for Unlink {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Makes the shared file pointer of a file of `n` ranks at `path`, starting at `start`
/// (collective over `comm`).
fn make_shared(comm: H, me: usize, n: usize, path: &Path, start: Offset) -> R<Shared> {
    if n == 1 {
        return Ok(Shared::Local(start));
    }
    let keys = allgather_i64(machine_key(), comm, n, "comparing the ranks' machines")?;
    let one_machine = keys.iter().all(|&k| k == keys[0]);
    // Rank 0 makes the side file and names it to the others (a NUL-terminated path).
    let mut name = [0u8; 4096];
    let mut made = None;
    let mut unlink = Unlink(None);
    let mut why = String::new();
    if me == 0 {
        let seq = {
            let mut rt = rt()?;
            rt.io.made += 1;
            rt.io.made
        };
        let base = path
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "file".into());
        let mut places: Vec<PathBuf> = Vec::new();
        if one_machine {
            places.push(
                PathBuf::from("/dev/shm").join(format!("volley-shfp-{}-{seq}", std::process::id())),
            );
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        places.push(
            dir.unwrap_or(Path::new("."))
                .join(format!(".{base}.volley-shfp-{}-{seq}", std::process::id())),
        );
        for p in places {
            let r = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&p)
                .and_then(|f| f.write_all_at(&start.to_ne_bytes(), 0).map(|_| f));
            match r {
                Ok(f) => {
                    let s = p.to_string_lossy();
                    if s.len() < name.len() {
                        name[..s.len()].copy_from_slice(s.as_bytes());
                        unlink.0 = Some(p.clone());
                        made = Some(f);
                        break;
                    }
                    let _ = std::fs::remove_file(&p);
                }
                Err(e) => why = format!("{}: {e}", p.display()),
            }
        }
    }
    bcast(
        &mut name,
        comm,
        "naming the shared file pointer's side file",
    )?;
    let len = name.iter().position(|&b| b == 0).unwrap_or(0);
    let side = PathBuf::from(String::from_utf8_lossy(&name[..len]).into_owned());
    let mine: Result<OsFile, String> = if len == 0 {
        Err(format!(
            "MPI's shared file pointer needs a side file, and rank 0 could not make one ({why})"
        ))
    } else if let Some(f) = made.take() {
        Ok(f)
    } else {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&side)
            .map_err(|e| {
                format!(
                    "the shared file pointer's side file {} (a file system every rank of the file sees is needed): {e}",
                    side.display()
                )
            })
    };
    let good = min_over(mine.is_ok() as c_int, comm, "sharing the file pointer")?;
    // Every rank has it open: rank 0 unlinks it now.
    drop(unlink);
    Ok(match (mine, good) {
        (Ok(f), 1) => Shared::File(f),
        (Err(e), _) => Shared::None(e),
        (Ok(_), _) => Shared::None(
            "another rank of the file could not open the shared file pointer's side file (MPI's shared file pointer needs a file system every rank of the file sees)".into(),
        ),
    })
}

fn open(comm: H, filename: *const c_char, amode: c_int, info: H, fh: *mut H) -> R {
    {
        // The communicator is the same object at every rank: its errors are everyone's.
        let rt = rt()?;
        if rt.comm(comm)?.is_inter() {
            return Err(fail(
                class::COMM,
                "MPI_File_open takes an intracommunicator",
            ));
        }
    }
    // This rank's own arguments; a rank whose arguments are wrong still takes part in what
    // follows, so that every rank gets an error and none waits for ever.
    let mine = (|| {
        if fh.is_null() {
            return Err(fail(
                class::ARG,
                "the file handle argument is a null pointer",
            ));
        }
        // SAFETY: MPI: a C string.
        let name = unsafe { c_str(filename)? };
        check_amode(amode)?;
        let pairs = if info == abi::INFO_NULL {
            Vec::new()
        } else {
            crate::info::pairs(info)?
        };
        Ok((strip_prefix(&name).to_string(), pairs))
    })();
    let mut fc: H = 0;
    // SAFETY: internal calls with valid arguments (fc is written).
    ok(
        unsafe { crate::comm::PMPI_Comm_dup(comm, &mut fc) },
        "duplicating the communicator",
    )?;
    let r = rt()
        .and_then(|mut rt| {
            rt.comm_slot_mut(fc)?.errhandler = abi::ERRORS_RETURN;
            Ok(())
        })
        .and_then(|_| {
            let (name, pairs) = agree(
                mine,
                fc,
                "another rank's arguments to MPI_File_open were wrong",
            )?;
            open_on(fc, &name, amode, pairs)
        });
    match r {
        Ok(h) => {
            // SAFETY: the caller's output argument (checked not null).
            unsafe { put(fh, h) }
        }
        Err(e) => {
            // SAFETY: the duplicate made above.
            unsafe { crate::comm::PMPI_Comm_free(&mut fc) };
            Err(e)
        }
    }
}

fn open_on(fc: H, name: &str, amode: c_int, info: Vec<(String, String)>) -> R<H> {
    let (me, n) = {
        let rt = rt()?;
        let c = rt.comm(fc)?;
        (c.rank, c.size())
    };
    // Every rank must pass the same access mode.
    let lo = min_over(amode, fc, "comparing access modes")?;
    let hi = -min_over(-amode, fc, "comparing access modes")?;
    if lo != hi {
        return Err(fail(
            class::NOT_SAME,
            "the ranks passed MPI_File_open different access modes",
        ));
    }
    let path = PathBuf::from(name);
    let opts = |create: bool| {
        let mut o = OpenOptions::new();
        o.read(amode & MODE_WRONLY == 0)
            .write(amode & MODE_RDONLY == 0)
            .mode(0o666);
        if create {
            if amode & MODE_EXCL != 0 {
                o.create_new(true);
            } else if amode & MODE_CREATE != 0 {
                o.create(true);
            }
        }
        o
    };
    // Rank 0 first: MPI_MODE_CREATE and MPI_MODE_EXCL decide once.
    let mut first: Option<R<OsFile>> = None;
    let mut code: c_int = 0;
    if me == 0 {
        let r = opts(true)
            .open(&path)
            .map_err(|e| io_fail(&e, format!("opening {name}")));
        if let Err(e) = &r {
            code = e.class;
        }
        first = Some(r);
    }
    bcast(&mut code, fc, "opening the file")?;
    if code != 0 {
        return Err(match first {
            Some(Err(e)) => e,
            _ => fail(
                code,
                format!("opening {name} failed at rank 0 of the communicator"),
            ),
        });
    }
    let mine = match first {
        Some(r) => r,
        None => opts(false)
            .open(&path)
            .map_err(|e| io_fail(&e, format!("opening {name}"))),
    };
    let good = min_over(mine.is_ok() as c_int, fc, "agreeing on the open")?;
    let os = match (mine, good) {
        (Ok(f), 1) => f,
        (Err(e), _) => return Err(e),
        (Ok(_), _) => return Err(fail(ERR_IO, format!("another rank could not open {name}"))),
    };
    // MPI_MODE_APPEND: every file pointer starts at the end.
    let start: Offset = if amode & MODE_APPEND != 0 {
        let mut len = os.metadata().map(|m| m.len() as i64).unwrap_or(0);
        bcast(&mut len, fc, "finding the end of the file")?;
        len
    } else {
        0
    };
    let shared = make_shared(fc, me, n, &path, start)?;
    let mut rt = rt()?;
    let file = File {
        comm: fc,
        os,
        path,
        amode,
        errhandler: rt.io.null_errhandler,
        atomic: false,
        rank: me,
        size: n,
        view: View::bytes()?,
        pos: start,
        shared,
        info,
        split: None,
    };
    let i = crate::state::vacant(&mut rt.io.files, Box::new(file));
    Ok(handle(KIND_FILE, i))
}

/// MPI_File_close: collective. A failure of the closing barrier leaves the file open (its
/// handler hears of it); once past it the file is closed, and a failed MPI_MODE_DELETE_ON_CLOSE
/// goes to MPI_FILE_NULL's handler (the file is gone by then).
/// Whether the file is closed, and how it went.
fn close(h: H) -> (bool, R) {
    let found = with(h, |f| {
        Ok((
            f.comm,
            f.path.clone(),
            f.amode & MODE_DELETE_ON_CLOSE != 0,
            f.rank,
        ))
    });
    let (comm, path, delete, me) = match found {
        Ok(v) => v,
        Err(e) => return (false, Err(e)),
    };
    // Every rank is done with the file before it is deleted (an unlinked file stays readable
    // through the descriptors still open, but nobody may still be writing it).
    if let Err(e) = barrier(comm, "closing the file") {
        return (false, Err(e));
    }
    let gone = if delete && me == 0 {
        std::fs::remove_file(&path).map_err(|e| {
            let mut f = io_fail(&e, format!("deleting {} at close", path.display()));
            f.comm = Some(FILE_NULL);
            f
        })
    } else {
        Ok(())
    };
    match rt() {
        Ok(mut rt) => {
            let i = index(KIND_FILE, h).expect("checked");
            rt.io.files[i] = None;
        }
        Err(e) => return (false, Err(e)),
    }
    let mut comm = comm;
    // SAFETY: the file's own communicator, freed once.
    unsafe { crate::comm::PMPI_Comm_free(&mut comm) };
    (true, gone)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    Read,
    Write,
}

/// Where a data access starts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Where {
    /// An explicit offset, in etypes of the view.
    At(Offset),
    Individual,
    Shared,
    /// The ordered collectives: the shared pointer, the ranks' data in rank order.
    Ordered,
}

fn check_mode(f: &File, dir: Dir, at: Where) -> R {
    if dir == Dir::Write && f.amode & MODE_RDONLY != 0 {
        return Err(fail(
            ERR_READ_ONLY,
            "the file was opened with MPI_MODE_RDONLY",
        ));
    }
    if dir == Dir::Read && f.amode & MODE_WRONLY != 0 {
        return Err(fail(
            ERR_ACCESS,
            "the file was opened with MPI_MODE_WRONLY: it cannot be read",
        ));
    }
    if f.amode & MODE_SEQUENTIAL != 0 && matches!(at, Where::At(_) | Where::Individual) {
        return Err(fail(
            class::UNSUPPORTED_OPERATION,
            "a file opened with MPI_MODE_SEQUENTIAL is read and written through the shared file pointer only",
        ));
    }
    Ok(())
}

/// Reads into `buf` from file offset `off` until it is full or the file ends; the bytes read.
fn read_full(f: &OsFile, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Moves `count` elements of `t` at `buf` to or from bytes `pos ..` of the view's data; the
/// bytes moved (fewer than asked only where a read meets the end of the file).
fn transfer(f: &File, dir: Dir, pos: u64, buf: *const c_void, count: usize, t: &TypeRef) -> R<u64> {
    let bytes = count * t.size;
    if bytes == 0 {
        return Ok(0);
    }
    // The bytes as the file holds them: the program's own when its type is contiguous and the
    // file is native, else a packed (and converted) copy.
    let conv = f.view.ext32;
    if conv && !crate::external::same_layout(t)? {
        return Err(fail(
            class::UNSUPPORTED_DATAREP,
            "in an \"external32\" view volley's MPI moves types whose basic elements have their native sizes there (not MPI_LONG, MPI_UNSIGNED_LONG or MPI_WCHAR)",
        ));
    }
    let staged = !t.contig || conv;
    let mut stage = if staged { vec![0u8; bytes] } else { Vec::new() };
    if staged && dir == Dir::Write {
        // SAFETY: MPI: buf holds count elements of t.
        unsafe { t.pack(buf as *const u8, count, &mut stage) };
        if conv {
            let mut ext = vec![0u8; bytes];
            crate::external::to_ext32(t, count, &stage, &mut ext)?;
            stage = ext;
        }
    }
    let data: *mut u8 = if staged {
        stage.as_mut_ptr()
    } else {
        buf as *mut u8
    };
    // Atomic mode: the file's bytes this call touches are locked for it.
    let span = if f.atomic {
        let mut first = u64::MAX;
        let mut end = 0;
        f.view.map(pos, bytes, |off, _, len| {
            first = first.min(off);
            end = end.max(off + len as u64);
            Ok(true)
        })?;
        let kind = if dir == Dir::Write {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        };
        ofd_lock(&f.os, kind, first, end - first)
            .map_err(|e| io_fail(&e, "locking the file for atomic mode".into()))?;
        Some((first, end - first))
    } else {
        None
    };
    let what = |e: io::Error| {
        io_fail(
            &e,
            format!(
                "{} {}",
                if dir == Dir::Write {
                    "writing"
                } else {
                    "reading"
                },
                f.path.display()
            ),
        )
    };
    let mut moved = 0usize;
    let r = f.view.map(pos, bytes, |off, at, len| {
        if dir == Dir::Write {
            // SAFETY: at + len <= bytes, inside the program's contiguous buffer or the stage.
            let piece = unsafe { std::slice::from_raw_parts(data.add(at), len) };
            f.os.write_all_at(piece, off).map_err(what)?;
            moved = at + len;
            Ok(true)
        } else {
            // SAFETY: as above; the program lent the buffer for writing (MPI: a receive buffer).
            let piece = unsafe { std::slice::from_raw_parts_mut(data.add(at), len) };
            let n = read_full(&f.os, piece, off).map_err(what)?;
            moved = at + n;
            Ok(n == len)
        }
    });
    if let Some((start, len)) = span {
        let _ = ofd_lock(&f.os, libc::F_UNLCK, start, len);
    }
    r?;
    if staged && dir == Dir::Read {
        if conv {
            let mut native = vec![0u8; bytes];
            crate::external::from_ext32(t, count, &stage, &mut native)?;
            stage = native;
        }
        // SAFETY: MPI: buf holds count elements of t; unpack stops where the data read ends.
        unsafe { t.unpack(&stage[..moved], buf as *mut u8, count) };
    }
    Ok(moved as u64)
}

/// A data access: `count` elements of `datatype` at `buf`, starting where `at` says; its status.
/// `pre` is a failure the caller found first (an ordered access still takes part in its
/// collective with it, so that no rank waits for ever).
#[allow(clippy::too_many_arguments)]
fn access(
    h: H,
    dir: Dir,
    at: Where,
    buf: *const c_void,
    count: c_int,
    datatype: H,
    pre: R,
) -> R<Status> {
    let (comm, rank, size) = with(h, |f| Ok((f.comm, f.rank, f.size)))?;
    // This rank's own checks.
    let checked = pre.and_then(|_| {
        if count < 0 {
            return Err(fail(class::COUNT, format!("count {count} is negative")));
        }
        let t = committed(&*rt()?, datatype)?;
        let bytes = count as usize * t.size;
        let es = with(h, |f| {
            check_mode(f, dir, at)?;
            let es = f.view.esize();
            if !(bytes as u64).is_multiple_of(es) {
                return Err(fail(
                    ERR_IO,
                    format!(
                        "{bytes} bytes are not a whole number of the view's etype ({es} bytes): a file access moves whole etypes"
                    ),
                ));
            }
            Ok(es)
        })?;
        Ok((t, bytes, es))
    });
    let (t, esize, pos) = if at == Where::Ordered {
        let etypes = checked
            .as_ref()
            .map_or(-1, |(_, bytes, es)| (*bytes as u64 / es) as i64);
        let all = allgather_i64(etypes, comm, size, "ordering the ranks' data")?;
        let (t, _, esize) = checked?;
        if all.iter().any(|&n| n < 0) {
            return Err(fail(
                ERR_IO,
                "another rank's part of the ordered access was refused",
            ));
        }
        let before: i64 = all[..rank].iter().sum();
        let total: i64 = all.iter().sum();
        // Rank 0 moves the shared pointer for everyone: [where it was, error class].
        let mut base = [0i64; 2];
        let mut mine = Ok(());
        if rank == 0 {
            match with(h, |f| f.shared.fetch_add(total)) {
                Ok(b) => base[0] = b,
                Err(e) => {
                    base[1] = e.class as i64;
                    mine = Err(e);
                }
            }
        }
        bcast(&mut base, comm, "sharing the shared file pointer")?;
        mine?;
        if base[1] != 0 {
            return Err(fail(
                base[1] as c_int,
                "rank 0 of the file could not move the shared file pointer",
            ));
        }
        (t, esize, (base[0] + before) as u64 * esize)
    } else {
        let (t, bytes, esize) = checked?;
        let etypes = (bytes as u64 / esize) as Offset;
        let pos = match at {
            Where::At(off) => {
                if off < 0 {
                    return Err(fail(class::ARG, format!("offset {off} is negative")));
                }
                off as u64 * esize
            }
            Where::Individual => with(h, |f| Ok(f.pos as u64 * esize))?,
            _ => with(h, |f| f.shared.fetch_add(etypes))? as u64 * esize,
        };
        (t, esize, pos)
    };
    let done = with(h, |f| {
        let done = transfer(f, dir, pos, buf, count as usize, &t)?;
        if at == Where::Individual {
            f.pos += done.div_ceil(esize) as Offset;
        }
        Ok(done)
    })?;
    Ok(Status::of(abi::ANY_SOURCE, abi::ANY_TAG, done))
}

/// A blocking access: its status at `status`.
fn blocking(
    h: H,
    dir: Dir,
    at: Where,
    buf: *const c_void,
    count: c_int,
    datatype: H,
    status: *mut Status,
) -> R {
    let st = access(h, dir, at, buf, count, datatype, Ok(()))?;
    // SAFETY: the caller's status argument (or MPI_STATUS_IGNORE).
    unsafe { crate::p2p::put_status(status, st) };
    Ok(())
}

/// A non-blocking access: done now, its request complete.
fn nonblocking(
    h: H,
    dir: Dir,
    at: Where,
    buf: *const c_void,
    count: c_int,
    datatype: H,
    request: *mut H,
) -> R {
    let st = access(h, dir, at, buf, count, datatype, Ok(()))?;
    let comm = with(h, |f| Ok(f.comm))?;
    crate::p2p::completed_request_with(comm, st, request)
}

/// The `_begin` of a split collective: done now, its status kept for the `_end`.
fn begin(
    h: H,
    what: &'static str,
    dir: Dir,
    at: Where,
    buf: *const c_void,
    count: c_int,
    datatype: H,
) -> R {
    let active = with(h, |f| {
        match &f.split {
        Some(s) => Err(fail(
            ERR_IO,
            format!(
                "{}_begin is still active on this file: a file has one split collective at a time (MPI-3.1 13.4.5)",
                s.what
            ),
        )),
        None => Ok(()),
    }
    });
    let status = access(h, dir, at, buf, count, datatype, active)?;
    with(h, |f| {
        f.split = Some(Split {
            what,
            buf: buf as usize,
            status,
        });
        Ok(())
    })
}

/// The `_end` of a split collective.
fn end(h: H, what: &'static str, buf: *const c_void, status: *mut Status) -> R {
    let st = with(h, |f| match f.split.take() {
        Some(s) if s.what == what && s.buf == buf as usize => Ok(s.status),
        Some(s) => {
            let msg = if s.what != what {
                format!(
                    "{what}_end while {}_begin is the active split collective",
                    s.what
                )
            } else {
                format!("{what}_end with another buffer than its _begin")
            };
            f.split = Some(s);
            Err(fail(ERR_IO, msg))
        }
        None => Err(fail(
            ERR_IO,
            format!("{what}_end without a {what}_begin before it"),
        )),
    })?;
    // SAFETY: the caller's status argument (or MPI_STATUS_IGNORE).
    unsafe { crate::p2p::put_status(status, st) };
    Ok(())
}

/// Checks a view's arguments and builds it.
fn make_view(disp: Offset, etype: H, filetype: H, rep: &str, writable: bool) -> R<View> {
    let (e, ft) = {
        let rt = rt()?;
        (committed(&rt, etype)?, committed(&rt, filetype)?)
    };
    if disp < 0 {
        return Err(fail(class::ARG, format!("displacement {disp} is negative")));
    }
    if e.size == 0 {
        return Err(fail(class::ARG, "the etype holds no data"));
    }
    // A filetype with no data (e.g. an hindexed type of zero-length blocks, the share of a
    // rank that has nothing to write in a collective) makes a view that takes only accesses of
    // no data, as in MPICH and Open MPI (PnetCDF's fill of small variables by many ranks sets
    // such views); one with data needs a positive extent to tile the file.
    if (ft.size > 0 && ft.extent() <= 0) || e.extent() <= 0 {
        return Err(fail(
            ERR_IO,
            "the etype and the filetype need a positive extent: the file is their tiles, one after another",
        ));
    }
    if !ft.size.is_multiple_of(e.size) {
        return Err(fail(
            class::ARG,
            format!(
                "the filetype holds {} bytes of data: it must be made of whole etypes ({} bytes)",
                ft.size, e.size
            ),
        ));
    }
    // Displacements must not be negative nor go back, and in a file that can be written the
    // etype and the filetype must not overlap themselves (MPI-3.1 13.3); MPICH's class for
    // both is MPI_ERR_IO.
    for (what, t) in [("etype", &e), ("filetype", &ft)] {
        let (mut start, mut end) = (0isize, 0isize);
        for &(o, l) in t.blocks.iter().filter(|b| b.1 > 0) {
            if o < start {
                return Err(fail(
                    ERR_IO,
                    format!("the {what}'s displacements must be non-negative and never decrease (MPI-3.1 13.3)"),
                ));
            }
            if writable && o < end {
                return Err(fail(
                    ERR_IO,
                    format!("the {what} overlaps itself, which a file opened for writing does not allow (MPI-3.1 13.3)"),
                ));
            }
            start = o;
            end = end.max(o + l as isize);
        }
    }
    let mut blocks = Vec::with_capacity(ft.blocks.len());
    let mut starts = Vec::with_capacity(ft.blocks.len());
    let mut at = 0;
    for &(o, l) in ft.blocks.iter().filter(|b| b.1 > 0) {
        blocks.push((o as u64, l));
        starts.push(at);
        at += l;
    }
    let ext32 = rep == "external32";
    if ext32 && !(crate::external::same_layout(&e)? && crate::external::same_layout(&ft)?) {
        return Err(fail(
            class::UNSUPPORTED_DATAREP,
            "an \"external32\" view in volley's MPI takes types whose basic elements have their native sizes there (not MPI_LONG, MPI_UNSIGNED_LONG or MPI_WCHAR)",
        ));
    }
    Ok(View {
        disp: disp as u64,
        etype_h: etype,
        etype: e,
        ftype_h: filetype,
        ftype: ft,
        rep: rep.to_string(),
        ext32,
        blocks,
        starts,
    })
}

/// Whether `rep` is a data representation files here can use; the error otherwise.
fn check_rep(rep: &str) -> R {
    if rep == "native" || rep == "internal" || rep == "external32" {
        return Ok(());
    }
    let rt = rt()?;
    match rt.io.datareps.iter().find(|d| d.0 == rep) {
        Some(d) if d.1 == 0 && d.2 == 0 => Ok(()),
        Some(_) => Err(fail(
            class::UNSUPPORTED_DATAREP,
            format!("data representation \"{rep}\" converts with the program's functions, which volley's MPI does not call: register it with MPI_CONVERSION_FN_NULL, or use \"native\""),
        )),
        None => Err(fail(
            class::UNSUPPORTED_DATAREP,
            format!("no data representation is called \"{rep}\": \"native\", \"internal\", or one registered with MPI_Register_datarep"),
        )),
    }
}

/// A representation registered with an extent function lays files out by it (MPI-3.1 13.5.3);
/// volley's views lay them out by the native extents, so one whose extents differ for the
/// view's types is refused.
fn check_registered_extents(v: &View) -> R {
    let (f, extra) = {
        let rt = rt()?;
        match rt.io.datareps.iter().find(|d| d.0 == v.rep) {
            Some(d) if d.3 != 0 => (d.3, d.4),
            _ => return Ok(()),
        }
    };
    for (h, t) in [(v.etype_h, &v.etype), (v.ftype_h, &v.ftype)] {
        if call_extent_fn(f, extra, h)? != t.extent() as Aint {
            return Err(fail(
                class::UNSUPPORTED_DATAREP,
                format!("data representation \"{}\" gives the view's types other extents than their native ones, and volley's MPI lays files out by the native extents", v.rep),
            ));
        }
    }
    Ok(())
}

/// Calls a representation's extent function (MPI_Datarep_extent_function) on `datatype`.
fn call_extent_fn(f: usize, extra: usize, datatype: H) -> R<Aint> {
    // SAFETY: `f` is the non-null extent function the program registered with
    // MPI_Register_datarep, of the signature mpi.h declares for it.
    let f: unsafe extern "C" fn(H, *mut Aint, *mut c_void) -> c_int =
        unsafe { std::mem::transmute(f) };
    let mut e: Aint = 0;
    // SAFETY: called as MPI defines it.
    let rc = unsafe { f(datatype, &mut e, extra as *mut c_void) };
    if rc != 0 {
        return Err(fail_code(
            rc,
            "the data representation's extent function failed",
        ));
    }
    Ok(e)
}

/// A handle for a view's datatype: a predefined one as itself, a made one as a new handle the
/// program frees (MPI-3.1 13.3).
fn type_handle(h: H, t: &TypeRef) -> R<H> {
    match t {
        TypeRef::Static(_) => Ok(h),
        TypeRef::Made(d) => {
            let mut rt = rt()?;
            Ok(handle(
                KIND_TYPE,
                crate::state::vacant(&mut rt.types, d.clone()),
            ))
        }
    }
}

crate::mpi! {
    fn MPI_File_open / PMPI_File_open(comm: H, filename: *const c_char, amode: c_int, info: H, fh: *mut H) [FILE_NULL] {
        open(comm, filename, amode, info, fh)
    }

    fn MPI_File_close / PMPI_File_close(fh: *mut H) [FILE_NULL] {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(fh)? };
        let (closed, r) = close(h);
        if closed {
            // SAFETY: the caller's in-out argument.
            unsafe { put(fh, FILE_NULL)? };
        }
        r.map_err(|mut e| {
            e.comm.get_or_insert(h);
            e
        })
    }

    fn MPI_File_delete / PMPI_File_delete(filename: *const c_char, info: H) [FILE_NULL] {
        let _ = info;
        // SAFETY: MPI: a C string.
        let name = unsafe { c_str(filename)? };
        let name = strip_prefix(&name);
        std::fs::remove_file(name).map_err(|e| io_fail(&e, format!("deleting {name}")))
    }

    fn MPI_File_set_size / PMPI_File_set_size(fh: H, size: Offset) [fh] {
        resize(fh, size, false)
    }

    fn MPI_File_preallocate / PMPI_File_preallocate(fh: H, size: Offset) [fh] {
        resize(fh, size, true)
    }

    fn MPI_File_get_size / PMPI_File_get_size(fh: H, size: *mut Offset) [fh] {
        let n = with(fh, |f| {
            f.os.metadata()
                .map(|m| m.len() as Offset)
                .map_err(|e| io_fail(&e, format!("finding the size of {}", f.path.display())))
        })?;
        // SAFETY: the caller's output argument.
        unsafe { put(size, n) }
    }

    fn MPI_File_get_group / PMPI_File_get_group(fh: H, group: *mut H) [fh] {
        let c = with(fh, |f| Ok(f.comm))?;
        let g = rt()?.comm(c)?.group.clone();
        let h = rt()?.add_group(g);
        // SAFETY: the caller's output argument.
        unsafe { put(group, h) }
    }

    fn MPI_File_get_amode / PMPI_File_get_amode(fh: H, amode: *mut c_int) [fh] {
        let m = with(fh, |f| Ok(f.amode))?;
        // SAFETY: the caller's output argument.
        unsafe { put(amode, m) }
    }

    fn MPI_File_set_info / PMPI_File_set_info(fh: H, info: H) [fh] {
        let pairs = if info == abi::INFO_NULL { Vec::new() } else { crate::info::pairs(info)? };
        with(fh, |f| {
            merge_info(&mut f.info, pairs);
            Ok(())
        })
    }

    fn MPI_File_get_info / PMPI_File_get_info(fh: H, info_used: *mut H) [fh] {
        let pairs = with(fh, |f| Ok(f.info.clone()))?;
        crate::info::create(info_used)?;
        // SAFETY: just written.
        let h = unsafe { get(info_used)? };
        for (k, v) in pairs {
            crate::info::set(h, &k, &v)?;
        }
        Ok(())
    }

    fn MPI_File_set_view / PMPI_File_set_view(fh: H, disp: Offset, etype: H, filetype: H, datarep: *const c_char, info: H) [fh] {
        let (comm, sequential, writable) = with(fh, |f| {
            Ok((f.comm, f.amode & MODE_SEQUENTIAL != 0, f.amode & MODE_RDONLY == 0))
        })?;
        // A sequential file's view starts where the shared pointer is, once every rank's
        // earlier shared accesses have moved it (the access mode is the same at every rank).
        if sequential {
            barrier(comm, "setting the view")?;
        }
        // This rank's view, checked; a rank whose view is refused still agrees below, so that
        // all take theirs or all fail.
        let mine = (|| {
            with(fh, |f| match f.split {
                Some(_) => Err(fail(ERR_IO, "MPI_File_set_view while a split collective is active on the file")),
                None => Ok(()),
            })?;
            // SAFETY: MPI: a C string.
            let rep = unsafe { c_str(datarep)? };
            let disp = match (disp == DISPLACEMENT_CURRENT, sequential) {
                (true, true) => with(fh, |f| {
                    let sp = f.shared.get()?;
                    Ok(f.view.byte_offset(sp as u64 * f.view.esize()) as Offset)
                })?,
                (true, false) => return Err(fail(class::ARG, "MPI_DISPLACEMENT_CURRENT is for files opened with MPI_MODE_SEQUENTIAL")),
                (false, true) => return Err(fail(class::ARG, "a file opened with MPI_MODE_SEQUENTIAL takes MPI_DISPLACEMENT_CURRENT as its view's displacement (MPI-3.1 13.3)")),
                (false, false) => disp,
            };
            check_rep(&rep)?;
            let view = make_view(disp, etype, filetype, &rep, writable)?;
            check_registered_extents(&view)?;
            let pairs = if info == abi::INFO_NULL { Vec::new() } else { crate::info::pairs(info)? };
            Ok((view, pairs))
        })();
        let (view, pairs) = agree(mine, comm, "another rank's view was refused")?;
        // The file pointers start again at the view's beginning (MPI-3.1 13.3): every rank is
        // past its earlier accesses (the agreement above) when rank 0 resets the shared one.
        let reset = with(fh, |f| {
            f.view = view;
            f.pos = 0;
            merge_info(&mut f.info, pairs);
            if f.rank == 0 {
                f.shared.set(0)?;
            }
            Ok(())
        });
        // Nobody moves the shared pointer before it is reset; everyone learns how that went.
        agree(reset, comm, "rank 0 could not reset the shared file pointer")
    }

    fn MPI_File_get_view / PMPI_File_get_view(fh: H, disp: *mut Offset, etype: *mut H, filetype: *mut H, datarep: *mut c_char) [fh] {
        let v = with(fh, |f| Ok(f.view.clone()))?;
        let e = type_handle(v.etype_h, &v.etype)?;
        let t = type_handle(v.ftype_h, &v.ftype)?;
        // SAFETY: the caller's output arguments; datarep holds MPI_MAX_DATAREP_STRING bytes.
        unsafe {
            put(disp, v.disp as Offset)?;
            put(etype, e)?;
            put(filetype, t)?;
            let mut len = 0;
            put_str(datarep, MAX_DATAREP_STRING, &mut len, &v.rep)
        }
    }

    fn MPI_File_read_at / PMPI_File_read_at(fh: H, offset: Offset, buf: *mut c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Read, Where::At(offset), buf, count, datatype, status)
    }

    fn MPI_File_read_at_all / PMPI_File_read_at_all(fh: H, offset: Offset, buf: *mut c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Read, Where::At(offset), buf, count, datatype, status)
    }

    fn MPI_File_write_at / PMPI_File_write_at(fh: H, offset: Offset, buf: *const c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Write, Where::At(offset), buf, count, datatype, status)
    }

    fn MPI_File_write_at_all / PMPI_File_write_at_all(fh: H, offset: Offset, buf: *const c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Write, Where::At(offset), buf, count, datatype, status)
    }

    fn MPI_File_iread_at / PMPI_File_iread_at(fh: H, offset: Offset, buf: *mut c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Read, Where::At(offset), buf, count, datatype, request)
    }

    fn MPI_File_iwrite_at / PMPI_File_iwrite_at(fh: H, offset: Offset, buf: *const c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Write, Where::At(offset), buf, count, datatype, request)
    }

    fn MPI_File_iread_at_all / PMPI_File_iread_at_all(fh: H, offset: Offset, buf: *mut c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Read, Where::At(offset), buf, count, datatype, request)
    }

    fn MPI_File_iwrite_at_all / PMPI_File_iwrite_at_all(fh: H, offset: Offset, buf: *const c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Write, Where::At(offset), buf, count, datatype, request)
    }

    fn MPI_File_read / PMPI_File_read(fh: H, buf: *mut c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Read, Where::Individual, buf, count, datatype, status)
    }

    fn MPI_File_read_all / PMPI_File_read_all(fh: H, buf: *mut c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Read, Where::Individual, buf, count, datatype, status)
    }

    fn MPI_File_write / PMPI_File_write(fh: H, buf: *const c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Write, Where::Individual, buf, count, datatype, status)
    }

    fn MPI_File_write_all / PMPI_File_write_all(fh: H, buf: *const c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Write, Where::Individual, buf, count, datatype, status)
    }

    fn MPI_File_iread / PMPI_File_iread(fh: H, buf: *mut c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Read, Where::Individual, buf, count, datatype, request)
    }

    fn MPI_File_iwrite / PMPI_File_iwrite(fh: H, buf: *const c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Write, Where::Individual, buf, count, datatype, request)
    }

    fn MPI_File_iread_all / PMPI_File_iread_all(fh: H, buf: *mut c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Read, Where::Individual, buf, count, datatype, request)
    }

    fn MPI_File_iwrite_all / PMPI_File_iwrite_all(fh: H, buf: *const c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Write, Where::Individual, buf, count, datatype, request)
    }

    fn MPI_File_read_shared / PMPI_File_read_shared(fh: H, buf: *mut c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Read, Where::Shared, buf, count, datatype, status)
    }

    fn MPI_File_write_shared / PMPI_File_write_shared(fh: H, buf: *const c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Write, Where::Shared, buf, count, datatype, status)
    }

    fn MPI_File_iread_shared / PMPI_File_iread_shared(fh: H, buf: *mut c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Read, Where::Shared, buf, count, datatype, request)
    }

    fn MPI_File_iwrite_shared / PMPI_File_iwrite_shared(fh: H, buf: *const c_void, count: c_int, datatype: H, request: *mut H) [fh] {
        nonblocking(fh, Dir::Write, Where::Shared, buf, count, datatype, request)
    }

    fn MPI_File_read_ordered / PMPI_File_read_ordered(fh: H, buf: *mut c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Read, Where::Ordered, buf, count, datatype, status)
    }

    fn MPI_File_write_ordered / PMPI_File_write_ordered(fh: H, buf: *const c_void, count: c_int, datatype: H, status: *mut Status) [fh] {
        blocking(fh, Dir::Write, Where::Ordered, buf, count, datatype, status)
    }

    fn MPI_File_read_at_all_begin / PMPI_File_read_at_all_begin(fh: H, offset: Offset, buf: *mut c_void, count: c_int, datatype: H) [fh] {
        begin(fh, "MPI_File_read_at_all", Dir::Read, Where::At(offset), buf, count, datatype)
    }

    fn MPI_File_read_at_all_end / PMPI_File_read_at_all_end(fh: H, buf: *mut c_void, status: *mut Status) [fh] {
        end(fh, "MPI_File_read_at_all", buf, status)
    }

    fn MPI_File_write_at_all_begin / PMPI_File_write_at_all_begin(fh: H, offset: Offset, buf: *const c_void, count: c_int, datatype: H) [fh] {
        begin(fh, "MPI_File_write_at_all", Dir::Write, Where::At(offset), buf, count, datatype)
    }

    fn MPI_File_write_at_all_end / PMPI_File_write_at_all_end(fh: H, buf: *const c_void, status: *mut Status) [fh] {
        end(fh, "MPI_File_write_at_all", buf, status)
    }

    fn MPI_File_read_all_begin / PMPI_File_read_all_begin(fh: H, buf: *mut c_void, count: c_int, datatype: H) [fh] {
        begin(fh, "MPI_File_read_all", Dir::Read, Where::Individual, buf, count, datatype)
    }

    fn MPI_File_read_all_end / PMPI_File_read_all_end(fh: H, buf: *mut c_void, status: *mut Status) [fh] {
        end(fh, "MPI_File_read_all", buf, status)
    }

    fn MPI_File_write_all_begin / PMPI_File_write_all_begin(fh: H, buf: *const c_void, count: c_int, datatype: H) [fh] {
        begin(fh, "MPI_File_write_all", Dir::Write, Where::Individual, buf, count, datatype)
    }

    fn MPI_File_write_all_end / PMPI_File_write_all_end(fh: H, buf: *const c_void, status: *mut Status) [fh] {
        end(fh, "MPI_File_write_all", buf, status)
    }

    fn MPI_File_read_ordered_begin / PMPI_File_read_ordered_begin(fh: H, buf: *mut c_void, count: c_int, datatype: H) [fh] {
        begin(fh, "MPI_File_read_ordered", Dir::Read, Where::Ordered, buf, count, datatype)
    }

    fn MPI_File_read_ordered_end / PMPI_File_read_ordered_end(fh: H, buf: *mut c_void, status: *mut Status) [fh] {
        end(fh, "MPI_File_read_ordered", buf, status)
    }

    fn MPI_File_write_ordered_begin / PMPI_File_write_ordered_begin(fh: H, buf: *const c_void, count: c_int, datatype: H) [fh] {
        begin(fh, "MPI_File_write_ordered", Dir::Write, Where::Ordered, buf, count, datatype)
    }

    fn MPI_File_write_ordered_end / PMPI_File_write_ordered_end(fh: H, buf: *const c_void, status: *mut Status) [fh] {
        end(fh, "MPI_File_write_ordered", buf, status)
    }

    fn MPI_File_seek / PMPI_File_seek(fh: H, offset: Offset, whence: c_int) [fh] {
        with(fh, |f| {
            if f.amode & MODE_SEQUENTIAL != 0 {
                return Err(fail(class::UNSUPPORTED_OPERATION, "a file opened with MPI_MODE_SEQUENTIAL has no individual file pointer"));
            }
            let to = seek_target(f, f.pos, offset, whence)?;
            f.pos = to;
            Ok(())
        })
    }

    fn MPI_File_get_position / PMPI_File_get_position(fh: H, offset: *mut Offset) [fh] {
        let p = with(fh, |f| Ok(f.pos))?;
        // SAFETY: the caller's output argument.
        unsafe { put(offset, p) }
    }

    fn MPI_File_seek_shared / PMPI_File_seek_shared(fh: H, offset: Offset, whence: c_int) [fh] {
        let (comm, n, rank, sequential) = with(fh, |f| Ok((f.comm, f.size, f.rank, f.amode & MODE_SEQUENTIAL != 0)))?;
        if sequential {
            return Err(fail(class::UNSUPPORTED_OPERATION, "a file opened with MPI_MODE_SEQUENTIAL cannot seek"));
        }
        // Every rank passes the same arguments (MPI-3.1 13.4.4); comparing them also waits
        // for every rank's earlier shared accesses.
        let offsets = allgather_i64(offset, comm, n, "comparing the ranks' seeks")?;
        let whences = allgather_i64(whence as i64, comm, n, "comparing the ranks' seeks")?;
        if offsets.iter().any(|&o| o != offset) || whences.iter().any(|&w| w != whence as i64) {
            return Err(fail(class::ARG, "the ranks passed MPI_File_seek_shared different offsets or whences"));
        }
        // Rank 0 finds where it lands and says so: [target, error class].
        let mut to = [0i64; 2];
        if rank == 0 {
            match with(fh, |f| {
                let now = f.shared.get()?;
                seek_target(f, now, offset, whence)
            }) {
                Ok(t) => to[0] = t,
                Err(e) => to[1] = e.class as i64,
            }
        }
        bcast(&mut to, comm, "seeking the shared file pointer")?;
        if to[1] != 0 {
            return Err(fail(
                to[1] as c_int,
                format!("the shared file pointer cannot go to {offset} from whence {whence}: before the start of the view, or an unknown whence"),
            ));
        }
        let set = with(fh, |f| if rank == 0 { f.shared.set(to[0]) } else { Ok(()) });
        agree(set, comm, "rank 0 could not move the shared file pointer")
    }

    fn MPI_File_get_position_shared / PMPI_File_get_position_shared(fh: H, offset: *mut Offset) [fh] {
        let p = with(fh, |f| f.shared.get())?;
        // SAFETY: the caller's output argument.
        unsafe { put(offset, p) }
    }

    fn MPI_File_get_byte_offset / PMPI_File_get_byte_offset(fh: H, offset: Offset, disp: *mut Offset) [fh] {
        if offset < 0 {
            return Err(fail(class::ARG, format!("offset {offset} is negative")));
        }
        let d = with(fh, |f| Ok(f.view.byte_offset(offset as u64 * f.view.esize()) as Offset))?;
        // SAFETY: the caller's output argument.
        unsafe { put(disp, d) }
    }

    fn MPI_File_get_type_extent / PMPI_File_get_type_extent(fh: H, datatype: H, extent: *mut Aint) [fh] {
        let (rep, ext32) = with(fh, |f| Ok((f.view.rep.clone(), f.view.ext32)))?;
        let (t, custom) = {
            let rt = rt()?;
            (lookup(&rt, datatype)?, rt.io.datareps.iter().find(|d| d.0 == rep).map(|d| (d.3, d.4)))
        };
        let ext = match custom {
            Some((f, extra)) if f != 0 => call_extent_fn(f, extra, datatype)?,
            _ if ext32 && !crate::external::same_layout(&t)? => {
                // A predefined type's external32 extent is its size there (table 13.2); a made
                // type of such elements has a layout of its own, which volley's files refuse.
                if t.combiner != abi::COMBINER_NAMED {
                    return Err(fail(
                        class::UNSUPPORTED_DATAREP,
                        "this datatype's basic elements change size in external32, and volley's MPI does not lay out made types of them there",
                    ));
                }
                crate::external::ext32_size(&t)? as Aint
            }
            _ => t.extent() as Aint,
        };
        // SAFETY: the caller's output argument.
        unsafe { put(extent, ext) }
    }

    fn MPI_File_set_atomicity / PMPI_File_set_atomicity(fh: H, flag: c_int) [fh] {
        let comm = with(fh, |f| Ok(f.comm))?;
        let want = (flag != 0) as c_int;
        let lo = min_over(want, comm, "comparing atomicity flags")?;
        let hi = -min_over(-want, comm, "comparing atomicity flags")?;
        if lo != hi {
            return Err(fail(class::ARG, "the ranks passed MPI_File_set_atomicity different flags"));
        }
        with(fh, |f| {
            f.atomic = want != 0;
            Ok(())
        })
    }

    fn MPI_File_get_atomicity / PMPI_File_get_atomicity(fh: H, flag: *mut c_int) [fh] {
        let a = with(fh, |f| Ok(f.atomic))?;
        // SAFETY: the caller's output argument.
        unsafe { put(flag, a as c_int) }
    }

    fn MPI_File_sync / PMPI_File_sync(fh: H) [fh] {
        with(fh, |f| {
            if f.amode & MODE_RDONLY != 0 {
                return Ok(());
            }
            f.os.sync_all().map_err(|e| io_fail(&e, format!("syncing {}", f.path.display())))
        })
    }

    fn MPI_Register_datarep / PMPI_Register_datarep(datarep: *const c_char, read_conversion_fn: usize, write_conversion_fn: usize, dtype_file_extent_fn: usize, extra_state: *mut c_void) [FILE_NULL] {
        // SAFETY: MPI: a C string.
        let name = unsafe { c_str(datarep)? };
        if name.len() >= MAX_DATAREP_STRING {
            return Err(fail(class::ARG, format!("a data representation's name has fewer than {MAX_DATAREP_STRING} characters")));
        }
        let mut rt = rt()?;
        if ["native", "internal", "external32"].contains(&name.as_str()) || rt.io.datareps.iter().any(|d| d.0 == name) {
            return Err(fail(ERR_DUP_DATAREP, format!("data representation \"{name}\" is already defined")));
        }
        rt.io.datareps.push((name, read_conversion_fn, write_conversion_fn, dtype_file_extent_fn, extra_state as usize));
        Ok(())
    }

    fn MPI_File_create_errhandler / PMPI_File_create_errhandler(function: Option<crate::state::ErrFn>, errhandler: *mut H) {
        // SAFETY: the same arguments (a file's handler has a communicator's signature, both
        // handles being pointer-sized).
        let rc = unsafe { crate::env::PMPI_Comm_create_errhandler(function, errhandler) };
        ok(rc, "MPI_File_create_errhandler")
    }

    fn MPI_File_set_errhandler / PMPI_File_set_errhandler(file: H, errhandler: H) [file] {
        crate::state::check_errhandler(errhandler)?;
        if file == FILE_NULL {
            rt()?.io.null_errhandler = errhandler;
            return Ok(());
        }
        with(file, |f| {
            f.errhandler = errhandler;
            Ok(())
        })
    }

    fn MPI_File_get_errhandler / PMPI_File_get_errhandler(file: H, errhandler: *mut H) [file] {
        let h = if file == FILE_NULL {
            rt()?.io.null_errhandler
        } else {
            with(file, |f| Ok(f.errhandler))?
        };
        // SAFETY: the caller's output argument.
        unsafe { put(errhandler, h) }
    }

    fn MPI_File_call_errhandler / PMPI_File_call_errhandler(fh: H, errorcode: c_int) {
        if fh != FILE_NULL {
            with(fh, |_| Ok(()))?;
        }
        crate::err::call_errhandler("MPI_File_call_errhandler", fh, errorcode)
    }
}

/// Sets the hints `pairs` among a file's `info` (new keys added, known ones replaced).
fn merge_info(info: &mut Vec<(String, String)>, pairs: Vec<(String, String)>) {
    for (k, v) in pairs {
        match info.iter_mut().find(|e| e.0 == k) {
            Some(e) => e.1 = v,
            None => info.push((k, v)),
        }
    }
}

/// Where a seek of `offset` from `whence` lands, the pointer being at `now` (etypes of the view).
fn seek_target(f: &File, now: Offset, offset: Offset, whence: c_int) -> R<Offset> {
    let to = match whence {
        SEEK_SET => offset,
        SEEK_CUR => now + offset,
        SEEK_END => {
            let size =
                f.os.metadata()
                    .map_err(|e| io_fail(&e, format!("finding the size of {}", f.path.display())))?
                    .len();
            let es = f.view.esize();
            (f.view.data_below(size).div_ceil(es)) as Offset + offset
        }
        w => {
            return Err(fail(
                class::ARG,
                format!("whence {w}: MPI_SEEK_SET, MPI_SEEK_CUR or MPI_SEEK_END"),
            ))
        }
    };
    if to < 0 {
        return Err(fail(
            class::ARG,
            format!("the seek would go to {to}, before the start of the view"),
        ));
    }
    Ok(to)
}

/// MPI_File_set_size (`grow_only` false) and MPI_File_preallocate (true): rank 0 changes the
/// file, every rank learns how it went.
fn resize(fh: H, size: Offset, grow_only: bool) -> R {
    let (comm, n) = with(fh, |f| {
        if f.amode & MODE_RDONLY != 0 {
            return Err(fail(
                ERR_READ_ONLY,
                "the file was opened with MPI_MODE_RDONLY",
            ));
        }
        if f.amode & MODE_SEQUENTIAL != 0 {
            return Err(fail(
                class::UNSUPPORTED_OPERATION,
                "a file opened with MPI_MODE_SEQUENTIAL cannot change its size",
            ));
        }
        Ok((f.comm, f.size))
    })?;
    // Every rank passes the same size; comparing them also waits for every rank's earlier
    // writes before the size changes.
    let sizes = allgather_i64(size, comm, n, "comparing the ranks' sizes")?;
    if sizes.iter().any(|&s| s != size) {
        return Err(fail(class::ARG, "the ranks passed different sizes"));
    }
    if size < 0 {
        return Err(fail(class::ARG, format!("size {size} is negative")));
    }
    let mine = with(fh, |f| {
        if f.rank != 0 {
            return Ok(());
        }
        let what = |e: io::Error| io_fail(&e, format!("changing the size of {}", f.path.display()));
        if grow_only {
            let now = f.os.metadata().map_err(what)?.len();
            if (size as u64) > now {
                // SAFETY: posix_fallocate on an open descriptor.
                let rc = unsafe { libc::posix_fallocate(f.os.as_raw_fd(), 0, size as libc::off_t) };
                if rc != 0 {
                    // A file system without fallocate still gets the size.
                    if rc == libc::EOPNOTSUPP || rc == libc::EINVAL {
                        f.os.set_len(size as u64).map_err(what)?;
                    } else {
                        return Err(what(io::Error::from_raw_os_error(rc)));
                    }
                }
            }
            Ok(())
        } else {
            f.os.set_len(size as u64).map_err(what)
        }
    });
    agree(mine, comm, "rank 0 could not change the file's size")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A view of ints (etype MPI_INT) from `disp` whose filetype holds `blocks` (byte offset,
    /// length) in a tile of `extent` bytes.
    fn view(disp: u64, blocks: &[(isize, usize)], extent: isize) -> View {
        let int = crate::dtype::predefined(INT).expect("MPI_INT");
        let mut ft = int.clone();
        ft.blocks = blocks.to_vec();
        ft.size = blocks.iter().map(|b| b.1).sum();
        ft.lb = 0;
        ft.ub = extent;
        ft.contig = false;
        let mut starts = Vec::new();
        let mut at = 0;
        for b in blocks {
            starts.push(at);
            at += b.1;
        }
        View {
            disp,
            etype_h: INT,
            etype: TypeRef::Static(int),
            ftype_h: 0,
            ftype: TypeRef::Made(Arc::new(ft)),
            rep: "native".into(),
            ext32: false,
            blocks: blocks.iter().map(|&(o, l)| (o as u64, l)).collect(),
            starts,
        }
    }

    fn ranges(v: &View, pos: u64, len: usize) -> Vec<(u64, usize, usize)> {
        let mut out = Vec::new();
        v.map(pos, len, |off, at, n| {
            out.push((off, at, n));
            Ok(true)
        })
        .expect("map");
        out
    }

    #[test]
    fn a_strided_view_maps_onto_its_tiles() {
        // Rank 1 of 4, blocks of 3 ints: 12 bytes at 12, 60, 108, ...
        let v = view(12, &[(0, 12)], 48);
        assert_eq!(
            ranges(&v, 0, 30),
            vec![(12, 0, 12), (60, 12, 12), (108, 24, 6)]
        );
        // Starting inside a block.
        assert_eq!(ranges(&v, 16, 8), vec![(64, 0, 8)]);
        assert_eq!(v.byte_offset(16), 64);
        // The end of a 100-byte file: all of tile 0 and tile 1, nothing of tile 2.
        assert_eq!(v.data_below(100), 24);
        assert_eq!(v.data_below(64), 16);
        assert_eq!(v.data_below(12), 0);
    }

    #[test]
    fn ranges_that_touch_are_one_range() {
        // Tiles of 4 bytes whose data sits at 4 past their start: one run from 4.
        let v = view(0, &[(4, 4)], 4);
        assert_eq!(ranges(&v, 0, 12), vec![(4, 0, 12)]);
        // Data past the extent counts where it lies: ints at 4, 8, 12, 16 end below 20.
        assert_eq!(v.data_below(20), 16);
        assert_eq!(v.data_below(18), 14);
    }

    #[test]
    fn several_blocks_per_tile() {
        // Two ints a tile, at 0 and 8, tiles of 16 bytes, from 100.
        let v = view(100, &[(0, 4), (8, 4)], 16);
        assert_eq!(
            ranges(&v, 4, 12),
            vec![(108, 0, 4), (116, 4, 4), (124, 8, 4)]
        );
        assert_eq!(v.byte_offset(8), 116);
        // A 126-byte file: blocks at 100, 108, 116 whole, 2 bytes of 124.
        assert_eq!(v.data_below(126), 14);
    }
}
