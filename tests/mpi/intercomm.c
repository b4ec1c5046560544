/* Intercommunicators (MPI-3.1 section 6.6): two halves of the world joined by
 * MPI_Intercomm_create; point-to-point ranks name the remote group; dup; MPI_Intercomm_merge
 * orders the groups by `high`. Collectives on the intercommunicator (5.2.2): data goes between
 * the groups, a rooted one's root passes MPI_ROOT and the rest of its group MPI_PROC_NULL. */
#include "check.h"
#include <stdlib.h>

/* The world rank of remote rank r (the evens are color 0, the odds color 1). */
static int far(int color, int r) { return 2 * r + (1 - color); }

static void collectives(MPI_Comm inter, int color, int rank, int lrank, int rsize) {
    OK(MPI_Barrier(inter));
    /* Bcast from even rank 0 (local rank 0 of group 0) to the odds. */
    int v = color == 0 && lrank == 0 ? 777 : -1;
    int root = color == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    OK(MPI_Bcast(&v, 1, MPI_INT, root, inter));
    CHECK(v == (color == 1 || lrank == 0 ? 777 : -1));
    /* Non-blocking, the other way. */
    v = color == 1 && lrank == 0 ? 555 : -1;
    root = color == 1 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Request req;
    OK(MPI_Ibcast(&v, 1, MPI_INT, root, inter, &req));
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(v == (color == 0 || lrank == 0 ? 555 : -1));

    int *got = malloc(sizeof(int) * rsize), *out = malloc(sizeof(int) * rsize);
    int *counts = malloc(sizeof(int) * rsize), *displs = malloc(sizeof(int) * rsize);
    CHECK(got && out && counts && displs);
    /* Allreduce: the sum over the other group. */
    int sum = -1, want = 0;
    for (int r = 0; r < rsize; r++)
        want += far(color, r);
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, inter));
    CHECK(sum == want);
    /* Allgather: the other group's world ranks, in its rank order. */
    OK(MPI_Allgather(&rank, 1, MPI_INT, got, 1, MPI_INT, inter));
    for (int r = 0; r < rsize; r++)
        CHECK(got[r] == far(color, r));
    /* Alltoall: block r to remote rank r. */
    for (int r = 0; r < rsize; r++)
        out[r] = 1000 * rank + r;
    OK(MPI_Alltoall(out, 1, MPI_INT, got, 1, MPI_INT, inter));
    for (int r = 0; r < rsize; r++)
        CHECK(got[r] == 1000 * far(color, r) + lrank);
    /* Gatherv at odd rank 1 (local rank 0 of group 1), placed in reverse order. */
    for (int r = 0; r < rsize; r++)
        counts[r] = 1, displs[r] = rsize - 1 - r, got[r] = -1;
    root = color == 1 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    OK(MPI_Gatherv(&rank, 1, MPI_INT, got, counts, displs, MPI_INT, root, inter));
    if (color == 1 && lrank == 0)
        for (int r = 0; r < rsize; r++)
            CHECK(got[rsize - 1 - r] == far(color, r));
    /* Scatter from even rank 0: remote rank r gets 100 + r. */
    for (int r = 0; r < rsize; r++)
        out[r] = 100 + r;
    int one = -1;
    root = color == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    OK(MPI_Scatter(out, 1, MPI_INT, &one, 1, MPI_INT, root, inter));
    if (color == 1)
        CHECK(one == 100 + lrank);
    /* Reduce to odd rank 1: the largest even world rank. */
    int mx = -1;
    root = color == 1 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    OK(MPI_Reduce(&rank, &mx, 1, MPI_INT, MPI_MAX, root, inter));
    if (color == 1 && lrank == 0)
        CHECK(mx == far(color, rsize - 1));
    /* Reduce_scatter with counts: each group's vectors of T elements (element k of world rank w
     * is 10 w + k), reduced over the other group and scattered in this group's counts (T split
     * as evenly as this group's size allows, so the two groups' counts differ). */
    enum { T = 6 };
    int lsize;
    OK(MPI_Comm_size(inter, &lsize));
    int *lcounts = malloc(sizeof(int) * lsize), vec[T], blk[T], off = 0;
    CHECK(lcounts);
    for (int i = 0; i < lsize; i++) {
        lcounts[i] = T / lsize + (i < T % lsize);
        if (i < lrank)
            off += lcounts[i];
    }
    for (int k = 0; k < T; k++)
        vec[k] = 10 * rank + k;
    OK(MPI_Reduce_scatter(vec, blk, lcounts, MPI_INT, MPI_SUM, inter));
    for (int k = 0; k < lcounts[lrank]; k++) {
        int w = 0;
        for (int r = 0; r < rsize; r++)
            w += 10 * far(color, r) + off + k;
        CHECK(blk[k] == w);
    }
    /* Reduce_scatter_block with groups of different sizes (MPI-3.1 5.10.1): each group's
     * vectors hold lsize x recvcount elements, so with recvcount 2 x rsize both groups' vectors
     * have 2 x lsize x rsize elements; each rank gets its block of the other group's sum. */
    int rc = 2 * rsize, len = lsize * rc;
    int *bvec = malloc(sizeof(int) * (size_t)len), *bblk = malloc(sizeof(int) * (size_t)rc);
    CHECK(bvec && bblk);
    for (int k = 0; k < len; k++)
        bvec[k] = 10 * rank + k;
    OK(MPI_Reduce_scatter_block(bvec, bblk, rc, MPI_INT, MPI_SUM, inter));
    for (int k = 0; k < rc; k++) {
        int w = 0;
        for (int r = 0; r < rsize; r++)
            w += 10 * far(color, r) + lrank * rc + k;
        CHECK(bblk[k] == w);
    }
    free(bvec);
    free(bblk);
    free(lcounts);
    free(got);
    free(out);
    free(counts);
    free(displs);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 3);
    int color = rank % 2;
    MPI_Comm local, inter, dup, merged;
    OK(MPI_Comm_split(MPI_COMM_WORLD, color, rank, &local));
    int lrank, lsize;
    OK(MPI_Comm_rank(local, &lrank));
    OK(MPI_Comm_size(local, &lsize));
    /* Leaders: world rank 0 for the evens, 1 for the odds. */
    OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, color == 0 ? 1 : 0, 12, &inter));
    int flag, rsize, irank, isize;
    OK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag);
    OK(MPI_Comm_remote_size(inter, &rsize));
    OK(MPI_Comm_rank(inter, &irank));
    OK(MPI_Comm_size(inter, &isize));
    int nodd = size / 2, neven = size - nodd;
    CHECK(isize == lsize && irank == lrank && rsize == (color == 0 ? nodd : neven));
    MPI_Group rg;
    int rgs;
    OK(MPI_Comm_remote_group(inter, &rg));
    OK(MPI_Group_size(rg, &rgs));
    CHECK(rgs == rsize);
    OK(MPI_Group_free(&rg));
    OK(MPI_Comm_test_inter(local, &flag));
    CHECK(!flag);

    /* Every rank of one group sends its world rank to remote rank (its rank mod remote size);
     * receives come from the remote group, and the status names the remote rank. */
    int to = lrank % rsize;
    MPI_Request req;
    OK(MPI_Isend(&rank, 1, MPI_INT, to, 5, inter, &req));
    /* How many of the remote group send to me: those with remote rank r and r % lsize == lrank. */
    int expect = 0;
    for (int r = 0; r < rsize; r++)
        if (r % lsize == lrank)
            expect++;
    for (int k = 0; k < expect; k++) {
        int v;
        MPI_Status st;
        OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 5, inter, &st));
        CHECK(v % 2 != color);                 /* from the other half */
        CHECK(st.MPI_SOURCE == v / 2);          /* its rank in the remote group */
    }
    OK(MPI_Wait(&req, MPI_STATUS_IGNORE));

    /* A duplicate keeps its traffic apart. */
    OK(MPI_Comm_dup(inter, &dup));
    if (lrank == 0) {
        int a = 100 + color, b = -1;
        OK(MPI_Sendrecv(&a, 1, MPI_INT, 0, 6, &b, 1, MPI_INT, 0, 6, dup, MPI_STATUS_IGNORE));
        CHECK(b == 100 + (1 - color));
    }
    /* Comm_idup: two at once, completed in the opposite order, each an intercommunicator with
     * the same groups whose traffic stays apart from the others'. */
    MPI_Comm id1, id2;
    MPI_Request dr[2];
    OK(MPI_Comm_idup(inter, &id1, &dr[0]));
    OK(MPI_Comm_idup(dup, &id2, &dr[1]));
    OK(MPI_Wait(&dr[1], MPI_STATUS_IGNORE));
    OK(MPI_Wait(&dr[0], MPI_STATUS_IGNORE));
    int rs1, rs2, cmp;
    OK(MPI_Comm_test_inter(id1, &flag));
    CHECK(flag);
    OK(MPI_Comm_remote_size(id1, &rs1));
    OK(MPI_Comm_remote_size(id2, &rs2));
    CHECK(rs1 == rsize && rs2 == rsize);
    OK(MPI_Comm_compare(inter, id1, &cmp));
    CHECK(cmp == MPI_CONGRUENT);
    if (lrank == 0) {
        /* Both leaders send first, so the sends are non-blocking (MPI need not buffer a
         * standard send), and each receives on id2 before id1. */
        int a = 200 + color, b = -1, c2 = -1;
        MPI_Request sr[2];
        OK(MPI_Isend(&a, 1, MPI_INT, 0, 7, id1, &sr[0]));
        OK(MPI_Isend(&a, 1, MPI_INT, 0, 7, id2, &sr[1]));
        OK(MPI_Recv(&c2, 1, MPI_INT, 0, 7, id2, MPI_STATUS_IGNORE));
        OK(MPI_Recv(&b, 1, MPI_INT, 0, 7, id1, MPI_STATUS_IGNORE));
        OK(MPI_Waitall(2, sr, MPI_STATUSES_IGNORE));
        CHECK(b == 200 + (1 - color) && c2 == 200 + (1 - color));
    }
    OK(MPI_Allreduce(&rank, &rs1, 1, MPI_INT, MPI_MAX, id2));
    CHECK(rs1 == far(color, rsize - 1));
    OK(MPI_Comm_free(&id1));
    /* MPI_Comm_disconnect frees an intercommunicator once both groups are done with it. */
    OK(MPI_Comm_disconnect(&id2));
    CHECK(id2 == MPI_COMM_NULL);

    /* Split: each group by its ranks' parity; the parts of one color face each other. */
    MPI_Comm part;
    OK(MPI_Comm_split(inter, lrank % 2, -lrank, &part));
    int want_remote = 0;
    for (int r = 0; r < rsize; r++)
        if (r % 2 == lrank % 2)
            want_remote++;
    if (want_remote == 0) {
        CHECK(part == MPI_COMM_NULL);
    } else {
        int prs, pls, pr;
        OK(MPI_Comm_test_inter(part, &flag));
        OK(MPI_Comm_remote_size(part, &prs));
        OK(MPI_Comm_size(part, &pls));
        OK(MPI_Comm_rank(part, &pr));
        int want_local = 0, above = 0;
        for (int r = 0; r < lsize; r++)
            if (r % 2 == lrank % 2) {
                want_local++;
                if (r > lrank)
                    above++;
            }
        /* Keys are -lrank: the highest local rank comes first. */
        CHECK(flag && prs == want_remote && pls == want_local && pr == above);
        OK(MPI_Comm_free(&part));
    }

    /* Create from subgroups: each side keeps only its rank 0. */
    MPI_Group lg, first;
    int zero = 0;
    OK(MPI_Comm_group(inter, &lg));
    OK(MPI_Group_incl(lg, 1, &zero, &first));
    MPI_Comm pair;
    OK(MPI_Comm_create(inter, first, &pair));
    CHECK((lrank == 0) == (pair != MPI_COMM_NULL));
    if (pair != MPI_COMM_NULL) {
        int prs, got = -1;
        OK(MPI_Comm_remote_size(pair, &prs));
        CHECK(prs == 1);
        OK(MPI_Sendrecv(&color, 1, MPI_INT, 0, 8, &got, 1, MPI_INT, 0, 8, pair, MPI_STATUS_IGNORE));
        CHECK(got == 1 - color);
        OK(MPI_Comm_free(&pair));
    }
    OK(MPI_Group_free(&first));
    OK(MPI_Group_free(&lg));

    collectives(inter, color, rank, lrank, rsize);

    /* Merge: the evens pass high = 0, so they come first. */
    OK(MPI_Intercomm_merge(inter, color, &merged));
    int mrank, msize;
    OK(MPI_Comm_rank(merged, &mrank));
    OK(MPI_Comm_size(merged, &msize));
    CHECK(msize == size && mrank == (color == 0 ? rank / 2 : neven + rank / 2));
    int sum;
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, merged));
    CHECK(sum == size * (size - 1) / 2);

    OK(MPI_Comm_free(&merged));
    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&inter));
    OK(MPI_Comm_free(&local));
    pass("intercomm");
    return 0;
}
