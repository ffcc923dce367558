/*
 * Every function of the ffd C API, called from C as a host would, against
 * include/ffd.h and libffd (tests/capi.rs builds it twice, against
 * libffd.so and libffd.a, and runs both under valgrind).
 *
 * Part 1 checks argument handling and result codes: NULL handles and
 * outputs, bad settings (the message names the variable, the value and the
 * accepted form), a failing host allgather, double finalize.
 * Part 2 runs a job of RANKS threads standing in for ranks, whose address
 * exchange is an allgather over a shared buffer (what MPI_Allgather does
 * for an MPI library): start, queries, a broadcast seen by the callback and
 * by the queue of every rank, its origin's too (copied into the caller's
 * buffer, or waiting for a large enough one), agreements
 * (ffd_iagree()/ffd_agree_test(), ffd_agree()), a clean departure and the
 * view naming it (FFD_EVENT_VIEW, ffd_view(), an agreement of the others
 * then naming it), finalize.
 * Part 3 runs another such job in which rank 0's callback blocks: its
 * ffd_finalize() must wait for the callback to return, no callback may run
 * after it (the callback's userdata is freed right after it returns, so
 * valgrind would see a late call), and the others see a departure.
 * Part 4 forks a process holding a one-rank detector: in the child every
 * call on the parent's handle returns FFD_ERR_FORKED and ffd_finalize()
 * frees the copy within 5 s (the parent kills a child that takes longer);
 * the parent's detector then still answers, delivers a broadcast and
 * finalizes.
 *
 * Prints "ok <line>: <check>" per check and "not ok ..." with ffd's last
 * message on failure; ends with "capi_test: all N checks passed" (exit 0)
 * or "capi_test: N of M checks failed" (exit 1). Every wait is bounded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ffd.h>

/* Part 4's child asks valgrind for its error count and turns its leak
 * check off (both no-ops when not under valgrind, or without its header). */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef VALGRIND_COUNT_ERRORS
#define VALGRIND_COUNT_ERRORS 0u
#define VALGRIND_CLO_CHANGE(option)
#endif

#define RANKS 3
#define WAIT_MS 20000 /* bound on every wait for an event or a barrier */

static atomic_int passed, failed;

static const char *last_error(void) {
    static _Thread_local char buf[1024];
    size_t n = 0;
    if (ffd_last_error_message(buf, sizeof buf, &n) != FFD_OK)
        return "(ffd_last_error_message failed)";
    return buf;
}

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (cond) {                                                                     \
            atomic_fetch_add(&passed, 1);                                               \
            printf("ok %d: %s\n", __LINE__, #cond);                                     \
        } else {                                                                        \
            atomic_fetch_add(&failed, 1);                                               \
            printf("not ok %d: %s (last error: %s)\n", __LINE__, #cond, last_error()); \
        }                                                                               \
        fflush(stdout);                                                                 \
    } while (0)

static int contains(const char *haystack, const char *needle) {
    return strstr(haystack, needle) != NULL;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A barrier whose wait gives up after WAIT_MS (returns -1), so that one
 * failed rank cannot hang the others. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, count;
    unsigned generation;
} barrier_t;

static int barrier_wait(barrier_t *b) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&b->mu);
    unsigned gen = b->generation;
    if (++b->count == b->n) {
        b->count = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        return 0;
    }
    int rc = 0;
    while (b->generation == gen && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&b->cv, &b->mu, &until);
    int ok = b->generation != gen;
    pthread_mutex_unlock(&b->mu);
    return ok ? 0 : -1;
}

static barrier_t barrier = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, RANKS, 0, 0};

/* The shared buffer of the in-process allgather. */
static unsigned char *slots[RANKS];
static size_t slot_len[RANKS];

typedef struct {
    int rank;
    atomic_int payloads, lefts, views, agreed, others;
    char payload[64];
    size_t payload_len;
} rank_ctx_t;

static rank_ctx_t ctx[RANKS];

static int shared_allgather(void *userdata, const void *mine, size_t len, void *all) {
    rank_ctx_t *me = userdata;
    if (barrier_wait(&barrier) != 0) /* everybody has read the last round */
        return 2;
    free(slots[me->rank]);
    slots[me->rank] = malloc(len ? len : 1);
    memcpy(slots[me->rank], mine, len);
    slot_len[me->rank] = len;
    if (barrier_wait(&barrier) != 0)
        return 2;
    for (int r = 0; r < RANKS; r++) {
        if (slot_len[r] != len)
            return 1;
        memcpy((unsigned char *)all + (size_t)r * len, slots[r], len);
    }
    return 0;
}

static int allgather_calls;

static int failing_allgather(void *userdata, const void *mine, size_t len, void *all) {
    (void)userdata, (void)mine, (void)len, (void)all;
    allgather_calls++;
    return 5;
}

