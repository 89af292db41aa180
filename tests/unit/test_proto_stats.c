/* Tests of the statistics messages of the wire codec (libtsock/proto): STATS_REQUEST,
 * CONSUMER_STATS and STATS_REPLY, and the status-text rule.
 *
 * As in test_proto.c, the layout is checked against golden frames written from
 * docs/protocol.md and against a naive encoder written from the same page that encodes
 * whatever a struct holds; every rule is tested by breaking exactly that rule in an otherwise
 * valid reply, which the codec's encoder must refuse (-EINVAL) and its decoder must refuse
 * (TSOCK_E_PROTOCOL). Decoding runs on exactly-sized heap copies, so under AddressSanitizer a
 * read past the frame fails the test.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proto/proto.h"

#define BUF 16384

static void
store_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Heap copies of exactly `len` bytes, decoded by the reply decoder or the generic one. */
static int
decode_reply(const uint8_t *bytes, size_t len, struct tsock__stats_reply *r)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        abort();
    if (len)
        memcpy(copy, bytes, len);
    int rc = tsock__stats_reply_decode(copy, len, r);
    free(copy);
    return rc;
}

static int
decode_msg(const uint8_t *bytes, size_t len, struct tsock__msg *m)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        abort();
    if (len)
        memcpy(copy, bytes, len);
    int rc = tsock__msg_decode(copy, len, m);
    free(copy);
    return rc;
}

/* ---- the naive encoder, from docs/protocol.md -------------------------------------------- */

struct wire {
    uint8_t b[BUF];
    size_t n;
};

static void
w_le(struct wire *w, uint64_t v, unsigned n)
{
    store_le(w->b + w->n, v, n);
    w->n += n;
}

static void
w_bytes(struct wire *w, const char *s, size_t len)
{
    memcpy(w->b + w->n, s, len);
    w->n += len;
}

static void
w_consumer(struct wire *w, const struct tsock__stats_consumer *c)
{
    const char *end = memchr(c->name, '\0', sizeof c->name);
    size_t len = end ? (size_t)(end - c->name) : sizeof c->name;
    w_le(w, c->id, 8);
    w_le(w, c->pid, 4);
    w_le(w, c->flags, 4);
    w_le(w, len, 1);
    w_bytes(w, c->name, len);
    w_le(w, c->batches, 8);
    w_le(w, c->samples, 8);
    w_le(w, c->released, 8);
    w_le(w, c->held, 4);
    w_le(w, c->lag, 8);
    w_le(w, c->rate_milli, 8);
    w_le(w, c->own.batches, 8);
    w_le(w, c->own.samples, 8);
    w_le(w, c->own.epochs, 8);
    w_le(w, c->own.wait_ns, 8);
}

/* `status_len` lets a test put more bytes on the wire than the struct's array could hold. */
static void
spec_encode_text(const struct tsock__stats_reply *r, const char *status, size_t status_len,
                 struct wire *w)
{
    const struct tsock__stats_producer *p = &r->producer;
    w->n = 0;
    w_le(w, 0x4B435354u, 4);
    w_le(w, TSOCK__PROTO_VERSION, 2); /* the header is the same as every message's */
    w_le(w, 13, 2);
    w_le(w, 0, 4);
    w_le(w, r->request_id, 8);
    w_le(w, p->pid, 4);
    w_le(w, p->slots, 4);
    w_le(w, p->free_slots, 4);
    w_le(w, p->held, 4);
    w_le(w, p->batches, 8);
    w_le(w, p->samples, 8);
    w_le(w, p->epochs, 8);
    w_le(w, p->released, 8);
    w_le(w, p->joined, 8);
    w_le(w, p->lost, 8);
    w_le(w, p->bad_messages, 8);
    w_le(w, p->wait_ns, 8);
    w_le(w, p->uptime_ns, 8);
    w_le(w, status_len, 2);
    w_bytes(w, status, status_len);
    w_le(w, r->consumer_count, 1);
    for (uint32_t i = 0; i < r->consumer_count && i < TSOCK__STATS_MAX_CONSUMERS; i++)
        w_consumer(w, &r->consumers[i]);
    store_le(w->b + 8, w->n - 12, 4);
}

