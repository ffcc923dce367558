/*
 * dropin_hello: the smallest MPI program (no ffd code), for
 * tests/install.rs to run under the installed libffd_mpi.so.
 *
 * Lines: "rank R: hello from N ranks", "rank R: finalized".
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("rank %d: hello from %d ranks\n", me, size);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    printf("rank %d: finalized\n", me);
    fflush(stdout);
    return 0;
}
