/* MPI_Isendrecv and MPI_Isendrecv_replace (MPI-4.0 section 3.10.1): one request for a send and
 * a receive, complete once both are, whose status is the receive's. Ring exchanges small and
 * large (over the eager threshold), several outstanding at once completed by Waitall and by a
 * Test loop, a strided datatype replaced in place, MPI_PROC_NULL on either side, a rank
 * exchanging with itself, and a request freed before it completes. */
#include "check.h"
#include <string.h>

enum { BIG = 1 << 20 }; /* elements of a large exchange (8 MiB of uint64_t) */

static void fill(uint64_t *v, long n, uint64_t what, int rank) {
    for (long k = 0; k < n; k++)
        v[k] = h4(what, 0, (uint64_t)rank, (uint64_t)k);
}

static int same(const uint64_t *v, long n, uint64_t what, int rank) {
    for (long k = 0; k < n; k++)
        if (v[k] != h4(what, 0, (uint64_t)rank, (uint64_t)k))
            return 0;
    return 1;
}

/* Debian's MPICH 4.0.2, the first with these calls, leaves the status of an MPI_Isendrecv unset
 * (source 0, tag 0, count 0, whatever arrived), crashes on MPI_PROC_NULL at both ends,
 * writes out of bounds in MPI_Isendrecv_replace of a non-contiguous type, and refuses
 * MPI_Request_free of the request: there, the data is checked and the status is not, and those
 * three cases are left out. */
#if defined(MPICH_NUMVERSION) && MPICH_NUMVERSION < 40100000
#define STATUS_SET 0
#else
#define STATUS_SET 1
#endif

