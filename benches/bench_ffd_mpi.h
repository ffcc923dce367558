/*
 * bench_ffd_mpi.h: what the MPI benchmarks that embed ffd share (header
 * only, included by benches/mpi_pingpong.c and benches/agreement_onejob.c):
 * ffd started the way an MPI library would, with MPI_Allgather over
 * MPI_COMM_WORLD as its out-of-band collective, and a failed call
 * reported on one line before the job is aborted.
 */
#ifndef FFD_BENCH_FFD_MPI_H
#define FFD_BENCH_FFD_MPI_H

#include <limits.h>
#include <mpi.h>
#include <stdio.h>

#include <ffd.h>

/* The out-of-band allgather ffd needs at start: MPI_Allgather of bytes. */
static int bench_mpi_allgather(void *userdata, const void *mine, size_t len, void *all) {
    MPI_Comm comm = *(MPI_Comm *)userdata;
    if (len > INT_MAX)
        return -1;
    return MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, comm);
}

/* "rank R: WHAT failed: ERROR: MESSAGE", then the job ends. */
static void bench_fail(int rank, const char *what, int rc) {
    char msg[512];
    ffd_last_error_message(msg, sizeof msg, NULL);
    printf("rank %d: %s failed: %s: %s\n", rank, what, ffd_strerror(rc), msg);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ffd started from the FFD_* variables on every rank of MPI_COMM_WORLD (a
 * collective); a failure ends the job. */
static ffd_t *bench_ffd_start(int rank, int size) {
    ffd_config_t *cfg = NULL;
    int rc = ffd_config_from_env(&cfg);
    if (rc != FFD_OK)
        bench_fail(rank, "ffd_config_from_env", rc);
    static MPI_Comm world;
    world = MPI_COMM_WORLD;
    ffd_oob_t oob = {.rank = rank, .size = size, .allgather = bench_mpi_allgather, .userdata = &world};
    ffd_t *ffd = NULL;
    rc = ffd_init(&oob, cfg, &ffd);
    ffd_config_free(cfg);
    if (rc != FFD_OK)
        bench_fail(rank, "ffd_init", rc);
    return ffd;
}

#endif