static void
spec_encode(const struct tsock__stats_reply *r, struct wire *w)
{
    spec_encode_text(r, r->status, strnlen(r->status, sizeof r->status), w);
}

static int
spec_decode(const struct tsock__stats_reply *r)
{
    static struct wire w;
    static struct tsock__stats_reply d;
    spec_encode(r, &w);
    return decode_reply(w.b, w.n, &d);
}

static uint8_t scratch[BUF];

/* r breaks exactly one rule: both directions refuse it. */
#define EXPECT_INVALID(r)                                                                          \
    do {                                                                                           \
        CHECK_EQ(tsock__stats_reply_encode(&(r), scratch, sizeof scratch), -EINVAL);               \
        CHECK_EQ(spec_decode(&(r)), TSOCK_E_PROTOCOL);                                             \
    } while (0)

#define EXPECT_VALID(r)                                                                            \
    do {                                                                                           \
        CHECK(tsock__stats_reply_encode(&(r), scratch, sizeof scratch) > 0);                       \
        CHECK_EQ(spec_decode(&(r)), 0);                                                            \
    } while (0)

/* ---- sample replies ---------------------------------------------------------------------- */

static void
make_consumer(struct tsock__stats_consumer *c, uint64_t id, const char *name)
{
    memset(c, 0, sizeof *c);
    c->id = id;
    c->pid = (uint32_t)(1000 + id);
    c->flags = TSOCK__STATS_REPORTED;
    strcpy(c->name, name);
    c->batches = 100 + id;
    c->samples = 3200 + id;
    c->released = 98 + id;
    c->held = 2;
    c->lag = 1;
    c->rate_milli = 41500;
    c->own = (struct tsock__msg_consumer_stats){97, 3104, 1, 123456789};
}

/* Two consumers, a status, figures of every size. */
static void
make_reply(struct tsock__stats_reply *r)
{
    memset(r, 0, sizeof *r);
    r->request_id = 0xFEDCBA9876543210u;
    r->producer = (struct tsock__stats_producer){.pid = 4242,
                                                 .slots = 8,
                                                 .free_slots = 3,
                                                 .held = 4,
                                                 .batches = 102,
                                                 .samples = 3264,
                                                 .epochs = 1,
                                                 .released = 197,
                                                 .joined = 3,
                                                 .lost = 1,
                                                 .bad_messages = 5,
                                                 .wait_ns = 1500000000u,
                                                 .uptime_ns = 9000000000u};
    strcpy(r->status, "{\"images_per_s\": 2410.5, \"decoder\": \"caf\xc3\xa9\"}");
    r->consumer_count = 2;
    make_consumer(&r->consumers[0], 0, "trainer-0");
    make_consumer(&r->consumers[1], 2, "");
    r->consumers[1].flags = TSOCK__STATS_PAUSED;
    r->consumers[1].own = (struct tsock__msg_consumer_stats){0, 0, 0, 0};
}

/* The largest reply: 64 consumers with 63-byte names and a status of TSOCK_MAX_STATUS bytes. */
static void
make_reply_max(struct tsock__stats_reply *r)
{
    make_reply(r);
    r->producer.slots = 1024;
    r->producer.free_slots = 0;
    r->producer.held = 1024;
    memset(r->status, 'x', TSOCK_MAX_STATUS);
    r->status[TSOCK_MAX_STATUS] = '\0';
    r->consumer_count = TSOCK__STATS_MAX_CONSUMERS;
    for (uint32_t i = 0; i < TSOCK__STATS_MAX_CONSUMERS; i++) {
        char name[TSOCK_MAX_NAME + 1];
        memset(name, 'a' + (char)(i % 26), TSOCK_MAX_NAME);
        name[TSOCK_MAX_NAME] = '\0';
        make_consumer(&r->consumers[i], UINT64_MAX - i, name);
        r->consumers[i].held = 1024;
        r->consumers[i].flags = TSOCK__STATS_PAUSED | TSOCK__STATS_REPORTED;
    }
}

