/* Short Gather, Scatter and Alltoall back to back, as a shared-memory implementation inside one
 * host sees them (MPI-3.1 5.5, 5.6, 5.8; communicators 6.4): consecutive calls reuse whatever
 * buffers the implementation keeps, so every value depends on the step, the sender and the
 * receiver, and a block left over from the step before (or from another root) is a wrong answer.
 * Every receive buffer is compared element by element with a serial computation, including the
 * gaps of a strided datatype and a guard after the last block, which must stay untouched; send
 * buffers must come back unchanged.
 *  1. Gather and Scatter in a tight loop, the root changing at every call (racing roots), the
 *     block size changing at every call: 0, 1 and 3 elements, half of 4096/size bytes, 4096/size
 *     bytes, a little above that, 1000 ints, a random size up to 4096/size; of MPI_INT,
 *     MPI_DOUBLE, MPI_CHAR, and MPI_Type_vector(3, 2, 5, MPI_INT) on one side with 6 MPI_INT a
 *     vector on the other (the same type signature, another layout: 5.5). MPI_IN_PLACE at the
 *     root of Gather (its block already in place) and of Scatter (its block not moved); now and
 *     then the arguments significant only at the root (5.5, 5.6) are NULL and 0 elsewhere.
 *  2. Alltoall in a tight loop: 0, 1 and 3 elements, up to 4096/size^2 bytes, a little above,
 *     4096/size bytes a pair; MPI_INT, MPI_DOUBLE, MPI_CHAR and the vector on one side;
 *     MPI_IN_PLACE (5.8: the data is taken from the receive buffer and replaced there).
 *  3. Parts 1 and 2 on a duplicate of the world, on a split whose keys reverse the ranks, and on
 *     an uneven split (colour rank % 3, keys with ties).
 *  4. Gatherv, Scatterv and Alltoallv with small counts that differ by sender and receiver (all
 *     zero now and then), blocks placed in another order than the ranks with gaps between them;
 *     MPI_IN_PLACE at the root and for Alltoallv.
 *  5. Gather, Scatter, Alltoall, Bcast, Allreduce and Barrier interleaved on one communicator so
 *     that each kind follows each other kind (the world, and a duplicate of it).
 *  6. The same interleaving on a split communicator that is freed and made again, with other
 *     members and another order (some ranks left out), every 50 steps.
 *  7. Every kind with count 0: it completes, and no receive buffer changes.
 * In every loop one rank (another each time, the root too) now and then sleeps 1 ms before a call,
 * so that the others wait for it. Parts 1 and 2 on the world run at least 200 steps; every loop
 * stops early (after its minimum) once past its share of a few seconds: MPICH busy-polls, and with
 * more ranks than cores each of its collectives costs milliseconds. `coll_shm_blocks full` runs
 * every loop to its full count. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* Where we are, for the message when a check fails. */
static char part[128] = "start";
static long at_step = -1;

#define EXPECT(cond, ...)                                                                   \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "coll_shm_blocks: rank %d, %s, step %ld: ", world_rank(), part, \
                    at_step);                                                               \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fputc('\n', stderr);                                                            \
            CHECK(cond);                                                                    \
        }                                                                                   \
    } while (0)

static int rank, size;

/* ---- values (fmix and h4 are in check.h) ------------------------------------------------------ */

/* Element k of the block that world rank src sends to world rank dst at step i. */
static uint64_t bh(uint64_t what, long i, int src, int dst, long k) {
    return h4(what, (uint64_t)i, ((uint64_t)(unsigned)src << 32) | (unsigned)dst, (uint64_t)k);
}

/* What a value is for (the first argument of h4). */
enum { T_GATHER = 10, T_SCATTER = 20, T_A2A = 30, T_SIZE = 40, T_GV = 50, T_SV = 60, T_AV = 70,
       T_BC = 80, T_AR = 90, T_MIX = 100, T_ZERO = 110 };

/* Element types: the value of a hash as each, as a double (exact for all three). Ints in
 * [0, 2^30), doubles multiples of 1/8 in [0, 2^21), chars '!' to 'z': none of them equals FILL
 * (what a receive buffer holds before the call) or GAP (the gaps of the vector). */
enum { TI, TD, TC };
static const double FILL[] = {-1, -1e300, 1};
#define GAP (-77777)

static double as_val(int t, uint64_t h) {
    switch (t) {
    case TI: return (double)(int)(h & 0x3fffffff);
    case TD: return (double)(h & 0xffffff) * 0.125;
    default: return (double)('!' + (int)(h % 90));
    }
}

static void put(int t, void *b, size_t at, double v) {
    switch (t) {
    case TI: ((int *)b)[at] = (int)v; break;
    case TD: ((double *)b)[at] = v; break;
    default: ((char *)b)[at] = (char)v; break;
    }
}

static double get(int t, const void *b, size_t at) {
    switch (t) {
    case TI: return ((const int *)b)[at];
    case TD: return ((const double *)b)[at];
    default: return ((const char *)b)[at];
    }
}

