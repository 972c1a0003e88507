/* Prints, per rank, what MPI thinks of the node layout: "rank R host H local L/S nodes N".
   MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups the ranks that share memory; N counts the groups.
   Build: mpicc -O2 -o split_check split_check.c */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
  int rank, lrank, lsize, leader, nodes, len;
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Comm node;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &lrank);
  MPI_Comm_size(node, &lsize);
  leader = lrank == 0;
  MPI_Allreduce(&leader, &nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Get_processor_name(host, &len);
  printf("rank %d host %s local %d/%d nodes %d\n", rank, host, lrank, lsize, nodes);
  MPI_Comm_free(&node);
  MPI_Finalize();
  return 0;
}
