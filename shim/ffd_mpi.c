/*
 * libffd_mpi.so: ffd under an MPI program that knows nothing of it.
 *
 * Loaded with LD_PRELOAD (or linked before libmpi), this MPI profiling
 * interface (PMPI) shim defines MPI_Init, MPI_Init_thread and MPI_Finalize:
 *
 * - MPI_Init / MPI_Init_thread call PMPI_Init / PMPI_Init_thread, then start
 *   ffd with the FFD_* settings over PMPI_Allgather on a private duplicate
 *   of MPI_COMM_WORLD (ffd rank = MPI_COMM_WORLD rank), exchange each
 *   rank's host and pid on the same communicator (for fencing), and start
 *   one thread of the shim's own that waits on ffd's event fd.
 * - MPI_Finalize stops that thread, ends ffd (ffd_finalize: the others see
 *   this rank leave, not fail), then calls PMPI_Finalize.
 *
 * What a failure does is FFD_MPI_ON_FAILURE's choice, carried out on the
 * shim's thread (never inside ffd's callback, which this shim does not use):
 *
 * - ulfm: hand it to Open MPI's ULFM as a process-local PMIx event,
 *     PMIx_Notify_event(PMIX_ERR_PROC_TERM_WO_SYNC, &proc_r,
 *                       PMIX_RANGE_PROC_LOCAL,
 *                       {PMIX_EVENT_AFFECTED_PROC = proc_r,
 *                        PMIX_EVENT_DO_NOT_CACHE = true}, 2, NULL, NULL),
 *   which runs Open MPI's "ULFM-Event-handler" on this thread; it queues
 *   the failure for Open MPI's progress engine, and pending and later
 *   operations involving rank r end with MPIX_ERR_PROC_FAILED (for 50 ms
 *   the shim counts as one of Open MPI's event users, so that this happens
 *   on the next progress call rather than at the next 10 ms event tick). Then the
 *   rank is fenced: every survivor on its host SIGKILLs it (through a
 *   pidfd opened at start, so never another process that reused the pid),
 *   so that a hung rank does not hold MPI_Finalize's fence forever.
 * - abort: one report on stderr (which rank, the cause, who declared it,
 *   when), then PMPI_Abort(MPI_COMM_WORLD, 1). A rank the others declared
 *   failed exits with status 1 once its line is read (SHIM_ABORT_CODE says
 *   why).
 * - report: the report only.
 * - unset: ulfm when this MPI has ULFM (MPIX_ERR_PROC_FAILED at compile
 *   time) and the job runs with its fault tolerance on (Open MPI's control
 *   variable mpi_ft_enable, read through MPI_T, is true), abort otherwise.
 *
 * A bad value, FFD_MPI_ON_FAILURE=ulfm without ULFM's fault tolerance, or a
 * failing ffd_init fails MPI_Init: the message goes to stderr and
 * MPI_COMM_WORLD's error handler is called (by default that ends the job).
 *
 * The one report per failure comes from the lowest rank ffd knows alive
 * (each rank works it out alone); any other rank prints it and acts (in
 * abort mode) only if the job still runs half a second later (1.5 s under
 * OpenSHMEM) while that reporter still lives. A reporter that has ended
 * meanwhile was ending the job (or died, which ends it too under every
 * launcher here): then the rank waits SHIM_LAST_BACKSTOP_NS more before it
 * acts, so a slow teardown does not print the report again.
 *
 * PMIx: the PMIx functions are resolved at run time, after PMPI_Init, with
 * dlsym(RTLD_DEFAULT): the shim must use the libpmix the MPI library
 * loaded (Open MPI's wheel ships its own libpmix.so.2 beside Debian's of
 * the same name), so it links none. The few PMIx types and constants it
 * needs are those of the PMIx standard's stable ABI (PMIx 4 and 5); at
 * start, PMIx_Error_string must name PMIX_ERR_PROC_TERM_WO_SYNC's code.
 *
 * Build (ci/install PREFIX --mpicc MPICC does this):
 *   mpicc -shared -fPIC -O2 shim/ffd_mpi.c -I$PREFIX/include -L$PREFIX/lib -lffd \
 *         -Wl,-rpath,$PREFIX/lib -ldl -pthread -o libffd_mpi.so
 * Use: docs/embedding.md, "No code change: libffd_mpi.so".
 */
#define _GNU_SOURCE
#include <mpi.h>
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <ffd.h>

#if defined(FFD_MPI_SHMEM)
#include <pshmem.h>
#include <shmem.h>
#endif

#define SHIM_EXPORT __attribute__((visibility("default")))

/* ULFM at compile time: this MPI's headers know MPIX_ERR_PROC_FAILED. */
#if defined(MPIX_ERR_PROC_FAILED)
#define SHIM_HAVE_ULFM 1
#else
#define SHIM_HAVE_ULFM 0
#endif