static MPI_Datatype base_type(int t) {
    return t == TI ? MPI_INT : t == TD ? MPI_DOUBLE : MPI_CHAR;
}

static void sleep_ms(double ms) {
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)((ms - 1000.0 * (double)ts.tv_sec) * 1e6);
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* Set by `coll_shm_blocks full`: every loop runs to its full count, however long that takes. */
static int full;

/* Whether step i of a loop started at `start` goes on: collective over c (every rank of c calls it
 * at every step, and all get the same answer: every few steps they agree by an Allreduce). */
static int keep_going(MPI_Comm c, long i, long min, long max, double start, double seconds) {
    long every = max / 16 < 1 ? 1 : max / 16 > 8 ? 8 : max / 16;
    if (i >= max)
        return 0;
    if (full || i < min || i % every != 0)
        return 1;
    int late = MPI_Wtime() - start > seconds;
    OK(MPI_Allreduce(MPI_IN_PLACE, &late, 1, MPI_INT, MPI_LOR, c));
    return !late;
}

/* ---- communicators and their ranks, computed serially ---------------------------------------- */

struct comm {
    MPI_Comm c;
    int n, cr;        /* size, and this rank's rank in it (n is 0 where this rank is no member) */
    int *members;     /* world ranks in rank order */
    const char *name;
};

/* The members (world ranks, in rank order) of the calling rank's part of
 * MPI_Comm_split(world, colour[w], key[w]): by key, ties by the rank in the world (MPI-3.1
 * 6.4.2). Returns the number of members, 0 if this rank's colour is MPI_UNDEFINED. */
static int split_members(const int *colour, const int *key, int *members) {
    if (colour[rank] == MPI_UNDEFINED)
        return 0;
    int n = 0;
    for (int w = 0; w < size; w++)
        if (colour[w] == colour[rank]) {
            int j = n++;
            while (j > 0 && (key[members[j - 1]] > key[w] ||
                             (key[members[j - 1]] == key[w] && members[j - 1] > w))) {
                members[j] = members[j - 1];
                j--;
            }
            members[j] = w;
        }
    return n;
}

/* Checks c's size and this rank's place in it against the members computed serially. */
static void comm_checked(struct comm *e) {
    e->cr = -1;
    if (e->n == 0) {
        EXPECT(e->c == MPI_COMM_NULL, "%s: MPI_UNDEFINED colour gave a communicator", e->name);
        return;
    }
    EXPECT(e->c != MPI_COMM_NULL, "%s: no communicator", e->name);
    int cs;
    OK(MPI_Comm_size(e->c, &cs));
    OK(MPI_Comm_rank(e->c, &e->cr));
    EXPECT(cs == e->n, "%s: size %d, want %d", e->name, cs, e->n);
    EXPECT(e->members[e->cr] == rank, "%s: rank %d is world rank %d, not %d", e->name, e->cr,
           e->members[e->cr], rank);
}

static struct comm world_comm(int dup, const char *name) {
    struct comm e;
    e.name = name;
    e.members = malloc(sizeof(int) * size);
    CHECK(e.members);
    if (dup)
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &e.c));
    else
        e.c = MPI_COMM_WORLD;
    e.n = size;
    for (int w = 0; w < size; w++)
        e.members[w] = w;
    comm_checked(&e);
    return e;
}

static struct comm split_comm(const int *colour, const int *key, const char *name) {
    struct comm e;
    e.name = name;
    e.members = malloc(sizeof(int) * size);
    CHECK(e.members);
    OK(MPI_Comm_split(MPI_COMM_WORLD, colour[rank], key[rank], &e.c));
    e.n = split_members(colour, key, e.members);
    comm_checked(&e);
    return e;
}

static void comm_free(struct comm *e) {
    if (e->c != MPI_COMM_NULL && e->c != MPI_COMM_WORLD) {
        OK(MPI_Comm_free(&e->c));
        CHECK(e->c == MPI_COMM_NULL);
    }
    free(e->members);
    e->members = NULL;
}

/* ---- blocks: one side of a call, its layout, filling and checking ---------------------------- */

/* MPI_Type_vector(3, 2, 5, MPI_INT): ints 0, 1, 5, 6, 10 and 11 of every 12 (its extent). */
#define VEXT 12
static MPI_Datatype vec;

/* One side (send or receive) of a block: cnt of element type t, contiguous, or when vecl (ints
 * only) cnt vectors, each 6 ints of data over an extent of 12. */
struct side {
    int t, vecl, cnt;
};

static MPI_Datatype side_type(struct side s) { return s.vecl ? vec : base_type(s.t); }

/* Elements of the buffer that a block spans: the count times the extent. */
static size_t side_stride(struct side s) { return (size_t)s.cnt * (s.vecl ? VEXT : 1); }

static const char *side_name(struct side s) {
    return s.vecl ? "vector" : s.t == TI ? "MPI_INT" : s.t == TD ? "MPI_DOUBLE" : "MPI_CHAR";
}