/* Runs on the progress thread: count, copy, return at once. */
static void on_event(void *userdata, const ffd_event_t *ev) {
    rank_ctx_t *me = userdata;
    switch (ev->kind) {
    case FFD_EVENT_PAYLOAD:
        if (ev->payload_len <= sizeof me->payload) {
            memcpy(me->payload, ev->payload, ev->payload_len);
            me->payload_len = ev->payload_len;
        }
        atomic_fetch_add(&me->payloads, 1);
        break;
    case FFD_EVENT_LEFT:
        atomic_fetch_add(&me->lefts, 1);
        break;
    case FFD_EVENT_VIEW:
        atomic_fetch_add(&me->views, 1);
        break;
    case FFD_EVENT_AGREED:
        atomic_fetch_add(&me->agreed, 1);
        break;
    default:
        atomic_fetch_add(&me->others, 1);
    }
}

/* Waits (bounded, on the event fd) for an event of `kind` about `rank`,
 * its payload copied into `buf` (`cap` bytes). Returns 0 when it came, 1
 * when its payload needs a larger buffer (`out` describes it; it stays
 * queued), -1 otherwise. */
static int wait_event(const ffd_t *h, ffd_event_kind kind, uint32_t rank, ffd_event_t *out, void *buf,
                      size_t cap) {
    long long deadline = now_ms() + WAIT_MS;
    int fd = ffd_event_fd(h);
    if (fd < 0)
        return -1;
    for (;;) {
        ffd_event_t ev;
        int rc;
        while ((rc = ffd_next_event(h, &ev, buf, cap)) == FFD_OK || rc == FFD_BUFFER_TOO_SMALL) {
            if (ev.kind == kind && ev.rank == rank) {
                *out = ev;
                return rc == FFD_OK ? 0 : 1;
            }
            if (rc == FFD_BUFFER_TOO_SMALL)
                return -1;
        }
        if (rc != FFD_NO_EVENT)
            return -1;
        long long left = deadline - now_ms();
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, left > 1000 ? 1000 : (int)left);
    }
}

static ffd_config_t *job_config(uint64_t timeout_ns, ffd_event_callback cb, void *userdata) {
    ffd_config_t *cfg = NULL;
    CHECK(ffd_config_new(&cfg) == FFD_OK && cfg != NULL);
    /* Loopback only; generous timings: valgrind slows every thread down. */
    CHECK(ffd_config_set(cfg, "FFD_PROVIDER", "tcp") == FFD_OK);
    CHECK(ffd_config_set(cfg, "FFD_DOMAIN", "lo") == FFD_OK);
    CHECK(ffd_config_set(cfg, "FFD_CORE", "none") == FFD_OK);
    CHECK(ffd_config_set(cfg, "FFD_LOG", "error") == FFD_OK);
    CHECK(ffd_config_set(cfg, "FFD_STARTUP_GRACE", "2s") == FFD_OK);
    /* Threads of one process stand in for the ranks (one pid, one host):
       every rank on the fabric ring, as the checks below expect. */
    CHECK(ffd_config_set(cfg, "FFD_LOCAL", "off") == FFD_OK);
    CHECK(ffd_config_set_period_ns(cfg, 50 * 1000 * 1000) == FFD_OK);
    CHECK(ffd_config_set_timeout_ns(cfg, timeout_ns) == FFD_OK);
    CHECK(ffd_config_set_callback(cfg, cb, userdata) == FFD_OK);
    return cfg;
}