/* The error code PMPI_Abort ends the job with, and the exit status of a
 * rank the others declared failed under FFD_MPI_ON_FAILURE=abort. That
 * rank, once its line on stderr has been read (report_read, at most
 * 200 ms), leaves with _exit, not a second abort: the ranks still in the
 * job end it (their reporter, or a backstop), and a launcher already
 * tearing the job down may not serve a second abort. Open MPI 4.1's
 * mpirun/orted kills a job's processes from its main thread: SIGCONT to
 * each, sleep(odls_base_sigkill_timeout = 1 s), SIGTERM, sleep, SIGKILL;
 * a sleep ends early only when a SIGCHLD interrupts it (glibc's sleep
 * then has 0 whole seconds left). The SIGCONT resumes a stopped declared
 * rank. Its second PMPI_Abort blocked on a PMIx request that the sleeping
 * thread does not serve, so unless the reporter's own exit fell inside
 * the sleep, nothing interrupted it and the job ended 1 s late (issue 35).
 * Now its exit ends the sleep: the thread does not read stderr either, so
 * it comes 200 ms in, a margin for a launcher thread held off the CPU
 * after its last SIGCONT (exiting at once lost that race under load). */
#define SHIM_ABORT_CODE 1
/* How long a rank that is not the reporter waits before it reports and
 * acts itself (the reporter may have died too): longer than the reporter's
 * PMPI_Abort takes to end the job (60 ms to 0.3 s here), and under
 * OpenSHMEM than its shmem_global_exit (about 1 s with Open MPI 4.1's
 * oshmem). */
#define SHIM_BACKSTOP_NS 500000000LL
#define SHIM_BACKSTOP_SHMEM_NS 1500000000LL
/* How much longer it waits once that reporter has ended (the job is being
 * torn down; oshrun took 2-3 s on a loaded 2-core machine) before it acts
 * anyway: the launcher may let the job run on without the reporter. */
#define SHIM_LAST_BACKSTOP_NS 5000000000LL

/* ---- the PMIx standard's ABI, the part this shim uses ------------------ */

typedef int shim_pmix_status_t;
typedef struct {
    char nspace[256]; /* PMIX_MAX_NSLEN + 1 */
    uint32_t rank;
} shim_pmix_proc_t;
typedef struct {
    uint16_t type;
    size_t size;
    void *array;
} shim_pmix_data_array_t;

#define SHIM_PMIX_SUCCESS 0
#define SHIM_PMIX_OPERATION_SUCCEEDED (-157)
#define SHIM_PMIX_ERR_PROC_TERM_WO_SYNC (-200)
#define SHIM_PMIX_RANGE_PROC_LOCAL 7
#define SHIM_PMIX_BOOL 1
#define SHIM_PMIX_PROC 22
#define SHIM_PMIX_EVENT_AFFECTED_PROC "pmix.evproc"
#define SHIM_PMIX_EVENT_DO_NOT_CACHE "pmix.evnocache"

typedef shim_pmix_status_t (*pmix_init_fn)(shim_pmix_proc_t *, void *, size_t);
typedef shim_pmix_status_t (*pmix_finalize_fn)(const void *, size_t);
typedef shim_pmix_status_t (*pmix_notify_fn)(shim_pmix_status_t, const shim_pmix_proc_t *, uint8_t,
                                             const void *, size_t, void *, void *);
typedef const char *(*pmix_error_string_fn)(shim_pmix_status_t);
typedef void *(*pmix_list_start_fn)(void);
typedef shim_pmix_status_t (*pmix_list_add_fn)(void *, const char *, const void *, uint16_t);
typedef shim_pmix_status_t (*pmix_list_convert_fn)(void *, shim_pmix_data_array_t *);
typedef void (*pmix_list_release_fn)(void *);
typedef void (*pmix_darray_destruct_fn)(shim_pmix_data_array_t *);

static struct {
    pmix_init_fn init;
    pmix_finalize_fn finalize;
    pmix_notify_fn notify;
    pmix_error_string_fn error_string;
    pmix_list_start_fn list_start;
    pmix_list_add_fn list_add;
    pmix_list_convert_fn list_convert;
    pmix_list_release_fn list_release;
    pmix_darray_destruct_fn darray_destruct;
    shim_pmix_proc_t me;
    bool initialized;
} pmix;

/* Open MPI's progress engine runs its event loop, where ULFM's handler
 * queued the failure, only every 10 ms (mpi_event_tick_rate) unless it has
 * "event users": the shim is one for a short while after each hand-over,
 * so the failure is delivered on the next progress call. Resolved like
 * PMIx (libopen-pal exports them); without them, delivery waits for the
 * tick. */
typedef void (*opal_users_fn)(void);
static struct {
    opal_users_fn increment, decrement;
    int held;         /* increments not yet given back */
    int64_t until_ns; /* monotonic: when to give them back */
} boost;
/* How long the shim stays an event user after a hand-over. */
#define SHIM_BOOST_NS 50000000LL

/* Open MPI's switch for MPI_Finalize's PMIx fence: its control variable
 * async_mpi_finalize (ompi_async_mpi_finalize, exported by libmpi; MPI_T
 * cannot write it, its scope is read-only). Whenever ULFM's fault tolerance
 * is on, whatever FFD_MPI_ON_FAILURE says (so on every rank alike), the
 * shim turns that fence off just before PMPI_Finalize, because after a rank
 * died it can wait forever: Open MPI 5.0.11's mpirun (its PMIx 5.0.11
 * server) waits for one contribution from every process of the job on its
 * node that it has not seen lose its PMIx connection, and when it
 * deregisters a killed process (once it has reaped it) before its PMIx
 * thread has read that process's closed socket, it never counts the
 * process out. ULFM's finalize has synchronized the survivors before it
 * reaches the fence (a shrink of MPI_COMM_WORLD, then a barrier over the
 * survivors), so skipping the fence loses nothing. docs/embedding.md,
 * "MPI_Finalize under ULFM", has the evidence. NULL when this MPI has no
 * such variable. */
