/* Long allreduces (hundreds of KiB to a few MiB, past every switch to a bandwidth algorithm):
 * integer sums, in place and not; double maxima; MPI_MAXLOC on MPI_DOUBLE_INT (a 12-byte pair
 * with padding in its extent); lengths that do not divide by the rank count; on the world and on a communicator whose ranks are reversed. Every result
 * is compared with a serial computation, and the input buffers must come back unchanged
 * (MPI-3.1 section 5.9.6: the send buffer is read only). */
#include "check.h"
#include <string.h>

/* Element k of rank r. */
static int ival(int r, long k) { return (int)((k * 7 + r * 13) % 1000) - 500; }
static double dval(int r, long k) { return (double)((k * 31 + r * 17) % 997) * 0.5; }

static void run(MPI_Comm c) {
    int me, m;
    OK(MPI_Comm_rank(c, &me));
    OK(MPI_Comm_size(c, &m));
    /* 1 MiB of ints, plus an odd count that no rank count divides evenly. */
    const long lens[] = {1L << 18, (1L << 16) * 3 + 7};
    for (int li = 0; li < 2; li++) {
        long n = lens[li];
        int *a = malloc(sizeof(int) * (size_t)n), *b = malloc(sizeof(int) * (size_t)n);
        CHECK(a && b);
        for (long k = 0; k < n; k++)
            a[k] = ival(me, k);
        OK(MPI_Allreduce(a, b, (int)n, MPI_INT, MPI_SUM, c));
        for (long k = 0; k < n; k++) {
            long s = 0;
            for (int r = 0; r < m; r++)
                s += ival(r, k);
            CHECK(b[k] == s);
            CHECK(a[k] == ival(me, k));
        }
        /* In place. */
        OK(MPI_Allreduce(MPI_IN_PLACE, a, (int)n, MPI_INT, MPI_SUM, c));
        CHECK(memcmp(a, b, sizeof(int) * (size_t)n) == 0);
        free(a);
        free(b);
    }
    /* 2 MiB of doubles: the maximum is exact whatever order the ranks fold in. */
    long n = 1L << 18;
    double *d = malloc(sizeof(double) * (size_t)n), *e = malloc(sizeof(double) * (size_t)n);
    CHECK(d && e);
    for (long k = 0; k < n; k++)
        d[k] = dval(me, k);
    OK(MPI_Allreduce(d, e, (int)n, MPI_DOUBLE, MPI_MAX, c));
    for (long k = 0; k < n; k++) {
        double x = dval(0, k);
        for (int r = 1; r < m; r++)
            x = dval(r, k) > x ? dval(r, k) : x;
        CHECK(e[k] == x);
    }
    /* MAXLOC: the largest value and the lowest rank that has it. */
    struct {
        double v;
        int i;
    } *p = malloc(sizeof *p * (size_t)n), *q = malloc(sizeof *q * (size_t)n);
    CHECK(p && q);
    for (long k = 0; k < n; k++) {
        p[k].v = (double)((k + me) % 4);
        p[k].i = me;
    }
    OK(MPI_Allreduce(p, q, (int)n, MPI_DOUBLE_INT, MPI_MAXLOC, c));
    for (long k = 0; k < n; k++) {
        double best = -1;
        int at = -1;
        for (int r = 0; r < m; r++)
            if ((double)((k + r) % 4) > best) {
                best = (double)((k + r) % 4);
                at = r;
            }
        CHECK(q[k].v == best && q[k].i == at);
    }
    free(p);
    free(q);
    free(d);
    free(e);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), n = world_size();
    run(MPI_COMM_WORLD);
    MPI_Comm rev;
    OK(MPI_Comm_split(MPI_COMM_WORLD, 0, n - rank, &rev));
    run(rev);
    OK(MPI_Comm_free(&rev));
    pass("allreduce_long");
    return 0;
}
