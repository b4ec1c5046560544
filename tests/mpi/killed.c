/* A peer that dies (the fault-tolerance proposal's MPIX_ERR_PROC_FAILED): rank 1 is killed while
 * rank 0 waits to receive from it. Rank 0, with MPI_ERRORS_RETURN, must get an error instead of
 * hanging, and say so. (An MPI whose launcher ends the whole job when a rank dies, as MPICH's
 * does, passes by ending the job: the test's harness checks that nothing hangs.) */
#include "check.h"
#include <signal.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1) {
        usleep(200000);
        kill(getpid(), SIGKILL);
    }
    if (rank == 0) {
        int x;
        int rc = MPI_Recv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(rc != MPI_SUCCESS);
        int cls;
        OK(MPI_Error_class(rc, &cls));
        char s[MPI_MAX_ERROR_STRING];
        int len;
        OK(MPI_Error_string(rc, s, &len));
        printf("killed: rank 0's receive from the dead rank failed (class %d%s): %s\n", cls,
               cls == MPIX_ERR_PROC_FAILED ? ", MPIX_ERR_PROC_FAILED" : "", s);
        fflush(stdout);
        /* A send to it fails too, or completes locally; it never hangs. */
        MPI_Send(&x, 1, MPI_INT, 1, 1, MPI_COMM_WORLD);
    }
    if (rank >= 2)
        sleep(1);
    /* No barrier: the dead rank cannot join one. */
    MPI_Finalize();
    return 0;
}
