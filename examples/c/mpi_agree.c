/*
 * mpi_agree: the survivors of a kill agree on who failed, as a recovering
 * MPI library would before it shrinks its communicator.
 *
 * Every rank starts ffd with MPI_Allgather over MPI_COMM_WORLD as the
 * out-of-band collective, then sums a counter with MPI_Iallreduce in a
 * loop, testing the request and ffd's epoch in turn. At a time all ranks
 * agreed on, the victim rank (3 unless --victim says otherwise) raises
 * SIGKILL. The survivors' allreduce can then never complete (Open MPI 4
 * without ULFM blocks on the dead peer), but ffd reports the failure, so
 * each survivor abandons the request and calls ffd_agree(): every survivor
 * gets the same flags (the AND of all of theirs: rank r clears bit r, so
 * the bits still set below the job size name the ranks that did not take
 * part), the same view id and the same failed set, and prints them. Then
 * it waits (bounded) for the view change naming the victim and prints it:
 * the same view everywhere too. A real library would now shrink its
 * communicator to the survivors, or restart.
 *
 * Build and run (docs/embedding.md, "Agreements and views"):
 *
 *   ci/pkgconfig
 *   mpicc examples/c/mpi_agree.c $(PKG_CONFIG_PATH=target/release pkg-config --cflags --libs ffd) \
 *         -o mpi_agree
 *   mpirun --enable-recovery --oversubscribe --bind-to none -np 6 \
 *          -x FFD_DOMAIN=lo -x FFD_CORE=none ./mpi_agree
 *
 * As in mpi_detect.c, the survivors skip MPI_Finalize (`_exit` after
 * ffd_finalize): MPI_Finalize with a dead peer can hang with Open MPI 4.
 *
 * Options: --victim R, --kill-after MS (default 1500: after every rank's
 * start-up grace), --wait MS (bound on the wait for the report, default
 * 10000).
 *
 * Lines (one printf each; tests/capi_mpi.rs reads them):
 *   rank R: ffd up, N ranks
 *   rank V: raising SIGKILL after I allreduces
 *   rank R: left the allreduce loop after I rounds: rank V failed (epoch E)
 *   rank R: agreed: flags 0x..., view V, failed [F, ...]
 *   rank R: view V: failed [F, ...]     (the latest view, ffd_view())
 *   rank R: finalized ffd, exiting
 */
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ffd.h>

static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The out-of-band allgather ffd needs at start: MPI_Allgather of bytes. */
static int mpi_allgather(void *userdata, const void *mine, size_t len, void *all) {
    MPI_Comm comm = *(MPI_Comm *)userdata;
    if (len > INT_MAX)
        return -1;
    return MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, comm);
}

static void fail(int rank, const char *what, int rc) {
    char msg[512];
    ffd_last_error_message(msg, sizeof msg, NULL);
    printf("rank %d: %s failed: %s: %s\n", rank, what, ffd_strerror(rc), msg);
    fflush(stdout);
    _exit(1);
}

/* "[3, 5]" into `out`. */
static void ranks_text(const uint32_t *ranks, size_t n, char *out, size_t cap) {
    size_t at = (size_t)snprintf(out, cap, "[");
    for (size_t i = 0; i < n && at < cap; i++)
        at += (size_t)snprintf(out + at, cap - at, i ? ", %u" : "%u", ranks[i]);
    if (at < cap)
        snprintf(out + at, cap - at, "]");
}

int main(int argc, char **argv) {
    int victim = 3, kill_after_ms = 1500, wait_ms = 10000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc)
            victim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kill-after") == 0 && i + 1 < argc)
            kill_after_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--wait") == 0 && i + 1 < argc)
            wait_ms = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--victim R] [--kill-after MS] [--wait MS]\n", argv[0]);
            return 2;
        }
    }

    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    ffd_config_t *cfg = NULL;
    int rc = ffd_config_from_env(&cfg);
    if (rc != FFD_OK)
        fail(rank, "ffd_config_from_env", rc);
    MPI_Comm world = MPI_COMM_WORLD;
    ffd_oob_t oob = {.rank = rank, .size = size, .allgather = mpi_allgather, .userdata = &world};
    ffd_t *ffd = NULL;
    rc = ffd_init(&oob, cfg, &ffd);
    ffd_config_free(cfg);
    if (rc != FFD_OK)
        fail(rank, "ffd_init", rc);
    printf("rank %d: ffd up, %d ranks\n", rank, size);
    fflush(stdout);

    int64_t kill_at = realtime_ns() + (int64_t)kill_after_ms * 1000000;
    MPI_Bcast(&kill_at, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    int64_t deadline = kill_at + (int64_t)wait_ms * 1000000;

    /* The application's loop: allreduce after allreduce, with an eye on
     * ffd between tests of the request. */
    long rounds = 0;
    uint64_t epoch = 0;
    for (;;) {
        if (rank == victim && realtime_ns() >= kill_at) {
            printf("rank %d: raising SIGKILL after %ld allreduces\n", rank, rounds);
            fflush(stdout);
            raise(SIGKILL);
        }
        long mine = 1, sum = 0;
        MPI_Request req;
        MPI_Iallreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &req);
        int done = 0;
        while (!done) {
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (done)
                break;
            if (ffd_epoch(ffd, &epoch) == FFD_OK && epoch > 0)
                break; /* a peer failed: this allreduce will never complete */
            if (realtime_ns() > deadline) {
                printf("rank %d: no failure reported within %d ms of the kill\n", rank, wait_ms);
                fflush(stdout);
                _exit(1);
            }
        }
        if (!done)
            break; /* the request is abandoned, as the job is */
        if (sum != size) {
            printf("rank %d: allreduce summed %ld, not %d\n", rank, sum, size);
            _exit(1);
        }
        rounds++;
    }
    uint32_t *failed = calloc((size_t)size, sizeof *failed);
    size_t n = 0;
    ffd_failed_ranks(ffd, failed, (size_t)size, &n);
    printf("rank %d: left the allreduce loop after %ld rounds: rank %u failed (epoch %llu)\n", rank, rounds,
           n > 0 ? failed[0] : 0u, (unsigned long long)epoch);
    fflush(stdout);

    /* Agree on who failed: every survivor calls it, and gets the same. */
    uint64_t flags = 0, view = 0;
    uint64_t mine = rank < 64 ? ~(1ull << rank) : ~0ull;
    rc = ffd_agree(ffd, mine, &flags, &view, failed, (size_t)size, &n);
    if (rc != FFD_OK)
        fail(rank, "ffd_agree", rc);
    char text[1024];
    ranks_text(failed, n, text, sizeof text);
    printf("rank %d: agreed: flags %#llx, view %llu, failed %s\n", rank, (unsigned long long)flags,
           (unsigned long long)view, text);
    /* The view change follows the failure within a few ms. */
    int64_t view_deadline = realtime_ns() + (int64_t)wait_ms * 1000000;
    while ((rc = ffd_view(ffd, &view, failed, (size_t)size, &n)) == FFD_OK && view == 0 &&
           realtime_ns() < view_deadline)
        poll(NULL, 0, 5);
    ranks_text(failed, n, text, sizeof text);
    printf("rank %d: view %llu: failed %s\n", rank, (unsigned long long)view, text);
    fflush(stdout);
    free(failed);

    rc = ffd_finalize(&ffd);
    printf("rank %d: finalized ffd (%s), exiting\n", rank, ffd_strerror(rc));
    fflush(stdout);
    _exit(0);
}
