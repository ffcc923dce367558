/*
 * dropin_hang: a plain MPI program (no ffd code) for tests/dropin.rs, run
 * with libffd_mpi.so preloaded under any MPI: one rank hangs (SIGSTOP)
 * while the others wait for it in MPI_Barrier, which without a failure
 * detector would hang the whole job until its wall-clock limit.
 *
 * Rank 0 gathers every rank's pid and broadcasts a time (--after-ms after
 * the broadcast) at which rank --victim (default 2) raises SIGSTOP. With
 * --resume-after-ms MS, rank 0 sends it SIGCONT MS after that time (the
 * job then completes: what FFD_MPI_ON_FAILURE=report must allow); without,
 * nobody does. Then every rank enters MPI_Barrier and calls MPI_Finalize.
 *
 * Lines (one printf each, flushed; tests/dropin.rs reads them):
 *   rank R: up, pid P, N ranks
 *   rank V: raising SIGSTOP at NS              (CLOCK_REALTIME ns)
 *   rank V: continued
 *   rank 0: sent SIGCONT to rank V
 *   rank R: barrier passed
 *   rank R: finalized
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until(int64_t at) {
    for (int64_t left; (left = at - realtime_ns()) > 0;) {
        struct timespec ts = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv) {
    int victim = 2, after_ms = 1500, resume_after_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc)
            victim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--after-ms") == 0 && i + 1 < argc)
            after_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--resume-after-ms") == 0 && i + 1 < argc)
            resume_after_ms = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--victim R] [--after-ms MS] [--resume-after-ms MS]\n", argv[0]);
            return 2;
        }
    }
    MPI_Init(&argc, &argv);
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (victim <= 0 || victim >= size) {
        if (me == 0)
            fprintf(stderr, "dropin_hang: --victim must be a rank in 1..%d\n", size - 1);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int pid = (int)getpid();
    int *pids = malloc(sizeof(int) * (size_t)size);
    MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
    printf("rank %d: up, pid %d, %d ranks\n", me, pid, size);
    fflush(stdout);

    int64_t at = realtime_ns() + (int64_t)after_ms * 1000000;
    MPI_Bcast(&at, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (me == victim) {
        sleep_until(at);
        printf("rank %d: raising SIGSTOP at %lld\n", me, (long long)realtime_ns());
        fflush(stdout);
        raise(SIGSTOP);
        printf("rank %d: continued\n", me);
        fflush(stdout);
    } else if (me == 0 && resume_after_ms > 0) {
        sleep_until(at + (int64_t)resume_after_ms * 1000000);
        kill(pids[victim], SIGCONT);
        printf("rank 0: sent SIGCONT to rank %d\n", victim);
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d: barrier passed\n", me);
    fflush(stdout);
    free(pids);
    MPI_Finalize();
    printf("rank %d: finalized\n", me);
    fflush(stdout);
    return 0;
}
