/* docs/perf/vm-2026-12-03b.md: 8-byte collective latency, 2+ ranks: mode a (MPI_Allreduce, one double, SUM), b (MPI_Bcast from 0), r (MPI_Reduce to 0), B (MPI_Barrier); 20,000 warm-up calls, then N timed; rank 0 prints us per call. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static void op(char m,double*x,double*y){
 if(m=='a')MPI_Allreduce(x,y,1,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD);
 else if(m=='b')MPI_Bcast(x,1,MPI_DOUBLE,0,MPI_COMM_WORLD);
 else if(m=='r')MPI_Reduce(x,y,1,MPI_DOUBLE,MPI_SUM,0,MPI_COMM_WORLD);
 else MPI_Barrier(MPI_COMM_WORLD);}
int main(int argc,char**argv){MPI_Init(&argc,&argv);char m=argv[1][0];int n=atoi(argv[2]),r;double x=1,y=0;MPI_Comm_rank(MPI_COMM_WORLD,&r);
for(int i=0;i<20000;i++) op(m,&x,&y);
MPI_Barrier(MPI_COMM_WORLD);double t=MPI_Wtime();
for(int i=0;i<n;i++) op(m,&x,&y);
t=MPI_Wtime()-t; if(r==0) printf("%.3f\n",t/n*1e6);
MPI_Finalize();}
