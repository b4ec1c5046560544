/* Send + Recv (mode 0), Irecv + Send + Wait (1), Isend + Wait + Recv (2) to oneself, N times:
 * for callgrind instruction counts (docs/perf/vm-2026-12-02c.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int mode=atoi(argv[1]);int n=atoi(argv[2]);double x=1,y;MPI_Request q;
for(int i=0;i<n;i++){
 if(mode==0){MPI_Send(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD);MPI_Recv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
 else if(mode==1){MPI_Irecv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&q);MPI_Send(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD);MPI_Wait(&q,MPI_STATUS_IGNORE);}
 else if(mode==2){MPI_Isend(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&q);MPI_Wait(&q,MPI_STATUS_IGNORE);MPI_Recv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
}
MPI_Finalize();}
