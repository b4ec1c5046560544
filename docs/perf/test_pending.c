#include <mpi.h>
#include <stdio.h>
/* Cost of MPI_Test on a receive that has not arrived (HPCC RandomAccess's inner loop). */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long buf[1024]; MPI_Request r; int flag; MPI_Status st;
    const char *mode = argc > 1 ? argv[1] : "any";
    int src = mode[0] == 'a' ? MPI_ANY_SOURCE : 1 - rank;
    int tag = mode[0] == 'a' ? MPI_ANY_TAG : 5;
    MPI_Irecv(buf, 1024, MPI_LONG, src, tag, MPI_COMM_WORLD, &r);
    long n = 2000000;
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) MPI_Test(&r, &flag, &st);
    double pend = MPI_Wtime() - t0;
    MPI_Request o = MPI_REQUEST_NULL;
    t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) MPI_Test(&o, &flag, MPI_STATUS_IGNORE);
    double null = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Send(buf, 1, MPI_LONG, 1 - rank, 5, MPI_COMM_WORLD);
    MPI_Wait(&r, &st);
    if (rank == 0) printf("%s: MPI_Test pending %.1f ns/call, on MPI_REQUEST_NULL %.1f ns/call\n", mode, pend / n * 1e9, null / n * 1e9);
    MPI_Finalize();
    return 0;
}
