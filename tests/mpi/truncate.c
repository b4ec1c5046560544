/* Truncation (MPI-3.1 section 3.2.4): a message longer than the receive buffer is an error
 * (MPI_ERR_TRUNCATE), never silent; with MPI_ERRORS_RETURN the program sees it, the status
 * names the message, and the messages after it arrive intact. Also Get_count on partial data. */
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
    }
    pass("truncate");
    return 0;
}
