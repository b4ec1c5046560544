/* Requests (MPI-3.1 sections 3.7 and 3.9): Waitany, Waitsome, Testany, Testsome, Testall with
 * null requests in the arrays, Request_get_status, Cancel of a receive, Request_free of an active
 * send, and persistent requests started again and again. Generalized requests (section 12.2):
 * complete when the program says so, the query function gives the status, the free function
 * runs once when the request is freed (by a wait, a test or MPI_Request_free), the cancel
 * function hears whether the request had completed, and a callback's error reaches the call. */
#include "check.h"

struct greq {
    int queried, freed, cancelled, completed_at_cancel, fail_query;
};

static int g_query(void *extra, MPI_Status *st) {
    struct greq *g = extra;
    g->queried++;
    st->MPI_SOURCE = 5;
    st->MPI_TAG = 9;
    MPI_Status_set_elements(st, MPI_INT, 3);
    MPI_Status_set_cancelled(st, 0);
    return g->fail_query ? MPI_ERR_BUFFER : MPI_SUCCESS;
}

static int g_free(void *extra) {
    ((struct greq *)extra)->freed++;
    return MPI_SUCCESS;
}

static int g_cancel(void *extra, int complete) {
    struct greq *g = extra;
    g->cancelled++;
    g->completed_at_cancel = complete;
    return MPI_SUCCESS;
}

