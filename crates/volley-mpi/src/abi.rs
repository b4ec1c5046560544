//! The values of mpi.h's constants (the MPI-5.0 ABI's choices for handles), and the C types.

use std::os::raw::c_int;

/// Every handle is pointer-sized and opaque to C.
pub type H = usize;
pub type Aint = isize;
pub type Count = i64;

pub const OP_NULL: H = 0x020;
pub const SUM: H = 0x021;
pub const MIN: H = 0x022;
pub const MAX: H = 0x023;
pub const PROD: H = 0x024;
pub const BAND: H = 0x028;
pub const BOR: H = 0x029;
pub const BXOR: H = 0x02a;
pub const LAND: H = 0x030;
pub const LOR: H = 0x031;
pub const LXOR: H = 0x032;
pub const MINLOC: H = 0x038;
pub const MAXLOC: H = 0x039;
pub const REPLACE: H = 0x03c;
pub const NO_OP: H = 0x03d;

pub const COMM_NULL: H = 0x100;
pub const COMM_WORLD: H = 0x101;
pub const COMM_SELF: H = 0x102;
pub const GROUP_NULL: H = 0x108;
pub const GROUP_EMPTY: H = 0x109;
pub const MESSAGE_NULL: H = 0x128;
pub const MESSAGE_NO_PROC: H = 0x129;
pub const INFO_NULL: H = 0x130;
pub const INFO_ENV: H = 0x131;
pub const ERRHANDLER_NULL: H = 0x140;
pub const ERRORS_ARE_FATAL: H = 0x141;
pub const ERRORS_RETURN: H = 0x142;
pub const ERRORS_ABORT: H = 0x143;
pub const REQUEST_NULL: H = 0x180;
pub const DATATYPE_NULL: H = 0x200;
/// Predefined datatypes are 0x200..0x300.
pub const DATATYPE_END: H = 0x300;
/// MPI_Type_create_darray's distributions.
pub const DISTRIBUTE_NONE: c_int = 16;
pub const DISTRIBUTE_BLOCK: c_int = 17;
pub const DISTRIBUTE_CYCLIC: c_int = 18;
pub const DISTRIBUTE_DFLT_DARG: c_int = 19;
/// MPI_Type_match_size's classes.
pub const TYPECLASS_INTEGER: c_int = 802;
pub const TYPECLASS_REAL: c_int = 803;
pub const TYPECLASS_COMPLEX: c_int = 804;

pub const IN_PLACE: usize = 1;

pub const ANY_SOURCE: c_int = -1;
pub const ANY_TAG: c_int = -2;
pub const PROC_NULL: c_int = -3;
pub const ROOT: c_int = -4;
pub const KEYVAL_INVALID: c_int = -127;
pub const UNDEFINED: c_int = -32766;

pub const THREAD_SINGLE: c_int = 0;
pub const THREAD_FUNNELED: c_int = 1;
pub const THREAD_SERIALIZED: c_int = 2;
pub const THREAD_MULTIPLE: c_int = 7;

pub const ORDER_C: c_int = 0xC;
pub const ORDER_FORTRAN: c_int = 0xF;

pub const IDENT: c_int = 101;
pub const CONGRUENT: c_int = 102;
pub const SIMILAR: c_int = 103;
pub const UNEQUAL: c_int = 104;

pub const COMBINER_NAMED: c_int = 301;
pub const COMBINER_DUP: c_int = 302;
pub const COMBINER_CONTIGUOUS: c_int = 303;
pub const COMBINER_VECTOR: c_int = 304;
pub const COMBINER_HVECTOR: c_int = 305;
pub const COMBINER_INDEXED: c_int = 306;
pub const COMBINER_HINDEXED: c_int = 307;
pub const COMBINER_INDEXED_BLOCK: c_int = 308;
pub const COMBINER_HINDEXED_BLOCK: c_int = 309;
pub const COMBINER_STRUCT: c_int = 310;
pub const COMBINER_SUBARRAY: c_int = 311;
pub const COMBINER_DARRAY: c_int = 312;
pub const COMBINER_F90_REAL: c_int = 313;
pub const COMBINER_F90_COMPLEX: c_int = 314;
pub const COMBINER_F90_INTEGER: c_int = 315;
pub const COMBINER_RESIZED: c_int = 316;

pub const COMM_TYPE_SHARED: c_int = 1001;
pub const COMM_TYPE_HW_UNGUIDED: c_int = 1002;
pub const COMM_TYPE_HW_GUIDED: c_int = 1003;

