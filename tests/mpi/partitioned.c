/* Partitioned communication (MPI-4.0 chapter 4) between ranks 0 and 1 (others look on): a send
 * of 8 partitions received as 4, over three rounds of one pair of persistent requests, the
 * partitions marked ready in reverse by MPI_Pready, MPI_Pready_range and MPI_Pready_list and
 * watched arriving with MPI_Parrived; two operations with one tag matching in the order of their
 * inits although they start in the other order; a wildcard receive that does not take a
 * partitioned message; and partitioned operations on a communicator made after another that
 * carried some was freed (its matching order starts afresh, as at every member). */
#include "check.h"
#include <string.h>

enum { SPARTS = 8, RPARTS = 4, N = 8000 };

static void fill(int *v, int n, int what) {
    for (int i = 0; i < n; i++)
        v[i] = (int)(h4((uint64_t)what, 0, 0, (uint64_t)i) & 0x7fffffff);
}

static int same(const int *v, int n, int what) {
    for (int i = 0; i < n; i++)
        if (v[i] != (int)(h4((uint64_t)what, 0, 0, (uint64_t)i) & 0x7fffffff))
            return 0;
    return 1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    int *buf = malloc(N * sizeof(int)), *other = malloc(N * sizeof(int));
    CHECK(buf && other);
    MPI_Request r, a, b;
    MPI_Status sts[2];
    MPI_Status st;

    /* Three rounds of one pair of requests. */
    if (rank == 0) {
        OK(MPI_Psend_init(buf, SPARTS, N / SPARTS, MPI_INT, 1, 7, MPI_COMM_WORLD, MPI_INFO_NULL,
                          &r));
        for (int round = 0; round < 3; round++) {
            OK(MPI_Start(&r));
            fill(buf, N, round);
            int flag = 1;
            OK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
            CHECK(!flag); /* nothing is ready yet: the send cannot have completed */
            if (round == 0) {
                for (int p = SPARTS - 1; p >= 0; p--)
                    OK(MPI_Pready(p, r));
            } else if (round == 1) {
                OK(MPI_Pready_range(SPARTS / 2, SPARTS - 1, r));
                OK(MPI_Pready_range(0, SPARTS / 2 - 1, r));
            } else {
                int list[SPARTS];
                for (int p = 0; p < SPARTS; p++)
                    list[p] = SPARTS - 1 - p;
                OK(MPI_Pready_list(SPARTS, list, r));
            }
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        }
        OK(MPI_Request_free(&r));
    } else if (rank == 1) {
        OK(MPI_Precv_init(buf, RPARTS, N / RPARTS, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_INFO_NULL,
                          &r));
        for (int round = 0; round < 3; round++) {
            memset(buf, 0, N * sizeof(int));
            OK(MPI_Start(&r));
            for (int p = 0; p < RPARTS; p++) {
                int flag = 0;
                while (!flag)
                    OK(MPI_Parrived(r, p, &flag));
            }
            OK(MPI_Wait(&r, &st));
            CHECK(same(buf, N, round));
            int count;
            OK(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 7 && count == N);
        }
        OK(MPI_Request_free(&r));
    }

    /* Two operations with one tag: matched in init order (a with a, b with b), started the
     * other way round at the sender. */
    if (rank == 0) {
        OK(MPI_Psend_init(buf, 2, N / 2, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &a));
        OK(MPI_Psend_init(other, 1, N, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &b));
        fill(buf, N, 100);
        fill(other, N, 200);
        OK(MPI_Start(&b));
        OK(MPI_Pready(0, b));
        OK(MPI_Start(&a));
        OK(MPI_Pready_range(0, 1, a));
        MPI_Request both[2] = {a, b};
        OK(MPI_Waitall(2, both, sts));
        a = both[0];
        b = both[1];
    } else if (rank == 1) {
        OK(MPI_Precv_init(buf, 1, N, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &a));
        OK(MPI_Precv_init(other, 4, N / 4, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_INFO_NULL, &b));
        MPI_Request both[2] = {a, b};
        OK(MPI_Startall(2, both));
        OK(MPI_Waitall(2, both, sts));
        CHECK(same(buf, N, 100) && same(other, N, 200));
        a = both[0];
        b = both[1];
    }
    if (rank < 2) {
        OK(MPI_Request_free(&a));
        OK(MPI_Request_free(&b));
    }

    /* A wildcard receive takes the ordinary message sent after a partitioned one, not the
     * partitioned one before it. */
    if (rank == 0) {
        int x = 42;
        OK(MPI_Psend_init(buf, 1, N, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
        fill(buf, N, 300);
        OK(MPI_Start(&r));
        OK(MPI_Pready(0, r));
        OK(MPI_Send(&x, 1, MPI_INT, 1, 3, MPI_COMM_WORLD));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        OK(MPI_Request_free(&r));
    } else if (rank == 1) {
        int x = 0;
        OK(MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK(x == 42 && st.MPI_SOURCE == 0 && st.MPI_TAG == 3);
        OK(MPI_Precv_init(buf, 1, N, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
        OK(MPI_Start(&r));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        CHECK(same(buf, N, 300));
        OK(MPI_Request_free(&r));
    }

    /* A duplicate of MPI_COMM_SELF carries a partitioned message from each rank to itself and is
     * freed; a duplicate of MPI_COMM_WORLD made next (which may reuse its handle) carries one
     * round the ring: its first init towards each peer is the first there. */
    MPI_Comm self, ring;
    OK(MPI_Comm_dup(MPI_COMM_SELF, &self));
    OK(MPI_Psend_init(buf, 2, N / 2, MPI_INT, 0, 5, self, MPI_INFO_NULL, &a));
    OK(MPI_Precv_init(other, 2, N / 2, MPI_INT, 0, 5, self, MPI_INFO_NULL, &b));
    fill(buf, N, 400 + rank);
    OK(MPI_Start(&b));
    OK(MPI_Start(&a));
    OK(MPI_Pready_range(0, 1, a));
    OK(MPI_Wait(&b, MPI_STATUS_IGNORE));
    OK(MPI_Wait(&a, MPI_STATUS_IGNORE));
    CHECK(same(other, N, 400 + rank));
    OK(MPI_Request_free(&a));
    OK(MPI_Request_free(&b));
    OK(MPI_Comm_free(&self));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &ring));
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    OK(MPI_Psend_init(buf, 2, N / 2, MPI_INT, next, 5, ring, MPI_INFO_NULL, &a));
    OK(MPI_Precv_init(other, 2, N / 2, MPI_INT, prev, 5, ring, MPI_INFO_NULL, &b));
    fill(buf, N, 500 + rank);
    OK(MPI_Start(&b));
    OK(MPI_Start(&a));
    OK(MPI_Pready(1, a));
    OK(MPI_Pready(0, a));
    OK(MPI_Wait(&b, MPI_STATUS_IGNORE));
    OK(MPI_Wait(&a, MPI_STATUS_IGNORE));
    CHECK(same(other, N, 500 + prev));
    OK(MPI_Request_free(&a));
    OK(MPI_Request_free(&b));
    OK(MPI_Comm_free(&ring));

    free(buf);
    free(other);
    pass("partitioned");
    return 0;
}
