#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* rank 0 posts N receives (tag i), rank 1 sends N 8-byte messages in reverse (or same) order; rank 0 MPI_Waitall. */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int n = argc > 1 ? atoi(argv[1]) : 4000, rev = argc > 2 && argv[2][0] == 'r', reps = 20;
    long *b = calloc(n, sizeof(long)); MPI_Request *r = malloc(n * sizeof(MPI_Request));
    double t = 0;
    for (int k = 0; k < reps; k++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == 0) {
            for (int i = 0; i < n; i++) MPI_Irecv(&b[i], 1, MPI_LONG, 1, i, MPI_COMM_WORLD, &r[i]);
            MPI_Send(b, 0, MPI_LONG, 1, 0, MPI_COMM_WORLD);
            MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
        } else {
            MPI_Recv(b, 0, MPI_LONG, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int i = 0; i < n; i++) { int tag = rev ? n - 1 - i : i; b[0] = tag; MPI_Isend(&b[0], 1, MPI_LONG, 0, tag, MPI_COMM_WORLD, &r[i]); }
            MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
        }
        t += MPI_Wtime() - t0;
    }
    if (rank == 0) printf("%d %s: %.1f us per round\n", n, rev ? "reverse" : "in order", t / reps * 1e6);
    MPI_Finalize();
}
