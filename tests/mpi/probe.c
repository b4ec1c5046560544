/* Probes (MPI-3.1 sections 3.8.1-3.8.3): Probe and Iprobe leave the message queued; Mprobe and
 * Improbe take it out of matching, so only their Mrecv / Imrecv receives it. */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    if (rank == 1) {
        /* All at once: rank 0 probes the second tag-4 message before it receives the first, and
         * MPI need not buffer a standard send, so a blocking send of the first could wait for
         * its receive and never send the second. */
        double d[7] = {1, 2, 3, 4, 5, 6, 7};
        char s[100];
        memset(s, 'x', sizeof s);
        int i = 77;
        MPI_Request r[4];
        OK(MPI_Isend(d, 7, MPI_DOUBLE, 0, 3, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Isend(s, 100, MPI_CHAR, 0, 4, MPI_COMM_WORLD, &r[1]));
        OK(MPI_Isend(s, 10, MPI_CHAR, 0, 4, MPI_COMM_WORLD, &r[2]));
        OK(MPI_Isend(&i, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &r[3]));
        OK(MPI_Waitall(4, r, MPI_STATUSES_IGNORE));
    } else if (rank == 0) {
        MPI_Status st;
        OK(MPI_Probe(1, 3, MPI_COMM_WORLD, &st));
        int count;
        OK(MPI_Get_count(&st, MPI_DOUBLE, &count));
        CHECK(count == 7 && st.MPI_SOURCE == 1 && st.MPI_TAG == 3);
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == 14);
        /* Probing again finds the same message. */
        OK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_TAG == 3);
        double d[7];
        OK(MPI_Recv(d, 7, MPI_DOUBLE, 1, 3, MPI_COMM_WORLD, &st));
        CHECK(d[6] == 7.0);
        /* Matched probe: the message is taken out of matching. */
        MPI_Message m;
        OK(MPI_Mprobe(1, 4, MPI_COMM_WORLD, &m, &st));
        OK(MPI_Get_count(&st, MPI_CHAR, &count));
        CHECK(count == 100 && m != MPI_MESSAGE_NULL);
        /* The next probe with the same envelope finds the second tag-4 message, not the first. */
        OK(MPI_Probe(1, 4, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_CHAR, &count));
        CHECK(count == 10);
        char s[100];
        OK(MPI_Mrecv(s, 100, MPI_CHAR, &m, &st));
        CHECK(m == MPI_MESSAGE_NULL && s[0] == 'x' && s[99] == 'x');
        int flag = 0;
        while (!flag)
            OK(MPI_Improbe(1, 4, MPI_COMM_WORLD, &flag, &m, &st));
        MPI_Request r;
        OK(MPI_Imrecv(s, 100, MPI_CHAR, &m, &r));
        OK(MPI_Wait(&r, &st));
        OK(MPI_Get_count(&st, MPI_CHAR, &count));
        CHECK(count == 10);
        /* Iprobe with nothing matching says so. */
        OK(MPI_Iprobe(1, 99, MPI_COMM_WORLD, &flag, &st));
        CHECK(!flag);
        int i;
        OK(MPI_Recv(&i, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &st));
        CHECK(i == 77);
        /* A probe of MPI_PROC_NULL returns at once. */
        OK(MPI_Probe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL);
        OK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &m, &st));
        CHECK(m == MPI_MESSAGE_NO_PROC);
        OK(MPI_Mrecv(&i, 1, MPI_INT, &m, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL);
    }
    pass("probe");
    return 0;
}
