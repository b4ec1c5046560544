/* What every MPI test program uses: CHECK stops the job with the file, line and condition that
 * failed. Written against the MPI standard only, so each test runs on any MPI (volley's, MPICH). */
#ifndef VOLLEY_MPI_TEST_CHECK_H
#define VOLLEY_MPI_TEST_CHECK_H
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            int rank_ = -1;                                                          \
            MPI_Comm_rank(MPI_COMM_WORLD, &rank_);                                   \
            fprintf(stderr, "FAILED on rank %d: %s:%d: %s\n", rank_, __FILE__,       \
                    __LINE__, #cond);                                                \
            fflush(stderr);                                                          \
            MPI_Abort(MPI_COMM_WORLD, 3);                                            \
        }                                                                            \
    } while (0)

/* An MPI call that must succeed. */
#define OK(call) CHECK((call) == MPI_SUCCESS)

static inline int world_rank(void) {
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

static inline int world_size(void) {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/* This process's peak resident memory so far, in KiB (-1 if unknown). */
static inline long peak_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* SplitMix64's finaliser: a well-mixed 64-bit value from any 64-bit value. */
static inline uint64_t fmix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A test value for (what, step, rank, element): every argument changes it. */
static inline uint64_t h4(uint64_t what, uint64_t i, uint64_t r, uint64_t k) {
    return fmix(fmix(fmix(fmix(what) ^ i) ^ r) ^ k);
}

/* Ends a passing test: every rank says so, rank 0 last. */
static inline void pass(const char *name) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) {
        printf("%s: ok\n", name);
        fflush(stdout);
    }
    MPI_Finalize();
}
#endif
