/* Communicator contexts go back (MPI 3.1, 6.4: MPI_Comm_free; a split's MPI_UNDEFINED gives
 * MPI_COMM_NULL and no communicator): more communicators are made and freed, one at a time,
 * than an MPI has contexts for at once, by MPI_Comm_split with some ranks left out and by
 * MPI_Comm_idup. A communicator freed with a receive still pending on it goes only when the
 * receive completes (6.4.3): communicators made meanwhile work, and the receive completes. */
#include "check.h"

static void free_with_pending_receive(int rank, int size) {
    MPI_Comm a, b;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &a));
    int v = -1, w = -1, last = size - 1, msg = 42;
    MPI_Request r = MPI_REQUEST_NULL;
    if (rank == 0)
        OK(MPI_Irecv(&v, 1, MPI_INT, last, 7, a, &r));
    if (rank == last && last != 0)
        OK(MPI_Send(&msg, 1, MPI_INT, 0, 7, a));
    OK(MPI_Comm_free(&a));
    CHECK(a == MPI_COMM_NULL);
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &b));
    OK(MPI_Allreduce(&rank, &w, 1, MPI_INT, MPI_MAX, b));
    CHECK(w == last);
    OK(MPI_Comm_free(&b));
    if (rank == 0 && last != 0) {
        MPI_Status st;
        OK(MPI_Wait(&r, &st));
        CHECK(v == 42 && st.MPI_SOURCE == last && st.MPI_TAG == 7);
    } else if (rank == 0) {
        OK(MPI_Cancel(&r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    free_with_pending_receive(rank, world_size());
    for (int i = 0; i < 5000; i++) {
        MPI_Comm c;
        OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2 ? MPI_UNDEFINED : 0, rank, &c));
        if (rank % 2) {
            CHECK(c == MPI_COMM_NULL);
        } else {
            int size;
            OK(MPI_Comm_size(c, &size));
            CHECK(size == (world_size() + 1) / 2);
            OK(MPI_Comm_free(&c));
        }
        MPI_Request r;
        OK(MPI_Comm_idup(MPI_COMM_WORLD, &c, &r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        OK(MPI_Comm_free(&c));
    }
    pass("contexts");
    return 0;
}