static bool *finalize_fence_off;

/* ---- state ------------------------------------------------------------- */

enum on_failure { ON_FAILURE_ULFM, ON_FAILURE_ABORT, ON_FAILURE_REPORT };
static const char *const on_failure_names[] = {"ulfm", "abort", "report"};
static const char *const ACCEPTED = "ulfm|abort|report (unset: ulfm when the job runs with ULFM's fault "
                                    "tolerance on, e.g. mpirun --with-ft ulfm; abort otherwise)";

enum log_level { LOG_OFF, LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* What one rank tells the others at start: where it runs and its pid. */
typedef struct {
    char boot_id[40];   /* /proc/sys/kernel/random/boot_id: which kernel */
    uint64_t pidns_dev; /* /proc/self/ns/pid: which pid namespace */
    uint64_t pidns_ino;
    int64_t pid;
} host_card;

static struct {
    bool started;
    ffd_t *ffd;
    MPI_Comm comm; /* the private duplicate of MPI_COMM_WORLD */
    int rank, size;
    enum on_failure mode;
    bool mode_was_set;
    enum log_level log;
    int *pidfds; /* per rank: a pidfd of a same-host peer, or -1 */
    int stop_fd; /* eventfd: MPI_Finalize wakes the thread with it */
    pthread_t thread;
    bool thread_running;
    atomic_bool stopping;
    int64_t init_realtime_ns;  /* CLOCK_REALTIME just before ffd_init */
    int64_t clock_realtime_ns; /* CLOCK_REALTIME when ffd's clock read 0 */
    bool any_failure;         /* written by the thread, read after join */
    bool ending;              /* the thread's: abort mode acted on a failure */
    bool shmem;               /* started by shmem_init (the OpenSHMEM build) */
    bool ft_on;               /* Open MPI's ULFM fault tolerance is on in this job */
} shim = {.comm = MPI_COMM_NULL, .stop_fd = -1, .log = LOG_WARN};

/* ---- small helpers ----------------------------------------------------- */

static int64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* One whole line on stderr per call (one write), prefixed
 * "libffd_mpi[R] LEVEL: ". */
__attribute__((format(printf, 2, 3))) static void say(enum log_level level, const char *fmt, ...) {
    if (level > shim.log)
        return;
    static const char *const names[] = {"", "error", "warn", "info", "debug"};
    char line[1024];
    int n = snprintf(line, sizeof line, "libffd_mpi[%d] %s: ", shim.rank, names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof line)
        n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}

static enum log_level log_level_from_env(void) {
    const char *v = getenv("FFD_LOG");
    if (!v || !*v)
        return LOG_WARN;
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    for (int i = 0; i < 5; i++)
        if (strcmp(v, names[i]) == 0)
            return (enum log_level)i;
    return LOG_WARN; /* ffd_init refuses the value, naming it */
}

static const char *cause_name(ffd_cause c) {
    switch (c) {
    case FFD_CAUSE_TIMEOUT:
        return "timeout (silent for FFD_TIMEOUT: hung, stopped or cut off)";
    case FFD_CAUSE_INBAND:
        return "inband (a transport error on the heartbeat link)";
    case FFD_CAUSE_NOTICE:
        return "notice";
    case FFD_CAUSE_EXITED:
        return "exited (its process ended, seen on its host)";
    default:
        return "none";
    }
}

/* "2026-12-06T21:40:01.123Z" */
static void format_utc(int64_t ns, char *out, size_t len) {
    time_t secs = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, len, "%s.%03dZ", day, (int)(ns % 1000000000 / 1000000));
}

/* ---- PMIx, resolved at run time ---------------------------------------- */

/* Resolves the PMIx functions of the libpmix the MPI library loaded and
 * learns this process's namespace. NULL, or why not. */
static const char *pmix_resolve(void) {
#define RESOLVE(field, name)                                                                                 \
    do {                                                                                                     \
        *(void **)(&pmix.field) = dlsym(RTLD_DEFAULT, name);                                                 \
        if (!pmix.field)                                                                                     \
            return "the MPI library loaded no libpmix with " name " (FFD_MPI_ON_FAILURE=ulfm needs Open "    \
                   "MPI's PMIx)";                                                                            \
    } while (0)
    RESOLVE(init, "PMIx_Init");
    RESOLVE(finalize, "PMIx_Finalize");
    RESOLVE(notify, "PMIx_Notify_event");
    RESOLVE(error_string, "PMIx_Error_string");
    RESOLVE(list_start, "PMIx_Info_list_start");
    RESOLVE(list_add, "PMIx_Info_list_add");
    RESOLVE(list_convert, "PMIx_Info_list_convert");
    RESOLVE(list_release, "PMIx_Info_list_release");
    RESOLVE(darray_destruct, "PMIx_Data_array_destruct");
#undef RESOLVE
    *(void **)(&boost.increment) = dlsym(RTLD_DEFAULT, "opal_progress_event_users_increment");
    *(void **)(&boost.decrement) = dlsym(RTLD_DEFAULT, "opal_progress_event_users_decrement");
    if (!boost.increment || !boost.decrement)
        boost.increment = boost.decrement = NULL;
    const char *name = pmix.error_string(SHIM_PMIX_ERR_PROC_TERM_WO_SYNC);
    if (!name || !strstr(name, "TERM") || !strstr(name, "SYNC")) {
        static char why[256];
        snprintf(why, sizeof why,
                 "this libpmix names code %d `%s`, not PMIX_ERR_PROC_TERM_WO_SYNC: its ABI is not the "
                 "PMIx standard's this shim was written for",
                 SHIM_PMIX_ERR_PROC_TERM_WO_SYNC, name ? name : "(null)");
        return why;
    }
    /* Already initialized by the MPI library: this returns our identity and
     * takes one more reference, which pmix_release gives back. */
    shim_pmix_status_t rc = pmix.init(&pmix.me, NULL, 0);
    if (rc != SHIM_PMIX_SUCCESS) {
        static char why[256];
        snprintf(why, sizeof why, "PMIx_Init failed: %s", pmix.error_string(rc));
        return why;
    }
    pmix.initialized = true;
    return NULL;
}

