/* Matching (MPI-3.1 section 3.5): messages match on (communicator, source, tag), wildcards take
 * any, and messages from one sender with one tag are received in the order sent
 * (non-overtaking), whatever order the receives ask for other tags in. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    const int N = 50;
    if (rank != 0) {
        /* Every other rank sends N messages with tag 1 and N with tag 2, interleaved. All are
         * non-blocking, waited for at the end: rank 0 receives the last one first, and MPI need
         * not buffer a standard send, however small. */
        int v[N][2];
        MPI_Request r[N + 1];
        for (int i = 0; i < N; i++) {
            v[i][0] = rank;
            v[i][1] = i;
            OK(MPI_Isend(v[i], 2, MPI_INT, 0, 1 + (i % 2), MPI_COMM_WORLD, &r[i]));
        }
        /* Then one with tag 9, which rank 0 takes first. */
        int last = -rank;
        OK(MPI_Isend(&last, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, &r[N]));
        OK(MPI_Waitall(N + 1, r, MPI_STATUSES_IGNORE));
    } else {
        /* The tag-9 messages first, from each sender specifically: the earlier messages with
         * other tags are looked past, not lost. */
        for (int s = 1; s < size; s++) {
            int v;
            MPI_Status st;
            OK(MPI_Recv(&v, 1, MPI_INT, s, 9, MPI_COMM_WORLD, &st));
            CHECK(v == -s && st.MPI_SOURCE == s && st.MPI_TAG == 9);
        }
        /* Tag 2 from any source: per sender, in the order sent. */
        int next2[64] = {0}, next1[64] = {0};
        for (int s = 0; s < size; s++) {
            next2[s] = 1;
            next1[s] = 0;
        }
        for (int k = 0; k < (size - 1) * (N / 2); k++) {
            int v[2];
            MPI_Status st;
            OK(MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, 2, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_TAG == 2 && st.MPI_SOURCE == v[0]);
            CHECK(v[1] == next2[v[0]]);
            next2[v[0]] += 2;
        }
        /* The rest with any tag: only tag 1 is left, still in order. */
        for (int k = 0; k < (size - 1) * (N / 2); k++) {
            int v[2], count;
            MPI_Status st;
            OK(MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            OK(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(count == 2 && st.MPI_TAG == 1 && v[1] == next1[v[0]]);
            next1[v[0]] += 2;
        }
        /* Nothing of these tags is left (other tags may be on their way already). */
        for (int tag = 1; tag <= 2; tag++) {
            int flag;
            OK(MPI_Iprobe(MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
            CHECK(!flag);
        }
    }
    /* Everything above is received before any rank goes on (the ring below uses any source). */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    /* MPI_PROC_NULL: sends vanish, receives complete at once with the null status. */
    int x = 5;
    MPI_Status st;
    OK(MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD));
    OK(MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    int count = -1;
    OK(MPI_Get_count(&st, MPI_INT, &count));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && count == 0 && x == 5);
    /* Sendrecv around a ring. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size, got = -1;
    OK(MPI_Sendrecv(&rank, 1, MPI_INT, right, 4, &got, 1, MPI_INT, left, 4, MPI_COMM_WORLD, &st));
    CHECK(got == left && st.MPI_SOURCE == left);
    int v = rank;
    OK(MPI_Sendrecv_replace(&v, 1, MPI_INT, right, 5, left, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(v == left);
    pass("matching");
    return 0;
}
