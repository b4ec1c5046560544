/* Synchronous mode (MPI-3.1 section 3.4): MPI_Ssend / MPI_Issend complete only once a receive
 * has matched the message, however small it is; a buffered send of the same size does not wait
 * (a standard one may or may not: MPI need not buffer it). */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    int v = 42;
    if (rank == 0) {
        MPI_Request r;
        OK(MPI_Issend(&v, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, &r));
        /* Rank 1 posts its receive only after the barrier: until then the send cannot complete. */
        int flag = 0;
        double t0 = MPI_Wtime();
        while (MPI_Wtime() - t0 < 0.3) {
            OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
            CHECK(!flag);
        }
        OK(MPI_Barrier(MPI_COMM_WORLD));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        /* A blocking Ssend to a receive already posted completes. */
        OK(MPI_Ssend(&v, 1, MPI_INT, 1, 2, MPI_COMM_WORLD));
        /* Several outstanding with one tag complete in order as they are matched. */
        MPI_Request rs[4];
        for (int i = 0; i < 4; i++)
            OK(MPI_Issend(&v, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, &rs[i]));
        OK(MPI_Waitall(4, rs, MPI_STATUSES_IGNORE));
        /* A buffered send of the same message completes without a receive (a standard send
         * need not: MPI may hold it until the receive is posted, after the barrier). */
        int bsize;
        OK(MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &bsize));
        bsize += MPI_BSEND_OVERHEAD;
        void *bbuf = malloc(bsize);
        CHECK(bbuf);
        OK(MPI_Buffer_attach(bbuf, bsize));
        OK(MPI_Bsend(&v, 1, MPI_INT, 1, 4, MPI_COMM_WORLD));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        /* Detaching waits for the buffered message to be delivered. */
        void *det;
        OK(MPI_Buffer_detach(&det, &bsize));
        CHECK(det == bbuf);
        free(bbuf);
    } else {
        OK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank == 1) {
            int got;
            OK(MPI_Recv(&got, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(got == 42);
            OK(MPI_Recv(&got, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (int i = 0; i < 4; i++)
                OK(MPI_Recv(&got, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
        OK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank == 1) {
            int got;
            OK(MPI_Recv(&got, 1, MPI_INT, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        }
    }
    pass("ssend");
    return 0;
}
