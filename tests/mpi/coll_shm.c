/* Small collectives back to back, as a shared-memory implementation inside one host sees them
 * (MPI-3.1 chapter 5, 6.4): Bcast, Reduce, Allreduce and Barrier of up to a few KiB per rank (and
 * a little over, where such an implementation falls back), every result compared exactly with a
 * serial computation. Every value depends on the step and the rank, so a stale buffer from the
 * step before, or the one before that, gives a wrong answer.
 *  1. A tight loop: Bcast (root i % size, ints or doubles), Reduce (sum of ints or doubles, to
 *     another root), two Allreduces (sum of ints and of doubles, max, minloc on MPI_DOUBLE_INT
 *     with ties, bxor on unsigned long) and now and then a Barrier; counts 0, 1, 3, 17, 255, 1024
 *     rotating; a root returns at once and races into the next operation.
 *  2. MPI_IN_PLACE in that loop, for Allreduce and for Reduce at the root.
 *  3. A non-commutative user operation (2x2 matrices mod a prime): Allreduce and Reduce give the
 *     product in rank order, on the world and on communicators whose keys reverse the ranks.
 *  4. A strided MPI_Type_vector of ints: Bcast, and Allreduce under a user sum; the gaps between
 *     its blocks stay untouched.
 *  5. Barrier: each rank sleeps a different time before it; no rank leaves before the last one
 *     has entered (timed on the host's monotonic clock).
 *  6. More than 16 communicators alive at once (dups, splits with reversed or tied keys, some
 *     leaving ranks out), freed in another order and made again with other members.
 *  7. A rank that sleeps 2 ms before an Allreduce, a Reduce (as root) and a Bcast, so that the
 *     others wait long enough to go to sleep themselves.
 *  8. A Bcast root that sends 200 values in a row while the others sleep now and then.
 * Each loop stops early (after its minimum) once past its share of a few seconds: MPICH
 * busy-polls, and with more ranks than cores each of its collectives costs milliseconds.
 * `coll_shm full` runs every loop to its full count. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* Where we are, for the message when a check fails. */
static const char *part = "start";
static long at_step = -1;

#define EXPECT(cond, ...)                                                                   \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "coll_shm: rank %d, %s, step %ld: ", world_rank(), part,        \
                    at_step);                                                               \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fputc('\n', stderr);                                                            \
            CHECK(cond);                                                                    \
        }                                                                                   \
    } while (0)

static int rank, size;

/* ---- values (fmix and h4 are in check.h) ------------------------------------------------------ */

/* Ints small enough that 16 of them add up without overflow. */
static int ival(uint64_t what, long i, int r, int k) {
    return (int)(h4(what, (uint64_t)i, (uint64_t)r, (uint64_t)k) & 0xfffff) - 0x80000;
}

/* Doubles that are multiples of 1/8 up to 2^20 in magnitude: sums of 16 are exact in any order. */
static double dval(uint64_t what, long i, int r, int k) {
    return (double)((int64_t)(h4(what, (uint64_t)i, (uint64_t)r, (uint64_t)k) & 0xffffff) -
                    0x800000) * 0.125;
}

static uint64_t uval(uint64_t what, long i, int r, int k) {
    return h4(what, (uint64_t)i, (uint64_t)r, (uint64_t)k);
}

/* MINLOC pairs: few distinct values (so ties are common) and locations that are not the rank
 * (so a tie must pick the smaller location, MPI-3.1 5.9.4). */
struct dint {
    double v;
    int loc;
};
static struct dint pval(uint64_t what, long i, int r, int k) {
    uint64_t x = h4(what, (uint64_t)i, (uint64_t)r, (uint64_t)k);
    struct dint p = {(double)(x & 3) - 1.5, (int)((x >> 8) % 1000)};
    return p;
}

/* What a value is for (the first argument of h4); the +1, +2 of each are its own too. */
enum { T_BC = 10, T_RED = 20, T_AR1 = 30, T_AR2 = 40, T_CNT = 50, T_MAT = 60, T_VEC = 70,
       T_CHURN = 80, T_SLEEPY = 90, T_RACE = 100 };

