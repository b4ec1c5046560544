/* Messages to oneself (MPI 3.1, 3.5: a process may send to itself; with the receive posted
 * first a blocking send cannot deadlock, and a non-blocking send completes once the receive is
 * posted): 4 MiB, larger than any eager limit, both ways round. */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    int n = 4 << 20;
    char *a = malloc(n), *b = malloc(n);
    CHECK(a && b);
    for (int i = 0; i < n; i++)
        a[i] = (char)(i * 13 + rank);
    MPI_Request r;
    MPI_Status st;
    OK(MPI_Irecv(b, n, MPI_BYTE, rank, 0, MPI_COMM_WORLD, &r));
    OK(MPI_Send(a, n, MPI_BYTE, rank, 0, MPI_COMM_WORLD));
    OK(MPI_Wait(&r, &st));
    CHECK(st.MPI_SOURCE == rank && memcmp(a, b, n) == 0);
    memset(b, 0, n);
    OK(MPI_Isend(a, n, MPI_BYTE, rank, 1, MPI_COMM_WORLD, &r));
    OK(MPI_Recv(b, n, MPI_BYTE, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &st));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(st.MPI_SOURCE == rank && memcmp(a, b, n) == 0);
    free(a), free(b);
    pass("selfsend");
    return 0;
}