static void generalized(void) {
    struct greq g = {0, 0, 0, -1, 0};
    MPI_Request r;
    int flag = 1, n;
    MPI_Status st;
    OK(MPI_Grequest_start(g_query, g_free, g_cancel, &g, &r));
    OK(MPI_Test(&r, &flag, &st));
    CHECK(!flag && g.queried == 0 && g.freed == 0);
    OK(MPI_Cancel(&r));
    CHECK(g.cancelled == 1 && g.completed_at_cancel == 0);
    OK(MPI_Grequest_complete(r));
    OK(MPI_Request_get_status(r, &flag, &st));
    CHECK(flag && st.MPI_SOURCE == 5 && g.freed == 0);
    OK(MPI_Cancel(&r));
    CHECK(g.cancelled == 2 && g.completed_at_cancel == 1);
    OK(MPI_Wait(&r, &st));
    CHECK(r == MPI_REQUEST_NULL && st.MPI_SOURCE == 5 && st.MPI_TAG == 9);
    OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 3 && g.freed == 1);

    /* Freed before it completes: the free function runs once both calls have happened (the
     * standard says at the later one; MPICH 4.0 runs it at MPI_Request_free already). */
    struct greq h = {0, 0, 0, -1, 0};
    OK(MPI_Grequest_start(g_query, g_free, g_cancel, &h, &r));
    MPI_Request keep = r;
    OK(MPI_Request_free(&r));
    CHECK(r == MPI_REQUEST_NULL && h.freed <= 1);
    OK(MPI_Grequest_complete(keep));
    CHECK(h.freed == 1 && h.queried == 0);

    /* Among others in a Waitall; the query function's error is the request's. */
    struct greq a = {0, 0, 0, -1, 0}, b = {0, 0, 0, -1, 1};
    MPI_Request two[2];
    MPI_Status sts[2];
    OK(MPI_Grequest_start(g_query, g_free, g_cancel, &a, &two[0]));
    OK(MPI_Grequest_start(g_query, g_free, g_cancel, &b, &two[1]));
    OK(MPI_Grequest_complete(two[1]));
    OK(MPI_Grequest_complete(two[0]));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int rc = MPI_Waitall(2, two, sts);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    int cls;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_IN_STATUS);
    /* (MPICH 4.0 reports the query function's code as MPI_ERR_OTHER.) */
    CHECK(sts[0].MPI_ERROR == MPI_SUCCESS && sts[1].MPI_ERROR != MPI_SUCCESS);
    CHECK(a.freed == 1 && b.freed == 1 && a.queried == 1 && b.queried == 1);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    generalized();
    const int N = 8;
    int buf[8], out[8];
    MPI_Request r[8];
    MPI_Status st[8];
    if (rank == 0) {
        /* Receives posted for tags 0..N-1 in reverse; rank 1 sends them in order. */
        for (int i = 0; i < N; i++)
            OK(MPI_Irecv(&buf[i], 1, MPI_INT, 1, i, MPI_COMM_WORLD, &r[i]));
        r[3] = MPI_REQUEST_NULL; /* one slot null: skipped by every call */
        int done = 0, idx, flag;
        OK(MPI_Barrier(MPI_COMM_WORLD));
        OK(MPI_Waitany(N, r, &idx, &st[0]));
        CHECK(idx >= 0 && idx < N && idx != 3 && r[idx] == MPI_REQUEST_NULL && buf[idx] == 100 + idx);
        CHECK(st[0].MPI_TAG == idx);
        done++;
        while (done < N - 1) {
            int outc, ind[8];
            OK(MPI_Waitsome(N, r, &outc, ind, st));
            CHECK(outc >= 1);
            for (int k = 0; k < outc; k++) {
                CHECK(buf[ind[k]] == 100 + ind[k] && st[k].MPI_TAG == ind[k]);
                CHECK(r[ind[k]] == MPI_REQUEST_NULL);
            }
            done += outc;
        }
        /* Nothing active: Waitsome says MPI_UNDEFINED, Testany flag true with MPI_UNDEFINED. */
        int outc;
        int ind[8];
        OK(MPI_Waitsome(N, r, &outc, ind, st));
        CHECK(outc == MPI_UNDEFINED);
        OK(MPI_Testany(N, r, &idx, &flag, &st[0]));
        CHECK(flag && idx == MPI_UNDEFINED);
        OK(MPI_Testall(N, r, &flag, MPI_STATUSES_IGNORE));
        CHECK(flag);
        /* Cancel a receive nothing will match. */
        MPI_Request c;
        OK(MPI_Irecv(buf, 1, MPI_INT, 1, 999, MPI_COMM_WORLD, &c));
        OK(MPI_Cancel(&c));
        OK(MPI_Wait(&c, &st[0]));
        OK(MPI_Test_cancelled(&st[0], &flag));
        CHECK(flag);
        /* Persistent receives, restarted 10 times. */
        MPI_Request p[2];
        OK(MPI_Recv_init(&buf[0], 1, MPI_INT, 1, 50, MPI_COMM_WORLD, &p[0]));
        OK(MPI_Recv_init(&buf[1], 1, MPI_INT, 1, 51, MPI_COMM_WORLD, &p[1]));
        for (int it = 0; it < 10; it++) {
            OK(MPI_Startall(2, p));
            OK(MPI_Waitall(2, p, st));
            CHECK(buf[0] == it && buf[1] == -it && p[0] != MPI_REQUEST_NULL);
            CHECK(st[1].MPI_TAG == 51);
        }
        /* An inactive persistent request waits at once with an empty status. */
        OK(MPI_Wait(&p[0], &st[0]));
        CHECK(st[0].MPI_SOURCE == MPI_ANY_SOURCE && st[0].MPI_TAG == MPI_ANY_TAG);
        OK(MPI_Request_free(&p[0]));
        OK(MPI_Request_free(&p[1]));
        CHECK(p[0] == MPI_REQUEST_NULL);
        /* Testing until done, and Request_get_status, which leaves the request alive. */
        OK(MPI_Irecv(&buf[2], 1, MPI_INT, 1, 60, MPI_COMM_WORLD, &c));
        /* A single-completion call leaves MPI_ERROR alone (MPI-3.1 section 3.2.5). */
        st[0].MPI_ERROR = 12345;
        flag = 0;
        while (!flag)
            OK(MPI_Request_get_status(c, &flag, &st[0]));
        CHECK(c != MPI_REQUEST_NULL && st[0].MPI_TAG == 60 && st[0].MPI_ERROR == 12345);
        OK(MPI_Test(&c, &flag, &st[0]));
        CHECK(flag && c == MPI_REQUEST_NULL && buf[2] == 60);
        OK(MPI_Recv(&buf[3], 1, MPI_INT, 1, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(buf[3] == 61);
    } else if (rank == 1) {
        for (int i = 0; i < N; i++)
            out[i] = 100 + i;
        OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int i = 0; i < N; i++)
            if (i != 3)
                OK(MPI_Send(&out[i], 1, MPI_INT, 0, i, MPI_COMM_WORLD));
        MPI_Request p[2];
        int a, b;
        OK(MPI_Send_init(&a, 1, MPI_INT, 0, 50, MPI_COMM_WORLD, &p[0]));
        OK(MPI_Ssend_init(&b, 1, MPI_INT, 0, 51, MPI_COMM_WORLD, &p[1]));
        for (int it = 0; it < 10; it++) {
            a = it;
            b = -it;
            OK(MPI_Start(&p[0]));
            OK(MPI_Start(&p[1]));
            OK(MPI_Waitall(2, p, MPI_STATUSES_IGNORE));
        }
        OK(MPI_Request_free(&p[0]));
        OK(MPI_Request_free(&p[1]));
        /* A send freed while active still arrives. */
        int v60 = 60, v61 = 61;
        MPI_Request f;
        OK(MPI_Isend(&v60, 1, MPI_INT, 0, 60, MPI_COMM_WORLD, &f));
        OK(MPI_Request_free(&f));
        CHECK(f == MPI_REQUEST_NULL);
        OK(MPI_Send(&v61, 1, MPI_INT, 0, 61, MPI_COMM_WORLD));
    } else {
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    pass("requests");
    return 0;
}
