#include <mpi.h>
#include <stdio.h>
/* Rank 0 posts K receives (one tag each), rank 1 sends K 8-byte messages in reverse tag order;
 * rank 0 completes them with MPI_Waitany (or Waitsome). Then a reply. us per round. */
#define K 16
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int some = argc > 1 && argv[1][0] == 's';
    long b[K], x = 0; MPI_Request r[K]; int n = 20000;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < n; it++) {
        if (rank == 0) {
            for (int k = 0; k < K; k++) MPI_Irecv(&b[k], 1, MPI_LONG, 1, k, MPI_COMM_WORLD, &r[k]);
            MPI_Send(&x, 1, MPI_LONG, 1, 100, MPI_COMM_WORLD);
            int left = K;
            while (left > 0) {
                if (some) { int out, idx[K]; MPI_Waitsome(K, r, &out, idx, MPI_STATUSES_IGNORE); left -= out; }
                else { int i; MPI_Waitany(K, r, &i, MPI_STATUS_IGNORE); left--; }
            }
        } else {
            MPI_Recv(&x, 1, MPI_LONG, 0, 100, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int k = K - 1; k >= 0; k--) MPI_Send(&x, 1, MPI_LONG, 0, k, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) printf("%s: %.2f us per round of %d\n", some ? "Waitsome" : "Waitany", (MPI_Wtime() - t0) / n * 1e6, K);
    MPI_Finalize();
}
