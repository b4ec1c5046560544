// Point-to-point figures of any MPI, from one source built with each MPI's own mpicc, so that
// volley's MPI face and another MPI run the same code side by side (bench/server.sh):
//
//   mpi_p2p pingpong SIZE...   two ranks; per size: median one-way time (half a round trip) in
//                              microseconds and MB/s (size / one-way), over 7 batches; each rank
//                              sends from one buffer and receives into another, as the OSU
//                              tests do (a buffer never written again can stay in the reader's
//                              cache from one iteration to the next: single copy gains by it)
//   mpi_p2p pingpong1 SIZE...  the same, each rank receiving into the buffer it sends from, as
//                              NetPIPE 3.7.2 does by default (netpipe.c: s_buff = r_buff): what a
//                              rank sends was written by its last receive, as an application's
//                              freshly computed data is
//   mpi_p2p rate WINDOW        two ranks; rank 0 posts WINDOW 8-byte Isends, rank 1 WINDOW
//                              Irecvs, both Waitall, then a zero-byte ack: million messages/s,
//                              median over 7 batches
//   mpi_p2p ring LAPS          N ranks; a token goes LAPS times round the ring, each rank adds
//                              its rank; median time per hop over 7 batches, token checked
//   mpi_p2p far SIZE...        N ranks; the ping-pong between rank 0 and rank N-1 while every
//                              other rank waits in MPI_Barrier (what many idle peers cost a
//                              pair: with ranks placed round-robin on two hosts, N-1 is on the
//                              other host)
//
// Every batch runs about 50 ms (the iteration count is calibrated by rank 0 and broadcast),
// after 100 ms of warm-up: a job's first milliseconds pay page faults on fresh shared memory,
// and a calibration on a cold start made the batches far too short to leave them.
// Output: one line per figure, "pingpong SIZE US MBPS" (also for far; "pingpong1" for the
// one-buffer ping-pong), "rate WINDOW MMSGS",
// "ring N US".
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCHES 7
#define BATCH_S 0.05

// The communicator the figures are taken in: MPI_COMM_WORLD, or the pair of `far`.
static MPI_Comm comm;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

static long parse_size(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end == 'K' || *end == 'k') v <<= 10;
    else if (*end == 'M' || *end == 'm') v <<= 20;
    return v;
}

// Rank 0 turns the time of a trial run into an iteration count for a BATCH_S batch; everyone
// gets it.
static long calibrate(double trial_s, long trial_iters);

// Runs `once(iters)` in chunks until rank 0 has spent WARMUP_S on it; the last chunk's time is
// the calibration's trial.
#define WARMUP_S 0.1
#define WARM(call, chunk, out_s)                                                          \
    do {                                                                                  \
        double t0 = MPI_Wtime();                                                          \
        int more = 1;                                                                     \
        while (more) {                                                                    \
            out_s = (call);                                                               \
            more = MPI_Wtime() - t0 < WARMUP_S;                                           \
            MPI_Bcast(&more, 1, MPI_INT, 0, comm);                                        \
        }                                                                                 \
        (void)chunk;                                                                      \
    } while (0)

static long calibrate(double trial_s, long trial_iters) {
    long n = trial_s > 0 ? (long)(BATCH_S / (trial_s / trial_iters)) : 1000;
    if (n < 4) n = 4;
    if (n > 10000000) n = 10000000;
    MPI_Bcast(&n, 1, MPI_LONG, 0, comm);
    return n;
}

static double pingpong_once(char *buf, char *in, long size, long iters, int me) {
    double t = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        if (me == 0) {
            MPI_Send(buf, (int)size, MPI_BYTE, 1, 1, comm);
            MPI_Recv(in, (int)size, MPI_BYTE, 1, 1, comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(in, (int)size, MPI_BYTE, 0, 1, comm, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_BYTE, 0, 1, comm);
        }
    }
    return MPI_Wtime() - t;
}

static void pingpong(int argc, char **argv, int me, int one_buffer) {
    for (int a = 2; a < argc; a++) {
        long size = parse_size(argv[a]);
        char *buf = malloc(size ? size : 1), *in = one_buffer ? buf : malloc(size ? size : 1);
        memset(buf, me, size ? size : 1);
        memset(in, 0, size ? size : 1);
        double trial;
        WARM(pingpong_once(buf, in, size, 20, me), 20, trial);
        long iters = calibrate(trial, 20);
        double us[BATCHES];
        for (int b = 0; b < BATCHES; b++)
            us[b] = pingpong_once(buf, in, size, iters, me) * 1e6 / iters / 2;
        if (me == 0) {
            double m = median(us, BATCHES);
            printf("%s %ld %.3f %.1f\n", one_buffer ? "pingpong1" : "pingpong", size, m, size / m);
            fflush(stdout);
        }
        if (in != buf)
            free(in);
        free(buf);
    }
}

