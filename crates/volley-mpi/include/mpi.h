/*
 * mpi.h: volley's MPI, for C and C++ programs.
 *
 * Written from the MPI standard. Handles and constants follow the MPI-5.0 standard ABI's
 * choices: every handle is an opaque pointer-sized type, predefined handles are small integer
 * constants, and the header holds no extern data, so a program compiled against it needs
 * nothing from the library but its functions. Every MPI_ function has its PMPI_ twin (the
 * profiling interface).
 *
 * MPI_VERSION says what volley implements: MPI-3.1's point-to-point, collectives,
 * communicators, groups, datatypes, the environment and the tool interface MPI_T (and from
 * MPI-4.0 sessions, partitioned communication, the persistent collectives,
 * MPI_Isendrecv(_replace), the hardware split types, MPI_Info_get_string and
 * MPI_Comm_idup_with_info); functions not declared here are not implemented (see docs/mpi.md
 * for the list and why). Fortran is out of scope.
 */
#ifndef VOLLEY_MPI_H
#define VOLLEY_MPI_H

#include <stddef.h>
#include <stdint.h>

#if defined(__cplusplus)
extern "C" {
#endif

#define MPI_VERSION    3
#define MPI_SUBVERSION 1
#define VOLLEY_MPI     1

typedef intptr_t MPI_Aint;
typedef int64_t  MPI_Offset;
typedef int64_t  MPI_Count;
typedef int      MPI_Fint;

typedef struct {
    int MPI_SOURCE;
    int MPI_TAG;
    int MPI_ERROR;
    int internal[5];
} MPI_Status;

/* A status as Fortran holds it (MPI_Status_c2f, MPI_Status_f2c): MPI_F_STATUS_SIZE integers. */
enum { MPI_F_SOURCE = 0, MPI_F_TAG = 1, MPI_F_ERROR = 2, MPI_F_STATUS_SIZE = 8 };

/* Handles: opaque, pointer-sized. */
typedef struct MPI_ABI_Op *MPI_Op;
typedef struct MPI_ABI_Comm *MPI_Comm;
typedef struct MPI_ABI_Group *MPI_Group;
typedef struct MPI_ABI_Win *MPI_Win;
typedef struct MPI_ABI_File *MPI_File;
typedef struct MPI_ABI_Session *MPI_Session;
typedef struct MPI_ABI_Message *MPI_Message;
typedef struct MPI_ABI_Info *MPI_Info;
typedef struct MPI_ABI_Errhandler *MPI_Errhandler;
typedef struct MPI_ABI_Request *MPI_Request;
typedef struct MPI_ABI_Datatype *MPI_Datatype;

#define MPI_OP_NULL     ((MPI_Op)0x020)
#define MPI_SUM         ((MPI_Op)0x021)
#define MPI_MIN         ((MPI_Op)0x022)
#define MPI_MAX         ((MPI_Op)0x023)
#define MPI_PROD        ((MPI_Op)0x024)
#define MPI_BAND        ((MPI_Op)0x028)
#define MPI_BOR         ((MPI_Op)0x029)
#define MPI_BXOR        ((MPI_Op)0x02a)
#define MPI_LAND        ((MPI_Op)0x030)
#define MPI_LOR         ((MPI_Op)0x031)
#define MPI_LXOR        ((MPI_Op)0x032)
#define MPI_MINLOC      ((MPI_Op)0x038)
#define MPI_MAXLOC      ((MPI_Op)0x039)
#define MPI_REPLACE     ((MPI_Op)0x03c)
#define MPI_NO_OP       ((MPI_Op)0x03d)

#define MPI_COMM_NULL   ((MPI_Comm)0x100)
#define MPI_COMM_WORLD  ((MPI_Comm)0x101)
#define MPI_COMM_SELF   ((MPI_Comm)0x102)

#define MPI_GROUP_NULL  ((MPI_Group)0x108)
#define MPI_GROUP_EMPTY ((MPI_Group)0x109)

#define MPI_WIN_NULL     ((MPI_Win)0x110)
#define MPI_FILE_NULL    ((MPI_File)0x118)
#define MPI_SESSION_NULL ((MPI_Session)0x120)

#define MPI_MESSAGE_NULL    ((MPI_Message)0x128)
#define MPI_MESSAGE_NO_PROC ((MPI_Message)0x129)

#define MPI_INFO_NULL   ((MPI_Info)0x130)
#define MPI_INFO_ENV    ((MPI_Info)0x131)

#define MPI_ERRHANDLER_NULL  ((MPI_Errhandler)0x140)
#define MPI_ERRORS_ARE_FATAL ((MPI_Errhandler)0x141)
#define MPI_ERRORS_RETURN    ((MPI_Errhandler)0x142)
#define MPI_ERRORS_ABORT     ((MPI_Errhandler)0x143)

#define MPI_REQUEST_NULL ((MPI_Request)0x180)

#define MPI_DATATYPE_NULL           ((MPI_Datatype)0x200)
#define MPI_AINT                    ((MPI_Datatype)0x201)
#define MPI_COUNT                   ((MPI_Datatype)0x202)
#define MPI_OFFSET                  ((MPI_Datatype)0x203)
#define MPI_PACKED                  ((MPI_Datatype)0x207)
#define MPI_SHORT                   ((MPI_Datatype)0x208)
#define MPI_INT                     ((MPI_Datatype)0x209)
#define MPI_LONG                    ((MPI_Datatype)0x20a)
#define MPI_LONG_LONG               ((MPI_Datatype)0x20b)
#define MPI_LONG_LONG_INT           MPI_LONG_LONG
#define MPI_UNSIGNED_SHORT          ((MPI_Datatype)0x20c)
#define MPI_UNSIGNED                ((MPI_Datatype)0x20d)
#define MPI_UNSIGNED_LONG           ((MPI_Datatype)0x20e)
#define MPI_UNSIGNED_LONG_LONG      ((MPI_Datatype)0x20f)
#define MPI_FLOAT                   ((MPI_Datatype)0x210)
#define MPI_C_FLOAT_COMPLEX         ((MPI_Datatype)0x212)
#define MPI_C_COMPLEX               MPI_C_FLOAT_COMPLEX
#define MPI_CXX_FLOAT_COMPLEX       ((MPI_Datatype)0x213)
#define MPI_DOUBLE                  ((MPI_Datatype)0x214)
#define MPI_C_DOUBLE_COMPLEX        ((MPI_Datatype)0x216)
#define MPI_CXX_DOUBLE_COMPLEX      ((MPI_Datatype)0x217)
#define MPI_LONG_DOUBLE             ((MPI_Datatype)0x220)
#define MPI_C_LONG_DOUBLE_COMPLEX   ((MPI_Datatype)0x224)
#define MPI_CXX_LONG_DOUBLE_COMPLEX ((MPI_Datatype)0x225)
#define MPI_FLOAT_INT               ((MPI_Datatype)0x228)
#define MPI_DOUBLE_INT              ((MPI_Datatype)0x229)
#define MPI_LONG_INT                ((MPI_Datatype)0x22a)
#define MPI_2INT                    ((MPI_Datatype)0x22b)
#define MPI_SHORT_INT               ((MPI_Datatype)0x22c)
#define MPI_LONG_DOUBLE_INT         ((MPI_Datatype)0x22d)
#define MPI_C_BOOL                  ((MPI_Datatype)0x238)
#define MPI_CXX_BOOL                ((MPI_Datatype)0x239)
#define MPI_WCHAR                   ((MPI_Datatype)0x23c)
#define MPI_INT8_T                  ((MPI_Datatype)0x240)
#define MPI_UINT8_T                 ((MPI_Datatype)0x241)
#define MPI_CHAR                    ((MPI_Datatype)0x243)
#define MPI_SIGNED_CHAR             ((MPI_Datatype)0x244)
#define MPI_UNSIGNED_CHAR           ((MPI_Datatype)0x245)
#define MPI_BYTE                    ((MPI_Datatype)0x247)
#define MPI_INT16_T                 ((MPI_Datatype)0x248)
#define MPI_UINT16_T                ((MPI_Datatype)0x249)
#define MPI_INT32_T                 ((MPI_Datatype)0x250)
#define MPI_UINT32_T                ((MPI_Datatype)0x251)
#define MPI_INT64_T                 ((MPI_Datatype)0x258)
#define MPI_UINT64_T                ((MPI_Datatype)0x259)
/* Fortran's named types, usable from C with the Fortran compiler's default kinds (INTEGER,
 * REAL and LOGICAL of 4 bytes, DOUBLE PRECISION 8). volley has no Fortran face: these serve C
 * programs and libraries that name them. The sized types volley lacks (2-byte reals, 16-byte
 * integers and reals) have their handles, and an operation on one fails with MPI_ERR_TYPE. */
#define MPI_LOGICAL                 ((MPI_Datatype)0x218)
#define MPI_INTEGER                 ((MPI_Datatype)0x219)
#define MPI_REAL                    ((MPI_Datatype)0x21a)
#define MPI_COMPLEX                 ((MPI_Datatype)0x21b)
#define MPI_DOUBLE_PRECISION        ((MPI_Datatype)0x21c)
#define MPI_DOUBLE_COMPLEX          ((MPI_Datatype)0x21d)
#define MPI_2REAL                   ((MPI_Datatype)0x230)
#define MPI_2DOUBLE_PRECISION       ((MPI_Datatype)0x231)
#define MPI_2INTEGER                ((MPI_Datatype)0x232)
#define MPI_INTEGER1                ((MPI_Datatype)0x2c1)
#define MPI_CHARACTER               ((MPI_Datatype)0x2c3)
#define MPI_INTEGER2                ((MPI_Datatype)0x2c9)
#define MPI_REAL2                   ((MPI_Datatype)0x2ca)
#define MPI_INTEGER4                ((MPI_Datatype)0x2d1)
#define MPI_REAL4                   ((MPI_Datatype)0x2d2)
#define MPI_COMPLEX4                ((MPI_Datatype)0x2d3)
#define MPI_INTEGER8                ((MPI_Datatype)0x2d9)
#define MPI_REAL8                   ((MPI_Datatype)0x2da)
#define MPI_COMPLEX8                ((MPI_Datatype)0x2db)
#define MPI_INTEGER16               ((MPI_Datatype)0x2e1)
#define MPI_REAL16                  ((MPI_Datatype)0x2e2)
#define MPI_COMPLEX16               ((MPI_Datatype)0x2e3)
#define MPI_COMPLEX32               ((MPI_Datatype)0x2eb)

/* MPI_Type_create_darray's distributions. */
enum {
    MPI_DISTRIBUTE_NONE = 16,
    MPI_DISTRIBUTE_BLOCK = 17,
    MPI_DISTRIBUTE_CYCLIC = 18,
    MPI_DISTRIBUTE_DFLT_DARG = 19
};

/* MPI_Type_match_size's classes. */
enum {
    MPI_TYPECLASS_INTEGER = 802,
    MPI_TYPECLASS_REAL = 803,
    MPI_TYPECLASS_COMPLEX = 804
};

/* Lower and upper bound markers of MPI-1, still used by old programs. */
#define MPI_LB                      ((MPI_Datatype)0x2f0)
#define MPI_UB                      ((MPI_Datatype)0x2f1)

/* Error classes (every code volley returns maps to one through MPI_Error_class). */
enum {
    MPI_SUCCESS = 0,
    MPI_ERR_BUFFER = 1,
    MPI_ERR_COUNT = 2,
    MPI_ERR_TYPE = 3,
    MPI_ERR_TAG = 4,
    MPI_ERR_COMM = 5,
    MPI_ERR_RANK = 6,
    MPI_ERR_REQUEST = 7,
    MPI_ERR_ROOT = 8,
    MPI_ERR_GROUP = 9,
    MPI_ERR_OP = 10,
    MPI_ERR_TOPOLOGY = 11,
    MPI_ERR_DIMS = 12,
    MPI_ERR_ARG = 13,
    MPI_ERR_UNKNOWN = 14,
    MPI_ERR_TRUNCATE = 15,
    MPI_ERR_OTHER = 16,
    MPI_ERR_INTERN = 17,
    MPI_ERR_PENDING = 18,
    MPI_ERR_IN_STATUS = 19,
    MPI_ERR_ACCESS = 20,
    MPI_ERR_AMODE = 21,
    MPI_ERR_ASSERT = 22,
    MPI_ERR_BAD_FILE = 23,
    MPI_ERR_BASE = 24,
    MPI_ERR_CONVERSION = 25,
    MPI_ERR_DISP = 26,
    MPI_ERR_DUP_DATAREP = 27,
    MPI_ERR_FILE_EXISTS = 28,
    MPI_ERR_FILE_IN_USE = 29,
    MPI_ERR_FILE = 30,
    MPI_ERR_INFO_KEY = 31,
    MPI_ERR_INFO_NOKEY = 32,
    MPI_ERR_INFO_VALUE = 33,
    MPI_ERR_INFO = 34,
    MPI_ERR_IO = 35,
    MPI_ERR_KEYVAL = 36,
    MPI_ERR_LOCKTYPE = 37,
    MPI_ERR_NAME = 38,
    MPI_ERR_NO_MEM = 39,
    MPI_ERR_NOT_SAME = 40,
    MPI_ERR_NO_SPACE = 41,
    MPI_ERR_NO_SUCH_FILE = 42,
    MPI_ERR_PORT = 43,
    MPI_ERR_PROC_ABORTED = 44,
    MPI_ERR_QUOTA = 45,
    MPI_ERR_READ_ONLY = 46,
    MPI_ERR_RMA_ATTACH = 47,
    MPI_ERR_RMA_CONFLICT = 48,
    MPI_ERR_RMA_RANGE = 49,
    MPI_ERR_RMA_SHARED = 50,
    MPI_ERR_RMA_SYNC = 51,
    MPI_ERR_RMA_FLAVOR = 52,
    MPI_ERR_SERVICE = 53,
    MPI_ERR_SESSION = 54,
    MPI_ERR_SIZE = 55,
    MPI_ERR_SPAWN = 56,
    MPI_ERR_UNSUPPORTED_DATAREP = 57,
    MPI_ERR_UNSUPPORTED_OPERATION = 58,
    MPI_ERR_VALUE_TOO_LARGE = 59,
    MPI_ERR_WIN = 60,
    MPI_ERR_ERRHANDLER = 61,
    /* The fault-tolerance proposal's class: the peer an operation needs has failed. */
    MPIX_ERR_PROC_FAILED = 75,
    /* The tool information interface's classes (MPI-3.1 14.3.9), the MPI-5.0 ABI's values. */
    MPI_T_ERR_CANNOT_INIT = 1000,
    MPI_T_ERR_NOT_ACCESSIBLE = 1001,
    MPI_T_ERR_NOT_INITIALIZED = 1002,
    MPI_T_ERR_NOT_SUPPORTED = 1003,
    MPI_T_ERR_MEMORY = 1004,
    MPI_T_ERR_INVALID = 1005,
    MPI_T_ERR_INVALID_INDEX = 1006,
    MPI_T_ERR_INVALID_ITEM = 1007,
    MPI_T_ERR_INVALID_SESSION = 1008,
    MPI_T_ERR_INVALID_HANDLE = 1009,
    MPI_T_ERR_INVALID_NAME = 1010,
    MPI_T_ERR_OUT_OF_HANDLES = 1011,
    MPI_T_ERR_OUT_OF_SESSIONS = 1012,
    MPI_T_ERR_CVAR_SET_NOT_NOW = 1013,
    MPI_T_ERR_CVAR_SET_NEVER = 1014,
    MPI_T_ERR_PVAR_NO_WRITE = 1015,
    MPI_T_ERR_PVAR_NO_STARTSTOP = 1016,
    MPI_T_ERR_PVAR_NO_ATOMIC = 1017,
    MPI_ERR_LASTCODE = 0x3fff
};

#define MPI_BOTTOM   ((void *)0)
#define MPI_IN_PLACE ((void *)1)

#define MPI_ARGV_NULL       ((char **)0)
#define MPI_ARGVS_NULL      ((char ***)0)
#define MPI_ERRCODES_IGNORE ((int *)0)
#define MPI_STATUS_IGNORE   ((MPI_Status *)0)
#define MPI_STATUSES_IGNORE ((MPI_Status *)0)

#define MPI_BSEND_OVERHEAD 512

#define MPI_MAX_ERROR_STRING           512
#define MPI_MAX_INFO_KEY               256
#define MPI_MAX_INFO_VAL               1024
#define MPI_MAX_LIBRARY_VERSION_STRING 8192
#define MPI_MAX_OBJECT_NAME            128
#define MPI_MAX_PROCESSOR_NAME         256
#define MPI_MAX_PSET_NAME_LEN          512
#define MPI_MAX_STRINGTAG_LEN          1024
#define MPI_MAX_DATAREP_STRING         128

enum {
    MPI_ANY_SOURCE = -1,
    MPI_ANY_TAG = -2,
    MPI_PROC_NULL = -3,
    MPI_ROOT = -4,
    MPI_KEYVAL_INVALID = -127,
    MPI_UNDEFINED = -32766
};

/* Topologies (MPI_Topo_test). */
enum {
    MPI_CART = 1,
    MPI_GRAPH = 2,
    MPI_DIST_GRAPH = 3
};
#define MPI_UNWEIGHTED    ((int *)2)
#define MPI_WEIGHTS_EMPTY ((int *)3)

enum {
    MPI_THREAD_SINGLE = 0,
    MPI_THREAD_FUNNELED = 1,
    MPI_THREAD_SERIALIZED = 2,
    MPI_THREAD_MULTIPLE = 7,

    MPI_ORDER_C = 0xC,
    MPI_ORDER_FORTRAN = 0xF,

    MPI_IDENT = 101,
    MPI_CONGRUENT = 102,
    MPI_SIMILAR = 103,
    MPI_UNEQUAL = 104,

    MPI_COMBINER_NAMED = 301,
    MPI_COMBINER_DUP = 302,
    MPI_COMBINER_CONTIGUOUS = 303,
    MPI_COMBINER_VECTOR = 304,
    MPI_COMBINER_HVECTOR = 305,
    MPI_COMBINER_INDEXED = 306,
    MPI_COMBINER_HINDEXED = 307,
    MPI_COMBINER_INDEXED_BLOCK = 308,
    MPI_COMBINER_HINDEXED_BLOCK = 309,
    MPI_COMBINER_STRUCT = 310,
    MPI_COMBINER_SUBARRAY = 311,
    MPI_COMBINER_DARRAY = 312,
    MPI_COMBINER_F90_REAL = 313,
    MPI_COMBINER_F90_COMPLEX = 314,
    MPI_COMBINER_F90_INTEGER = 315,
    MPI_COMBINER_RESIZED = 316,

    /* One-sided communication (MPI-3.1 chapter 11): assertions, lock types, memory models and
     * window flavors. */
    MPI_MODE_NOCHECK = 1024,
    MPI_MODE_NOPRECEDE = 2048,
    MPI_MODE_NOPUT = 4096,
    MPI_MODE_NOSTORE = 8192,
    MPI_MODE_NOSUCCEED = 16384,
    MPI_LOCK_SHARED = 21,
    MPI_LOCK_EXCLUSIVE = 22,
    MPI_WIN_UNIFIED = 31,
    MPI_WIN_SEPARATE = 32,
    MPI_WIN_FLAVOR_ALLOCATE = 41,
    MPI_WIN_FLAVOR_CREATE = 42,
    MPI_WIN_FLAVOR_DYNAMIC = 43,
    MPI_WIN_FLAVOR_SHARED = 44,

    /* MPI-IO (MPI-3.1 chapter 13): access modes, seek positions, the sequential view's
     * displacement. */
    MPI_MODE_APPEND = 1,
    MPI_MODE_CREATE = 2,
    MPI_MODE_DELETE_ON_CLOSE = 4,
    MPI_MODE_EXCL = 8,
    MPI_MODE_RDONLY = 16,
    MPI_MODE_RDWR = 32,
    MPI_MODE_SEQUENTIAL = 64,
    MPI_MODE_UNIQUE_OPEN = 128,
    MPI_MODE_WRONLY = 256,
    MPI_SEEK_CUR = 601,
    MPI_SEEK_END = 602,
    MPI_SEEK_SET = 603,
    MPI_DISPLACEMENT_CURRENT = -255,

    MPI_COMM_TYPE_SHARED = 1001,
    MPI_COMM_TYPE_HW_UNGUIDED = 1002,
    MPI_COMM_TYPE_HW_GUIDED = 1003,

    MPI_TAG_UB = 10001,
    MPI_IO = 10002,
    MPI_HOST = 10003,
    MPI_WTIME_IS_GLOBAL = 10004,
    MPI_APPNUM = 10005,
    MPI_LASTUSEDCODE = 10006,
    MPI_UNIVERSE_SIZE = 10007,

    /* A window's predefined attributes. */
    MPI_WIN_BASE = 20001,
    MPI_WIN_DISP_UNIT = 20002,
    MPI_WIN_SIZE = 20003,
    MPI_WIN_CREATE_FLAVOR = 20004,
    MPI_WIN_MODEL = 20005
};

typedef int (MPI_Comm_copy_attr_function)(MPI_Comm, int, void *, void *, void *, int *);
typedef int (MPI_Comm_delete_attr_function)(MPI_Comm, int, void *, void *);
typedef void (MPI_User_function)(void *, void *, int *, MPI_Datatype *);
typedef int (MPI_Grequest_query_function)(void *extra_state, MPI_Status *status);
typedef int (MPI_Grequest_free_function)(void *extra_state);
typedef int (MPI_Grequest_cancel_function)(void *extra_state, int complete);
typedef void (MPI_Comm_errhandler_function)(MPI_Comm *, int *, ...);
typedef MPI_Comm_errhandler_function MPI_Comm_errhandler_fn;
typedef void (MPI_Session_errhandler_function)(MPI_Session *, int *, ...);
/* MPI-1's name for it (MPI_Errhandler_create, removed in MPI-3.0 and kept as MPICH keeps it). */
typedef MPI_Comm_errhandler_function MPI_Handler_function;

#define MPI_COMM_NULL_COPY_FN   ((MPI_Comm_copy_attr_function *)0x0)
#define MPI_COMM_DUP_FN         ((MPI_Comm_copy_attr_function *)0x1)
#define MPI_COMM_NULL_DELETE_FN ((MPI_Comm_delete_attr_function *)0x0)
#define MPI_NULL_COPY_FN        MPI_COMM_NULL_COPY_FN
#define MPI_DUP_FN              MPI_COMM_DUP_FN
#define MPI_NULL_DELETE_FN      MPI_COMM_NULL_DELETE_FN
typedef int (MPI_Type_copy_attr_function)(MPI_Datatype, int, void *, void *, void *, int *);
typedef int (MPI_Type_delete_attr_function)(MPI_Datatype, int, void *, void *);
#define MPI_TYPE_NULL_COPY_FN   ((MPI_Type_copy_attr_function *)0x0)
#define MPI_TYPE_DUP_FN         ((MPI_Type_copy_attr_function *)0x1)
#define MPI_TYPE_NULL_DELETE_FN ((MPI_Type_delete_attr_function *)0x0)
typedef int (MPI_Win_copy_attr_function)(MPI_Win, int, void *, void *, void *, int *);
typedef int (MPI_Win_delete_attr_function)(MPI_Win, int, void *, void *);
#define MPI_WIN_NULL_COPY_FN    ((MPI_Win_copy_attr_function *)0x0)
#define MPI_WIN_DUP_FN          ((MPI_Win_copy_attr_function *)0x1)
#define MPI_WIN_NULL_DELETE_FN  ((MPI_Win_delete_attr_function *)0x0)
typedef void (MPI_Win_errhandler_function)(MPI_Win *, int *, ...);
typedef MPI_Win_errhandler_function MPI_Win_errhandler_fn;
typedef void (MPI_File_errhandler_function)(MPI_File *, int *, ...);
typedef MPI_File_errhandler_function MPI_File_errhandler_fn;
typedef int (MPI_Datarep_conversion_function)(void *, MPI_Datatype, int, void *, MPI_Offset, void *);
typedef int (MPI_Datarep_extent_function)(MPI_Datatype datatype, MPI_Aint *, void *);
#define MPI_CONVERSION_FN_NULL ((MPI_Datarep_conversion_function *)0x0)
/* ROMIO's names, which older MPI-IO programs use (MPICH and Open MPI define them alike). */
#define MPIO_Request      MPI_Request
#define MPIO_REQUEST_NULL MPI_REQUEST_NULL
#define MPIO_Wait         MPI_Wait
#define MPIO_Test         MPI_Test
typedef MPI_Comm_copy_attr_function MPI_Copy_function;
typedef MPI_Comm_delete_attr_function MPI_Delete_function;

/* The functions. Each is also declared as PMPI_ below. */
/* MPI-IO (MPI-3.1 chapter 13, MPI_File_open to MPI_File_c2f): POSIX files, "native" data
 * (docs/mpi.md says how they work and what is left out). */
/* One-sided communication (MPI-3.1 chapter 11, MPI_Win_create to MPI_Win_sync): windows whose
 * ranks share one machine (docs/mpi.md says how they work and what is left out). */
/* MPI_T, the tool information interface (MPI-3.1 chapter 14): volley's settings as control
 * variables, its counters as performance variables (docs/mpi.md). */
typedef struct MPI_T_enum_t *MPI_T_enum;
typedef struct MPI_T_cvar_handle_t *MPI_T_cvar_handle;
typedef struct MPI_T_pvar_handle_t *MPI_T_pvar_handle;
typedef struct MPI_T_pvar_session_t *MPI_T_pvar_session;
#define MPI_T_ENUM_NULL         ((MPI_T_enum)0)
#define MPI_T_CVAR_HANDLE_NULL  ((MPI_T_cvar_handle)0)
#define MPI_T_PVAR_SESSION_NULL ((MPI_T_pvar_session)0)
#define MPI_T_PVAR_HANDLE_NULL  ((MPI_T_pvar_handle)0)
#define MPI_T_PVAR_ALL_HANDLES  ((MPI_T_pvar_handle)1)
enum {
    MPI_T_VERBOSITY_USER_BASIC,
    MPI_T_VERBOSITY_USER_DETAIL,
    MPI_T_VERBOSITY_USER_ALL,
    MPI_T_VERBOSITY_TUNER_BASIC,
    MPI_T_VERBOSITY_TUNER_DETAIL,
    MPI_T_VERBOSITY_TUNER_ALL,
    MPI_T_VERBOSITY_MPIDEV_BASIC,
    MPI_T_VERBOSITY_MPIDEV_DETAIL,
    MPI_T_VERBOSITY_MPIDEV_ALL
};
enum {
    MPI_T_BIND_NO_OBJECT,
    MPI_T_BIND_MPI_COMM,
    MPI_T_BIND_MPI_DATATYPE,
    MPI_T_BIND_MPI_ERRHANDLER,
    MPI_T_BIND_MPI_FILE,
    MPI_T_BIND_MPI_GROUP,
    MPI_T_BIND_MPI_OP,
    MPI_T_BIND_MPI_REQUEST,
    MPI_T_BIND_MPI_SESSION,
    MPI_T_BIND_MPI_WIN,
    MPI_T_BIND_MPI_MESSAGE,
    MPI_T_BIND_MPI_INFO
};
enum {
    MPI_T_SCOPE_CONSTANT,
    MPI_T_SCOPE_READONLY,
    MPI_T_SCOPE_LOCAL,
    MPI_T_SCOPE_GROUP,
    MPI_T_SCOPE_GROUP_EQ,
    MPI_T_SCOPE_ALL,
    MPI_T_SCOPE_ALL_EQ
};
enum {
    MPI_T_PVAR_CLASS_STATE,
    MPI_T_PVAR_CLASS_LEVEL,
    MPI_T_PVAR_CLASS_SIZE,
    MPI_T_PVAR_CLASS_PERCENTAGE,
    MPI_T_PVAR_CLASS_HIGHWATERMARK,
    MPI_T_PVAR_CLASS_LOWWATERMARK,
    MPI_T_PVAR_CLASS_COUNTER,
    MPI_T_PVAR_CLASS_AGGREGATE,
    MPI_T_PVAR_CLASS_TIMER,
    MPI_T_PVAR_CLASS_GENERIC
};

#define VOLLEY_MPI_FUNCTIONS(P) \
P(int, Init, (int *argc, char ***argv)) \
P(int, Init_thread, (int *argc, char ***argv, int required, int *provided)) \
P(int, Initialized, (int *flag)) \
P(int, Finalize, (void)) \
P(int, Finalized, (int *flag)) \
P(int, Query_thread, (int *provided)) \
P(int, Is_thread_main, (int *flag)) \
P(int, Abort, (MPI_Comm comm, int errorcode)) \
P(double, Wtime, (void)) \
P(double, Wtick, (void)) \
P(int, Get_processor_name, (char *name, int *resultlen)) \
P(int, Get_version, (int *version, int *subversion)) \
P(int, Get_library_version, (char *version, int *resultlen)) \
P(int, Pcontrol, (const int level, ...)) \
P(int, Error_string, (int errorcode, char *string, int *resultlen)) \
P(int, Add_error_class, (int *errorclass)) \
P(int, Add_error_code, (int errorclass, int *errorcode)) \
P(int, Add_error_string, (int errorcode, const char *string)) \
P(int, Error_class, (int errorcode, int *errorclass)) \
P(int, Comm_set_errhandler, (MPI_Comm comm, MPI_Errhandler errhandler)) \
P(int, Comm_get_errhandler, (MPI_Comm comm, MPI_Errhandler *errhandler)) \
P(int, Comm_create_errhandler, (MPI_Comm_errhandler_function *fn, MPI_Errhandler *errhandler)) \
P(int, Comm_call_errhandler, (MPI_Comm comm, int errorcode)) \
P(int, Errhandler_free, (MPI_Errhandler *errhandler)) \
P(int, Send, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)) \
P(int, Ssend, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)) \
P(int, Rsend, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)) \
P(int, Bsend, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)) \
P(int, Buffer_attach, (void *buffer, int size)) \
P(int, Buffer_detach, (void *buffer_addr, int *size)) \
P(int, Recv, (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Status *status)) \
P(int, Sendrecv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Status *status)) \
P(int, Sendrecv_replace, (void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag, MPI_Comm comm, MPI_Status *status)) \
P(int, Isendrecv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm, MPI_Request *request)) \
P(int, Isendrecv_replace, (void *buf, int count, MPI_Datatype datatype, int dest, int sendtag, int source, int recvtag, MPI_Comm comm, MPI_Request *request)) \
P(int, Isend, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Issend, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Irsend, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Ibsend, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Irecv, (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Send_init, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Ssend_init, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Rsend_init, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Bsend_init, (const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Recv_init, (void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Request *request)) \
P(int, Psend_init, (const void *buf, int partitions, MPI_Count count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Precv_init, (void *buf, int partitions, MPI_Count count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Pready, (int partition, MPI_Request request)) \
P(int, Pready_range, (int partition_low, int partition_high, MPI_Request request)) \
P(int, Pready_list, (int length, const int array_of_partitions[], MPI_Request request)) \
P(int, Parrived, (MPI_Request request, int partition, int *flag)) \
P(int, Start, (MPI_Request *request)) \
P(int, Startall, (int count, MPI_Request array_of_requests[])) \
P(int, Wait, (MPI_Request *request, MPI_Status *status)) \
P(int, Waitall, (int count, MPI_Request array_of_requests[], MPI_Status array_of_statuses[])) \
P(int, Waitany, (int count, MPI_Request array_of_requests[], int *index, MPI_Status *status)) \
P(int, Waitsome, (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], MPI_Status array_of_statuses[])) \
P(int, Test, (MPI_Request *request, int *flag, MPI_Status *status)) \
P(int, Testall, (int count, MPI_Request array_of_requests[], int *flag, MPI_Status array_of_statuses[])) \
P(int, Testany, (int count, MPI_Request array_of_requests[], int *index, int *flag, MPI_Status *status)) \
P(int, Testsome, (int incount, MPI_Request array_of_requests[], int *outcount, int array_of_indices[], MPI_Status array_of_statuses[])) \
P(int, Request_free, (MPI_Request *request)) \
P(int, Request_get_status, (MPI_Request request, int *flag, MPI_Status *status)) \
P(int, Cancel, (MPI_Request *request)) \
P(int, Test_cancelled, (const MPI_Status *status, int *flag)) \
P(int, Probe, (int source, int tag, MPI_Comm comm, MPI_Status *status)) \
P(int, Iprobe, (int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status)) \
P(int, Mprobe, (int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status)) \
P(int, Improbe, (int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message, MPI_Status *status)) \
P(int, Mrecv, (void *buf, int count, MPI_Datatype datatype, MPI_Message *message, MPI_Status *status)) \
P(int, Imrecv, (void *buf, int count, MPI_Datatype datatype, MPI_Message *message, MPI_Request *request)) \
P(int, Get_count, (const MPI_Status *status, MPI_Datatype datatype, int *count)) \
P(int, Get_elements, (const MPI_Status *status, MPI_Datatype datatype, int *count)) \
P(int, Get_elements_x, (const MPI_Status *status, MPI_Datatype datatype, MPI_Count *count)) \
P(int, Comm_size, (MPI_Comm comm, int *size)) \
P(int, Comm_rank, (MPI_Comm comm, int *rank)) \
P(int, Comm_dup, (MPI_Comm comm, MPI_Comm *newcomm)) \
P(int, Comm_idup, (MPI_Comm comm, MPI_Comm *newcomm, MPI_Request *request)) \
P(int, Comm_idup_with_info, (MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm, MPI_Request *request)) \
P(int, Comm_split, (MPI_Comm comm, int color, int key, MPI_Comm *newcomm)) \
P(int, Comm_split_type, (MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm)) \
P(int, Comm_create, (MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm)) \
P(int, Comm_create_group, (MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm)) \
P(int, Comm_free, (MPI_Comm *comm)) \
P(int, Comm_compare, (MPI_Comm comm1, MPI_Comm comm2, int *result)) \
P(int, Comm_test_inter, (MPI_Comm comm, int *flag)) \
P(int, Topo_test, (MPI_Comm comm, int *status)) \
P(int, Grequest_start, (MPI_Grequest_query_function *query_fn, MPI_Grequest_free_function *free_fn, MPI_Grequest_cancel_function *cancel_fn, void *extra_state, MPI_Request *request)) \
P(int, Grequest_complete, (MPI_Request request)) \
P(int, Cart_create, (MPI_Comm comm_old, int ndims, const int dims[], const int periods[], int reorder, MPI_Comm *comm_cart)) \
P(int, Cartdim_get, (MPI_Comm comm, int *ndims)) \
P(int, Cart_get, (MPI_Comm comm, int maxdims, int dims[], int periods[], int coords[])) \
P(int, Cart_rank, (MPI_Comm comm, const int coords[], int *rank)) \
P(int, Cart_coords, (MPI_Comm comm, int rank, int maxdims, int coords[])) \
P(int, Cart_shift, (MPI_Comm comm, int direction, int disp, int *rank_source, int *rank_dest)) \
P(int, Cart_sub, (MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm)) \
P(int, Cart_map, (MPI_Comm comm, int ndims, const int dims[], const int periods[], int *newrank)) \
P(int, Graph_create, (MPI_Comm comm_old, int nnodes, const int index[], const int edges[], int reorder, MPI_Comm *comm_graph)) \
P(int, Graphdims_get, (MPI_Comm comm, int *nnodes, int *nedges)) \
P(int, Graph_get, (MPI_Comm comm, int maxindex, int maxedges, int index[], int edges[])) \
P(int, Graph_neighbors_count, (MPI_Comm comm, int rank, int *nneighbors)) \
P(int, Graph_neighbors, (MPI_Comm comm, int rank, int maxneighbors, int neighbors[])) \
P(int, Graph_map, (MPI_Comm comm, int nnodes, const int index[], const int edges[], int *newrank)) \
P(int, Dist_graph_create_adjacent, (MPI_Comm comm_old, int indegree, const int sources[], const int *sourceweights, int outdegree, const int destinations[], const int *destweights, MPI_Info info, int reorder, MPI_Comm *comm_dist_graph)) \
P(int, Dist_graph_create, (MPI_Comm comm_old, int n, const int sources[], const int degrees[], const int destinations[], const int *weights, MPI_Info info, int reorder, MPI_Comm *comm_dist_graph)) \
P(int, Dist_graph_neighbors_count, (MPI_Comm comm, int *indegree, int *outdegree, int *weighted)) \
P(int, Dist_graph_neighbors, (MPI_Comm comm, int maxindegree, int sources[], int *sourceweights, int maxoutdegree, int destinations[], int *destweights)) \
P(int, Neighbor_allgather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)) \
P(int, Neighbor_allgatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)) \
P(int, Neighbor_alltoall, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)) \
P(int, Neighbor_alltoallv, (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)) \
P(int, Neighbor_alltoallw, (const void *sendbuf, const int sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm)) \
P(int, Ineighbor_allgather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)) \
P(int, Neighbor_allgather_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ineighbor_allgatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)) \
P(int, Neighbor_allgatherv_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ineighbor_alltoall, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)) \
P(int, Neighbor_alltoall_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ineighbor_alltoallv, (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)) \
P(int, Neighbor_alltoallv_init, (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ineighbor_alltoallw, (const void *sendbuf, const int sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Request *request)) \
P(int, Neighbor_alltoallw_init, (const void *sendbuf, const int sendcounts[], const MPI_Aint sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const MPI_Aint rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Dims_create, (int nnodes, int ndims, int dims[])) \
P(int, Comm_remote_size, (MPI_Comm comm, int *size)) \
P(int, Comm_remote_group, (MPI_Comm comm, MPI_Group *group)) \
P(int, Intercomm_create, (MPI_Comm local_comm, int local_leader, MPI_Comm peer_comm, int remote_leader, int tag, MPI_Comm *newintercomm)) \
P(int, Intercomm_merge, (MPI_Comm intercomm, int high, MPI_Comm *newintracomm)) \
P(int, Comm_set_name, (MPI_Comm comm, const char *comm_name)) \
P(int, Comm_get_name, (MPI_Comm comm, char *comm_name, int *resultlen)) \
P(int, Comm_group, (MPI_Comm comm, MPI_Group *group)) \
P(int, Comm_create_keyval, (MPI_Comm_copy_attr_function *copy_fn, MPI_Comm_delete_attr_function *delete_fn, int *keyval, void *extra_state)) \
P(int, Comm_free_keyval, (int *keyval)) \
P(int, Comm_set_attr, (MPI_Comm comm, int keyval, void *attribute_val)) \
P(int, Comm_get_attr, (MPI_Comm comm, int keyval, void *attribute_val, int *flag)) \
P(int, Comm_delete_attr, (MPI_Comm comm, int keyval)) \
P(int, Group_size, (MPI_Group group, int *size)) \
P(int, Group_rank, (MPI_Group group, int *rank)) \
P(int, Group_incl, (MPI_Group group, int n, const int ranks[], MPI_Group *newgroup)) \
P(int, Group_excl, (MPI_Group group, int n, const int ranks[], MPI_Group *newgroup)) \
P(int, Group_range_incl, (MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup)) \
P(int, Group_range_excl, (MPI_Group group, int n, int ranges[][3], MPI_Group *newgroup)) \
P(int, Group_union, (MPI_Group group1, MPI_Group group2, MPI_Group *newgroup)) \
P(int, Group_intersection, (MPI_Group group1, MPI_Group group2, MPI_Group *newgroup)) \
P(int, Group_difference, (MPI_Group group1, MPI_Group group2, MPI_Group *newgroup)) \
P(int, Group_translate_ranks, (MPI_Group group1, int n, const int ranks1[], MPI_Group group2, int ranks2[])) \
P(int, Group_compare, (MPI_Group group1, MPI_Group group2, int *result)) \
P(int, Group_free, (MPI_Group *group)) \
P(int, Type_size, (MPI_Datatype datatype, int *size)) \
P(int, Type_match_size, (int typeclass, int size, MPI_Datatype *datatype)) \
P(int, Type_create_f90_integer, (int r, MPI_Datatype *newtype)) \
P(int, Type_create_f90_real, (int p, int r, MPI_Datatype *newtype)) \
P(int, Type_create_f90_complex, (int p, int r, MPI_Datatype *newtype)) \
P(int, Type_create_darray, (int size, int rank, int ndims, const int array_of_gsizes[], const int array_of_distribs[], const int array_of_dargs[], const int array_of_psizes[], int order, MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Pack_external, (const char datarep[], const void *inbuf, int incount, MPI_Datatype datatype, void *outbuf, MPI_Aint outsize, MPI_Aint *position)) \
P(int, Unpack_external, (const char datarep[], const void *inbuf, MPI_Aint insize, MPI_Aint *position, void *outbuf, int outcount, MPI_Datatype datatype)) \
P(int, Pack_external_size, (const char datarep[], int incount, MPI_Datatype datatype, MPI_Aint *size)) \
P(int, Type_create_keyval, (MPI_Type_copy_attr_function *type_copy_attr_fn, MPI_Type_delete_attr_function *type_delete_attr_fn, int *type_keyval, void *extra_state)) \
P(int, Type_free_keyval, (int *type_keyval)) \
P(int, Type_set_attr, (MPI_Datatype datatype, int type_keyval, void *attribute_val)) \
P(int, Type_get_attr, (MPI_Datatype datatype, int type_keyval, void *attribute_val, int *flag)) \
P(int, Type_delete_attr, (MPI_Datatype datatype, int type_keyval)) \
P(int, Type_size_x, (MPI_Datatype datatype, MPI_Count *size)) \
P(int, Type_get_extent, (MPI_Datatype datatype, MPI_Aint *lb, MPI_Aint *extent)) \
P(int, Type_get_extent_x, (MPI_Datatype datatype, MPI_Count *lb, MPI_Count *extent)) \
P(int, Type_get_true_extent, (MPI_Datatype datatype, MPI_Aint *true_lb, MPI_Aint *true_extent)) \
P(int, Type_get_true_extent_x, (MPI_Datatype datatype, MPI_Count *true_lb, MPI_Count *true_extent)) \
P(int, Type_contiguous, (int count, MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_vector, (int count, int blocklength, int stride, MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_create_hvector, (int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_indexed, (int count, const int array_of_blocklengths[], const int array_of_displacements[], MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_create_hindexed, (int count, const int array_of_blocklengths[], const MPI_Aint array_of_displacements[], MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_create_indexed_block, (int count, int blocklength, const int array_of_displacements[], MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_create_hindexed_block, (int count, int blocklength, const MPI_Aint array_of_displacements[], MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_create_struct, (int count, const int array_of_blocklengths[], const MPI_Aint array_of_displacements[], const MPI_Datatype array_of_types[], MPI_Datatype *newtype)) \
P(int, Type_create_subarray, (int ndims, const int array_of_sizes[], const int array_of_subsizes[], const int array_of_starts[], int order, MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_create_resized, (MPI_Datatype oldtype, MPI_Aint lb, MPI_Aint extent, MPI_Datatype *newtype)) \
P(int, Type_dup, (MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_commit, (MPI_Datatype *datatype)) \
P(int, Type_free, (MPI_Datatype *datatype)) \
P(int, Type_set_name, (MPI_Datatype datatype, const char *type_name)) \
P(int, Type_get_name, (MPI_Datatype datatype, char *type_name, int *resultlen)) \
P(int, Type_get_envelope, (MPI_Datatype datatype, int *num_integers, int *num_addresses, int *num_datatypes, int *combiner)) \
P(int, Type_get_contents, (MPI_Datatype datatype, int max_integers, int max_addresses, int max_datatypes, int array_of_integers[], MPI_Aint array_of_addresses[], MPI_Datatype array_of_datatypes[])) \
P(int, Pack, (const void *inbuf, int incount, MPI_Datatype datatype, void *outbuf, int outsize, int *position, MPI_Comm comm)) \
P(int, Unpack, (const void *inbuf, int insize, int *position, void *outbuf, int outcount, MPI_Datatype datatype, MPI_Comm comm)) \
P(int, Pack_size, (int incount, MPI_Datatype datatype, MPI_Comm comm, int *size)) \
P(int, Get_address, (const void *location, MPI_Aint *address)) \
P(MPI_Aint, Aint_add, (MPI_Aint base, MPI_Aint disp)) \
P(MPI_Aint, Aint_diff, (MPI_Aint addr1, MPI_Aint addr2)) \
P(int, Barrier, (MPI_Comm comm)) \
P(int, Bcast, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm)) \
P(int, Reduce, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm)) \
P(int, Allreduce, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)) \
P(int, Gather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)) \
P(int, Scatter, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)) \
P(int, Allgather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)) \
P(int, Alltoall, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm)) \
P(int, Gatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm)) \
P(int, Scatterv, (const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm)) \
P(int, Allgatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)) \
P(int, Alltoallv, (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm)) \
P(int, Alltoallw, (const void *sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm)) \
P(int, Reduce_scatter_block, (const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)) \
P(int, Reduce_scatter, (const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)) \
P(int, Scan, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)) \
P(int, Exscan, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm)) \
P(int, Ibarrier, (MPI_Comm comm, MPI_Request *request)) \
P(int, Barrier_init, (MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ibcast, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Request *request)) \
P(int, Bcast_init, (void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ireduce, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, MPI_Request *request)) \
P(int, Reduce_init, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Iallreduce, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request)) \
P(int, Allreduce_init, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Igather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request)) \
P(int, Gather_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Iscatter, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request)) \
P(int, Scatter_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Iallgather, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)) \
P(int, Allgather_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ialltoall, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)) \
P(int, Alltoall_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Igatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request)) \
P(int, Gatherv_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Iscatterv, (const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request)) \
P(int, Scatterv_init, (const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Iallgatherv, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)) \
P(int, Allgatherv_init, (const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ialltoallv, (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request)) \
P(int, Alltoallv_init, (const void *sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ialltoallw, (const void *sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Request *request)) \
P(int, Alltoallw_init, (const void *sendbuf, const int sendcounts[], const int sdispls[], const MPI_Datatype sendtypes[], void *recvbuf, const int recvcounts[], const int rdispls[], const MPI_Datatype recvtypes[], MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ireduce_scatter_block, (const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request)) \
P(int, Reduce_scatter_block_init, (const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Ireduce_scatter, (const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request)) \
P(int, Reduce_scatter_init, (const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Iscan, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request)) \
P(int, Scan_init, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Iexscan, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request)) \
P(int, Exscan_init, (const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Info info, MPI_Request *request)) \
P(int, Reduce_local, (const void *inbuf, void *inoutbuf, int count, MPI_Datatype datatype, MPI_Op op)) \
P(int, Op_create, (MPI_User_function *user_fn, int commute, MPI_Op *op)) \
P(int, Op_free, (MPI_Op *op)) \
P(int, Op_commutative, (MPI_Op op, int *commute)) \
P(int, Alloc_mem, (MPI_Aint size, MPI_Info info, void *baseptr)) \
P(int, Free_mem, (void *base)) \
P(int, Comm_get_parent, (MPI_Comm *parent)) \
P(int, Comm_disconnect, (MPI_Comm *comm)) \
P(int, Comm_dup_with_info, (MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm)) \
P(int, Comm_set_info, (MPI_Comm comm, MPI_Info info)) \
P(int, Comm_get_info, (MPI_Comm comm, MPI_Info *info_used)) \
P(int, Keyval_create, (MPI_Comm_copy_attr_function *copy_fn, MPI_Comm_delete_attr_function *delete_fn, int *keyval, void *extra_state)) \
P(int, Keyval_free, (int *keyval)) \
P(int, Attr_put, (MPI_Comm comm, int keyval, void *attribute_val)) \
P(int, Attr_get, (MPI_Comm comm, int keyval, void *attribute_val, int *flag)) \
P(int, Attr_delete, (MPI_Comm comm, int keyval)) \
P(int, Type_extent, (MPI_Datatype datatype, MPI_Aint *extent)) \
P(int, Type_lb, (MPI_Datatype datatype, MPI_Aint *displacement)) \
P(int, Type_ub, (MPI_Datatype datatype, MPI_Aint *displacement)) \
P(int, Type_struct, (int count, int array_of_blocklengths[], MPI_Aint array_of_displacements[], MPI_Datatype array_of_types[], MPI_Datatype *newtype)) \
P(int, Type_hindexed, (int count, int array_of_blocklengths[], MPI_Aint array_of_displacements[], MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Type_hvector, (int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype, MPI_Datatype *newtype)) \
P(int, Address, (void *location, MPI_Aint *address)) \
P(int, Errhandler_create, (MPI_Handler_function *function, MPI_Errhandler *errhandler)) \
P(int, Errhandler_set, (MPI_Comm comm, MPI_Errhandler errhandler)) \
P(int, Errhandler_get, (MPI_Comm comm, MPI_Errhandler *errhandler)) \
P(int, Status_set_elements, (MPI_Status *status, MPI_Datatype datatype, int count)) \
P(int, Status_set_elements_x, (MPI_Status *status, MPI_Datatype datatype, MPI_Count count)) \
P(int, Status_set_cancelled, (MPI_Status *status, int flag)) \
P(MPI_Fint, Comm_c2f, (MPI_Comm comm)) \
P(MPI_Comm, Comm_f2c, (MPI_Fint comm)) \
P(MPI_Fint, Type_c2f, (MPI_Datatype datatype)) \
P(MPI_Datatype, Type_f2c, (MPI_Fint datatype)) \
P(MPI_Fint, Group_c2f, (MPI_Group group)) \
P(MPI_Group, Group_f2c, (MPI_Fint group)) \
P(MPI_Fint, Request_c2f, (MPI_Request request)) \
P(MPI_Request, Request_f2c, (MPI_Fint request)) \
P(MPI_Fint, Op_c2f, (MPI_Op op)) \
P(MPI_Op, Op_f2c, (MPI_Fint op)) \
P(MPI_Fint, Info_c2f, (MPI_Info info)) \
P(MPI_Info, Info_f2c, (MPI_Fint info)) \
P(MPI_Fint, Errhandler_c2f, (MPI_Errhandler errhandler)) \
P(MPI_Errhandler, Errhandler_f2c, (MPI_Fint errhandler)) \
P(MPI_Fint, Message_c2f, (MPI_Message message)) \
P(MPI_Message, Message_f2c, (MPI_Fint message)) \
P(MPI_Fint, Session_c2f, (MPI_Session session)) \
P(MPI_Session, Session_f2c, (MPI_Fint session)) \
P(int, Status_c2f, (const MPI_Status *c_status, MPI_Fint *f_status)) \
P(int, Status_f2c, (const MPI_Fint *f_status, MPI_Status *c_status)) \
P(int, Info_create, (MPI_Info *info)) \
P(int, Info_create_env, (int argc, char *argv[], MPI_Info *info)) \
P(int, Info_set, (MPI_Info info, const char *key, const char *value)) \
P(int, Info_get, (MPI_Info info, const char *key, int valuelen, char *value, int *flag)) \
P(int, Info_get_valuelen, (MPI_Info info, const char *key, int *valuelen, int *flag)) \
P(int, Info_get_string, (MPI_Info info, const char *key, int *buflen, char *value, int *flag)) \
P(int, Info_delete, (MPI_Info info, const char *key)) \
P(int, Info_dup, (MPI_Info info, MPI_Info *newinfo)) \
P(int, Info_free, (MPI_Info *info)) \
P(int, Info_get_nkeys, (MPI_Info info, int *nkeys)) \
P(int, Info_get_nthkey, (MPI_Info info, int n, char *key)) \
P(int, Session_init, (MPI_Info info, MPI_Errhandler errhandler, MPI_Session *session)) \
P(int, Session_finalize, (MPI_Session *session)) \
P(int, Session_get_info, (MPI_Session session, MPI_Info *info_used)) \
P(int, Session_get_num_psets, (MPI_Session session, MPI_Info info, int *npset_names)) \
P(int, Session_get_nth_pset, (MPI_Session session, MPI_Info info, int n, int *pset_len, char *pset_name)) \
P(int, Session_get_pset_info, (MPI_Session session, const char *pset_name, MPI_Info *info)) \
P(int, Group_from_session_pset, (MPI_Session session, const char *pset_name, MPI_Group *newgroup)) \
P(int, Comm_create_from_group, (MPI_Group group, const char *stringtag, MPI_Info info, MPI_Errhandler errhandler, MPI_Comm *newcomm)) \
P(int, Session_create_errhandler, (MPI_Session_errhandler_function *session_errhandler_fn, MPI_Errhandler *errhandler)) \
P(int, Session_set_errhandler, (MPI_Session session, MPI_Errhandler errhandler)) \
P(int, Session_get_errhandler, (MPI_Session session, MPI_Errhandler *errhandler)) \
P(int, Session_call_errhandler, (MPI_Session session, int errorcode)) \
P(int, Win_create, (void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, MPI_Win *win)) \
P(int, Win_allocate, (MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr, MPI_Win *win)) \
P(int, Win_allocate_shared, (MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr, MPI_Win *win)) \
P(int, Win_shared_query, (MPI_Win win, int rank, MPI_Aint *size, int *disp_unit, void *baseptr)) \
P(int, Win_create_dynamic, (MPI_Info info, MPI_Comm comm, MPI_Win *win)) \
P(int, Win_attach, (MPI_Win win, void *base, MPI_Aint size)) \
P(int, Win_detach, (MPI_Win win, const void *base)) \
P(int, Win_free, (MPI_Win *win)) \
P(int, Win_get_group, (MPI_Win win, MPI_Group *group)) \
P(int, Win_set_info, (MPI_Win win, MPI_Info info)) \
P(int, Win_get_info, (MPI_Win win, MPI_Info *info_used)) \
P(int, Win_set_name, (MPI_Win win, const char *win_name)) \
P(int, Win_get_name, (MPI_Win win, char *win_name, int *resultlen)) \
P(int, Win_create_keyval, (MPI_Win_copy_attr_function *win_copy_attr_fn, MPI_Win_delete_attr_function *win_delete_attr_fn, int *win_keyval, void *extra_state)) \
P(int, Win_free_keyval, (int *win_keyval)) \
P(int, Win_set_attr, (MPI_Win win, int win_keyval, void *attribute_val)) \
P(int, Win_get_attr, (MPI_Win win, int win_keyval, void *attribute_val, int *flag)) \
P(int, Win_delete_attr, (MPI_Win win, int win_keyval)) \
P(int, Win_create_errhandler, (MPI_Win_errhandler_function *win_errhandler_fn, MPI_Errhandler *errhandler)) \
P(int, Win_set_errhandler, (MPI_Win win, MPI_Errhandler errhandler)) \
P(int, Win_get_errhandler, (MPI_Win win, MPI_Errhandler *errhandler)) \
P(int, Win_call_errhandler, (MPI_Win win, int errorcode)) \
P(MPI_Fint, Win_c2f, (MPI_Win win)) \
P(MPI_Win, Win_f2c, (MPI_Fint win)) \
P(int, File_open, (MPI_Comm comm, const char *filename, int amode, MPI_Info info, MPI_File *fh)) \
P(int, File_close, (MPI_File *fh)) \
P(int, File_delete, (const char *filename, MPI_Info info)) \
P(int, File_set_size, (MPI_File fh, MPI_Offset size)) \
P(int, File_preallocate, (MPI_File fh, MPI_Offset size)) \
P(int, File_get_size, (MPI_File fh, MPI_Offset *size)) \
P(int, File_get_group, (MPI_File fh, MPI_Group *group)) \
P(int, File_get_amode, (MPI_File fh, int *amode)) \
P(int, File_set_info, (MPI_File fh, MPI_Info info)) \
P(int, File_get_info, (MPI_File fh, MPI_Info *info_used)) \
P(int, File_set_view, (MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype, const char *datarep, MPI_Info info)) \
P(int, File_get_view, (MPI_File fh, MPI_Offset *disp, MPI_Datatype *etype, MPI_Datatype *filetype, char *datarep)) \
P(int, File_read_at, (MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_read_at_all, (MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_write_at, (MPI_File fh, MPI_Offset offset, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_write_at_all, (MPI_File fh, MPI_Offset offset, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_iread_at, (MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_iwrite_at, (MPI_File fh, MPI_Offset offset, const void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_iread_at_all, (MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_iwrite_at_all, (MPI_File fh, MPI_Offset offset, const void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_read, (MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_read_all, (MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_write, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_write_all, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_iread, (MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_iwrite, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_iread_all, (MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_iwrite_all, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_seek, (MPI_File fh, MPI_Offset offset, int whence)) \
P(int, File_get_position, (MPI_File fh, MPI_Offset *offset)) \
P(int, File_get_byte_offset, (MPI_File fh, MPI_Offset offset, MPI_Offset *disp)) \
P(int, File_read_shared, (MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_write_shared, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_iread_shared, (MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_iwrite_shared, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype, MPI_Request *request)) \
P(int, File_read_ordered, (MPI_File fh, void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_write_ordered, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype, MPI_Status *status)) \
P(int, File_seek_shared, (MPI_File fh, MPI_Offset offset, int whence)) \
P(int, File_get_position_shared, (MPI_File fh, MPI_Offset *offset)) \
P(int, File_read_at_all_begin, (MPI_File fh, MPI_Offset offset, void *buf, int count, MPI_Datatype datatype)) \
P(int, File_read_at_all_end, (MPI_File fh, void *buf, MPI_Status *status)) \
P(int, File_write_at_all_begin, (MPI_File fh, MPI_Offset offset, const void *buf, int count, MPI_Datatype datatype)) \
P(int, File_write_at_all_end, (MPI_File fh, const void *buf, MPI_Status *status)) \
P(int, File_read_all_begin, (MPI_File fh, void *buf, int count, MPI_Datatype datatype)) \
P(int, File_read_all_end, (MPI_File fh, void *buf, MPI_Status *status)) \
P(int, File_write_all_begin, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype)) \
P(int, File_write_all_end, (MPI_File fh, const void *buf, MPI_Status *status)) \
P(int, File_read_ordered_begin, (MPI_File fh, void *buf, int count, MPI_Datatype datatype)) \
P(int, File_read_ordered_end, (MPI_File fh, void *buf, MPI_Status *status)) \
P(int, File_write_ordered_begin, (MPI_File fh, const void *buf, int count, MPI_Datatype datatype)) \
P(int, File_write_ordered_end, (MPI_File fh, const void *buf, MPI_Status *status)) \
P(int, File_get_type_extent, (MPI_File fh, MPI_Datatype datatype, MPI_Aint *extent)) \
P(int, Register_datarep, (const char *datarep, MPI_Datarep_conversion_function *read_conversion_fn, MPI_Datarep_conversion_function *write_conversion_fn, MPI_Datarep_extent_function *dtype_file_extent_fn, void *extra_state)) \
P(int, File_set_atomicity, (MPI_File fh, int flag)) \
P(int, File_get_atomicity, (MPI_File fh, int *flag)) \
P(int, File_sync, (MPI_File fh)) \
P(int, File_create_errhandler, (MPI_File_errhandler_function *file_errhandler_fn, MPI_Errhandler *errhandler)) \
P(int, File_set_errhandler, (MPI_File file, MPI_Errhandler errhandler)) \
P(int, File_get_errhandler, (MPI_File file, MPI_Errhandler *errhandler)) \
P(int, File_call_errhandler, (MPI_File fh, int errorcode)) \
P(MPI_Fint, File_c2f, (MPI_File file)) \
P(MPI_File, File_f2c, (MPI_Fint file)) \
P(int, Put, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win)) \
P(int, Get, (void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win)) \
P(int, Accumulate, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win)) \
P(int, Get_accumulate, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, void *result_addr, int result_count, MPI_Datatype result_datatype, int target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win)) \
P(int, Fetch_and_op, (const void *origin_addr, void *result_addr, MPI_Datatype datatype, int target_rank, MPI_Aint target_disp, MPI_Op op, MPI_Win win)) \
P(int, Compare_and_swap, (const void *origin_addr, const void *compare_addr, void *result_addr, MPI_Datatype datatype, int target_rank, MPI_Aint target_disp, MPI_Win win)) \
P(int, Rput, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request)) \
P(int, Rget, (void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Win win, MPI_Request *request)) \
P(int, Raccumulate, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, int target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win, MPI_Request *request)) \
P(int, Rget_accumulate, (const void *origin_addr, int origin_count, MPI_Datatype origin_datatype, void *result_addr, int result_count, MPI_Datatype result_datatype, int target_rank, MPI_Aint target_disp, int target_count, MPI_Datatype target_datatype, MPI_Op op, MPI_Win win, MPI_Request *request)) \
P(int, Win_fence, (int assert, MPI_Win win)) \
P(int, Win_post, (MPI_Group group, int assert, MPI_Win win)) \
P(int, Win_start, (MPI_Group group, int assert, MPI_Win win)) \
P(int, Win_complete, (MPI_Win win)) \
P(int, Win_wait, (MPI_Win win)) \
P(int, Win_test, (MPI_Win win, int *flag)) \
P(int, Win_lock, (int lock_type, int rank, int assert, MPI_Win win)) \
P(int, Win_unlock, (int rank, MPI_Win win)) \
P(int, Win_lock_all, (int assert, MPI_Win win)) \
P(int, Win_unlock_all, (MPI_Win win)) \
P(int, Win_flush, (int rank, MPI_Win win)) \
P(int, Win_flush_all, (MPI_Win win)) \
P(int, Win_flush_local, (int rank, MPI_Win win)) \
P(int, Win_flush_local_all, (MPI_Win win)) \
P(int, Win_sync, (MPI_Win win)) \
P(int, T_init_thread, (int required, int *provided)) \
P(int, T_finalize, (void)) \
P(int, T_enum_get_info, (MPI_T_enum enumtype, int *num, char *name, int *name_len)) \
P(int, T_enum_get_item, (MPI_T_enum enumtype, int index, int *value, char *name, int *name_len)) \
P(int, T_cvar_get_num, (int *num_cvar)) \
P(int, T_cvar_get_info, (int cvar_index, char *name, int *name_len, int *verbosity, MPI_Datatype *datatype, MPI_T_enum *enumtype, char *desc, int *desc_len, int *binding, int *scope)) \
P(int, T_cvar_get_index, (const char *name, int *cvar_index)) \
P(int, T_cvar_handle_alloc, (int cvar_index, void *obj_handle, MPI_T_cvar_handle *handle, int *count)) \
P(int, T_cvar_handle_free, (MPI_T_cvar_handle *handle)) \
P(int, T_cvar_read, (MPI_T_cvar_handle handle, void *buf)) \
P(int, T_cvar_write, (MPI_T_cvar_handle handle, const void *buf)) \
P(int, T_pvar_get_num, (int *num_pvar)) \
P(int, T_pvar_get_info, (int pvar_index, char *name, int *name_len, int *verbosity, int *var_class, MPI_Datatype *datatype, MPI_T_enum *enumtype, char *desc, int *desc_len, int *binding, int *readonly, int *continuous, int *atomic)) \
P(int, T_pvar_get_index, (const char *name, int var_class, int *pvar_index)) \
P(int, T_pvar_session_create, (MPI_T_pvar_session *session)) \
P(int, T_pvar_session_free, (MPI_T_pvar_session *session)) \
P(int, T_pvar_handle_alloc, (MPI_T_pvar_session session, int pvar_index, void *obj_handle, MPI_T_pvar_handle *handle, int *count)) \
P(int, T_pvar_handle_free, (MPI_T_pvar_session session, MPI_T_pvar_handle *handle)) \
P(int, T_pvar_start, (MPI_T_pvar_session session, MPI_T_pvar_handle handle)) \
P(int, T_pvar_stop, (MPI_T_pvar_session session, MPI_T_pvar_handle handle)) \
P(int, T_pvar_read, (MPI_T_pvar_session session, MPI_T_pvar_handle handle, void *buf)) \
P(int, T_pvar_write, (MPI_T_pvar_session session, MPI_T_pvar_handle handle, const void *buf)) \
P(int, T_pvar_reset, (MPI_T_pvar_session session, MPI_T_pvar_handle handle)) \
P(int, T_pvar_readreset, (MPI_T_pvar_session session, MPI_T_pvar_handle handle, void *buf)) \
P(int, T_category_get_num, (int *num_cat)) \
P(int, T_category_get_info, (int cat_index, char *name, int *name_len, char *desc, int *desc_len, int *num_cvars, int *num_pvars, int *num_categories)) \
P(int, T_category_get_index, (const char *name, int *cat_index)) \
P(int, T_category_get_cvars, (int cat_index, int len, int indices[])) \
P(int, T_category_get_pvars, (int cat_index, int len, int indices[])) \
P(int, T_category_get_categories, (int cat_index, int len, int indices[])) \
P(int, T_category_changed, (int *stamp))

#define VOLLEY_DECLARE_MPI(ret, name, args) ret MPI_##name args; ret PMPI_##name args;
VOLLEY_MPI_FUNCTIONS(VOLLEY_DECLARE_MPI)
#undef VOLLEY_DECLARE_MPI

#if defined(__cplusplus)
}
#endif

#endif /* VOLLEY_MPI_H */
