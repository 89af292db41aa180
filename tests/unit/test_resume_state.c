/* The consumer-state codec (libtsock/ring/resume_state.c): round trips of random sets in both
 * encodings, the size bound (about one bit per sample plus the header, less when sparse or
 * empty), and a clear refusal of every broken state: truncated, corrupt, another version,
 * fields out of range, sets that disagree with their count, and non-canonical encodings. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ring/resume_state.h"

static uint64_t rng = 0x2545F4914F6CDD1Du;

static uint64_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void
store_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Re-seals a state whose bytes a test changed, so that the check under test is the one hit. */
static void
reseal(uint8_t *buf, size_t len)
{
    store_le(buf + len - 4, tsock__crc32(0, buf, len - 4), 4);
}

/* A state of n samples with `d` random delivered ids, encoded into *out (malloc'ed). */
static size_t
make_state(uint64_t n, uint32_t batch, uint64_t d, uint8_t **out, uint8_t **bits_out)
{
    uint8_t *bits = calloc((size_t)((n + 7) / 8), 1);
    uint64_t set = 0;
    while (set < d) {
        uint64_t id = rnd() % n;
        if (!tsock__bit_test(bits, id)) {
            tsock__bit_set(bits, id);
            set++;
        }
    }
    struct tsock__resume_state s = {.samples = n,
                                    .epoch = rnd() % 1000,
                                    .batch = batch,
                                    .drop_last = (int)(rnd() & 1),
                                    .layout = rnd(),
                                    .delivered = d,
                                    .bits = bits};
    size_t size = tsock__state_size(&s);
    *out = malloc(size);
    CHECK_EQ(tsock__state_encode(&s, *out, size - 1), -EMSGSIZE);
    CHECK_EQ(tsock__state_encode(&s, *out, size), (long)size);
    *bits_out = bits;
    return size;
}

static void
test_round_trips(void)
{
    for (int iter = 0; iter < 400; iter++) {
        uint64_t n = 1 + rnd() % (iter < 200 ? 100 : 20000);
        uint32_t batch = 1 + (uint32_t)(rnd() % 64);
        uint64_t batches = (n - 1) / batch; /* whole batches that leave part of the epoch */
        uint64_t d = batches ? (rnd() % (batches + 1)) * batch : 0;
        uint8_t *buf, *bits;
        size_t len = make_state(n, batch, d, &buf, &bits);
        /* Bounded by one bit per sample plus the header and checksum; the header alone at an
         * epoch boundary. */
        CHECK(len <= TSOCK__STATE_HEADER_SIZE + (n + 7) / 8 + 4);
        if (d == 0)
            CHECK_EQ(len, TSOCK__STATE_HEADER_SIZE + 4);
        struct tsock__resume_state s;
        uint32_t *ids = NULL;
        const char *why = NULL;
        uint8_t *exact = malloc(len); /* exactly sized: ASan catches a read past it */
        memcpy(exact, buf, len);
        CHECK_EQ(tsock__state_decode(exact, len, &s, &ids, &why), 0);
        CHECK(s.samples == n && s.batch == batch && s.delivered == d);
        for (uint64_t i = 0; i < d; i++) {
            CHECK(tsock__bit_test(bits, ids[i]));
            if (i > 0)
                CHECK(ids[i] > ids[i - 1]);
        }
        /* Encoding what was decoded gives the same bytes back. */
        uint8_t *again = calloc((size_t)((n + 7) / 8), 1);
        for (uint64_t i = 0; i < d; i++)
            tsock__bit_set(again, ids[i]);
        s.bits = again;
        uint8_t *buf2 = malloc(len);
        CHECK_EQ(tsock__state_encode(&s, buf2, len), (long)len);
        CHECK(memcmp(buf, buf2, len) == 0);
        /* Any single flipped byte, and any truncation, is refused with a reason. */
        size_t at = (size_t)(rnd() % len);
        exact[at] ^= (uint8_t)(1 + rnd() % 255);
        free(ids);
        ids = NULL;
        CHECK_EQ(tsock__state_decode(exact, len, &s, &ids, &why), TSOCK_E_BAD_STATE);
        CHECK(why != NULL && ids == NULL);
        exact[at] = buf[at];
        size_t cut = (size_t)(rnd() % len);
        CHECK_EQ(tsock__state_decode(exact, cut, &s, &ids, &why), TSOCK_E_BAD_STATE);
        free(exact);
        free(buf);
        free(buf2);
        free(bits);
        free(again);
    }
}

/* Sparse sets take the delta list, dense ones the bitmap; both are far below 8 bytes an id. */
static void
test_sizes(void)
{
    uint8_t *buf, *bits;
    size_t len = make_state(1281167, 256, 256 * 10, &buf, &bits);
    CHECK(len < TSOCK__STATE_HEADER_SIZE + 4 + 2560 * 3);
    CHECK_EQ(buf[48], TSOCK__STATE_SET_DELTAS);
    free(buf);
    free(bits);
    len = make_state(1281167, 256, 256 * 2000, &buf, &bits);
    CHECK_EQ(len, TSOCK__STATE_HEADER_SIZE + (1281167 + 7) / 8 + 4);
    CHECK_EQ(buf[48], TSOCK__STATE_SET_BITMAP);
    free(buf);
    free(bits);
}