/* The data element (in the order of the type signature) at position p of a block, -1 at a gap. */
static long data_at(struct side s, size_t p) {
    static const int IDX[VEXT] = {0, 1, -1, -1, -1, 2, 3, -1, -1, -1, 4, 5};
    if (!s.vecl)
        return (long)p;
    int o = IDX[p % VEXT];
    return o < 0 ? -1 : (long)(p / VEXT) * 6 + o;
}

/* Elements after the last block that must stay as they were. */
#define GUARD 16

/* Block `b` of buf: what src sends dst at step i (gaps GAP). */
static void fill_block(struct side s, void *buf, size_t b, uint64_t what, long i, int src,
                       int dst) {
    size_t st = side_stride(s);
    for (size_t p = 0; p < st; p++) {
        long k = data_at(s, p);
        put(s.t, buf, b * st + p, k < 0 ? GAP : as_val(s.t, bh(what, i, src, dst, k)));
    }
}

/* nb blocks and the guard after them before a receive: FILL, the gaps GAP. */
static void clear_blocks(struct side s, void *buf, size_t nb) {
    size_t st = side_stride(s);
    for (size_t p = 0; p < nb * st + GUARD; p++)
        put(s.t, buf, p, p < nb * st && data_at(s, p % st) < 0 ? GAP : FILL[s.t]);
}

static void check_block(struct side s, const void *buf, size_t b, uint64_t what, long i, int src,
                        int dst, const char *op) {
    size_t st = side_stride(s);
    for (size_t p = 0; p < st; p++) {
        long k = data_at(s, p);
        double want = k < 0 ? GAP : as_val(s.t, bh(what, i, src, dst, k));
        double got = get(s.t, buf, b * st + p);
        EXPECT(got == want,
               "%s, block %zu (world rank %d to %d) of %d %s: element %ld (at %zu): %.17g, want "
               "%.17g",
               op, b, src, dst, s.cnt, side_name(s), k, p, got, want);
    }
}

/* The blocks of a receive that must not have been written (FILL, gaps GAP), and the guard. */
static void check_clear(struct side s, const void *buf, size_t nb, const char *op) {
    size_t st = side_stride(s);
    for (size_t p = 0; p < nb * st + GUARD; p++) {
        double want = p < nb * st && data_at(s, p % st) < 0 ? GAP : FILL[s.t];
        double got = get(s.t, buf, p);
        EXPECT(got == want, "%s, %zu blocks of %d %s: element at %zu changed: %.17g, want %.17g",
               op, nb, s.cnt, side_name(s), p, got, want);
    }
}

static void check_guard(struct side s, const void *buf, size_t nb, const char *op) {
    size_t at = nb * side_stride(s);
    for (size_t p = at; p < at + GUARD; p++)
        EXPECT(get(s.t, buf, p) == FILL[s.t], "%s, %zu blocks of %d %s: %zu past the end: %.17g",
               op, nb, s.cnt, side_name(s), p - at, get(s.t, buf, p));
}

/* What a call sends and receives. The vector kinds have the vector on one side and 6 ints a
 * vector on the other: the same type signature (MPI-3.1 5.5), another layout. */
enum { K_INT, K_DOUBLE, K_CHAR, K_VEC_SEND, K_VEC_RECV, NKINDS };

static void sides(int kind, int cnt, struct side *snd, struct side *rcv) {
    int t = kind == K_DOUBLE ? TD : kind == K_CHAR ? TC : TI;
    snd->t = rcv->t = t;
    snd->vecl = kind == K_VEC_SEND;
    rcv->vecl = kind == K_VEC_RECV;
    snd->cnt = kind == K_VEC_RECV ? 6 * cnt : cnt;
    rcv->cnt = kind == K_VEC_SEND ? 6 * cnt : cnt;
}

/* Bytes of data in one count of a kind (the vector: 6 ints). */
static int unit(int kind) {
    return kind == K_DOUBLE ? 8 : kind == K_CHAR ? 1 : kind == K_INT ? 4 : 24;
}

/* The count of a block of kind `kind` for size class `sel`, where `lim` bytes is the most that
 * fits 4 KiB (4096/size for Gather and Scatter, 4096/size^2 for Alltoall): none, one, three,
 * half of lim, lim, a little over lim (8 bytes and up to the next whole count), `big` bytes, and a
 * random size up to lim. */
static int pick_count(int sel, long i, int lim, int big, int kind) {
    int u = unit(kind);
    switch (sel) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 3;
    case 3: return lim / 2 / u;
    case 4: return lim / u;
    case 5: return (lim + 8 + u - 1) / u;
    case 6: return big / u;
    default: return (int)(h4(T_SIZE, (uint64_t)i, (uint64_t)kind, 0) % (uint64_t)(lim + 1)) / u;
    }
}

/* Every buffer holds this many bytes: n blocks of up to 4104 bytes of data, twice that as
 * vectors, and a guard. */
static size_t cap;
static void *sbuf, *rbuf;

