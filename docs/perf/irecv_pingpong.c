/* Ping-pong three ways (docs/perf/vm-2026-12-02.md): MPI_Send + MPI_Recv, MPI_Irecv posted
 * before the send + MPI_Wait, MPI_Isend + MPI_Wait; N iterations each (argv[1]). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int r;MPI_Comm_rank(MPI_COMM_WORLD,&r);
int n=argc>1?atoi(argv[1]):20000; double x=r,y; MPI_Request q;
for(int mode=0;mode<3;mode++){
MPI_Barrier(MPI_COMM_WORLD);
double t=MPI_Wtime();
for(int i=0;i<n;i++){
 if(r==0){ if(mode==0){MPI_Send(&x,1,MPI_DOUBLE,1,0,MPI_COMM_WORLD);MPI_Recv(&y,1,MPI_DOUBLE,1,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
   else if(mode==1){MPI_Irecv(&y,1,MPI_DOUBLE,1,0,MPI_COMM_WORLD,&q);MPI_Send(&x,1,MPI_DOUBLE,1,0,MPI_COMM_WORLD);MPI_Wait(&q,MPI_STATUS_IGNORE);}
   else {MPI_Isend(&x,1,MPI_DOUBLE,1,0,MPI_COMM_WORLD,&q);MPI_Wait(&q,MPI_STATUS_IGNORE);MPI_Recv(&y,1,MPI_DOUBLE,1,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
 } else { if(mode==0){MPI_Recv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Send(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD);}
   else if(mode==1){MPI_Irecv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&q);MPI_Wait(&q,MPI_STATUS_IGNORE);MPI_Send(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD);}
   else {MPI_Recv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);MPI_Isend(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&q);MPI_Wait(&q,MPI_STATUS_IGNORE);}
 }}
t=MPI_Wtime()-t; if(r==0)printf("mode %s one-way %.3f us\n",mode==0?"send/recv":mode==1?"irecv+wait":"isend+wait",t/n/2*1e6);}
MPI_Finalize();}
