/* Communicator contexts go back (MPI 3.1, 6.4: MPI_Comm_free; a split's MPI_UNDEFINED gives
 * MPI_COMM_NULL and no communicator): more communicators are made and freed, one at a time,
 * than an MPI has contexts for at once, by MPI_Comm_split with some ranks left out and by
 * MPI_Comm_idup. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
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