/* ---- one call of each kind, checked ---------------------------------------------------------- */

/* Before a call: at one step in 8, one rank (another each time) sleeps 1 ms. */
static void nap(const struct comm *c, long i, int salt) {
    if ((i + 3 * salt) % 8 == 5 && c->cr == (int)((i / 8 + 5 * salt) % c->n))
        sleep_ms(1);
}

/* Gather to `root`; in place there if asked; with NULL, 0 and MPI_BYTE for the receive arguments
 * elsewhere if `lazy` (significant only at the root). */
static void gather_once(const struct comm *c, long i, int kind, int cnt, int root, int in_place,
                        int lazy) {
    struct side s, r;
    sides(kind, cnt, &s, &r);
    int is_root = c->cr == root, rw = c->members[root];
    char op[96];
    snprintf(op, sizeof op, "gather to %d%s", root, is_root && in_place ? " (in place)" : "");
    fill_block(s, sbuf, 0, T_GATHER, i, rank, rw);
    if (is_root) {
        clear_blocks(r, rbuf, (size_t)c->n);
        if (in_place)
            fill_block(r, rbuf, (size_t)root, T_GATHER, i, rank, rw);
        OK(MPI_Gather(in_place ? MPI_IN_PLACE : sbuf, in_place ? 0 : s.cnt, side_type(s), rbuf,
                      r.cnt, side_type(r), root, c->c));
    } else if (lazy) {
        OK(MPI_Gather(sbuf, s.cnt, side_type(s), NULL, 0, MPI_BYTE, root, c->c));
    } else {
        OK(MPI_Gather(sbuf, s.cnt, side_type(s), rbuf, r.cnt, side_type(r), root, c->c));
    }
    if (!(is_root && in_place))
        check_block(s, sbuf, 0, T_GATHER, i, rank, rw, "gather: the send buffer changed");
    if (is_root) {
        for (int b = 0; b < c->n; b++)
            check_block(r, rbuf, (size_t)b, T_GATHER, i, c->members[b], rw, op);
        check_guard(r, rbuf, (size_t)c->n, op);
    }
}

/* Scatter from `root`; in place there if asked; with NULL, 0 and MPI_BYTE for the send arguments
 * elsewhere if `lazy`. */
static void scatter_once(const struct comm *c, long i, int kind, int cnt, int root, int in_place,
                         int lazy) {
    struct side s, r;
    sides(kind, cnt, &s, &r);
    int is_root = c->cr == root, rw = c->members[root];
    char op[96];
    snprintf(op, sizeof op, "scatter from %d%s", root, is_root && in_place ? " (in place)" : "");
    if (is_root)
        for (int b = 0; b < c->n; b++)
            fill_block(s, sbuf, (size_t)b, T_SCATTER, i, rw, c->members[b]);
    clear_blocks(r, rbuf, 1);
    if (is_root)
        OK(MPI_Scatter(sbuf, s.cnt, side_type(s), in_place ? MPI_IN_PLACE : rbuf,
                       in_place ? 0 : r.cnt, side_type(r), root, c->c));
    else if (lazy)
        OK(MPI_Scatter(NULL, 0, MPI_BYTE, rbuf, r.cnt, side_type(r), root, c->c));
    else
        OK(MPI_Scatter(sbuf, s.cnt, side_type(s), rbuf, r.cnt, side_type(r), root, c->c));
    if (is_root)
        for (int b = 0; b < c->n; b++)
            check_block(s, sbuf, (size_t)b, T_SCATTER, i, rw, c->members[b],
                        "scatter: the send buffer changed");
    if (is_root && in_place) {
        check_clear(r, rbuf, 1, "scatter in place: the unused receive buffer");
    } else {
        check_block(r, rbuf, 0, T_SCATTER, i, rw, rank, op);
        check_guard(r, rbuf, 1, op);
    }
}

/* Alltoall; in place (contiguous kinds only: the same type map both ways) if asked. */
static void alltoall_once(const struct comm *c, long i, int kind, int cnt, int in_place) {
    struct side s, r;
    sides(kind, cnt, &s, &r);
    in_place = in_place && !s.vecl && !r.vecl;
    const char *op = in_place ? "alltoall (in place)" : "alltoall";
    size_t n = (size_t)c->n;
    clear_blocks(r, rbuf, n);
    if (in_place) {
        for (size_t b = 0; b < n; b++)
            fill_block(r, rbuf, b, T_A2A, i, rank, c->members[b]);
        OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rbuf, r.cnt, side_type(r), c->c));
    } else {
        for (size_t b = 0; b < n; b++)
            fill_block(s, sbuf, b, T_A2A, i, rank, c->members[b]);
        OK(MPI_Alltoall(sbuf, s.cnt, side_type(s), rbuf, r.cnt, side_type(r), c->c));
        for (size_t b = 0; b < n; b++)
            check_block(s, sbuf, b, T_A2A, i, rank, c->members[b],
                        "alltoall: the send buffer changed");
    }
    for (size_t b = 0; b < n; b++)
        check_block(r, rbuf, b, T_A2A, i, c->members[b], rank, op);
    check_guard(r, rbuf, n, op);
}

