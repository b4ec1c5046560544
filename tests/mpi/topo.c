/* Process topologies and neighbourhood collectives (MPI 3.1, chapter 7): Cartesian grids (create,
 * get, coordinates and ranks, shifts with and without wrap-around, sub-grids, map), graphs and
 * distributed graphs (adjacent and general, with weights), their queries, MPI_Comm_dup keeping
 * the topology, and every neighbourhood collective, blocking and not, including a periodic
 * dimension of size 1, where a rank is its own neighbour on both sides. */
#include "check.h"
#include <string.h>

static int rank, size;

/* MPI-3.1's errata (MPI-4.0 Annex B.1.1, mpi-forum/mpi-issues#153): in a periodic dimension of
 * size 1 or 2 the neighbours below and above are one rank, and the block it sends up still
 * lands in the slot for the neighbour below. MPICH before 4.1 (Debian 12 has 4.0) pairs them in
 * list order instead (pmodels/mpich#4061), so those checks run only on an MPI that has the
 * errata. */
#if defined(MPICH_NUMVERSION) && MPICH_NUMVERSION < 40100000
#define ERRATA_153 0
#else
#define ERRATA_153 1
#endif

static int mod(int a, int n) { return ((a % n) + n) % n; }

static void cartesian(void) {
    int dims[2] = {0, 0}, periods[2] = {1, 0};
    OK(MPI_Dims_create(size, 2, dims));
    CHECK(dims[0] * dims[1] == size && dims[0] >= dims[1]);
    MPI_Comm cart;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    CHECK(cart != MPI_COMM_NULL);
    int t, nd, r;
    OK(MPI_Topo_test(cart, &t));
    CHECK(t == MPI_CART);
    OK(MPI_Cartdim_get(cart, &nd));
    CHECK(nd == 2);
    OK(MPI_Comm_rank(cart, &r));
    CHECK(r == rank); /* reorder false: same ranks */
    int gd[2], gp[2], gc[2];
    OK(MPI_Cart_get(cart, 2, gd, gp, gc));
    CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0);
    /* Row-major: the last dimension varies fastest. */
    CHECK(gc[0] == rank / dims[1] && gc[1] == rank % dims[1]);
    for (int q = 0; q < size; q++) {
        int c[2], back;
        OK(MPI_Cart_coords(cart, q, 2, c));
        CHECK(c[0] == q / dims[1] && c[1] == q % dims[1]);
        OK(MPI_Cart_rank(cart, c, &back));
        CHECK(back == q);
    }
    /* The periodic dimension wraps coordinates. */
    int wrap[2] = {gc[0] + dims[0], gc[1]}, w;
    OK(MPI_Cart_rank(cart, wrap, &w));
    CHECK(w == rank);
    /* Shifts: periodic along 0, edges give MPI_PROC_NULL along 1. */
    int src, dst;
    OK(MPI_Cart_shift(cart, 0, 1, &src, &dst));
    CHECK(src == mod(gc[0] - 1, dims[0]) * dims[1] + gc[1]);
    CHECK(dst == mod(gc[0] + 1, dims[0]) * dims[1] + gc[1]);
    OK(MPI_Cart_shift(cart, 1, 1, &src, &dst));
    CHECK(src == (gc[1] == 0 ? MPI_PROC_NULL : rank - 1));
    CHECK(dst == (gc[1] == dims[1] - 1 ? MPI_PROC_NULL : rank + 1));
    OK(MPI_Cart_shift(cart, 0, 0, &src, &dst));
    CHECK(src == rank && dst == rank);

    /* Sub-grids: the rows (dimension 1 kept) and the columns (dimension 0 kept). */
    int keep_row[2] = {0, 1}, keep_col[2] = {1, 0};
    MPI_Comm row, col;
    OK(MPI_Cart_sub(cart, keep_row, &row));
    OK(MPI_Cart_sub(cart, keep_col, &col));
    int rs, rr, cs, cr;
    OK(MPI_Comm_size(row, &rs));
    OK(MPI_Comm_rank(row, &rr));
    OK(MPI_Comm_size(col, &cs));
    OK(MPI_Comm_rank(col, &cr));
    CHECK(rs == dims[1] && rr == gc[1] && cs == dims[0] && cr == gc[0]);
    OK(MPI_Cartdim_get(row, &nd));
    CHECK(nd == 1);
    OK(MPI_Cart_get(col, 1, gd, gp, gc));
    CHECK(gd[0] == dims[0] && gp[0] == 1);
    /* The row's members are the ranks of this rank's row. */
    int sum = 0;
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, row));
    int first = (rank / dims[1]) * dims[1];
    CHECK(sum == dims[1] * first + dims[1] * (dims[1] - 1) / 2);
    OK(MPI_Comm_free(&row));
    OK(MPI_Comm_free(&col));

    /* A duplicate keeps the topology. */
    MPI_Comm dup;
    OK(MPI_Comm_dup(cart, &dup));
    OK(MPI_Topo_test(dup, &t));
    CHECK(t == MPI_CART);
    OK(MPI_Cart_get(dup, 2, gd, gp, gc));
    CHECK(gd[0] == dims[0] && gd[1] == dims[1]);
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&cart));

    /* A grid smaller than the communicator: the ranks left over get MPI_COMM_NULL. */
    int small = size > 1 ? size - 1 : 1, p0 = 0;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, &small, &p0, 0, &cart));
    CHECK((cart == MPI_COMM_NULL) == (rank >= small));
    OK(MPI_Cart_map(MPI_COMM_WORLD, 1, &small, &p0, &r));
    CHECK(r == (rank < small ? rank : MPI_UNDEFINED));
    if (cart != MPI_COMM_NULL)
        OK(MPI_Comm_free(&cart));

    /* A communicator made by split has no topology. */
    OK(MPI_Topo_test(MPI_COMM_WORLD, &t));
    CHECK(t == MPI_UNDEFINED);
}

