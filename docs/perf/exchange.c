/* The exchange patterns of docs/perf/vm-2026-12-02.md: 8-byte MPI_Allreduce, ping-pong,
 * MPI_Sendrecv, MPI_Irecv + MPI_Isend + MPI_Waitall, and a one-way MPI_Sendrecv with
 * MPI_PROC_NULL, N iterations each (argv[1]) between ranks 0 and 1. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);
int n=argc>1?atoi(argv[1]):20000; double x=r,y;
for(int i=0;i<1000;i++)MPI_Allreduce(&x,&y,1,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD);
double t=MPI_Wtime();
for(int i=0;i<n;i++)MPI_Allreduce(&x,&y,1,MPI_DOUBLE,MPI_SUM,MPI_COMM_WORLD);
t=MPI_Wtime()-t; if(r==0)printf("allreduce %.3f us\n",t/n*1e6);
t=MPI_Wtime();
for(int i=0;i<n;i++){ if(r==0){MPI_Send(&x,1,MPI_DOUBLE,1,0,MPI_COMM_WORLD);MPI_Recv(&y,1,MPI_DOUBLE,1,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);} else {MPI_Recv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD);} }
t=MPI_Wtime()-t; if(r==0)printf("pingpong one-way %.3f us\n",t/n/2*1e6);
t=MPI_Wtime();
for(int i=0;i<n;i++)MPI_Sendrecv(&x,1,MPI_DOUBLE,1-r,0,&y,1,MPI_DOUBLE,1-r,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);
t=MPI_Wtime()-t; if(r==0)printf("sendrecv %.3f us\n",t/n*1e6);
t=MPI_Wtime();
for(int i=0;i<n;i++){MPI_Request q[2];MPI_Irecv(&y,1,MPI_DOUBLE,1-r,0,MPI_COMM_WORLD,&q[0]);MPI_Isend(&x,1,MPI_DOUBLE,1-r,0,MPI_COMM_WORLD,&q[1]);MPI_Waitall(2,q,MPI_STATUSES_IGNORE);}
t=MPI_Wtime()-t; if(r==0)printf("irecv-isend-waitall %.3f us\n",t/n*1e6);
t=MPI_Wtime();
for(int i=0;i<n;i++)MPI_Sendrecv(&x,1,MPI_DOUBLE,r==0?MPI_PROC_NULL:0,0,&y,1,MPI_DOUBLE,r==0?1:MPI_PROC_NULL,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);
t=MPI_Wtime()-t; if(r==0)printf("sendrecv one-way with PROC_NULL %.3f us\n",t/n*1e6);
MPI_Finalize();}