static void *rank_main(void *arg) {
    rank_ctx_t *me = arg;
    ffd_config_t *cfg = job_config(5ull * 1000 * 1000 * 1000, on_event, me);
    ffd_oob_t oob = {.rank = me->rank, .size = RANKS, .allgather = shared_allgather, .userdata = me};
    ffd_t *h = NULL;
    int rc = ffd_init(&oob, cfg, &h);
    CHECK(rc == FFD_OK && h != NULL);
    ffd_config_free(cfg); /* init copied what it needs */
    if (rc != FFD_OK)
        return NULL;

    uint32_t rank = 99, size = 99;
    CHECK(ffd_rank_size(h, &rank, &size) == FFD_OK && rank == (uint32_t)me->rank && size == RANKS);
    CHECK(ffd_rank_size(h, NULL, NULL) == FFD_OK);
    for (uint32_t r = 0; r < RANKS; r++)
        CHECK(ffd_is_alive(h, r) == 1);
    CHECK(ffd_is_alive(h, RANKS) == 0);
    CHECK(ffd_is_excluded(h) == 0);
    uint64_t epoch = 99;
    CHECK(ffd_epoch(h, &epoch) == FFD_OK && epoch == 0);
    CHECK(ffd_epoch(h, NULL) == FFD_ERR_NULL);
    size_t n = 99;
    CHECK(ffd_failed_ranks(h, NULL, 0, &n) == FFD_OK && n == 0);
    CHECK(ffd_failed_ranks(h, NULL, 4, &n) == FFD_ERR_NULL);
    CHECK(ffd_failed_ranks(h, NULL, 0, NULL) == FFD_ERR_NULL);
    CHECK(ffd_event_fd(h) >= 0);
    ffd_event_t ev;
    unsigned char buf[FFD_MAX_PAYLOAD];
    CHECK(ffd_next_event(h, NULL, buf, sizeof buf) == FFD_ERR_NULL);
    CHECK(ffd_next_event(h, &ev, NULL, 8) == FFD_ERR_NULL);
    ffd_state_t state = {.state = FFD_STATE_STOPPED, .excluded_by = 7};
    char reason[64] = "x";
    n = 99;
    CHECK(ffd_state(h, &state, reason, sizeof reason, &n) == FFD_OK && state.state == FFD_STATE_RUNNING &&
          state.stop_cause == FFD_STOP_NONE && state.excluded_by == 0 && reason[0] == 0 && n == 0);
    CHECK(ffd_state(h, NULL, NULL, 0, NULL) == FFD_ERR_NULL);

    /* Heartbeats flow: bounded wait for the first published counters. */
    ffd_stats_t st;
    memset(&st, 0, sizeof st);
    long long deadline = now_ms() + WAIT_MS;
    while (ffd_stats(h, &st) == FFD_OK && st.heartbeats_sent == 0 && now_ms() < deadline)
        poll(NULL, 0, 20);
    CHECK(st.heartbeats_sent > 0 && st.uptime_ns > 0 && st.epoch == 0 && st.pinned_cpu == -1);
    CHECK(ffd_stats(h, NULL) == FFD_ERR_NULL);
    CHECK(barrier_wait(&barrier) == 0);

    /* A broadcast from rank 0 reaches every rank's callback and queue,
     * rank 0's own too (FFD_DELIVER_OWN is yes by default). */
    if (me->rank == 0) {
        static char big[1 << 20];
        CHECK(ffd_broadcast(h, big, sizeof big) == FFD_ERR_PAYLOAD_TOO_LARGE);
        CHECK(contains(last_error(), "exceeds the 8192-byte limit"));
        CHECK(ffd_broadcast(h, NULL, 3) == FFD_ERR_NULL);
        CHECK(ffd_broadcast(h, "hello", 5) == FFD_OK);
    }
    /* Too small a buffer: the event is described and stays queued. */
    unsigned char small[2] = {7, 7};
    CHECK(wait_event(h, FFD_EVENT_PAYLOAD, 0, &ev, small, sizeof small) == 1);
    CHECK(ev.payload_len == 5 && ev.payload == NULL && small[0] == 7);
    CHECK(ffd_next_event(h, &ev, NULL, 0) == FFD_BUFFER_TOO_SMALL && ev.payload_len == 5);
    CHECK(ffd_next_event(h, &ev, buf, sizeof buf) == FFD_OK && ev.kind == FFD_EVENT_PAYLOAD);
    CHECK(ev.payload_len == 5 && ev.payload == buf && memcmp(buf, "hello", 5) == 0);
    CHECK(ev.rank == 0 && ev.cause == FFD_CAUSE_NONE && ev.seq == 1 && ev.epoch == 0);
    CHECK(atomic_load(&me->payloads) == 1 && me->payload_len == 5 &&
          memcmp(me->payload, "hello", 5) == 0);
    CHECK(barrier_wait(&barrier) == 0);

    /* Agreements: the AND of every rank's flags, the same view everywhere. */
    uint64_t flags = 0, view = 99;
    uint32_t ranks[RANKS] = {7, 7, 7};
    ffd_agree_req_t *req = NULL;
    CHECK(ffd_view(h, &view, ranks, RANKS, &n) == FFD_OK && view == 0 && n == 0 && ranks[0] == 7);
    CHECK(ffd_view(h, NULL, ranks, RANKS, &n) == FFD_ERR_NULL);
    CHECK(ffd_iagree(h, 0, NULL) == FFD_ERR_NULL);
    CHECK(ffd_iagree(NULL, 0, &req) == FFD_ERR_NULL && req == NULL);
    CHECK(ffd_iagree(h, ~(1ull << me->rank), &req) == FFD_OK && req != NULL);
    CHECK(wait_event(h, FFD_EVENT_AGREED, 0, &ev, buf, sizeof buf) == 0 && ev.seq == 1);
    int done = 0;
    CHECK(ffd_agree_test(h, req, &done, &flags, &view, ranks, RANKS, &n) == FFD_OK && done == 1 &&
          flags == ~7ull && view == 0 && n == 0);
    CHECK(ffd_agree_test(NULL, req, &done, NULL, &view, ranks, RANKS, &n) == FFD_ERR_NULL);
    CHECK(ffd_agree_test(h, NULL, &done, &flags, &view, ranks, RANKS, &n) == FFD_ERR_NULL);
    ffd_agree_free(req);
    ffd_agree_free(NULL);
    CHECK(ffd_agree(h, me->rank == 1 ? 6 : 3, &flags, &view, ranks, RANKS, &n) == FFD_OK && flags == 2 &&
          view == 0 && n == 0);
    CHECK(ffd_agree(h, 0, NULL, &view, ranks, RANKS, &n) == FFD_ERR_NULL);
    /* Its event is queued after the result reached the request. */
    CHECK(wait_event(h, FFD_EVENT_AGREED, 0, &ev, buf, sizeof buf) == 0 && ev.seq == 2);
    CHECK(atomic_load(&me->agreed) == 2);
    CHECK(barrier_wait(&barrier) == 0);

    /* The last rank leaves; the others see a departure, not a failure,
     * then a view naming it, and agree without it. */
    if (me->rank == RANKS - 1) {
        CHECK(ffd_finalize(&h) == FFD_OK && h == NULL);
    } else {
        CHECK(wait_event(h, FFD_EVENT_LEFT, RANKS - 1, &ev, buf, sizeof buf) == 0);
        CHECK(ev.cause == FFD_CAUSE_NONE && ev.epoch == 0 && ev.payload == NULL);
        CHECK(wait_event(h, FFD_EVENT_VIEW, 0, &ev, NULL, 0) == 1 && ev.payload_len == 4);
        uint32_t aligned[RANKS];
        CHECK(wait_event(h, FFD_EVENT_VIEW, 0, &ev, aligned, sizeof aligned) == 0 && ev.seq == 1 &&
              ev.payload == (const uint8_t *)aligned && ev.payload_len == 4 && aligned[0] == RANKS - 1);
        CHECK(ffd_view(h, &view, ranks, RANKS, &n) == FFD_OK && view == 1 && n == 1 && ranks[0] == RANKS - 1);
        CHECK(ffd_agree(h, ~0ull, &flags, &view, ranks, 0, &n) == FFD_BUFFER_TOO_SMALL && flags == ~0ull &&
              view == 1 && n == 1);
        CHECK(atomic_load(&me->views) == 1 && atomic_load(&me->lefts) == 1);
        CHECK(ffd_is_alive(h, RANKS - 1) == 0);
        CHECK(ffd_epoch(h, &epoch) == FFD_OK && epoch == 0);
        uint32_t buf[4] = {7, 7, 7, 7};
        CHECK(ffd_failed_ranks(h, buf, 4, &n) == FFD_OK && n == 0 && buf[0] == 7);
        CHECK(ffd_stats(h, &st) == FFD_OK && st.detections_timeout + st.detections_inband +
                                                     st.detections_notice == 0);
    }
    CHECK(barrier_wait(&barrier) == 0);
    if (h != NULL)
        CHECK(ffd_finalize(&h) == FFD_OK && h == NULL);
    /* Double finalize: the handle variable is NULL now. */
    CHECK(ffd_finalize(&h) == FFD_ERR_NULL);
    CHECK(contains(last_error(), "already finalized"));
    CHECK(atomic_load(&me->others) == 0);
    return NULL;
}