/* ---- round trips ------------------------------------------------------------------------- */

static void
test_reply_roundtrip_one(const struct tsock__stats_reply *r)
{
    static uint8_t buf[BUF], out[BUF];
    static struct wire w;
    static struct tsock__stats_reply d;
    struct tsock__msg m;
    int n = tsock__stats_reply_encode(r, buf, sizeof buf);

    CHECK(n >= TSOCK__PROTO_HEADER_SIZE && n <= TSOCK__PROTO_MAX_MESSAGE);
    if (n < TSOCK__PROTO_HEADER_SIZE)
        return;
    spec_encode(r, &w);
    CHECK_EQ(w.n, n);
    CHECK(memcmp(w.b, buf, w.n) == 0);
    CHECK_EQ(decode_reply(buf, (size_t)n, &d), 0);
    CHECK(memcmp(&d, r, sizeof d) == 0);
    CHECK_EQ(tsock__msg_peek_type(buf, (size_t)n), TSOCK__MSG_STATS_REPLY);
    /* Producers and consumers never expect one: the generic decoder refuses it. */
    CHECK_EQ(decode_msg(buf, (size_t)n, &m), TSOCK_E_PROTOCOL);

    for (int len = 0; len < n; len++) {
        CHECK_EQ(decode_reply(buf, (size_t)len, &d), TSOCK_E_PROTOCOL);
        if (len >= TSOCK__PROTO_HEADER_SIZE) {
            memcpy(out, buf, (size_t)len);
            store_le(out + 8, (uint64_t)len - 12, 4);
            CHECK_EQ(decode_reply(out, (size_t)len, &d), TSOCK_E_PROTOCOL);
        }
    }
    memcpy(out, buf, (size_t)n);
    out[n] = 0;
    CHECK_EQ(decode_reply(out, (size_t)n + 1, &d), TSOCK_E_PROTOCOL);
    store_le(out + 8, (uint64_t)n + 1 - 12, 4);
    CHECK_EQ(decode_reply(out, (size_t)n + 1, &d), TSOCK_E_PROTOCOL);

    for (int size = 0; size < n; size += size < 300 ? 1 : 97) {
        memset(out, 0xA5, sizeof out);
        CHECK_EQ(tsock__stats_reply_encode(r, out, (size_t)size), -ENOBUFS);
        int untouched = 1;
        for (size_t i = (size_t)size; i < sizeof out; i++)
            untouched &= out[i] == 0xA5;
        CHECK(untouched);
    }
    CHECK_EQ(tsock__stats_reply_encode(r, out, (size_t)n), n);
}

static void
test_reply_roundtrip(void)
{
    static struct tsock__stats_reply r;
    make_reply(&r);
    test_reply_roundtrip_one(&r);
    r.consumer_count = 0;
    memset(r.consumers, 0, sizeof r.consumers); /* what the decoder leaves in unused entries */
    memset(r.status, 0, sizeof r.status);
    test_reply_roundtrip_one(&r);
    memset(&r.producer, 0, sizeof r.producer);
    r.producer.slots = 1; /* the smallest ring the wire allows */
    test_reply_roundtrip_one(&r);
    make_reply_max(&r);
    test_reply_roundtrip_one(&r);
    /* The largest reply there is: 96 + 2 + 4096 + 1 + 64 x (93 + 63) bytes of body. */
    CHECK_EQ(tsock__stats_reply_encode(&r, scratch, sizeof scratch),
             12 + 96 + 2 + 4096 + 1 + 64 * (93 + 63));
}

/* ---- golden frames ----------------------------------------------------------------------- */

#define LE16(v) (uint8_t)((v)&0xFF), (uint8_t)(((v) >> 8) & 0xFF)
#define LE32(v) LE16((v)&0xFFFF), LE16(((v) >> 16) & 0xFFFF)
#define LE64(v) LE32((v)&0xFFFFFFFFull), LE32(((v) >> 32) & 0xFFFFFFFFull)
/* The header's version byte: these messages keep their layout whatever the version number. */
#define V TSOCK__PROTO_VERSION