/* Neighbour exchanges on a grid of (size x 1), periodic in both: along dimension 0 the
 * neighbours are the ranks either side, along dimension 1 the rank itself both ways. Block k of
 * a rank is 100 * rank + k; the block it receives from its neighbour below is what that one
 * sent up, and so on. */
static void cartesian_neighbours(void) {
    int dims[2] = {size, 1}, periods[2] = {1, 1};
    MPI_Comm cart;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    int down = mod(rank - 1, size), up = mod(rank + 1, size);
    int out[4], in[4];
    for (int k = 0; k < 4; k++)
        out[k] = 100 * rank + k, in[k] = -1;
    /* Whether the neighbours either side along dimension 0 are one rank. */
    int twice = size <= 2;
    OK(MPI_Neighbor_alltoall(out, 1, MPI_INT, in, 1, MPI_INT, cart));
    if (ERRATA_153 || !twice)
        CHECK(in[0] == 100 * down + 1 && in[1] == 100 * up + 0);
    if (ERRATA_153)
        CHECK(in[2] == 100 * rank + 3 && in[3] == 100 * rank + 2);

    int all[4] = {-1, -1, -1, -1};
    OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, cart));
    CHECK(all[0] == down && all[1] == up && all[2] == rank && all[3] == rank);

    /* Non-blocking, with counts and displacements: 2 ints to and from the ranks either side,
     * 3 to and from oneself (what goes down arrives as what came from above: sizes pair up). */
    int sc[4] = {2, 2, 3, 3}, sd[4] = {0, 2, 4, 7}, sbuf[10], rbuf[10];
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < sc[k]; j++)
            sbuf[sd[k] + j] = 1000 * rank + 10 * k + j;
    memset(rbuf, 0xff, sizeof rbuf);
    MPI_Request req;
    OK(MPI_Ineighbor_alltoallv(sbuf, sc, sd, MPI_INT, rbuf, sc, sd, MPI_INT, cart, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    for (int j = 0; j < 2 && (ERRATA_153 || !twice); j++) {
        CHECK(rbuf[0 + j] == 1000 * down + 10 * 1 + j);
        CHECK(rbuf[2 + j] == 1000 * up + 10 * 0 + j);
    }
    for (int j = 0; j < 3 && ERRATA_153; j++) {
        CHECK(rbuf[4 + j] == 1000 * rank + 10 * 3 + j);
        CHECK(rbuf[7 + j] == 1000 * rank + 10 * 2 + j);
    }

    /* The w-variant: byte displacements and a type per neighbour (doubles from below and
     * above, ints from oneself). */
    double dsend[2] = {rank + 0.25, rank + 0.75}, drecv[2] = {-1, -1};
    int isend[2] = {rank * 7, rank * 7 + 1}, irecv[2] = {-1, -1};
    int wc[4] = {1, 1, 1, 1};
    MPI_Aint wsd[4], wrd[4];
    MPI_Datatype wt[4] = {MPI_DOUBLE, MPI_DOUBLE, MPI_INT, MPI_INT};
    MPI_Aint base;
    OK(MPI_Get_address(dsend, &base));
    MPI_Aint a;
    OK(MPI_Get_address(&dsend[0], &a)); wsd[0] = a - base;
    OK(MPI_Get_address(&dsend[1], &a)); wsd[1] = a - base;
    OK(MPI_Get_address(&isend[0], &a)); wsd[2] = a - base;
    OK(MPI_Get_address(&isend[1], &a)); wsd[3] = a - base;
    MPI_Aint rbase;
    OK(MPI_Get_address(drecv, &rbase));
    OK(MPI_Get_address(&drecv[0], &a)); wrd[0] = a - rbase;
    OK(MPI_Get_address(&drecv[1], &a)); wrd[1] = a - rbase;
    OK(MPI_Get_address(&irecv[0], &a)); wrd[2] = a - rbase;
    OK(MPI_Get_address(&irecv[1], &a)); wrd[3] = a - rbase;
    OK(MPI_Neighbor_alltoallw(dsend, wc, wsd, wt, drecv, wc, wrd, wt, cart));
    if (ERRATA_153 || !twice)
        CHECK(drecv[0] == down + 0.75 && drecv[1] == up + 0.25);
    if (ERRATA_153)
        CHECK(irecv[0] == rank * 7 + 1 && irecv[1] == rank * 7);
    OK(MPI_Comm_free(&cart));

    /* Not periodic: a rank at the edge has MPI_PROC_NULL there and its slot is left alone. */
    int d1 = size, p1 = 0;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, &d1, &p1, 0, &cart));
    int o2[2] = {10 * rank, 10 * rank + 1}, i2[2] = {-7, -7};
    OK(MPI_Neighbor_alltoall(o2, 1, MPI_INT, i2, 1, MPI_INT, cart));
    CHECK(i2[0] == (rank == 0 ? -7 : 10 * (rank - 1) + 1));
    CHECK(i2[1] == (rank == size - 1 ? -7 : 10 * (rank + 1)));
    OK(MPI_Comm_free(&cart));
}