pub const TAG_UB: c_int = 10001;
pub const HOST: c_int = 10003;
pub const IO: c_int = 10002;
pub const WTIME_IS_GLOBAL: c_int = 10004;
pub const APPNUM: c_int = 10005;
pub const LASTUSEDCODE: c_int = 10006;
pub const UNIVERSE_SIZE: c_int = 10007;

/// The largest tag a program may use (MPI_TAG_UB's value). The top bit of the core's tag marks a
/// synchronous send; tags at and above 2^30 on the collective context are the face's own.
pub const MAX_TAG: c_int = (1 << 30) - 1;

pub const MAX_ERROR_STRING: usize = 512;
pub const MAX_OBJECT_NAME: usize = 128;
pub const MAX_INFO_KEY: usize = 256;
pub const MAX_INFO_VAL: usize = 1024;
pub const MAX_PROCESSOR_NAME: usize = 256;
pub const MAX_LIBRARY_VERSION_STRING: usize = 8192;
pub const BSEND_OVERHEAD: usize = 512;

/// MPI_Status as mpi.h lays it out. `internal`: [0] and [1] the byte count (low, high 32 bits),
/// [2] whether the operation was cancelled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Status {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub internal: [c_int; 5],
}

impl Status {
    pub fn bytes(&self) -> u64 {
        (self.internal[0] as u32 as u64) | ((self.internal[1] as u32 as u64) << 32)
    }
    pub fn set_bytes(&mut self, n: u64) {
        self.internal[0] = n as u32 as c_int;
        self.internal[1] = (n >> 32) as u32 as c_int;
    }
    /// The status of a completed operation: `bytes` bytes from `source` with `tag` (a send's
    /// are MPI_ANY_SOURCE and MPI_ANY_TAG).
    #[inline]
    pub fn of(source: c_int, tag: c_int, bytes: u64) -> Status {
        let mut s = Status {
            source,
            tag,
            error: 0,
            internal: [0; 5],
        };
        s.set_bytes(bytes);
        s
    }
    pub fn cancelled(&self) -> bool {
        self.internal[2] != 0
    }
    /// What a receive from MPI_PROC_NULL reports (MPI-3.1 section 3.11).
    pub fn proc_null() -> Status {
        Status {
            source: PROC_NULL,
            tag: ANY_TAG,
            error: 0,
            internal: [0; 5],
        }
    }
    /// An empty status (MPI-3.1 section 3.7.3): what a null or inactive request reports.
    pub fn empty() -> Status {
        Status {
            source: ANY_SOURCE,
            tag: ANY_TAG,
            error: 0,
            internal: [0; 5],
        }
    }
}

/// Error classes (mpi.h's enum).
pub mod class {
    use std::os::raw::c_int;
    pub const SUCCESS: c_int = 0;
    pub const BUFFER: c_int = 1;
    pub const COUNT: c_int = 2;
    pub const TYPE: c_int = 3;
    pub const TAG: c_int = 4;
    pub const COMM: c_int = 5;
    pub const RANK: c_int = 6;
    pub const REQUEST: c_int = 7;
    pub const ROOT: c_int = 8;
    pub const GROUP: c_int = 9;
    pub const OP: c_int = 10;
    pub const TOPOLOGY: c_int = 11;
    pub const DIMS: c_int = 12;
    pub const ARG: c_int = 13;
    pub const UNKNOWN: c_int = 14;
    pub const TRUNCATE: c_int = 15;
    pub const OTHER: c_int = 16;
    pub const INTERN: c_int = 17;
    pub const CONVERSION: c_int = 25;
    pub const UNSUPPORTED_DATAREP: c_int = 57;
    pub const PENDING: c_int = 18;
    pub const IN_STATUS: c_int = 19;
    pub const INFO_KEY: c_int = 31;
    pub const INFO_NOKEY: c_int = 32;
    pub const INFO_VALUE: c_int = 33;
    pub const INFO: c_int = 34;
    pub const KEYVAL: c_int = 36;
    pub const NO_MEM: c_int = 39;
    pub const NOT_SAME: c_int = 40;
    pub const SESSION: c_int = 54;
    pub const UNSUPPORTED_OPERATION: c_int = 58;
    pub const ERRHANDLER: c_int = 61;
    pub const PROC_FAILED: c_int = 75;
    pub const LASTCODE: c_int = 0x3fff;
}