static void
test_golden(void)
{
    static const uint8_t request[] = {'T',  'S',  'C',  'K',  V,    0,    12,   0,
                                      8,    0,    0,    0, /* header */
                                      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    static const uint8_t own[] = {'T',
                                  'S',
                                  'C',
                                  'K',
                                  V,
                                  0,
                                  14,
                                  0,
                                  32,
                                  0,
                                  0,
                                  0,
                                  LE64(40ull),       /* batches */
                                  LE64(1280ull),     /* samples */
                                  LE64(1ull),        /* epochs */
                                  LE64(2500000ull)}; /* wait_ns */
    static const uint8_t reply[] = {'T',
                                    'S',
                                    'C',
                                    'K',
                                    V,
                                    0,
                                    13,
                                    0,
                                    LE32(200u),    /* header: STATS_REPLY, body 200 */
                                    LE64(7ull),    /* request_id */
                                    LE32(0x1234u), /* pid */
                                    LE32(4u),
                                    LE32(1u),
                                    LE32(2u), /* slots, free_slots, held */
                                    LE64(10ull),
                                    LE64(320ull),
                                    LE64(1ull), /* batches, samples, epochs */
                                    LE64(15ull),
                                    LE64(2ull),
                                    LE64(0ull), /* released, joined, lost */
                                    LE64(0ull),
                                    LE64(1000ull),
                                    LE64(2000000000ull), /* bad_messages, wait_ns, uptime_ns */
                                    LE16(7u),
                                    '{',
                                    '"',
                                    'a',
                                    '"',
                                    ':',
                                    '1',
                                    '}', /* status */
                                    1,   /* consumer_count */
                                    LE64(1ull),
                                    LE32(0x2222u),
                                    LE32(2u), /* id, pid, flags: REPORTED */
                                    1,
                                    'c', /* name */
                                    LE64(10ull),
                                    LE64(320ull),
                                    LE64(8ull), /* batches, samples, released */
                                    LE32(2u),
                                    LE64(1ull),
                                    LE64(2500ull), /* held, lag, rate_milli: 2.5 per s */
                                    LE64(8ull),
                                    LE64(256ull),
                                    LE64(0ull),
                                    LE64(5000ull)}; /* own figures */
    struct tsock__msg m, d;
    static struct tsock__stats_reply r, rd;
    uint8_t buf[512];

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_STATS_REQUEST;
    m.u.stats_request.request_id = 0x0102030405060708u;
    CHECK_EQ(tsock__msg_encode(&m, buf, sizeof buf), sizeof request);
    CHECK(memcmp(buf, request, sizeof request) == 0);
    CHECK_EQ(decode_msg(request, sizeof request, &d), 0);
    CHECK(d.type == m.type &&
          memcmp(&d.u.stats_request, &m.u.stats_request, sizeof d.u.stats_request) == 0);

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_CONSUMER_STATS;
    m.u.consumer_stats = (struct tsock__msg_consumer_stats){40, 1280, 1, 2500000};
    CHECK_EQ(tsock__msg_encode(&m, buf, sizeof buf), sizeof own);
    CHECK(memcmp(buf, own, sizeof own) == 0);
    CHECK_EQ(decode_msg(own, sizeof own, &d), 0);
    CHECK(d.type == m.type &&
          memcmp(&d.u.consumer_stats, &m.u.consumer_stats, sizeof d.u.consumer_stats) == 0);

    memset(&r, 0, sizeof r);
    r.request_id = 7;
    r.producer = (struct tsock__stats_producer){.pid = 0x1234,
                                                .slots = 4,
                                                .free_slots = 1,
                                                .held = 2,
                                                .batches = 10,
                                                .samples = 320,
                                                .epochs = 1,
                                                .released = 15,
                                                .joined = 2,
                                                .wait_ns = 1000,
                                                .uptime_ns = 2000000000u};
    strcpy(r.status, "{\"a\":1}");
    r.consumer_count = 1;
    r.consumers[0] = (struct tsock__stats_consumer){.id = 1,
                                                    .pid = 0x2222,
                                                    .flags = TSOCK__STATS_REPORTED,
                                                    .batches = 10,
                                                    .samples = 320,
                                                    .released = 8,
                                                    .held = 2,
                                                    .lag = 1,
                                                    .rate_milli = 2500,
                                                    .own = {8, 256, 0, 5000}};
    strcpy(r.consumers[0].name, "c");
    CHECK_EQ(sizeof reply, 212);
    CHECK_EQ(tsock__stats_reply_encode(&r, buf, sizeof buf), sizeof reply);
    CHECK(memcmp(buf, reply, sizeof reply) == 0);
    CHECK_EQ(decode_reply(reply, sizeof reply, &rd), 0);
    CHECK(memcmp(&rd, &r, sizeof rd) == 0);
}

/* ---- the small messages: exact body sizes ------------------------------------------------- */

static void
test_small_bodies(void)
{
    static const int types[] = {TSOCK__MSG_STATS_REQUEST, TSOCK__MSG_CONSUMER_STATS};
    static const size_t sizes[] = {8, 32};
    uint8_t buf[64];
    struct tsock__msg d;

    for (int k = 0; k < 2; k++) {
        memset(buf, 0, sizeof buf);
        store_le(buf, TSOCK__PROTO_MAGIC, 4);
        store_le(buf + 4, TSOCK__PROTO_VERSION, 2);
        store_le(buf + 6, (uint64_t)types[k], 2);
        for (size_t body = 0; body <= 40; body++) {
            store_le(buf + 8, body, 4);
            CHECK_EQ(decode_msg(buf, 12 + body, &d), body == sizes[k] ? 0 : TSOCK_E_PROTOCOL);
        }
        /* Any values: every byte pattern of the right size is a valid message. */
        memset(buf + 12, 0xFF, sizes[k]);
        store_le(buf + 8, sizes[k], 4);
        CHECK_EQ(decode_msg(buf, 12 + sizes[k], &d), 0);
        CHECK_EQ(d.type, types[k]);
    }
}

/* ---- rules ------------------------------------------------------------------------------- */

static void
test_producer_rules(void)
{
    static struct tsock__stats_reply r;
    make_reply(&r);
    EXPECT_VALID(r);
    r.producer.slots = 0;
    EXPECT_INVALID(r);
    make_reply(&r);
    r.producer.slots = 1025;
    EXPECT_INVALID(r);
    r.producer.slots = 1024;
    EXPECT_VALID(r);
    make_reply(&r);
    r.producer.free_slots = r.producer.slots + 1;
    r.producer.held = 0;
    EXPECT_INVALID(r);
    r.producer.free_slots = r.producer.slots;
    EXPECT_VALID(r);
    r.producer.held = 1; /* every slot free and one held */
    EXPECT_INVALID(r);
    make_reply(&r);
    r.producer.held = r.producer.slots - r.producer.free_slots + 1;
    EXPECT_INVALID(r);
    r.producer.held--;
    EXPECT_VALID(r);
    r.producer.held = UINT32_MAX;
    EXPECT_INVALID(r);
}

static void
test_consumer_rules(void)
{
    static struct tsock__stats_reply r;
    make_reply(&r);
    r.consumers[0].flags = 4;
    EXPECT_INVALID(r);
    r.consumers[0].flags = 0x80000000u;
    EXPECT_INVALID(r);
    r.consumers[0].flags = TSOCK__STATS_PAUSED | TSOCK__STATS_REPORTED;
    EXPECT_VALID(r);
    r.consumers[1].held = r.producer.slots + 1;
    EXPECT_INVALID(r);
    r.consumers[1].held = r.producer.slots;
    EXPECT_VALID(r);
    make_reply(&r);
    r.consumers[1].id = r.consumers[0].id; /* ids are unique */
    EXPECT_INVALID(r);
    make_reply(&r);
    strcpy(r.consumers[0].name, "tab\there");
    EXPECT_INVALID(r);
    r.consumers[0].name[3] = 0x7f;
    EXPECT_INVALID(r);
    make_reply(&r);
    memset(r.consumers[0].name, 'n', sizeof r.consumers[0].name); /* 64 bytes, no NUL */
    EXPECT_INVALID(r);
    r.consumers[0].name[TSOCK_MAX_NAME] = '\0';
    EXPECT_VALID(r);
    make_reply(&r);
    r.consumer_count = TSOCK__STATS_MAX_CONSUMERS + 1;
    CHECK_EQ(tsock__stats_reply_encode(&r, scratch, sizeof scratch), -EINVAL);
}

/* On the wire, where the struct cannot express it: a count past 64, a name longer than 63. */
static void
test_wire_only_rules(void)
{
    static struct tsock__stats_reply r, d;
    static struct wire w;
    make_reply(&r);
    spec_encode(&r, &w);
    CHECK_EQ(decode_reply(w.b, w.n, &d), 0);
    size_t count_at = 12 + 96 + 2 + strlen(r.status);
    CHECK_EQ(w.b[count_at], 2);
    w.b[count_at] = TSOCK__STATS_MAX_CONSUMERS + 1;
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    w.b[count_at] = 0xFF;
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    w.b[count_at] = 1; /* fewer than there are: trailing bytes */
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    w.b[count_at] = 3; /* more than there are: truncated */
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    w.b[count_at] = 2;
    /* The first consumer's name length: 64, then past the frame. */
    size_t name_at = count_at + 1 + 16;
    CHECK_EQ(w.b[name_at], strlen("trainer-0"));
    w.b[name_at] = 64;
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    w.b[name_at] = 0xFF;
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    w.b[name_at] = (uint8_t)strlen("trainer-0");
    CHECK_EQ(decode_reply(w.b, w.n, &d), 0);
    /* Another type under the reply's layout, and another version. */
    store_le(w.b + 6, TSOCK__MSG_BATCH, 2);
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    store_le(w.b + 6, TSOCK__MSG_STATS_REPLY, 2);
    store_le(w.b + 4, TSOCK__PROTO_VERSION + 1, 2);
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_VERSION);
    CHECK_EQ(tsock__msg_peek_type(w.b, w.n), TSOCK_E_VERSION);
    store_le(w.b + 4, TSOCK__PROTO_VERSION, 2);
    store_le(w.b + 8, 5, 4);
    CHECK_EQ(tsock__msg_peek_type(w.b, w.n), TSOCK_E_PROTOCOL);
    /* A frame of another type handed to the reply decoder. */
    struct tsock__msg m;
    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_STATS_REQUEST;
    int n = tsock__msg_encode(&m, scratch, sizeof scratch);
    CHECK_EQ(decode_reply(scratch, (size_t)n, &d), TSOCK_E_PROTOCOL);
    CHECK_EQ(tsock__stats_reply_decode(NULL, 12, &d), -EINVAL);
    CHECK_EQ(tsock__stats_reply_decode(scratch, (size_t)n, NULL), -EINVAL);
    CHECK_EQ(tsock__stats_reply_encode(NULL, scratch, sizeof scratch), -EINVAL);
    CHECK_EQ(tsock__stats_reply_encode(&r, NULL, 12), -EINVAL);
}

