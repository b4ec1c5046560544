/* Truncation (MPI-3.1 section 3.2.4): a message longer than the receive buffer is an error
 * (MPI_ERR_TRUNCATE), never silent; with MPI_ERRORS_RETURN the program sees it, the status
 * names the message, and the messages after it arrive intact. Also Get_count on partial data.
 * A too-long message that a posted receive matches is that receive's (3.5: the first matching
 * receive posted gets it), truncated there, whenever the program waits for it: a receive
 * posted later for the same envelope gets the next message (MPICH's errors/pt2pt/errinstat*
 * ask the same), for a contiguous and a non-contiguous receive type alike. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int big[1000];
    for (int i = 0; i < 1000; i++)
        big[i] = i;
    if (rank == 1) {
        OK(MPI_Send(big, 1000, MPI_INT, 0, 1, MPI_COMM_WORLD));
        OK(MPI_Send(big, 1000, MPI_INT, 0, 2, MPI_COMM_WORLD));
        OK(MPI_Send(big, 3, MPI_INT, 0, 3, MPI_COMM_WORLD));
        OK(MPI_Send(big, 1000, MPI_INT, 0, 4, MPI_COMM_WORLD));
        /* Once rank 0's receives are posted: two long messages, then two short ones with the
         * same envelopes, then word that they were all started. The short ones are non-blocking,
         * waited for after the word: rank 0 posts their receives only once it has the word, and
         * MPI need not buffer a standard send however short. */
        OK(MPI_Recv(NULL, 0, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Send(big, 1000, MPI_INT, 0, 5, MPI_COMM_WORLD));
        OK(MPI_Send(big, 1000, MPI_INT, 0, 6, MPI_COMM_WORLD));
        MPI_Request sr[2];
        OK(MPI_Isend(big + 500, 3, MPI_INT, 0, 5, MPI_COMM_WORLD, &sr[0]));
        OK(MPI_Isend(big + 600, 3, MPI_INT, 0, 6, MPI_COMM_WORLD, &sr[1]));
        OK(MPI_Ssend(NULL, 0, MPI_INT, 0, 8, MPI_COMM_WORLD));
        OK(MPI_Waitall(2, sr, MPI_STATUSES_IGNORE));
    } else if (rank == 0) {
        int small[10];
        MPI_Status st;
        int rc = MPI_Recv(small, 10, MPI_INT, 1, 1, MPI_COMM_WORLD, &st);
        int cls;
        OK(MPI_Error_class(rc, &cls));
        CHECK(cls == MPI_ERR_TRUNCATE);
        CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 1);
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        OK(MPI_Error_string(rc, msg, &len));
        CHECK(len > 0);
        /* The non-blocking receive reports it in the status and from the wait. */
        MPI_Request r;
        OK(MPI_Irecv(small, 10, MPI_INT, 1, 2, MPI_COMM_WORLD, &r));
        rc = MPI_Wait(&r, &st);
        OK(MPI_Error_class(rc, &cls));
        CHECK(cls == MPI_ERR_TRUNCATE && r == MPI_REQUEST_NULL);
        /* What followed arrives intact, and a short message fills part of a buffer. */
        int got[10] = {0};
        int count;
        OK(MPI_Recv(got, 10, MPI_INT, 1, 3, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 3 && got[2] == 2);
        int all[1000];
        OK(MPI_Recv(all, 1000, MPI_INT, 1, 4, MPI_COMM_WORLD, &st));
        CHECK(all[999] == 999);

        int a[10], b[20];
        for (int i = 0; i < 20; i++)
            b[i] = -1;
        MPI_Datatype every_other;
        OK(MPI_Type_vector(10, 1, 2, MPI_INT, &every_other));
        OK(MPI_Type_commit(&every_other));
        MPI_Request rq[2];
        OK(MPI_Irecv(a, 10, MPI_INT, 1, 5, MPI_COMM_WORLD, &rq[0]));
        OK(MPI_Irecv(b, 1, every_other, 1, 6, MPI_COMM_WORLD, &rq[1]));
        OK(MPI_Send(NULL, 0, MPI_INT, 1, 7, MPI_COMM_WORLD));
        OK(MPI_Recv(NULL, 0, MPI_INT, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        /* The short messages go to the receives posted now. */
        int s5[10] = {0}, s6[10] = {0};
        OK(MPI_Recv(s5, 10, MPI_INT, 1, 5, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 3 && s5[0] == 500 && s5[2] == 502);
        OK(MPI_Recv(s6, 10, MPI_INT, 1, 6, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 3 && s6[0] == 600 && s6[2] == 602);
        /* The long ones were the posted receives', truncated there (waited for one by one:
         * MPI_Waitall may stop at the first error and leave the other pending). */
        for (int k = 0; k < 2; k++) {
            rc = MPI_Wait(&rq[k], &st);
            OK(MPI_Error_class(rc, &cls));
            CHECK(cls == MPI_ERR_TRUNCATE && st.MPI_SOURCE == 1 && st.MPI_TAG == 5 + k);
            CHECK(rq[k] == MPI_REQUEST_NULL);
        }
        /* What a truncated receive stores is the implementation's (volley: what fits; MPICH:
         * nothing), but never outside the receive buffer: the vector's gaps stay as they were. */
        for (int i = 0; i < 10; i++)
            CHECK(b[2 * i + 1] == -1);
        OK(MPI_Type_free(&every_other));
    }
    pass("truncate");
    return 0;
}
