// The floor for any wake-up: two processes pinned to CPUs 0 and 1 bounce a token through two
// eventfds with blocking reads, so each hop is a sleeping process woken by the other. Prints the
// one-way (wake-up) time, median of the rounds. Built and run by bench/modes.sh.
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    int a = eventfd(0, 0), b = eventfd(0, 0);
    uint64_t v = 1;
    pid_t p = fork();
    cpu_set_t s; CPU_ZERO(&s); CPU_SET(p == 0 ? 1 : 0, &s); sched_setaffinity(0, sizeof s, &s);
    if (p == 0) {
        for (int i = 0; i < iters; i++) { read(a, &v, 8); write(b, &v, 8); }
        exit(0);
    }
    double *d = malloc(sizeof(double) * iters);
    for (int i = 0; i < iters; i++) {
        double t = now();
        write(a, &v, 8); read(b, &v, 8);
        d[i] = (now() - t) / 2;
    }
    wait(0);
    qsort(d, iters, sizeof(double), cmp);
    printf("bare eventfd wake-up one-way: %.1f us\n", d[iters / 2] / 1e3);
    return 0;
}
