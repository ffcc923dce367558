/*
 * dropin_shmem_hello: the smallest OpenSHMEM program (no ffd code), for
 * tests/install.rs to run under the installed libffd_shmem.so (with
 * `--mca osc ^rdma`: without it Open MPI 4.1.4's shmem_finalize crashes
 * here, shim or not; docs/embedding.md, "OpenSHMEM").
 *
 * Lines: "PE P: hello from N PEs", "PE P: finalized".
 */
#include <shmem.h>
#include <stdio.h>

int main(void) {
    shmem_init();
    int me = shmem_my_pe(), size = shmem_n_pes();
    printf("PE %d: hello from %d PEs\n", me, size);
    fflush(stdout);
    shmem_barrier_all();
    shmem_finalize();
    printf("PE %d: finalized\n", me);
    fflush(stdout);
    return 0;
}
