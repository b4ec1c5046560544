/* MPI_Sendrecv (MPI-3.1 section 3.10): a send and a receive executed as if by two threads, so
 * that exchanges in a ring or between pairs cannot deadlock at any size; the status is the
 * receive's. Checked: rings of every size from 0 bytes to 8 MiB (both directions carry large
 * messages at once), a message that arrived before the call, MPI_PROC_NULL as the destination
 * or the source, an exchange with itself, wildcards, strided types on both sides, the order of
 * messages sent earlier, and a receive that truncates while its send still goes out. At 1 rank
 * every exchange is with itself. */
#include "check.h"
#include <string.h>

static unsigned char val(int what, int from, long k) {
    return (unsigned char)h4(what, 0, from, k);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), n = world_size();
    int right = (rank + 1) % n, left = (rank + n - 1) % n;
    MPI_Status st;
    int got;

    /* Rings at every size: each rank sends right and receives from the left at once. */
    long sizes[] = {0, 1, 8, 1000, 65536, 65539, 1 << 20, 8 << 20};
    unsigned char *s = malloc(8 << 20), *r = malloc(8 << 20);
    CHECK(s && r);
    for (int i = 0; i < (int)(sizeof sizes / sizeof sizes[0]); i++) {
        long len = sizes[i];
        for (long k = 0; k < len; k++)
            s[k] = val(i, rank, k);
        memset(r, 0xee, len + 1 > (8 << 20) ? (8 << 20) : len + 1);
        for (int rep = 0; rep < 3; rep++) {
            OK(MPI_Sendrecv(s, (int)len, MPI_BYTE, right, 10 + i, r, (int)len, MPI_BYTE, left,
                            10 + i, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 10 + i);
            OK(MPI_Get_count(&st, MPI_BYTE, &got));
            CHECK(got == len);
            for (long k = 0; k < len; k++)
                CHECK(r[k] == val(i, left, k));
            if (len < (8 << 20))
                CHECK(r[len] == 0xee);
        }
    }

    /* A message sent before the call (with an eager protocol, here before it): the left
     * neighbour's send, waited for only after the exchange (a standard send may wait for its
     * receive). The exchange's own send goes to a receive posted before it. */
    int a = 1000 + rank, b = -1, c = 2000 + rank, d = -1;
    MPI_Request q, pre;
    OK(MPI_Irecv(&d, 1, MPI_INT, left, 21, MPI_COMM_WORLD, &pre));
    OK(MPI_Isend(&a, 1, MPI_INT, right, 20, MPI_COMM_WORLD, &q));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    OK(MPI_Sendrecv(&c, 1, MPI_INT, right, 21, &b, 1, MPI_INT, left, 20, MPI_COMM_WORLD, &st));
    CHECK(b == 1000 + left && st.MPI_SOURCE == left && st.MPI_TAG == 20);
    OK(MPI_Wait(&pre, MPI_STATUS_IGNORE));
    CHECK(d == 2000 + left);
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));

    /* MPI_PROC_NULL: rank 0 only sends, rank n-1 only receives (a line, not a ring). */
    int up = rank + 1 < n ? rank + 1 : MPI_PROC_NULL, down = rank > 0 ? rank - 1 : MPI_PROC_NULL;
    int x = 3000 + rank, y = -7;
    OK(MPI_Sendrecv(&x, 1, MPI_INT, up, 30, &y, 1, MPI_INT, down, 30, MPI_COMM_WORLD, &st));
    if (down == MPI_PROC_NULL) {
        CHECK(y == -7 && st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG);
        OK(MPI_Get_count(&st, MPI_INT, &got));
        CHECK(got == 0);
    } else {
        CHECK(y == 3000 + down && st.MPI_SOURCE == down && st.MPI_TAG == 30);
    }
    /* Both null: nothing moves, the status is the null one. */
    OK(MPI_Sendrecv(&x, 1, MPI_INT, MPI_PROC_NULL, 31, &y, 1, MPI_INT, MPI_PROC_NULL, 31,
                    MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG);

    /* With itself, small and large. */
    for (long len = 4; len <= (4 << 20); len *= 1024) {
        for (long k = 0; k < len; k++)
            s[k] = val(40, rank, k);
        OK(MPI_Sendrecv(s, (int)len, MPI_BYTE, rank, 40, r, (int)len, MPI_BYTE, rank, 40,
                        MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == rank && st.MPI_TAG == 40);
        CHECK(memcmp(s, r, len) == 0);
    }

    /* Wildcards: the status says who sent what. */
    int w = 5000 + rank, z = -1;
    OK(MPI_Sendrecv(&w, 1, MPI_INT, right, 50 + rank, &z, 1, MPI_INT, MPI_ANY_SOURCE,
                    MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    CHECK(z == 5000 + left && st.MPI_SOURCE == left && st.MPI_TAG == 50 + left);

    /* Strided types on both sides: every other int out, every third int in. */
    MPI_Datatype every2, every3;
    OK(MPI_Type_vector(100, 1, 2, MPI_INT, &every2));
    OK(MPI_Type_vector(100, 1, 3, MPI_INT, &every3));
    OK(MPI_Type_commit(&every2));
    OK(MPI_Type_commit(&every3));
    int out[200], in[300];
    for (int k = 0; k < 200; k++)
        out[k] = k % 2 ? -1 : rank * 1000 + k / 2;
    for (int k = 0; k < 300; k++)
        in[k] = -2;
    OK(MPI_Sendrecv(out, 1, every2, right, 60, in, 1, every3, left, 60, MPI_COMM_WORLD, &st));
    for (int k = 0; k < 300; k++)
        CHECK(in[k] == (k % 3 ? -2 : left * 1000 + k / 3));
    OK(MPI_Get_count(&st, MPI_INT, &got));
    CHECK(got == 100);
    OK(MPI_Type_free(&every2));
    OK(MPI_Type_free(&every3));

    /* Order: of two messages sent earlier on the tag, the exchange receives the first. */
    int m1 = 1, m2 = 2, m3 = 3, g[3];
    MPI_Request qs[2];
    MPI_Status sts[2];
    OK(MPI_Irecv(&g[2], 1, MPI_INT, left, 71, MPI_COMM_WORLD, &pre));
    OK(MPI_Isend(&m1, 1, MPI_INT, right, 70, MPI_COMM_WORLD, &qs[0]));
    OK(MPI_Isend(&m2, 1, MPI_INT, right, 70, MPI_COMM_WORLD, &qs[1]));
    OK(MPI_Sendrecv(&m3, 1, MPI_INT, right, 71, &g[0], 1, MPI_INT, left, 70, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    OK(MPI_Recv(&g[1], 1, MPI_INT, left, 70, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_Wait(&pre, MPI_STATUS_IGNORE));
    OK(MPI_Waitall(2, qs, sts));
    CHECK(g[0] == 1 && g[1] == 2 && g[2] == 3);

    /* A receive that truncates fails with MPI_ERR_TRUNCATE; its send still goes out. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int four[4] = {rank, rank, rank, rank}, two[2], back[4];
    int rc = MPI_Sendrecv(four, 4, MPI_INT, right, 80, two, 2, MPI_INT, left, 80, MPI_COMM_WORLD,
                          &st);
    int cls;
    OK(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_TRUNCATE);
    OK(MPI_Isend(four, 4, MPI_INT, right, 81, MPI_COMM_WORLD, &q));
    OK(MPI_Recv(back, 4, MPI_INT, left, 81, MPI_COMM_WORLD, &st));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(back[0] == left && back[3] == left);

    OK(MPI_Barrier(MPI_COMM_WORLD));
    free(s);
    free(r);
    if (rank == 0)
        printf("sendrecv: ok\n");
    MPI_Finalize();
    return 0;
}
