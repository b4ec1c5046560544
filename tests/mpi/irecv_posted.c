/* A receive started by MPI_Irecv is posted when the call returns (MPI-3.1 3.7.2, 3.5): it
 * matches before any receive or probe the program makes later, it can be cancelled while
 * unmatched, and the matching continues while the program is in any other call. Written for
 * the implementations that may hold a receive back until it is waited for: each check fails
 * if a later call could overtake or miss it. Two ranks (more: the extra ones only take part in
 * the barriers). */
#include "check.h"
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 2);
    MPI_Status st;
    int flag;

    /* 1. A probe after the receive never sees the message the receive takes. */
    if (rank == 1) {
        usleep(20000);
        int v = 11;
        OK(MPI_Send(&v, 1, MPI_INT, 0, 5, MPI_COMM_WORLD));
    } else if (rank == 0) {
        int got = -1;
        MPI_Request r;
        OK(MPI_Irecv(&got, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &r));
        /* The message arrives while this rank makes no MPI call at all. */
        usleep(200000);
        double end = MPI_Wtime() + 0.1;
        while (MPI_Wtime() < end) {
            OK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
            CHECK(!flag);
        }
        OK(MPI_Wait(&r, &st));
        CHECK(got == 11 && st.MPI_SOURCE == 1 && st.MPI_TAG == 5);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* 2. Two receives of one pattern take the messages in the order they were started, whichever
     * is waited for first. */
    if (rank == 1) {
        int a = 21, b = 22;
        OK(MPI_Send(&a, 1, MPI_INT, 0, 7, MPI_COMM_WORLD));
        OK(MPI_Send(&b, 1, MPI_INT, 0, 7, MPI_COMM_WORLD));
    } else if (rank == 0) {
        int x = -1, y = -1;
        MPI_Request r[2];
        OK(MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Irecv(&y, 1, MPI_INT, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &r[1]));
        OK(MPI_Wait(&r[1], &st));
        OK(MPI_Wait(&r[0], MPI_STATUS_IGNORE));
        CHECK(x == 21 && y == 22);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* 3. A receive started before a blocking receive of the same pattern comes first. */
    if (rank == 1) {
        int a = 31, b = 32;
        OK(MPI_Send(&a, 1, MPI_INT, 0, 8, MPI_COMM_WORLD));
        OK(MPI_Send(&b, 1, MPI_INT, 0, 8, MPI_COMM_WORLD));
    } else if (rank == 0) {
        int x = -1, y = -1;
        MPI_Request r;
        OK(MPI_Irecv(&x, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, &r));
        OK(MPI_Recv(&y, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(x == 31 && y == 32);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* 4. Both ranks start a large receive and then a large blocking send to each other: safe,
     * since each receive is posted before the sends (a rendezvous send waits for it). */
    if (rank < 2) {
        int n = 8 << 20, peer = 1 - rank;
        char *s = malloc(n), *d = malloc(n);
        CHECK(s && d);
        memset(s, 'a' + rank, n);
        memset(d, 0, n);
        MPI_Request r;
        OK(MPI_Irecv(d, n, MPI_BYTE, peer, 9, MPI_COMM_WORLD, &r));
        OK(MPI_Send(s, n, MPI_BYTE, peer, 9, MPI_COMM_WORLD));
        OK(MPI_Wait(&r, &st));
        CHECK(d[0] == 'a' + peer && d[n - 1] == 'a' + peer);
        /* The same with a non-blocking send and one wait for both. */
        memset(d, 0, n);
        MPI_Request q[2];
        OK(MPI_Irecv(d, n, MPI_BYTE, peer, 10, MPI_COMM_WORLD, &q[0]));
        OK(MPI_Isend(s, n, MPI_BYTE, peer, 10, MPI_COMM_WORLD, &q[1]));
        MPI_Status sts[2];
        OK(MPI_Waitall(2, q, sts));
        CHECK(d[0] == 'a' + peer && d[n / 2] == 'a' + peer);
        free(s);
        free(d);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* 5. An unmatched receive is cancelled; the message sent later goes to the next receive. */
    if (rank == 0) {
        int x = -1;
        MPI_Request r;
        OK(MPI_Irecv(&x, 1, MPI_INT, 1, 12, MPI_COMM_WORLD, &r));
        OK(MPI_Cancel(&r));
        OK(MPI_Wait(&r, &st));
        OK(MPI_Test_cancelled(&st, &flag));
        CHECK(flag && x == -1);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1) {
        int v = 41;
        OK(MPI_Send(&v, 1, MPI_INT, 0, 12, MPI_COMM_WORLD));
    } else if (rank == 0) {
        int x = -1;
        OK(MPI_Recv(&x, 1, MPI_INT, 1, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(x == 41);
    }

    /* 6. A receive waited for by tests only, across a barrier the sender enters after sending. */
    if (rank == 1) {
        int v = 51;
        OK(MPI_Send(&v, 1, MPI_INT, 0, 13, MPI_COMM_WORLD));
        OK(MPI_Barrier(MPI_COMM_WORLD));
    } else if (rank == 0) {
        int x = -1;
        MPI_Request r;
        OK(MPI_Irecv(&x, 1, MPI_INT, 1, 13, MPI_COMM_WORLD, &r));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        do {
            OK(MPI_Test(&r, &flag, &st));
        } while (!flag);
        CHECK(x == 51 && r == MPI_REQUEST_NULL);
    } else {
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }

    /* 7. Two receives are started, their messages and a third arrive while the rank makes no
     * call, then an any-tag receive is started: the messages go to the receives in the order
     * they were started, the any-tag one takes only the third. */
    if (rank == 1) {
        OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int k = 1; k <= 3; k++) {
            int v = 70 + k;
            OK(MPI_Send(&v, 1, MPI_INT, 0, 20 + k, MPI_COMM_WORLD));
        }
    } else if (rank == 0) {
        int x[3] = {-1, -1, -1};
        MPI_Request r[3];
        MPI_Status sts[3];
        OK(MPI_Irecv(&x[0], 1, MPI_INT, 1, 21, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Irecv(&x[1], 1, MPI_INT, 1, 22, MPI_COMM_WORLD, &r[1]));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        usleep(200000);
        OK(MPI_Irecv(&x[2], 1, MPI_INT, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &r[2]));
        OK(MPI_Waitall(3, r, sts));
        CHECK(x[0] == 71 && x[1] == 72 && x[2] == 73);
        CHECK(sts[2].MPI_TAG == 23 && sts[2].MPI_SOURCE == 1);
    } else {
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }

    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0)
        printf("irecv_posted: ok\n");
    MPI_Finalize();
    return 0;
}
