/* The blocking collectives (MPI-3.1 chapter 5) with results every rank can check: Barrier,
 * Bcast, Reduce, Allreduce (predefined and user operations, a non-commutative one reduced in
 * rank order), Gather(v), Scatter(v), Allgather(v), Alltoall(v,w), Reduce_scatter(_block), Scan,
 * Exscan, Reduce_local, MPI_IN_PLACE where allowed, on a derived datatype too; reductions on
 * long double keep its precision (MPI_LONG_DOUBLE, MPI_C_LONG_DOUBLE_COMPLEX, MPI_LONG_DOUBLE_INT). */
#include "check.h"
#include <stdlib.h>
#include <string.h>

/* 2x2 matrix product, not commutative: the result tells the order of the operands. */
/* Long double: each rank adds 1 + rank * 2^-60, which a double cannot hold beside 1 on x86-64
 * (where long double has a 64-bit mantissa): the sum must be the long double sum. */
static void long_double(MPI_Comm w, int rank, int n) {
    long double tiny = 1.0L / 1152921504606846976.0L; /* 2^-60 */
    long double mine = 1.0L + rank * tiny, sum = 0, want = 0, mx[2];
    for (int r = 0; r < n; r++)
        want += 1.0L + r * tiny;
    OK(MPI_Allreduce(&mine, &sum, 1, MPI_LONG_DOUBLE, MPI_SUM, w));
    CHECK(sum == want);
    OK(MPI_Allreduce(&mine, &mx[0], 1, MPI_LONG_DOUBLE, MPI_MAX, w));
    CHECK(mx[0] == 1.0L + (n - 1) * tiny);
    struct { long double v; int i; } p = {mine, rank}, best;
    OK(MPI_Allreduce(&p, &best, 1, MPI_LONG_DOUBLE_INT, MPI_MINLOC, w));
    CHECK(best.v == 1.0L && best.i == 0);
    OK(MPI_Allreduce(&p, &best, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, w));
    CHECK(best.v == mine + (n - 1 - rank) * tiny && best.i == n - 1);
    /* Complex: the product of (0 + 1i) over the ranks is i^n. */
    long double _Complex z = 1.0Li, prod;
    OK(MPI_Allreduce(&z, &prod, 1, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, w));
    long double _Complex iw = 1.0L;
    for (int r = 0; r < n; r++)
        iw *= 1.0Li;
    CHECK(prod == iw);
    long double a[2] = {1.5L, tiny}, b[2] = {2.0L, tiny};
    OK(MPI_Reduce_local(a, b, 2, MPI_LONG_DOUBLE, MPI_SUM));
    CHECK(b[0] == 3.5L && b[1] == 2 * tiny);
}