static void pmix_release(void) {
    if (pmix.initialized) {
        pmix.finalize(NULL, 0);
        pmix.initialized = false;
    }
}

/* Hands rank `r`'s failure to Open MPI's ULFM (see the top of the file). */
static void ulfm_inject(uint32_t r) {
    shim_pmix_proc_t proc;
    memset(&proc, 0, sizeof proc);
    memcpy(proc.nspace, pmix.me.nspace, sizeof proc.nspace);
    proc.rank = r;
    bool yes = true;
    void *list = pmix.list_start();
    shim_pmix_data_array_t info = {0, 0, NULL};
    shim_pmix_status_t rc = list ? SHIM_PMIX_SUCCESS : -1;
    if (rc == SHIM_PMIX_SUCCESS)
        rc = pmix.list_add(list, SHIM_PMIX_EVENT_AFFECTED_PROC, &proc, SHIM_PMIX_PROC);
    if (rc == SHIM_PMIX_SUCCESS)
        rc = pmix.list_add(list, SHIM_PMIX_EVENT_DO_NOT_CACHE, &yes, SHIM_PMIX_BOOL);
    if (rc == SHIM_PMIX_SUCCESS)
        rc = pmix.list_convert(list, &info);
    if (rc == SHIM_PMIX_SUCCESS && boost.increment) {
        boost.increment();
        boost.held++;
        boost.until_ns = monotonic_ns() + SHIM_BOOST_NS;
    }
    if (rc == SHIM_PMIX_SUCCESS)
        rc = pmix.notify(SHIM_PMIX_ERR_PROC_TERM_WO_SYNC, &proc, SHIM_PMIX_RANGE_PROC_LOCAL, info.array,
                         info.size, NULL, NULL);
    if (info.array)
        pmix.darray_destruct(&info);
    if (list)
        pmix.list_release(list);
    if (rc == SHIM_PMIX_SUCCESS || rc == SHIM_PMIX_OPERATION_SUCCEEDED)
        say(LOG_INFO, "rank %" PRIu32 " handed to ULFM (PMIx_Notify_event PMIX_ERR_PROC_TERM_WO_SYNC)", r);
    else
        say(LOG_ERROR, "rank %" PRIu32 ": PMIx_Notify_event failed: %s; ULFM was not told", r,
            pmix.error_string(rc));
}

/* Gives back the event-user counts taken by ulfm_inject. */
static void boost_release(void) {
    for (; boost.held > 0; boost.held--)
        boost.decrement();
}

/* ---- fencing ----------------------------------------------------------- */

static void read_host_card(host_card *card) {
    memset(card, 0, sizeof *card);
    card->pid = (int64_t)getpid();
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(card->boot_id, sizeof card->boot_id, f))
            card->boot_id[0] = '\0';
        fclose(f);
    }
    card->boot_id[strcspn(card->boot_id, "\n")] = '\0';
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) == 0) {
        card->pidns_dev = (uint64_t)st.st_dev;
        card->pidns_ino = (uint64_t)st.st_ino;
    }
}

/* Opens a pidfd on every rank that runs on this kernel in this pid
 * namespace (so its pid is the same process here). MPI_SUCCESS or the
 * allgather's error. */
static int open_peer_pidfds(void) {
    host_card mine, *all = calloc((size_t)shim.size, sizeof *all);
    shim.pidfds = malloc(sizeof(int) * (size_t)shim.size);
    if (!all || !shim.pidfds) {
        free(all);
        return MPI_ERR_NO_MEM;
    }
    for (int r = 0; r < shim.size; r++)
        shim.pidfds[r] = -1;
    read_host_card(&mine);
    int rc = PMPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, shim.comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return rc;
    }
    int local = 0, opened = 0;
    for (int r = 0; r < shim.size; r++) {
        if (r == shim.rank || !mine.boot_id[0] || strcmp(all[r].boot_id, mine.boot_id) != 0 ||
            all[r].pidns_dev != mine.pidns_dev || all[r].pidns_ino != mine.pidns_ino)
            continue;
        local++;
        int fd = (int)syscall(SYS_pidfd_open, (pid_t)all[r].pid, 0);
        if (fd >= 0) {
            shim.pidfds[r] = fd;
            opened++;
        } else {
            say(LOG_WARN, "cannot open a pidfd on rank %d (pid %" PRId64 "): %s; it will not be fenced", r,
                all[r].pid, strerror(errno));
        }
    }
    say(LOG_DEBUG, "%d other ranks on this host, %d of them fenceable", local, opened);
    free(all);
    return MPI_SUCCESS;
}