static double rate_once(long window, long iters, int me, MPI_Request *rq, uint64_t *bufs) {
    double t = MPI_Wtime();
    for (long i = 0; i < iters; i++) {
        if (me == 0) {
            for (long w = 0; w < window; w++)
                MPI_Isend(&bufs[w], 8, MPI_BYTE, 1, 2, comm, &rq[w]);
            MPI_Waitall((int)window, rq, MPI_STATUSES_IGNORE);
            MPI_Recv(NULL, 0, MPI_BYTE, 1, 3, comm, MPI_STATUS_IGNORE);
        } else {
            for (long w = 0; w < window; w++)
                MPI_Irecv(&bufs[w], 8, MPI_BYTE, 0, 2, comm, &rq[w]);
            MPI_Waitall((int)window, rq, MPI_STATUSES_IGNORE);
            MPI_Send(NULL, 0, MPI_BYTE, 0, 3, comm);
        }
    }
    return MPI_Wtime() - t;
}

static void rate(long window, int me) {
    MPI_Request *rq = malloc(sizeof *rq * window);
    uint64_t *bufs = calloc(window, sizeof *bufs);
    double trial;
    WARM(rate_once(window, 20, me, rq, bufs), 20, trial);
    long iters = calibrate(trial, 20);
    double m[BATCHES];
    for (int b = 0; b < BATCHES; b++)
        m[b] = iters * window / rate_once(window, iters, me, rq, bufs) / 1e6;
    if (me == 0) printf("rate %ld %.2f\n", window, median(m, BATCHES));
    free(rq);
    free(bufs);
}

static double ring_once(long laps, int me, int n, int *ok) {
    long token = 0;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    double t = MPI_Wtime();
    for (long l = 0; l < laps; l++) {
        if (me == 0) {
            MPI_Send(&token, 1, MPI_LONG, next, 4, comm);
            MPI_Recv(&token, 1, MPI_LONG, prev, 4, comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, 4, comm, MPI_STATUS_IGNORE);
            token += me;
            MPI_Send(&token, 1, MPI_LONG, next, 4, comm);
        }
    }
    double s = MPI_Wtime() - t;
    if (me == 0 && token != laps * ((long)n * (n - 1) / 2)) *ok = 0;
    return s;
}

static void ring(long laps, int me, int n) {
    int ok = 1;
    double trial;
    WARM(ring_once(laps, me, n, &ok), laps, trial);
    long l = calibrate(trial, laps);
    double us[BATCHES];
    for (int b = 0; b < BATCHES; b++) us[b] = ring_once(l, me, n, &ok) * 1e6 / (l * n);
    if (me == 0) {
        printf("ring %d %.3f%s\n", n, median(us, BATCHES), ok ? "" : " WRONG-TOKEN");
        if (!ok) MPI_Abort(comm, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    comm = MPI_COMM_WORLD;
    int any_n = argc >= 3 && (!strcmp(argv[1], "ring") || !strcmp(argv[1], "far"));
    if (argc < 3 || (!any_n && n != 2) || n < 2) {
        if (me == 0)
            fprintf(stderr, "usage: mpi_p2p pingpong|pingpong1 SIZE... | rate WINDOW (2 ranks) | ring LAPS | far SIZE...\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (!strcmp(argv[1], "far")) {
        int pair = me == 0 || me == n - 1;
        MPI_Comm_split(MPI_COMM_WORLD, pair ? 0 : MPI_UNDEFINED, me, &comm);
        if (pair) {
            int pme;
            MPI_Comm_rank(comm, &pme);
            pingpong(argc, argv, pme, 0);
            MPI_Comm_free(&comm);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
    }
    if (!strcmp(argv[1], "pingpong")) pingpong(argc, argv, me, 0);
    else if (!strcmp(argv[1], "pingpong1")) pingpong(argc, argv, me, 1);
    else if (!strcmp(argv[1], "rate")) rate(atol(argv[2]), me);
    else if (!strcmp(argv[1], "ring")) ring(atol(argv[2]), me, n);
    MPI_Finalize();
    return 0;
}
