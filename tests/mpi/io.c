/* MPI-IO (MPI-3.1 chapter 13): opening and closing, views, and every way to read and write: explicit
 * offsets, individual and shared file pointers, ordered, non-blocking and split collective
 * accesses; file size, atomicity, seeks and byte offsets; errors of files (MPI_ERRORS_RETURN by
 * default, classes of the standard's table 13.3) and their handlers. Files go to $TMPDIR (or
 * /tmp) and are deleted by the test. */
#include "check.h"
#include <string.h>
#include <unistd.h>

static int me, np;
static char dir[512];

static int eclass(int rc) {
    int c;
    MPI_Error_class(rc, &c);
    return c;
}

/* A file name every rank agrees on (rank 0 chooses it). */
static void name_of(char *out, const char *what) {
    char name[1024];
    if (me == 0)
        snprintf(name, sizeof name, "%s/volley-io-%ld-%s", dir, (long)getpid(), what);
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
    strcpy(out, name);
}

static int handler_calls;
static int handler_code;
static void on_error(MPI_File *f, int *code, ...) {
    (void)f;
    handler_calls++;
    handler_code = *code;
}

/* Explicit offsets, each rank its own block, read back by the next rank. */
static void explicit_offsets(void) {
    char name[1024];
    name_of(name, "explicit");
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                     MPI_INFO_NULL, &fh));
    int amode;
    OK(MPI_File_get_amode(fh, &amode));
    CHECK(amode == (MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE));
    MPI_Group g, wg;
    int cmp;
    OK(MPI_File_get_group(fh, &g));
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_compare(g, wg, &cmp);
    CHECK(cmp == MPI_IDENT);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    OK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    enum { N = 1000 };
    static int out[N], in[N];
    for (int i = 0; i < N; i++)
        out[i] = (int)h4(1, i, me, 0);
    MPI_Status st;
    OK(MPI_File_write_at(fh, (MPI_Offset)me * N, out, N, MPI_INT, &st));
    int count;
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == N);
    OK(MPI_File_sync(fh));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_sync(fh));
    MPI_Offset size;
    OK(MPI_File_get_size(fh, &size));
    CHECK(size == (MPI_Offset)np * N * sizeof(int));
    int next = (me + 1) % np;
    OK(MPI_File_read_at(fh, (MPI_Offset)next * N, in, N, MPI_INT, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == N);
    for (int i = 0; i < N; i++)
        CHECK(in[i] == (int)h4(1, i, next, 0));
    /* (Every rank has seen the size before the file grows.) */
    MPI_Barrier(MPI_COMM_WORLD);
    /* Collective forms, at other offsets. */
    OK(MPI_File_write_at_all(fh, (MPI_Offset)(np + me) * N, out, N, MPI_INT, MPI_STATUS_IGNORE));
    MPI_Barrier(MPI_COMM_WORLD);
    memset(in, 0, sizeof in);
    OK(MPI_File_read_at_all(fh, (MPI_Offset)(np + next) * N, in, N, MPI_INT, &st));
    for (int i = 0; i < N; i++)
        CHECK(in[i] == (int)h4(1, i, next, 0));
    /* Reading past the end returns what is there: the count says how much. */
    memset(in, 0, sizeof in);
    OK(MPI_File_read_at(fh, (MPI_Offset)2 * np * N - 10, in, N, MPI_INT, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 10);
    CHECK(in[9] == (int)h4(1, N - 1, np - 1, 0));
    CHECK(in[10] == 0);
    OK(MPI_File_read_at(fh, (MPI_Offset)5 * np * N, in, N, MPI_INT, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == 0);
    MPI_Barrier(MPI_COMM_WORLD);
    /* Non-blocking. */
    MPI_Request rq[2];
    OK(MPI_File_iwrite_at(fh, (MPI_Offset)(2 * np + me) * N, out, N, MPI_INT, &rq[0]));
    OK(MPI_Wait(&rq[0], &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == N);
    MPI_Barrier(MPI_COMM_WORLD);
    memset(in, 0, sizeof in);
    OK(MPI_File_iread_at(fh, (MPI_Offset)(2 * np + next) * N, in, N / 2, MPI_INT, &rq[0]));
    OK(MPI_File_iread_at(fh, (MPI_Offset)(2 * np + next) * N + N / 2, in + N / 2, N / 2, MPI_INT, &rq[1]));
    MPI_Status sts[2];
    OK(MPI_Waitall(2, rq, sts));
    MPI_Get_count(&sts[1], MPI_INT, &count);
    CHECK(count == N / 2);
    for (int i = 0; i < N; i++)
        CHECK(in[i] == (int)h4(1, i, next, 0));
    /* Split collectives. */
    OK(MPI_File_write_at_all_begin(fh, (MPI_Offset)(3 * np + me) * N, out, N, MPI_INT));
    OK(MPI_File_write_at_all_end(fh, out, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == N);
    MPI_Barrier(MPI_COMM_WORLD);
    memset(in, 0, sizeof in);
    OK(MPI_File_read_at_all_begin(fh, (MPI_Offset)(3 * np + next) * N, in, N, MPI_INT));
    OK(MPI_File_read_at_all_end(fh, in, &st));
    for (int i = 0; i < N; i++)
        CHECK(in[i] == (int)h4(1, i, next, 0));
    OK(MPI_File_close(&fh));
    CHECK(fh == MPI_FILE_NULL);
    /* MPI_MODE_DELETE_ON_CLOSE deleted it. */
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(access(name, F_OK) != 0);
}

/* A strided view: rank r sees blocks of B ints at r*B, r*B + np*B, ...; memory strided too. */
static void strided_views(void) {
    char name[1024];
    name_of(name, "strided");
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    enum { B = 3, K = 7 }; /* K blocks of B ints per rank */
    MPI_Datatype block, ftype;
    MPI_Type_contiguous(B, MPI_INT, &block);
    MPI_Type_create_resized(block, 0, (MPI_Aint)np * B * sizeof(int), &ftype);
    MPI_Type_commit(&ftype);
    OK(MPI_File_set_view(fh, (MPI_Offset)me * B * sizeof(int), MPI_INT, ftype, "native", MPI_INFO_NULL));
    /* The program's data: every other int of a 2*B*K array. */
    static int mem[2 * B * K];
    for (int i = 0; i < B * K; i++) {
        mem[2 * i] = (int)h4(2, i, me, 0);
        mem[2 * i + 1] = -1;
    }
    MPI_Datatype every_other;
    MPI_Type_vector(B * K, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    MPI_Status st;
    OK(MPI_File_write_all(fh, mem, 1, every_other, &st));
    int count;
    MPI_Get_count(&st, every_other, &count);
    CHECK(count == 1);
    MPI_Offset pos, byte;
    OK(MPI_File_get_position(fh, &pos));
    CHECK(pos == B * K);
    /* Etype offset B+1 of this view is the second int of its second block. */
    OK(MPI_File_get_byte_offset(fh, B + 1, &byte));
    CHECK(byte == (MPI_Offset)(me * B + np * B + 1) * sizeof(int));
    MPI_Barrier(MPI_COMM_WORLD);
    /* Rank 0 reads the whole file through a byte view: the blocks interleave by rank. */
    if (me == 0) {
        MPI_File f0;
        OK(MPI_File_open(MPI_COMM_SELF, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &f0));
        int total = np * B * K;
        int *all = malloc(total * sizeof(int));
        OK(MPI_File_read(f0, all, total, MPI_INT, &st));
        MPI_Get_count(&st, MPI_INT, &count);
        CHECK(count == total);
        for (int k = 0; k < K; k++)
            for (int r = 0; r < np; r++)
                for (int b = 0; b < B; b++)
                    CHECK(all[(k * np + r) * B + b] == (int)h4(2, k * B + b, r, 0));
        free(all);
        /* Writes on a read-only file fail with MPI_ERR_READ_ONLY (files return errors). */
        int rc = MPI_File_write_at(f0, 0, mem, 1, MPI_INT, MPI_STATUS_IGNORE);
        CHECK(eclass(rc) == MPI_ERR_READ_ONLY);
        OK(MPI_File_close(&f0));
    }
    /* Read back through the view with the individual pointer: seek, then the rest. */
    OK(MPI_File_seek(fh, 2, MPI_SEEK_SET));
    int back[B * K];
    memset(back, 0, sizeof back);
    OK(MPI_File_read(fh, back, B * K - 2, MPI_INT, &st));
    MPI_Get_count(&st, MPI_INT, &count);
    CHECK(count == B * K - 2);
    for (int i = 0; i < B * K - 2; i++)
        CHECK(back[i] == (int)h4(2, i + 2, me, 0));
    OK(MPI_File_get_position(fh, &pos));
    CHECK(pos == B * K);
    /* The end of the file, in this view: every rank's data ends there. */
    OK(MPI_File_seek(fh, -1, MPI_SEEK_END));
    OK(MPI_File_get_position(fh, &pos));
    CHECK(pos == B * K - 1);
    OK(MPI_File_seek(fh, -2, MPI_SEEK_CUR));
    OK(MPI_File_get_position(fh, &pos));
    CHECK(pos == B * K - 3);
    /* Split collective through the individual pointer. */
    memset(back, 0, sizeof back);
    OK(MPI_File_read_all_begin(fh, back, 3, MPI_INT));
    OK(MPI_File_read_all_end(fh, back, &st));
    for (int i = 0; i < 3; i++)
        CHECK(back[i] == (int)h4(2, B * K - 3 + i, me, 0));
    /* The view comes back as set; a derived filetype as a new handle. */
    MPI_Offset disp;
    MPI_Datatype et, ft;
    char rep[MPI_MAX_DATAREP_STRING];
    OK(MPI_File_get_view(fh, &disp, &et, &ft, rep));
    CHECK(disp == (MPI_Offset)me * B * sizeof(int));
    CHECK(et == MPI_INT);
    CHECK(strcmp(rep, "native") == 0);
    MPI_Aint lb, ext;
    int fsize;
    MPI_Type_get_extent(ft, &lb, &ext);
    MPI_Type_size(ft, &fsize);
    CHECK(lb == 0 && ext == (MPI_Aint)np * B * sizeof(int) && fsize == B * (int)sizeof(int));
    MPI_Type_free(&ft);
    OK(MPI_File_get_type_extent(fh, MPI_DOUBLE, &ext));
    CHECK(ext == sizeof(double));
    MPI_Type_free(&every_other);
    MPI_Type_free(&ftype);
    MPI_Type_free(&block);
    OK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0)
        OK(MPI_File_delete(name, MPI_INFO_NULL));
}

/* A collective write where some ranks have nothing to write (PnetCDF fills a variable so): each
 * rank's share of a short array is an hindexed filetype of one block, of no bytes where the
 * array has no element left for the rank; the filetype is freed at once (the view keeps it).
 * Every view is taken, and the file holds exactly the array. */
static void shares_of_nothing(void) {
    char name[1024];
    name_of(name, "shares");
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    enum { LEN = 2, AT = 64 }; /* LEN ints from byte AT */
    int count = LEN / np + (me < LEN % np), start = LEN / np * me + (me < LEN % np ? me : LEN % np);
    int bytes = count * (int)sizeof(int);
    MPI_Aint off = AT + (MPI_Aint)start * sizeof(int);
    MPI_Datatype ftype;
    OK(MPI_Type_create_hindexed(1, &bytes, &off, MPI_BYTE, &ftype));
    OK(MPI_Type_commit(&ftype));
    OK(MPI_File_set_view(fh, 0, MPI_BYTE, ftype, "native", MPI_INFO_NULL));
    OK(MPI_Type_free(&ftype));
    int mine[LEN];
    for (int i = 0; i < count; i++)
        mine[i] = 1000 + start + i;
    MPI_Status st;
    OK(MPI_File_write_at_all(fh, 0, mine, bytes, MPI_BYTE, &st));
    int got = -1;
    MPI_Get_count(&st, MPI_BYTE, &got);
    CHECK(got == bytes);
    OK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    MPI_Offset size;
    OK(MPI_File_get_size(fh, &size));
    CHECK(size == AT + LEN * (MPI_Offset)sizeof(int));
    unsigned char all[AT + LEN * sizeof(int)];
    OK(MPI_File_read_at_all(fh, 0, all, (int)sizeof all, MPI_BYTE, &st));
    for (int i = 0; i < AT; i++)
        CHECK(all[i] == 0);
    for (int i = 0; i < LEN; i++) {
        int v;
        memcpy(&v, all + AT + i * sizeof(int), sizeof v);
        CHECK(v == 1000 + i);
    }
    OK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0)
        OK(MPI_File_delete(name, MPI_INFO_NULL));
}

/* The shared file pointer: records from every rank, each exactly once; ordered accesses. */
static void shared_pointer(void) {
    char name[1024];
    name_of(name, "shared");
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                     MPI_INFO_NULL, &fh));
    MPI_Datatype rec;
    MPI_Type_contiguous(2, MPI_INT, &rec);
    MPI_Type_commit(&rec);
    OK(MPI_File_set_view(fh, 0, rec, rec, "native", MPI_INFO_NULL));
    enum { R = 5 };
    for (int s = 0; s < R; s++) {
        int r[2] = {me, s};
        MPI_Status st;
        if (s % 2)
            OK(MPI_File_write_shared(fh, r, 1, rec, &st));
        else {
            MPI_Request q;
            OK(MPI_File_iwrite_shared(fh, r, 1, rec, &q));
            OK(MPI_Wait(&q, &st));
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Offset sp;
    OK(MPI_File_get_position_shared(fh, &sp));
    CHECK(sp == (MPI_Offset)np * R);
    int *all = malloc(2 * np * R * sizeof(int));
    OK(MPI_File_read_at(fh, 0, all, np * R, rec, MPI_STATUS_IGNORE));
    int *seen = calloc(np * R, sizeof(int));
    for (int i = 0; i < np * R; i++) {
        int r = all[2 * i], s = all[2 * i + 1];
        CHECK(r >= 0 && r < np && s >= 0 && s < R);
        seen[r * R + s]++;
    }
    for (int i = 0; i < np * R; i++)
        CHECK(seen[i] == 1);
    free(seen);
    free(all);
    /* Ordered: rank r writes r+1 records after the shared pointer, in rank order. */
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    int mine[2 * 64];
    for (int i = 0; i <= me; i++) {
        mine[2 * i] = me;
        mine[2 * i + 1] = 100 + i;
    }
    MPI_Status st;
    OK(MPI_File_write_ordered(fh, mine, me + 1, rec, &st));
    int count;
    MPI_Get_count(&st, rec, &count);
    CHECK(count == me + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_get_position_shared(fh, &sp));
    /* (Rank 0 only: ranks above it read 0 here under MPICH 4.0.2.) */
    CHECK(me != 0 || sp == (MPI_Offset)np * (np + 1) / 2);
    OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    int back[2 * 64];
    memset(back, -1, sizeof back);
    OK(MPI_File_read_ordered_begin(fh, back, me + 1, rec));
    OK(MPI_File_read_ordered_end(fh, back, &st));
    for (int i = 0; i <= me; i++)
        CHECK(back[2 * i] == me && back[2 * i + 1] == 100 + i);
    /* Every rank read its own part: the part before it holds the lower ranks'. */
    int before = me * (me + 1) / 2;
    if (me > 0) {
        int prev[2];
        OK(MPI_File_read_at(fh, before - 1, prev, 1, rec, MPI_STATUS_IGNORE));
        CHECK(prev[0] == me - 1 && prev[1] == 100 + me - 1);
    }
    /* Shared reads take what the others have not. */
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    int got = 0, one[2];
    for (;;) {
        OK(MPI_File_read_shared(fh, one, 1, rec, &st));
        MPI_Get_count(&st, rec, &count);
        if (count == 0)
            break;
        got++;
    }
    int total;
    MPI_Allreduce(&got, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(total == np * (np + 1) / 2 + (np * R > np * (np + 1) / 2 ? np * R - np * (np + 1) / 2 : 0));
    MPI_Type_free(&rec);
    OK(MPI_File_close(&fh));
}

/* Sizes, atomicity, append mode, info. */
static void file_state(void) {
    char name[1024];
    name_of(name, "state");
    MPI_File fh;
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
    /* Sizes are checked at rank 0: under MPICH 4.0.2 other ranks can read a size from before
     * the last change. */
    OK(MPI_File_set_size(fh, 4096));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Offset size;
    OK(MPI_File_get_size(fh, &size));
    CHECK(me != 0 || size == 4096);
    OK(MPI_File_preallocate(fh, 1000));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_get_size(fh, &size));
    CHECK(me != 0 || size == 4096);
    OK(MPI_File_preallocate(fh, 8192));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_get_size(fh, &size));
    CHECK(me != 0 || size == 8192);
    OK(MPI_File_set_size(fh, 100));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_get_size(fh, &size));
    CHECK(me != 0 || size == 100);
    int flag = -1;
    OK(MPI_File_get_atomicity(fh, &flag));
    CHECK(flag == 0);
    OK(MPI_File_set_atomicity(fh, 1));
    OK(MPI_File_get_atomicity(fh, &flag));
    CHECK(flag == 1);
    /* Atomic mode: every rank writes the same range; the result is one rank's data whole. */
    enum { N = 4096 };
    static int block[N];
    for (int i = 0; i < N; i++)
        block[i] = me;
    OK(MPI_File_write_at(fh, 0, block, N, MPI_INT, MPI_STATUS_IGNORE));
    /* A write-only file cannot be read. */
    int rc = MPI_File_read_at(fh, 0, block, 1, MPI_INT, MPI_STATUS_IGNORE);
    CHECK(eclass(rc) == MPI_ERR_ACCESS);
    OK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    static int in[N];
    OK(MPI_File_read_at(fh, 0, in, N, MPI_INT, MPI_STATUS_IGNORE));
    for (int i = 0; i < N; i++)
        CHECK(in[i] == in[0]);
    CHECK(in[0] >= 0 && in[0] < np);
    OK(MPI_File_close(&fh));
    MPI_Barrier(MPI_COMM_WORLD);
    /* Append mode: the file pointers start at the end. */
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_WRONLY | MPI_MODE_APPEND, MPI_INFO_NULL, &fh));
    MPI_Offset pos;
    OK(MPI_File_get_position(fh, &pos));
    CHECK(pos == (MPI_Offset)N * sizeof(int));
    OK(MPI_File_get_position_shared(fh, &pos));
    CHECK(pos == (MPI_Offset)N * sizeof(int));
    OK(MPI_File_close(&fh));
    /* Info given at the open is kept: hints the program set come back. */
    MPI_Info info, used;
    MPI_Info_create(&info);
    MPI_Info_set(info, "access_style", "read_once");
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY | MPI_MODE_DELETE_ON_CLOSE, info, &fh));
    OK(MPI_File_get_info(fh, &used));
    MPI_Info_free(&used);
    MPI_Info_free(&info);
    OK(MPI_File_close(&fh));
}

