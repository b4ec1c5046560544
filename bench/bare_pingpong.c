// The floor for any shared-memory ping-pong: two processes, pinned to CPUs 0 and 1, bounce one
// 8-byte counter through a shared anonymous mapping. Prints the one-way time.
// Built and run by bench/compare.sh.
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <stdint.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
int main(int argc,char**argv){int iters=argc>1?atoi(argv[1]):1000000;
 volatile uint64_t *a=mmap(0,4096,PROT_READ|PROT_WRITE,MAP_SHARED|MAP_ANONYMOUS,-1,0);
 volatile uint64_t *b=a+16; a[0]=0;b[0]=0;
 pid_t p=fork(); cpu_set_t s;CPU_ZERO(&s);CPU_SET(p==0?1:0,&s);sched_setaffinity(0,sizeof s,&s);
 if(p==0){for(uint64_t i=1;i<=iters;i++){while(a[0]!=i);b[0]=i;}exit(0);}
 double t=now();for(uint64_t i=1;i<=iters;i++){a[0]=i;while(b[0]!=i);} double d=now()-t; wait(0);
 printf("bare cache-line one-way: %.1f ns\n", d/iters/2);}
