/* Many receives posted at once (MPI-3.1 sections 3.5 and 3.7): each message goes to the oldest
 * posted receive that accepts it, from whichever sender, with whichever tags and wildcards the
 * receives name, however many wait and whether the messages came before the receives, after
 * them or while they were being posted. A receive that no message will match can be cancelled;
 * the messages no receive took wait, in the order sent. And messages that no posted receive
 * wants do not keep those behind them from receives that want them, also when there are more
 * of them than a sender may have in flight.
 *
 * Every rank builds the same script from a seed; rank 0 works out which message each of its
 * receives must get (in order per sender: the oldest receive that accepts it and has none yet)
 * and checks that it does. */
#include "check.h"

#define ROUNDS 60
#define MAXR 64  /* receives posted in a round, at most */
#define MAXM 24  /* messages from one sender in a round, at most */
#define MAXS 15  /* senders: ranks 1 to MAXS (the others only take part in the barriers) */

static unsigned lcg(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

struct script {
    int nrecv;
    int src[MAXR], tag[MAXR]; /* what each receive names (MPI_ANY_* included) */
    int nmsg[MAXS + 1];
    int mtag[MAXS + 1][MAXM];        /* the tags each sender sends, in order */
};

/* A sender's one message with a tag of its own, which an any-source receive waits for. */
static int own_tag(int s) { return 50 + s; }

static void make(struct script *sc, int round, int size) {
    /* size: 1 + the number of senders */
    unsigned seed = 7919u * (unsigned)round + 17u;
    for (int s = 1; s < size; s++) {
        int n = 4 + lcg(&seed) % (MAXM - 5);
        int own = lcg(&seed) % n;
        for (int j = 0; j < n; j++) sc->mtag[s][j] = j == own ? own_tag(s) : (int)(lcg(&seed) % 4);
        sc->nmsg[s] = n;
    }
    int cap = MAXR - (size - 1);
    sc->nrecv = 3 + lcg(&seed) % (cap - 3);
    for (int i = 0; i < sc->nrecv; i++) {
        sc->src[i] = 1 + lcg(&seed) % (size - 1);
        int t = lcg(&seed) % 5;
        sc->tag[i] = t == 4 ? MPI_ANY_TAG : t;
    }
    /* One any-source receive per sender, at a place of the script's choosing. */
    for (int s = 1; s < size; s++) {
        int at = lcg(&seed) % (sc->nrecv + 1);
        for (int i = sc->nrecv; i > at; i--) {
            sc->src[i] = sc->src[i - 1];
            sc->tag[i] = sc->tag[i - 1];
        }
        sc->src[at] = MPI_ANY_SOURCE;
        sc->tag[at] = own_tag(s);
        sc->nrecv++;
    }
}

static int accepts(const struct script *sc, int i, int s, int tag) {
    return (sc->src[i] == MPI_ANY_SOURCE || sc->src[i] == s) &&
           (sc->tag[i] == MPI_ANY_TAG || sc->tag[i] == tag);
}

/* The message code a payload carries: sender * 1000 + its place in the sender's order. */
static int code(int s, int j) { return s * 1000 + j; }

static void sender(const struct script *sc, int rank, int mode) {
    int n = sc->nmsg[rank];
    int v[MAXM];
    MPI_Request r[MAXM];
    if (mode == 2) OK(MPI_Barrier(MPI_COMM_WORLD)); /* the receives are posted first */
    for (int j = 0; j < n; j++) {
        v[j] = code(rank, j);
        OK(MPI_Isend(&v[j], 1, MPI_INT, 0, sc->mtag[rank][j], MPI_COMM_WORLD, &r[j]));
    }
    if (mode == 1) OK(MPI_Barrier(MPI_COMM_WORLD)); /* the messages are sent first */
    OK(MPI_Waitall(n, r, MPI_STATUSES_IGNORE));
}

static void receiver(const struct script *sc, int size, int round, int mode) {
    /* Which message each receive gets: per sender, in the order sent, the oldest receive that
     * accepts it and has none yet. */
    int want[MAXR], taken[MAXS + 1][MAXM];
    for (int i = 0; i < sc->nrecv; i++) want[i] = -1;
    for (int s = 1; s < size; s++) {
        for (int j = 0; j < sc->nmsg[s]; j++) {
            taken[s][j] = 0;
            for (int i = 0; i < sc->nrecv; i++) {
                if (want[i] < 0 && accepts(sc, i, s, sc->mtag[s][j])) {
                    want[i] = code(s, j);
                    taken[s][j] = 1;
                    break;
                }
            }
        }
    }
    int got[MAXR];
    MPI_Request r[MAXR];
    if (mode == 1) OK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < sc->nrecv; i++) {
        got[i] = -7;
        OK(MPI_Irecv(&got[i], 1, MPI_INT, sc->src[i], sc->tag[i], MPI_COMM_WORLD, &r[i]));
    }
    if (mode == 2) OK(MPI_Barrier(MPI_COMM_WORLD));
    /* Those that get nothing are cancelled. */
    int left = 0;
    for (int i = 0; i < sc->nrecv; i++) {
        if (want[i] >= 0) {
            left++;
            continue;
        }
        MPI_Status st;
        OK(MPI_Cancel(&r[i]));
        OK(MPI_Wait(&r[i], &st));
        int flag = 0;
        OK(MPI_Test_cancelled(&st, &flag));
        CHECK(flag);
        CHECK(got[i] == -7);
    }
    /* The others complete, by Waitany, Waitsome or Testsome by turns. */
    while (left > 0) {
        int idx[MAXR], out = 0;
        MPI_Status st[MAXR];
        if (round / 3 % 3 == 0) {
            OK(MPI_Waitany(sc->nrecv, r, &idx[0], &st[0]));
            CHECK(idx[0] != MPI_UNDEFINED);
            out = 1;
        } else if (round / 3 % 3 == 1) {
            OK(MPI_Waitsome(sc->nrecv, r, &out, idx, st));
        } else {
            OK(MPI_Testsome(sc->nrecv, r, &out, idx, st));
        }
        CHECK(out != MPI_UNDEFINED);
        for (int k = 0; k < out; k++) {
            int i = idx[k];
            if (got[i] != want[i])
                fprintf(stderr, "round %d mode %d: receive %d (source %d, tag %d) got %d, not %d\n",
                        round, mode, i, sc->src[i], sc->tag[i], got[i], want[i]);
            CHECK(got[i] == want[i]);
            CHECK(st[k].MPI_SOURCE == want[i] / 1000);
            CHECK(st[k].MPI_TAG == sc->mtag[want[i] / 1000][want[i] % 1000]);
            left--;
        }
    }
    /* The messages no receive took, from each sender in the order sent. */
    for (int s = 1; s < size; s++) {
        for (int j = 0; j < sc->nmsg[s]; j++) {
            if (taken[s][j]) continue;
            int v = -1;
            MPI_Status st;
            OK(MPI_Recv(&v, 1, MPI_INT, s, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            CHECK(v == code(s, j));
            CHECK(st.MPI_TAG == sc->mtag[s][j]);
        }
    }
}

/* Messages no posted receive wants, more than a sender may have in flight (volley's rings hold
 * 1 MiB), in front of those that the posted receives want: 3 MB from each sender, more than
 * volley holds of unreceived eager data at 9 ranks and over (16 MiB). MPI's progress rule says
 * the wanted ones arrive however many there are. */
static void behind_unwanted(int rank, int size) {
    /* size: 1 + the number of senders */
    enum { UNWANTED = 3000, LEN = 256, WANTED = 6 };
    if (rank == 0) {
        int got[MAXS + 1][WANTED];
        MPI_Request r[MAXS * WANTED];
        int n = 0;
        for (int s = 1; s < size; s++)
            for (int k = 0; k < WANTED; k++)
                OK(MPI_Irecv(&got[s][k], 1, MPI_INT, s, 10 + k, MPI_COMM_WORLD, &r[n++]));
        OK(MPI_Waitall(n, r, MPI_STATUSES_IGNORE));
        for (int s = 1; s < size; s++)
            for (int k = 0; k < WANTED; k++) CHECK(got[s][k] == code(s, k));
        int *buf = malloc(LEN * sizeof(int));
        CHECK(buf);
        for (int s = 1; s < size; s++) {
            for (int j = 0; j < UNWANTED; j++) {
                OK(MPI_Recv(buf, LEN, MPI_INT, s, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(buf[0] == j && buf[LEN - 1] == s);
            }
        }
        free(buf);
    } else {
        int *bufs = malloc((size_t)UNWANTED * LEN * sizeof(int));
        MPI_Request *r = malloc((UNWANTED + WANTED) * sizeof(MPI_Request));
        int v[WANTED];
        CHECK(bufs && r);
        for (int j = 0; j < UNWANTED; j++) {
            int *b = bufs + (size_t)j * LEN;
            for (int w = 0; w < LEN; w++) b[w] = w == 0 ? j : rank;
            OK(MPI_Isend(b, LEN, MPI_INT, 0, 9, MPI_COMM_WORLD, &r[j]));
        }
        for (int k = WANTED - 1; k >= 0; k--) { /* in the reverse order of the receives */
            v[k] = code(rank, k);
            OK(MPI_Isend(&v[k], 1, MPI_INT, 0, 10 + k, MPI_COMM_WORLD, &r[UNWANTED + k]));
        }
        OK(MPI_Waitall(UNWANTED + WANTED, r, MPI_STATUSES_IGNORE));
        free(bufs);
        free(r);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    int senders = size - 1 < MAXS ? size - 1 : MAXS, part = 1 + senders;
    static struct script sc;
    for (int round = 0; round < ROUNDS; round++) {
        make(&sc, round, part);
        /* 0: no order between the sends and the receives, 1: the sends first, 2: the receives
         * first (both through a barrier, which every rank joins) */
        int mode = round % 3;
        if (rank == 0)
            receiver(&sc, part, round, mode);
        else if (rank <= senders)
            sender(&sc, rank, mode);
        else if (mode != 0)
            OK(MPI_Barrier(MPI_COMM_WORLD));
        /* No message of the next round before rank 0 has all of this one's. */
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    if (rank < part) behind_unwanted(rank, part);
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("many_posted: ok\n");
    MPI_Finalize();
    return 0;
}
