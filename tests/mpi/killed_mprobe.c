/* A sender that dies after a matched probe took its large message (its data still with it):
 * rank 0's MPI_Mrecv must fail with an error, not hang (as killed.c for a receive). An MPI whose
 * launcher ends the whole job when a rank dies, as MPICH's does, passes by ending the job. */
#include "check.h"
#include <signal.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int n = 8 << 20;
    char *b = malloc(n);
    CHECK(b);
    memset(b, 3, n);
    if (rank == 1) {
        MPI_Request r;
        OK(MPI_Isend(b, n, MPI_BYTE, 0, 5, MPI_COMM_WORLD, &r));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        usleep(200000);
        kill(getpid(), SIGKILL);
    }
    if (rank == 0) {
        MPI_Message m;
        MPI_Status st;
        OK(MPI_Mprobe(1, 5, MPI_COMM_WORLD, &m, &st));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        usleep(600000);
        int rc = MPI_Mrecv(b, n, MPI_BYTE, &m, &st);
        CHECK(rc != MPI_SUCCESS);
        int cls, len;
        char s[MPI_MAX_ERROR_STRING];
        OK(MPI_Error_class(rc, &cls));
        OK(MPI_Error_string(rc, s, &len));
        printf("killed_mprobe: rank 0's MPI_Mrecv from the dead rank failed (class %d%s): %s\n",
               cls, cls == MPIX_ERR_PROC_FAILED ? ", MPIX_ERR_PROC_FAILED" : "", s);
        fflush(stdout);
    }
    if (rank >= 2) {
        OK(MPI_Barrier(MPI_COMM_WORLD));
        sleep(1);
    }
    MPI_Finalize();
    return 0;
}