/* Part 3: rank 0's callback blocks on the first payload until released. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int blocked, released, finalized;
    int calls, calls_after_finalize;
} stuck_t;

static stuck_t *stuck; /* malloc'd; freed as soon as rank 0's ffd_finalize returned */

static void on_event_stuck(void *userdata, const ffd_event_t *ev) {
    stuck_t *s = userdata;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    if (s->finalized)
        s->calls_after_finalize++;
    if (ev->kind == FFD_EVENT_PAYLOAD && !s->blocked) {
        s->blocked = 1;
        pthread_cond_broadcast(&s->cv);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 3 * WAIT_MS / 1000; /* bounded: a failing test must not hang */
        int rc = 0;
        while (!s->released && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&s->cv, &s->mu, &until);
    }
    pthread_mutex_unlock(&s->mu);
}

/* Waits (bounded by `ms`) until `*flag` is set; returns it. */
static int stuck_wait(int *flag, long long ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&stuck->mu);
    int rc = 0;
    while (!*flag && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&stuck->cv, &stuck->mu, &until);
    int set = *flag;
    pthread_mutex_unlock(&stuck->mu);
    return set;
}

static void *finalizer_main(void *arg) {
    ffd_t **h = arg;
    int rc = ffd_finalize(h);
    pthread_mutex_lock(&stuck->mu);
    stuck->finalized = rc == FFD_OK ? 1 : -1;
    pthread_cond_broadcast(&stuck->cv);
    pthread_mutex_unlock(&stuck->mu);
    return NULL;
}

