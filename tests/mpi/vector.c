/* Large messages of non-contiguous datatypes (MPI 3.1, 4.1: a datatype's type map decides
 * which bytes move; sender's and receiver's types need only match in their type signature).
 * Rank 0 sends every other int of a 32 MiB array (a vector type, 16 MiB of data) to rank 1:
 * received into a contiguous array, into the same vector type, and into an indexed type of
 * another layout; several at once, received in another order than sent. Every value is
 * checked. Then the memory bound: moving a 16 MiB strided message must not make either side's
 * peak memory grow by the message's size (packing and unpacking go piece by piece); the bound
 * asserted is half the message. */
#include "check.h"
#include <string.h>

#define N (4 << 20) /* ints of data: 16 MiB */

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 2);
    /* Every other int: N blocks of one int, stride 2. */
    MPI_Datatype every_other, pairs_rev;
    OK(MPI_Type_vector(N, 1, 2, MPI_INT, &every_other));
    OK(MPI_Type_commit(&every_other));
    /* Another layout with the same signature: blocks of 2 ints, block k at 4k (so half
     * the array is used, in another pattern). */
    int *lens = malloc(sizeof(int) * (N / 2)), *displs = malloc(sizeof(int) * (N / 2));
    CHECK(lens && displs);
    for (int k = 0; k < N / 2; k++) {
        lens[k] = 2;
        displs[k] = 4 * k;
    }
    OK(MPI_Type_indexed(N / 2, lens, displs, MPI_INT, &pairs_rev));
    OK(MPI_Type_commit(&pairs_rev));
    int *a = malloc(sizeof(int) * 2 * (size_t)N), *b = malloc(sizeof(int) * 2 * (size_t)N);
    CHECK(a && b);
    for (size_t i = 0; i < 2 * (size_t)N; i++)
        a[i] = (int)(i * 3 + 1), b[i] = -1;

    /* The memory bound first (a peak is for ever): rank 0 sends the strided 16 MiB, rank 1
     * receives it strided. */
    OK(MPI_Barrier(MPI_COMM_WORLD));
    long before = peak_kib();
    if (rank == 0)
        OK(MPI_Send(a, 1, every_other, 1, 99, MPI_COMM_WORLD));
    else if (rank == 1)
        OK(MPI_Recv(b, 1, every_other, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    long grown = peak_kib() - before;
    if (rank < 2) {
        printf("vector: rank %d's peak memory grew by %ld KiB moving a %d KiB strided message\n",
               rank, grown, (int)(N * sizeof(int) / 1024));
        CHECK(grown < (long)(N * sizeof(int) / 1024 / 2));
    }
    if (rank == 0) {
        /* 1-3: three receivers' layouts, one message each; 4: three at once, other order. */
        for (int k = 0; k < 3; k++)
            OK(MPI_Send(a, 1, every_other, 1, k, MPI_COMM_WORLD));
        MPI_Request r[3];
        MPI_Status st[3];
        for (int k = 0; k < 3; k++)
            OK(MPI_Isend(a, 1, every_other, 1, 10 + k, MPI_COMM_WORLD, &r[k]));
        OK(MPI_Waitall(3, r, st));
    } else if (rank == 1) {
        MPI_Status st;
        int count;
        OK(MPI_Recv(b, N, MPI_INT, 0, 0, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == N);
        for (size_t i = 0; i < N; i++)
            CHECK(b[i] == (int)(2 * i * 3 + 1));

        memset(b, 0xff, sizeof(int) * 2 * (size_t)N);
        OK(MPI_Recv(b, 1, every_other, 0, 1, MPI_COMM_WORLD, &st));
        for (size_t i = 0; i < 2 * (size_t)N; i++)
            CHECK(b[i] == (i % 2 == 0 ? (int)(i * 3 + 1) : -1));

        memset(b, 0xff, sizeof(int) * 2 * (size_t)N);
        OK(MPI_Recv(b, 1, pairs_rev, 0, 2, MPI_COMM_WORLD, &st));
        /* Data element j (= a[2j]) lands at 4*(j/2) + j%2. */
        for (size_t j = 0; j < N; j++)
            CHECK(b[4 * (j / 2) + j % 2] == (int)(2 * j * 3 + 1));
        CHECK(b[2] == -1 && b[3] == -1);

        MPI_Request r[3];
        MPI_Status sts[3];
        int *c = malloc(sizeof(int) * 2 * (size_t)N * 3);
        CHECK(c);
        for (int k = 2; k >= 0; k--)
            OK(MPI_Irecv(c + (size_t)k * 2 * N, 1, every_other, 0, 10 + k, MPI_COMM_WORLD, &r[k]));
        OK(MPI_Waitall(3, r, sts));
        for (int k = 0; k < 3; k++)
            for (size_t i = 0; i < 2 * (size_t)N; i += 2)
                CHECK(c[(size_t)k * 2 * N + i] == (int)(i * 3 + 1));
        free(c);
    }

    OK(MPI_Type_free(&every_other));
    OK(MPI_Type_free(&pairs_rev));
    free(a), free(b), free(lens), free(displs);
    pass("vector");
    return 0;
}
