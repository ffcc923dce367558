/*
 * mpi_pingpong: 8-byte MPI ping-pong between ranks 0 and 1, optionally with
 * ffd embedded in both (benches/noise_mpi.py: what a running detector costs
 * an MPI application's small messages).
 *
 * With --ffd each rank starts ffd through the C ABI exactly as an MPI
 * library would (settings from FFD_*, MPI_Allgather as the out-of-band
 * collective; see examples/c/mpi_detect.c) before the timed loop and
 * finalizes it after; without it libffd is linked but never called, so
 * both runs are the same program.
 *
 * The timed loop: rank 0 sends 8 bytes, rank 1 sends them back, in
 * batches of --batch round trips, until --seconds have passed (rank 0
 * decides; the stop travels in the message itself, so the loop holds
 * nothing but the ping-pong). 1000 round trips warm up first.
 *
 * Build and run (the script does this under each MPI):
 *
 *   mpicc -O2 benches/mpi_pingpong.c $(PKG_CONFIG_PATH=target/release pkg-config --cflags --libs ffd) \
 *         -o mpi_pingpong
 *   FFD_DOMAIN=lo FFD_PERIOD=1ms FFD_TIMEOUT=5ms mpirun -x FFD_DOMAIN -x FFD_PERIOD -x FFD_TIMEOUT \
 *         -np 2 ./mpi_pingpong --ffd --seconds 2
 *
 * Prints one line from rank 0:
 *   pingpong: ROUNDTRIPS round trips in S s, MEAN us one way (mean), MEDIAN us (median batch), ffd on|off, epoch E
 * E: the most failures either rank's ffd knew at the end (ffd_epoch); more
 * than 0 means a false report (nobody died), which stops the declared
 * rank's heartbeats and so changes what is measured.
 * and on failure one line saying what failed (exit status 1).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_ffd_mpi.h"

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int with_ffd = 0;
    double seconds = 2.0;
    long batch = 1000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ffd") == 0)
            with_ffd = 1;
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            batch = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--ffd] [--seconds S] [--batch B]\n", argv[0]);
            return 2;
        }
    }
    if (batch < 1 || seconds <= 0) {
        fprintf(stderr, "mpi_pingpong: --batch must be >= 1 and --seconds > 0\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            printf("mpi_pingpong: needs exactly 2 ranks, not %d\n", size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    ffd_t *ffd = NULL;
    if (with_ffd)
        ffd = bench_ffd_start(rank, size);

    int64_t msg = 0;
    int peer = 1 - rank;
    for (int i = 0; i < 1000; i++) { /* warm-up */
        if (rank == 0) {
            MPI_Send(&msg, 1, MPI_INT64_T, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(&msg, 1, MPI_INT64_T, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&msg, 1, MPI_INT64_T, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&msg, 1, MPI_INT64_T, peer, 0, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* msg = 1: go on; 0: the last round trip. */
    size_t cap = 1 << 16, batches = 0;
    double *per_batch = malloc(cap * sizeof *per_batch);
    long roundtrips = 0;
    double start = MPI_Wtime(), batch_start = start;
    msg = 1;
    while (msg == 1) {
        if (rank == 0) {
            if (roundtrips > 0 && roundtrips % batch == 0) {
                double now = MPI_Wtime();
                if (batches < cap)
                    per_batch[batches++] = (now - batch_start) / (2.0 * (double)batch) * 1e6;
                batch_start = now;
                if (now - start >= seconds)
                    msg = 0;
            }
            MPI_Send(&msg, 1, MPI_INT64_T, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(&msg, 1, MPI_INT64_T, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&msg, 1, MPI_INT64_T, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&msg, 1, MPI_INT64_T, peer, 0, MPI_COMM_WORLD);
        }
        roundtrips++;
    }
    double took = MPI_Wtime() - start;
    uint64_t epoch = 0, most = 0;
    if (ffd)
        ffd_epoch(ffd, &epoch);
    MPI_Reduce(&epoch, &most, 1, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(per_batch, batches, sizeof *per_batch, compare);
        double med = batches ? per_batch[batches / 2] : 0.0;
        printf("pingpong: %ld round trips in %.3f s, %.4f us one way (mean), %.4f us (median batch), ffd %s, "
               "epoch %llu\n",
               roundtrips, took, took / (2.0 * (double)roundtrips) * 1e6, med, with_ffd ? "on" : "off",
               (unsigned long long)most);
        fflush(stdout);
    }
    free(per_batch);
    if (ffd) {
        int rc = ffd_finalize(&ffd);
        if (rc != FFD_OK)
            bench_fail(rank, "ffd_finalize", rc);
    }
    MPI_Finalize();
    return 0;
}
