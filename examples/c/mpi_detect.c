/*
 * mpi_detect: an MPI program that embeds ffd, as an MPI library would.
 *
 * Every rank starts ffd with MPI_Allgather over MPI_COMM_WORLD as the
 * out-of-band collective (or, with --pmix, with no collective at all: ffd
 * then uses the launcher's PMIx server), registers an event callback, and
 * agrees with the others on a kill time. Then every rank loops in
 * MPI_Allreduce over MPI_COMM_WORLD, and at that time the victim rank (3
 * unless --victim says otherwise) raises SIGKILL in the middle of a round.
 *
 * The allreduce is MPI_Iallreduce completed by polling MPI_Test, with a
 * 1 ms sleep on ffd's event fd between polls: a rank stuck in a blocking
 * MPI_Allreduce with a dead peer may never return (without ULFM, nothing in
 * MPI tells it), whereas this loop, like an MPI library's progress engine,
 * looks at what ffd's callback recorded and leaves the collective as soon as
 * ffd reports a failure. The survivors then go on without MPI: each waits
 * for ffd's report of the victim, prints what it learned and how long after
 * the kill, prints its counters, finalizes ffd and exits.
 *
 * Build and run (docs/embedding.md, "The example, for real"):
 *
 *   ci/pkgconfig --features pmix
 *   mpicc examples/c/mpi_detect.c $(PKG_CONFIG_PATH=target/release pkg-config --cflags --libs ffd) \
 *         -o mpi_detect
 *   mpirun --enable-recovery --oversubscribe --bind-to none -np 6 \
 *          -x FFD_DOMAIN=lo -x FFD_CORE=none ./mpi_detect
 *
 * --enable-recovery keeps Open MPI from killing the whole job when the victim
 * dies (MPICH: mpiexec -disable-auto-cleanup, see tests/capi_mpich.rs). The
 * survivors skip MPI_Finalize (they _exit after ffd_finalize): their last
 * allreduce never completes, and with Open MPI 4.1.4 MPI_Finalize with a dead
 * peer hung in about one run in six here. --mpi-finalize calls it anyway.
 *
 * Options: --pmix, --victim R, --kill-after MS (default 1500: after every
 * rank's start-up grace), --wait MS (bound on the wait for the report,
 * default 10000), --mpi-finalize.
 *
 * Lines (one printf each; tests/capi_support/mpi.rs reads them):
 *   rank R: ffd up, N ranks, oob mpi|pmix
 *   rank R: libfabric PATH                     (each libfabric.so loaded in the process)
 *   rank V: raising SIGKILL in MPI_Allreduce round K (L ms after the planned time)
 *   rank R: left MPI_Allreduce after K rounds: ffd reported a failure (T ms after the kill)
 *   rank R: left MPI_Allreduce after K rounds: MPI_Test returned: TEXT
 *   rank R: rank V failed: cause C, declared by rank D, H hops, epoch E, T ms after the kill
 *   rank R: ffd stopped: <why>   (only if ffd's own thread died; exits 1)
 *   rank R: stats: ...
 *   rank R: finalized ffd (success), exiting
 */
#define _GNU_SOURCE
#include <limits.h>
#include <link.h>
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
 * not yet), and the first failure of all, written by the callback on ffd's
 * progress thread. */
static _Atomic int64_t *learned_at;
static _Atomic int64_t first_failure_at;
static int job_size;

/* The event callback: runs on ffd's progress thread, so it only records. */
static void on_event(void *userdata, const ffd_event_t *ev) {
    (void)userdata;
    if (ev->kind == FFD_EVENT_FAILED && ev->rank < (uint32_t)job_size) {
        int64_t now = realtime_ns();
        atomic_store(&learned_at[ev->rank], now);
        int64_t none = 0;
        atomic_compare_exchange_strong(&first_failure_at, &none, now);
    }
}

/* Prints every libfabric.so of the process: one, shared by MPI and ffd. */
static int print_libfabric(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "/libfabric.so"))
        printf("rank %d: libfabric %s\n", *(const int *)data, info->dlpi_name);
    return 0;
}

static const char *cause_name(ffd_cause c) {
    switch (c) {
    case FFD_CAUSE_TIMEOUT:
        return "timeout";
    case FFD_CAUSE_INBAND:
        return "inband";
    case FFD_CAUSE_NOTICE:
        return "notice";
    case FFD_CAUSE_EXITED:
        return "exited";
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

    dl_iterate_phdr(print_libfabric, &rank);
    fflush(stdout);

    /* Everybody up: agree on the kill time. */
    int64_t kill_at = realtime_ns() + (int64_t)kill_after_ms * 1000000;
    MPI_Bcast(&kill_at, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* Every rank: MPI_Allreduce rounds until ffd reports a failure (or the
     * deadline passes); the victim dies in one of them. */
    int fd = ffd_event_fd(ffd);
    struct pollfd ffd_fd = {.fd = fd, .events = POLLIN};
    int64_t deadline = kill_at + (int64_t)wait_ms * 1000000;
    long rounds = 0;
    int mpi_rc = MPI_SUCCESS, status = 0;
    while (atomic_load(&first_failure_at) == 0 && mpi_rc == MPI_SUCCESS && realtime_ns() < deadline) {
        long one = 1, sum = 0;
        MPI_Request req;
        int done = 0;
        mpi_rc = MPI_Iallreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &req);
        while (mpi_rc == MPI_SUCCESS && !done) {
            if (rank == victim && realtime_ns() >= kill_at) {
                printf("rank %d: raising SIGKILL in MPI_Allreduce round %ld (%.1f ms after the planned time)\n",
                       rank, rounds + 1, (realtime_ns() - kill_at) / 1e6);
                fflush(stdout);
                raise(SIGKILL);
            }
            /* ffd said a rank died: stop calling collectives on this
             * communicator (the pending request is abandoned). */
            if (atomic_load(&first_failure_at) != 0 || realtime_ns() >= deadline)
                break;
            mpi_rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (mpi_rc == MPI_SUCCESS && !done)
                poll(&ffd_fd, 1, 1);
        }
        if (done) {
            rounds++;
            if (sum != size) {
                printf("rank %d: MPI_Allreduce round %ld summed %ld, not %d\n", rank, rounds, sum, size);
                status = 1;
            }
        }
    }
    if (mpi_rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(mpi_rc, text, &len);
        printf("rank %d: left MPI_Allreduce after %ld rounds: MPI_Test returned: %s\n", rank, rounds, text);
    } else if (atomic_load(&first_failure_at) != 0) {
        printf("rank %d: left MPI_Allreduce after %ld rounds: ffd reported a failure (%.1f ms after the kill)\n",
               rank, rounds, (atomic_load(&first_failure_at) - kill_at) / 1e6);
    }
    fflush(stdout);
    /* No MPI call from here on (but the optional MPI_Finalize). */

    /* Survivors go on: wait on ffd's event fd until it reports the victim. */
    int reported = 0;
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
        poll(&ffd_fd, 1, left_ms > 1000 ? 1000 : (int)left_ms);
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
