// benches/exit_order.c: what a peer on another process sees, and when,
// after `kill -9` of a process holding MIB MiB of written memory.
//
//   cc -O2 -pthread -o exit_order benches/exit_order.c
//   ./exit_order MIB TRIALS [sentinel]
//
// The victim listens on a TCP port (a liveness port), greets the one
// connection the measuring parent opens to it (the watch) and holds it,
// then writes MIB MiB. The parent kills it and times, from the kill:
//   watch end  the watch's end of stream (the kernel closed the socket)
//   refused    a new connection to the port refused (ECONNREFUSED), tried
//              once at the watch's end
//   pidfd      the victim's pidfd readable (exit_notify)
// Linux's do_exit frees the address space (exit_mm) before it closes the
// files (exit_files), so without help the watch ends after the memory is
// freed, together with the pidfd.
//
// With `sentinel` (a prototype, not what ffd does): before it writes its
// memory the victim forks a small sentinel holding copies of the port's
// and the watch's descriptors, and a thread of the victim puts a word of a
// shared page on its robust-futex list holding its TID. The kernel walks
// that list when the thread exits (exit_mm_release, before the address
// space is freed), sets FUTEX_OWNER_DIED and wakes the sentinel, which
// shuts both sockets down: the watch ends and the port refuses before the
// teardown. Medians of TRIALS kills; load makes single kills noisy.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

struct shared {
    struct robust_list entry;
    _Atomic uint32_t word;
    struct robust_list_head head;
    _Atomic int ready;
};
static struct shared *sh;

static void *holder(void *arg) {
    (void)arg;
    sh->head.list.next = &sh->entry;
    sh->entry.next = &sh->head.list;
    sh->head.futex_offset = (long)((char *)&sh->word - (char *)&sh->entry);
    sh->head.list_op_pending = NULL;
    sh->word = (uint32_t)syscall(SYS_gettid);
    syscall(SYS_set_robust_list, &sh->head, sizeof sh->head);
    sh->ready = 1;
    for (;;) pause();
    return NULL;
}

static void sentinel(int port, int watch) {
    while (!sh->ready) usleep(100);
    for (;;) {
        uint32_t w = sh->word;
        if (w & FUTEX_OWNER_DIED) break;
        if (!(w & FUTEX_WAITERS)) {
            uint32_t seen = w;
            if (!atomic_compare_exchange_strong(&sh->word, &seen, w | FUTEX_WAITERS)) continue;
            w |= FUTEX_WAITERS;
        }
        syscall(SYS_futex, &sh->word, FUTEX_WAIT, w, NULL, NULL, 0);
    }
    shutdown(watch, SHUT_RDWR);
    shutdown(port, SHUT_RD); /* a listening socket: back to CLOSE, SYNs are reset */
    _exit(0);
}

static int cmp(const void *a, const void *b) {
    double d = *(const double *)a - *(const double *)b;
    return d < 0 ? -1 : d > 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MIB TRIALS [sentinel]\n", argv[0]);
        return 2;
    }
    int mib = atoi(argv[1]), trials = atoi(argv[2]);
    int use_sentinel = argc > 3 && strcmp(argv[3], "sentinel") == 0;
    if (trials < 1 || trials > 1000 || mib < 0) return 2;
    double *end = calloc(trials, sizeof *end), *pid = calloc(trials, sizeof *pid);
    double *ref = calloc(trials, sizeof *ref);
    int refused = 0;
    for (int tr = 0; tr < trials; tr++) {
        int p[2];
        if (pipe(p)) return 1;
        pid_t v = fork();
        if (v == 0) {
            sh = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
            int l = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
            socklen_t al = sizeof a;
            bind(l, (void *)&a, sizeof a);
            listen(l, 64);
            getsockname(l, (void *)&a, &al);
            write(p[1], &a, sizeof a);
            int c = accept(l, 0, 0);
            char g = 1;
            write(c, &g, 1);
            if (use_sentinel && fork() == 0) sentinel(l, c);
            size_t n = (size_t)mib << 20;
            if (n) {
                char *m = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                madvise(m, n, MADV_NOHUGEPAGE);
                memset(m, 1, n);
            }
            pthread_t t;
            pthread_create(&t, 0, holder, 0);
            while (!sh->ready) usleep(100);
            write(p[1], &a, sizeof a);
            for (;;) pause();
        }
        struct sockaddr_in a;
        read(p[0], &a, sizeof a);
        int w = socket(AF_INET, SOCK_STREAM, 0);
        connect(w, (void *)&a, sizeof a);
        char g;
        read(w, &g, 1);
        read(p[0], &a, sizeof a);
        int pfd = (int)syscall(SYS_pidfd_open, v, 0);
        usleep(50000);
        double t0 = now_ms();
        kill(v, SIGKILL);
        double tend = -1, tpid = -1, tref = -1;
        struct pollfd f[2] = {{w, POLLIN, 0}, {pfd, POLLIN, 0}};
        while (tend < 0 || tpid < 0) {
            poll(f, 2, 5000);
            double t = now_ms();
            if (tend < 0 && f[0].revents) {
                char b;
                if (read(w, &b, 1) <= 0) {
                    tend = t - t0;
                    f[0].fd = -1;
                    int q = socket(AF_INET, SOCK_STREAM, 0);
                    if (connect(q, (void *)&a, sizeof a) < 0 && errno == ECONNREFUSED) tref = now_ms() - t0;
                    close(q);
                }
            }
            if (tpid < 0 && f[1].revents) {
                tpid = t - t0;
                f[1].fd = -1;
            }
        }
        end[tr] = tend;
        pid[tr] = tpid;
        if (tref >= 0) ref[refused++] = tref;
        waitpid(v, 0, 0);
        close(w);
        close(pfd);
        close(p[0]);
        close(p[1]);
        usleep(20000);
    }
    qsort(end, trials, sizeof *end, cmp);
    qsort(pid, trials, sizeof *pid, cmp);
    qsort(ref, refused, sizeof *ref, cmp);
    printf("%5d MiB%s: watch end %.2f ms (%.2f-%.2f), refused %.2f ms (%d of %d probes), pidfd %.2f ms (%.2f-%.2f); medians of %d\n",
           mib, use_sentinel ? " sentinel" : "         ", end[trials / 2], end[0], end[trials - 1],
           refused ? ref[refused / 2] : -1.0, refused, trials, pid[trials / 2], pid[0], pid[trials - 1], trials);
    return 0;
}