static const int BCOUNTS[] = {0, 1, 3, 17, 255, 1024};

/* Bcast of ints or doubles from `root`. */
static void bcast_once(const struct comm *c, long i, int root, int sel) {
    int cnt = BCOUNTS[sel % 6], t = sel % 2 ? TD : TI, rw = c->members[root];
    for (int k = 0; k < cnt + GUARD; k++)
        put(t, rbuf, (size_t)k,
            k < cnt && c->cr == root ? as_val(t, bh(T_BC, i, rw, 0, k)) : FILL[t]);
    OK(MPI_Bcast(rbuf, cnt, base_type(t), root, c->c));
    for (int k = 0; k < cnt + GUARD; k++) {
        double want = k < cnt ? as_val(t, bh(T_BC, i, rw, 0, k)) : FILL[t];
        EXPECT(get(t, rbuf, (size_t)k) == want,
               "bcast of %d %s from %d: element %d: %.17g, want %.17g", cnt,
               t == TI ? "MPI_INT" : "MPI_DOUBLE", root, k, get(t, rbuf, (size_t)k), want);
    }
}

/* Allreduce, a sum of ints below 2^16 (no overflow up to 2^15 ranks); in place if asked. */
static void allreduce_once(const struct comm *c, long i, int sel, int in_place) {
    int cnt = BCOUNTS[sel % 6], *a = sbuf, *b = rbuf;
    for (int k = 0; k < cnt; k++)
        a[k] = (int)(bh(T_AR, i, rank, 0, k) & 0xffff), b[k] = -1;
    int *out = in_place ? a : b;
    OK(MPI_Allreduce(in_place ? MPI_IN_PLACE : a, out, cnt, MPI_INT, MPI_SUM, c->c));
    for (int k = 0; k < cnt; k++) {
        int want = 0;
        for (int m = 0; m < c->n; m++)
            want += (int)(bh(T_AR, i, c->members[m], 0, k) & 0xffff);
        EXPECT(out[k] == want, "allreduce%s of %d: element %d: %d, want %d",
               in_place ? " (in place)" : "", cnt, k, out[k], want);
    }
}

/* ---- 1, 2 and 3: tight loops of Gather and Scatter, and of Alltoall -------------------------- */

static void gather_scatter_loop(const struct comm *c, long min, long max, double secs) {
    snprintf(part, sizeof part, "gather and scatter on %s", c->name);
    int n = c->n;
    double start = MPI_Wtime();
    for (long i = 0; keep_going(c->c, i, min, max, start, secs); i++) {
        at_step = i;
        /* Kinds and size classes both change at every step, and in 40 steps every kind has
         * had every size class. */
        int kind = (int)(i % NKINDS), sel = (int)(i % 8);
        int groot = (int)(i % n);
        int sroot = n > 1 ? (groot + 1 + (int)((i / n) % (n - 1))) % n : 0;
        nap(c, i, 0);
        gather_once(c, i, kind, pick_count(sel, i, 4096 / n, 4000, kind), groot, i % 3 == 1,
                    i % 4 == 3);
        int kind2 = (int)((i + 2) % NKINDS), sel2 = (int)((i + 3) % 8);
        nap(c, i, 1);
        scatter_once(c, i, kind2, pick_count(sel2, i + 1, 4096 / n, 4000, kind2), sroot,
                     i % 3 == 2, i % 4 == 1);
    }
}

static void alltoall_loop(const struct comm *c, long min, long max, double secs) {
    snprintf(part, sizeof part, "alltoall on %s", c->name);
    int n = c->n;
    double start = MPI_Wtime();
    for (long i = 0; keep_going(c->c, i, min, max, start, secs); i++) {
        at_step = i;
        int kind = (int)(i % NKINDS), sel = (int)((i + i / 40) % 8);
        nap(c, i, 2);
        alltoall_once(c, i, kind, pick_count(sel, i, 4096 / (n * n), 4096 / n, kind),
                      i % 3 == 1);
    }
}

/* ---- 4: Gatherv, Scatterv and Alltoallv ------------------------------------------------------ */

/* The count from src to dst at step i: 0 to 5, all 0 at every 10th step. */
static int vcount(uint64_t what, long i, int src, int dst) {
    return i % 10 == 7 ? 0 : (int)(bh(what + 1, i, src, dst, 0) % 6);
}

/* Displacements for blocks of these counts, in reverse rank order when `rev`, each after a gap of
 * 0 to 2 elements; returns the elements they span. */
static int place(int n, const int *cnt, int *displ, int rev, long i) {
    int off = 0;
    for (int j = 0; j < n; j++) {
        int r = rev ? n - 1 - j : j;
        off += (int)((i + r) % 3);
        displ[r] = off;
        off += cnt[r];
    }
    return off;
}

