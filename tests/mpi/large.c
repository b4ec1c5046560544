/* Large point-to-point messages (MPI-3.1 section 3.2-3.7): every byte of a message from 64 KiB
 * to 13 MiB arrives in order and in place, with sizes just around powers of two,
 * whichever side waits (blocking send and receive, Isend and Irecv, Ssend, Sendrecv in both
 * directions at once), to buffers at odd offsets, and the bytes around the receive buffer stay
 * untouched. Each pattern depends on the message, its offset and the iteration, so a chunk put
 * in the wrong place or left from an earlier message is seen. */
#include "check.h"
#include <string.h>

static unsigned char pat(long n, long i, int it) {
    return (unsigned char)(i * 131 + (i >> 17) * 7 + n + it * 29);
}

static void fill(unsigned char *b, long n, int it) {
    for (long i = 0; i < n; i++)
        b[i] = pat(n, i, it);
}

static void verify(const unsigned char *b, long n, int it) {
    for (long i = 0; i < n; i++)
        if (b[i] != pat(n, i, it)) {
            fprintf(stderr, "byte %ld of %ld (iteration %d): %u, expected %u\n", i, n, it,
                    b[i], pat(n, i, it));
            CHECK(0);
        }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    long sizes[] = {65537, 131071, 131073, 262147, 1048576 + 3, 3 * 131072 - 1, 13631488 + 5};
    int nsizes = sizeof sizes / sizeof sizes[0];
    long max = 13631488 + 5 + 64;
    unsigned char *sbuf = malloc(max), *rbase = malloc(max + 128);
    CHECK(sbuf && rbase);
    unsigned char *rbuf = rbase + 64 + 3; /* odd offset, 64 guard bytes before */
    OK(MPI_Barrier(MPI_COMM_WORLD)); /* every rank has started */
    if (rank < 2) {
        int peer = 1 - rank;
        for (int k = 0; k < nsizes; k++) {
            long n = sizes[k];
            for (int mode = 0; mode < 5; mode++) {
                for (int it = 0; it < 3; it++) {
                    int tag = mode * 10 + it;
                    int stamp = k * 100 + mode * 10 + it;
                    memset(rbase, 0xEE, max + 128);
                    fill(sbuf, n, stamp);
                    MPI_Status st;
                    if (mode == 0) { /* blocking, rank 0 sends first */
                        if (rank == 0) {
                            OK(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
                            OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                        } else {
                            OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                            OK(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
                        }
                    } else if (mode == 1) { /* non-blocking both ways at once */
                        MPI_Request r[2];
                        OK(MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r[0]));
                        OK(MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r[1]));
                        MPI_Status sts[2];
                        OK(MPI_Waitall(2, r, sts));
                        st = sts[0];
                    } else if (mode == 2) { /* synchronous sends, the receiver posts late */
                        if (rank == 0) {
                            OK(MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
                            OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                        } else {
                            double t0 = MPI_Wtime();
                            while (MPI_Wtime() - t0 < 0.002) {
                            }
                            OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                            OK(MPI_Ssend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
                        }
                    } else if (mode == 3) { /* Sendrecv: both send and receive at once */
                        OK(MPI_Sendrecv(sbuf, (int)n, MPI_BYTE, peer, tag, rbuf, (int)n,
                                        MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                    } else { /* the sender computes while the receive copies alone */
                        MPI_Request r;
                        if (rank == 0) {
                            OK(MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r));
                            double t0 = MPI_Wtime();
                            while (MPI_Wtime() - t0 < 0.005) {
                            }
                            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
                            OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                        } else {
                            OK(MPI_Recv(rbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
                            OK(MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r));
                            double t0 = MPI_Wtime();
                            while (MPI_Wtime() - t0 < 0.005) {
                            }
                            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
                        }
                    }
                    int count;
                    OK(MPI_Get_count(&st, MPI_BYTE, &count));
                    CHECK(count == n);
                    CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == tag);
                    verify(rbuf, n, stamp);
                    for (int g = 0; g < 67; g++)
                        CHECK(rbase[g] == 0xEE);
                    for (long g = n; g < n + 61; g++)
                        CHECK(rbuf[g] == 0xEE);
                }
            }
        }
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0)
        printf("large: ok\n");
    free(sbuf);
    free(rbase);
    MPI_Finalize();
    return 0;
}