static void *rank_stuck_main(void *arg) {
    rank_ctx_t *me = arg;
    /* A timeout far above the stall: the others must see a departure. */
    ffd_config_t *cfg = job_config(30ull * 1000 * 1000 * 1000, me->rank == 0 ? on_event_stuck : NULL,
                                   me->rank == 0 ? stuck : NULL);
    ffd_oob_t oob = {.rank = me->rank, .size = RANKS, .allgather = shared_allgather, .userdata = me};
    ffd_t *h = NULL;
    int rc = ffd_init(&oob, cfg, &h);
    CHECK(rc == FFD_OK && h != NULL);
    ffd_config_free(cfg);
    if (rc != FFD_OK)
        return NULL;
    CHECK(barrier_wait(&barrier) == 0);
    if (me->rank == 1)
        CHECK(ffd_broadcast(h, "stick", 5) == FFD_OK);
    if (me->rank == 0) {
        CHECK(stuck_wait(&stuck->blocked, WAIT_MS));
        pthread_mutex_lock(&stuck->mu);
        int calls = stuck->calls; /* the blocked call is the last that may ever run */
        pthread_mutex_unlock(&stuck->mu);
        pthread_t finalizer;
        CHECK(pthread_create(&finalizer, NULL, finalizer_main, &h) == 0);
        CHECK(barrier_wait(&barrier) == 0); /* finalize has begun: rank 1 sends more */
        /* Beyond the linger plus 2 s, the old bound: still waiting. */
        CHECK(!stuck_wait(&stuck->finalized, 4000));
        pthread_mutex_lock(&stuck->mu);
        stuck->released = 1;
        pthread_cond_broadcast(&stuck->cv);
        pthread_mutex_unlock(&stuck->mu);
        CHECK(stuck_wait(&stuck->finalized, WAIT_MS) && stuck->finalized == 1);
        pthread_join(finalizer, NULL);
        CHECK(h == NULL);
        pthread_mutex_lock(&stuck->mu);
        CHECK(stuck->calls == calls && stuck->calls_after_finalize == 0);
        pthread_mutex_unlock(&stuck->mu);
        /* No callback of rank 0 may touch it from now on (valgrind watches). */
        pthread_mutex_destroy(&stuck->mu);
        pthread_cond_destroy(&stuck->cv);
        free(stuck);
        stuck = NULL;
        CHECK(barrier_wait(&barrier) == 0);
        CHECK(barrier_wait(&barrier) == 0); /* the others checked each other */
    } else {
        CHECK(barrier_wait(&barrier) == 0);
        if (me->rank == 1)
            CHECK(ffd_broadcast(h, "later", 5) == FFD_OK);
        CHECK(barrier_wait(&barrier) == 0);
        ffd_event_t ev;
        unsigned char buf[FFD_MAX_PAYLOAD];
        CHECK(wait_event(h, FFD_EVENT_LEFT, 0, &ev, buf, sizeof buf) == 0);
        uint64_t epoch = 99;
        CHECK(ffd_epoch(h, &epoch) == FFD_OK && epoch == 0);
        CHECK(ffd_is_alive(h, 0) == 0 && ffd_is_alive(h, 1) == 1 && ffd_is_alive(h, 2) == 1);
        CHECK(barrier_wait(&barrier) == 0); /* nobody leaves before both checked */
        CHECK(ffd_finalize(&h) == FFD_OK);
    }
    return NULL;
}

