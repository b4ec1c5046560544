/* More unreceived small messages than a receiver may have to hold: rank 1 sends N messages of
 * 1 KiB with tag 1 (N = argument 1, default 3000), then one with tag 2. Rank 0 first looks for
 * the tag-2 message for up to 10 s (MPI_Iprobe: MPI's progress rule says it can be found; an MPI
 * finds it by holding every earlier message, or by taking the later ones as requests to send),
 * then sends a small message to itself and receives it, then receives the tag-1 messages in the
 * order sent, then the tag-2 one. Every byte arrives.
 * Rank 0 prints whether it found the tag-2 message early and how much its peak memory grew. */
#include "check.h"

#define LEN 256 /* ints */

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    int n = argc > 1 ? atoi(argv[1]) : 3000;
    CHECK(world_size() >= 2 && n > 0);
    long before = peak_kib();
    if (rank == 1) {
        int *buf = malloc((size_t)(n + 1) * LEN * sizeof(int));
        MPI_Request *r = malloc((n + 1) * sizeof(MPI_Request));
        CHECK(buf && r);
        for (int i = 0; i <= n; i++) {
            int *b = buf + (size_t)i * LEN;
            for (int w = 0; w < LEN; w++) b[w] = i * 7 + w;
            OK(MPI_Isend(b, LEN, MPI_INT, 0, i < n ? 1 : 2, MPI_COMM_WORLD, &r[i]));
        }
        OK(MPI_Waitall(n + 1, r, MPI_STATUSES_IGNORE));
        free(buf);
        free(r);
    } else if (rank == 0) {
        int flag = 0;
        double until = MPI_Wtime() + 10;
        while (!flag && MPI_Wtime() < until)
            OK(MPI_Iprobe(1, 2, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        int b[LEN];
        MPI_Status st;
        /* A small standard send to itself, its receive posted after it returns, while the flood
         * is held: an MPI buffers it (every MPI does for small messages, and programs count on
         * it). */
        int self_out[LEN], self_in[LEN];
        for (int w = 0; w < LEN; w++) self_out[w] = -w;
        OK(MPI_Send(self_out, LEN, MPI_INT, 0, 3, MPI_COMM_WORLD));
        OK(MPI_Recv(self_in, LEN, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int w = 0; w < LEN; w++) CHECK(self_in[w] == -w);
        for (int i = 0; i <= n; i++) {
            OK(MPI_Recv(b, LEN, MPI_INT, 1, i < n ? 1 : 2, MPI_COMM_WORLD, &st));
            int count = -1;
            OK(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(count == LEN);
            for (int w = 0; w < LEN; w++) CHECK(b[w] == i * 7 + w);
        }
        printf("unexpected_budget: ok (tag 2 found early: %s, peak memory grew %ld KiB)\n",
               flag ? "yes" : "no", peak_kib() - before);
    }
    MPI_Finalize();
    return 0;
}
