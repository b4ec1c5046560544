/* Communicators and groups (MPI-3.1 chapter 6): dup keeps traffic apart, split orders by key,
 * create from a group, compare, groups' set operations and rank translation, names. */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 4);
    /* A duplicate is congruent and its messages never match the parent's. */
    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    int res;
    OK(MPI_Comm_compare(MPI_COMM_WORLD, dup, &res));
    CHECK(res == MPI_CONGRUENT);
    OK(MPI_Comm_compare(dup, dup, &res));
    CHECK(res == MPI_IDENT);
    if (rank == 0) {
        /* The first non-blocking: rank 1 receives the second first, and MPI need not buffer a
         * standard send. */
        int a = 1, b = 2;
        MPI_Request r;
        OK(MPI_Isend(&a, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &r));
        OK(MPI_Send(&b, 1, MPI_INT, 1, 0, dup));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else if (rank == 1) {
        int x;
        OK(MPI_Recv(&x, 1, MPI_INT, 0, 0, dup, MPI_STATUS_IGNORE));
        CHECK(x == 2);
        OK(MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(x == 1);
    }
    /* Split by parity, keys reversing the order. */
    MPI_Comm half;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &half));
    int hr, hs;
    OK(MPI_Comm_rank(half, &hr));
    OK(MPI_Comm_size(half, &hs));
    int mine = (rank % 2 == 0) ? (size + 1) / 2 : size / 2;
    CHECK(hs == mine);
    /* Highest world rank first. */
    int expect = 0;
    for (int r = size - 1; r > rank; r--)
        if (r % 2 == rank % 2)
            expect++;
    CHECK(hr == expect);
    /* Messages in the half communicator use its ranks. */
    int sum = 0;
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half));
    int want = 0;
    for (int r = 0; r < size; r++)
        if (r % 2 == rank % 2)
            want += r;
    CHECK(sum == want);
    if (hs >= 2) {
        int token = rank;
        if (hr == 0) {
            OK(MPI_Send(&token, 1, MPI_INT, 1, 7, half));
        } else if (hr == 1) {
            MPI_Status st;
            OK(MPI_Recv(&token, 1, MPI_INT, MPI_ANY_SOURCE, 7, half, &st));
            CHECK(st.MPI_SOURCE == 0 && token % 2 == rank % 2);
        }
    }
    /* MPI_UNDEFINED gets MPI_COMM_NULL. */
    MPI_Comm none;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : MPI_UNDEFINED, 0, &none));
    CHECK((rank == 0) == (none != MPI_COMM_NULL));
    if (none != MPI_COMM_NULL)
        OK(MPI_Comm_free(&none));
    /* Groups. */
    MPI_Group world, evens, odds, u, x, d;
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int gs;
    OK(MPI_Group_size(world, &gs));
    CHECK(gs == size);
    int ev[64], nev = 0;
    for (int r = 0; r < size; r += 2)
        ev[nev++] = r;
    OK(MPI_Group_incl(world, nev, ev, &evens));
    OK(MPI_Group_excl(world, nev, ev, &odds));
    OK(MPI_Group_union(evens, odds, &u));
    OK(MPI_Group_intersection(evens, odds, &x));
    OK(MPI_Group_difference(world, odds, &d));
    OK(MPI_Group_size(u, &gs));
    CHECK(gs == size);
    OK(MPI_Group_size(x, &gs));
    CHECK(gs == 0);
    OK(MPI_Group_compare(d, evens, &res));
    CHECK(res == MPI_IDENT);
    OK(MPI_Group_compare(u, world, &res));
    CHECK(res == MPI_SIMILAR || res == MPI_IDENT);
    int ranks1[2] = {0, 1}, ranks2[2];
    OK(MPI_Group_translate_ranks(odds, 2, ranks1, world, ranks2));
    CHECK(ranks2[0] == 1 && ranks2[1] == 3);
    OK(MPI_Group_translate_ranks(world, 2, ranks1, evens, ranks2));
    CHECK(ranks2[0] == 0 && ranks2[1] == MPI_UNDEFINED);
    int gr;
    OK(MPI_Group_rank(evens, &gr));
    CHECK(rank % 2 == 0 ? gr == rank / 2 : gr == MPI_UNDEFINED);
    int range[1][3] = {{size - 1, 0, -1}};
    MPI_Group rev;
    OK(MPI_Group_range_incl(world, 1, range, &rev));
    OK(MPI_Group_rank(rev, &gr));
    CHECK(gr == size - 1 - rank);
    /* Create from a group: members get a communicator, the rest MPI_COMM_NULL. */
    MPI_Comm ce;
    OK(MPI_Comm_create(MPI_COMM_WORLD, evens, &ce));
    CHECK((rank % 2 == 0) == (ce != MPI_COMM_NULL));
    if (ce != MPI_COMM_NULL) {
        int r2, s2;
        OK(MPI_Comm_rank(ce, &r2));
        OK(MPI_Comm_size(ce, &s2));
        CHECK(r2 == rank / 2 && s2 == nev);
        OK(MPI_Comm_compare(ce, half, &res));
        CHECK(res == MPI_SIMILAR);
        OK(MPI_Barrier(ce));
        OK(MPI_Comm_free(&ce));
        CHECK(ce == MPI_COMM_NULL);
    }
    /* Create from a group, called by the group's members only (MPI_Comm_create_group). */
    if (rank % 2 == 1) {
        MPI_Comm co;
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, odds, 7, &co));
        int r3, s3, sum3;
        OK(MPI_Comm_rank(co, &r3));
        OK(MPI_Comm_size(co, &s3));
        CHECK(r3 == rank / 2 && s3 == size / 2);
        OK(MPI_Allreduce(&rank, &sum3, 1, MPI_INT, MPI_SUM, co));
        int want3 = 0;
        for (int r = 1; r < size; r += 2)
            want3 += r;
        CHECK(sum3 == want3);
        /* A message sent and received on it, then MPI_Comm_disconnect (collective, like free). */
        int tok = r3, got = -1;
        OK(MPI_Sendrecv(&tok, 1, MPI_INT, (r3 + 1) % s3, 3, &got, 1, MPI_INT, (r3 + s3 - 1) % s3, 3, co,
                        MPI_STATUS_IGNORE));
        CHECK(got == (r3 + s3 - 1) % s3);
        OK(MPI_Comm_disconnect(&co));
        CHECK(co == MPI_COMM_NULL);
    }
    /* Names. */
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14);
    OK(MPI_Comm_set_name(dup, "my dup"));
    OK(MPI_Comm_get_name(dup, name, &len));
    CHECK(strcmp(name, "my dup") == 0);
    int inter;
    OK(MPI_Comm_test_inter(dup, &inter));
    CHECK(!inter);
    int topo;
    OK(MPI_Topo_test(dup, &topo));
    CHECK(topo == MPI_UNDEFINED);
    /* MPI_Dims_create (MPI 3.1, 7.5.2): balanced, non-increasing, fixed entries kept. */
    {
        int d2[2] = {0, 0}, d3[3] = {0, 0, 0};
        OK(MPI_Dims_create(6, 2, d2));
        CHECK(d2[0] == 3 && d2[1] == 2);
        d2[0] = d2[1] = 0;
        OK(MPI_Dims_create(7, 2, d2));
        CHECK(d2[0] == 7 && d2[1] == 1);
        OK(MPI_Dims_create(6, 3, d3));
        CHECK(d3[0] == 3 && d3[1] == 2 && d3[2] == 1);
        d3[0] = d3[1] = d3[2] = 0;
        OK(MPI_Dims_create(16, 3, d3));
        CHECK(d3[0] == 4 && d3[1] == 2 && d3[2] == 2);
        d3[0] = 0, d3[1] = 3, d3[2] = 0;
        OK(MPI_Dims_create(12, 3, d3));
        CHECK(d3[0] == 2 && d3[1] == 3 && d3[2] == 2);
        int bad[2] = {3, 0}, cls;
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        int err = MPI_Dims_create(10, 2, bad);
        CHECK(err != MPI_SUCCESS);
        OK(MPI_Error_class(err, &cls));
        CHECK(cls == MPI_ERR_DIMS);
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }
    /* Many communicators made and freed: context ids are reused. */
    for (int i = 0; i < 2000; i++) {
        MPI_Comm c;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        OK(MPI_Comm_free(&c));
    }
    MPI_Group gl[] = {world, evens, odds, u, x, d, rev};
    for (int i = 0; i < 7; i++)
        OK(MPI_Group_free(&gl[i]));
    OK(MPI_Comm_free(&half));
    OK(MPI_Comm_free(&dup));
    pass("comms");
    return 0;
}