/* The n blocks of a v-receive (from members[r] to dst, at displ[r]): data where they lie, FILL
 * elsewhere up to len and in the guard after it. `src_fixed` >= 0: every block is from it, to
 * members[r] (Scatterv's send buffer). */
static void check_v(int t, const void *buf, int n, const int *cnt, const int *displ, int len,
                    const int *members, uint64_t what, long i, int dst, int src_fixed,
                    const char *op) {
    for (int p = 0; p < len + GUARD; p++) {
        double want = FILL[t];
        int from = -1, to = -1, k = -1;
        for (int r = 0; r < n; r++)
            if (p >= displ[r] && p < displ[r] + cnt[r]) {
                from = src_fixed >= 0 ? src_fixed : members[r];
                to = src_fixed >= 0 ? members[r] : dst;
                k = p - displ[r];
                want = as_val(t, bh(what, i, from, to, k));
            }
        double got = get(t, buf, (size_t)p);
        EXPECT(got == want,
               "%s of %s: element %d of %d (block from world rank %d to %d, element %d): %.17g, "
               "want %.17g",
               op, t == TI ? "MPI_INT" : "MPI_DOUBLE", p, len, from, to, k, got, want);
    }
}

static void v_loop(const struct comm *c, long min, long max, double secs) {
    snprintf(part, sizeof part, "gatherv, scatterv and alltoallv on %s", c->name);
    int n = c->n;
    int *sc = malloc(sizeof(int) * n), *sd = malloc(sizeof(int) * n);
    int *rc = malloc(sizeof(int) * n), *rd = malloc(sizeof(int) * n);
    CHECK(sc && sd && rc && rd);
    double start = MPI_Wtime();
    for (long i = 0; keep_going(c->c, i, min, max, start, secs); i++) {
        at_step = i;
        int t = i % 2 ? TD : TI;
        MPI_Datatype dt = base_type(t);
        /* Gatherv to a root that changes at every step; in place there every 4th step. */
        int root = (int)(i % n), rw = c->members[root], is_root = c->cr == root;
        int in_place = is_root && i % 4 == 1;
        int mine = vcount(T_GV, i, rank, rw);
        for (int k = 0; k < mine; k++)
            put(t, sbuf, (size_t)k, as_val(t, bh(T_GV, i, rank, rw, k)));
        nap(c, i, 3);
        if (is_root) {
            for (int r = 0; r < n; r++)
                rc[r] = vcount(T_GV, i, c->members[r], rw);
            int len = place(n, rc, rd, 1, i);
            for (int p = 0; p < len + GUARD; p++)
                put(t, rbuf, (size_t)p, FILL[t]);
            if (in_place)
                for (int k = 0; k < mine; k++)
                    put(t, rbuf, (size_t)(rd[root] + k), as_val(t, bh(T_GV, i, rank, rw, k)));
            OK(MPI_Gatherv(in_place ? MPI_IN_PLACE : sbuf, in_place ? 0 : mine, dt, rbuf, rc, rd,
                           dt, root, c->c));
            check_v(t, rbuf, n, rc, rd, len, c->members, T_GV, i, rw, -1,
                    in_place ? "gatherv (in place)" : "gatherv");
        } else {
            OK(MPI_Gatherv(sbuf, mine, dt, NULL, NULL, NULL, dt, root, c->c));
        }
        /* Scatterv from another root; in place there every 4th step. */
        root = (int)((i * 3 + 1) % n), rw = c->members[root], is_root = c->cr == root;
        in_place = is_root && i % 4 == 2;
        mine = vcount(T_SV, i, rw, rank);
        for (int p = 0; p < mine + GUARD; p++)
            put(t, rbuf, (size_t)p, FILL[t]);
        nap(c, i, 4);
        if (is_root) {
            for (int r = 0; r < n; r++)
                sc[r] = vcount(T_SV, i, rw, c->members[r]);
            int len = place(n, sc, sd, 0, i + 1);
            for (int p = 0; p < len + GUARD; p++)
                put(t, sbuf, (size_t)p, FILL[t]);
            for (int r = 0; r < n; r++)
                for (int k = 0; k < sc[r]; k++)
                    put(t, sbuf, (size_t)(sd[r] + k),
                        as_val(t, bh(T_SV, i, rw, c->members[r], k)));
            OK(MPI_Scatterv(sbuf, sc, sd, dt, in_place ? MPI_IN_PLACE : rbuf, in_place ? 0 : mine,
                            dt, root, c->c));
            check_v(t, sbuf, n, sc, sd, len, c->members, T_SV, i, -1, rw,
                    "scatterv: the send buffer changed");
        } else {
            OK(MPI_Scatterv(NULL, NULL, NULL, dt, rbuf, mine, dt, root, c->c));
        }
        {
            int zero = 0;
            int len = in_place ? 0 : mine;
            check_v(t, rbuf, 1, &len, &zero, len, &rw, T_SV, i, rank, -1,
                    in_place ? "scatterv (in place): the unused receive buffer" : "scatterv");
        }
        /* Alltoallv; in place every 4th step (counts the same both ways). */
        in_place = i % 4 == 3;
        for (int r = 0; r < n; r++) {
            int w = c->members[r];
            int lo = w < rank ? w : rank, hi = w < rank ? rank : w;
            sc[r] = in_place ? vcount(T_AV, i, lo, hi) : vcount(T_AV, i, rank, w);
            rc[r] = in_place ? vcount(T_AV, i, lo, hi) : vcount(T_AV, i, w, rank);
        }
        int slen = place(n, sc, sd, 1, i + 2), rlen = place(n, rc, rd, 0, i + 3);
        for (int p = 0; p < rlen + GUARD; p++)
            put(t, rbuf, (size_t)p, FILL[t]);
        for (int p = 0; p < slen; p++)
            put(t, sbuf, (size_t)p, FILL[t]);
        for (int r = 0; r < n; r++)
            for (int k = 0; k < sc[r]; k++) {
                double v = as_val(t, bh(T_AV, i, rank, c->members[r], k));
                put(t, in_place ? rbuf : sbuf, (size_t)((in_place ? rd : sd)[r] + k), v);
            }
        nap(c, i, 5);
        if (in_place)
            OK(MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, rbuf, rc, rd, dt,
                             c->c));
        else
            OK(MPI_Alltoallv(sbuf, sc, sd, dt, rbuf, rc, rd, dt, c->c));
        check_v(t, rbuf, n, rc, rd, rlen, c->members, T_AV, i, rank, -1,
                in_place ? "alltoallv (in place)" : "alltoallv");
    }
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