static const char *
decode_why(uint8_t *buf, size_t len)
{
    struct tsock__resume_state s;
    uint32_t *ids = NULL;
    const char *why = NULL;
    int r = tsock__state_decode(buf, len, &s, &ids, &why);
    free(ids);
    return r == 0 ? NULL : why;
}

/* Each field rule, broken alone in a state that is otherwise sealed correctly. */
static void
test_rules(void)
{
    uint8_t *buf, *bits;
    size_t len = make_state(1000, 10, 100, &buf, &bits);
    uint8_t *b = malloc(len);
#define BROKEN(stmt)                                                                               \
    do {                                                                                           \
        memcpy(b, buf, len);                                                                       \
        stmt;                                                                                      \
        reseal(b, len);                                                                            \
        CHECK(decode_why(b, len) != NULL);                                                         \
    } while (0)
    memcpy(b, buf, len);
    CHECK(decode_why(b, len) == NULL);
    BROKEN(b[0] = 'X');                           /* magic */
    BROKEN(store_le(b + 4, 3, 2));                /* another version */
    BROKEN(store_le(b + 6, 2, 2));                /* unknown flag */
    BROKEN(store_le(b + 8, 0, 8));                /* n = 0 */
    BROKEN(store_le(b + 8, (1ull << 32) + 1, 8)); /* n past the sampler's bound */
    BROKEN(store_le(b + 8, 999, 8));              /* n disagrees with the set */
    BROKEN(store_le(b + 24, 0, 4));               /* batch 0 */
    BROKEN(store_le(b + 24, 7, 4));               /* count not whole batches */
    BROKEN(store_le(b + 28, 8, 4));               /* a group */
    BROKEN(store_le(b + 40, 110, 8));             /* count disagrees with the set */
    BROKEN(store_le(b + 40, 0, 8));               /* count 0 with a set */
    BROKEN(b[48] = 3);                            /* unknown encoding */
    BROKEN(b[48] = TSOCK__STATE_SET_NONE);        /* no set with a count */
    /* Version and checksum are named as such. */
    memcpy(b, buf, len);
    store_le(b + 4, 3, 2);
    CHECK(strstr(decode_why(b, len), "version") != NULL);
    memcpy(b, buf, len);
    b[20] ^= 1;
    CHECK(strstr(decode_why(b, len), "checksum") != NULL);
    free(b);
    free(buf);
    free(bits);

    /* A count at n (the whole epoch: that is the next epoch's header) is no state. */
    uint8_t all[1] = {0x0F};
    struct tsock__resume_state s = {.samples = 4, .batch = 1, .delivered = 4, .bits = all};
    uint8_t out[128];
    CHECK_EQ(tsock__state_encode(&s, out, sizeof out), -EINVAL);
    s.delivered = 3; /* popcount disagrees */
    CHECK_EQ(tsock__state_encode(&s, out, sizeof out), -EINVAL);
    all[0] = 0x17; /* a bit past n */
    s.samples = 4;
    s.delivered = 3;
    CHECK_EQ(tsock__state_encode(&s, out, sizeof out), -EINVAL);

    /* Non-canonical delta lists: an overlong varint, an id past n, a list no smaller than the
     * bitmap. Built by hand: header, deltas, checksum. */
    struct tsock__resume_state h = {.samples = 4000, .batch = 1, .delivered = 1, .layout = 5};
    uint8_t one[1] = {0};
    uint8_t *big = calloc(500, 1);
    tsock__bit_set(big, 3);
    h.bits = big;
    long n = tsock__state_encode(&h, out, sizeof out);
    CHECK(n == TSOCK__STATE_HEADER_SIZE + 1 + 4);
    CHECK_EQ(out[48], TSOCK__STATE_SET_DELTAS);
    CHECK(decode_why(out, (size_t)n) == NULL);
    out[49] = 0x83; /* 3 as two bytes: 0x83 0x00 */
    out[50] = 0x00;
    reseal(out, (size_t)n + 1);
    CHECK(decode_why(out, (size_t)n + 1) != NULL);
    out[49] = 0xA0; /* 4000 + ...: past n */
    out[50] = 0x1F;
    reseal(out, (size_t)n + 1);
    CHECK(decode_why(out, (size_t)n + 1) != NULL);
    (void)one;
    free(big);
}

/* A group rank's state (version 2): its block round-trips and is checked; version 1 (the
 * previous library's solo states) still decodes and re-encodes to the same bytes; the
 * fingerprint ranks compare tells states of different steps apart. */
