#include <mpi.h>
#include <stdio.h>
/* Cost of MPI_Iprobe that finds nothing, and of MPI_Testall/MPI_Testsome on pending receives. */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int flag; MPI_Status st; long n = 2000000; long buf[4][16];
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
    double probe = MPI_Wtime() - t0;
    MPI_Request r[4];
    for (int k = 0; k < 4; k++) MPI_Irecv(buf[k], 16, MPI_LONG, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &r[k]);
    t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) MPI_Testall(4, r, &flag, MPI_STATUSES_IGNORE);
    double all = MPI_Wtime() - t0;
    int out, idx[4];
    t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) MPI_Testsome(4, r, &out, idx, MPI_STATUSES_IGNORE);
    double some = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < 4; k++) MPI_Send(buf[k], 16, MPI_LONG, 1 - rank, 7, MPI_COMM_WORLD);
    MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
    if (rank == 0) printf("Iprobe %.1f ns, Testall(4) %.1f ns, Testsome(4) %.1f ns\n", probe / n * 1e9, all / n * 1e9, some / n * 1e9);
    MPI_Finalize();
    return 0;
}
