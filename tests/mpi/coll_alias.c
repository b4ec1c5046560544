/* Buffers that alias (MPI-3.1 2.6.2: no two buffer arguments of a call may overlap; in place is
 * said with MPI_IN_PLACE) make a collective fail with MPI_ERR_BUFFER on the ranks that pass
 * them, before anything moves, so that the ranks that see the error return it rather than
 * wait for each other; MPI_Reduce_local refuses MPI_IN_PLACE (5.9.7 gives it none) and
 * aliased buffers. A predefined operation on a type it is not defined on (5.9.2: MPI_MAX and
 * MPI_SUM take no MPI_BYTE) is MPI_ERR_OP on every rank, also those that would not combine
 * anything, also after calls of the same shape with other operations have passed. Collectives
 * after the refused ones work. */
#include "check.h"

static void error_of_class(int rc, int want) {
    int cls;
    CHECK(rc != MPI_SUCCESS);
    OK(MPI_Error_class(rc, &cls));
    CHECK(cls == want);
}

static void buffer_error(int rc) { error_of_class(rc, MPI_ERR_BUFFER); }

static void op_error(int rc) { error_of_class(rc, MPI_ERR_OP); }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), n = world_size();
    MPI_Comm w = MPI_COMM_WORLD;
    OK(MPI_Comm_set_errhandler(w, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    int *b = malloc(2 * n * sizeof(int)), *c = malloc(2 * n * sizeof(int));
    int counts[64], displs[64];
    CHECK(n <= 64);
    for (int i = 0; i < 2 * n; i++)
        b[i] = c[i] = rank;
    for (int i = 0; i < n; i++) {
        counts[i] = 2;
        displs[i] = 2 * i;
    }

    /* Every rank passes aliased buffers. */
    buffer_error(MPI_Allreduce(b, b, 2, MPI_INT, MPI_SUM, w));
    buffer_error(MPI_Scan(b, b, 2, MPI_INT, MPI_SUM, w));
    buffer_error(MPI_Exscan(b, b, 2, MPI_INT, MPI_SUM, w));
    buffer_error(MPI_Reduce_scatter_block(b, b, 1, MPI_INT, MPI_SUM, w));
    buffer_error(MPI_Alltoall(b, 2, MPI_INT, b, 2, MPI_INT, w));
    buffer_error(MPI_Alltoallv(b, counts, displs, MPI_INT, b, counts, displs, MPI_INT, w));
    /* The send buffer is this rank's own block of the gathered one. */
    buffer_error(MPI_Allgather(&b[2 * rank], 2, MPI_INT, b, 2, MPI_INT, w));
    buffer_error(MPI_Allgatherv(&b[2 * rank], 2, MPI_INT, b, counts, displs, MPI_INT, w));
    MPI_Request r;
    buffer_error(MPI_Iallreduce(b, b, 2, MPI_INT, MPI_SUM, w, &r));

    /* Only the root passes them (the other ranks do not call). */
    if (rank == 0) {
        buffer_error(MPI_Reduce(b, b, 2, MPI_INT, MPI_SUM, 0, w));
        buffer_error(MPI_Gather(b, 2, MPI_INT, b, 2, MPI_INT, 0, w));
        buffer_error(MPI_Gatherv(b, 2, MPI_INT, b, counts, displs, MPI_INT, 0, w));
        buffer_error(MPI_Scatter(b, 2, MPI_INT, b, 2, MPI_INT, 0, w));
        buffer_error(MPI_Scatterv(b, counts, displs, MPI_INT, b, 2, MPI_INT, 0, w));
    }

    /* MPI_Reduce_local: no MPI_IN_PLACE, no aliasing. */
    buffer_error(MPI_Reduce_local(MPI_IN_PLACE, c, 2, MPI_INT, MPI_SUM));
    buffer_error(MPI_Reduce_local(b, MPI_IN_PLACE, 2, MPI_INT, MPI_SUM));
    buffer_error(MPI_Reduce_local(c, c, 2, MPI_INT, MPI_SUM));
    OK(MPI_Reduce_local(b, c, 2, MPI_INT, MPI_SUM));
    CHECK(c[0] == 2 * rank && c[1] == 2 * rank);

    /* Operations on types they are not defined on, refused on every rank. */
    unsigned char by[2] = {1, 2}, out[2];
    op_error(MPI_Allreduce(by, out, 2, MPI_BYTE, MPI_MAX, w));
    op_error(MPI_Reduce(by, out, 2, MPI_BYTE, MPI_SUM, 0, w));
    OK(MPI_Allreduce(by, out, 2, MPI_BYTE, MPI_BOR, w));
    CHECK(out[0] == 1 && out[1] == 2);

    /* Nothing was left behind: the collectives that follow meet as they should. */
    int mine = rank + 1, sum = 0;
    OK(MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, w));
    CHECK(sum == n * (n + 1) / 2);
    OK(MPI_Allgather(&mine, 1, MPI_INT, b, 1, MPI_INT, w));
    for (int i = 0; i < n; i++)
        CHECK(b[i] == i + 1);
    OK(MPI_Gather(&mine, 1, MPI_INT, c, 1, MPI_INT, 0, w));
    if (rank == 0)
        for (int i = 0; i < n; i++)
            CHECK(c[i] == i + 1);

    /* The same refusals once the communicator's short collectives have run many times with
     * other operations on the same type and count (an implementation that remembers the checks
     * of a call shape must keep the operation in what it remembers), and for a broadcast of
     * that shape before them. */
    for (int i = 0; i < 3; i++) {
        OK(MPI_Allreduce(by, out, 2, MPI_BYTE, MPI_BOR, w));
        CHECK(out[0] == 1 && out[1] == 2);
        unsigned char bx[2] = {(unsigned char)(rank + i), 7};
        OK(MPI_Reduce(bx, out, 2, MPI_BYTE, MPI_BXOR, 0, w));
        if (rank == 0) {
            unsigned char x = 0;
            for (int r = 0; r < n; r++)
                x ^= (unsigned char)(r + i);
            CHECK(out[0] == x && out[1] == (n % 2 ? 7 : 0));
        }
        unsigned char bb[2] = {(unsigned char)(rank == i % n ? 40 + i : 0), 9};
        OK(MPI_Bcast(bb, 2, MPI_BYTE, i % n, w));
        CHECK(bb[0] == 40 + i && bb[1] == 9);
    }
    op_error(MPI_Allreduce(by, out, 2, MPI_BYTE, MPI_MAX, w));
    op_error(MPI_Reduce(by, out, 2, MPI_BYTE, MPI_SUM, 0, w));
    OK(MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, w));
    CHECK(sum == n * (n + 1) / 2);
    free(b);
    free(c);
    pass("coll_alias");
    return 0;
}
