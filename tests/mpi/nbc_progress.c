/* Every blocking call moves non-blocking collectives on (MPI-3.1 3.7 and 5.12, the progress
 * rule): a rank that starts a collective and then waits in MPI_Probe, MPI_Mprobe, a loop of
 * MPI_Iprobe / MPI_Improbe, MPI_Ssend or a blocking collective on another communicator, for
 * something another rank does only once that collective has finished there, must not stop the
 * collective. In a scan by recursive doubling (as MPICH and volley make it)
 * rank 0's second step, to rank 2, needs what its first brought, so rank 2 finishes only if rank
 * 0 moves on while it probes. */
#include "check.h"

static void scan_then(int rank, int how) {
    long v = rank + 1, out = -1;
    MPI_Request r;
    MPI_Status st;
    MPI_Message m;
    int flag = 0;
    OK(MPI_Iscan(&v, &out, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &r));
    if (rank == 0) {
        /* Rank 2 sends once its scan is done. */
        int from = 2, got = -1;
        switch (how) {
        case 0:
            OK(MPI_Probe(from, 40, MPI_COMM_WORLD, &st));
            OK(MPI_Recv(&got, 1, MPI_INT, from, 40, MPI_COMM_WORLD, &st));
            break;
        case 1:
            OK(MPI_Mprobe(MPI_ANY_SOURCE, 41, MPI_COMM_WORLD, &m, &st));
            OK(MPI_Mrecv(&got, 1, MPI_INT, &m, &st));
            break;
        case 2:
            while (!flag)
                OK(MPI_Iprobe(from, 42, MPI_COMM_WORLD, &flag, &st));
            OK(MPI_Recv(&got, 1, MPI_INT, from, 42, MPI_COMM_WORLD, &st));
            break;
        default:
            while (!flag)
                OK(MPI_Improbe(from, 43, MPI_COMM_WORLD, &flag, &m, &st));
            OK(MPI_Mrecv(&got, 1, MPI_INT, &m, &st));
            break;
        }
        CHECK(st.MPI_SOURCE == from && got == 1000 + how);
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        if (rank == 2) {
            int x = 1000 + how;
            OK(MPI_Send(&x, 1, MPI_INT, 0, 40 + how, MPI_COMM_WORLD));
        }
    }
    CHECK(out == (long)(rank + 1) * (rank + 2) / 2);
}

/* Rank 2 enters a blocking operation with the others only once its scan is done; the others
 * enter it first and wait for their scans after. */
static void scan_around(int rank, int size, MPI_Comm other, int how) {
    long v = rank + 1, out = -1;
    MPI_Request r;
    OK(MPI_Iscan(&v, &out, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &r));
    if (rank == 2)
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    enum { N = 40000 }; /* longs: far above any eager limit */
    long *a = malloc(sizeof(long) * N * size), *b = malloc(sizeof(long) * N * size);
    CHECK(a && b);
    for (int i = 0; i < N * size; i++)
        a[i] = rank * 7 + i;
    switch (how) {
    case 0:
        OK(MPI_Barrier(other));
        break;
    case 1:
        OK(MPI_Allreduce(a, b, 1, MPI_LONG, MPI_SUM, other));
        CHECK(b[0] == 7L * size * (size - 1) / 2);
        break;
    case 2:
        OK(MPI_Allreduce(a, b, N, MPI_LONG, MPI_SUM, other));
        CHECK(b[N - 1] == 7L * size * (size - 1) / 2 + (long)size * (N - 1));
        break;
    case 3:
        OK(MPI_Bcast(a, N, MPI_LONG, 2, other));
        CHECK(a[5] == 2 * 7 + 5);
        break;
    case 4:
        OK(MPI_Alltoall(a, N, MPI_LONG, b, N, MPI_LONG, other));
        for (int k = 0; k < size; k++)
            CHECK(b[k * N] == k * 7 + rank * N);
        break;
    default:
        /* A synchronous send completes only once rank 2 has posted its receive. */
        if (rank == 0)
            OK(MPI_Ssend(a, N, MPI_LONG, 2, 9, other));
        else if (rank == 2) {
            OK(MPI_Recv(b, N, MPI_LONG, 0, 9, other, MPI_STATUS_IGNORE));
            CHECK(b[N - 1] == N - 1);
        }
        break;
    }
    if (rank != 2)
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(out == (long)(rank + 1) * (rank + 2) / 2);
    free(a);
    free(b);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 3);
    for (int how = 0; how < 4; how++)
        scan_then(rank, how);
    MPI_Comm other;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &other));
    for (int how = 0; how < 6; how++)
        scan_around(rank, size, other, how);
    OK(MPI_Comm_free(&other));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    pass("nbc_progress");
    return 0;
}
