/* Singleton init (MPI-3.1 section 10.5.2): started without a launcher, a program is a world of
 * one and can talk to itself. */
#include "check.h"

int main(int argc, char **argv) {
    int flag;
    OK(MPI_Initialized(&flag));
    CHECK(!flag);
    int provided;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE);
    int q;
    OK(MPI_Query_thread(&q));
    CHECK(q == provided);
    OK(MPI_Is_thread_main(&flag));
    CHECK(flag);
    CHECK(world_size() == 1 && world_rank() == 0);
    int v = 11, w = 0;
    MPI_Request r;
    OK(MPI_Irecv(&w, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, &r));
    OK(MPI_Send(&v, 1, MPI_INT, 0, 1, MPI_COMM_SELF == MPI_COMM_WORLD ? MPI_COMM_SELF : MPI_COMM_WORLD));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(w == 11);
    int ver, sub;
    OK(MPI_Get_version(&ver, &sub));
    CHECK(ver >= 3);
    char name[MPI_MAX_PROCESSOR_NAME];
    int len;
    OK(MPI_Get_processor_name(name, &len));
    CHECK(len > 0);
    double t0 = MPI_Wtime(), t1 = MPI_Wtime();
    CHECK(t1 >= t0 && MPI_Wtick() > 0 && MPI_Wtick() < 1);
    OK(MPI_Finalize());
    OK(MPI_Finalized(&flag));
    CHECK(flag);
    printf("singleton: ok\n");
    return 0;
}
