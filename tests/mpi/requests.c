/* Requests (MPI-3.1 sections 3.7 and 3.9): Waitany, Waitsome, Testany, Testsome, Testall with
 * null requests in the arrays, Request_get_status, Cancel of a receive, Request_free of an active
 * send, and persistent requests started again and again. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    const int N = 8;
    int buf[8], out[8];
    MPI_Request r[8];
    MPI_Status st[8];
    if (rank == 0) {
        /* Receives posted for tags 0..N-1 in reverse; rank 1 sends them in order. */
        for (int i = 0; i < N; i++)
            OK(MPI_Irecv(&buf[i], 1, MPI_INT, 1, i, MPI_COMM_WORLD, &r[i]));
        r[3] = MPI_REQUEST_NULL; /* one slot null: skipped by every call */
        int done = 0, idx, flag;
        OK(MPI_Barrier(MPI_COMM_WORLD));
        OK(MPI_Waitany(N, r, &idx, &st[0]));
        CHECK(idx >= 0 && idx < N && idx != 3 && r[idx] == MPI_REQUEST_NULL && buf[idx] == 100 + idx);
        CHECK(st[0].MPI_TAG == idx);
        done++;
        while (done < N - 1) {
            int outc, ind[8];
            OK(MPI_Waitsome(N, r, &outc, ind, st));
            CHECK(outc >= 1);
            for (int k = 0; k < outc; k++) {
                CHECK(buf[ind[k]] == 100 + ind[k] && st[k].MPI_TAG == ind[k]);
                CHECK(r[ind[k]] == MPI_REQUEST_NULL);
            }
            done += outc;
        }
        /* Nothing active: Waitsome says MPI_UNDEFINED, Testany flag true with MPI_UNDEFINED. */
        int outc;
        int ind[8];
        OK(MPI_Waitsome(N, r, &outc, ind, st));
        CHECK(outc == MPI_UNDEFINED);
        OK(MPI_Testany(N, r, &idx, &flag, &st[0]));
        CHECK(flag && idx == MPI_UNDEFINED);
        OK(MPI_Testall(N, r, &flag, MPI_STATUSES_IGNORE));
        CHECK(flag);
        /* Cancel a receive nothing will match. */
        MPI_Request c;
        OK(MPI_Irecv(buf, 1, MPI_INT, 1, 999, MPI_COMM_WORLD, &c));
        OK(MPI_Cancel(&c));
        OK(MPI_Wait(&c, &st[0]));
        OK(MPI_Test_cancelled(&st[0], &flag));
        CHECK(flag);
        /* Persistent receives, restarted 10 times. */
        MPI_Request p[2];
        OK(MPI_Recv_init(&buf[0], 1, MPI_INT, 1, 50, MPI_COMM_WORLD, &p[0]));
        OK(MPI_Recv_init(&buf[1], 1, MPI_INT, 1, 51, MPI_COMM_WORLD, &p[1]));
        for (int it = 0; it < 10; it++) {
            OK(MPI_Startall(2, p));
            OK(MPI_Waitall(2, p, st));
            CHECK(buf[0] == it && buf[1] == -it && p[0] != MPI_REQUEST_NULL);
            CHECK(st[1].MPI_TAG == 51);
        }
        /* An inactive persistent request waits at once with an empty status. */
        OK(MPI_Wait(&p[0], &st[0]));
        CHECK(st[0].MPI_SOURCE == MPI_ANY_SOURCE && st[0].MPI_TAG == MPI_ANY_TAG);
        OK(MPI_Request_free(&p[0]));
        OK(MPI_Request_free(&p[1]));
        CHECK(p[0] == MPI_REQUEST_NULL);
        /* Testing until done, and Request_get_status, which leaves the request alive. */
        OK(MPI_Irecv(&buf[2], 1, MPI_INT, 1, 60, MPI_COMM_WORLD, &c));
        /* A single-completion call leaves MPI_ERROR alone (MPI-3.1 section 3.2.5). */
        st[0].MPI_ERROR = 12345;
        flag = 0;
        while (!flag)
            OK(MPI_Request_get_status(c, &flag, &st[0]));
        CHECK(c != MPI_REQUEST_NULL && st[0].MPI_TAG == 60 && st[0].MPI_ERROR == 12345);
        OK(MPI_Test(&c, &flag, &st[0]));
        CHECK(flag && c == MPI_REQUEST_NULL && buf[2] == 60);
        OK(MPI_Recv(&buf[3], 1, MPI_INT, 1, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(buf[3] == 61);
    } else if (rank == 1) {
        for (int i = 0; i < N; i++)
            out[i] = 100 + i;
        OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int i = 0; i < N; i++)
            if (i != 3)
                OK(MPI_Send(&out[i], 1, MPI_INT, 0, i, MPI_COMM_WORLD));
        MPI_Request p[2];
        int a, b;
        OK(MPI_Send_init(&a, 1, MPI_INT, 0, 50, MPI_COMM_WORLD, &p[0]));
        OK(MPI_Ssend_init(&b, 1, MPI_INT, 0, 51, MPI_COMM_WORLD, &p[1]));
        for (int it = 0; it < 10; it++) {
            a = it;
            b = -it;
            OK(MPI_Start(&p[0]));
            OK(MPI_Start(&p[1]));
            OK(MPI_Waitall(2, p, MPI_STATUSES_IGNORE));
        }
        OK(MPI_Request_free(&p[0]));
        OK(MPI_Request_free(&p[1]));
        /* A send freed while active still arrives. */
        int v60 = 60, v61 = 61;
        MPI_Request f;
        OK(MPI_Isend(&v60, 1, MPI_INT, 0, 60, MPI_COMM_WORLD, &f));
        OK(MPI_Request_free(&f));
        CHECK(f == MPI_REQUEST_NULL);
        OK(MPI_Send(&v61, 1, MPI_INT, 0, 61, MPI_COMM_WORLD));
    } else {
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    pass("requests");
    return 0;
}