/* Status texts the wire refuses: each is put on the wire by the naive encoder. */
static void
test_status_rules(void)
{
    static const struct {
        const char *text;
        size_t len;
    } bad[] = {
        {"a\0b", 3},             /* NUL */
        {"a\nb", 3},             /* newline */
        {"\t", 1},               /* tab */
        {"\x7f", 1},             /* DEL */
        {"\xc0\x80", 2},         /* overlong NUL */
        {"\xc1\xbf", 2},         /* overlong */
        {"\xe0\x80\xaf", 3},     /* overlong '/' */
        {"\xed\xa0\x80", 3},     /* a UTF-16 surrogate */
        {"\xf4\x90\x80\x80", 4}, /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 4}, /* no such lead byte */
        {"\x80", 1},             /* lone continuation byte */
        {"ab\xc3", 3},           /* sequence cut at the end */
        {"\xe2\x82", 2},         /* cut three-byte sequence */
        {"\xe2\x28\xa1", 3},     /* bad continuation */
        {"\xff", 1},
    };
    static const struct {
        const char *text;
        size_t len;
    } good[] = {
        {"", 0},
        {"{}", 2},
        {"caf\xc3\xa9", 5},
        {"\xe2\x82\xac", 3},     /* euro sign */
        {"\xf0\x9f\x98\x80", 4}, /* an emoji, four bytes */
        {"\xf4\x8f\xbf\xbf", 4}, /* U+10FFFF */
        {"\xee\x80\x80", 3},     /* U+E000, just past the surrogates */
        {"\xc2\x80", 2},         /* U+0080: a C1 control, allowed (only C0 and DEL are not) */
    };
    static struct tsock__stats_reply r, d;
    static struct wire w;
    make_reply(&r);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(!tsock__proto_text_ok(bad[i].text, bad[i].len));
        spec_encode_text(&r, bad[i].text, bad[i].len, &w);
        CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
        if (!memchr(bad[i].text, '\0', bad[i].len)) {
            memcpy(r.status, bad[i].text, bad[i].len);
            r.status[bad[i].len] = '\0';
            CHECK_EQ(tsock__stats_reply_encode(&r, scratch, sizeof scratch), -EINVAL);
            make_reply(&r);
        }
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK(tsock__proto_text_ok(good[i].text, good[i].len));
        spec_encode_text(&r, good[i].text, good[i].len, &w);
        CHECK_EQ(decode_reply(w.b, w.n, &d), 0);
        CHECK(strcmp(d.status, good[i].text) == 0);
    }
    /* Length: TSOCK_MAX_STATUS bytes pass, one more does not, nor a length past the frame. */
    static char big[TSOCK_MAX_STATUS + 2];
    memset(big, 'x', sizeof big);
    spec_encode_text(&r, big, TSOCK_MAX_STATUS, &w);
    CHECK_EQ(decode_reply(w.b, w.n, &d), 0);
    spec_encode_text(&r, big, TSOCK_MAX_STATUS + 1, &w);
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    spec_encode_text(&r, big, 10, &w);
    store_le(w.b + 12 + 96, 0xFFFF, 2);
    CHECK_EQ(decode_reply(w.b, w.n, &d), TSOCK_E_PROTOCOL);
    /* The struct's array without its NUL. */
    memset(r.status, 'x', sizeof r.status);
    CHECK_EQ(tsock__stats_reply_encode(&r, scratch, sizeof scratch), -EINVAL);
}

