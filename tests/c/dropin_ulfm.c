/*
 * dropin_ulfm: a plain ULFM program (no ffd code) for tests/dropin.rs,
 * run under Open MPI 5 `--with-ft ulfm` with ULFM's own detector off and
 * libffd_mpi.so preloaded.
 *
 * Every rank returns errors (MPI_ERRORS_RETURN). Two faults, each at a
 * time rank 0 chose and broadcast (--after-ms after the broadcast):
 * 1. rank --kill (default 3) raises SIGKILL; every other rank is blocked in
 *    MPI_Recv from it on MPI_COMM_WORLD and must get MPIX_ERR_PROC_FAILED;
 *    each then shrinks MPI_COMM_WORLD (MPIX_Comm_shrink);
 * 2. rank --stop (world rank, default 4) raises SIGSTOP; every other rank
 *    is blocked in MPI_Recv from it on the shrunk communicator and must get
 *    MPIX_ERR_PROC_FAILED (nothing in ULFM alone would ever tell them: a
 *    stopped process is alive to the launcher); each shrinks again, runs an
 *    MPI_Allreduce over the survivors and calls MPI_Finalize.
 *
 * With --kill-second the second victim raises SIGKILL instead of SIGSTOP
 * (docs/embedding.md, "MPI_Finalize under ULFM": the same program with no
 * shim then runs under ULFM alone, learning of both deaths from mpirun).
 *
 * Lines (one printf each, flushed; tests/dropin.rs reads them):
 *   rank R: up, pid P, N ranks
 *   rank V: raising SIGKILL|SIGSTOP (L ms after the planned time)
 *   rank V: continued after SIGSTOP            (must not happen: it is fenced)
 *   rank R: MPI_Recv from rank V: CLASS after T ms   (CLASS: MPIX_ERR_PROC_FAILED, MPI_SUCCESS, or the code)
 *   rank R: shrank to N ranks
 *   rank R: allreduce over N ranks: sum S
 *   rank R: finalized
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <mpi-ext.h>
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

static const char *class_name(int rc, char *buf, size_t len) {
    int cls = rc;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_SUCCESS)
        return "MPI_SUCCESS";
    if (cls == MPIX_ERR_PROC_FAILED)
        return "MPIX_ERR_PROC_FAILED";
    if (cls == MPIX_ERR_REVOKED)
        return "MPIX_ERR_REVOKED";
    snprintf(buf, len, "error class %d", cls);
    return buf;
}

/* The victim (world rank `victim`, rank `victim_here` in `comm`) raises
 * `sig` at a time rank 0 of `comm` chose; everybody else waits for it in
 * MPI_Recv and prints how that ended. */
static void fault(MPI_Comm comm, int me, int victim, int victim_here, int sig, int after_ms) {
    int64_t at = realtime_ns() + (int64_t)after_ms * 1000000;
    MPI_Bcast(&at, 1, MPI_INT64_T, 0, comm);
    if (me == victim) {
        sleep_until(at);
        printf("rank %d: raising %s (%.1f ms after the planned time)\n", me, sig == SIGKILL ? "SIGKILL" : "SIGSTOP",
               (realtime_ns() - at) / 1e6);
        fflush(stdout);
        raise(sig);
        printf("rank %d: continued after SIGSTOP\n", me);
        fflush(stdout);
        _exit(3);
    }
    int x = 0;
    int rc = MPI_Recv(&x, 1, MPI_INT, victim_here, 7, comm, MPI_STATUS_IGNORE);
    char buf[64];
    printf("rank %d: MPI_Recv from rank %d: %s after %.1f ms\n", me, victim, class_name(rc, buf, sizeof buf),
           (realtime_ns() - at) / 1e6);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int killed = 3, stopped = 4, after_ms = 1500, second = SIGSTOP;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--kill") == 0 && i + 1 < argc)
            killed = atoi(argv[++i]);
        else if (strcmp(argv[i], "--stop") == 0 && i + 1 < argc)
            stopped = atoi(argv[++i]);
        else if (strcmp(argv[i], "--after-ms") == 0 && i + 1 < argc)
            after_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kill-second") == 0)
            second = SIGKILL;
        else {
            fprintf(stderr, "usage: %s [--kill R] [--stop R] [--after-ms MS] [--kill-second]\n", argv[0]);
            return 2;
        }
    }
    MPI_Init(&argc, &argv);
    int me, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (killed == 0 || stopped == 0 || killed == stopped || killed >= size || stopped >= size) {
        if (me == 0)
            fprintf(stderr, "dropin_ulfm: --kill and --stop must be two different ranks in 1..%d\n", size - 1);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("rank %d: up, pid %d, %d ranks\n", me, (int)getpid(), size);
    fflush(stdout);

    fault(MPI_COMM_WORLD, me, killed, killed, SIGKILL, after_ms);
    MPI_Comm once;
    int rc = MPIX_Comm_shrink(MPI_COMM_WORLD, &once);
    int n = 0;
    if (rc == MPI_SUCCESS)
        MPI_Comm_size(once, &n);
    printf("rank %d: shrank to %d ranks\n", me, n);
    fflush(stdout);
    if (rc != MPI_SUCCESS)
        return 1;
    MPI_Comm_set_errhandler(once, MPI_ERRORS_RETURN);

    /* The stopped rank's rank in the shrunk communicator. */
    MPI_Group world_group, once_group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Comm_group(once, &once_group);
    int stopped_here = MPI_UNDEFINED;
    MPI_Group_translate_ranks(world_group, 1, &stopped, once_group, &stopped_here);
    fault(once, me, stopped, stopped_here, second, after_ms);

    MPI_Comm twice;
    rc = MPIX_Comm_shrink(once, &twice);
    n = 0;
    if (rc == MPI_SUCCESS)
        MPI_Comm_size(twice, &n);
    printf("rank %d: shrank to %d ranks\n", me, n);
    fflush(stdout);
    if (rc != MPI_SUCCESS)
        return 1;
    int one = 1, sum = 0;
    rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, twice);
    printf("rank %d: allreduce over %d ranks: sum %d%s\n", me, n, sum, rc == MPI_SUCCESS ? "" : " (failed)");
    fflush(stdout);
    MPI_Finalize();
    printf("rank %d: finalized\n", me);
    fflush(stdout);
    return 0;
}
