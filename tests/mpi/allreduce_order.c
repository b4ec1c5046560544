/* The order in which MPI_Allreduce adds floating-point contributions. MPI-3.1 5.9.1 only advises
 * that a reduction applied to the same arguments in the same order give the same result; the
 * association is the implementation's choice. MPICH and Open MPI both reduce short vectors by
 * recursive doubling (MPICH long ones by recursive halving, the same tree per element): with p2
 * the largest power of two at most p and rem = p - p2, ranks 2i and 2i+1 (i < rem) are added
 * first, then the p2 terms as a balanced binary tree. Programs compare their results with
 * outputs saved from those libraries (SUNDIALS's and hypre's test suites), so volley adds in
 * that order too. Every rank's values differ wildly in magnitude, so any other association
 * changes the last bits; the result must equal the tree's, bit for bit, at every rank, for
 * sums of doubles and floats, short and past the eager sizes, in place and not, blocking and
 * not. */
#include "check.h"
#include <math.h>
#include <string.h>

static double dv(int r, int k) {
    uint64_t h = h4(7, 0, (uint64_t)r, (uint64_t)k);
    return ldexp(1.0 + (double)(h % 1000003) / 1000003.0, (int)(h >> 40) % 80 - 40) * ((h >> 20) & 1 ? -1 : 1);
}

/* The tree's sum over ranks 0 .. p-1 of element k (dv(r, k)), in floats when `single` (each
 * term and sum rounded to float: a float sum computed in double and rounded is the float sum). */
static double tree(int p, int k, int single) {
    double t[256];
    int p2 = 1;
    while (p2 * 2 <= p)
        p2 *= 2;
    int rem = p - p2;
#define R(x) (single ? (double)(float)(x) : (x))
    for (int i = 0; i < p2; i++)
        t[i] = i < rem ? R(R(dv(2 * i, k)) + R(dv(2 * i + 1, k))) : R(dv(i + rem, k));
    for (int w = 1; w < p2; w *= 2)
        for (int i = 0; i < p2; i += 2 * w)
            t[i] = R(t[i] + t[i + w]);
#undef R
    return t[0];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me = world_rank(), p = world_size();
    CHECK(p <= 256);
    /* One element (a dot product's), a few, and 600 doubles (4,800 bytes: past a short
     * message in both libraries). */
    const int counts[] = {1, 5, 600};
    for (int ci = 0; ci < 3; ci++) {
        int n = counts[ci];
        double *in = malloc(n * sizeof(double)), *out = malloc(n * sizeof(double));
        float *fin = malloc(n * sizeof(float)), *fout = malloc(n * sizeof(float));
        for (int k = 0; k < n; k++) {
            in[k] = dv(me, k);
            fin[k] = (float)dv(me, k);
        }
        OK(MPI_Allreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++)
            CHECK(memcmp(&out[k], &(double){tree(p, k, 0)}, sizeof(double)) == 0);
        OK(MPI_Allreduce(fin, fout, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++)
            CHECK(memcmp(&fout[k], &(float){(float)tree(p, k, 1)}, sizeof(float)) == 0);
        OK(MPI_Allreduce(MPI_IN_PLACE, in, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        for (int k = 0; k < n; k++)
            CHECK(memcmp(&in[k], &out[k], sizeof(double)) == 0);
        /* The non-blocking one adds alike. */
        for (int k = 0; k < n; k++)
            in[k] = dv(me, k);
        MPI_Request rq;
        OK(MPI_Iallreduce(in, out, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &rq));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        for (int k = 0; k < n; k++)
            CHECK(memcmp(&out[k], &(double){tree(p, k, 0)}, sizeof(double)) == 0);
        free(in);
        free(out);
        free(fin);
        free(fout);
    }
    if (me == 0)
        printf("allreduce_order: ok\n");
    MPI_Finalize();
    return 0;
}
