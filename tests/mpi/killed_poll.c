/* A peer that dies while its receiver polls: rank 1 is killed while rank 0 tests, over and over,
 * a receive posted from it, as a program that computes between tests does (MPI_Test, then
 * MPI_Testany and MPI_Testsome). Rank 0, with MPI_ERRORS_RETURN, must see its test fail instead
 * of finding the receive pending forever: also for a receive posted after the death, and while
 * a receive from a live rank (rank 2) waits beside it. (An MPI whose launcher ends the whole
 * job when a rank dies, as MPICH's does, passes by ending the job.) */
#include "check.h"
#include <signal.h>
#include <unistd.h>

/* Tests `r` until the test fails or the receive completes; the rc of the last test. */
static int poll_one(MPI_Request *r, int how) {
    for (;;) {
        int flag = 0, idx = -1, out = 0, rc;
        if (how == 0)
            rc = MPI_Test(r, &flag, MPI_STATUS_IGNORE);
        else if (how == 1)
            rc = MPI_Testany(1, r, &idx, &flag, MPI_STATUS_IGNORE);
        else {
            rc = MPI_Testsome(1, r, &out, &idx, MPI_STATUSES_IGNORE);
            flag = out > 0;
        }
        if (rc != MPI_SUCCESS || flag)
            return rc;
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 3);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1) {
        usleep(200000);
        kill(getpid(), SIGKILL);
    }
    if (rank == 0) {
        int x = 0, y = 0;
        /* Rank 2's message comes only once rank 0 says it is done. */
        MPI_Request live;
        OK(MPI_Irecv(&y, 1, MPI_INT, 2, 5, MPI_COMM_WORLD, &live));
        for (int how = 0; how < 3; how++) {
            MPI_Request r;
            OK(MPI_Irecv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &r));
            int rc = poll_one(&r, how);
            CHECK(rc != MPI_SUCCESS);
            int cls;
            OK(MPI_Error_class(rc, &cls));
            printf("killed_poll: test %d of a receive from the dead rank failed (class %d)\n", how,
                   cls);
            fflush(stdout);
            if (r != MPI_REQUEST_NULL)
                MPI_Request_free(&r);
        }
        int flag = 0;
        OK(MPI_Test(&live, &flag, MPI_STATUS_IGNORE));
        CHECK(!flag);
        OK(MPI_Send(&x, 1, MPI_INT, 2, 6, MPI_COMM_WORLD));
        OK(MPI_Wait(&live, MPI_STATUS_IGNORE));
        CHECK(y == 42);
        printf("killed_poll: the live rank's message arrived\n");
        fflush(stdout);
    }
    if (rank == 2) {
        int x, y = 42;
        OK(MPI_Recv(&x, 1, MPI_INT, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Send(&y, 1, MPI_INT, 0, 5, MPI_COMM_WORLD));
    }
    /* No barrier: the dead rank cannot join one. */
    MPI_Finalize();
    return 0;
}
