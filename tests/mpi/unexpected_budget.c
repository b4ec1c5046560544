/* More unreceived small messages than a receiver may have to hold: rank 1 sends N messages of
 * 1 KiB with tag 1, then one with tag 2. Rank 0 first looks for the tag-2 message for a while
 * (MPI_Iprobe; an MPI may find it, by holding every earlier message, or not yet), then receives
 * the tag-1 messages in the order sent, then the tag-2 one. Every byte arrives, whatever the MPI
 * holds. (volley's test runs it with a small VOLLEY_UNEXPECTED_BYTES too, and checks that the
 * limit is named on stderr.) */
#include "check.h"

#define N 3000
#define LEN 256 /* ints */

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 2);
    if (rank == 1) {
        int *buf = malloc((size_t)(N + 1) * LEN * sizeof(int));
        MPI_Request *r = malloc((N + 1) * sizeof(MPI_Request));
        CHECK(buf && r);
        for (int i = 0; i <= N; i++) {
            int *b = buf + (size_t)i * LEN;
            for (int w = 0; w < LEN; w++) b[w] = i * 7 + w;
            OK(MPI_Isend(b, LEN, MPI_INT, 0, i < N ? 1 : 2, MPI_COMM_WORLD, &r[i]));
        }
        OK(MPI_Waitall(N + 1, r, MPI_STATUSES_IGNORE));
        free(buf);
        free(r);
    } else if (rank == 0) {
        int flag = 0;
        double until = MPI_Wtime() + 0.3;
        while (!flag && MPI_Wtime() < until)
            OK(MPI_Iprobe(1, 2, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        int b[LEN];
        MPI_Status st;
        for (int i = 0; i <= N; i++) {
            OK(MPI_Recv(b, LEN, MPI_INT, 1, i < N ? 1 : 2, MPI_COMM_WORLD, &st));
            int count = -1;
            OK(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(count == LEN);
            for (int w = 0; w < LEN; w++) CHECK(b[w] == i * 7 + w);
        }
        printf("unexpected_budget: ok (tag 2 seen early: %s)\n", flag ? "yes" : "no");
    }
    MPI_Finalize();
    return 0;
}