/* Errors: MPI_ERRORS_RETURN is a file's default; the classes of table 13.3; handlers. */
static void errors(void) {
    char name[1024], missing[1024];
    name_of(name, "errors");
    name_of(missing, "missing");
    MPI_File fh;
    MPI_Errhandler eh;
    OK(MPI_File_get_errhandler(MPI_FILE_NULL, &eh));
    CHECK(eh == MPI_ERRORS_RETURN);
    int rc = MPI_File_open(MPI_COMM_WORLD, missing, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    CHECK(eclass(rc) == MPI_ERR_NO_SUCH_FILE);
    rc = MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_RDONLY | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    CHECK(eclass(rc) == MPI_ERR_AMODE);
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    OK(MPI_File_close(&fh));
    rc = MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    CHECK(eclass(rc) == MPI_ERR_FILE_EXISTS);
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) {
        OK(MPI_File_delete(name, MPI_INFO_NULL));
        rc = MPI_File_delete(name, MPI_INFO_NULL);
        CHECK(eclass(rc) == MPI_ERR_NO_SUCH_FILE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* A handler set on MPI_FILE_NULL is the one new files get, and opens' own. */
    OK(MPI_File_create_errhandler(on_error, &eh));
    OK(MPI_File_set_errhandler(MPI_FILE_NULL, eh));
    handler_calls = 0;
    rc = MPI_File_open(MPI_COMM_WORLD, missing, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    CHECK(eclass(rc) == MPI_ERR_NO_SUCH_FILE);
    CHECK(handler_calls == 1 && handler_code == rc);
    OK(MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                     MPI_INFO_NULL, &fh));
    MPI_Errhandler got;
    OK(MPI_File_get_errhandler(fh, &got));
    CHECK(got == eh);
    OK(MPI_File_call_errhandler(fh, MPI_ERR_IO));
    CHECK(handler_calls == 2 && handler_code == MPI_ERR_IO);
    OK(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN));
    int x = 0;
    rc = MPI_File_read_at(fh, -1, &x, 1, MPI_INT, MPI_STATUS_IGNORE);
    CHECK(rc != MPI_SUCCESS);
    CHECK(handler_calls == 2);
    OK(MPI_File_close(&fh));
    OK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    MPI_Errhandler_free(&eh);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s", t && *t ? t : "/tmp");
    explicit_offsets();
    strided_views();
    shares_of_nothing();
    shared_pointer();
    file_state();
    errors();
    pass("io");
    return 0;
}
