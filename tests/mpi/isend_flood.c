/* Ranks in pairs (0-1, 2-3, ...) each start COUNT non-blocking sends of SIZE bytes to the other
 * before either posts a receive, then post the receives and wait for all. MPI-3.1 3.7: a
 * non-blocking send returns at once, whatever the receiver does; so however much is sent before
 * the receives (here more than an implementation buffers), the program completes, and every
 * message arrives intact and in order (3.5: messages between a pair do not overtake).
 *
 *   isend_flood [COUNT [SIZE]]   (default 1600 messages of 64 KiB: 100 MiB each way) */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), n = world_size();
    CHECK(n % 2 == 0);
    int count = argc > 1 ? atoi(argv[1]) : 1600;
    int size = argc > 2 ? atoi(argv[2]) : 65536;
    int peer = rank ^ 1;
    size_t total = (size_t)count * (size_t)size;
    unsigned char *s = malloc(total), *r = malloc(total);
    MPI_Request *q = malloc(sizeof *q * 2 * (size_t)count);
    CHECK(s && r && q);
    for (size_t i = 0; i < total; i++)
        s[i] = (unsigned char)(i * 7 + (size_t)rank * 13);
    memset(r, 0, total);
    /* The same tag for every message: only the pair's order tells them apart. */
    for (int i = 0; i < count; i++)
        OK(MPI_Isend(s + (size_t)i * size, size, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &q[i]));
    for (int i = 0; i < count; i++)
        OK(MPI_Irecv(r + (size_t)i * size, size, MPI_BYTE, peer, 5, MPI_COMM_WORLD, &q[count + i]));
    OK(MPI_Waitall(2 * count, q, MPI_STATUSES_IGNORE));
    for (size_t i = 0; i < total; i++)
        if (r[i] != (unsigned char)(i * 7 + (size_t)peer * 13)) {
            fprintf(stderr, "rank %d: byte %zu of %zu is %u, expected %u\n", rank, i, total, r[i],
                    (unsigned char)(i * 7 + (size_t)peer * 13));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    /* The send buffers were the program's again once the sends completed. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    free(s);
    free(r);
    free(q);
    if (rank == 0)
        printf("isend_flood: ok\n");
    MPI_Finalize();
    return 0;
}
