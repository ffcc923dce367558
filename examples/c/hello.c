/*
 * hello: the smallest program that embeds ffd, built against an installed
 * ffd with pkg-config alone (tests/install.rs builds it this way, shared and
 * static):
 *
 *   ci/install "$PREFIX"
 *   export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
 *   cc examples/c/hello.c $(pkg-config --cflags --libs ffd) -Wl,-rpath,$PREFIX/lib -o hello
 *   cc examples/c/hello.c $(pkg-config --cflags --libs ffd-static) -o hello-static
 *   FFD_DOMAIN=lo ./hello
 *
 * It starts a one-rank job (its "allgather" copies its own bytes), asks
 * whether it is alive, and finalizes. Lines:
 *   version: ffd_version() V, FFD_VERSION V
 *   up: rank 0 of 1, alive 1, epoch 0
 *   finalized: success
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <ffd.h>

/* A job of one: everybody's bytes are mine. */
static int self_allgather(void *userdata, const void *mine, size_t len, void *all) {
    (void)userdata;
    memcpy(all, mine, len);
    return 0;
}

static int fail(const char *what, int rc) {
    char msg[512];
    ffd_last_error_message(msg, sizeof msg, NULL);
    printf("%s failed: %s: %s\n", what, ffd_strerror(rc), msg);
    return 1;
}

int main(void) {
    printf("version: ffd_version() %s, FFD_VERSION %s\n", ffd_version(), FFD_VERSION);

    ffd_config_t *cfg = NULL;
    int rc = ffd_config_from_env(&cfg);
    if (rc != FFD_OK)
        return fail("ffd_config_from_env", rc);
    ffd_oob_t oob = {.rank = 0, .size = 1, .allgather = self_allgather, .userdata = NULL};
    ffd_t *ffd = NULL;
    rc = ffd_init(&oob, cfg, &ffd);
    ffd_config_free(cfg);
    if (rc != FFD_OK)
        return fail("ffd_init", rc);

    uint64_t epoch = UINT64_MAX;
    ffd_epoch(ffd, &epoch);
    printf("up: rank 0 of 1, alive %d, epoch %llu\n", ffd_is_alive(ffd, 0), (unsigned long long)epoch);

    rc = ffd_finalize(&ffd);
    printf("finalized: %s\n", ffd_strerror(rc));
    return rc == FFD_OK ? 0 : 1;
}
