/* MPI_Type_create_darray (MPI-3.1 4.1.4): each rank's piece of a global array distributed over
 * a process grid (from MPI_Dims_create), block, cyclic (default and explicit dargs) and not
 * distributed, in C and Fortran order, 2-D and 3-D. Checked against the ownership rules worked
 * out here independently: its size, its bounds (the whole global array), and the elements that
 * MPI_Pack takes from a global array of element offsets, in order; MPI_Unpack puts them back in
 * place; the envelope and contents. Runs at any number of ranks. */
#include "check.h"
#include <string.h>

#define MAXD 3
#define MAXN 128

/* Does the process at coordinate c of p own index j of a dimension of g elements? */
static int owns(int distrib, int darg, int g, int p, int c, int j) {
    if (distrib == MPI_DISTRIBUTE_NONE)
        return 1;
    if (distrib == MPI_DISTRIBUTE_BLOCK) {
        int b = darg == MPI_DISTRIBUTE_DFLT_DARG ? (g + p - 1) / p : darg;
        return j >= c * b && j < (c + 1) * b;
    }
    int d = darg == MPI_DISTRIBUTE_DFLT_DARG ? 1 : darg;
    return (j / d) % p == c;
}

struct layout {
    int ndims;
    int gsizes[MAXD], distribs[MAXD], dargs[MAXD], psizes[MAXD];
    int order;
};

/* The element offsets this rank owns, in increasing order (the order of the darray type's
 * typemap: row-major for C, column-major for Fortran). Returns how many. */
static int expected(const struct layout *l, int rank, int *out) {
    int coords[MAXD], r = rank, total = 1, n = 0;
    /* The process grid is row-major whatever the array's order. */
    for (int i = l->ndims - 1; i >= 0; i--) {
        coords[i] = r % l->psizes[i];
        r /= l->psizes[i];
    }
    for (int i = 0; i < l->ndims; i++)
        total *= l->gsizes[i];
    for (int k = 0; k < total; k++) {
        int idx[MAXD], rest = k, mine = 1;
        if (l->order == MPI_ORDER_C)
            for (int i = l->ndims - 1; i >= 0; i--) {
                idx[i] = rest % l->gsizes[i];
                rest /= l->gsizes[i];
            }
        else
            for (int i = 0; i < l->ndims; i++) {
                idx[i] = rest % l->gsizes[i];
                rest /= l->gsizes[i];
            }
        for (int i = 0; i < l->ndims; i++)
            mine = mine && owns(l->distribs[i], l->dargs[i], l->gsizes[i], l->psizes[i],
                                coords[i], idx[i]);
        if (mine)
            out[n++] = k;
    }
    return n;
}

