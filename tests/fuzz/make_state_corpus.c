/* Writes the seed corpus of fuzz_state (tests/fuzz/corpus/state): states the encoder writes
 * (an epoch boundary, a sparse delta list, a dense bitmap, drop_last, the largest ids; version
 * 1 as the previous library wrote them, version 2 with and without a group rank's block) and
 * broken variants of them (magic, version, checksum, truncated, a group in version 1 or of a
 * wrong size, a wrong count, a group step that does not match the set).
 *   make_state_corpus DIR          writes the files
 *   make_state_corpus --check DIR  fails when a committed seed differs from what it would write
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/resume_state.h"

static int check_mode, failures;

static void
emit(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (check_mode) {
        uint8_t *old = malloc(n + 1);
        FILE *f = fopen(path, "rb");
        size_t got = f ? fread(old, 1, n + 1, f) : 0;
        if (!f || got != n || memcmp(old, p, n) != 0) {
            fprintf(stderr, "%s differs from what make_state_corpus writes\n", path);
            failures++;
        }
        if (f)
            fclose(f);
        free(old);
        return;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void
reseal(uint8_t *p, size_t n)
{
    uint32_t crc = tsock__crc32(0, p, n - 4);
    for (int i = 0; i < 4; i++)
        p[n - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
}

/* A group rank's fields for the next state() (world 0: a solo consumer). */
static struct tsock__resume_state group_fields;
static int version = 1;

/* Encodes a state of n samples whose delivered ids are every `step`-th from `first`, `d` ids. */
static size_t
state(uint8_t *buf, size_t cap, uint64_t n, uint32_t batch, int drop_last, uint64_t first,
      uint64_t step, uint64_t d)
{
    uint8_t *bits = calloc((size_t)((n + 7) / 8), 1);
    for (uint64_t i = 0; i < d; i++)
        tsock__bit_set(bits, first + i * step);
    struct tsock__resume_state s = {.samples = n,
                                    .epoch = 3,
                                    .batch = batch,
                                    .drop_last = drop_last,
                                    .layout = 0x0123456789ABCDEFull,
                                    .delivered = d,
                                    .bits = bits,
                                    .version = version,
                                    .group = group_fields.world != 0,
                                    .world = group_fields.world,
                                    .nodes = group_fields.nodes,
                                    .node_rank = group_fields.node_rank,
                                    .index = group_fields.index};
    long len = tsock__state_encode(&s, buf, cap);
    free(bits);
    if (len < 0) {
        fprintf(stderr, "cannot encode a seed\n");
        exit(1);
    }
    return (size_t)len;
}

int
main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--check") == 0)
        check_mode = 1;
    else if (argc != 2) {
        fprintf(stderr, "usage: make_state_corpus [--check] DIR\n");
        return 2;
    }
    const char *dir = argv[argc - 1];
    static uint8_t buf[1 << 16];
    size_t n = state(buf, sizeof buf, 1000, 10, 0, 0, 1, 0);
    emit(dir, "boundary.bin", buf, n);
    n = state(buf, sizeof buf, 100000, 32, 0, 5, 997, 64);
    emit(dir, "sparse.bin", buf, n);
    n = state(buf, sizeof buf, 1000, 10, 1, 0, 2, 400);
    emit(dir, "dense-drop-last.bin", buf, n);
    n = state(buf, sizeof buf, 37, 1, 0, 36, 1, 1);
    emit(dir, "last-id.bin", buf, n);

    n = state(buf, sizeof buf, 1000, 10, 0, 0, 2, 400);
    buf[0] ^= 1;
    emit(dir, "bad-magic.bin", buf, n);
    buf[0] ^= 1;
    buf[4] = 3;
    reseal(buf, n);
    emit(dir, "bad-version.bin", buf, n);
    buf[4] = 1;
    reseal(buf, n);
    buf[100] ^= 0x10;
    emit(dir, "bad-checksum.bin", buf, n);
    buf[100] ^= 0x10;
    emit(dir, "bad-truncated.bin", buf, n - 1);
    buf[28] = 16;
    reseal(buf, n);
    emit(dir, "bad-group.bin", buf, n);
    buf[28] = 0;
    buf[40] = 10;
    reseal(buf, n);
    emit(dir, "bad-count.bin", buf, n);
    emit(dir, "bad-empty.bin", buf, 0);

    /* Version 2: a solo state, and group ranks' (3 ranks of batch 10 after 4 steps: 120 ids;
     * two nodes, at an epoch boundary). */
    version = 2;
    n = state(buf, sizeof buf, 1000, 10, 0, 0, 2, 400);
    emit(dir, "v2-solo.bin", buf, n);
    group_fields = (struct tsock__resume_state){.world = 3, .nodes = 1, .index = 4};
    n = state(buf, sizeof buf, 1000, 10, 0, 7, 3, 120);
    emit(dir, "v2-group.bin", buf, n);
    buf[49 + 12] = 13; /* step 13 > 120 / 10 */
    reseal(buf, n);
    emit(dir, "bad-group-step.bin", buf, n);
    buf[49 + 12] = 4;
    buf[28] = 16;
    reseal(buf, n);
    emit(dir, "bad-group-size.bin", buf, n);
    buf[28] = 20;
    buf[4] = 1;
    reseal(buf, n);
    emit(dir, "bad-group-v1.bin", buf, n);
    group_fields = (struct tsock__resume_state){.world = 4, .nodes = 2, .node_rank = 1};
    n = state(buf, sizeof buf, 1024, 8, 1, 0, 1, 0);
    emit(dir, "v2-group-boundary.bin", buf, n);
    return failures ? 1 : 0;
}