static void part1_arguments(void) {
    /* Codes and messages. */
    CHECK(strcmp(ffd_version(), FFD_VERSION) == 0);
    const int codes[] = {FFD_OK, FFD_NO_EVENT, FFD_BUFFER_TOO_SMALL, FFD_STALE, FFD_ERR_NULL,
                         FFD_ERR_INVALID_ARGUMENT, FFD_ERR_CONFIG, FFD_ERR_BOOTSTRAP, FFD_ERR_FABRIC,
                         FFD_ERR_SYSTEM, FFD_ERR_STOPPED, FFD_ERR_PAYLOAD_TOO_LARGE, FFD_ERR_PANIC,
                         FFD_ERR_FORKED, FFD_ERR_BUSY};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        CHECK(strcmp(ffd_strerror(codes[i]), "unknown ffd result code") != 0);
    CHECK(strcmp(ffd_strerror(12345), "unknown ffd result code") == 0);
    size_t n = 99;
    char small[8];
    CHECK(ffd_last_error_message(small, sizeof small, &n) == FFD_OK && n == 0 && small[0] == 0);

    /* Settings. */
    ffd_config_t *cfg = NULL;
    CHECK(ffd_config_new(NULL) == FFD_ERR_NULL);
    CHECK(ffd_config_new(&cfg) == FFD_OK);
    CHECK(ffd_config_set(cfg, "FFD_PERIOD", "10") == FFD_ERR_CONFIG);
    CHECK(contains(last_error(), "FFD_PERIOD=`10` has no unit; accepted: a number with a unit"));
    CHECK(ffd_config_set(cfg, "FFD_CORE", "elsewhere") == FFD_ERR_CONFIG);
    CHECK(contains(last_error(), "FFD_CORE=`elsewhere`") && contains(last_error(), "auto|none"));
    CHECK(ffd_config_set(cfg, "FFD_PERIDO", "10ms") == FFD_ERR_INVALID_ARGUMENT);
    CHECK(contains(last_error(), "did you mean FFD_PERIOD?"));
    CHECK(ffd_config_set(NULL, "FFD_PERIOD", "10ms") == FFD_ERR_NULL);
    CHECK(ffd_config_set(cfg, NULL, "10ms") == FFD_ERR_NULL);
    CHECK(ffd_config_set(cfg, "FFD_PERIOD", "20ms") == FFD_OK);
    char value[32];
    CHECK(ffd_config_get(cfg, "FFD_PERIOD", value, sizeof value, &n) == FFD_OK &&
          strcmp(value, "20ms") == 0 && n == 4);
    CHECK(ffd_config_get(cfg, "FFD_PROVIDER", small, 3, &n) == FFD_OK && strcmp(small, "tc") == 0 &&
          n == 3);
    CHECK(ffd_config_get(cfg, "FFD_NOPE", value, sizeof value, &n) == FFD_ERR_INVALID_ARGUMENT);
    CHECK(ffd_config_get(cfg, "FFD_DELIVER_OWN", value, sizeof value, &n) == FFD_OK &&
          strcmp(value, "yes") == 0);
    CHECK(ffd_config_set(cfg, "FFD_DELIVER_OWN", "maybe") == FFD_ERR_CONFIG);
    CHECK(contains(last_error(), "FFD_DELIVER_OWN=`maybe` is not recognised; accepted: yes|no"));
    CHECK(ffd_config_set(cfg, "FFD_DELIVER_OWN", "no") == FFD_OK);
    CHECK(ffd_config_get(cfg, "FFD_DELIVER_OWN", value, sizeof value, &n) == FFD_OK &&
          strcmp(value, "no") == 0 && n == 2);
    CHECK(ffd_config_set_period_ns(cfg, 0) == FFD_ERR_CONFIG);
    CHECK(ffd_config_set_period_ns(NULL, 1) == FFD_ERR_NULL);
    CHECK(ffd_config_set_timeout_ns(cfg, 1500000) == FFD_OK); /* 1.5ms, below the period */
    CHECK(ffd_config_get(cfg, "FFD_TIMEOUT", value, sizeof value, &n) == FFD_ERR_CONFIG);
    CHECK(contains(last_error(), "the timeout must exceed the period"));

    /* init refuses the settings before calling the embedder's collective. */
    ffd_oob_t oob = {.rank = 0, .size = 1, .allgather = failing_allgather, .userdata = NULL};
    ffd_t *h = (ffd_t *)&oob; /* a sentinel: must stay untouched on failure */
    CHECK(ffd_init(&oob, cfg, &h) == FFD_ERR_CONFIG && h == (ffd_t *)&oob && allgather_calls == 0);
    CHECK(ffd_config_set(cfg, "FFD_TIMEOUT", NULL) == FFD_OK); /* back to the default */
    CHECK(ffd_config_set_period_ns(cfg, 10 * 1000 * 1000) == FFD_OK);
    CHECK(ffd_config_set(cfg, "FFD_DOMAIN", "lo") == FFD_OK);
    CHECK(ffd_config_set(cfg, "FFD_CORE", "none") == FFD_OK);
    CHECK(ffd_config_set_callback(cfg, NULL, NULL) == FFD_OK);
    CHECK(ffd_config_set_callback(NULL, on_event, NULL) == FFD_ERR_NULL);

    /* A host allgather that fails is a bootstrap error naming it. */
    CHECK(ffd_init(&oob, cfg, &h) == FFD_ERR_BOOTSTRAP && h == (ffd_t *)&oob);
    CHECK(allgather_calls == 1 && contains(last_error(), "ffd_oob_t allgather callback returned 5"));
    oob.rank = 1;
    CHECK(ffd_init(&oob, cfg, &h) == FFD_ERR_INVALID_ARGUMENT);
    oob.rank = 0;
    oob.allgather = NULL;
    CHECK(ffd_init(&oob, cfg, &h) == FFD_ERR_NULL);
    CHECK(ffd_init(&oob, cfg, NULL) == FFD_ERR_NULL);
    /* No oob, no launcher: the message says what is missing. */
    CHECK(ffd_init(NULL, cfg, &h) == FFD_ERR_BOOTSTRAP && h == (ffd_t *)&oob);
    CHECK(contains(last_error(), "FFD_BOOTSTRAP is not set"));
    ffd_config_free(cfg);
    ffd_config_free(NULL);

    /* The environment. */
    setenv("FFD_TIMEOUT", "250ms", 1);
    CHECK(ffd_config_from_env(&cfg) == FFD_OK);
    CHECK(ffd_config_get(cfg, "FFD_TIMEOUT", value, sizeof value, NULL) == FFD_OK &&
          strcmp(value, "250ms") == 0);
    CHECK(ffd_config_set(cfg, "FFD_TIMEOUT", "300ms") == FFD_OK); /* code after env wins */
    CHECK(ffd_config_get(cfg, "FFD_TIMEOUT", value, sizeof value, NULL) == FFD_OK &&
          strcmp(value, "300ms") == 0);
    CHECK(ffd_config_load_env(cfg) == FFD_OK); /* env loaded after code wins */
    CHECK(ffd_config_get(cfg, "FFD_TIMEOUT", value, sizeof value, NULL) == FFD_OK &&
          strcmp(value, "250ms") == 0);
    setenv("FFD_INBAND", "sometimes", 1);
    ffd_config_t *untouched = cfg;
    CHECK(ffd_config_from_env(&untouched) == FFD_ERR_CONFIG && untouched == cfg);
    CHECK(contains(last_error(), "FFD_INBAND=`sometimes`"));
    CHECK(ffd_config_load_env(cfg) == FFD_ERR_CONFIG);
    CHECK(ffd_config_load_env(NULL) == FFD_ERR_NULL);
    CHECK(ffd_config_from_env(NULL) == FFD_ERR_NULL);
    unsetenv("FFD_INBAND");
    unsetenv("FFD_TIMEOUT");
    ffd_config_free(cfg);

    /* Every call on a NULL handle. */
    uint64_t epoch = 7;
    ffd_event_t ev;
    ffd_stats_t st;
    uint32_t r;
    CHECK(ffd_is_alive(NULL, 0) == FFD_ERR_NULL);
    CHECK(ffd_is_excluded(NULL) == FFD_ERR_NULL);
    CHECK(ffd_rank_size(NULL, &r, &r) == FFD_ERR_NULL);
    CHECK(ffd_epoch(NULL, &epoch) == FFD_ERR_NULL && epoch == 7);
    CHECK(ffd_failed_ranks(NULL, &r, 1, &n) == FFD_ERR_NULL);
    CHECK(ffd_next_event(NULL, &ev, NULL, 0) == FFD_ERR_NULL);
    ffd_state_t state;
    CHECK(ffd_state(NULL, &state, NULL, 0, NULL) == FFD_ERR_NULL);
    CHECK(ffd_event_fd(NULL) == FFD_ERR_NULL);
    CHECK(ffd_broadcast(NULL, "x", 1) == FFD_ERR_NULL);
    CHECK(ffd_stats(NULL, &st) == FFD_ERR_NULL);
    CHECK(ffd_finalize(NULL) == FFD_ERR_NULL);
    h = NULL;
    CHECK(ffd_finalize(&h) == FFD_ERR_NULL);
    CHECK(ffd_last_error_message(NULL, 4, &n) == FFD_ERR_NULL);
    CHECK(ffd_last_error_message(NULL, 0, &n) == FFD_OK && n > 0);
}

