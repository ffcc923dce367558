/*
 * dropin_pingpong: a plain MPI program (no ffd code) for benches/dropin.py:
 * 8-byte ping-pong between ranks 0 and 1 of an N-rank job while the other
 * ranks sleep outside MPI (for the whole timed loop, then in an
 * MPI_Ibarrier tested every 10 ms), so that what slows the ping-pong is
 * what runs beside it: a failure detector (ULFM's threads, or ffd's under
 * libffd_mpi.so), not the other ranks.
 *
 * 1000 round trips warm up; then round trips in batches of --batch until
 * --seconds have passed (rank 0 decides; the stop travels in the message).
 * With --pin, ranks 0 and 1 pin their main thread to CPU 0 and CPU 1 after
 * MPI_Init (threads started before, a detector's, stay where they were).
 *
 * Prints one line from rank 0:
 *   pingpong: ROUNDTRIPS round trips in S s, MEAN us one way (mean), MEDIAN us (median batch)
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* MPI_Barrier without spinning: test, sleep 10 ms, again. */
static void quiet_barrier(void) {
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    int done = 0;
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 10000000};
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done)
        nanosleep(&tick, NULL);
}

int main(int argc, char **argv) {
    double seconds = 2.0;
    long batch = 1000;
    int pin = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pin") == 0)
            pin = 1;
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
            batch = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--seconds S] [--batch B] [--pin]\n", argv[0]);
            return 2;
        }
    }
    if (batch < 1 || seconds <= 0) {
        fprintf(stderr, "dropin_pingpong: --batch must be >= 1 and --seconds > 0\n");
        return 2;
    }
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        printf("dropin_pingpong: needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (pin && rank < 2) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(rank, &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) {
            printf("dropin_pingpong: rank %d cannot pin itself to CPU %d\n", rank, rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    quiet_barrier();
    if (rank < 2) {
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
        if (rank == 0) {
            qsort(per_batch, batches, sizeof *per_batch, compare);
            printf("pingpong: %ld round trips in %.3f s, %.4f us one way (mean), %.4f us (median batch)\n",
                   roundtrips, took, took / (2.0 * (double)roundtrips) * 1e6, batches ? per_batch[batches / 2] : 0.0);
            fflush(stdout);
        }
        free(per_batch);
    } else {
        /* Asleep through the warm-up and the timed loop. */
        double left = seconds + 1.0;
        struct timespec ts = {.tv_sec = (time_t)left, .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
    quiet_barrier();
    MPI_Finalize();
    return 0;
}