static void check_status(const MPI_Status *st, int source, int tag, long bytes) {
    int count;
    if (!STATUS_SET)
        return;
    CHECK(st->MPI_SOURCE == source);
    CHECK(st->MPI_TAG == tag);
    OK(MPI_Get_count(st, MPI_BYTE, &count));
    CHECK(count == bytes);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    MPI_Status st;
    MPI_Request r;

    /* A ring of small exchanges: each rank sends to its right, receives from its left. */
    {
        uint64_t out[5], in[5] = {0};
        fill(out, 5, 1, rank);
        OK(MPI_Isendrecv(out, 5, MPI_UINT64_T, right, 10 + rank, in, 5, MPI_UINT64_T, left,
                         MPI_ANY_TAG, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        CHECK(r == MPI_REQUEST_NULL);
        check_status(&st, left, 10 + left, 5 * 8);
        CHECK(same(in, 5, 1, left));
    }

    /* Large both ways, and the other way round: the sends cannot complete before the receives
     * are posted, so each request waits for both halves. */
    uint64_t *out = malloc(BIG * 8), *in = malloc(BIG * 8);
    CHECK(out && in);
    for (int dir = 0; dir < 2; dir++) {
        int to = dir ? left : right, from = dir ? right : left;
        fill(out, BIG, 2 + (uint64_t)dir, rank);
        memset(in, 0, BIG * 8);
        /* (A tag per direction: a neighbour already at the second may not match the first.) */
        OK(MPI_Isendrecv(out, BIG, MPI_UINT64_T, to, 3 + dir, in, BIG, MPI_UINT64_T,
                         MPI_ANY_SOURCE, 3 + dir, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        check_status(&st, from, 3 + dir, (long)BIG * 8);
        CHECK(same(in, BIG, 2 + (uint64_t)dir, from));
    }

    /* Several outstanding at once, each a different size and tag, completed by Waitall; then the
     * same completed by a loop of MPI_Test in reverse order. The tags (20 + k) are not those of
     * the large exchanges above: a left neighbour already here, its own exchanges done, would
     * otherwise match this rank's MPI_ANY_SOURCE receive still waiting for tag 4. */
    for (int round = 0; round < 2; round++) {
        enum { K = 6 };
        long n[K] = {0, 1, 7, 1000, 40000, 300000};
        MPI_Request rs[K];
        MPI_Status sts[K];
        uint64_t *o[K], *i_[K];
        for (int k = 0; k < K; k++) {
            o[k] = malloc((size_t)(n[k] + 1) * 8);
            i_[k] = malloc((size_t)(n[k] + 1) * 8);
            CHECK(o[k] && i_[k]);
            fill(o[k], n[k], 100 + (uint64_t)k, rank);
            OK(MPI_Isendrecv(o[k], (int)n[k], MPI_UINT64_T, right, 20 + k, i_[k], (int)n[k],
                             MPI_UINT64_T, left, 20 + k, MPI_COMM_WORLD, &rs[k]));
        }
        if (round == 0) {
            OK(MPI_Waitall(K, rs, sts));
        } else {
            for (int k = K - 1; k >= 0; k--) {
                int flag = 0;
                while (!flag)
                    OK(MPI_Test(&rs[k], &flag, &sts[k]));
            }
        }
        for (int k = 0; k < K; k++) {
            check_status(&sts[k], left, 20 + k, n[k] * 8);
            CHECK(same(i_[k], n[k], 100 + (uint64_t)k, left));
            free(o[k]);
            free(i_[k]);
        }
    }

    /* Replace in place through a strided type: every other element of 2 x 5000 goes out and is
     * overwritten by the left neighbour's; the elements between are left alone. */
    if (STATUS_SET) {
        MPI_Datatype every_other;
        OK(MPI_Type_vector(5000, 1, 2, MPI_UINT64_T, &every_other));
        OK(MPI_Type_commit(&every_other));
        uint64_t *v = malloc(10000 * 8);
        CHECK(v);
        for (long k = 0; k < 10000; k++)
            v[k] = h4(7, 0, (uint64_t)rank, (uint64_t)k);
        OK(MPI_Isendrecv_replace(v, 1, every_other, right, 5, left, 5, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        int count;
        OK(MPI_Get_count(&st, every_other, &count));
        CHECK(!STATUS_SET || (st.MPI_SOURCE == left && st.MPI_TAG == 5 && count == 1));
        for (long k = 0; k < 10000; k++)
            CHECK(v[k] == h4(7, 0, (uint64_t)(k % 2 ? rank : left), (uint64_t)k));
        OK(MPI_Type_free(&every_other));
        free(v);
    }

    /* A large replace, over the eager threshold, sent right while receiving from the left. */
    fill(out, BIG, 9, rank);
    OK(MPI_Isendrecv_replace(out, BIG, MPI_UINT64_T, right, 6, left, 6, MPI_COMM_WORLD, &r));
    OK(MPI_Wait(&r, &st));
    check_status(&st, left, 6, (long)BIG * 8);
    CHECK(same(out, BIG, 9, left));

    /* MPI_PROC_NULL: a receive from it completes at once with the null status (source
     * MPI_PROC_NULL, tag MPI_ANY_TAG, count 0) and leaves the buffer alone; a send to it goes
     * nowhere. */
    if (STATUS_SET) {
        uint64_t a = 5, b = 77;
        OK(MPI_Isendrecv(&a, 1, MPI_UINT64_T, MPI_PROC_NULL, 1, &b, 1, MPI_UINT64_T,
                         MPI_PROC_NULL, 1, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        check_status(&st, MPI_PROC_NULL, MPI_ANY_TAG, 0);
        CHECK(b == 77);
        /* Receive from nobody while sending right; the right neighbour receives it by MPI_Recv. */
        a = h4(11, 0, (uint64_t)rank, 0);
        OK(MPI_Isendrecv(&a, 1, MPI_UINT64_T, right, 12, &b, 1, MPI_UINT64_T, MPI_PROC_NULL, 12,
                         MPI_COMM_WORLD, &r));
        uint64_t got = 0;
        OK(MPI_Recv(&got, 1, MPI_UINT64_T, left, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(got == h4(11, 0, (uint64_t)left, 0));
        OK(MPI_Wait(&r, &st));
        CHECK((!STATUS_SET || st.MPI_SOURCE == MPI_PROC_NULL) && b == 77);
        /* Send to nobody while receiving from the left, which sends by MPI_Send. */
        OK(MPI_Isendrecv(&a, 1, MPI_UINT64_T, MPI_PROC_NULL, 13, &b, 1, MPI_UINT64_T, left, 13,
                         MPI_COMM_WORLD, &r));
        OK(MPI_Send(&a, 1, MPI_UINT64_T, right, 13, MPI_COMM_WORLD));
        OK(MPI_Wait(&r, &st));
        check_status(&st, left, 13, 8);
        CHECK(b == h4(11, 0, (uint64_t)left, 0));
        /* A replace with MPI_PROC_NULL on both sides leaves the buffer as it was. */
        b = 99;
        OK(MPI_Isendrecv_replace(&b, 1, MPI_UINT64_T, MPI_PROC_NULL, 1, MPI_PROC_NULL, 1,
                                 MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        CHECK((!STATUS_SET || st.MPI_SOURCE == MPI_PROC_NULL) && b == 99);
    }

    /* With itself, small and large. */
    {
        fill(out, BIG, 14, rank);
        memset(in, 0, BIG * 8);
        OK(MPI_Isendrecv(out, BIG, MPI_UINT64_T, rank, 14, in, BIG, MPI_UINT64_T, rank, 14,
                         MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        check_status(&st, rank, 14, (long)BIG * 8);
        CHECK(same(in, BIG, 14, rank));
        uint64_t x = 15;
        OK(MPI_Isendrecv_replace(&x, 1, MPI_UINT64_T, rank, 15, rank, 15, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        CHECK(x == 15 && (!STATUS_SET || st.MPI_SOURCE == rank));
    }

    /* A request freed before it completes still sends and receives (MPI-3.1 3.7.3): a second
     * exchange of the same pair (same tag, so it matches after the first) receives the left
     * neighbour's second value, so the freed receive took the first message. MPI does not say
     * when the freed receive's data lands, so its buffer is never read; it and the freed send's
     * buffer are static, alive until MPI_Finalize completes them. */
    if (STATUS_SET) {
        static uint64_t a, b;
        a = h4(16, 0, (uint64_t)rank, 0);
        uint64_t a2 = h4(16, 1, (uint64_t)rank, 0), c = 0;
        OK(MPI_Isendrecv(&a, 1, MPI_UINT64_T, right, 16, &b, 1, MPI_UINT64_T, left, 16,
                         MPI_COMM_WORLD, &r));
        OK(MPI_Request_free(&r));
        CHECK(r == MPI_REQUEST_NULL);
        OK(MPI_Isendrecv(&a2, 1, MPI_UINT64_T, right, 16, &c, 1, MPI_UINT64_T, left, 16,
                         MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        CHECK(c == h4(16, 1, (uint64_t)left, 0));
    }

    free(out);
    free(in);
    pass("isendrecv");
    return 0;
}