static void graphs(void) {
    /* A ring as a graph: node i's neighbours are i-1 and i+1. */
    int *index = malloc(sizeof(int) * size), *edges = malloc(sizeof(int) * 2 * size);
    CHECK(index && edges);
    for (int i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = mod(i - 1, size);
        edges[2 * i + 1] = mod(i + 1, size);
    }
    MPI_Comm g;
    OK(MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g));
    int t, nn, ne, cnt, nb[2];
    OK(MPI_Topo_test(g, &t));
    CHECK(t == MPI_GRAPH);
    OK(MPI_Graphdims_get(g, &nn, &ne));
    CHECK(nn == size && ne == 2 * size);
    int *gi = malloc(sizeof(int) * size), *ge = malloc(sizeof(int) * 2 * size);
    CHECK(gi && ge);
    OK(MPI_Graph_get(g, size, 2 * size, gi, ge));
    CHECK(memcmp(gi, index, sizeof(int) * size) == 0 && memcmp(ge, edges, sizeof(int) * 2 * size) == 0);
    OK(MPI_Graph_neighbors_count(g, rank, &cnt));
    CHECK(cnt == 2);
    OK(MPI_Graph_neighbors(g, rank, 2, nb));
    CHECK(nb[0] == mod(rank - 1, size) && nb[1] == mod(rank + 1, size));
    int r;
    OK(MPI_Graph_map(MPI_COMM_WORLD, size, index, edges, &r));
    CHECK(r == rank);
    int got[2] = {-1, -1};
    OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, g));
    CHECK(got[0] == nb[0] && got[1] == nb[1]);
    OK(MPI_Comm_free(&g));
    free(gi);
    free(ge);
    free(index);
    free(edges);

    /* Distributed graph, adjacent: from the two ranks below, to the two above, weighted. */
    int srcs[2] = {mod(rank - 2, size), mod(rank - 1, size)};
    int dsts[2] = {mod(rank + 1, size), mod(rank + 2, size)};
    int sw[2] = {1, 2}, dw[2] = {3, 4};
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, srcs, sw, 2, dsts, dw, MPI_INFO_NULL, 0, &g));
    OK(MPI_Topo_test(g, &t));
    CHECK(t == MPI_DIST_GRAPH);
    int indeg, outdeg, weighted;
    OK(MPI_Dist_graph_neighbors_count(g, &indeg, &outdeg, &weighted));
    CHECK(indeg == 2 && outdeg == 2 && weighted);
    int s2[2], w2[2], d2[2], x2[2];
    OK(MPI_Dist_graph_neighbors(g, 2, s2, w2, 2, d2, x2));
    CHECK(s2[0] == srcs[0] && s2[1] == srcs[1] && w2[0] == 1 && w2[1] == 2);
    CHECK(d2[0] == dsts[0] && d2[1] == dsts[1] && x2[0] == 3 && x2[1] == 4);
    /* Out to rank+1 goes to that rank's second source (rank+1-1), and so on (with 3 ranks or
     * more, where the four neighbours are distinct edges between distinct pairs). */
    int o[2] = {10 * rank + 1, 10 * rank + 2}, in[2] = {-1, -1};
    OK(MPI_Neighbor_alltoall(o, 1, MPI_INT, in, 1, MPI_INT, g));
    if (size >= 3)
        CHECK(in[0] == 10 * srcs[0] + 2 && in[1] == 10 * srcs[1] + 1);
    else
        CHECK(in[0] > 0 && in[1] > 0);
    OK(MPI_Comm_free(&g));

    /* Unweighted. */
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, srcs + 1, MPI_UNWEIGHTED, 1, dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &g));
    OK(MPI_Dist_graph_neighbors_count(g, &indeg, &outdeg, &weighted));
    CHECK(indeg == 1 && outdeg == 1 && !weighted);
    OK(MPI_Comm_free(&g));

    /* General distributed graph: each rank gives the edges out of itself to itself and to the
     * next rank, weighted by the source rank; every rank learns its in- and out-edges. */
    int one = rank, deg = 2, to[2] = {rank, mod(rank + 1, size)}, wt[2] = {rank, rank};
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &one, &deg, to, wt, MPI_INFO_NULL, 0, &g));
    OK(MPI_Dist_graph_neighbors_count(g, &indeg, &outdeg, &weighted));
    CHECK(indeg == 2 && outdeg == 2 && weighted);
    OK(MPI_Dist_graph_neighbors(g, 2, s2, w2, 2, d2, x2));
    int below = mod(rank - 1, size);
    CHECK((s2[0] == rank && s2[1] == below) || (s2[0] == below && s2[1] == rank));
    CHECK(w2[0] == s2[0] && w2[1] == s2[1]);
    CHECK((d2[0] == rank && d2[1] == to[1]) || (d2[0] == to[1] && d2[1] == rank));
    CHECK(x2[0] == rank && x2[1] == rank);
    int from[2] = {-1, -1};
    MPI_Request req;
    OK(MPI_Ineighbor_allgather(&rank, 1, MPI_INT, from, 1, MPI_INT, g, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(from[0] == s2[0] && from[1] == s2[1]);
    OK(MPI_Comm_free(&g));
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    rank = world_rank();
    size = world_size();
    cartesian();
    cartesian_neighbours();
    graphs();
    /* A grid larger than the communicator is an error, and no communicator comes of it. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int big[2] = {size, size + 1}, nope[2] = {0, 0};
    MPI_Comm none = MPI_COMM_WORLD;
    CHECK(MPI_Cart_create(MPI_COMM_WORLD, 2, big, nope, 0, &none) != MPI_SUCCESS);
    CHECK(none == MPI_COMM_NULL);
    pass("topo");
    return 0;
}