/* SIGKILLs rank r if it runs on this host (a no-op when it is gone). */
static void fence(uint32_t r) {
    if (!shim.pidfds || r >= (uint32_t)shim.size || shim.pidfds[r] < 0)
        return;
    if (syscall(SYS_pidfd_send_signal, shim.pidfds[r], SIGKILL, NULL, 0) == 0)
        say(LOG_INFO, "rank %" PRIu32 " fenced (SIGKILL)", r);
    else if (errno != ESRCH)
        say(LOG_WARN, "rank %" PRIu32 ": cannot fence it (SIGKILL): %s", r, strerror(errno));
    close(shim.pidfds[r]);
    shim.pidfds[r] = -1;
}

/* ---- the shim's thread ------------------------------------------------- */

/* A failure whose report waits (this rank is not the reporter). */
typedef struct {
    uint32_t rank, detector;
    ffd_cause cause;
    uint64_t time_ns;
    int64_t due_ns; /* monotonic */
    int reporter;   /* the rank it was left to */
    bool pending;
    bool last;      /* that reporter has ended: this is the last backstop */
} deferred;

/* The lowest rank ffd knows alive: the one that reports. */
static int reporter(void) {
    for (int r = 0; r < shim.size; r++)
        if (ffd_is_alive(shim.ffd, (uint32_t)r) == 1)
            return r;
    return shim.rank;
}

static void report(const deferred *f) {
    char when[40];
    int64_t at = shim.clock_realtime_ns + (int64_t)f->time_ns;
    format_utc(at, when, sizeof when);
    const char *then = shim.mode == ON_FAILURE_ABORT    ? (shim.shmem ? "ending the job (shmem_global_exit)"
                                                                      : "ending the job (MPI_Abort)")
                       : shim.mode == ON_FAILURE_ULFM   ? "handed to ULFM: MPIX_ERR_PROC_FAILED for operations "
                                                          "involving it"
                                                        : "the job goes on";
    say(shim.mode == ON_FAILURE_ABORT ? LOG_ERROR : LOG_WARN,
        "rank %" PRIu32 " failed: cause %s, declared by rank %" PRIu32 ", learned here at %s (%.3f s after "
        "%s); FFD_MPI_ON_FAILURE=%s: %s",
        f->rank, cause_name(f->cause), f->detector, when, (double)(at - shim.init_realtime_ns) / 1e9,
        shim.shmem ? "shmem_init" : "MPI_Init", on_failure_names[shim.mode], then);
}

/* How long the report may wait for the launcher to read it before the job
 * is ended (see report_read). */
#define SHIM_REPORT_READ_NS 200000000LL

/* Waits until the launcher has read what this process wrote to stderr,
 * when stderr is a pipe (mpiexec's and mpirun's output forwarding), at most
 * SHIM_REPORT_READ_NS: an abort tears the job down at once, and a report
 * still in the pipe was lost with it (seen under MPICH's hydra on a loaded
 * machine: the job ended, no report). FIONREAD on either end of a pipe
 * counts the bytes not read yet; on anything else it fails or says 0, and
 * there is nothing to wait for. */
static void report_read(void) {
    int64_t until = monotonic_ns() + SHIM_REPORT_READ_NS;
    for (;;) {
        int unread = 0;
        if (ioctl(STDERR_FILENO, FIONREAD, &unread) != 0 || unread <= 0)
            return;
        if (monotonic_ns() >= until) {
            say(LOG_DEBUG, "stderr still holds %d unread bytes; ending the job", unread);
            return;
        }
        struct timespec pause = {0, 1000000}; /* 1 ms */
        nanosleep(&pause, NULL);
    }
}

/* Ends the whole job, nonzero: PMPI_Abort, or in an OpenSHMEM program
 * shmem_global_exit, once the report has been read (report_read). */
static void end_the_job(void) {
    report_read();
#if defined(FFD_MPI_SHMEM)
    if (shim.shmem) {
        pshmem_global_exit(SHIM_ABORT_CODE);
        return;
    }
#endif
    PMPI_Abort(MPI_COMM_WORLD, SHIM_ABORT_CODE);
}

static void act_on_failure(const deferred *f) {
    report(f);
    if (shim.mode == ON_FAILURE_ABORT)
        end_the_job();
}

static void on_failed(const ffd_event_t *ev, deferred *later) {
    shim.any_failure = true;
    if (ffd_is_excluded(shim.ffd) == 1) {
        /* The others declared this rank failed; its SELF_EXCLUDED event
         * follows. It reports and acts on no failure: the ranks still in
         * the job have their own reporter, and reporter() would name this
         * rank (ffd_is_alive says FFD_ERR_STOPPED for every rank now). A
         * stopped rank that Open MPI 4.1's teardown resumed after the
         * reporter's MPI_Abort learned the reporter's exit here, and used
         * to print a second report and call a second MPI_Abort. */
        say(LOG_INFO, "rank %" PRIu32 " failed (cause %s), learned after this rank was declared failed: left to the others",
            ev->rank, cause_name(ev->cause));
        return;
    }
    if (shim.ending) {
        /* Abort mode, the job is ending: later failures are its teardown. */
        say(LOG_INFO, "rank %" PRIu32 " failed (cause %s) while the job ends", ev->rank, cause_name(ev->cause));
        return;
    }
    if (shim.mode == ON_FAILURE_ABORT)
        shim.ending = true;
    deferred f = {.rank = ev->rank,
                  .detector = ev->detector,
                  .cause = ev->cause,
                  .time_ns = ev->time_ns,
                  .due_ns = monotonic_ns() + (shim.shmem ? SHIM_BACKSTOP_SHMEM_NS : SHIM_BACKSTOP_NS),
                  .reporter = reporter(),
                  .pending = true,
                  .last = false};
    if (shim.mode == ON_FAILURE_ULFM) {
        ulfm_inject(ev->rank);
        fence(ev->rank);
    }
    if (f.reporter == shim.rank) {
        act_on_failure(&f);
    } else {
        say(LOG_INFO, "rank %" PRIu32 " failed: cause %s, declared by rank %" PRIu32, ev->rank,
            cause_name(ev->cause), ev->detector);
        if (shim.mode == ON_FAILURE_ABORT && !later->pending)
            *later = f;
    }
}

