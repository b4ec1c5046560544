/* One-sided communication (MPI-3.1 chapter 11), every rank of MPI_COMM_WORLD taking part:
 * - MPI_Win_create with fences: each rank puts a block into its right neighbour and gets one
 *   from its left, contiguous and through a vector datatype at the target;
 * - MPI_Win_allocate with passive-target locks: every rank accumulates (MPI_SUM) into rank 0
 *   under an exclusive lock and under a shared one, counts with MPI_Fetch_and_op, swaps with
 *   MPI_Compare_and_swap, reads back with MPI_Get_accumulate (MPI_NO_OP and MPI_REPLACE);
 * - MPI_Win_allocate_shared: contiguous memory read by load and store through
 *   MPI_Win_shared_query;
 * - post-start-complete-wait: rank 0 exposes its memory to all others, which put into it;
 * - MPI_Win_create_dynamic: attached memory reached by address, with MPI_Win_lock_all, MPI_Rput
 *   and MPI_Win_flush;
 * - the window's attributes, group, name and error handler, and an invalid lock type that is
 *   an error returned with MPI_ERRORS_RETURN. */
#include "check.h"
#include <string.h>

enum { N = 64 };

static void fences(int rank, int size) {
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    long *mem = malloc(4 * N * sizeof(long)), src[N], got[N];
    CHECK(mem);
    for (int i = 0; i < 4 * N; i++)
        mem[i] = -1;
    for (int i = 0; i < N; i++)
        src[i] = (long)(h4(1, (uint64_t)rank, 0, (uint64_t)i) & 0xffffffff);
    MPI_Win win;
    OK(MPI_Win_create(mem, 4 * N * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                      &win));
    OK(MPI_Win_fence(0, win));
    /* Into the right neighbour's elements 0..N-1, and every other element from 2N on. */
    MPI_Datatype every_other;
    OK(MPI_Type_vector(N, 1, 2, MPI_LONG, &every_other));
    OK(MPI_Type_commit(&every_other));
    OK(MPI_Put(src, N, MPI_LONG, right, 0, N, MPI_LONG, win));
    OK(MPI_Put(src, N, MPI_LONG, right, 2 * N, 1, every_other, win));
    OK(MPI_Put(src, N, MPI_LONG, MPI_PROC_NULL, 0, N, MPI_LONG, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < N; i++) {
        long want = (long)(h4(1, (uint64_t)left, 0, (uint64_t)i) & 0xffffffff);
        CHECK(mem[i] == want);
        CHECK(mem[2 * N + 2 * i] == want);
        CHECK(mem[2 * N + 2 * i + 1] == -1);
    }
    /* The left neighbour's first block back, which it received from its own left. */
    OK(MPI_Get(got, N, MPI_LONG, left, 0, N, MPI_LONG, win));
    OK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));
    int lleft = (left + size - 1) % size;
    for (int i = 0; i < N; i++)
        CHECK(got[i] == (long)(h4(1, (uint64_t)lleft, 0, (uint64_t)i) & 0xffffffff));

    /* Attributes. */
    void *base;
    MPI_Aint *wsize;
    int *unit, *flavor, *model, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag));
    CHECK(flag && base == mem);
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &wsize, &flag));
    CHECK(flag && *wsize == (MPI_Aint)(4 * N * sizeof(long)));
    OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag));
    CHECK(flag && *unit == (int)sizeof(long));
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_CREATE);
    OK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag));
    CHECK(flag && (*model == MPI_WIN_UNIFIED || *model == MPI_WIN_SEPARATE));
    MPI_Group wg, cg;
    int cmp;
    OK(MPI_Win_get_group(win, &wg));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &cg));
    OK(MPI_Group_compare(wg, cg, &cmp));
    CHECK(cmp == MPI_IDENT);
    OK(MPI_Group_free(&wg));
    OK(MPI_Group_free(&cg));
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Win_set_name(win, "ring"));
    OK(MPI_Win_get_name(win, name, &len));
    CHECK(len == 4 && strcmp(name, "ring") == 0);

    /* An invalid lock type is an error the program gets back. */
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int rc = MPI_Win_lock(12345, 0, 0, win), cls;
    CHECK(rc != MPI_SUCCESS);
    OK(MPI_Error_class(rc, &cls));
    /* MPI_ERR_LOCKTYPE is the class for it; MPICH 4.0 says MPI_ERR_ARG. */
    CHECK(cls == MPI_ERR_LOCKTYPE || cls == MPI_ERR_ARG);

    OK(MPI_Type_free(&every_other));
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL);
    free(mem);
}

