/* MPI_Comm_split_type (MPI-4.0 section 7.4.2): MPI_COMM_TYPE_SHARED gives every rank a
 * communicator of the ranks it shares memory with; MPI_COMM_TYPE_HW_GUIDED with
 * mpi_hw_resource_type "mpi_shared_memory" (the value every MPI must know) gives the same group;
 * HW_GUIDED without the key, with MPI_INFO_NULL or with a resource no MPI has gives
 * MPI_COMM_NULL; MPI_COMM_TYPE_HW_UNGUIDED gives MPI_COMM_NULL or a strict subset holding the
 * caller, and then names the resource it split by in the info. MPI_UNDEFINED gives
 * MPI_COMM_NULL. Prints "unguided: SIZE" (0 for MPI_COMM_NULL) from rank 0. */
#include "check.h"
#include <string.h>

static MPI_Comm guided(const char *key, const char *value) {
    MPI_Info info = MPI_INFO_NULL;
    if (key) {
        OK(MPI_Info_create(&info));
        OK(MPI_Info_set(info, key, value));
    }
    MPI_Comm c;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &c));
    if (key)
        OK(MPI_Info_free(&info));
    return c;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();

    /* Keys in reverse order: the new ranks run the other way round. */
    MPI_Comm shared;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, size - rank, MPI_INFO_NULL,
                           &shared));
    CHECK(shared != MPI_COMM_NULL);
    int ssize, srank;
    OK(MPI_Comm_size(shared, &ssize));
    OK(MPI_Comm_rank(shared, &srank));
    CHECK(ssize >= 1 && ssize <= size);
    /* Every member of the shared communicator agrees on its members (the world ranks, in the new
     * order, which the keys make descending). */
    int *mine = malloc(sizeof(int) * (size_t)ssize), *root = malloc(sizeof(int) * (size_t)ssize);
    CHECK(mine && root);
    OK(MPI_Allgather(&rank, 1, MPI_INT, mine, 1, MPI_INT, shared));
    for (int i = 1; i < ssize; i++)
        CHECK(mine[i] < mine[i - 1]);
    CHECK(mine[srank] == rank);
    memcpy(root, mine, sizeof(int) * (size_t)ssize);
    OK(MPI_Bcast(root, ssize, MPI_INT, 0, shared));
    CHECK(memcmp(root, mine, sizeof(int) * (size_t)ssize) == 0);

    /* HW_GUIDED by shared memory: the same group as MPI_COMM_TYPE_SHARED (with key 0, in world
     * order: similar, not congruent, to the reversed one). */
    MPI_Comm g = guided("mpi_hw_resource_type", "mpi_shared_memory");
    CHECK(g != MPI_COMM_NULL);
    int cmp;
    OK(MPI_Comm_compare(g, shared, &cmp));
    CHECK(ssize == 1 ? cmp == MPI_CONGRUENT : cmp == MPI_SIMILAR);
    OK(MPI_Comm_free(&g));

    /* No key, no info, a key HW_GUIDED does not read, a resource no MPI has: MPI_COMM_NULL. */
    CHECK(guided(NULL, NULL) == MPI_COMM_NULL);
    CHECK(guided("shmem_topo", "mpi_shared_memory") == MPI_COMM_NULL);
    CHECK(guided("mpi_hw_resource_type", "volley_test_no_such_resource") == MPI_COMM_NULL);

    /* HW_UNGUIDED: none, or a strict subset of the world holding this rank, named in the info. */
    MPI_Info info;
    OK(MPI_Info_create(&info));
    MPI_Comm u;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, info, &u));
    int usize = 0;
    if (u != MPI_COMM_NULL) {
        OK(MPI_Comm_size(u, &usize));
        CHECK(usize < size);
        char value[MPI_MAX_INFO_VAL];
        int flag = 0;
        OK(MPI_Info_get(info, "mpi_hw_resource_type", MPI_MAX_INFO_VAL - 1, value, &flag));
        CHECK(flag && strlen(value) > 0);
        OK(MPI_Comm_free(&u));
    }
    OK(MPI_Info_free(&info));
    if (rank == 0)
        printf("unguided: %d\n", usize);

    /* MPI_UNDEFINED: no communicator. */
    MPI_Comm none;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_UNDEFINED, 0, MPI_INFO_NULL, &none));
    CHECK(none == MPI_COMM_NULL);

    OK(MPI_Comm_free(&shared));
    free(mine);
    free(root);
    pass("split_type");
    return 0;
}
