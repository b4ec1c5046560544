/* A broadcast whose ranks pass different counts is the program's error (MPI-3.1 5.4: the
 * amount of data sent must equal the amount received, pairwise between each process and the
 * root). With MPI_ERRORS_RETURN, a rank whose buffer is longer or shorter than the root's must
 * be told, not handed bytes the root never sent or a silently cut message; the communicator
 * then works on as before. Short counts, as MPICH's errors/coll/bcastlength and ibcastlength
 * ask (the root may not detect it), and long ones, whose broadcast runs as several rounds of
 * messages: every rank must come back (none left waiting for a rank that stopped at its
 * mismatch), and every rank whose count differs from the root's must be told, also one whose
 * own messages all had the length it expected (it got its part through the others). */
#include "check.h"

static void expect_error_away_from_root(int rc, int rank) {
    if (rank != 0)
        CHECK(rc != MPI_SUCCESS);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    enum { LARGE = 32768 };
    static int buf[LARGE];
    for (int round = 0; round < 4; round++) {
        /* Rounds 0 and 2 blocking, 1 and 3 non-blocking; 0 and 1 small (10 ints against 1),
         * 2 and 3 large (32 Ki ints against 16 Ki); each: the others' buffers longer, then
         * shorter, than the root's. */
        int most = round < 2 ? 10 : LARGE, least = round < 2 ? 1 : LARGE / 2;
        for (int longer = 1; longer >= 0; longer--) {
            int n = (rank == 0) == longer ? least : most;
            for (int i = 0; i < most; i++)
                buf[i] = rank == 0 ? 100 + i : -1;
            int rc;
            if (round % 2 == 0) {
                rc = MPI_Bcast(buf, n, MPI_INT, 0, MPI_COMM_WORLD);
            } else {
                MPI_Request r;
                rc = MPI_Ibcast(buf, n, MPI_INT, 0, MPI_COMM_WORLD, &r);
                if (rc == MPI_SUCCESS)
                    rc = MPI_Wait(&r, MPI_STATUS_IGNORE);
            }
            if (size > 1)
                expect_error_away_from_root(rc, rank);
        }
    }
    /* The world still works: a broadcast and an allreduce of matching counts. */
    for (int i = 0; i < 10; i++)
        buf[i] = rank == 0 ? 7 * i : -1;
    OK(MPI_Bcast(buf, 10, MPI_INT, 0, MPI_COMM_WORLD));
    for (int i = 0; i < 10; i++)
        CHECK(buf[i] == 7 * i);
    int one = 1, sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0)
        printf("coll_mismatch: ok\n");
    MPI_Finalize();
    return 0;
}