static void matmul(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                    a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), n = world_size();
    MPI_Comm w = MPI_COMM_WORLD;
    for (int i = 0; i < 3; i++)
        OK(MPI_Barrier(w));

    /* Bcast from each root, of an int array and of a strided vector. */
    for (int root = 0; root < n; root++) {
        int v[10];
        for (int i = 0; i < 10; i++)
            v[i] = rank == root ? root * 100 + i : -1;
        OK(MPI_Bcast(v, 10, MPI_INT, root, w));
        CHECK(v[0] == root * 100 && v[9] == root * 100 + 9);
    }
    MPI_Datatype every2;
    OK(MPI_Type_vector(4, 1, 2, MPI_INT, &every2));
    OK(MPI_Type_commit(&every2));
    int sv[8];
    for (int i = 0; i < 8; i++)
        sv[i] = rank == 0 ? i : -1;
    OK(MPI_Bcast(sv, 1, every2, 0, w));
    CHECK(sv[6] == 6 && (rank == 0 || sv[7] == -1));

    /* Reductions. */
    long sum = 0, expect = (long)n * (n - 1) / 2;
    long me = rank;
    OK(MPI_Reduce(&me, &sum, 1, MPI_LONG, MPI_SUM, n - 1, w));
    if (rank == n - 1)
        CHECK(sum == expect);
    double dmax;
    double dme = rank * 1.5;
    OK(MPI_Allreduce(&dme, &dmax, 1, MPI_DOUBLE, MPI_MAX, w));
    CHECK(dmax == (n - 1) * 1.5);
    int inplace[3] = {rank, 1, rank % 2};
    OK(MPI_Allreduce(MPI_IN_PLACE, inplace, 3, MPI_INT, MPI_SUM, w));
    CHECK(inplace[0] == expect && inplace[1] == n);
    int land = rank >= 0, lor = rank == 1;
    OK(MPI_Allreduce(MPI_IN_PLACE, &land, 1, MPI_INT, MPI_LAND, w));
    OK(MPI_Allreduce(MPI_IN_PLACE, &lor, 1, MPI_INT, MPI_LOR, w));
    CHECK(land == 1 && lor == (n > 1));
    unsigned bits = 1u << rank, all;
    OK(MPI_Allreduce(&bits, &all, 1, MPI_UNSIGNED, MPI_BOR, w));
    CHECK(all == (1u << n) - 1);
    /* Non-commutative: the product M_0 M_1 ... M_{n-1} of upper unit triangular matrices
     * [[1, r], [0, 1]] is [[1, sum r], [0, 1]]; with [[1, r], [0, 2]] the order shows. */
    MPI_Op mm;
    OK(MPI_Op_create(matmul, 0, &mm));
    int commute;
    OK(MPI_Op_commutative(mm, &commute));
    CHECK(!commute);
    MPI_Datatype mat;
    OK(MPI_Type_contiguous(4, MPI_INT, &mat));
    OK(MPI_Type_commit(&mat));
    int m[4] = {1, rank, 0, 2}, prod[4];
    OK(MPI_Allreduce(m, prod, 1, mat, mm, w));
    /* Product in rank order: [[1, a], [0, 2^k]] [[1, r], [0, 2]] = [[1, r + 2a], [0, 2^(k+1)]], so
     * the top-right is sum_r r * 2^(n-1-r); the other order would give another value. */
    int tr = 0;
    for (int r = 0; r < n; r++)
        tr += r * (1 << (n - 1 - r));
    CHECK(prod[0] == 1 && prod[1] == tr && prod[2] == 0 && prod[3] == (1 << n));
    OK(MPI_Op_free(&mm));
    OK(MPI_Type_free(&mat));
    CHECK(mm == MPI_OP_NULL);

    /* Gather, Gatherv (reversed, varying sizes), Scatter, Scatterv. */
    int *all_r = malloc(sizeof(int) * n * n * 2);
    int mine2[2] = {rank, rank * 10};
    OK(MPI_Gather(mine2, 2, MPI_INT, all_r, 2, MPI_INT, 0, w));
    if (rank == 0)
        for (int r = 0; r < n; r++)
            CHECK(all_r[2 * r] == r && all_r[2 * r + 1] == r * 10);
    int *counts = malloc(sizeof(int) * n), *displs = malloc(sizeof(int) * n);
    int total = 0;
    for (int r = 0; r < n; r++) {
        counts[r] = r + 1;
        total += r + 1;
    }
    for (int r = 0, d = total; r < n; r++) {
        d -= counts[r];
        displs[r] = d;
    }
    int *vmine = malloc(sizeof(int) * (rank + 1));
    for (int i = 0; i <= rank; i++)
        vmine[i] = rank;
    int *vall = malloc(sizeof(int) * total);
    OK(MPI_Gatherv(vmine, rank + 1, MPI_INT, vall, counts, displs, MPI_INT, n - 1, w));
    if (rank == n - 1)
        for (int r = 0; r < n; r++)
            CHECK(vall[displs[r]] == r && vall[displs[r] + r] == r);
    int sc[2];
    int *src = malloc(sizeof(int) * 2 * n);
    for (int i = 0; i < 2 * n; i++)
        src[i] = i;
    OK(MPI_Scatter(src, 2, MPI_INT, sc, 2, MPI_INT, 0, w));
    CHECK(sc[0] == 2 * rank && sc[1] == 2 * rank + 1);
    for (int i = 0; i < total; i++)
        vall[i] = i;
    OK(MPI_Scatterv(vall, counts, displs, MPI_INT, vmine, rank + 1, MPI_INT, 0, w));
    CHECK(vmine[0] == displs[rank] && vmine[rank] == displs[rank] + rank);

    /* Allgather (in place) and Allgatherv. */
    int *ag = malloc(sizeof(int) * n);
    ag[rank] = rank * 7;
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ag, 1, MPI_INT, w));
    for (int r = 0; r < n; r++)
        CHECK(ag[r] == r * 7);
    for (int i = 0; i <= rank; i++)
        vmine[i] = rank;
    OK(MPI_Allgatherv(vmine, rank + 1, MPI_INT, vall, counts, displs, MPI_INT, w));
    for (int r = 0; r < n; r++)
        CHECK(vall[displs[r]] == r && vall[displs[r] + r] == r);

    /* Alltoall, Alltoallv, Alltoallw. */
    int *a2a = malloc(sizeof(int) * n), *a2b = malloc(sizeof(int) * n);
    for (int r = 0; r < n; r++)
        a2a[r] = rank * 100 + r;
    OK(MPI_Alltoall(a2a, 1, MPI_INT, a2b, 1, MPI_INT, w));
    for (int r = 0; r < n; r++)
        CHECK(a2b[r] == r * 100 + rank);
    /* Rank r sends r+1 copies of its rank to each; receives (s+1) from s. */
    int *scnt = malloc(sizeof(int) * n), *sdis = malloc(sizeof(int) * n);
    int *rcnt = malloc(sizeof(int) * n), *rdis = malloc(sizeof(int) * n);
    int *sbuf = malloc(sizeof(int) * n * (rank + 1)), *rbuf = malloc(sizeof(int) * total);
    for (int r = 0; r < n; r++) {
        scnt[r] = rank + 1;
        sdis[r] = r * (rank + 1);
        rcnt[r] = r + 1;
        rdis[r] = r == 0 ? 0 : rdis[r - 1] + rcnt[r - 1];
    }
    for (int i = 0; i < n * (rank + 1); i++)
        sbuf[i] = rank;
    OK(MPI_Alltoallv(sbuf, scnt, sdis, MPI_INT, rbuf, rcnt, rdis, MPI_INT, w));
    for (int r = 0; r < n; r++)
        CHECK(rbuf[rdis[r]] == r && rbuf[rdis[r] + r] == r);
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * n);
    int *ones = malloc(sizeof(int) * n), *bd = malloc(sizeof(int) * n);
    for (int r = 0; r < n; r++) {
        types[r] = MPI_INT;
        ones[r] = 1;
        bd[r] = r * (int)sizeof(int);
    }
    OK(MPI_Alltoallw(a2a, ones, bd, types, a2b, ones, bd, types, w));
    for (int r = 0; r < n; r++)
        CHECK(a2b[r] == r * 100 + rank);

    /* Reduce_scatter_block, Reduce_scatter. */
    int *rs = malloc(sizeof(int) * total);
    for (int i = 0; i < n; i++)
        rs[i] = i + rank;
    int blk;
    OK(MPI_Reduce_scatter_block(rs, &blk, 1, MPI_INT, MPI_SUM, w));
    CHECK(blk == n * rank + expect);
    for (int i = 0; i < total; i++)
        rs[i] = 1;
    OK(MPI_Reduce_scatter(rs, vmine, counts, MPI_INT, MPI_SUM, w));
    CHECK(vmine[0] == n && vmine[rank] == n);

    /* Scan and Exscan. */
    int pre, ex = -7;
    OK(MPI_Scan(&rank, &pre, 1, MPI_INT, MPI_SUM, w));
    CHECK(pre == rank * (rank + 1) / 2);
    OK(MPI_Exscan(&rank, &ex, 1, MPI_INT, MPI_SUM, w));
    if (rank > 0)
        CHECK(ex == rank * (rank - 1) / 2);
    int mx = rank;
    OK(MPI_Scan(MPI_IN_PLACE, &mx, 1, MPI_INT, MPI_MAX, w));
    CHECK(mx == rank);

    /* Reduce_local. */
    int lin[3] = {1, 2, 3}, lio[3] = {10, 20, 30};
    OK(MPI_Reduce_local(lin, lio, 3, MPI_INT, MPI_PROD));
    CHECK(lio[0] == 10 && lio[1] == 40 && lio[2] == 90);

    /* On a split communicator too. */
    MPI_Comm half;
    OK(MPI_Comm_split(w, rank % 2, rank, &half));
    int hs, hsum;
    OK(MPI_Comm_size(half, &hs));
    OK(MPI_Allreduce(&rank, &hsum, 1, MPI_INT, MPI_SUM, half));
    int want = 0;
    for (int r = rank % 2; r < n; r += 2)
        want += r;
    CHECK(hsum == want);
    OK(MPI_Comm_free(&half));
    OK(MPI_Type_free(&every2));
    long_double(w, rank, n);
    pass("collectives");
    return 0;
}
