/* A broadcast's root runs ahead of slow receivers (MPI_Bcast may return at the root before any
 * receiver has the data), then a barrier follows: every receiver still gets each broadcast's
 * data and count. The receivers pause before each broadcast, so that the root is as far ahead
 * as the implementation lets it be when it reaches the barrier (volley's shared-memory
 * collectives once let that barrier overwrite the count of a broadcast a receiver had not read
 * yet, which then failed with a count mismatch). Then the same with the roles turning. */
#include "check.h"
#include <time.h>

enum { ROUNDS = 24 };

static void pause_ms(long ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    for (int root = 0; root < size && root < 2; root++) {
        OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int k = 0; k < ROUNDS; k++) {
            uint64_t v[2] = {0, 0};
            if (rank == root) {
                v[0] = h4(1, (uint64_t)k, (uint64_t)root, 0);
                v[1] = h4(1, (uint64_t)k, (uint64_t)root, 1);
            } else {
                pause_ms(1);
            }
            OK(MPI_Bcast(v, 2, MPI_UINT64_T, root, MPI_COMM_WORLD));
            CHECK(v[0] == h4(1, (uint64_t)k, (uint64_t)root, 0));
            CHECK(v[1] == h4(1, (uint64_t)k, (uint64_t)root, 1));
        }
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    if (rank == 0)
        printf("bcast_ahead: ok\n");
    MPI_Finalize();
    return 0;
}