static void on_event(const ffd_event_t *ev, deferred *later) {
    switch (ev->kind) {
    case FFD_EVENT_FAILED:
        on_failed(ev, later);
        break;
    case FFD_EVENT_SELF_EXCLUDED:
        if (shim.ending) {
            say(LOG_INFO, "declared failed by the others (rank %" PRIu32 " told it) while the job ends",
                ev->detector);
            break;
        }
        say(LOG_ERROR, "the other ranks declared this rank failed (rank %" PRIu32 " told it); FFD_MPI_ON_FAILURE=%s%s",
            ev->detector, on_failure_names[shim.mode],
            shim.mode == ON_FAILURE_REPORT  ? ": going on"
            : shim.mode == ON_FAILURE_ABORT ? ": fail-stop, this process exits (status 1; the others' reporter ends the job)"
                                            : ": fail-stop, this process ends now");
        if (shim.mode == ON_FAILURE_ULFM)
            raise(SIGKILL); /* the others have it failed: it must not go on */
        else if (shim.mode == ON_FAILURE_ABORT) {
            report_read();          /* at most SHIM_REPORT_READ_NS */
            _exit(SHIM_ABORT_CODE); /* see SHIM_ABORT_CODE: not a second abort */
        }
        break;
    case FFD_EVENT_STOPPED: {
        char why[512];
        ffd_state_t state;
        if (ffd_state(shim.ffd, &state, why, sizeof why, NULL) != FFD_OK)
            why[0] = '\0';
        say(LOG_ERROR, "ffd stopped (%s): failures are no longer watched from this rank", why);
        break;
    }
    default:
        break;
    }
}

static void *shim_thread(void *arg) {
    (void)arg;
    size_t cap = FFD_MAX_PAYLOAD;
    unsigned char *buf = malloc(cap);
    deferred later = {.pending = false};
    struct pollfd fds[2] = {{.fd = ffd_event_fd(shim.ffd), .events = POLLIN},
                            {.fd = shim.stop_fd, .events = POLLIN}};
    while (!atomic_load(&shim.stopping) && buf) {
        ffd_event_t ev;
        int rc;
        while ((rc = ffd_next_event(shim.ffd, &ev, buf, cap)) == FFD_OK || rc == FFD_BUFFER_TOO_SMALL) {
            if (rc == FFD_BUFFER_TOO_SMALL) { /* a large view: take it with room for it */
                unsigned char *bigger = realloc(buf, ev.payload_len);
                if (!bigger)
                    break;
                buf = bigger;
                cap = ev.payload_len;
                continue;
            }
            on_event(&ev, &later);
        }
        int timeout_ms = -1;
        int64_t now = monotonic_ns();
        if (boost.held > 0) {
            if (now >= boost.until_ns)
                boost_release();
            else
                timeout_ms = (int)((boost.until_ns - now) / 1000000) + 1;
        }
        if (later.pending) {
            int64_t left = later.due_ns - now;
            if (left <= 0 && !later.last && ffd_is_alive(shim.ffd, (uint32_t)later.reporter) != 1) {
                /* The reporter has ended: it was ending the job, which a
                 * slow launcher is still tearing down. */
                say(LOG_INFO,
                    "rank %d, which reports rank %" PRIu32 "'s failure, has ended; the job ends (this rank acts "
                    "if it still runs in %.0f s)",
                    later.reporter, later.rank, (double)SHIM_LAST_BACKSTOP_NS / 1e9);
                later.last = true;
                later.due_ns = now + SHIM_LAST_BACKSTOP_NS;
                continue;
            }
            if (left <= 0) {
                later.pending = false;
                act_on_failure(&later); /* the reporter did not end the job */
                continue;
            }
            int ms = (int)(left / 1000000) + 1;
            if (timeout_ms < 0 || ms < timeout_ms)
                timeout_ms = ms;
        }
        poll(fds, 2, timeout_ms);
    }
    free(buf);
    return NULL;
}

/* ---- start and end ----------------------------------------------------- */

static int oob_allgather(void *userdata, const void *mine, size_t len, void *all) {
    (void)userdata;
    if (len > (size_t)INT32_MAX)
        return -1;
    return PMPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, shim.comm);
}

/* Where ULFM stands in this job. */
enum ulfm_state {
    ULFM_NO_HEADERS, /* this MPI's headers have no MPIX_ERR_PROC_FAILED */
    ULFM_NO_CVAR,    /* no control variable mpi_ft_enable: not Open MPI's ULFM */
    ULFM_OFF,        /* mpi_ft_enable is false */
    ULFM_ON,         /* mpi_ft_enable is true */
};

