/*
 * shmem_detect: an OpenSHMEM program that embeds ffd, as an OpenSHMEM
 * library would.
 *
 * Every PE starts ffd with its PE number as the rank and shmem_fcollect64
 * over symmetric memory as the out-of-band collective, registers an event
 * callback, and learns from PE 0 (shmem_broadcast64) when the victim PE (2
 * unless --victim says otherwise) is to raise SIGKILL. Each survivor then
 * waits on ffd's event fd for ffd's report of the victim, prints what it
 * learned and how long after the kill, prints its counters, finalizes ffd
 * and exits.
 *
 * Nothing in OpenSHMEM tells a PE that a peer died, so after the kill time
 * the survivors make no OpenSHMEM call: a PE in shmem_long_wait_until for
 * a word the dead PE was to put never returns, and with Open MPI 4.1.4's
 * spml ucx a put or atomic to a dead PE never completes (shmem_quiet spins
 * forever). An OpenSHMEM library looks at what ffd's callback recorded
 * before it waits on a peer, as mpi_detect's allreduce loop does. (A loop
 * of puts between the PEs that sleeps on ffd's event fd between
 * shmem_long_test polls, the analogue of that allreduce loop, does not
 * advance under this oshmem over UCX's shared-memory transports: a put or
 * atomic completes only once the target PE calls into OpenSHMEM, and
 * shmem_long_test does not count.)
 *
 * Build and run (docs/embedding.md, "OpenSHMEM"; tests/capi_shmem.rs runs
 * this job):
 *
 *   ci/pkgconfig
 *   oshcc examples/c/shmem_detect.c $(PKG_CONFIG_PATH=target/release pkg-config --cflags --libs ffd) \
 *         -o shmem_detect
 *   oshrun --enable-recovery --oversubscribe --bind-to none \
 *          --mca btl self,vader --mca oob_tcp_if_include lo -x UCX_TLS=self,sm \
 *          -x FFD_DOMAIN=lo -x FFD_CORE=none -np 4 ./shmem_detect
 *
 * --enable-recovery keeps oshrun (Open MPI's mpirun) from killing the whole
 * job when the victim dies; UCX_TLS=self,sm keeps OpenSHMEM's own traffic
 * in shared memory. The survivors skip shmem_finalize (they _exit after
 * ffd_finalize): it begins with a barrier of all PEs, which with Open MPI
 * 4.1.4 never completes once a PE is dead.
 *
 * Options: --victim P, --kill-after MS (default 1500: after every PE's
 * start-up grace), --wait MS (bound on the wait for the report, default
 * 10000).
 *
 * Lines (one printf each, mpi_detect's with "PE" for "rank";
 * tests/capi_shmem.rs reads them):
 *   PE P: ffd up, N PEs, oob shmem
 *   PE P: libfabric PATH                       (each libfabric.so loaded in the process)
 *   PE V: raising SIGKILL (L ms after the planned time)
 *   PE P: PE V failed: cause C, declared by PE D, H hops, epoch E, T ms after the kill
 *   PE P: ffd stopped: <why>   (only if ffd's own thread died; exits 1)
 *   PE P: stats: ...
 *   PE P: finalized ffd (success), exiting
 */
#define _GNU_SOURCE
#include <link.h>
#include <poll.h>
#include <shmem.h>
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

/* Symmetric (static data is symmetric in OpenSHMEM): the work arrays of the
 * OpenSHMEM 1.4 collectives, each set to SHMEM_SYNC_VALUE on every PE
 * before its first use, and the kill time's source and target. */
static long collect_psync[SHMEM_COLLECT_SYNC_SIZE];
static long bcast_psync[SHMEM_BCAST_SYNC_SIZE];
static int64_t kill_at_src, kill_at_sym;

/* The out-of-band allgather ffd needs at start: shmem_fcollect64 of
 * `len` bytes, padded to whole 8-byte words, through symmetric buffers
 * (shmem_malloc is collective, and ffd passes the same `len` on every PE).
 * shmem_malloc and shmem_free each include a barrier of all PEs, so every
 * PE has finished with collect_psync before the next call reuses it. */
static int shmem_allgather(void *userdata, const void *mine, size_t len, void *all) {
    int npes = *(const int *)userdata;
    size_t words = (len + 7) / 8;
    uint64_t *src = shmem_malloc(words * 8);
    uint64_t *dst = shmem_malloc(words * 8 * (size_t)npes);
    int rc = -1;
    if (src != NULL && dst != NULL) {
        memset(src, 0, words * 8);
        memcpy(src, mine, len);
        shmem_fcollect64(dst, src, words, 0, 0, npes, collect_psync);
        for (int pe = 0; pe < npes; pe++)
            memcpy((unsigned char *)all + (size_t)pe * len, dst + (size_t)pe * words, len);
        rc = 0;
    }
    shmem_free(dst);
    shmem_free(src);
    return rc;
}

/* When each PE's failure reached this process (CLOCK_REALTIME ns, 0 if
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

/* Prints every libfabric.so of the process: one, shared by Open MPI and ffd. */
static int print_libfabric(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "/libfabric.so"))
        printf("PE %d: libfabric %s\n", *(const int *)data, info->dlpi_name);
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

static void fail(int me, const char *what, int rc) {
    char msg[512];
    ffd_last_error_message(msg, sizeof msg, NULL);
    printf("PE %d: %s failed: %s: %s\n", me, what, ffd_strerror(rc), msg);
    fflush(stdout);
    shmem_global_exit(2);
}