static void locks(int rank, int size) {
    long *mem;
    MPI_Win win;
    OK(MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem,
                        &win));
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win));
    for (int i = 0; i < 8; i++)
        mem[i] = 0;
    OK(MPI_Win_unlock(rank, win));
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Every rank adds rank + 1 to element 0 of rank 0 twenty times, exclusive; and 1 to element
     * 1 under a shared lock (accumulates are atomic with each other). */
    long one = 1, mine = rank + 1;
    for (int k = 0; k < 20; k++) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Accumulate(&mine, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, win));
        OK(MPI_Win_unlock(0, win));
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        OK(MPI_Accumulate(&one, 1, MPI_LONG, 0, 1, 1, MPI_LONG, MPI_SUM, win));
        OK(MPI_Win_unlock(0, win));
    }
    /* A ticket from a counter in element 2: every rank gets a different one. */
    long ticket = -1;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    OK(MPI_Fetch_and_op(&one, &ticket, MPI_LONG, 0, 2, MPI_SUM, win));
    OK(MPI_Win_unlock(0, win));
    CHECK(ticket >= 0 && ticket < size);
    /* Each rank swaps its rank + 1 into element 3 only if it still holds 0: exactly one
     * succeeds. */
    long zero = 0, old = -1;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    OK(MPI_Compare_and_swap(&mine, &zero, &old, MPI_LONG, 0, 3, win));
    OK(MPI_Win_unlock(0, win));
    long won = old == 0;
    long winners = 0, tickets = 0;
    OK(MPI_Allreduce(&won, &winners, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK(winners == 1);
    OK(MPI_Allreduce(&ticket, &tickets, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK(tickets == (long)size * (size - 1) / 2);
    OK(MPI_Barrier(MPI_COMM_WORLD));

    long sums[4], prev[4], repl[4] = {7, 8, 9, 10};
    OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
    OK(MPI_Get_accumulate(NULL, 0, MPI_LONG, sums, 4, MPI_LONG, 0, 0, 4, MPI_LONG, MPI_NO_OP,
                          win));
    OK(MPI_Win_unlock(0, win));
    CHECK(sums[0] == 20L * size * (size + 1) / 2);
    CHECK(sums[1] == 20L * size);
    CHECK(sums[2] == size);
    CHECK(sums[3] >= 1 && sums[3] <= size);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == size - 1) {
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Get_accumulate(repl, 4, MPI_LONG, prev, 4, MPI_LONG, 0, 4, 4, MPI_LONG,
                              MPI_REPLACE, win));
        OK(MPI_Win_unlock(0, win));
        for (int i = 0; i < 4; i++)
            CHECK(prev[i] == 0);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        OK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win));
        for (int i = 0; i < 4; i++)
            CHECK(mem[4 + i] == repl[i]);
        OK(MPI_Win_unlock(0, win));
    }
    int *flavor, flag;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE);
    OK(MPI_Win_free(&win));
}

static void shared(int rank, int size) {
    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int nr, ns;
    OK(MPI_Comm_rank(node, &nr));
    OK(MPI_Comm_size(node, &ns));
    int *mine;
    MPI_Win win;
    OK(MPI_Win_allocate_shared((nr + 1) * sizeof(int), sizeof(int), MPI_INFO_NULL, node, &mine,
                               &win));
    OK(MPI_Win_lock_all(0, win));
    for (int i = 0; i <= nr; i++)
        mine[i] = 1000 * nr + i;
    OK(MPI_Win_sync(win));
    OK(MPI_Barrier(node));
    OK(MPI_Win_sync(win));
    /* Every rank's memory, read through the address the query gives; contiguous by default. */
    int *first = NULL;
    for (int r = 0; r < ns; r++) {
        MPI_Aint sz;
        int du;
        int *p;
        OK(MPI_Win_shared_query(win, r, &sz, &du, &p));
        CHECK(sz == (MPI_Aint)((r + 1) * sizeof(int)) && du == (int)sizeof(int));
        if (r == 0)
            first = p;
        CHECK(p == first + r * (r + 1) / 2);
        for (int i = 0; i <= r; i++)
            CHECK(p[i] == 1000 * r + i);
    }
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Win_free(&win));
    OK(MPI_Comm_free(&node));
    (void)rank;
    (void)size;
}

static void pscw(int rank, int size) {
    int *mem = calloc((size_t)size, sizeof(int));
    CHECK(mem);
    MPI_Win win;
    OK(MPI_Win_create(mem, size * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                      &win));
    MPI_Group world, others, zero;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int z = 0;
    OK(MPI_Group_excl(world, 1, &z, &others));
    OK(MPI_Group_incl(world, 1, &z, &zero));
    for (int round = 0; round < 3; round++) {
        if (rank == 0) {
            OK(MPI_Win_post(others, 0, win));
            if (round == 2) {
                int flag = 0;
                while (!flag)
                    OK(MPI_Win_test(win, &flag));
            } else {
                OK(MPI_Win_wait(win));
            }
            for (int r = 1; r < size; r++)
                CHECK(mem[r] == 100 * round + r);
        } else {
            int v = 100 * round + rank;
            OK(MPI_Win_start(zero, 0, win));
            OK(MPI_Put(&v, 1, MPI_INT, 0, rank, 1, MPI_INT, win));
            OK(MPI_Win_complete(win));
        }
    }
    OK(MPI_Group_free(&world));
    OK(MPI_Group_free(&others));
    OK(MPI_Group_free(&zero));
    OK(MPI_Win_free(&win));
    free(mem);
}

static void dynamic(int rank, int size) {
    MPI_Win win;
    OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    double *mem = malloc(N * sizeof(double));
    CHECK(mem);
    for (int i = 0; i < N; i++)
        mem[i] = 0;
    OK(MPI_Win_attach(win, mem, N * sizeof(double)));
    MPI_Aint mine, *addrs = malloc((size_t)size * sizeof(MPI_Aint));
    CHECK(addrs);
    OK(MPI_Get_address(mem, &mine));
    OK(MPI_Allgather(&mine, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD));
    int right = (rank + 1) % size;
    double v[N];
    for (int i = 0; i < N; i++)
        v[i] = rank + i / 100.0;
    OK(MPI_Win_lock_all(0, win));
    MPI_Request req;
    OK(MPI_Rput(v, N, MPI_DOUBLE, right, addrs[right], N, MPI_DOUBLE, win, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    OK(MPI_Win_flush(right, win));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    int left = (rank + size - 1) % size;
    for (int i = 0; i < N; i++)
        CHECK(mem[i] == left + i / 100.0);
    OK(MPI_Win_detach(win, mem));
    OK(MPI_Win_free(&win));
    free(mem);
    free(addrs);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    fences(rank, size);
    locks(rank, size);
    shared(rank, size);
    if (size > 1)
        pscw(rank, size);
    dynamic(rank, size);
    pass("rma");
    return 0;
}
