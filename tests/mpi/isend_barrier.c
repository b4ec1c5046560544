/* A large non-blocking send followed by a barrier, its receive posted only after it (the pattern
 * of MPICH's pt2pt/precv_anysrc): the barrier's messages queue behind the large message, which
 * fills the ring, so the receiver must take the unexpected data out of the ring to see them.
 * Sizes from 64 B to 2 MB, in a sequence that leaves the ring's write position where a record of
 * the largest size has to wrap. */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 2);
    int sizes[] = {64, 32768, 2000000, 64, 2000000, 1000, 3000000};
    for (int k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); k++) {
        int n = sizes[k];
        unsigned char *buf = malloc(n);
        CHECK(buf);
        MPI_Request req;
        if (rank == 0) {
            memset(buf, 0, n);
            OK(MPI_Recv_init(buf, n, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &req));
            OK(MPI_Barrier(MPI_COMM_WORLD));
            OK(MPI_Start(&req));
            MPI_Status st;
            OK(MPI_Wait(&req, &st));
            int count;
            OK(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK(count == n && st.MPI_SOURCE == 1);
            for (int i = 0; i < n; i += 997)
                CHECK(buf[i] == (unsigned char)(i % 100));
            OK(MPI_Request_free(&req));
        } else {
            for (int i = 0; i < n; i++)
                buf[i] = i % 100;
            if (rank == 1)
                OK(MPI_Isend(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req));
            OK(MPI_Barrier(MPI_COMM_WORLD));
            if (rank == 1)
                OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        }
        free(buf);
    }
    pass("isend_barrier");
    return 0;
}
