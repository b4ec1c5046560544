/* The collective measurement of `volley bench` (barrier, bcast, reduce, allreduce, allgather,
 * alltoall, and ibarrier, iallreduce: the non-blocking call, then MPI_Wait), and its MPI
 * ping-pong (MPI_Send and MPI_Recv between ranks 0 and 1; the time given is one-way, half a round
 * trip), built by `volley bench` with each MPI's own mpicc (volley's, Open MPI's, MPICH's) and
 * started by each one's launcher, so the three run the same code.
 *
 *   coll_driver OP BUDGET_MS SIZE...
 *
 * For each size (bytes per rank's contribution: the message for bcast, the vector for the
 * reductions, a rank's block for allgather, a block per pair for alltoall): a warm-up, then
 * batches of k calls (k chosen so a batch takes about BUDGET_MS / 20), each batch opened by a
 * barrier; a batch's time per call is the slowest rank's. Rank 0 prints one line per size:
 *   result: size=S calls=K batches=B median_us=M min_us=m
 * and first, how many network namespaces the ranks run in (hosts that are namespaces of one
 * machine: the launcher really spread them):
 *   netns: distinct=D
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int op_of(const char *s) {
    const char *ops[] = {"barrier",  "bcast",    "reduce",     "allreduce", "allgather",
                         "alltoall", "ibarrier", "iallreduce", "pingpong"};
    for (int i = 0; i < 9; i++)
        if (strcmp(s, ops[i]) == 0)
            return i;
    return -1;
}

enum { PINGPONG = 8 };

static void call(int op, int rank, char *a, char *b, long size, MPI_Comm c) {
    int n = (int)(size / 8);
    MPI_Request r;
    switch (op) {
    case 0:
        MPI_Barrier(c);
        break;
    case 1:
        MPI_Bcast(a, (int)size, MPI_BYTE, 0, c);
        break;
    case 2:
        MPI_Reduce(a, b, n, MPI_DOUBLE, MPI_SUM, 0, c);
        break;
    case 3:
        MPI_Allreduce(a, b, n, MPI_DOUBLE, MPI_SUM, c);
        break;
    case 4:
        MPI_Allgather(a, (int)size, MPI_BYTE, b, (int)size, MPI_BYTE, c);
        break;
    case 5:
        MPI_Alltoall(a, (int)size, MPI_BYTE, b, (int)size, MPI_BYTE, c);
        break;
    case 6:
        MPI_Ibarrier(c, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        break;
    case 7:
        MPI_Iallreduce(a, b, n, MPI_DOUBLE, MPI_SUM, c, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        break;
    case PINGPONG:
        /* Ranks beyond the first two sit it out. */
        if (rank == 0) {
            MPI_Send(a, (int)size, MPI_BYTE, 1, 1, c);
            MPI_Recv(b, (int)size, MPI_BYTE, 1, 1, c, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(b, (int)size, MPI_BYTE, 0, 1, c, MPI_STATUS_IGNORE);
            MPI_Send(a, (int)size, MPI_BYTE, 0, 1, c);
        }
        break;
    }
}

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm c = MPI_COMM_WORLD;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &n);
    {
        struct stat st;
        unsigned long long me = stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0;
        unsigned long long *all = malloc(sizeof *all * (size_t)n);
        if (!all)
            MPI_Abort(c, 3);
        MPI_Gather(&me, 1, MPI_UNSIGNED_LONG_LONG, all, 1, MPI_UNSIGNED_LONG_LONG, 0, c);
        if (rank == 0) {
            int distinct = 0;
            for (int i = 0; i < n; i++) {
                int seen = 0;
                for (int j = 0; j < i; j++)
                    seen |= all[j] == all[i];
                distinct += !seen;
            }
            printf("netns: distinct=%d\n", distinct);
        }
        free(all);
    }
    int op = argc > 3 ? op_of(argv[1]) : -1;
    if (op < 0 || (op == PINGPONG && n < 2)) {
        if (rank == 0)
            fprintf(stderr, "usage: coll_driver barrier|bcast|reduce|allreduce|allgather|alltoall|ibarrier|iallreduce|pingpong BUDGET_MS SIZE... (pingpong: 2 ranks or more)\n");
        MPI_Abort(c, 2);
    }
    /* A ping-pong call is a round trip; the time given is one-way. */
    double per_call = op == PINGPONG ? 2.0 : 1.0;
    double budget = atof(argv[2]) / 1000.0;
    long most = 0;
    for (int i = 3; i < argc; i++)
        if (atol(argv[i]) > most)
            most = atol(argv[i]);
    /* Room for a rank's part times the ranks (allgather, alltoall). */
    size_t room = (size_t)(most > 8 ? most : 8) * (size_t)n;
    char *a = malloc(room), *b = malloc(room);
    if (!a || !b)
        MPI_Abort(c, 3);
    for (size_t i = 0; i < room; i++)
        a[i] = (char)(i % 251), b[i] = 0;
    enum { BATCHES = 20 };
    double t[BATCHES];
    for (int i = 3; i < argc; i++) {
        long size = atol(argv[i]);
        for (int w = 0; w < 3; w++)
            call(op, rank, a, b, size, c);
        /* How many calls fill a batch: timed on rank 0, the same count everywhere. */
        long k = 1;
        for (;;) {
            MPI_Barrier(c);
            double t0 = MPI_Wtime();
            for (long j = 0; j < k; j++)
                call(op, rank, a, b, size, c);
            double dt = MPI_Wtime() - t0;
            int more = dt < budget / BATCHES / 4 && k < (1L << 24);
            MPI_Bcast(&more, 1, MPI_INT, 0, c);
            if (!more)
                break;
            k *= 4;
        }
        for (int z = 0; z < BATCHES; z++) {
            MPI_Barrier(c);
            double t0 = MPI_Wtime();
            for (long j = 0; j < k; j++)
                call(op, rank, a, b, size, c);
            double per = (MPI_Wtime() - t0) / (double)k / per_call, slowest;
            MPI_Reduce(&per, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, c);
            t[z] = slowest;
        }
        if (rank == 0) {
            qsort(t, BATCHES, sizeof t[0], cmp);
            printf("result: size=%ld calls=%ld batches=%d median_us=%.3f min_us=%.3f\n", size, k,
                   BATCHES, 1e6 * (t[BATCHES / 2 - 1] + t[BATCHES / 2]) / 2, 1e6 * t[0]);
            fflush(stdout);
        }
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
