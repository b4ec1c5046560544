/* MPI_Abort (MPI-3.1 section 8.7): ends every process of the job; the launcher's exit status is
 * the error code. Rank 1 aborts with 7 while the others wait in a receive that never completes. */
#include "check.h"
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 2);
    if (rank == 1) {
        usleep(100000);
        MPI_Abort(MPI_COMM_WORLD, 7);
    }
    int x;
    MPI_Recv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("rank %d: not stopped by MPI_Abort\n", rank);
    MPI_Finalize();
    return 0;
}
