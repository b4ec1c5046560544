/* Collectives at every size class: counts 0, 1, odd, and large (over the eager threshold and
 * over a pipeline's chunk), from every kind of root, on the world and on a communicator whose
 * ranks are reversed, with a commutative and a non-commutative operation; each result is
 * compared with a serial computation of the same thing. Whichever algorithm an MPI picks for a
 * size (volley: `volley info`, VOLLEY_COLL_*), the results must be these. */
#include "check.h"
#include <string.h>

static const int SIZES[] = {0, 1, 7, 1000, 40000};
#define NSIZES (int)(sizeof SIZES / sizeof SIZES[0])

/* Element k of rank r under the non-commutative op: the matrix [[1, (r + k) % 5], [0, 2]]. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    int *a = in, *b = inout;
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        int c[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                    a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, c, sizeof c);
    }
}

/* The product M_0 M_1 ... M_{m-1} of element k: [[1, sum_r ((r+k)%5) 2^(m-1-r)], [0, 2^m]]. */
static int matmul_top_right(int m, int k) {
    int tr = 0;
    for (int r = 0; r < m; r++)
        tr += ((r + k) % 5) * (1 << (m - 1 - r));
    return tr;
}

static void run(MPI_Comm c, MPI_Op mm, MPI_Datatype mat) {
    int q, m;
    OK(MPI_Comm_rank(c, &q));
    OK(MPI_Comm_size(c, &m));
    int big = SIZES[NSIZES - 1];
    int *a = malloc(sizeof(int) * (size_t)big * (size_t)m * 4 + 16);
    int *b = malloc(sizeof(int) * (size_t)big * (size_t)m * 4 + 16);
    double *d = malloc(sizeof(double) * (size_t)big + 8), *e = malloc(sizeof(double) * (size_t)big + 8);
    CHECK(a && b && d && e);
    long s = (long)m * (m - 1) / 2;
    for (int z = 0; z < NSIZES; z++) {
        int n = SIZES[z];
        /* Bcast from the first and the last rank. */
        for (int root = 0; root < m; root += (m > 1 ? m - 1 : 1)) {
            for (int i = 0; i < n; i++)
                a[i] = q == root ? root * 1000003 + i : -1;
            OK(MPI_Bcast(a, n, MPI_INT, root, c));
            for (int i = 0; i < n; i++)
                CHECK(a[i] == root * 1000003 + i);
        }
        /* Reduce (sum) to the first and the last rank; Allreduce sum, in place too, and max. */
        for (int root = 0; root < m; root += (m > 1 ? m - 1 : 1)) {
            for (int i = 0; i < n; i++) {
                a[i] = q * (i % 13) + q;
                b[i] = -1;
            }
            OK(MPI_Reduce(a, b, n, MPI_INT, MPI_SUM, root, c));
            if (q == root)
                for (int i = 0; i < n; i++)
                    CHECK(b[i] == (i % 13) * s + s);
        }
        for (int i = 0; i < n; i++)
            a[i] = q * (i % 13) + q;
        OK(MPI_Allreduce(a, b, n, MPI_INT, MPI_SUM, c));
        for (int i = 0; i < n; i++)
            CHECK(b[i] == (i % 13) * s + s);
        OK(MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_INT, MPI_SUM, c));
        CHECK(n == 0 || memcmp(a, b, sizeof(int) * (size_t)n) == 0);
        for (int i = 0; i < n; i++)
            d[i] = (double)((q * 7 + i) % m) + 0.5;
        OK(MPI_Allreduce(d, e, n, MPI_DOUBLE, MPI_MAX, c));
        for (int i = 0; i < n; i++)
            CHECK(e[i] == (double)(m - 1) + 0.5);
        /* Non-commutative: the rank-ordered product, element by element, at every rank and at a
         * root that is not rank 0. */
        for (int k = 0; k < n; k++) {
            int *x = a + 4 * k;
            x[0] = 1, x[1] = (q + k) % 5, x[2] = 0, x[3] = 2;
        }
        OK(MPI_Allreduce(a, b, n, mat, mm, c));
        for (int k = 0; k < n; k++) {
            int *y = b + 4 * k;
            CHECK(y[0] == 1 && y[1] == matmul_top_right(m, k) && y[2] == 0 && y[3] == (1 << m));
        }
        for (int i = 0; i < 4 * n; i++)
            b[i] = -1;
        OK(MPI_Reduce(a, b, n, mat, mm, m - 1, c));
        if (q == m - 1)
            for (int k = 0; k < n; k++)
                CHECK(b[4 * k + 1] == matmul_top_right(m, k) && b[4 * k + 3] == (1 << m));
        /* Allgather: n elements from each rank (in place too). */
        int g = n > 10000 ? 10000 : n;
        for (int i = 0; i < g; i++)
            a[i] = q * 100003 + i;
        OK(MPI_Allgather(a, g, MPI_INT, b, g, MPI_INT, c));
        for (int r = 0; r < m; r++)
            for (int i = 0; i < g; i++)
                CHECK(b[r * g + i] == r * 100003 + i);
        for (int i = 0; i < g * m; i++)
            b[i] = i / (g ? g : 1) == q ? q * 100003 + i % g : -1;
        OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, g, MPI_INT, c));
        for (int r = 0; r < m; r++)
            for (int i = 0; i < g; i++)
                CHECK(b[r * g + i] == r * 100003 + i);
        /* Alltoall: block i of rank q to rank r is (q * 8 + r) * 20011 + i. */
        int t = n > 20000 ? 20000 : n;
        for (int r = 0; r < m; r++)
            for (int i = 0; i < t; i++)
                a[r * t + i] = (q * 8 + r) * 20011 + i;
        OK(MPI_Alltoall(a, t, MPI_INT, b, t, MPI_INT, c));
        for (int r = 0; r < m; r++)
            for (int i = 0; i < t; i++)
                CHECK(b[r * t + i] == (r * 8 + q) * 20011 + i);
        /* Reduce_scatter_block and Scan. */
        for (int r = 0; r < m; r++)
            for (int i = 0; i < g; i++)
                a[r * g + i] = q + r + i;
        OK(MPI_Reduce_scatter_block(a, b, g, MPI_INT, MPI_SUM, c));
        for (int i = 0; i < g; i++)
            CHECK(b[i] == s + m * (q + i));
        /* Reduce_scatter with counts that differ by rank, under the non-commutative op. */
        int *cnts = malloc(sizeof(int) * (size_t)m), tot = 0, off = 0;
        CHECK(cnts);
        for (int r = 0; r < m; r++) {
            cnts[r] = g / m + r;
            tot += cnts[r];
            if (r < q)
                off += cnts[r];
        }
        for (int k = 0; k < tot; k++) {
            int *x = a + 4 * k;
            x[0] = 1, x[1] = (q + k) % 5, x[2] = 0, x[3] = 2;
        }
        OK(MPI_Reduce_scatter(a, b, cnts, mat, mm, c));
        for (int k = 0; k < cnts[q]; k++)
            CHECK(b[4 * k] == 1 && b[4 * k + 1] == matmul_top_right(m, off + k) &&
                  b[4 * k + 3] == (1 << m));
        free(cnts);
        for (int i = 0; i < n; i++)
            a[i] = q + i;
        OK(MPI_Scan(a, b, n, MPI_INT, MPI_SUM, c));
        for (int i = 0; i < n; i++)
            CHECK(b[i] == q * (q + 1) / 2 + (q + 1) * i);
        /* Scan and Exscan under the non-commutative op: the product M_0 ... M_q (M_0 ... M_q-1). */
        for (int k = 0; k < n; k++) {
            int *x = a + 4 * k;
            x[0] = 1, x[1] = (q + k) % 5, x[2] = 0, x[3] = 2;
        }
        OK(MPI_Scan(a, b, n, mat, mm, c));
        for (int k = 0; k < n; k++)
            CHECK(b[4 * k] == 1 && b[4 * k + 1] == matmul_top_right(q + 1, k) &&
                  b[4 * k + 3] == (1 << (q + 1)));
        OK(MPI_Exscan(a, b, n, mat, mm, c));
        if (q > 0)
            for (int k = 0; k < n; k++)
                CHECK(b[4 * k + 1] == matmul_top_right(q, k) && b[4 * k + 3] == (1 << q));
    }
    free(a);
    free(b);
    free(d);
    free(e);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), n = world_size();
    MPI_Op mm;
    OK(MPI_Op_create(matmul, 0, &mm));
    MPI_Datatype mat;
    OK(MPI_Type_contiguous(4, MPI_INT, &mat));
    OK(MPI_Type_commit(&mat));
    run(MPI_COMM_WORLD, mm, mat);
    /* Ranks reversed: rank n-1 of the world is rank 0 here. */
    MPI_Comm rev;
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, n - rank, &rev));
    run(rev, mm, mat);
    OK(MPI_Comm_free(&rev));
    /* Every third rank left out: a smaller, uneven communicator. */
    MPI_Comm some;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 3 == 2 ? MPI_UNDEFINED : 0, rank, &some));
    if (some != MPI_COMM_NULL) {
        run(some, mm, mat);
        OK(MPI_Comm_free(&some));
    }
    OK(MPI_Op_free(&mm));
    OK(MPI_Type_free(&mat));
    pass("coll_sizes");
    return 0;
}