static void check_layout(const struct layout *l) {
    int rank = world_rank(), size = world_size();
    int want[MAXN], got[MAXN], global[MAXN], back[MAXN];
    int total = 1;
    for (int i = 0; i < l->ndims; i++)
        total *= l->gsizes[i];
    CHECK(total <= MAXN);
    int n = expected(l, rank, want);

    /* Every element has exactly one owner. */
    {
        int mine[MAXN] = {0}, owners[MAXN];
        for (int i = 0; i < n; i++)
            mine[want[i]] = 1;
        OK(MPI_Allreduce(mine, owners, total, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        for (int k = 0; k < total; k++)
            CHECK(owners[k] == 1);
    }

    MPI_Datatype t;
    OK(MPI_Type_create_darray(size, rank, l->ndims, l->gsizes, l->distribs, l->dargs, l->psizes,
                              l->order, MPI_INT, &t));
    OK(MPI_Type_commit(&t));

    int tsize = -1;
    MPI_Aint lb = -1, ext = -1;
    OK(MPI_Type_size(t, &tsize));
    CHECK(tsize == n * (int)sizeof(int));
    OK(MPI_Type_get_extent(t, &lb, &ext));
    CHECK(lb == 0 && ext == total * (MPI_Aint)sizeof(int));

    /* Pack from a global array of offsets: exactly this rank's offsets, in order. */
    for (int k = 0; k < total; k++)
        global[k] = k;
    char packed[MAXN * sizeof(int)];
    int pos = 0;
    memset(got, 0xff, sizeof got);
    OK(MPI_Pack(global, 1, t, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    CHECK(pos == n * (int)sizeof(int));
    int upos = 0;
    if (n > 0)
        OK(MPI_Unpack(packed, pos, &upos, got, n, MPI_INT, MPI_COMM_WORLD));
    CHECK(upos == pos);
    for (int i = 0; i < n; i++)
        CHECK(got[i] == want[i]);

    /* Unpack through the type: each value lands at its offset, nothing else is written. */
    for (int k = 0; k < total; k++)
        back[k] = -1;
    upos = 0;
    OK(MPI_Unpack(packed, pos, &upos, back, 1, t, MPI_COMM_WORLD));
    CHECK(upos == pos);
    for (int k = 0, i = 0; k < total; k++) {
        if (i < n && want[i] == k) {
            CHECK(back[k] == k);
            i++;
        } else {
            CHECK(back[k] == -1);
        }
    }

    /* Envelope and contents (MPI-3.1 4.1.13): size, rank, ndims, gsizes, distribs, dargs,
     * psizes, order; and the old type. */
    {
        int ni, na, nd, comb, ints[4 * MAXD + 4];
        MPI_Aint aints[1];
        MPI_Datatype old[1];
        OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_DARRAY);
        CHECK(ni == 4 * l->ndims + 4 && na == 0 && nd == 1);
        OK(MPI_Type_get_contents(t, ni, na, nd, ints, aints, old));
        CHECK(ints[0] == size && ints[1] == rank && ints[2] == l->ndims);
        for (int i = 0; i < l->ndims; i++) {
            CHECK(ints[3 + i] == l->gsizes[i]);
            CHECK(ints[3 + l->ndims + i] == l->distribs[i]);
            CHECK(ints[3 + 2 * l->ndims + i] == l->dargs[i]);
            CHECK(ints[3 + 3 * l->ndims + i] == l->psizes[i]);
        }
        CHECK(ints[3 + 4 * l->ndims] == l->order);
        CHECK(old[0] == MPI_INT);
    }
    OK(MPI_Type_free(&t));
}

/* Both orders of one layout. */
static void check_both(struct layout l) {
    l.order = MPI_ORDER_C;
    check_layout(&l);
    l.order = MPI_ORDER_FORTRAN;
    check_layout(&l);
}

static struct layout two(int g0, int g1, int p0, int p1, int d0, int a0, int d1, int a1) {
    struct layout l;
    memset(&l, 0, sizeof l);
    l.ndims = 2;
    l.gsizes[0] = g0, l.gsizes[1] = g1;
    l.psizes[0] = p0, l.psizes[1] = p1;
    l.distribs[0] = d0, l.distribs[1] = d1;
    l.dargs[0] = a0, l.dargs[1] = a1;
    return l;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = world_size();
    const int B = MPI_DISTRIBUTE_BLOCK, C = MPI_DISTRIBUTE_CYCLIC, N = MPI_DISTRIBUTE_NONE;
    const int D = MPI_DISTRIBUTE_DFLT_DARG;

    /* An 8x6 array on the grid MPI_Dims_create gives (1x1, 2x1, 3x1, 2x2, ...). */
    int dims[2] = {0, 0};
    OK(MPI_Dims_create(n, 2, dims));
    CHECK(dims[0] * dims[1] == n);
    int p0 = dims[0], p1 = dims[1];
    check_both(two(8, 6, p0, p1, B, D, B, D));
    check_both(two(8, 6, p0, p1, C, D, C, D));
    check_both(two(8, 6, p0, p1, C, 2, C, 2));
    check_both(two(8, 6, p0, p1, C, 3, B, D));
    /* Blocks one longer than the default: the last processes may own less, or nothing. */
    int b0 = (8 + p0 - 1) / p0 + 1, b1 = (6 + p1 - 1) / p1 + 1;
    check_both(two(8, 6, p0, p1, B, b0 > 8 ? 8 : b0, C, 2));
    check_both(two(8, 6, p0, p1, C, D, B, b1 > 6 ? 6 : b1));

    /* One dimension not distributed (its grid size is 1), the other over every rank. */
    check_both(two(8, 6, n, 1, C, 2, N, D));
    check_both(two(8, 6, n, 1, B, D, N, D));
    check_both(two(8, 6, 1, n, N, D, C, D));
    check_both(two(8, 6, 1, n, N, D, B, D));
    check_both(two(8, 6, 1, n, N, D, C, 4));

    /* 3-D: 4x3x5 on a 3-D grid. */
    {
        int d3[3] = {0, 0, 0};
        OK(MPI_Dims_create(n, 3, d3));
        struct layout l;
        memset(&l, 0, sizeof l);
        l.ndims = 3;
        const int g[3] = {4, 3, 5}, ds[3] = {B, C, C}, as[3] = {D, 2, D};
        for (int i = 0; i < 3; i++) {
            l.gsizes[i] = g[i];
            l.psizes[i] = d3[i];
            l.distribs[i] = ds[i];
            l.dargs[i] = as[i];
        }
        check_both(l);
        l.distribs[0] = C, l.dargs[0] = D;
        l.distribs[2] = B, l.dargs[2] = D;
        check_both(l);
    }
    pass("darray");
    return 0;
}