static void sleep_ms(double ms) {
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)((ms - 1000.0 * (double)ts.tv_sec) * 1e6);
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* The host's monotonic clock in nanoseconds: one clock for every process on the host. */
static int64_t now_ns(void) {
    struct timespec ts;
    CHECK(clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Set by `coll_shm full`: every loop runs to its full count, however long that takes. */
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

/* Splits the world, and checks the new communicator's size and this rank's place in it. */
static MPI_Comm split_checked(const int *colour, const int *key, int *members, int *n) {
    MPI_Comm c;
    OK(MPI_Comm_split(MPI_COMM_WORLD, colour[rank], key[rank], &c));
    *n = split_members(colour, key, members);
    if (*n == 0) {
        EXPECT(c == MPI_COMM_NULL, "MPI_UNDEFINED colour gave a communicator");
        return c;
    }
    EXPECT(c != MPI_COMM_NULL, "no communicator from MPI_Comm_split");
    int cs, cr;
    OK(MPI_Comm_size(c, &cs));
    OK(MPI_Comm_rank(c, &cr));
    EXPECT(cs == *n, "split size %d, want %d", cs, *n);
    EXPECT(members[cr] == rank, "split rank %d is world rank %d, not %d", cr, members[cr], rank);
    return c;
}

/* ---- the non-commutative operation: 2x2 matrices mod a prime --------------------------------- */

#define PRIME 32749

static void mat_mul(const int *a, const int *b, int *c) {
    int64_t r[4] = {((int64_t)a[0] * b[0] + (int64_t)a[1] * b[2]) % PRIME,
                    ((int64_t)a[0] * b[1] + (int64_t)a[1] * b[3]) % PRIME,
                    ((int64_t)a[2] * b[0] + (int64_t)a[3] * b[2]) % PRIME,
                    ((int64_t)a[2] * b[1] + (int64_t)a[3] * b[3]) % PRIME};
    for (int j = 0; j < 4; j++)
        c[j] = (int)r[j];
}

/* inoutvec[k] = invec[k] o inoutvec[k] (MPI-3.1 5.9.5): invec holds the lower ranks. */
static void matmul_op(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4)
        mat_mul(a, b, b);
}

static void mat_of(long i, int w, int k, int *x) {
    for (int j = 0; j < 4; j++)
        x[j] = (int)(h4(T_MAT, (uint64_t)i, (uint64_t)w, (uint64_t)(4 * k + j)) % PRIME);
}

/* Element k of M(members[0]) M(members[1]) ... M(members[n-1]) at step i. */
static void mat_product(long i, const int *members, int n, int k, int *out) {
    int x[4];
    out[0] = 1, out[1] = 0, out[2] = 0, out[3] = 1;
    for (int c = 0; c < n; c++) {
        mat_of(i, members[c], k, x);
        mat_mul(out, x, out);
    }
}

/* MPI_Type_vector(3, 2, 5, MPI_INT): ints 0, 1, 5, 6, 10 and 11 of every 12 (its extent). */
#define VEXT 12
static int in_vec(int j) {
    int o = j % VEXT;
    return o == 0 || o == 1 || o == 5 || o == 6 || o == 10 || o == 11;
}
static MPI_Datatype vec;

/* A user sum for that vector, element by element: MPI-3.1 5.9.1 lets predefined operations work
 * only on the predefined types (MPICH refuses MPI_SUM on a vector of ints), while a user
 * operation may take any datatype (5.9.5), and is handed `len` elements of the datatype given
 * to the collective, here the vector itself. Made twice: commutative, and declared
 * non-commutative. */
static void vsum_op(void *in, void *inout, int *len, MPI_Datatype *t) {
    CHECK(*t == vec);
    const int *a = in;
    int *b = inout;
    for (int j = 0; j < *len * VEXT; j++)
        if (in_vec(j))
            b[j] += a[j];
}

static MPI_Op matmul, vsum, vsum_nc;
static MPI_Datatype mat;

/* ---- 1 and 2: a tight loop of every kind, counts and roots rotating, MPI_IN_PLACE ------------ */

static const int COUNTS[] = {0, 1, 3, 17, 255, 1024};
#define NCOUNTS 6
#define BIG 1024

static int pick_count(long i, int which) {
    return COUNTS[h4(T_CNT, (uint64_t)i, (uint64_t)which, 0) % NCOUNTS];
}

/* Allreduce of kind `kind` (0 sum int, 1 sum double, 2 max double, 3 minloc double-int, 4 bxor
 * unsigned long), n elements, in place or not; checked at every rank. */
static void allreduce_kind(long i, int kind, int n, int in_place, uint64_t what, void *sb,
                           void *rb) {
    int *is = sb, *ir = rb;
    double *ds = sb, *dr = rb;
    struct dint *ps = sb, *pr = rb;
    unsigned long *us = sb, *ur = rb;
    void *out = in_place ? sb : rb;
    MPI_Datatype t = kind == 0 ? MPI_INT
                     : kind <= 2 ? MPI_DOUBLE
                     : kind == 3 ? MPI_DOUBLE_INT
                                 : MPI_UNSIGNED_LONG;
    MPI_Op op = kind <= 1 ? MPI_SUM : kind == 2 ? MPI_MAX : kind == 3 ? MPI_MINLOC : MPI_BXOR;
    for (int k = 0; k < n; k++)
        switch (kind) {
        case 0: is[k] = ival(what, i, rank, k), ir[k] = -1; break;
        case 1: ds[k] = dval(what, i, rank, k), dr[k] = -1e300; break;
        case 2: ds[k] = dval(what, i, rank, k), dr[k] = -1e300; break;
        case 3: ps[k] = pval(what, i, rank, k), pr[k].v = 99, pr[k].loc = -1; break;
        default: us[k] = uval(what, i, rank, k), ur[k] = 0; break;
        }
    OK(MPI_Allreduce(in_place ? MPI_IN_PLACE : sb, out, n, t, op, MPI_COMM_WORLD));
    for (int k = 0; k < n; k++)
        switch (kind) {
        case 0: {
            int want = 0;
            for (int r = 0; r < size; r++)
                want += ival(what, i, r, k);
            EXPECT(((int *)out)[k] == want, "allreduce sum int [%d] of %d: %d, want %d", k, n,
                   ((int *)out)[k], want);
            break;
        }
        case 1:
        case 2: {
            double want = kind == 1 ? 0 : -1e300;
            for (int r = 0; r < size; r++) {
                double v = dval(what, i, r, k);
                want = kind == 1 ? want + v : (v > want ? v : want);
            }
            EXPECT(((double *)out)[k] == want, "allreduce %s double [%d] of %d: %.17g, want %.17g",
                   kind == 1 ? "sum" : "max", k, n, ((double *)out)[k], want);
            break;
        }
        case 3: {
            struct dint want = pval(what, i, 0, k);
            for (int r = 1; r < size; r++) {
                struct dint v = pval(what, i, r, k);
                if (v.v < want.v || (v.v == want.v && v.loc < want.loc))
                    want = v;
            }
            struct dint got = ((struct dint *)out)[k];
            EXPECT(got.v == want.v && got.loc == want.loc,
                   "allreduce minloc [%d] of %d: (%g, %d), want (%g, %d)", k, n, got.v, got.loc,
                   want.v, want.loc);
            break;
        }
        default: {
            unsigned long want = 0;
            for (int r = 0; r < size; r++)
                want ^= (unsigned long)uval(what, i, r, k);
            EXPECT(((unsigned long *)out)[k] == want, "allreduce bxor [%d] of %d: %lx, want %lx",
                   k, n, ((unsigned long *)out)[k], want);
            break;
        }
        }
}

static void tight_loop(void) {
    part = "1: tight loop";
    double start = MPI_Wtime();
    size_t bytes = sizeof(struct dint) * BIG;
    void *sb = malloc(bytes), *rb = malloc(bytes);
    CHECK(sb && rb);
    int *is = sb, *ir = rb;
    double *ds = sb, *dr = rb;
    for (long i = 0; keep_going(MPI_COMM_WORLD, i, 15, 2000, start, 2.0); i++) {
        at_step = i;
        /* Bcast from root i % size, of ints or doubles. */
        int root = (int)(i % size), n = pick_count(i, 0);
        int dbl = (int)(h4(T_BC, (uint64_t)i, 99, 99) & 1);
        for (int k = 0; k < n; k++) {
            if (dbl)
                ds[k] = rank == root ? dval(T_BC, i, root, k) : -1e300;
            else
                is[k] = rank == root ? ival(T_BC, i, root, k) : -1;
        }
        OK(MPI_Bcast(sb, n, dbl ? MPI_DOUBLE : MPI_INT, root, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++) {
            if (dbl)
                EXPECT(ds[k] == dval(T_BC, i, root, k), "bcast double [%d] of %d from %d: %.17g",
                       k, n, root, ds[k]);
            else
                EXPECT(is[k] == ival(T_BC, i, root, k), "bcast int [%d] of %d from %d: %d", k, n,
                       root, is[k]);
        }
        /* Reduce (sum of ints or doubles) to another root; in place at the root every third
         * step. */
        root = (int)((i * 7 + 3) % size);
        n = pick_count(i, 1);
        dbl = (int)(h4(T_RED, (uint64_t)i, 99, 99) & 1);
        /* (Only up to 255 elements at a root other than 0: MPICH 4.0.2 crashes on MPI_IN_PLACE at
         * a non-zero root over 2 KiB, pmodels/mpich#6540, fixed in 4.1.2.) */
        int in_place = i % 3 == 1 && rank == root && (root == 0 || n <= 255);
        for (int k = 0; k < n; k++) {
            if (dbl)
                ds[k] = dval(T_RED, i, rank, k), dr[k] = -1e300;
            else
                is[k] = ival(T_RED, i, rank, k), ir[k] = -1;
        }
        void *out = in_place ? sb : rb;
        OK(MPI_Reduce(in_place ? MPI_IN_PLACE : sb, out, n, dbl ? MPI_DOUBLE : MPI_INT, MPI_SUM,
                      root, MPI_COMM_WORLD));
        if (rank == root)
            for (int k = 0; k < n; k++) {
                if (dbl) {
                    double want = 0;
                    for (int r = 0; r < size; r++)
                        want += dval(T_RED, i, r, k);
                    EXPECT(((double *)out)[k] == want,
                           "reduce sum double [%d] of %d at %d%s: %.17g, want %.17g", k, n, root,
                           in_place ? " (in place)" : "", ((double *)out)[k], want);
                } else {
                    int want = 0;
                    for (int r = 0; r < size; r++)
                        want += ival(T_RED, i, r, k);
                    EXPECT(((int *)out)[k] == want,
                           "reduce sum int [%d] of %d at %d%s: %d, want %d", k, n, root,
                           in_place ? " (in place)" : "", ((int *)out)[k], want);
                }
            }
        /* Two allreduces of rotating kinds, each in place half of the time; between them they go
         * through every kind at every count in 15 steps. */
        allreduce_kind(i, (int)(i % 5), COUNTS[(i / 5) % NCOUNTS], i % 2 == 1, T_AR1, sb, rb);
        allreduce_kind(i, (int)((i * 3 + 2) % 5), COUNTS[(i / 5 + 3) % NCOUNTS], (i / 3) % 2 == 1,
                       T_AR2, sb, rb);
        if (i % 4 == 3)
            OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    free(sb);
    free(rb);
}

/* ---- 3: the non-commutative operation, in rank order ----------------------------------------- */

static void noncommutative(MPI_Comm c, const int *members, int n, const char *name, int iters) {
    part = name;
    double start = MPI_Wtime();
    int cr;
    OK(MPI_Comm_rank(c, &cr));
    int *a = malloc(sizeof(int) * 4 * BIG), *b = malloc(sizeof(int) * 4 * BIG);
    CHECK(a && b);
    for (long i = 0; keep_going(c, i, NCOUNTS, iters, start, 0.4); i++) {
        at_step = i;
        int cnt = COUNTS[i % NCOUNTS];
        int in_place = i % 2 == 1;
        for (int k = 0; k < cnt; k++) {
            mat_of(i, rank, k, a + 4 * k);
            b[4 * k] = -1;
        }
        int *out = in_place ? a : b;
        OK(MPI_Allreduce(in_place ? MPI_IN_PLACE : a, out, cnt, mat, matmul, c));
        for (int k = 0; k < cnt; k++) {
            int want[4];
            mat_product(i, members, n, k, want);
            EXPECT(memcmp(out + 4 * k, want, sizeof want) == 0,
                   "allreduce matmul [%d] of %d%s: {%d %d %d %d}, want {%d %d %d %d}", k, cnt,
                   in_place ? " (in place)" : "", out[4 * k], out[4 * k + 1], out[4 * k + 2],
                   out[4 * k + 3], want[0], want[1], want[2], want[3]);
        }
        /* Reduce to a rotating root, in place there every third step. */
        int root = (int)((i * 5 + 1) % n);
        in_place = i % 3 == 2 && cr == root;
        int cnt2 = COUNTS[(i + 3) % NCOUNTS];
        for (int k = 0; k < cnt2; k++) {
            mat_of(i + 1000, rank, k, a + 4 * k);
            b[4 * k] = -1;
        }
        out = in_place ? a : b;
        OK(MPI_Reduce(in_place ? MPI_IN_PLACE : a, out, cnt2, mat, matmul, root, c));
        if (cr == root)
            for (int k = 0; k < cnt2; k++) {
                int want[4];
                mat_product(i + 1000, members, n, k, want);
                EXPECT(memcmp(out + 4 * k, want, sizeof want) == 0,
                       "reduce matmul [%d] of %d at %d%s: {%d %d %d %d}, want {%d %d %d %d}", k,
                       cnt2, root, in_place ? " (in place)" : "", out[4 * k], out[4 * k + 1],
                       out[4 * k + 2], out[4 * k + 3], want[0], want[1], want[2], want[3]);
            }
    }
    free(a);
    free(b);
}

static void part3(void) {
    int *colour = malloc(sizeof(int) * size), *key = malloc(sizeof(int) * size);
    int *members = malloc(sizeof(int) * size);
    CHECK(colour && key && members);
    for (int w = 0; w < size; w++)
        members[w] = w;
    noncommutative(MPI_COMM_WORLD, members, size, "3: matmul on the world", 24);
    /* Keys that reverse the order: world rank size-1 is rank 0 here. */
    for (int w = 0; w < size; w++)
        colour[w] = 0, key[w] = size - w;
    int n;
    MPI_Comm rev = split_checked(colour, key, members, &n);
    noncommutative(rev, members, n, "3: matmul, ranks reversed", 24);
    /* Two colours, each in reversed order. */
    for (int w = 0; w < size; w++)
        colour[w] = w % 2, key[w] = -w;
    MPI_Comm halves = split_checked(colour, key, members, &n);
    noncommutative(halves, members, n, "3: matmul, two colours reversed", 12);
    OK(MPI_Comm_free(&rev));
    OK(MPI_Comm_free(&halves));
    CHECK(rev == MPI_COMM_NULL && halves == MPI_COMM_NULL);
    free(colour);
    free(key);
    free(members);
}

/* ---- 4: a strided derived datatype ----------------------------------------------------------- */

#define GAP (-77777)

static void derived(void) {
    part = "4: vector datatype";
    OK(MPI_Type_vector(3, 2, 5, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    MPI_Aint lb, ext;
    OK(MPI_Type_get_extent(vec, &lb, &ext));
    CHECK(lb == 0 && ext == (MPI_Aint)(VEXT * sizeof(int)));
    static const int VCOUNTS[] = {0, 1, 3, 17, 100, 200}; /* 100: 2400 bytes of data; 200: 4800 */
    int *a = malloc(sizeof(int) * VEXT * 200), *b = malloc(sizeof(int) * VEXT * 200);
    CHECK(a && b);
    double start = MPI_Wtime();
    for (long i = 0; keep_going(MPI_COMM_WORLD, i, 6, 36, start, 0.6); i++) {
        at_step = i;
        int cnt = VCOUNTS[i % 6], len = cnt * VEXT, root = (int)((i * 5 + 2) % size);
        for (int j = 0; j < len; j++)
            a[j] = !in_vec(j) ? GAP : rank == root ? ival(T_VEC, i, root, j) : -1;
        OK(MPI_Bcast(a, cnt, vec, root, MPI_COMM_WORLD));
        for (int j = 0; j < len; j++)
            EXPECT(a[j] == (in_vec(j) ? ival(T_VEC, i, root, j) : GAP),
                   "bcast of %d vectors from %d, int %d: %d", cnt, root, j, a[j]);
        /* Allreduce of a user sum: commutative, commutative in place, and declared
         * non-commutative; the gaps of the receive buffer are not the datatype's and must stay
         * as they were. */
        int how = (int)(i % 3);
        for (int j = 0; j < len; j++) {
            a[j] = in_vec(j) ? ival(T_VEC + 1, i, rank, j) : GAP;
            b[j] = in_vec(j) ? -1 : GAP - 1;
        }
        int *out = how == 1 ? a : b;
        OK(MPI_Allreduce(how == 1 ? MPI_IN_PLACE : a, out, cnt, vec, how == 2 ? vsum_nc : vsum,
                         MPI_COMM_WORLD));
        for (int j = 0; j < len; j++) {
            int want = out == a ? GAP : GAP - 1;
            if (in_vec(j)) {
                want = 0;
                for (int r = 0; r < size; r++)
                    want += ival(T_VEC + 1, i, r, j);
            }
            EXPECT(out[j] == want, "allreduce (%s) of %d vectors, int %d: %d, want %d",
                   how == 0 ? "commutative" : how == 1 ? "in place" : "non-commutative", cnt, j,
                   out[j], want);
        }
    }
    OK(MPI_Type_free(&vec));
    free(a);
    free(b);
}

/* ---- 5: Barrier holds every rank until the last one has entered ------------------------------ */

static void barrier_timing(void) {
    part = "5: barrier timing";
    int64_t *all = malloc(sizeof(int64_t) * 2 * size);
    CHECK(all);
    for (long j = 0; j < 6; j++) {
        at_step = j;
        /* Rounds 0-2: every rank sleeps 3 ms times its place in a rotation; 3-5: one rank
         * (another each time) sleeps 5 ms. */
        double ms = j < 3 ? 3.0 * (double)((rank + j) % size)
                          : (rank == (int)((j * 5 + size - 1) % size) ? 5.0 : 0.0);
        OK(MPI_Barrier(MPI_COMM_WORLD));
        sleep_ms(ms);
        int64_t t[2];
        t[0] = now_ns();
        OK(MPI_Barrier(MPI_COMM_WORLD));
        t[1] = now_ns();
        OK(MPI_Allgather(t, 2, MPI_INT64_T, all, 2, MPI_INT64_T, MPI_COMM_WORLD));
        int64_t last_in = all[0], first_out = all[1];
        int who_in = 0, who_out = 0;
        for (int r = 0; r < size; r++) {
            if (all[2 * r] > last_in)
                last_in = all[2 * r], who_in = r;
            if (all[2 * r + 1] < first_out)
                first_out = all[2 * r + 1], who_out = r;
        }
        EXPECT(first_out >= last_in,
               "rank %d left the barrier %.3f ms before rank %d entered it", who_out,
               (double)(last_in - first_out) / 1e6, who_in);
    }
    free(all);
}

/* ---- 6: many communicators, freed in another order and made again ---------------------------- */

#define NCHURN 17 /* communicators made at once: more than the 16 shared slots */
#define NNEW 4     /* of them freed, and made again with other members, while the rest live */

struct churn {
    MPI_Comm c;
    int n;        /* members, 0 where this rank is not one */
    int *members; /* world ranks in rank order */
};

/* Communicator j of generation g: a dup of the world, splits into 2 or 3 colours with reversed or
 * permuted (tied) keys, a split that leaves ranks out, or a dup of the one made before. */
static void churn_make(int g, int j, struct churn *e, const struct churn *prev) {
    int *colour = malloc(sizeof(int) * size), *key = malloc(sizeof(int) * size);
    CHECK(colour && key);
    e->members = malloc(sizeof(int) * size);
    CHECK(e->members);
    int kind = (j + g) % 5;
    if (kind == 4 && prev == NULL)
        kind = 0;
    switch (kind) {
    case 0:
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &e->c));
        e->n = size;
        for (int w = 0; w < size; w++)
            e->members[w] = w;
        break;
    case 4:
        e->n = prev->n;
        memcpy(e->members, prev->members, sizeof(int) * size);
        if (prev->c == MPI_COMM_NULL)
            e->c = MPI_COMM_NULL;
        else
            OK(MPI_Comm_dup(prev->c, &e->c));
        break;
    default:
        for (int w = 0; w < size; w++) {
            if (kind == 1)
                colour[w] = (w + g + j) % 2, key[w] = size - w;
            else if (kind == 2)
                colour[w] = (w * (g + 1) + j) % 3, key[w] = (w * 5 + g) % (size > 2 ? size - 2 : 1);
            else
                colour[w] = (w + j + g) % 3 == 0 ? MPI_UNDEFINED : g % 2, key[w] = -w;
        }
        e->c = split_checked(colour, key, e->members, &e->n);
    }
    if (e->c != MPI_COMM_NULL) {
        int cs, cr;
        OK(MPI_Comm_size(e->c, &cs));
        OK(MPI_Comm_rank(e->c, &cr));
        EXPECT(cs == e->n && e->members[cr] == rank, "communicator %d of generation %d", j, g);
    }
    free(colour);
    free(key);
}

static void churn_free(struct churn *e) {
    if (e->c != MPI_COMM_NULL)
        OK(MPI_Comm_free(&e->c));
    CHECK(e->c == MPI_COMM_NULL);
    free(e->members);
    e->members = NULL;
}

/* `ops` of: a Bcast (from a rotating root: the value tells whether its rank is the right world
 * rank), an Allreduce (a sum of values from each member's world rank: the members must be the
 * right ones; or the matrix product, which also shows the rank order) and a Barrier, in a
 * rotating order (so that each kind is sometimes a communicator's first collective). */
static void churn_use(struct churn *e, long tag, int ops) {
    if (e->c == MPI_COMM_NULL)
        return;
    at_step = tag;
    int cr, n = e->n;
    OK(MPI_Comm_rank(e->c, &cr));
    static const int CC[] = {1, 3, 17, 255, 1024};
    int v[4 * BIG], s[4 * BIG];
    for (int o = 0; o < ops; o++)
        switch ((tag + o) % 3) {
        case 0: {
            int cnt = CC[tag % 5], root = (int)(tag % n);
            for (int k = 0; k < cnt; k++)
                v[k] = cr == root ? ival(T_CHURN, tag, rank, k) : -1;
            OK(MPI_Bcast(v, cnt, MPI_INT, root, e->c));
            for (int k = 0; k < cnt; k++)
                EXPECT(v[k] == ival(T_CHURN, tag, e->members[root], k),
                       "bcast [%d] of %d from rank %d (world %d): %d", k, cnt, root,
                       e->members[root], v[k]);
            break;
        }
        case 1: {
            int cnt = CC[(tag + 2) % 5];
            if (h4(T_CHURN, (uint64_t)tag, 0, 0) & 1) {
                for (int k = 0; k < cnt; k++)
                    v[k] = ival(T_CHURN + 1, tag, rank, k), s[k] = -1;
                OK(MPI_Allreduce(v, s, cnt, MPI_INT, MPI_SUM, e->c));
                for (int k = 0; k < cnt; k++) {
                    int want = 0;
                    for (int c = 0; c < n; c++)
                        want += ival(T_CHURN + 1, tag, e->members[c], k);
                    EXPECT(s[k] == want, "allreduce sum [%d] of %d: %d, want %d", k, cnt, s[k],
                           want);
                }
            } else {
                cnt = (cnt + 3) / 4; /* 1, 1, 5, 64 or 256 matrices: up to 4 KiB */
                for (int k = 0; k < cnt; k++)
                    mat_of(tag, rank, k, v + 4 * k), s[4 * k] = -1;
                OK(MPI_Allreduce(v, s, cnt, mat, matmul, e->c));
                for (int k = 0; k < cnt; k++) {
                    int want[4];
                    mat_product(tag, e->members, n, k, want);
                    EXPECT(memcmp(s + 4 * k, want, sizeof want) == 0,
                           "allreduce matmul [%d] of %d: {%d %d %d %d}, want {%d %d %d %d}", k,
                           cnt, s[4 * k], s[4 * k + 1], s[4 * k + 2], s[4 * k + 3], want[0],
                           want[1], want[2], want[3]);
                }
            }
            break;
        }
        default:
            OK(MPI_Barrier(e->c));
        }
}

static void churn(void) {
    part = "6: communicator churn";
    struct churn a[NCHURN], b[NNEW];
    double start = MPI_Wtime();
    for (int t = 0; keep_going(MPI_COMM_WORLD, t, 1, 5, start, 2.0); t++) {
        /* Seventeen at once, each used once (its first collective) in the order made. */
        for (int j = 0; j < NCHURN; j++)
            churn_make(2 * t, j, &a[j], j ? &a[j - 1] : NULL);
        for (int j = 0; j < NCHURN; j++)
            churn_use(&a[j], 1000L * t + j, 1);
        /* Some of them freed, in a shuffled order; new ones (other members) made while the rest
         * live. */
        int dead[NCHURN] = {0};
        for (int j = 0; j < NNEW; j++) {
            int x = (j * 7 + 3 * t) % NCHURN;
            churn_free(&a[x]);
            dead[x] = 1;
        }
        for (int j = 0; j < NNEW; j++)
            churn_make(2 * t + 1, j, &b[j], j ? &b[j - 1] : NULL);
        /* All seventeen alive used (bcast, allreduce and barrier), new and old interleaved, in an
         * order unlike the making. */
        for (int j = NCHURN - 1; j >= 0; j--) {
            if (j < NNEW)
                churn_use(&b[NNEW - 1 - j], 1000L * t + 100 + j, 3);
            if (!dead[j])
                churn_use(&a[j], 1000L * t + 200 + j, 3);
        }
        for (int j = 0; j < NCHURN; j++) {
            int x = (j * 5 + t) % NCHURN;
            if (!dead[x])
                churn_free(&a[x]);
        }
        for (int j = NNEW - 1; j >= 0; j--)
            churn_free(&b[(j + t) % NNEW]);
    }
}

/* ---- 7: sleepy ranks ------------------------------------------------------------------------- */

static void sleepy(void) {
    part = "7: sleepy ranks";
    int v[17], s[17];
    double start = MPI_Wtime();
    for (long i = 0; keep_going(MPI_COMM_WORLD, i, size < 50 ? size : 50, 50, start, 1.0);
         i++) {
        at_step = i;
        int sleeper = (int)(i % size), n = COUNTS[1 + i % 3]; /* 1, 3, 17 */
        for (int k = 0; k < n; k++)
            v[k] = ival(T_SLEEPY, i, rank, k), s[k] = -1;
        if (rank == sleeper)
            sleep_ms(2);
        OK(MPI_Allreduce(v, s, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++) {
            int want = 0;
            for (int r = 0; r < size; r++)
                want += ival(T_SLEEPY, i, r, k);
            EXPECT(s[k] == want, "allreduce [%d] of %d after rank %d slept: %d, want %d", k, n,
                   sleeper, s[k], want);
        }
        /* Reduce to a root that sleeps first: the others go on to the Bcast meanwhile. */
        int root = (int)((i + 1) % size);
        for (int k = 0; k < n; k++)
            v[k] = ival(T_SLEEPY + 2, i, rank, k), s[k] = -1;
        if (rank == root)
            sleep_ms(2);
        OK(MPI_Reduce(v, s, n, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
        if (rank == root)
            for (int k = 0; k < n; k++) {
                int want = 0;
                for (int r = 0; r < size; r++)
                    want += ival(T_SLEEPY + 2, i, r, k);
                EXPECT(s[k] == want, "reduce [%d] of %d at %d after it slept: %d, want %d", k, n,
                       root, s[k], want);
            }
        /* The root sleeps every other time; otherwise the rank after it does. */
        root = (int)((i / 2) % size);
        sleeper = i % 2 ? root : (root + 1) % size;
        for (int k = 0; k < n; k++)
            v[k] = rank == root ? ival(T_SLEEPY + 1, i, root, k) : -1;
        if (rank == sleeper)
            sleep_ms(2);
        OK(MPI_Bcast(v, n, MPI_INT, root, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++)
            EXPECT(v[k] == ival(T_SLEEPY + 1, i, root, k),
                   "bcast [%d] of %d from %d after rank %d slept: %d", k, n, root, sleeper, v[k]);
    }
}

/* ---- 8: a bcast root that races ahead -------------------------------------------------------- */

/* Rank 0 of c (world rank root_world) sends 200 small values in a row; the others sleep 1 ms
 * before every 20th receive (all at once, or staggered by rank). */
static void racing_root(MPI_Comm c, int root_world, int staggered) {
    int cr, root = 0;
    OK(MPI_Comm_rank(c, &cr));
    int v[4];
    for (long j = 0; j < 200; j++) {
        at_step = j;
        int cnt = 1 + (int)(j % 4);
        for (int k = 0; k < cnt; k++)
            v[k] = cr == root ? ival(T_RACE, j, root_world, k) : -1;
        if (cr != root && (staggered ? (j + cr) % 20 == 0 : j % 20 == 19))
            sleep_ms(1);
        OK(MPI_Bcast(v, cnt, MPI_INT, root, c));
        for (int k = 0; k < cnt; k++)
            EXPECT(v[k] == ival(T_RACE, j, root_world, k), "bcast %ld, [%d] of %d: %d", j, k, cnt,
                   v[k]);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    rank = world_rank(), size = world_size();
    OK(MPI_Op_create(matmul_op, 0, &matmul));
    OK(MPI_Op_create(vsum_op, 1, &vsum));
    OK(MPI_Op_create(vsum_op, 0, &vsum_nc));
    OK(MPI_Type_contiguous(4, MPI_INT, &mat));
    OK(MPI_Type_commit(&mat));

    /* The standard does not promise the arguments to every process: rank 0's decide. */
    full = argc > 1 && strcmp(argv[1], "full") == 0;
    OK(MPI_Bcast(&full, 1, MPI_INT, 0, MPI_COMM_WORLD));
    tight_loop();
    part3();
    derived();
    barrier_timing();
    churn();
    sleepy();

    part = "8: racing bcast root";
    racing_root(MPI_COMM_WORLD, 0, 0);
    /* Again with the world's last rank as the root (rank 0 of a reversed communicator), and the
     * slow ranks staggered. */
    MPI_Comm rev;
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
    racing_root(rev, size - 1, 1);
    OK(MPI_Comm_free(&rev));

    OK(MPI_Op_free(&matmul));
    OK(MPI_Op_free(&vsum));
    OK(MPI_Op_free(&vsum_nc));
    OK(MPI_Type_free(&mat));
    pass("coll_shm");
    return 0;
}