static const char *ulfm_state_text(enum ulfm_state s) {
    switch (s) {
    case ULFM_NO_HEADERS:
        return "this MPI's headers have no MPIX_ERR_PROC_FAILED";
    case ULFM_NO_CVAR:
        return "this MPI has no control variable mpi_ft_enable (it is not Open MPI with ULFM)";
    case ULFM_OFF:
        return "this job runs with it off (mpi_ft_enable is false)";
    default:
        return "it is on";
    }
}

/* Whether Open MPI's ULFM fault tolerance is on in this job: its control
 * variable mpi_ft_enable (set by mpirun --with-ft ulfm, or --mca
 * mpi_ft_enable true), read through MPI_T. */
static enum ulfm_state ulfm_state(void) {
#if SHIM_HAVE_ULFM
    int provided;
    if (PMPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS)
        return ULFM_NO_CVAR;
    enum ulfm_state state = ULFM_NO_CVAR;
    int index;
    if (PMPI_T_cvar_get_index("mpi_ft_enable", &index) == MPI_SUCCESS) {
        char name[256], desc[256];
        int name_len = sizeof name, desc_len = sizeof desc, verbosity, bind, scope;
        MPI_Datatype type;
        MPI_T_enum enumtype;
        MPI_T_cvar_handle handle;
        int count = 0;
        if (PMPI_T_cvar_get_info(index, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len, &bind,
                                 &scope) == MPI_SUCCESS &&
            PMPI_T_cvar_handle_alloc(index, NULL, &handle, &count) == MPI_SUCCESS) {
            union {
                int i;
                unsigned u;
                _Bool b;
                char bytes[16];
            } value;
            memset(&value, 0, sizeof value);
            bool on = false;
            if (count == 1 && PMPI_T_cvar_read(handle, &value) == MPI_SUCCESS) {
                if (type == MPI_INT)
                    on = value.i != 0;
                else if (type == MPI_UNSIGNED)
                    on = value.u != 0;
                else if (type == MPI_C_BOOL)
                    on = value.b;
            }
            state = on ? ULFM_ON : ULFM_OFF;
            PMPI_T_cvar_handle_free(&handle);
        }
    }
    PMPI_T_finalize();
    return state;
#else
    return ULFM_NO_HEADERS;
#endif
}

/* FFD_MPI_ON_FAILURE: false (and a message) for a bad value. */
static bool parse_on_failure(char *why, size_t len) {
    const char *v = getenv("FFD_MPI_ON_FAILURE");
    shim.mode_was_set = v && *v;
    if (!shim.mode_was_set)
        return true;
    for (int i = 0; i < 3; i++) {
        if (strcmp(v, on_failure_names[i]) == 0) {
            shim.mode = (enum on_failure)i;
            return true;
        }
    }
    snprintf(why, len, "FFD_MPI_ON_FAILURE=`%s` is not accepted; accepted: %s", v, ACCEPTED);
    return false;
}

/* MPI_Init's failure: the message on stderr, then MPI_COMM_WORLD's error
 * handler (by default fatal: the job ends). */
static int fail_init(const char *why) {
    say(LOG_ERROR, "%s fails: %s", shim.shmem ? "shmem_init" : "MPI_Init", why);
#if defined(FFD_MPI_SHMEM)
    if (shim.shmem)
        pshmem_global_exit(SHIM_ABORT_CODE);
#endif
    int rc = MPI_ERR_OTHER;
    PMPI_Comm_call_errhandler(MPI_COMM_WORLD, rc);
    return rc;
}

