//! volley's Python face: `import volley` (layer: above `volley`, beside the C and MPI faces; one
//! of the crates allowed `unsafe`, for the buffer protocol, each block saying why it is sound).
//!
//! - `send` takes any object with the buffer protocol (bytes, bytearray, memoryview, numpy
//!   arrays, C-contiguous) and reads it in place: no copy on the Python side.
//! - `recv()` returns a `Message` that exports its bytes in place (`memoryview(m)`,
//!   `numpy.frombuffer(m, dtype)`): they stay in volley's receive pool until the message is
//!   released, which volley refuses (BufferError) while a view of it is alive, so a view never
//!   outlives its bytes. `recv_into(buffer)` copies into the caller's writable buffer.
//! - Every call that waits releases the GIL; active-port callbacks take it back to run.
//! - Objects belong to the thread that made them (volley's world is single-owner); using one
//!   from another thread raises instead of racing.

#![deny(unsafe_op_in_unsafe_fn)]

use pyo3::create_exception;
use pyo3::exceptions::{PyBufferError, PyException, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use std::sync::Mutex;

create_exception!(volley, Error, PyException, "A volley operation failed.");
create_exception!(
    volley,
    PeerLost,
    Error,
    "The peer is gone (it died, or its host is unreachable): nothing more comes from it."
);
create_exception!(
    volley,
    BufferTooSmall,
    Error,
    "The buffer is smaller than the message; the message stays queued."
);

/// The first exception an active-port callback raised, for the next call to raise.
static HANDLER_ERROR: Mutex<Option<PyErr>> = Mutex::new(None);

fn handler_error() -> PyResult<()> {
    match HANDLER_ERROR.lock().map(|mut e| e.take()) {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}

fn recv_err(e: volley::RecvError) -> PyErr {
    match e {
        volley::RecvError::PeerLost(_) => PeerLost::new_err(e.to_string()),
        volley::RecvError::BufferTooSmall { .. } | volley::RecvError::Truncated { .. } => {
            BufferTooSmall::new_err(e.to_string())
        }
        e => Error::new_err(e.to_string()),
    }
}

fn send_err(e: volley::SendError) -> PyErr {
    match e {
        volley::SendError::PeerLost(_) => PeerLost::new_err(e.to_string()),
        e => Error::new_err(e.to_string()),
    }
}

fn err(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// Moves a value across `allow_threads`, which runs its closure on the calling thread (it only
/// lets go of the GIL meanwhile): nothing actually changes threads.
struct Here<T>(T);
// SAFETY: see above; the value is used on the thread that made it, before and after.
unsafe impl<T> Send for Here<T> {}

impl<T> Here<T> {
    /// The value (a method, so that a closure captures the whole wrapper, not its field).
    fn take(self) -> T {
        self.0
    }
}

/// The bytes of a buffer-protocol object, exported for as long as this lives (the object cannot
/// be resized or freed meanwhile).
struct Exported {
    view: ffi::Py_buffer,
}

impl Exported {
    fn get(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Exported> {
        let mut view = std::mem::MaybeUninit::<ffi::Py_buffer>::uninit();
        let flags = if writable {
            ffi::PyBUF_WRITABLE
        } else {
            ffi::PyBUF_SIMPLE
        };
        // SAFETY: `obj` is a live object (we hold the GIL); `view` is written by the call.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), view.as_mut_ptr(), flags) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        // SAFETY: PyObject_GetBuffer succeeded, so it filled `view`.
        Ok(Exported {
            view: unsafe { view.assume_init() },
        })
    }

    fn as_slice(&self) -> &[u8] {
        if self.view.len == 0 {
            return &[];
        }
        // SAFETY: a contiguous buffer of `len` bytes at `buf`, exported until drop.
        unsafe { std::slice::from_raw_parts(self.view.buf.cast(), self.view.len as usize) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.view.len == 0 {
            return &mut [];
        }
        // SAFETY: as above, and exported writable (PyBUF_WRITABLE).
        unsafe { std::slice::from_raw_parts_mut(self.view.buf.cast(), self.view.len as usize) }
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        // PyBuffer_Release needs the GIL, which this may be dropped without.
        Python::with_gil(|_| {
            // SAFETY: the view was filled by PyObject_GetBuffer and is released once.
            unsafe { ffi::PyBuffer_Release(&mut self.view) }
        });
    }
}

/// The job: `volley.World()` joins it (started by `volley run`, Hydra or Slurm; alone, a world
/// of one).
#[pyclass(module = "volley", unsendable)]
struct World {
    w: volley::World,
}

#[pymethods]
impl World {
    #[new]
    fn new() -> PyResult<World> {
        Ok(World {
            w: volley::World::init().map_err(err)?,
        })
    }

    #[getter]
    fn rank(&self) -> usize {
        self.w.rank()
    }

    #[getter]
    fn size(&self) -> usize {
        self.w.size()
    }

    #[getter]
    fn local_rank(&self) -> usize {
        self.w.local_rank()
    }

    /// Opens an endpoint on `port`.
    fn open(&self, port: u32) -> PyResult<Endpoint> {
        Ok(Endpoint {
            ep: self.w.open(port).map_err(err)?,
        })
    }

    /// Binds a GAMMA active port: `callback(data: bytes, source: (rank, port))` runs for each
    /// message arriving on `port` whenever this process makes progress. An exception it raises
    /// is printed and raised again by the next volley call that makes progress.
    fn bind(&self, port: u32, callback: PyObject) -> PyResult<ActivePort> {
        let p = self
            .w
            .bind(port, move |data, src| {
                Python::with_gil(|py| {
                    let data = PyBytes::new(py, data);
                    if let Err(e) = callback.call1(py, (data, (src.rank, src.port))) {
                        e.print(py);
                        if let Ok(mut slot) = HANDLER_ERROR.lock() {
                            slot.get_or_insert(e);
                        }
                    }
                })
            })
            .map_err(err)?;
        Ok(ActivePort { p: Some(p) })
    }

    /// Makes progress without waiting (runs due active-port callbacks); how much it did.
    fn progress(&self, py: Python<'_>) -> PyResult<usize> {
        let w = Here(&self.w);
        let r = py.allow_threads(move || Here(w.take().progress()));
        let n = r.0.map_err(recv_err)?;
        handler_error()?;
        Ok(n)
    }

    /// Starts volley's progress thread.
    fn start_progress_thread(&self) -> PyResult<()> {
        self.w.start_progress_thread().map_err(err)
    }

    /// volley's counters, by name.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.w.counters() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}

/// An endpoint on a port (Directed Point): `target`, `send`, `recv`, `recv_into`, `fileno`.
#[pyclass(module = "volley", unsendable)]
struct Endpoint {
    ep: volley::Endpoint,
}

#[pymethods]
impl Endpoint {
    #[getter]
    fn port(&self) -> u32 {
        self.ep.port()
    }

    /// Sets where `send` and `try_send` go.
    fn target(&self, rank: usize, port: u32) -> PyResult<()> {
        self.ep.target(rank, port).map_err(send_err)
    }

    /// Sends the bytes of `data` (any C-contiguous buffer: bytes, bytearray, memoryview, numpy
    /// array) to the target, read in place; returns when `data` may be changed again.
    fn send(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let buf = Exported::get(data, false)?;
        let (ep, b) = (Here(&self.ep), Here(&buf));
        let r = py.allow_threads(move || Here(ep.take().send(b.take().as_slice())));
        r.0.map_err(send_err)
    }

    /// As `send`, to `port` of `rank`.
    fn send_to(
        &self,
        py: Python<'_>,
        rank: usize,
        port: u32,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let buf = Exported::get(data, false)?;
        let (ep, b) = (Here(&self.ep), Here(&buf));
        let r = py.allow_threads(move || Here(ep.take().send_to(rank, port, b.take().as_slice())));
        r.0.map_err(send_err)
    }

    /// Sends without waiting: False if the receiver has no room now (nothing was sent).
    fn try_send(&self, data: &Bound<'_, PyAny>) -> PyResult<bool> {
        let buf = Exported::get(data, false)?;
        match self.ep.try_send(buf.as_slice()) {
            Ok(()) => Ok(true),
            Err(volley::SendError::WouldBlock { .. }) => Ok(false),
            Err(e) => Err(send_err(e)),
        }
    }

    /// Waits for the next message (the GIL released meanwhile) and returns it, lent in place.
    fn recv(&self, py: Python<'_>) -> PyResult<Message> {
        let ep = Here(&self.ep);
        let r = py.allow_threads(move || Here(ep.take().recv()));
        let m = r.0.map_err(recv_err)?;
        handler_error()?;
        Ok(Message::new(m))
    }

    /// The next message if one has arrived, else None (then `fileno()` becomes readable when
    /// one does).
    fn try_recv(&self) -> PyResult<Option<Message>> {
        let m = self.ep.try_recv().map_err(recv_err)?;
        handler_error()?;
        Ok(m.map(Message::new))
    }

    /// Waits for the next message and copies it into `buffer` (any writable C-contiguous
    /// buffer); returns (length, (rank, port)). A message longer than the buffer raises
    /// BufferTooSmall and stays queued.
    fn recv_into(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
    ) -> PyResult<(usize, (usize, u32))> {
        let mut buf = Exported::get(buffer, true)?;
        let (ep, b) = (Here(&self.ep), Here(&mut buf));
        let r = py.allow_threads(move || Here(ep.take().recv_into(b.take().as_mut_slice())));
        let (n, src) = r.0.map_err(recv_err)?;
        handler_error()?;
        Ok((n, (src.rank, src.port)))
    }

    /// The descriptor for selectors/asyncio: readable when a message may have arrived since a
    /// `try_recv` found none. Owned by volley: do not close it.
    fn fileno(&self) -> c_int {
        self.ep.as_raw_fd()
    }
}

/// A received message, its bytes in volley's receive pool until `release()` (or the end of a
/// `with` block, or garbage collection). Exports them read-only: `memoryview(m)`,
/// `numpy.frombuffer(m, dtype)`, `bytes(m)`.
#[pyclass(module = "volley", unsendable)]
struct Message {
    msg: Option<volley::Message>,
    source: (usize, u32),
    len: usize,
    /// Views of the bytes alive now: the message is not released under them.
    exports: Cell<usize>,
}

impl Message {
    fn new(m: volley::Message) -> Message {
        let s = m.source();
        Message {
            source: (s.rank, s.port),
            len: m.len(),
            msg: Some(m),
            exports: Cell::new(0),
        }
    }
}

#[pymethods]
impl Message {
    /// (rank, port) it was sent from.
    #[getter]
    fn source(&self) -> (usize, u32) {
        self.source
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// Whether `release()` has been called.
    #[getter]
    fn released(&self) -> bool {
        self.msg.is_none()
    }

    /// Gives the bytes back to volley. BufferError while a view of them is alive (release the
    /// memoryview, or drop the numpy array, first); releasing twice does nothing.
    fn release(&mut self) -> PyResult<()> {
        if self.exports.get() > 0 {
            return Err(PyBufferError::new_err(format!(
                "{} view(s) of this message's bytes are alive: release the memoryview (or drop the array) before releasing the message",
                self.exports.get()
            )));
        }
        self.msg = None;
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (_t=None, _v=None, _tb=None))]
    fn __exit__(
        &mut self,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.release()?;
        Ok(false)
    }

    /// # Safety
    /// Called by the interpreter with a view to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no view to fill"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err(
                "a received message is read-only: copy it (bytearray(m)) to change it",
            ));
        }
        let me = slf.borrow();
        let Some(m) = me.msg.as_ref() else {
            return Err(PyValueError::new_err("the message was released"));
        };
        let bytes: &[u8] = m;
        // SAFETY: `view` is the interpreter's, non-null; the bytes stay in place while the
        // message holds them, and `release` refuses while exports > 0. `obj` takes a new
        // reference to the message, which the interpreter drops with the view.
        unsafe {
            (*view).obj = slf.clone().into_any().into_ptr();
            (*view).buf = bytes.as_ptr() as *mut c_void;
            (*view).len = bytes.len() as ffi::Py_ssize_t;
            (*view).readonly = 1;
            (*view).itemsize = 1;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                c"B".as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                &mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        me.exports.set(me.exports.get() + 1);
        Ok(())
    }

    /// # Safety
    /// Called by the interpreter once per view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.set(self.exports.get() - 1);
    }
}

/// A bound active port; unbound by `unbind()` or when collected.
#[pyclass(module = "volley", unsendable)]
struct ActivePort {
    p: Option<volley::ActivePort>,
}

#[pymethods]
impl ActivePort {
    /// Unbinds the port now: the callback is not called afterwards. Twice does nothing.
    fn unbind(&mut self) {
        self.p = None;
    }
}

#[pymodule]
#[pyo3(name = "volley")]
fn volley_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<World>()?;
    m.add_class::<Endpoint>()?;
    m.add_class::<Message>()?;
    m.add_class::<ActivePort>()?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("PeerLost", m.py().get_type::<PeerLost>())?;
    m.add("BufferTooSmall", m.py().get_type::<BufferTooSmall>())?;
    Ok(())
}
