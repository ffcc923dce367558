/*
 * mpi_detect: an MPI program that embeds ffd, as an MPI library would.
 *
 * Every rank starts ffd with MPI_Allgather over MPI_COMM_WORLD as the
 * out-of-band collective (or, with --pmix, with no collective at all: ffd
 * then uses the launcher's PMIx server), registers an event callback, and
 * agrees with the others on a kill time. At that time the victim rank
 * (3 unless --victim says otherwise) raises SIGKILL. Every survivor waits
 * on ffd's event fd until ffd reports the victim, prints what it learned
 * and how long after the kill, prints its counters, finalizes ffd and exits.
 *
 * Build and run (the README, "Embedding ffd in an MPI or OpenSHMEM library"):
 *
 *   ci/pkgconfig --features pmix
 *   mpicc examples/c/mpi_detect.c $(PKG_CONFIG_PATH=target/release pkg-config --cflags --libs ffd) \
 *         -o mpi_detect
 *   mpirun --enable-recovery --oversubscribe --bind-to none -np 6 \
 *          -x FFD_DOMAIN=lo -x FFD_CORE=none ./mpi_detect
 *
 * --enable-recovery keeps Open MPI from killing the whole job when the victim
 * dies. The survivors then skip MPI_Finalize (they _exit after ffd_finalize):
 * with Open MPI 4.1.4, MPI_Finalize with a dead peer hung in about one run in
 * six here, and ffd's job is done by then. --mpi-finalize calls it anyway.
 *
 * Options: --pmix, --victim R, --kill-after MS (default 1500: after every
 * rank's start-up grace), --wait MS (bound on the wait for the report,
 * default 10000), --mpi-finalize.
 *
 * Lines (one printf each; the test of tests/capi_mpi.rs reads them):
 *   rank R: ffd up, N ranks, oob mpi|pmix
 *   rank V: raising SIGKILL (L ms after the planned time)
 *   rank R: rank V failed: cause C, declared by rank D, H hops, epoch E, T ms after the kill
 *   rank R: ffd stopped: <why>   (only if ffd's own thread died; exits 1)
 *   rank R: stats: ...
 *   rank R: finalized ffd, exiting
 */
#define _GNU_SOURCE
#include <limits.h>
#include <mpi.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
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

/* When each rank's failure reached this process (CLOCK_REALTIME ns, 0 if
 * not yet), written by the callback on ffd's progress thread. */
static _Atomic int64_t *learned_at;
static int job_size;

/* The event callback: runs on ffd's progress thread, so it only records. */
static void on_event(void *userdata, const ffd_event_t *ev) {
    (void)userdata;
    if (ev->kind == FFD_EVENT_FAILED && ev->rank < (uint32_t)job_size)
        atomic_store(&learned_at[ev->rank], realtime_ns());
}

static const char *cause_name(ffd_cause c) {
    switch (c) {
    case FFD_CAUSE_TIMEOUT:
        return "timeout";
    case FFD_CAUSE_INBAND:
        return "inband";
    case FFD_CAUSE_NOTICE:
        return "notice";
    default:
        return "none";
    }
}

