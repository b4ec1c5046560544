/* Large messages received in another order than sent (MPI 3.1, 3.5 and 3.7.4: tags decide
 * which receive takes which message, and a non-blocking send completes once a matching receive
 * is posted, whatever order the receiver posts them in). Rank 0 starts non-blocking sends of
 * sizes around any eager limit, then a blocking large send; rank 1 receives the blocking one
 * first, then the others last first, with every kind of receive (Recv, Irecv, Probe, Mprobe).
 * Then both ranks exchange large messages at once, a large synchronous send is overtaken by a
 * later one, and a large message truncated on receipt leaves the next one intact. No MPI may
 * deadlock or lose a byte here. */
#include "check.h"
#include <string.h>

static const int sizes[] = {1, 4096, 65535, 65536, 65537, 200000, 1 << 20, (3 << 20) + 1};
#define K ((int)(sizeof sizes / sizeof sizes[0]))
#define BIG (1 << 20)

static unsigned char byte_of(int msg, size_t j) { return (unsigned char)(msg * 31 + j * 7 + 1); }

static void fill(unsigned char *b, int msg, size_t len) {
    for (size_t j = 0; j < len; j++)
        b[j] = byte_of(msg, j);
}

static void verify(const unsigned char *b, int msg, size_t len) {
    for (size_t j = 0; j < len; j++)
        if (b[j] != byte_of(msg, j)) {
            fprintf(stderr, "message %d: byte %zu of %zu is %u, expected %u\n", msg, j, len,
                    b[j], byte_of(msg, j));
            CHECK(0);
        }
}

/* Receives message `i` (tag i, sizes[i] bytes) from rank 0 with receive flavour `how`. */
static void receive(int i, int how, unsigned char *buf) {
    MPI_Status st;
    MPI_Request r;
    MPI_Message m;
    int count = -1, len = sizes[i];
    switch (how) {
    case 0:
        OK(MPI_Recv(buf, len, MPI_BYTE, 0, i, MPI_COMM_WORLD, &st));
        break;
    case 1:
        OK(MPI_Irecv(buf, len, MPI_BYTE, MPI_ANY_SOURCE, i, MPI_COMM_WORLD, &r));
        OK(MPI_Wait(&r, &st));
        break;
    case 2:
        OK(MPI_Probe(0, i, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == len);
        OK(MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
        break;
    default:
        OK(MPI_Mprobe(0, i, MPI_COMM_WORLD, &m, &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == len);
        OK(MPI_Mrecv(buf, count, MPI_BYTE, &m, &st));
        break;
    }
    CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == i);
    OK(MPI_Get_count(&st, MPI_BYTE, &count));
    CHECK(count == len);
    verify(buf, i, (size_t)len);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank();
    CHECK(world_size() >= 2);
    size_t total = 0;
    for (int i = 0; i < K; i++)
        total += (size_t)sizes[i];
    unsigned char *buf = malloc(total + BIG);
    unsigned char *other = malloc(BIG);
    CHECK(buf && other);

    /* 1. Sent in order, received last first with every flavour; a blocking send goes past. */
    if (rank == 0) {
        MPI_Request r[K];
        size_t off = 0;
        for (int i = 0; i < K; i++) {
            fill(buf + off, i, (size_t)sizes[i]);
            OK(MPI_Isend(buf + off, sizes[i], MPI_BYTE, 1, i, MPI_COMM_WORLD, &r[i]));
            off += (size_t)sizes[i];
        }
        fill(other, 100, BIG);
        OK(MPI_Send(other, BIG, MPI_BYTE, 1, 100, MPI_COMM_WORLD));
        MPI_Status sts[K];
        OK(MPI_Waitall(K, r, sts));
    } else if (rank == 1) {
        MPI_Status st;
        OK(MPI_Recv(other, BIG, MPI_BYTE, 0, 100, MPI_COMM_WORLD, &st));
        verify(other, 100, BIG);
        for (int i = K - 1; i >= 0; i--)
            receive(i, i % 4, buf);
    }

    /* 2. Both ranks send a large message to each other at once, then receive. */
    if (rank < 2) {
        int peer = 1 - rank;
        MPI_Request r;
        MPI_Status st;
        fill(other, 200 + rank, BIG);
        OK(MPI_Isend(other, BIG, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &r));
        OK(MPI_Recv(buf, BIG, MPI_BYTE, peer, 7, MPI_COMM_WORLD, &st));
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        verify(buf, 200 + peer, BIG);
        fill(other, 300 + rank, BIG);
        OK(MPI_Sendrecv(other, BIG, MPI_BYTE, peer, 8, buf, BIG, MPI_BYTE, peer, 8,
                        MPI_COMM_WORLD, &st));
        verify(buf, 300 + peer, BIG);
    }

    /* 3. A large synchronous send overtaken by a later large send: the Issend completes only
     * once its receive is posted, after the later message was received. */
    if (rank == 0) {
        MPI_Request r[2];
        fill(buf, 400, BIG);
        fill(other, 401, BIG);
        OK(MPI_Issend(buf, BIG, MPI_BYTE, 1, 400, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Isend(other, BIG, MPI_BYTE, 1, 401, MPI_COMM_WORLD, &r[1]));
        MPI_Status sts[2];
        OK(MPI_Waitall(2, r, sts));
    } else if (rank == 1) {
        OK(MPI_Recv(other, BIG, MPI_BYTE, 0, 401, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        verify(other, 401, BIG);
        OK(MPI_Recv(buf, BIG, MPI_BYTE, 0, 400, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        verify(buf, 400, BIG);
    }

    /* 4. A large message into a smaller buffer: MPI_ERR_TRUNCATE; the next message is whole. */
    if (rank == 0) {
        fill(buf, 500, BIG);
        OK(MPI_Send(buf, BIG, MPI_BYTE, 1, 500, MPI_COMM_WORLD));
        fill(other, 501, BIG);
        OK(MPI_Send(other, BIG, MPI_BYTE, 1, 501, MPI_COMM_WORLD));
    } else if (rank == 1) {
        MPI_Status st;
        int class = -1;
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        int err = MPI_Recv(buf, BIG / 2, MPI_BYTE, 0, 500, MPI_COMM_WORLD, &st);
        OK(MPI_Error_class(err, &class));
        CHECK(class == MPI_ERR_TRUNCATE);
        OK(MPI_Recv(other, BIG, MPI_BYTE, 0, 501, MPI_COMM_WORLD, &st));
        verify(other, 501, BIG);
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }
    free(buf);
    free(other);
    pass("order");
    return 0;
}
