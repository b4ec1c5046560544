// Single-thread memcpy bandwidth on this machine, cache-hot (the same buffers again) and cold
// (64 MiB buffers), as the ceiling for copy-based transfer modes. Built and run by bench/modes.sh.
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(void) {
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(0, &s); sched_setaffinity(0, sizeof s, &s);
    size_t sizes[] = {65536, 1 << 20, 8 << 20, 64 << 20};
    size_t pool = 512u << 20;
    char *src = malloc(pool), *dst = malloc(pool);
    memset(src, 1, pool); memset(dst, 2, pool);
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        int reps = (int)((1u << 30) / n);
        double t = now();
        for (int i = 0; i < reps; i++) { memcpy(dst, src, n); __asm__ volatile("" ::: "memory"); }
        double hot = n * (double)reps / (now() - t) / 1e6;
        size_t slots = pool / n;
        t = now();
        for (int i = 0; i < reps; i++) { memcpy(dst + (i % slots) * n, src + ((i + 1) % slots) * n, n); __asm__ volatile("" ::: "memory"); }
        double cold = n * (double)reps / (now() - t) / 1e6;
        printf("memcpy %zu bytes: hot %.0f MB/s cold %.0f MB/s\n", n, hot, cold);
    }
    return 0;
}