/* Everything after PMPI_Init(_thread) succeeded. */
static int shim_start(void) {
    shim.log = log_level_from_env();
    PMPI_Comm_rank(MPI_COMM_WORLD, &shim.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &shim.size);
    char why[768];
    if (!parse_on_failure(why, sizeof why))
        return fail_init(why);
    enum ulfm_state ulfm_now = ulfm_state();
    bool ulfm = !shim.shmem && ulfm_now == ULFM_ON;
    shim.ft_on = ulfm;
    if (ulfm)
        finalize_fence_off = (bool *)dlsym(RTLD_DEFAULT, "ompi_async_mpi_finalize");
    if (!shim.mode_was_set)
        shim.mode = ulfm ? ON_FAILURE_ULFM : ON_FAILURE_ABORT;
    if (shim.mode == ON_FAILURE_ULFM) {
        if (shim.shmem) {
            snprintf(why, sizeof why,
                     "FFD_MPI_ON_FAILURE=ulfm: OpenSHMEM has no ULFM; accepted in an OpenSHMEM program: abort|report "
                     "(unset: abort)");
            return fail_init(why);
        }
        if (!ulfm) {
            snprintf(why, sizeof why,
                     "FFD_MPI_ON_FAILURE=ulfm needs Open MPI's ULFM with its fault tolerance on (mpirun "
                     "--with-ft ulfm, or --mca mpi_ft_enable true); %s; accepted: %s",
                     ulfm_state_text(ulfm_now), ACCEPTED);
            return fail_init(why);
        }
        const char *no = pmix_resolve();
        if (no) {
            snprintf(why, sizeof why, "FFD_MPI_ON_FAILURE=ulfm: %s", no);
            pmix_release();
            return fail_init(why);
        }
    }

    int rc = PMPI_Comm_dup(MPI_COMM_WORLD, &shim.comm);
    if (rc != MPI_SUCCESS) {
        pmix_release();
        return fail_init("MPI_Comm_dup(MPI_COMM_WORLD) failed");
    }
    PMPI_Comm_set_name(shim.comm, "ffd (libffd_mpi)");

    ffd_config_t *cfg = NULL;
    rc = ffd_config_from_env(&cfg);
    if (rc == FFD_OK) {
        ffd_oob_t oob = {.rank = (uint32_t)shim.rank,
                         .size = (uint32_t)shim.size,
                         .allgather = oob_allgather,
                         .userdata = NULL};
        shim.init_realtime_ns = realtime_ns();
        rc = ffd_init(&oob, cfg, &shim.ffd);
        ffd_config_free(cfg);
    }
    if (rc != FFD_OK) {
        char msg[512];
        ffd_last_error_message(msg, sizeof msg, NULL);
        snprintf(why, sizeof why, "ffd did not start: %s: %s", ffd_strerror(rc), msg);
        pmix_release();
        return fail_init(why);
    }
    /* ffd's clock (events' time_ns) starts inside ffd_init, after the
     * exchange, which a loaded machine can stretch to most of a second:
     * place its zero on the wall clock from a reading of both. */
    uint64_t uptime_ns = 0;
    int64_t realtime = realtime_ns();
    shim.clock_realtime_ns = ffd_uptime(shim.ffd, &uptime_ns) == FFD_OK ? realtime - (int64_t)uptime_ns
                                                                        : shim.init_realtime_ns;
    rc = open_peer_pidfds();
    if (rc != MPI_SUCCESS) {
        ffd_finalize(&shim.ffd);
        pmix_release();
        return fail_init("the exchange of host identities (MPI_Allgather) failed");
    }
    shim.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (shim.stop_fd < 0 || pthread_create(&shim.thread, NULL, shim_thread, NULL) != 0) {
        snprintf(why, sizeof why, "cannot start the shim's thread: %s", strerror(errno));
        ffd_finalize(&shim.ffd);
        pmix_release();
        return fail_init(why);
    }
    shim.thread_running = true;
    shim.started = true;
    say(LOG_INFO, "ffd up, %d ranks; FFD_MPI_ON_FAILURE=%s%s", shim.size, on_failure_names[shim.mode],
        shim.mode_was_set ? "" : (ulfm ? " (default: ULFM's fault tolerance is on)" : " (default)"));
    return MPI_SUCCESS;
}

static void shim_end(void) {
    if (!shim.started)
        return;
    shim.started = false;
    if (shim.thread_running) {
        atomic_store(&shim.stopping, true);
        uint64_t one = 1;
        ssize_t w = write(shim.stop_fd, &one, sizeof one);
        (void)w;
        pthread_join(shim.thread, NULL);
        shim.thread_running = false;
    }
    boost_release();
    int rc = ffd_finalize(&shim.ffd);
    if (rc != FFD_OK)
        say(LOG_WARN, "ffd_finalize: %s", ffd_strerror(rc));
    /* MPI_Comm_free is collective: skip it once a rank failed (MPI_Finalize
     * frees what is left). */
    if (!shim.any_failure)
        PMPI_Comm_free(&shim.comm);
    if (shim.pidfds) {
        for (int r = 0; r < shim.size; r++)
            if (shim.pidfds[r] >= 0)
                close(shim.pidfds[r]);
        free(shim.pidfds);
        shim.pidfds = NULL;
    }
    close(shim.stop_fd);
    shim.stop_fd = -1;
    pmix_release();
}

SHIM_EXPORT int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc != MPI_SUCCESS || shim.started)
        return rc;
    return shim_start();
}

SHIM_EXPORT int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc != MPI_SUCCESS || shim.started)
        return rc;
    return shim_start();
}

SHIM_EXPORT int MPI_Finalize(void) {
    bool ft_on = shim.started && shim.ft_on;
    shim_end();
    if (ft_on) {
        if (finalize_fence_off) {
            *finalize_fence_off = true;
            say(LOG_INFO, "MPI_Finalize without its PMIx fence (ULFM's finalize synchronizes the survivors)");
        } else
            say(LOG_WARN, "this MPI has no ompi_async_mpi_finalize: MPI_Finalize's PMIx fence stays on, and may "
                          "wait forever for a rank that died (docs/embedding.md, \"MPI_Finalize under ULFM\")");
    }
    return PMPI_Finalize();
}

#if defined(FFD_MPI_SHMEM)
/* OpenSHMEM (Open MPI's oshmem, built with oshcc -DFFD_MPI_SHMEM): its
 * shmem_init starts Open MPI without MPI_Init, so the shim takes these
 * entry points too (oshmem's shmem_* are weak aliases of pshmem_*). PE
 * numbers are MPI_COMM_WORLD ranks there, and ffd starts over
 * PMPI_Allgather as in an MPI program. */
static void shmem_start(void) {
    if (shim.started)
        return;
    shim.shmem = true;
    shim_start();
}

SHIM_EXPORT void shmem_init(void) {
    pshmem_init();
    shmem_start();
}

SHIM_EXPORT int shmem_init_thread(int requested, int *provided) {
    int rc = pshmem_init_thread(requested, provided);
    if (rc == 0)
        shmem_start();
    return rc;
}

SHIM_EXPORT void start_pes(int npes) {
    pstart_pes(npes);
    shmem_start();
}

SHIM_EXPORT void shmem_finalize(void) {
    shim_end();
    pshmem_finalize();
}
#endif
