/* An idle MPI job under Open MPI's ULFM failure detector, for
 * benches/accuracy_ulfm.py: every rank sleeps 1 ms and probes
 * (MPI_Iprobe, so the library progresses) for the given seconds, then
 * prints the ranks it knows failed and finalizes.
 *
 *   mpicc -O2 -o ulfm_idle ulfm_idle.c
 *   mpirun --with-ft ulfm --mca mpi_ft_detector true \
 *          --mca mpi_ft_detector_thread true ... ./ulfm_idle SECONDS
 *
 * Output, one line per rank on stdout:
 *   ULFM rank <r> failed <n> [<rank> ...]
 * A rank that prints no line was aborted (ULFM's own "reported dead"
 * abort, or mpirun tearing the job down).
 *
 * With the detector thread on, MPI_Finalize of Open MPI 5.0.11 hangs
 * here, so the ranks meet at a barrier (which returns, possibly with an
 * error, once everyone printed or failed) and leave with _exit; mpirun's
 * complaint about that is expected and ignored.
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 10.0;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);

    double end = MPI_Wtime() + seconds;
    while (MPI_Wtime() < end) {
        int flag = 0;
        usleep(1000);
        MPI_Iprobe(MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    }

    MPI_Group failed, world;
    int n = 0;
    MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed);
    MPI_Group_size(failed, &n);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int *in = malloc(sizeof(int) * (n > 0 ? n : 1));
    int *out = malloc(sizeof(int) * (n > 0 ? n : 1));
    for (int i = 0; i < n; i++) {
        in[i] = i;
    }
    if (n > 0) {
        MPI_Group_translate_ranks(failed, n, in, world, out);
    }
    printf("ULFM rank %d failed %d", rank, n);
    for (int i = 0; i < n; i++) {
        printf(" %d", out[i]);
    }
    printf("\n");
    fflush(stdout);
    free(in);
    free(out);
    MPI_Group_free(&failed);
    MPI_Group_free(&world);
    MPI_Barrier(MPI_COMM_WORLD);
    _exit(0);
}