/* Part 4: fork. A one-rank job: the allgather is a copy. */
static int solo_allgather(void *userdata, const void *mine, size_t len, void *all) {
    (void)userdata;
    memcpy(all, mine, len);
    return 0;
}

#define FORK_FINALIZE_MS 5000 /* the child's ffd_finalize() must return within this */
#define CHILD_WAIT_MS 60000   /* the parent's bound on the child (valgrind's leak check included) */

/* In the child: the calls on the parent's handle. Prints its checks like
 * CHECK; returns how many failed. `errors` is valgrind's error count at
 * the fork: the checks must add none. */
static int child_checks(ffd_t *h, unsigned errors) {
    int bad = 0;
#define CHILD_CHECK(cond)                                                                     \
    do {                                                                                      \
        if (cond) {                                                                           \
            printf("ok %d: child: %s\n", __LINE__, #cond);                                    \
        } else {                                                                              \
            bad++;                                                                            \
            printf("not ok %d: child: %s (last error: %s)\n", __LINE__, #cond, last_error()); \
        }                                                                                     \
        fflush(stdout);                                                                       \
    } while (0)
    CHILD_CHECK(ffd_is_alive(h, 0) == FFD_ERR_FORKED);
    CHILD_CHECK(contains(last_error(), "fork()ed child") && contains(last_error(), "ffd_init anew"));
    CHILD_CHECK(ffd_is_excluded(h) == FFD_ERR_FORKED);
    uint32_t rank = 99, size = 99;
    CHILD_CHECK(ffd_rank_size(h, &rank, &size) == FFD_ERR_FORKED && rank == 99 && size == 99);
    uint64_t epoch = 7;
    CHILD_CHECK(ffd_epoch(h, &epoch) == FFD_ERR_FORKED && epoch == 7);
    size_t n = 7;
    CHILD_CHECK(ffd_failed_ranks(h, NULL, 0, &n) == FFD_ERR_FORKED && n == 7);
    ffd_event_t ev;
    CHILD_CHECK(ffd_next_event(h, &ev, NULL, 0) == FFD_ERR_FORKED);
    ffd_state_t state;
    CHILD_CHECK(ffd_state(h, &state, NULL, 0, NULL) == FFD_ERR_FORKED);
    CHILD_CHECK(ffd_event_fd(h) == FFD_ERR_FORKED);
    CHILD_CHECK(ffd_broadcast(h, "child", 5) == FFD_ERR_FORKED);
    ffd_stats_t st;
    CHILD_CHECK(ffd_stats(h, &st) == FFD_ERR_FORKED);
    ffd_agree_req_t *req = NULL;
    CHILD_CHECK(ffd_iagree(h, 1, &req) == FFD_ERR_FORKED && req == NULL);
    long long t0 = now_ms();
    CHILD_CHECK(ffd_finalize(&h) == FFD_ERR_FORKED && h == NULL);
    CHILD_CHECK(now_ms() - t0 < FORK_FINALIZE_MS);
    CHILD_CHECK(ffd_finalize(&h) == FFD_ERR_NULL);
    CHILD_CHECK(VALGRIND_COUNT_ERRORS == errors);
#undef CHILD_CHECK
    return bad;
}

static void *part4_fork(void *arg) {
    (void)arg;
    static rank_ctx_t solo;
    ffd_config_t *cfg = job_config(5ull * 1000 * 1000 * 1000, on_event, &solo);
    ffd_oob_t oob = {.rank = 0, .size = 1, .allgather = solo_allgather, .userdata = NULL};
    ffd_t *h = NULL;
    CHECK(ffd_init(&oob, cfg, &h) == FFD_OK && h != NULL);
    ffd_config_free(cfg);
    if (h == NULL)
        return NULL;
    fflush(stdout); /* nothing buffered for the child to print again */
    unsigned errors = VALGRIND_COUNT_ERRORS;
    pid_t child = fork();
    if (child == 0) {
        int bad = child_checks(h, errors);
        /* The child leaks what it inherited on purpose (see ffd_finalize()):
         * memory reached only from the parent's threads, which the child
         * does not have, so a leak check at its exit would call it lost.
         * Its memory errors were counted by the last check above. */
        VALGRIND_CLO_CHANGE("--leak-check=no");
        _exit(bad == 0 ? 0 : 1);
    }
    CHECK(child > 0);
    if (child > 0) {
        /* Bounded wait: a child still running at the deadline is killed. */
        int status = 0;
        pid_t reaped = 0;
        long long deadline = now_ms() + CHILD_WAIT_MS;
        while ((reaped = waitpid(child, &status, WNOHANG)) == 0 && now_ms() < deadline)
            poll(NULL, 0, 10);
        if (reaped == 0) {
            kill(child, SIGKILL);
            reaped = waitpid(child, &status, 0);
            CHECK(!"the forked child was done within the bound (killed)");
        }
        CHECK(reaped == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }

    /* The parent's detector runs on. */
    CHECK(ffd_is_alive(h, 0) == 1);
    uint64_t epoch = 7;
    CHECK(ffd_epoch(h, &epoch) == FFD_OK && epoch == 0);
    CHECK(ffd_broadcast(h, "after", 5) == FFD_OK);
    ffd_event_t ev;
    unsigned char buf[FFD_MAX_PAYLOAD];
    CHECK(wait_event(h, FFD_EVENT_PAYLOAD, 0, &ev, buf, sizeof buf) == 0 && ev.payload_len == 5 &&
          memcmp(buf, "after", 5) == 0);
    CHECK(atomic_load(&solo.payloads) == 1);
    CHECK(ffd_finalize(&h) == FFD_OK && h == NULL);
    return NULL;
}

/* Runs `body` on RANKS threads standing in for ranks. */
static int run_job(void *(*body)(void *)) {
    pthread_t threads[RANKS];
    for (int r = 0; r < RANKS; r++) {
        ctx[r].rank = r;
        if (pthread_create(&threads[r], NULL, body, &ctx[r]) != 0) {
            printf("not ok: pthread_create\n");
            return -1;
        }
    }
    for (int r = 0; r < RANKS; r++)
        pthread_join(threads[r], NULL);
    return 0;
}

int main(void) {
    part1_arguments();

    if (run_job(rank_main) != 0)
        return 1;
    stuck = calloc(1, sizeof *stuck);
    pthread_mutex_init(&stuck->mu, NULL);
    pthread_cond_init(&stuck->cv, NULL);
    if (run_job(rank_stuck_main) != 0)
        return 1;
    if (stuck != NULL) { /* rank 0 failed before freeing it */
        pthread_mutex_destroy(&stuck->mu);
        pthread_cond_destroy(&stuck->cv);
        free(stuck);
    }
    for (int r = 0; r < RANKS; r++)
        free(slots[r]);
    /* On a thread of its own, as the ranks above: the main thread's Rust
     * thread-locals are never freed, and valgrind would see them. */
    pthread_t forker;
    if (pthread_create(&forker, NULL, part4_fork, NULL) != 0) {
        printf("not ok: pthread_create\n");
        return 1;
    }
    pthread_join(forker, NULL);

    int p = atomic_load(&passed), f = atomic_load(&failed);
    if (f == 0) {
        printf("capi_test: all %d checks passed\n", p);
        return 0;
    }
    printf("capi_test: %d of %d checks failed\n", f, p + f);
    return 1;
}