int main(int argc, char **argv) {
    int victim = 2, kill_after_ms = 1500, wait_ms = 10000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc)
            victim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kill-after") == 0 && i + 1 < argc)
            kill_after_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--wait") == 0 && i + 1 < argc)
            wait_ms = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--victim P] [--kill-after MS] [--wait MS]\n", argv[0]);
            return 2;
        }
    }

    shmem_init();
    int me = shmem_my_pe(), npes = shmem_n_pes();
    job_size = npes;
    learned_at = calloc((size_t)npes, sizeof *learned_at);
    for (int i = 0; i < SHMEM_COLLECT_SYNC_SIZE; i++)
        collect_psync[i] = SHMEM_SYNC_VALUE;
    for (int i = 0; i < SHMEM_BCAST_SYNC_SIZE; i++)
        bcast_psync[i] = SHMEM_SYNC_VALUE;
    /* Every PE's work arrays are set before any PE uses them. */
    shmem_barrier_all();

    /* Settings from FFD_* (oshrun -x ...), and the callback, before init so
     * that no event is missed. */
    ffd_config_t *cfg = NULL;
    int rc = ffd_config_from_env(&cfg);
    if (rc != FFD_OK)
        fail(me, "ffd_config_from_env", rc);
    ffd_config_set_callback(cfg, on_event, NULL);

    /* ffd rank = PE number. */
    ffd_oob_t oob = {.rank = me, .size = npes, .allgather = shmem_allgather, .userdata = &npes};
    ffd_t *ffd = NULL;
    rc = ffd_init(&oob, cfg, &ffd);
    ffd_config_free(cfg);
    if (rc != FFD_OK)
        fail(me, "ffd_init", rc);
    printf("PE %d: ffd up, %d PEs, oob shmem\n", me, npes);
    fflush(stdout);

    dl_iterate_phdr(print_libfabric, &me);
    fflush(stdout);

    /* Everybody up: PE 0's clock sets the kill time. shmem_broadcast64
     * leaves the root's own target untouched. */
    int64_t kill_at = realtime_ns() + (int64_t)kill_after_ms * 1000000;
    kill_at_src = kill_at;
    shmem_broadcast64(&kill_at_sym, &kill_at_src, 1, 0, 0, 0, npes, bcast_psync);
    if (me != 0)
        kill_at = kill_at_sym;

    /* No OpenSHMEM call from here on. */
    int fd = ffd_event_fd(ffd);
    struct pollfd ffd_fd = {.fd = fd, .events = POLLIN};
    int64_t now;
    if (me == victim) {
        while ((now = realtime_ns()) < kill_at)
            poll(NULL, 0, (int)((kill_at - now) / 1000000) + 1);
        printf("PE %d: raising SIGKILL (%.1f ms after the planned time)\n", me, (now - kill_at) / 1e6);
        fflush(stdout);
        raise(SIGKILL);
    }

    /* The survivors: wait on ffd's event fd until it reports the victim. */
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
                printf("PE %d: ffd stopped: %s\n", me, why);
                status = 1;
                reported = 1; /* nothing more will come */
                break;
            }
            if (ev.kind != FFD_EVENT_FAILED)
                continue;
            int64_t at = atomic_load(&learned_at[ev.rank]);
            printf("PE %d: PE %u failed: cause %s, declared by PE %u, %u hops, epoch %llu, %.1f ms "
                   "after the kill\n",
                   me, ev.rank, cause_name(ev.cause), ev.detector, ev.hops, (unsigned long long)ev.epoch,
                   (at - kill_at) / 1e6);
            fflush(stdout);
            if (ev.rank == (uint32_t)victim)
                reported = 1;
        }
        if (reported)
            break;
        int64_t left_ms = (deadline - realtime_ns()) / 1000000;
        if (left_ms <= 0) {
            printf("PE %d: PE %d was not reported within %d ms of the kill\n", me, victim, wait_ms);
            status = 1;
            break;
        }
        poll(&ffd_fd, 1, left_ms > 1000 ? 1000 : (int)left_ms);
    }

    /* The counters are published every 50 ms: wait (bounded) until they
     * include the failures this PE knows of. */
    ffd_stats_t st;
    uint64_t epoch = 0;
    ffd_epoch(ffd, &epoch);
    int64_t stats_deadline = realtime_ns() + 1000000000;
    while ((rc = ffd_stats(ffd, &st)) == FFD_OK && st.epoch < epoch && realtime_ns() < stats_deadline)
        poll(NULL, 0, 10);
    if (rc == FFD_OK) {
        printf("PE %d: stats: epoch %llu, heartbeats %llu, notices sent %llu received %llu, "
               "detections timeout %llu inband %llu notice %llu, latest wake-up %.1f ms late\n",
               me, (unsigned long long)st.epoch, (unsigned long long)st.heartbeats_sent,
               (unsigned long long)st.notices_sent, (unsigned long long)st.notices_received,
               (unsigned long long)st.detections_timeout, (unsigned long long)st.detections_inband,
               (unsigned long long)st.detections_notice, st.wakeup_late_max_ns / 1e6);
    }
    rc = ffd_finalize(&ffd);
    printf("PE %d: finalized ffd (%s), exiting\n", me, ffd_strerror(rc));
    fflush(stdout);
    free(learned_at);
    _exit(status);
}