/* ---- 5 and 6: every kind after every other kind ---------------------------------------------- */

/* Step j of a sequence in which each of the 6 kinds follows each kind: the pairs (a, b) of
 * 0..5 in turn, a then b. */
static int mixed_kind(long j) {
    long x = (j / 2) % 36;
    return (int)(j % 2 == 0 ? x / 6 : x % 6);
}

static void mixed_op(const struct comm *c, long i) {
    int n = c->n, root = (int)((i * 7 + i / 72) % n);
    int kind = (int)(h4(T_MIX, (uint64_t)i, 0, 0) % NKINDS);
    int sel = (int)(h4(T_MIX, (uint64_t)i, 1, 0) % 8);
    nap(c, i, 6);
    switch (mixed_kind(i)) {
    case 0:
        gather_once(c, i, kind, pick_count(sel, i, 4096 / n, 4000, kind), root, i % 5 == 1,
                    i % 7 == 3);
        break;
    case 1:
        scatter_once(c, i, kind, pick_count(sel, i, 4096 / n, 4000, kind), root, i % 5 == 2,
                     i % 7 == 4);
        break;
    case 2:
        alltoall_once(c, i, kind, pick_count(sel, i, 4096 / (n * n), 4096 / n, kind),
                      i % 3 == 0);
        break;
    case 3: bcast_once(c, i, root, sel); break;
    case 4: allreduce_once(c, i, sel, i % 4 == 1); break;
    default: OK(MPI_Barrier(c->c));
    }
}

static void mixed_loop(const struct comm *c, long min, long max, double secs) {
    snprintf(part, sizeof part, "every kind after every kind on %s", c->name);
    double start = MPI_Wtime();
    for (long i = 0; keep_going(c->c, i, min, max, start, secs); i++) {
        at_step = i;
        mixed_op(c, i);
    }
}

/* Generation g of the communicator made again: reversed keys; three colours (uneven), keys
 * with ties; two colours, every fourth rank (another each time) left out. */
static struct comm remade(long g) {
    int *colour = malloc(sizeof(int) * size), *key = malloc(sizeof(int) * size);
    CHECK(colour && key);
    static const char *NAMES[] = {"a split with reversed keys (remade)",
                                  "a split into 3 colours (remade)",
                                  "a split leaving ranks out (remade)"};
    for (int w = 0; w < size; w++)
        switch (g % 3) {
        case 0: colour[w] = 0, key[w] = size - w; break;
        case 1: colour[w] = (int)((w + g) % 3), key[w] = (int)((w * 5 + g) % 3); break;
        default:
            colour[w] = size > 1 && (w + g) % 4 == 3 ? MPI_UNDEFINED : w % 2;
            key[w] = -w;
        }
    struct comm e = split_comm(colour, key, NAMES[g % 3]);
    free(colour);
    free(key);
    return e;
}

static void remade_loop(long min, long max, double secs) {
    struct comm c = {MPI_COMM_NULL, 0, -1, NULL, ""};
    double start = MPI_Wtime();
    for (long i = 0; keep_going(MPI_COMM_WORLD, i, min, max, start, secs); i++) {
        if (i % 50 == 0) {
            if (i > 0)
                comm_free(&c);
            c = remade(i / 50);
        }
        snprintf(part, sizeof part, "every kind after every kind on %s, generation %ld",
                 c.name, i / 50);
        at_step = i;
        if (c.c != MPI_COMM_NULL)
            mixed_op(&c, i);
    }
    comm_free(&c);
}

