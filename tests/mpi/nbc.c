/* Non-blocking collectives and MPI_Comm_idup (MPI 3.1, 5.12 and 6.4.2): each I-collective gives
 * the result of its blocking twin; several are in flight at once and complete in any order;
 * they progress while a rank tests; a dynamic sparse exchange (Hoefler's NBX: synchronous
 * sends, then a barrier started once they are matched) terminates; MPI_Comm_idup makes a
 * working communicator with the attributes copied, also when interleaved with point-to-point
 * messages that a blocking MPI_Comm_dup would deadlock on, and when two of them on different
 * communicators are started in different orders on different ranks. */
#include "check.h"
#include <unistd.h>
#include <string.h>

static int rank, size;

static void wait1(MPI_Request *r) {
    MPI_Status st;
    OK(MPI_Wait(r, &st));
    CHECK(*r == MPI_REQUEST_NULL);
}

static void every_collective(void) {
    MPI_Request r;
    int n = size, root = size - 1;
    int *all = malloc(sizeof(int) * n * 4), *got = malloc(sizeof(int) * n * 4);
    int *counts = malloc(sizeof(int) * n), *displs = malloc(sizeof(int) * n);
    CHECK(all && got && counts && displs);

    OK(MPI_Ibarrier(MPI_COMM_WORLD, &r));
    wait1(&r);

    int v = rank == root ? 4242 : -1;
    OK(MPI_Ibcast(&v, 1, MPI_INT, root, MPI_COMM_WORLD, &r));
    wait1(&r);
    CHECK(v == 4242);

    int mine[2] = {rank + 1, 10 * rank}, sum[2] = {0, 0};
    OK(MPI_Ireduce(mine, sum, 2, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD, &r));
    wait1(&r);
    if (rank == root)
        CHECK(sum[0] == n * (n + 1) / 2 && sum[1] == 10 * n * (n - 1) / 2);

    int mx = -1;
    OK(MPI_Iallreduce(&rank, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r));
    wait1(&r);
    CHECK(mx == n - 1);
    int inplace = rank;
    OK(MPI_Iallreduce(MPI_IN_PLACE, &inplace, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
    wait1(&r);
    CHECK(inplace == n * (n - 1) / 2);

    OK(MPI_Igather(&rank, 1, MPI_INT, all, 1, MPI_INT, root, MPI_COMM_WORLD, &r));
    wait1(&r);
    if (rank == root)
        for (int i = 0; i < n; i++)
            CHECK(all[i] == i);

    for (int i = 0; i < n; i++)
        all[i] = 100 + i;
    int one = -1;
    OK(MPI_Iscatter(all, 1, MPI_INT, &one, 1, MPI_INT, root, MPI_COMM_WORLD, &r));
    wait1(&r);
    CHECK(one == 100 + rank);

    OK(MPI_Iallgather(&rank, 1, MPI_INT, got, 1, MPI_INT, MPI_COMM_WORLD, &r));
    wait1(&r);
    for (int i = 0; i < n; i++)
        CHECK(got[i] == i);

    for (int i = 0; i < n; i++)
        all[i] = rank * 1000 + i;
    OK(MPI_Ialltoall(all, 1, MPI_INT, got, 1, MPI_INT, MPI_COMM_WORLD, &r));
    wait1(&r);
    for (int i = 0; i < n; i++)
        CHECK(got[i] == i * 1000 + rank);

    /* Rank i contributes i + 1 ints, all equal to i. */
    int *vals = malloc(sizeof(int) * (n + 1));
    for (int i = 0; i <= rank; i++)
        vals[i] = rank;
    int total = 0;
    for (int i = 0; i < n; i++) {
        counts[i] = i + 1;
        displs[i] = total;
        total += i + 1;
    }
    int *big = malloc(sizeof(int) * total);
    OK(MPI_Igatherv(vals, rank + 1, MPI_INT, big, counts, displs, MPI_INT, root, MPI_COMM_WORLD,
                    &r));
    wait1(&r);
    if (rank == root)
        for (int i = 0; i < n; i++)
            for (int k = 0; k < counts[i]; k++)
                CHECK(big[displs[i] + k] == i);
    memset(big, 0xff, sizeof(int) * total);
    OK(MPI_Iallgatherv(vals, rank + 1, MPI_INT, big, counts, displs, MPI_INT, MPI_COMM_WORLD, &r));
    wait1(&r);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < counts[i]; k++)
            CHECK(big[displs[i] + k] == i);
    if (rank == root)
        for (int i = 0; i < total; i++)
            big[i] = 7000 + i;
    int *part = malloc(sizeof(int) * (n + 1));
    OK(MPI_Iscatterv(big, counts, displs, MPI_INT, part, rank + 1, MPI_INT, root, MPI_COMM_WORLD,
                     &r));
    wait1(&r);
    for (int k = 0; k <= rank; k++)
        CHECK(part[k] == 7000 + displs[rank] + k);

    /* Alltoallv: rank s sends s + 1 ints to every rank. */
    int *sc = malloc(sizeof(int) * n), *sd = malloc(sizeof(int) * n);
    int *rc = malloc(sizeof(int) * n), *rd = malloc(sizeof(int) * n);
    int *sb = malloc(sizeof(int) * n * (rank + 1)), *rb = malloc(sizeof(int) * total);
    for (int i = 0; i < n; i++) {
        sc[i] = rank + 1;
        sd[i] = i * (rank + 1);
        rc[i] = i + 1;
        rd[i] = displs[i];
        for (int k = 0; k <= rank; k++)
            sb[i * (rank + 1) + k] = rank * 100 + i;
    }
    OK(MPI_Ialltoallv(sb, sc, sd, MPI_INT, rb, rc, rd, MPI_INT, MPI_COMM_WORLD, &r));
    wait1(&r);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < rc[i]; k++)
            CHECK(rb[rd[i] + k] == i * 100 + rank);
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * n);
    int *bsd = malloc(sizeof(int) * n), *brd = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) {
        types[i] = MPI_INT;
        bsd[i] = sd[i] * (int)sizeof(int);
        brd[i] = rd[i] * (int)sizeof(int);
    }
    memset(rb, 0, sizeof(int) * total);
    OK(MPI_Ialltoallw(sb, sc, bsd, types, rb, rc, brd, types, MPI_COMM_WORLD, &r));
    wait1(&r);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < rc[i]; k++)
            CHECK(rb[rd[i] + k] == i * 100 + rank);

    /* Reduce_scatter: element i of every rank's vector is i; rank r gets counts[r] sums. */
    int *vec = malloc(sizeof(int) * total), *out = malloc(sizeof(int) * (n + 1));
    for (int i = 0; i < total; i++)
        vec[i] = i;
    OK(MPI_Ireduce_scatter(vec, out, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
    wait1(&r);
    for (int k = 0; k < counts[rank]; k++)
        CHECK(out[k] == n * (displs[rank] + k));
    OK(MPI_Ireduce_scatter_block(vec, out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
    wait1(&r);
    CHECK(out[0] == n * rank);

    int scan = -1, exscan = -1;
    OK(MPI_Iscan(&mine[0], &scan, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
    wait1(&r);
    CHECK(scan == (rank + 1) * (rank + 2) / 2);
    OK(MPI_Iexscan(&mine[0], &exscan, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
    wait1(&r);
    if (rank > 0)
        CHECK(exscan == rank * (rank + 1) / 2);

    free(all), free(got), free(counts), free(displs), free(vals), free(big), free(part);
    free(sc), free(sd), free(rc), free(rd), free(sb), free(rb), free(types), free(bsd), free(brd);
    free(vec), free(out);
}

/* Several in flight at once, completed last first; the root differs. */
static void many_in_flight(void) {
    enum { K = 8 };
    MPI_Request r[K + 2];
    int b[K], s[K];
    for (int k = 0; k < K; k++) {
        int root = k % size;
        b[k] = rank == root ? 500 + k : -1;
        OK(MPI_Ibcast(&b[k], 1, MPI_INT, root, MPI_COMM_WORLD, &r[k]));
    }
    OK(MPI_Ibarrier(MPI_COMM_WORLD, &r[K]));
    int one = 1;
    OK(MPI_Iallreduce(&one, &s[0], 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[K + 1]));
    for (int k = K + 1; k >= 0; k--)
        wait1(&r[k]);
    for (int k = 0; k < K; k++)
        CHECK(b[k] == 500 + k);
    CHECK(s[0] == size);
}

/* Progress while testing: the last rank joins late; the others test in a loop. */
static void progress_by_test(void) {
    MPI_Request r;
    int x = rank, y = -1, flag = 0;
    if (rank == size - 1) {
        double t = MPI_Wtime();
        while (MPI_Wtime() - t < 0.2)
            ;
    }
    OK(MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &r));
    long tests = 0;
    while (!flag) {
        OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
        tests++;
    }
    CHECK(y == 0);
    CHECK(r == MPI_REQUEST_NULL);
}

/* NBX: each rank sends to a few others (unknown to them), with synchronous sends; once its own
 * are matched it enters a barrier; it receives whatever comes until the barrier completes. */
static void nbx(void) {
    int targets[3] = {(rank + 1) % size, (rank + 3) % size, (rank * 7 + 2) % size};
    int payload[3];
    MPI_Request sends[3];
    int nsend = 0;
    for (int i = 0; i < 3; i++) {
        if (targets[i] == rank)
            continue;
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= targets[j] == targets[i];
        if (dup)
            continue;
        payload[nsend] = rank * 10 + i;
        OK(MPI_Issend(&payload[nsend], 1, MPI_INT, targets[i], 77, MPI_COMM_WORLD, &sends[nsend]));
        nsend++;
    }
    MPI_Request barrier = MPI_REQUEST_NULL;
    int got = 0, done = 0, barrier_started = 0;
    while (!done) {
        int flag;
        MPI_Status st;
        OK(MPI_Iprobe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &flag, &st));
        if (flag) {
            int m;
            OK(MPI_Recv(&m, 1, MPI_INT, st.MPI_SOURCE, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(m / 10 == st.MPI_SOURCE);
            got++;
        }
        if (!barrier_started) {
            int all;
            MPI_Status sts[3];
            OK(MPI_Testall(nsend, sends, &all, sts));
            if (all) {
                OK(MPI_Ibarrier(MPI_COMM_WORLD, &barrier));
                barrier_started = 1;
            }
        } else {
            OK(MPI_Test(&barrier, &done, MPI_STATUS_IGNORE));
        }
    }
    /* Everyone's count of messages received adds up to everyone's count sent. */
    int sent_total = 0, got_total = 0;
    OK(MPI_Allreduce(&nsend, &sent_total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    OK(MPI_Allreduce(&got, &got_total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sent_total == got_total);
}

static int copies = 0;
static int copy_fn(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag) {
    (void)c, (void)k, (void)extra;
    copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static void idup(void) {
    /* A working duplicate, with an attribute copied. */
    int key, value = 99;
    OK(MPI_Comm_create_keyval(copy_fn, MPI_COMM_NULL_DELETE_FN, &key, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, key, &value));
    MPI_Comm d;
    MPI_Request r;
    OK(MPI_Comm_idup(MPI_COMM_WORLD, &d, &r));
    wait1(&r);
    int result, s, *attr, flag;
    OK(MPI_Comm_compare(MPI_COMM_WORLD, d, &result));
    CHECK(result == MPI_CONGRUENT);
    OK(MPI_Comm_get_attr(d, key, &attr, &flag));
    CHECK(flag && attr == &value && copies == 1);
    OK(MPI_Allreduce(&rank, &s, 1, MPI_INT, MPI_SUM, d));
    CHECK(s == size * (size - 1) / 2);

    /* Interleaved with point-to-point messages: rank 0 starts the duplication and then sends;
     * rank 1 receives first and starts it afterwards. */
    MPI_Comm d2;
    if (rank == 0) {
        OK(MPI_Comm_idup(d, &d2, &r));
        OK(MPI_Send(&rank, 1, MPI_INT, 1, 5, MPI_COMM_WORLD));
    } else if (rank == 1) {
        int m;
        OK(MPI_Recv(&m, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Comm_idup(d, &d2, &r));
    } else {
        OK(MPI_Comm_idup(d, &d2, &r));
    }
    wait1(&r);

    /* Two at once on different communicators, started in different orders. */
    MPI_Comm e1, e2;
    MPI_Request rr[2];
    if (rank % 2 == 0) {
        OK(MPI_Comm_idup(d, &e1, &rr[0]));
        OK(MPI_Comm_idup(d2, &e2, &rr[1]));
    } else {
        OK(MPI_Comm_idup(d2, &e2, &rr[1]));
        OK(MPI_Comm_idup(d, &e1, &rr[0]));
    }
    MPI_Status sts[8];
    OK(MPI_Waitall(2, rr, sts));
    /* Four communicators, each with its own context: the same tag on each arrives apart. */
    MPI_Comm cs[4] = {d, d2, e1, e2};
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    MPI_Request q[8];
    int in[4], outv[4];
    for (int i = 0; i < 4; i++) {
        outv[i] = rank * 10 + i;
        OK(MPI_Irecv(&in[i], 1, MPI_INT, from, 0, cs[i], &q[i]));
    }
    for (int i = 3; i >= 0; i--)
        OK(MPI_Isend(&outv[i], 1, MPI_INT, peer, 0, cs[i], &q[4 + i]));
    OK(MPI_Waitall(8, q, sts));
    for (int i = 0; i < 4; i++)
        CHECK(in[i] == from * 10 + i);
    for (int i = 0; i < 4; i++)
        OK(MPI_Comm_free(&cs[i]));
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, key));
    OK(MPI_Comm_free_keyval(&key));
}

/* A rank waiting on point-to-point moves its non-blocking collectives on (MPI 3.1, 3.7.4's
 * progress rule): rank 0 waits for a message that the last rank sends only once its
 * MPI_Ireduce_scatter_block has completed, which needs rank 0's later steps (to fold the
 * contributions and hand back the blocks). Once by MPI_Wait on an MPI_Irecv, once by a blocking
 * MPI_Recv. */
static void progress_while_waiting_on_point_to_point(void) {
    for (int blocking = 0; blocking < 2; blocking++) {
        int *in = malloc(sizeof(int) * size), out = -1, msg = -1;
        CHECK(in);
        for (int r = 0; r < size; r++)
            in[r] = rank * 100 + r;
        MPI_Request c, p;
        /* The others start late, so that rank 0's start cannot finish its part at once. */
        if (rank != 0)
            usleep(30000);
        OK(MPI_Ireduce_scatter_block(in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &c));
        if (rank == 0) {
            if (blocking) {
                OK(MPI_Recv(&msg, 1, MPI_INT, size - 1, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            } else {
                OK(MPI_Irecv(&msg, 1, MPI_INT, size - 1, 77, MPI_COMM_WORLD, &p));
                wait1(&p);
            }
            CHECK(msg == 4242);
            wait1(&c);
        } else {
            wait1(&c);
            if (rank == size - 1) {
                msg = 4242;
                OK(MPI_Send(&msg, 1, MPI_INT, 0, 77, MPI_COMM_WORLD));
            }
        }
        CHECK(out == 100 * size * (size - 1) / 2 + size * rank);
        free(in);
    }
}

/* A user-defined operation may call MPI functions other than communication ones (MPI-3.1
 * 5.9.5), also inside a non-blocking reduction: this one asks for its datatype's extent and
 * size, and sums. */
static void sum_asking(void *in, void *inout, int *len, MPI_Datatype *t) {
    MPI_Aint lb, ext;
    int sz;
    CHECK(MPI_Type_get_extent(*t, &lb, &ext) == MPI_SUCCESS && lb == 0 && ext == sizeof(int));
    CHECK(MPI_Type_size(*t, &sz) == MPI_SUCCESS && sz == sizeof(int));
    for (int k = 0; k < *len; k++)
        ((int *)inout)[k] += ((int *)in)[k];
}

static void user_op_calling_mpi(void) {
    MPI_Op op;
    OK(MPI_Op_create(sum_asking, 1, &op));
    for (int n = 3; n <= 3000; n *= 1000) {
        int *a = malloc(sizeof(int) * (size_t)n), *b = malloc(sizeof(int) * (size_t)n);
        CHECK(a && b);
        for (int k = 0; k < n; k++)
            a[k] = rank + k, b[k] = -1;
        MPI_Request r;
        OK(MPI_Iallreduce(a, b, n, MPI_INT, op, MPI_COMM_WORLD, &r));
        wait1(&r);
        for (int k = 0; k < n; k++)
            CHECK(b[k] == size * (size - 1) / 2 + size * k);
        OK(MPI_Ireduce(a, b, n, MPI_INT, op, size - 1, MPI_COMM_WORLD, &r));
        wait1(&r);
        if (rank == size - 1)
            for (int k = 0; k < n; k++)
                CHECK(b[k] == size * (size - 1) / 2 + size * k);
        free(a);
        free(b);
    }
    OK(MPI_Op_free(&op));
}

/* MPI_Comm_idup on one communicator and MPI_Comm_create_group on another, started in one order
 * on even ranks and the other on odd ones (legal: different communicators): the creation must
 * not wait for the duplication, which cannot finish until the even ranks start it. */
static void idup_beside_create_group(void) {
    MPI_Comm base, dup, grp;
    MPI_Group all;
    MPI_Request r;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &base));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &all));
    if (rank % 2) {
        OK(MPI_Comm_idup(base, &dup, &r));
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, all, 5, &grp));
    } else {
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, all, 5, &grp));
        OK(MPI_Comm_idup(base, &dup, &r));
    }
    wait1(&r);
    int a = -1, b = -1, cmp;
    OK(MPI_Allreduce(&rank, &a, 1, MPI_INT, MPI_SUM, dup));
    OK(MPI_Allreduce(&rank, &b, 1, MPI_INT, MPI_SUM, grp));
    CHECK(a == size * (size - 1) / 2 && b == a);
    OK(MPI_Comm_compare(dup, grp, &cmp));
    CHECK(cmp == MPI_CONGRUENT);
    OK(MPI_Group_free(&all));
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&grp));
    OK(MPI_Comm_free(&base));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    rank = world_rank();
    size = world_size();
    CHECK(size >= 2);
    every_collective();
    many_in_flight();
    progress_by_test();
    nbx();
    idup();
    progress_while_waiting_on_point_to_point();
    user_op_calling_mpi();
    idup_beside_create_group();
    pass("nbc");
    return 0;
}
