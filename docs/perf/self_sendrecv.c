/* Send + Recv (mode 0), Irecv + Send + Wait (1), Isend + Wait + Recv (2), two Sends then two
 * Irecvs + Waitall (3: receives posted after their messages), two Irecvs, two Isends + Waitall of
 * the four (4: a halo exchange's pattern) to oneself, N times:
 * for callgrind instruction counts (docs/perf/vm-2026-12-02c.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int mode=atoi(argv[1]);int n=atoi(argv[2]);double x=1,y,z;MPI_Request q,qq[4];
for(int i=0;i<n;i++){
 if(mode==0){MPI_Send(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD);MPI_Recv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
 else if(mode==1){MPI_Irecv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&q);MPI_Send(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD);MPI_Wait(&q,MPI_STATUS_IGNORE);}
 else if(mode==2){MPI_Isend(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&q);MPI_Wait(&q,MPI_STATUS_IGNORE);MPI_Recv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,MPI_STATUS_IGNORE);}
 else if(mode==3){MPI_Send(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD);MPI_Send(&x,1,MPI_DOUBLE,0,1,MPI_COMM_WORLD);
   MPI_Irecv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&qq[0]);MPI_Irecv(&z,1,MPI_DOUBLE,0,1,MPI_COMM_WORLD,&qq[1]);MPI_Waitall(2,qq,MPI_STATUSES_IGNORE);}
 else if(mode==4){MPI_Irecv(&y,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&qq[0]);MPI_Irecv(&z,1,MPI_DOUBLE,0,1,MPI_COMM_WORLD,&qq[1]);
   MPI_Isend(&x,1,MPI_DOUBLE,0,0,MPI_COMM_WORLD,&qq[2]);MPI_Isend(&x,1,MPI_DOUBLE,0,1,MPI_COMM_WORLD,&qq[3]);MPI_Waitall(4,qq,MPI_STATUSES_IGNORE);}
}
MPI_Finalize();}