static void
test_group_states(void)
{
    uint8_t bits[125] = {0}; /* 1000 samples */
    uint32_t ids[120];
    for (uint32_t i = 0; i < 120; i++) {
        ids[i] = 7 + 3 * i;
        tsock__bit_set(bits, ids[i]);
    }
    struct tsock__resume_state g = {.samples = 1000,
                                    .epoch = 2,
                                    .batch = 10,
                                    .layout = 9,
                                    .delivered = 120,
                                    .bits = bits,
                                    .group = 1,
                                    .world = 3,
                                    .nodes = 1,
                                    .index = 4};
    uint8_t buf[512], again[512];
    long n = tsock__state_encode(&g, buf, sizeof buf);
    CHECK(n > 0 && (size_t)n == tsock__state_size(&g));
    CHECK_EQ(buf[4], 2);
    CHECK_EQ(buf[28], TSOCK__STATE_GROUP_SIZE);
    struct tsock__resume_state d;
    uint32_t *got = NULL;
    const char *why = NULL;
    CHECK_EQ(tsock__state_decode(buf, (size_t)n, &d, &got, &why), 0);
    CHECK(d.group == 1 && d.world == 3 && d.nodes == 1 && d.node_rank == 0 && d.index == 4 &&
          d.version == 2 && d.delivered == 120);
    CHECK(got && memcmp(got, ids, sizeof ids) == 0);
    uint64_t fp = tsock__state_group_fingerprint(&d, got);
    CHECK(fp != 0 && fp == tsock__state_group_fingerprint(&g, ids));
    /* Another step, epoch, world or set: another fingerprint. */
    struct tsock__resume_state other = d;
    other.index = 3;
    CHECK(tsock__state_group_fingerprint(&other, got) != fp);
    other = d;
    other.epoch = 3;
    CHECK(tsock__state_group_fingerprint(&other, got) != fp);
    other = d;
    other.world = 2;
    CHECK(tsock__state_group_fingerprint(&other, got) != fp);
    got[5]++;
    CHECK(tsock__state_group_fingerprint(&d, got) != fp);
    free(got);

    /* Each group rule broken alone. */
    struct tsock__resume_state bad = g;
    bad.version = 1; /* groups exist from version 2 */
    CHECK_EQ(tsock__state_encode(&bad, again, sizeof again), -EINVAL);
    bad = g;
    bad.node_rank = 1; /* not below nodes */
    CHECK_EQ(tsock__state_encode(&bad, again, sizeof again), -EINVAL);
    bad = g;
    bad.nodes = 2; /* world 3 is no multiple of 2 nodes */
    CHECK_EQ(tsock__state_encode(&bad, again, sizeof again), -EINVAL);
    bad = g;
    bad.index = 13; /* more steps than blocks in the set */
    CHECK_EQ(tsock__state_encode(&bad, again, sizeof again), -EINVAL);
    bad = g;
    bad.index = 0; /* a set without a step */
    CHECK_EQ(tsock__state_encode(&bad, again, sizeof again), -EINVAL);
    bad = g;
    bad.world = 0;
    CHECK_EQ(tsock__state_encode(&bad, again, sizeof again), -EINVAL);
    bad = g;
    bad.group = 0; /* group fields in a solo state */
    CHECK_EQ(tsock__state_encode(&bad, again, sizeof again), -EINVAL);
    memcpy(again, buf, (size_t)n);
    again[4] = 1;
    reseal(again, (size_t)n);
    CHECK(strstr(decode_why(again, (size_t)n), "version 1") != NULL);
    memcpy(again, buf, (size_t)n);
    again[28] = 24;
    reseal(again, (size_t)n);
    CHECK(strstr(decode_why(again, (size_t)n), "group block") != NULL);
    CHECK(decode_why(buf, TSOCK__STATE_HEADER_SIZE + 8) != NULL); /* cut inside the block */

    /* Version 1: decoded as such, re-encoded to the same bytes; version 2 by default. */
    struct tsock__resume_state solo = {
        .version = 1, .samples = 1000, .epoch = 1, .batch = 10, .delivered = 120, .bits = bits};
    n = tsock__state_encode(&solo, buf, sizeof buf);
    CHECK(n > 0 && buf[4] == 1 && buf[28] == 0);
    CHECK_EQ(tsock__state_decode(buf, (size_t)n, &d, &got, &why), 0);
    CHECK_EQ(d.version, 1);
    d.bits = bits;
    CHECK_EQ(tsock__state_encode(&d, again, sizeof again), n);
    CHECK(memcmp(again, buf, (size_t)n) == 0);
    free(got);
    solo.version = 0;
    CHECK_EQ(tsock__state_encode(&solo, buf, sizeof buf), n);
    CHECK_EQ(buf[4], TSOCK__STATE_VERSION);
}

int
main(void)
{
    test_group_states();
    test_round_trips();
    test_sizes();
    test_rules();
    CHECK_EQ(tsock__crc32(0, "123456789", 9), 0xCBF43926u); /* the standard check value */
    return CHECK_DONE();
}
