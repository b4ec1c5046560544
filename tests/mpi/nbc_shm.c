/* Short non-blocking collectives on the ranks of one host (MPI 3.1, 5.12): MPI_Ibarrier,
 * MPI_Ibcast, MPI_Ireduce and MPI_Iallreduce, each giving its blocking twin's result, on
 * MPI_COMM_WORLD, a communicator split with its ranks reversed, and a duplicate:
 * - several of every kind in flight at once on one communicator, started in the same order
 *   everywhere (MPI's rule) and completed in a different order on different ranks;
 * - long runs of them (each buffer of the implementation used again and again), interleaved
 *   with blocking collectives on the same communicator;
 * - a non-commutative user operation reduced in rank order, MPI_IN_PLACE, a strided datatype,
 *   zero counts, and sizes on both sides of 4 KiB;
 * - an MPI_Ibarrier does not complete before every rank has started it;
 * - a rank that starts late: the others' tests keep saying not yet, then all complete.
 * Every value is checked against a serial computation. */
#include "check.h"
#include <string.h>
#include <unistd.h>

static int wrank;

/* Element k of rank r's contribution to step i. */
static int ival(int i, int r, int k) { return (int)(h4(71, (uint64_t)i, (uint64_t)r, (uint64_t)k) % 100003) - 50000; }

/* 2x2 integer matrices, multiplied in rank order: not commutative. */
static void matmul(void *in_, void *inout_, int *len, MPI_Datatype *t) {
    (void)t;
    int *a = in_, *b = inout_;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c0 = a[0] * b[0] + a[1] * b[2], c1 = a[0] * b[1] + a[1] * b[3];
        int c2 = a[2] * b[0] + a[3] * b[2], c3 = a[2] * b[1] + a[3] * b[3];
        b[0] = c0, b[1] = c1, b[2] = c2, b[3] = c3;
    }
}

/* Rank r's matrix for element k: [[1, r + k], [0, 1]] (a product of them sums the corners)
 * scaled on the diagonal so order matters: [[1, r + k], [0, 2]]. */
static void mat_of(int r, int k, int *m) { m[0] = 1, m[1] = (r + k) % 7, m[2] = 0, m[3] = 2; }

/* The rank-ordered product m(0) m(1) ... m(n-1) for element k. */
static void mat_product(int n, int k, int *out) {
    int acc[4] = {1, 0, 0, 1};
    for (int r = 0; r < n; r++) {
        int m[4];
        mat_of(r, k, m);
        int len = 1;
        /* acc = acc * m: matmul computes inout = in * inout. */
        matmul(acc, m, &len, NULL);
        memcpy(acc, m, sizeof acc);
    }
    memcpy(out, acc, sizeof acc);
}

enum { KINDS = 6, MAXN = 1400 };
static const int COUNTS[] = {0, 1, 7, 500, 1100};

/* Several collectives in flight on c, completed in an order that depends on the rank. */
static void in_flight(MPI_Comm c, MPI_Op mm, MPI_Datatype mat, int step) {
    int q, n;
    MPI_Comm_rank(c, &q);
    MPI_Comm_size(c, &n);
    int cnt = COUNTS[step % 5];
    int root = (step * 3 + 1) % n;
    static int bc[MAXN], sum[MAXN], inpl[MAXN], red[MAXN], mine[MAXN], mats[4 * MAXN], prod[4 * MAXN];
    static double dmine[MAXN], dmax[MAXN];
    MPI_Request r[KINDS];
    for (int k = 0; k < cnt; k++) {
        bc[k] = q == root ? ival(step, root, k) : -7;
        mine[k] = ival(step, q, k);
        inpl[k] = ival(step + 1, q, k);
        dmine[k] = (double)ival(step + 2, q, k) * 0.25;
        mat_of(q, k, mats + 4 * k);
        sum[k] = red[k] = -1;
    }
    OK(MPI_Ibarrier(c, &r[0]));
    OK(MPI_Ibcast(bc, cnt, MPI_INT, root, c, &r[1]));
    OK(MPI_Iallreduce(mine, sum, cnt, MPI_INT, MPI_SUM, c, &r[2]));
    OK(MPI_Iallreduce(MPI_IN_PLACE, inpl, cnt, MPI_INT, MPI_MIN, c, &r[3]));
    OK(MPI_Ireduce(dmine, dmax, cnt, MPI_DOUBLE, MPI_MAX, root, c, &r[4]));
    OK(MPI_Iallreduce(mats, prod, cnt > 1000 ? 1000 : cnt, mat, mm, c, &r[5]));
    /* Even ranks wait last-first, odd ranks one by one from the first, every third step with
     * MPI_Waitany. */
    if (step % 3 == 2) {
        for (int left = KINDS; left > 0; left--) {
            int idx;
            OK(MPI_Waitany(KINDS, r, &idx, MPI_STATUS_IGNORE));
            CHECK(idx != MPI_UNDEFINED);
        }
    } else if (wrank % 2 == 0) {
        for (int i = KINDS - 1; i >= 0; i--)
            OK(MPI_Wait(&r[i], MPI_STATUS_IGNORE));
    } else {
        for (int i = 0; i < KINDS; i++)
            OK(MPI_Wait(&r[i], MPI_STATUS_IGNORE));
    }
    for (int i = 0; i < KINDS; i++)
        CHECK(r[i] == MPI_REQUEST_NULL);
    for (int k = 0; k < cnt; k++) {
        CHECK(bc[k] == ival(step, root, k));
        long s = 0;
        int mn = ival(step + 1, 0, k);
        double dm = (double)ival(step + 2, 0, k) * 0.25;
        for (int x = 0; x < n; x++) {
            s += ival(step, x, k);
            if (ival(step + 1, x, k) < mn)
                mn = ival(step + 1, x, k);
            if ((double)ival(step + 2, x, k) * 0.25 > dm)
                dm = (double)ival(step + 2, x, k) * 0.25;
        }
        CHECK(sum[k] == (int)s);
        CHECK(inpl[k] == mn);
        if (q == root)
            CHECK(dmax[k] == dm);
        if (k < 1000) {
            int want[4];
            mat_product(n, k, want);
            CHECK(memcmp(prod + 4 * k, want, sizeof want) == 0);
        }
    }
}

