/*
 * dropin_shmem: a plain OpenSHMEM program (no ffd code) for
 * tests/dropin.rs, run with the OpenSHMEM build of libffd_mpi.so
 * preloaded: PE --victim (default 2) raises SIGSTOP --after-ms after its
 * shmem_init while every other PE waits in shmem_barrier_all, which would
 * never return.
 *
 * Lines (one printf each, flushed):
 *   PE P: up, N PEs
 *   PE V: raising SIGSTOP at NS          (CLOCK_REALTIME ns)
 *   PE P: barrier passed
 */
#define _GNU_SOURCE
#include <shmem.h>
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

int main(int argc, char **argv) {
    int victim = 2, after_ms = 1500;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc)
            victim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--after-ms") == 0 && i + 1 < argc)
            after_ms = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--victim P] [--after-ms MS]\n", argv[0]);
            return 2;
        }
    }
    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    printf("PE %d: up, %d PEs\n", me, npes);
    fflush(stdout);
    if (me == victim) {
        struct timespec ts = {.tv_sec = after_ms / 1000, .tv_nsec = (long)(after_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
        printf("PE %d: raising SIGSTOP at %lld\n", me, (long long)realtime_ns());
        fflush(stdout);
        raise(SIGSTOP);
    }
    shmem_barrier_all();
    printf("PE %d: barrier passed\n", me);
    fflush(stdout);
    shmem_finalize();
    return 0;
}
