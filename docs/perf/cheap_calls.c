#include <mpi.h>
#include <stdio.h>
#include <string.h>
/* ns per call of cheap MPI calls, rank 0 (rank 1 waits in a barrier). */
#define N 2000000
#define T(name, stmt) do { double t0 = MPI_Wtime(); for (long i = 0; i < N; i++) { stmt; } \
    double t = (MPI_Wtime() - t0) / N * 1e9; if (rank == 0) printf("%-28s %7.1f ns\n", name, t); } while (0)
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, x = 0, flag, cnt, sz; MPI_Status st; volatile double w;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Request r; long buf[64]; char pk[256]; int pos;
    MPI_Irecv(buf, 64, MPI_LONG, 1 - rank, 99, MPI_COMM_WORLD, &r);
    T("MPI_Wtime", w = MPI_Wtime());
    T("MPI_Comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &x));
    T("MPI_Comm_size", MPI_Comm_size(MPI_COMM_WORLD, &size));
    T("MPI_Type_size", MPI_Type_size(MPI_DOUBLE, &sz));
    T("MPI_Request_get_status", MPI_Request_get_status(r, &flag, &st));
    T("MPI_Iprobe(1, tag)", MPI_Iprobe(1 - rank, 5, MPI_COMM_WORLD, &flag, &st));
    T("MPI_Pack 8 doubles", (pos = 0, MPI_Pack(buf, 8, MPI_DOUBLE, pk, 256, &pos, MPI_COMM_WORLD)));
    T("MPI_Comm_get_attr TAG_UB", { void *v; MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &v, &flag); });
    T("Isend+Recv+Wait self 8B", { MPI_Request q; MPI_Isend(buf, 1, MPI_LONG, rank, 7, MPI_COMM_WORLD, &q); MPI_Recv(buf + 8, 1, MPI_LONG, rank, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Wait(&q, MPI_STATUS_IGNORE); });
    T("Sendrecv self 8B", MPI_Sendrecv(buf, 1, MPI_LONG, rank, 8, buf + 8, 1, MPI_LONG, rank, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    T("Get_count", MPI_Get_count(&st, MPI_LONG, &cnt));
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Send(buf, 1, MPI_LONG, 1 - rank, 99, MPI_COMM_WORLD);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    MPI_Finalize();
    return 0;
}