static void fail(int rank, const char *what, int rc) {
    char msg[512];
    ffd_last_error_message(msg, sizeof msg, NULL);
    printf("rank %d: %s failed: %s: %s\n", rank, what, ffd_strerror(rc), msg);
    fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv) {
    int use_pmix = 0, victim = 3, kill_after_ms = 1500, wait_ms = 10000, mpi_finalize = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pmix") == 0)
            use_pmix = 1;
        else if (strcmp(argv[i], "--mpi-finalize") == 0)
            mpi_finalize = 1;
        else if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc)
            victim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kill-after") == 0 && i + 1 < argc)
            kill_after_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--wait") == 0 && i + 1 < argc)
            wait_ms = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--pmix] [--victim R] [--kill-after MS] [--wait MS] [--mpi-finalize]\n",
                    argv[0]);
            return 2;
        }
    }

    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    job_size = size;
    learned_at = calloc((size_t)size, sizeof *learned_at);

    /* Settings from FFD_* (mpirun -x ...), and the callback, before init so
     * that no event is missed. */
    ffd_config_t *cfg = NULL;
    int rc = ffd_config_from_env(&cfg);
    if (rc != FFD_OK)
        fail(rank, "ffd_config_from_env", rc);
    ffd_config_set_callback(cfg, on_event, NULL);

    /* ffd rank = MPI_COMM_WORLD rank. */
    MPI_Comm world = MPI_COMM_WORLD;
    ffd_oob_t oob = {.rank = rank, .size = size, .allgather = mpi_allgather, .userdata = &world};
    ffd_t *ffd = NULL;
    rc = ffd_init(use_pmix ? NULL : &oob, cfg, &ffd);
    ffd_config_free(cfg);
    if (rc != FFD_OK)
        fail(rank, "ffd_init", rc);
    printf("rank %d: ffd up, %d ranks, oob %s\n", rank, size, use_pmix ? "pmix" : "mpi");
    fflush(stdout);

    /* Everybody up: agree on the kill time. */
    int64_t kill_at = realtime_ns() + (int64_t)kill_after_ms * 1000000;
    MPI_Bcast(&kill_at, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    /* No MPI call from here on (but the optional MPI_Finalize). */

    if (rank == victim) {
        struct timespec at = {.tv_sec = kill_at / 1000000000, .tv_nsec = kill_at % 1000000000};
        while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &at, NULL) != 0)
            ;
        printf("rank %d: raising SIGKILL (%.1f ms after the planned time)\n", rank,
               (realtime_ns() - kill_at) / 1e6);
        fflush(stdout);
        raise(SIGKILL);
    }

    /* Survivors: sleep on ffd's event fd until it reports the victim. */
    int fd = ffd_event_fd(ffd);
    int64_t deadline = kill_at + (int64_t)wait_ms * 1000000;
    int reported = 0, status = 0;
    static unsigned char payload[FFD_MAX_PAYLOAD]; /* any event's payload fits */
    while (!reported) {
        ffd_event_t ev;
        while ((rc = ffd_next_event(ffd, &ev, payload, sizeof payload)) == FFD_OK) {
            if (ev.kind == FFD_EVENT_STOPPED) {
                char why[256];
                ffd_state_t state;
                ffd_state(ffd, &state, why, sizeof why, NULL);
                printf("rank %d: ffd stopped: %s\n", rank, why);
                status = 1;
                reported = 1; /* nothing more will come */
                break;
            }
            if (ev.kind != FFD_EVENT_FAILED)
                continue;
            int64_t at = atomic_load(&learned_at[ev.rank]);
            printf("rank %d: rank %u failed: cause %s, declared by rank %u, %u hops, epoch %llu, %.1f ms "
                   "after the kill\n",
                   rank, ev.rank, cause_name(ev.cause), ev.detector, ev.hops, (unsigned long long)ev.epoch,
                   (at - kill_at) / 1e6);
            fflush(stdout);
            if (ev.rank == (uint32_t)victim)
                reported = 1;
        }
        if (reported)
            break;
        int64_t left_ms = (deadline - realtime_ns()) / 1000000;
        if (left_ms <= 0) {
            printf("rank %d: rank %d was not reported within %d ms of the kill\n", rank, victim, wait_ms);
            status = 1;
            break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms);
    }

    /* The counters are published every 50 ms: wait (bounded) until they
     * include the failures this rank knows of. */
    ffd_stats_t st;
    uint64_t epoch = 0;
    ffd_epoch(ffd, &epoch);
    int64_t stats_deadline = realtime_ns() + 1000000000;
    while ((rc = ffd_stats(ffd, &st)) == FFD_OK && st.epoch < epoch && realtime_ns() < stats_deadline)
        poll(NULL, 0, 10);
    if (rc == FFD_OK) {
        printf("rank %d: stats: epoch %llu, heartbeats %llu, notices sent %llu received %llu, "
               "detections timeout %llu inband %llu notice %llu, latest wake-up %.1f ms late\n",
               rank, (unsigned long long)st.epoch, (unsigned long long)st.heartbeats_sent,
               (unsigned long long)st.notices_sent, (unsigned long long)st.notices_received,
               (unsigned long long)st.detections_timeout, (unsigned long long)st.detections_inband,
               (unsigned long long)st.detections_notice, st.wakeup_late_max_ns / 1e6);
    }
    rc = ffd_finalize(&ffd);
    printf("rank %d: finalized ffd (%s), exiting\n", rank, ffd_strerror(rc));
    fflush(stdout);
    free(learned_at);
    if (mpi_finalize)
        MPI_Finalize();
    _exit(status);
}
