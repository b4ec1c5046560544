/* Ping-pong between ranks 0 and 1 through volley's C API, every byte checked.
 * Sizes 0 B to 64 MiB (powers of 4 and their neighbours); each size goes by volley_send and
 * comes back alternately received in place (volley_recv) and into a buffer (volley_recv_into),
 * and once by volley_isend on the caller's buffer. Then one-way latency at 8 B and bandwidth at
 * 8 MiB, timed (rank 0 prints them).
 *
 *   volley run -n 2 --cpus 0,1 examples/c/pingpong [max_bytes [notime]] */
#include "check.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31u + seed * 7u + (i >> 12));
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31u + seed * 7u + (i >> 12))) return 0;
    return 1;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Receives one message of `n` bytes with `seed` into `in` (round decides how) and checks it. */
static void take(volley_endpoint *ep, unsigned char *in, size_t n, unsigned seed, int round) {
    if (round % 2 == 0) {
        volley_message *m;
        const void *data;
        size_t len;
        CHECK(volley_recv(ep, &m));
        CHECK(volley_message_data(m, &data, &len));
        if (len != n || !same(data, len, seed)) {
            fprintf(stderr, "size %zu: wrong message received in place (%zu bytes)\n", n, len);
            exit(1);
        }
        CHECK(volley_message_release(m));
    } else {
        size_t len, rank;
        CHECK(volley_recv_into(ep, in, n, &len, &rank, NULL));
        if (len != n || !same(in, len, seed)) {
            fprintf(stderr, "size %zu: wrong message received into a buffer\n", n);
            exit(1);
        }
    }
}

int main(int argc, char **argv) {
    size_t max = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)64 << 20;
    int timing = !(argc > 2 && strcmp(argv[2], "notime") == 0);
    volley_world *w;
    volley_endpoint *ep;
    size_t rank, size;
    CHECK(volley_init(&w));
    CHECK(volley_world_info(w, &rank, &size, NULL));
    if (size != 2) {
        fprintf(stderr, "pingpong needs 2 ranks (volley run -n 2), not %zu\n", size);
        return 1;
    }
    CHECK(volley_open(w, 1, &ep));
    CHECK(volley_target(ep, 1 - rank, 1));
    if (timing && max < ((size_t)8 << 20)) max = (size_t)8 << 20;
    unsigned char *out = malloc(max + 1), *in = malloc(max + 1);
    if (!out || !in) return 1;
    size_t sizes[64];
    int ns = 0;
    sizes[ns++] = 0;
    for (size_t s = 1; s <= max && ns < 61; s *= 4) {
        if (s > 1) sizes[ns++] = s - 1;
        sizes[ns++] = s;
        if (s < max) sizes[ns++] = s + 1;
    }
    for (int k = 0; k < ns; k++) {
        size_t n = sizes[k];
        for (int round = 0; round < 3; round++) {
            unsigned seed = (unsigned)(k * 3 + round);
            if (rank == 0) {
                fill(out, n, seed);
                if (round == 2) {
                    volley_request req;
                    CHECK(volley_isend(ep, out, n, &req));
                    CHECK(volley_wait(w, &req));
                } else {
                    CHECK(volley_send(ep, out, n));
                }
                take(ep, in, n, seed + 1000, round);
            } else {
                take(ep, in, n, seed, round);
                fill(out, n, seed + 1000);
                CHECK(volley_send(ep, out, n));
            }
        }
        if (rank == 0) printf("pingpong size=%zu ok\n", n);
    }
    /* Timing, as the Rust example (crates/volley/examples/pingpong.rs) times, for comparison:
     * 8 B and 8 MiB, round trips in batches (20 below 4 KiB), a tenth as warm-up, the median
     * of the batches' one-way times. */
    size_t timed[2] = {8, (size_t)8 << 20};
    static double samples[4096];
    for (int t = 0; timing && t < 2; t++) {
        size_t n = timed[t], len;
        size_t iters = 2000 * 4096 / (n + 4096);
        if (iters < 10) iters = 10;
        size_t batch = n <= 4096 ? 20 : 1, warm = iters / 10 < 2 ? 2 : iters / 10;
        size_t ns_ = 0;
        for (size_t i = 0; i < (warm + iters) / batch; i++) {
            double t0 = now();
            for (size_t b = 0; b < batch; b++) {
                if (rank == 0) {
                    /* One buffer for both ways, as the Rust example: the same memory footprint. */
                    CHECK(volley_send(ep, in, n));
                    CHECK(volley_recv_into(ep, in, max, &len, NULL, NULL));
                } else {
                    CHECK(volley_recv_into(ep, in, max, &len, NULL, NULL));
                    CHECK(volley_send(ep, in, n));
                }
            }
            if (rank == 0 && i * batch >= warm) samples[ns_++] = (now() - t0) / (2.0 * batch);
        }
        if (rank == 0) {
            /* Insertion sort: a few hundred samples. */
            for (size_t i = 1; i < ns_; i++)
                for (size_t j = i; j > 0 && samples[j - 1] > samples[j]; j--) {
                    double x = samples[j];
                    samples[j] = samples[j - 1];
                    samples[j - 1] = x;
                }
            double med = samples[ns_ / 2];
            printf("timing size=%zu one_way_us=%.3f mb_per_s=%.1f\n", n, med * 1e6,
                   n / med / 1e6);
        }
    }
    free(out);
    free(in);
    CHECK(volley_close(ep));
    CHECK(volley_finalize(w));
    return 0;
}
