/* The VM's floor for a one-way hop between two cores: two pinned threads flip a cache line
 * (docs/perf/vm-2026-12-02c.md). gcc -O2 -pthread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <time.h>
static _Alignas(64) _Atomic long a; static _Alignas(64) _Atomic long b; static long N=2000000;
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);pthread_setaffinity_np(pthread_self(),sizeof s,&s);}
static void*peer(void*x){pin(1);for(long i=1;i<=N;i++){while(atomic_load_explicit(&a,memory_order_acquire)!=i);atomic_store_explicit(&b,i,memory_order_release);}return 0;}
int main(){pthread_t t;pin(0);pthread_create(&t,0,peer,0);struct timespec s,e;clock_gettime(CLOCK_MONOTONIC,&s);
for(long i=1;i<=N;i++){atomic_store_explicit(&a,i,memory_order_release);while(atomic_load_explicit(&b,memory_order_acquire)!=i);}
clock_gettime(CLOCK_MONOTONIC,&e);pthread_join(t,0);printf("cache-line one-way %.3f us\n",((e.tv_sec-s.tv_sec)*1e9+(e.tv_nsec-s.tv_nsec))/N/2/1e3);}