/* A strided datatype broadcast without blocking: every other int of 2 * cnt. */
static void strided(MPI_Comm c, int step) {
    int q, n;
    MPI_Comm_rank(c, &q);
    MPI_Comm_size(c, &n);
    int cnt = 1 + step % 300, root = step % n;
    MPI_Datatype v;
    OK(MPI_Type_vector(cnt, 1, 2, MPI_INT, &v));
    OK(MPI_Type_commit(&v));
    int buf[600];
    for (int k = 0; k < 2 * cnt; k++)
        buf[k] = q == root ? ival(step, 9, k) : -3;
    MPI_Request r;
    OK(MPI_Ibcast(buf, 1, v, root, c, &r));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    for (int k = 0; k < 2 * cnt; k++)
        CHECK(buf[k] == (k % 2 == 0 || q == root ? ival(step, 9, k) : -3));
    OK(MPI_Type_free(&v));
}

/* Long runs: each non-blocking collective waited for at once, between blocking ones. */
static void runs(MPI_Comm c) {
    int q, n;
    MPI_Comm_rank(c, &q);
    MPI_Comm_size(c, &n);
    for (int i = 0; i < 300; i++) {
        int v = ival(i, q, 0), s = 0, b = -1, want = 0;
        for (int x = 0; x < n; x++)
            want += ival(i, x, 0);
        MPI_Request r;
        OK(MPI_Iallreduce(&v, &s, 1, MPI_INT, MPI_SUM, c, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(s == want);
        if (i % 5 == 0)
            OK(MPI_Barrier(c));
        b = q == i % n ? i : -1;
        OK(MPI_Ibcast(&b, 1, MPI_INT, i % n, c, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(b == i);
        if (i % 7 == 0) {
            int t = 0;
            OK(MPI_Allreduce(&v, &t, 1, MPI_INT, MPI_SUM, c));
            CHECK(t == want);
        }
        OK(MPI_Ibarrier(c, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
}

/* An Ibarrier does not complete before every rank started it: rank 0 starts its own only after
 * every other rank has tested theirs and told it so. */
static void barrier_waits_for_everyone(MPI_Comm c) {
    int q, n;
    MPI_Comm_rank(c, &q);
    MPI_Comm_size(c, &n);
    MPI_Request r;
    if (q == 0) {
        for (int x = 1; x < n; x++)
            OK(MPI_Recv(NULL, 0, MPI_INT, x, 5, c, MPI_STATUS_IGNORE));
        OK(MPI_Ibarrier(c, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else {
        int flag = 1;
        OK(MPI_Ibarrier(c, &r));
        for (int t = 0; t < 100; t++) {
            OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
            CHECK(!flag);
        }
        OK(MPI_Send(NULL, 0, MPI_INT, 0, 5, c));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
}

/* The last rank starts late; the others keep testing, then every result is right. */
static void late_starter(MPI_Comm c) {
    int q, n;
    MPI_Comm_rank(c, &q);
    MPI_Comm_size(c, &n);
    if (q == n - 1)
        usleep(100000);
    int v[3] = {q, 2 * q, 3 * q}, s[3] = {-1, -1, -1};
    MPI_Request r[3];
    for (int k = 0; k < 3; k++)
        OK(MPI_Iallreduce(&v[k], &s[k], 1, MPI_INT, MPI_SUM, c, &r[k]));
    int done = 0;
    MPI_Status st[3];
    while (!done)
        OK(MPI_Testall(3, r, &done, st));
    for (int k = 0; k < 3; k++)
        CHECK(s[k] == (k + 1) * n * (n - 1) / 2);
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    wrank = world_rank();
    int size = world_size();
    MPI_Op mm;
    OK(MPI_Op_create(matmul, 0, &mm));
    MPI_Datatype mat;
    OK(MPI_Type_contiguous(4, MPI_INT, &mat));
    OK(MPI_Type_commit(&mat));
    MPI_Comm rev, dup;
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - wrank, &rev));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_Comm comms[3] = {MPI_COMM_WORLD, rev, dup};
    for (int ci = 0; ci < 3; ci++) {
        for (int step = 0; step < 40; step++)
            in_flight(comms[ci], mm, mat, step);
        for (int step = 0; step < 30; step++)
            strided(comms[ci], step);
        runs(comms[ci]);
        barrier_waits_for_everyone(comms[ci]);
        late_starter(comms[ci]);
    }
    OK(MPI_Comm_free(&rev));
    OK(MPI_Comm_free(&dup));
    OK(MPI_Type_free(&mat));
    OK(MPI_Op_free(&mm));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (wrank == 0)
        printf("nbc_shm: ok\n");
    OK(MPI_Finalize());
    return 0;
}