/* Byte flips in a valid reply: every result is a clean accept or reject, and an accepted
 * frame is the canonical encoding of what it decoded to. */
static void
test_mutations(void)
{
    static struct tsock__stats_reply r, d, again;
    static uint8_t buf[BUF], re[BUF];
    uint64_t state = 0x9E3779B97F4A7C15u;
    long accepted = 0, rejected = 0, bad = 0;
    make_reply(&r);
    int n = tsock__stats_reply_encode(&r, buf, sizeof buf);
    CHECK(n > 0);
    for (int i = 0; i < 20000 && n > 0; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        size_t pos = (size_t)(state % (uint64_t)n);
        uint8_t old = buf[pos];
        buf[pos] ^= (uint8_t)(state >> 32 | 1);
        int rc = decode_reply(buf, (size_t)n, &d);
        if (rc == 0) {
            accepted++;
            int m = tsock__stats_reply_encode(&d, re, sizeof re);
            bad += m != n || memcmp(re, buf, (size_t)n) != 0 ||
                   decode_reply(re, (size_t)n, &again) != 0 || memcmp(&again, &d, sizeof d) != 0;
        } else if (rc == TSOCK_E_PROTOCOL || rc == TSOCK_E_VERSION) {
            rejected++;
        } else {
            bad++;
        }
        buf[pos] = old;
    }
    CHECK(accepted > 0);
    CHECK(rejected > 0);
    CHECK_EQ(bad, 0);
}

int
main(void)
{
    test_reply_roundtrip();
    test_golden();
    test_small_bodies();
    test_producer_rules();
    test_consumer_rules();
    test_wire_only_rules();
    test_status_rules();
    test_mutations();
    return CHECK_DONE();
}
