/* volley's rule that the hot path allocates nothing (STYLE.md): after a warm-up, point-to-point
 * calls and short collectives between two ranks of one host make no call to malloc, calloc,
 * realloc or the aligned allocators on the calling thread (a rare one-off growth aside, see
 * below). The program replaces glibc's
 * allocator entry points with counting ones that forward to glibc's own (__libc_malloc and
 * the like), so every allocation the library makes for this thread is seen. volley-only: it
 * checks an implementation's property, not MPI (MPICH allocates in some of these calls).
 * Not covered yet, because they still allocate: a non-blocking collective through the shared
 * segment (its packed contribution and result vectors), a non-contiguous datatype's send or
 * receive (its boxed packer), Alltoall's linear step between hosts (its message lists). */
#include "check.h"
#include <errno.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

/* Counted on this thread only: the library's own threads (if any) are not the hot path. */
static __thread int counting;
static __thread long allocs;

void *malloc(size_t n) {
    allocs += counting;
    return __libc_malloc(n);
}
void *calloc(size_t k, size_t n) {
    allocs += counting;
    return __libc_calloc(k, n);
}
void *realloc(void *p, size_t n) {
    allocs += counting;
    return __libc_realloc(p, n);
}
void *memalign(size_t a, size_t n) {
    allocs += counting;
    return __libc_memalign(a, n);
}
void *aligned_alloc(size_t a, size_t n) {
    allocs += counting;
    return __libc_memalign(a, n);
}
int posix_memalign(void **p, size_t a, size_t n) {
    allocs += counting;
    void *q = __libc_memalign(a, n);
    if (!q)
        return ENOMEM;
    *p = q;
    return 0;
}

enum { WARM = 300, COUNTED = 2000 };
static double x[1024], y[1024];

/* One iteration of the call pattern `op` with `peer`. */
static void step(const char *op, int peer) {
    int r = world_rank();
    MPI_Request q[2];
    if (!strcmp(op, "Send+Recv ping-pong")) {
        if (r == 0) {
            OK(MPI_Send(x, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD));
            OK(MPI_Recv(y, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            OK(MPI_Recv(y, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            OK(MPI_Send(x, 1, MPI_DOUBLE, peer, 0, MPI_COMM_WORLD));
        }
    } else if (!strcmp(op, "Sendrecv")) {
        OK(MPI_Sendrecv(x, 1, MPI_DOUBLE, peer, 1, y, 1, MPI_DOUBLE, peer, 1, MPI_COMM_WORLD,
                        MPI_STATUS_IGNORE));
    } else if (!strcmp(op, "Irecv+Isend+Waitall 8 B") || !strcmp(op, "Irecv+Isend+Waitall 8 KiB")) {
        int n = op[strlen(op) - 3] == 'K' ? 1024 : 1;
        OK(MPI_Irecv(y, n, MPI_DOUBLE, peer, 2, MPI_COMM_WORLD, &q[0]));
        OK(MPI_Isend(x, n, MPI_DOUBLE, peer, 2, MPI_COMM_WORLD, &q[1]));
        OK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
    } else if (!strcmp(op, "Allreduce")) {
        OK(MPI_Allreduce(x, y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    } else if (!strcmp(op, "Barrier")) {
        OK(MPI_Barrier(MPI_COMM_WORLD));
    } else if (!strcmp(op, "Bcast")) {
        OK(MPI_Bcast(x, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    } else if (!strcmp(op, "Ibarrier+Wait")) {
        OK(MPI_Ibarrier(MPI_COMM_WORLD, &q[0]));
        OK(MPI_Wait(&q[0], MPI_STATUS_IGNORE));
    } else if (!strcmp(op, "persistent Startall+Waitall")) {
        static MPI_Request p[2];
        static int made;
        if (!made) {
            OK(MPI_Recv_init(y, 1, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, &p[0]));
            OK(MPI_Send_init(x, 1, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, &p[1]));
            made = 1;
        }
        OK(MPI_Startall(2, p));
        OK(MPI_Waitall(2, p, MPI_STATUSES_IGNORE));
    } else if (!strcmp(op, "Iprobe+Recv")) {
        int flag = 0;
        OK(MPI_Isend(x, 1, MPI_DOUBLE, peer, 4, MPI_COMM_WORLD, &q[0]));
        while (!flag)
            OK(MPI_Iprobe(peer, 4, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        OK(MPI_Recv(y, 1, MPI_DOUBLE, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Wait(&q[0], MPI_STATUS_IGNORE));
    } else if (!strcmp(op, "Scan")) {
        OK(MPI_Scan(x, y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    } else {
        CHECK(!"unknown step");
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    CHECK(world_size() == 2);
    int peer = 1 - world_rank();
    const char *ops[] = {"Send+Recv ping-pong", "Sendrecv", "Irecv+Isend+Waitall 8 B",
                         "Irecv+Isend+Waitall 8 KiB", "Allreduce", "Barrier", "Bcast",
                         "Ibarrier+Wait", "persistent Startall+Waitall", "Iprobe+Recv",
                         "Scan"};
    int bad = 0;
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        for (int i = 0; i < WARM; i++)
            step(ops[k], peer);
        allocs = 0;
        counting = 1;
        for (int i = 0; i < COUNTED; i++)
            step(ops[k], peer);
        counting = 0;
        /* A call that allocates does so every time (COUNTED or more); a buffer that grows once
         * when a busy machine first queues more than before is not per call, and is let pass. */
        if (allocs > COUNTED / 100) {
            fprintf(stderr, "rank %d: %s allocated %ld times in %d calls\n", world_rank(), ops[k],
                    allocs, COUNTED);
            bad = 1;
        }
        /* The ranks move to the next pattern together. */
        OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    CHECK(!bad);
    if (world_rank() == 0)
        printf("no_alloc: ok\n");
    MPI_Finalize();
    return 0;
}