/* ---- 7: count 0 ------------------------------------------------------------------------------ */

static void zero_counts(const struct comm *c) {
    snprintf(part, sizeof part, "count 0 on %s", c->name);
    int n = c->n;
    int *z = calloc((size_t)n, sizeof(int));
    CHECK(z);
    for (long i = 0; i < 2 * NKINDS; i++) {
        at_step = i;
        int kind = (int)(i % NKINDS), root = (int)((i * 5 + 1) % n), is_root = c->cr == root;
        int in_place = is_root && i >= NKINDS;
        struct side s, r;
        sides(kind, 0, &s, &r);
        /* A receive buffer of one full block (as if the count were 1): it must stay as it was. */
        struct side r1 = r;
        r1.cnt = 1;
        clear_blocks(r1, rbuf, 1);
        OK(MPI_Gather(in_place ? MPI_IN_PLACE : sbuf, 0, side_type(s), rbuf, 0, side_type(r),
                      root, c->c));
        check_clear(r1, rbuf, 1, "gather of 0");
        OK(MPI_Scatter(sbuf, 0, side_type(s), in_place ? MPI_IN_PLACE : rbuf, 0, side_type(r),
                       root, c->c));
        check_clear(r1, rbuf, 1, "scatter of 0");
        if (i >= NKINDS && kind < K_VEC_SEND)
            OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rbuf, 0, side_type(r), c->c));
        else
            OK(MPI_Alltoall(sbuf, 0, side_type(s), rbuf, 0, side_type(r), c->c));
        check_clear(r1, rbuf, 1, "alltoall of 0");
        OK(MPI_Gatherv(in_place ? MPI_IN_PLACE : sbuf, 0, side_type(s), rbuf, z, z, side_type(r),
                       root, c->c));
        check_clear(r1, rbuf, 1, "gatherv of 0");
        OK(MPI_Scatterv(sbuf, z, z, side_type(s), in_place ? MPI_IN_PLACE : rbuf, 0, side_type(r),
                        root, c->c));
        check_clear(r1, rbuf, 1, "scatterv of 0");
        OK(MPI_Alltoallv(sbuf, z, z, side_type(s), rbuf, z, z, side_type(r), c->c));
        check_clear(r1, rbuf, 1, "alltoallv of 0");
    }
    free(z);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    rank = world_rank(), size = world_size();
    OK(MPI_Type_vector(3, 2, 5, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    MPI_Aint lb, ext;
    OK(MPI_Type_get_extent(vec, &lb, &ext));
    CHECK(lb == 0 && ext == (MPI_Aint)(VEXT * sizeof(int)));
    cap = (size_t)size * 2 * (4096 + 64) + 2 * GUARD * sizeof(double);
    sbuf = malloc(cap), rbuf = malloc(cap);
    CHECK(sbuf && rbuf);

    /* The standard does not promise the arguments to every process: rank 0's decide. */
    full = argc > 1 && strcmp(argv[1], "full") == 0;
    OK(MPI_Bcast(&full, 1, MPI_INT, 0, MPI_COMM_WORLD));

    int *colour = malloc(sizeof(int) * size), *key = malloc(sizeof(int) * size);
    CHECK(colour && key);
    struct comm world = world_comm(0, "the world");
    struct comm dup = world_comm(1, "a dup of the world");
    for (int w = 0; w < size; w++)
        colour[w] = 0, key[w] = size - w;
    struct comm rev = split_comm(colour, key, "a split with reversed keys");
    for (int w = 0; w < size; w++)
        colour[w] = w % 3, key[w] = (w * 7) % 4;
    struct comm uneven = split_comm(colour, key, "a split into colours rank % 3");
    free(colour);
    free(key);

    /* 1 and 2: at least 200 steps each on the world. */
    gather_scatter_loop(&world, 200, 400, 2.0);
    alltoall_loop(&world, 200, 400, 1.0);
    /* 3: the other communicators. */
    const struct comm *others[] = {&dup, &rev, &uneven};
    for (int j = 0; j < 3; j++) {
        gather_scatter_loop(others[j], 8, 200, 0.3);
        alltoall_loop(others[j], 8, 200, 0.2);
    }
    /* 4 */
    v_loop(&world, 8, 200, 0.5);
    v_loop(&uneven, 8, 200, 0.3);
    /* 5 and 6: at least one pass through every pair of kinds on the world, and at least one
     * communicator made again. */
    mixed_loop(&world, 72, 288, 0.8);
    mixed_loop(&dup, 12, 288, 0.3);
    remade_loop(51, 300, 0.8);
    /* 7 */
    zero_counts(&world);
    zero_counts(&rev);

    comm_free(&world);
    comm_free(&dup);
    comm_free(&rev);
    comm_free(&uneven);
    OK(MPI_Type_free(&vec));
    free(sbuf);
    free(rbuf);
    pass("coll_shm_blocks");
    return 0;
}
