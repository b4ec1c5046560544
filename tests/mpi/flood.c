/* A flood of unexpected large messages (the bound on memory): rank 1 starts 24
 * non-blocking sends of 8 MiB to rank 0, which receives them only later (in order, or with
 * argument "reverse" last first) into one buffer. Every byte must arrive, and rank 0's peak
 * memory must stay far below the 192 MiB in flight: the MPI library may not buffer what the
 * program has not asked for without bound. */
#include "check.h"
#include <string.h>
#include <unistd.h>

#define N 24
#define LEN (8 << 20)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    int reverse = argc > 1 && strcmp(argv[1], "reverse") == 0;
    CHECK(world_size() >= 2);
    if (rank == 1) {
        unsigned char *buf = malloc((size_t)N * LEN);
        CHECK(buf);
        MPI_Request r[N];
        for (int i = 0; i < N; i++) {
            memset(buf + (size_t)i * LEN, i + 1, LEN);
            OK(MPI_Isend(buf + (size_t)i * LEN, LEN, MPI_BYTE, 0, i, MPI_COMM_WORLD, &r[i]));
        }
        OK(MPI_Waitall(N, r, MPI_STATUSES_IGNORE));
        free(buf);
    } else if (rank == 0) {
        long before = peak_kib();
        unsigned char *buf = malloc(LEN);
        CHECK(buf);
        memset(buf, 0, LEN);
        sleep(1);
        for (int k = 0; k < N; k++) {
            int i = reverse ? N - 1 - k : k;
            MPI_Status st;
            int count;
            OK(MPI_Recv(buf, LEN, MPI_BYTE, 1, i, MPI_COMM_WORLD, &st));
            OK(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK(count == LEN);
            for (size_t j = 0; j < LEN; j += 4093)
                CHECK(buf[j] == (unsigned char)(i + 1));
            CHECK(buf[LEN - 1] == (unsigned char)(i + 1));
        }
        long grown = peak_kib() - before;
        printf("flood: receiver's peak memory grew by %ld KiB for %d MiB sent\n", grown, N * (LEN >> 20));
        /* 8 MiB of our own buffer, plus at most 64 MiB of the library's. */
        CHECK(grown < 72 * 1024);
    }
    pass("flood");
    return 0;
}
