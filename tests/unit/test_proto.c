/* Tests of the wire codec (libtsock/proto).
 *
 * The byte layout is checked two ways that do not go through the codec: golden frames written
 * out by hand from docs/protocol.md, and spec_encode(), a second, deliberately naive encoder
 * written from the same document that writes whatever a struct holds, valid or not. Every
 * validity rule is tested by breaking exactly that rule in an otherwise valid message: the
 * codec's encoder must refuse it with -EINVAL and its decoder must refuse the naive encoding
 * with TSOCK_E_PROTOCOL. Decoding always runs on an exactly-sized heap copy of the bytes, so
 * under AddressSanitizer a read past the frame fails the test.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proto/proto.h"

#define BUF                                                                                        \
    65536 /* room for the largest WELCOME: a CUDA ring, its largest slot count, 32 KiB of class    \
             names */
#define RANDOM_MAX 4096 /* random frames: long enough for every body parser */
#define MAX_SLOTS 1024u

static uint8_t scratch[BUF];

/* xorshift64: fixed seed, so every run tests the same inputs. */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t
rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* The heap copy decode_exact decoded last: a decoded WELCOME's attach blob is a view into it,
 * so it stays allocated until the next decode_exact (or release_decoded). */
static uint8_t *decoded_copy;

static void
release_decoded(void)
{
    free(decoded_copy);
    decoded_copy = NULL;
}

/* Decodes a heap copy of exactly `len` bytes, kept until the next call. */
static int
decode_exact(const uint8_t *bytes, size_t len, struct tsock__msg *msg)
{
    release_decoded();
    decoded_copy = malloc(len ? len : 1);
    if (!decoded_copy)
        abort();
    if (len)
        memcpy(decoded_copy, bytes, len);
    /* The decoder writes only the decoded type's part; whole-struct comparisons need the rest
     * zero. */
    memset(msg, 0, sizeof *msg);
    return tsock__msg_decode(decoded_copy, len, msg);
}

/* Whether two messages are equal byte for byte, padding included, except that a WELCOME's
 * attach blob is compared by content (length and bytes), not by where it lies: a decoded one
 * points into the frame it came from. */
static int
msg_same(const struct tsock__msg *a, const struct tsock__msg *b)
{
    static struct tsock__msg tmp;

    if (a->type == TSOCK__MSG_GROUP_FAILED && b->type == TSOCK__MSG_GROUP_FAILED) {
        const struct tsock__msg_group_failed *ga = &a->u.group_failed, *gb = &b->u.group_failed;
        if (ga->rank_count != gb->rank_count || !ga->ranks || !gb->ranks ||
            memcmp(ga->ranks, gb->ranks, (size_t)ga->rank_count * 4) != 0)
            return 0;
        memcpy(&tmp, b, sizeof tmp);
        tmp.u.group_failed.ranks = ga->ranks;
        return memcmp(a, &tmp, sizeof tmp) == 0;
    }
    if (a->type != TSOCK__MSG_WELCOME || b->type != TSOCK__MSG_WELCOME)
        return memcmp(a, b, sizeof *a) == 0;
    const struct tsock__msg_welcome *wa = &a->u.welcome, *wb = &b->u.welcome;
    if (wa->attach_len != wb->attach_len)
        return 0;
    if (wa->attach_len &&
        (!wa->attach || !wb->attach || memcmp(wa->attach, wb->attach, wa->attach_len) != 0))
        return 0;
    if (wa->classes_len != wb->classes_len ||
        (wa->classes_len && memcmp(wa->classes, wb->classes, wa->classes_len) != 0))
        return 0;
    memcpy(&tmp, b, sizeof tmp);
    tmp.u.welcome.attach = wa->attach;
    tmp.u.welcome.classes = wa->classes;
    return memcmp(a, &tmp, sizeof tmp) == 0;
}

static void
store_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* ------------------------------------------------------------------------------------------ */
/* The naive encoder, written from docs/protocol.md                                           */
/* ------------------------------------------------------------------------------------------ */

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
w_bytes(struct wire *w, const uint8_t *p, size_t n)
{
    if (n)
        memcpy(w->b + w->n, p, n);
    w->n += n;
}

static void
w_str(struct wire *w, const char *s, size_t cap)
{
    const char *end = memchr(s, '\0', cap);
    size_t len = end ? (size_t)(end - s) : cap;

    w_le(w, len, 1);
    memcpy(w->b + w->n, s, len);
    w->n += len;
}

static void
w_tensor(struct wire *w, const struct tsock__tensor_desc *t)
{
    w_str(w, t->name, sizeof t->name);
    w_le(w, t->dtype, 1);
    w_le(w, t->ndim, 1);
    for (unsigned i = 0; i < t->ndim && i < TSOCK_MAX_DIMS; i++)
        w_le(w, (uint64_t)t->sample_shape[i], 8);
    w_le(w, t->offset, 8);
    w_le(w, t->sample_bytes, 8);
}

static void
w_welcome(struct wire *w, const struct tsock__msg_welcome *m)
{
    w_le(w, m->consumer_id, 8);
    w_le(w, m->batch_size, 4);
    w_le(w, m->slot_count, 4);
    w_le(w, m->slot_stride, 8);
    w_le(w, m->ring_bytes, 8);
    w_le(w, m->heartbeat_ms, 4);
    w_le(w, m->device, 4);
    w_le(w, m->samples, 8);
    w_le(w, m->dataset, 8);
    w_le(w, m->nodes, 4);
    w_le(w, m->node_rank, 4);
    /* The attach blob: for any device but 1 the shm_name string (a u8 length, then the bytes);
     * for device 1 an empty shm_name and, after the tensors, the CUDA block. */
    int cuda = m->device == TSOCK_DEVICE_CUDA;
    w_le(w, cuda ? 0 : m->attach_len, 1);
    if (!cuda)
        w_bytes(w, m->attach, m->attach_len);
    w_le(w, m->tensor_count, 1);
    for (uint32_t t = 0; t < m->tensor_count && t < TSOCK_MAX_TENSORS; t++)
        w_tensor(w, &m->tensors[t]);
    if (cuda)
        w_bytes(w, m->attach, m->attach_len);
    /* The class names: a u32 byte count, then the names, each with its NUL. */
    w_le(w, m->classes_len, 4);
    w_bytes(w, m->classes, m->classes_len);
}

/* Inserts n bytes at frame offset `at` and makes the header count them. */
static void
w_insert(struct wire *w, size_t at, const void *p, size_t n)
{
    memmove(w->b + at + n, w->b + at, w->n - at);
    memcpy(w->b + at, p, n);
    w->n += n;
    store_le(w->b + 8, w->n - 12, 4);
}

static void
spec_encode(const struct tsock__msg *m, struct wire *w)
{
    const struct tsock__msg_batch *b = &m->u.batch;

    w->n = 0;
    w_le(w, 0x4B435354u, 4);
    w_le(w, 3, 2);
    w_le(w, m->type, 2);
    w_le(w, 0, 4);
    switch (m->type) {
    case TSOCK__MSG_HELLO:
        w_le(w, m->u.hello.pid, 4);
        w_le(w, m->u.hello.flags, 4);
        w_str(w, m->u.hello.name, sizeof m->u.hello.name);
        /* The group block whenever its flag is set (valid or not). */
        if (m->u.hello.flags & 2) {
            w_str(w, m->u.hello.group, sizeof m->u.hello.group);
            w_le(w, m->u.hello.rank, 4);
            w_le(w, m->u.hello.world, 4);
            w_le(w, m->u.hello.batch, 4);
            w_le(w, m->u.hello.drop_last, 1);
            w_le(w, m->u.hello.timeout_ms, 4);
            w_le(w, m->u.hello.resume, 8);
        }
        break;
    case TSOCK__MSG_WELCOME: w_welcome(w, &m->u.welcome); break;
    case TSOCK__MSG_REJECT:
        w_le(w, (uint32_t)m->u.reject.code, 4);
        w_str(w, m->u.reject.text, sizeof m->u.reject.text);
        break;
    case TSOCK__MSG_GROUP_FAILED:
        w_le(w, (uint32_t)m->u.group_failed.code, 4);
        w_le(w, m->u.group_failed.timeout_ms, 4);
        w_le(w, m->u.group_failed.rank_count, 4);
        if (m->u.group_failed.ranks && m->u.group_failed.rank_count <= 4096)
            w_bytes(w, m->u.group_failed.ranks, (size_t)m->u.group_failed.rank_count * 4);
        break;
    case TSOCK__MSG_BATCH:
        w_le(w, b->slot, 4);
        w_le(w, b->samples, 4);
        w_le(w, b->seq, 8);
        w_le(w, b->epoch, 8);
        w_le(w, b->index_in_epoch, 8);
        w_le(w, b->position, 8);
        w_le(w, b->flags, 4);
        /* The ids, 4 bytes each, whenever the struct has them (valid or not). */
        if (b->ids)
            w_bytes(w, b->ids, (size_t)b->samples * 4);
        break;
    case TSOCK__MSG_RELEASE:
        w_le(w, m->u.release.slot, 4);
        w_le(w, m->u.release.seq, 8);
        break;
    case TSOCK__MSG_SHUTDOWN:
        w_le(w, m->u.shutdown.reason, 4);
        w_le(w, m->u.shutdown.epochs, 8);
        break;
    case TSOCK__MSG_PAUSE:
    case TSOCK__MSG_RESUME: w_le(w, m->u.pause.epochs, 8); break;
    case TSOCK__MSG_STATS_REQUEST: w_le(w, m->u.stats_request.request_id, 8); break;
    case TSOCK__MSG_CONSUMER_STATS:
        w_le(w, m->u.consumer_stats.batches, 8);
        w_le(w, m->u.consumer_stats.samples, 8);
        w_le(w, m->u.consumer_stats.epochs, 8);
        w_le(w, m->u.consumer_stats.wait_ns, 8);
        break;
    default: /* HEARTBEAT, BYE, RESUMED: empty bodies */ break;
    }
    store_le(w->b + 8, w->n - 12, 4);
}

/* Decodes the naive encoding of m. */
static int
spec_decode(const struct tsock__msg *m)
{
    struct wire w;
    struct tsock__msg d;

    spec_encode(m, &w);
    return decode_exact(w.b, w.n, &d);
}

/* m breaks exactly one rule: both directions must refuse it. */
#define EXPECT_INVALID(m)                                                                          \
    do {                                                                                           \
        CHECK_EQ(tsock__msg_encode(&(m), scratch, sizeof scratch), -EINVAL);                       \
        CHECK_EQ(spec_decode(&(m)), TSOCK_E_PROTOCOL);                                             \
    } while (0)

/* The positive control next to the negative cases: m is valid both ways. */
#define EXPECT_VALID(m)                                                                            \
    do {                                                                                           \
        CHECK(tsock__msg_encode(&(m), scratch, sizeof scratch) > 0);                               \
        CHECK_EQ(spec_decode(&(m)), 0);                                                            \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Valid sample messages                                                                      */
/* ------------------------------------------------------------------------------------------ */

static void
make(struct tsock__msg *m, int type)
{
    memset(m, 0, sizeof *m); /* padding too, so decoded and built messages memcmp equal */
    m->type = (uint16_t)type;
}

/* Points w's attach blob at a host ring's name (a string that outlives the message). */
static void
set_shm_name(struct tsock__msg_welcome *w, const char *name)
{
    w->attach = (const uint8_t *)name;
    w->attach_len = (uint32_t)strlen(name);
}

static void
set_tensor(struct tsock__tensor_desc *t, const char *name, int dtype, int ndim, const int64_t *dims,
           uint64_t offset, uint64_t sample_bytes)
{
    strcpy(t->name, name);
    t->dtype = (uint8_t)dtype;
    t->ndim = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++)
        t->sample_shape[i] = dims[i];
    t->offset = offset;
    t->sample_bytes = sample_bytes;
}

/* Two tensors, the second ending exactly at the end of the slot. */
static void
make_welcome(struct tsock__msg *m)
{
    static const int64_t image[3] = {3, 4, 5};
    struct tsock__msg_welcome *w = &m->u.welcome;

    make(m, TSOCK__MSG_WELCOME);
    w->consumer_id = 7;
    w->batch_size = 4;
    w->slot_count = 3;
    w->slot_stride = 288;
    w->ring_bytes = 864;
    w->heartbeat_ms = 250;
    w->device = TSOCK_DEVICE_CPU;
    w->samples = 1281167;
    w->dataset = 1281167;
    w->nodes = 1;
    set_shm_name(w, "/tsock-1234-ring");
    w->tensor_count = 2;
    set_tensor(&w->tensors[0], "image", TSOCK_UINT8, 3, image, 0, 60);
    set_tensor(&w->tensors[1], "label", TSOCK_INT64, 0, NULL, 256, 8);
    static const char classes[] = "cat\0dog\0n01440764";
    w->classes = (const uint8_t *)classes;
    w->classes_len = sizeof classes; /* the last NUL included */
}

/* Everything at its largest: 16 tensors of 8 dims with 63-byte names, a 255-byte ring name,
 * every dtype, the largest batch size and slot count. */
static void
make_welcome_max(struct tsock__msg *m)
{
    static uint8_t ring_name[TSOCK__PROTO_MAX_SHM_NAME]; /* the same bytes every time */
    struct tsock__msg_welcome *w = &m->u.welcome;
    uint64_t offset = 0;

    make(m, TSOCK__MSG_WELCOME);
    w->consumer_id = UINT64_MAX;
    w->batch_size = UINT32_MAX;
    w->slot_count = MAX_SLOTS;
    w->heartbeat_ms = UINT32_MAX;
    w->device = TSOCK_DEVICE_CPU;
    w->samples = UINT64_MAX;
    w->dataset = UINT64_MAX;
    w->nodes = 1;
    ring_name[0] = '/';
    memset(ring_name + 1, 'r', TSOCK__PROTO_MAX_SHM_NAME - 1);
    w->attach = ring_name;
    w->attach_len = TSOCK__PROTO_MAX_SHM_NAME;
    w->tensor_count = TSOCK_MAX_TENSORS;
    for (int t = 0; t < TSOCK_MAX_TENSORS; t++) {
        static const uint64_t size[13] = {0, 1, 1, 2, 4, 8, 2, 4, 8, 2, 4, 8, 2};
        static const int64_t dims[8] = {1, 2, 1, 1, 1, 1, 1, 3};
        char name[TSOCK_MAX_NAME + 1] = {0};
        int dtype = t % 12 + 1;

        memset(name, 'a' + t, TSOCK_MAX_NAME);
        set_tensor(&w->tensors[t], name, dtype, TSOCK_MAX_DIMS, dims, offset, size[dtype] * 6);
        offset += (uint64_t)UINT32_MAX * size[dtype] * 6;
    }
    w->slot_stride = offset;
    w->ring_bytes = offset * MAX_SLOTS;
}

/* Bytes of a device ring's attach blob (the CUDA block) for `slots` slots. */
#define CUDA_BLOB_SIZE(slots)                                                                      \
    (TSOCK__PROTO_DEVICE_ID_SIZE + (size_t)TSOCK__PROTO_HANDLE_SIZE * (1 + (size_t)(slots)))
/* Room for one slot more than a CUDA ring may have, for the test that breaks that limit. */
#define CUDA_BLOB_MAX CUDA_BLOB_SIZE(TSOCK__PROTO_MAX_DEVICE_SLOTS + 1)

/* Handles with recognisable, non-zero bytes: the device id counts from 0x10, the memory handle
 * from 0x40, event handle s is filled with s + 1 (slots above 254 wrap but stay non-zero). The
 * blob for n slots is the start of the blob for more, so every message shares one buffer whose
 * bytes never change once filled. */
static const uint8_t *
cuda_blob(void)
{
    static uint8_t blob[CUDA_BLOB_MAX];
    uint8_t *p = blob;

    for (int i = 0; i < TSOCK__PROTO_DEVICE_ID_SIZE; i++)
        *p++ = (uint8_t)(0x10 + i);
    for (int i = 0; i < TSOCK__PROTO_HANDLE_SIZE; i++)
        *p++ = (uint8_t)(0x40 + i);
    for (uint32_t s = 0; s < TSOCK__PROTO_MAX_DEVICE_SLOTS + 1; s++, p += TSOCK__PROTO_HANDLE_SIZE)
        memset(p, (int)(s % 255 + 1), TSOCK__PROTO_HANDLE_SIZE);
    return blob;
}

/* Points w's attach blob at the handles above for its slot count. */
static void
set_cuda_handles(struct tsock__msg_welcome *w)
{
    w->attach = cuda_blob();
    w->attach_len = (uint32_t)CUDA_BLOB_SIZE(w->slot_count);
}

/* Gives w a private, writable copy of its attach blob (in `own`, of `cap` bytes), for tests
 * that break some of its bytes; returns the copy. */
static uint8_t *
own_attach(struct tsock__msg_welcome *w, uint8_t *own, size_t cap)
{
    if (w->attach_len > cap)
        abort();
    memcpy(own, w->attach, w->attach_len);
    w->attach = own;
    return own;
}

/* make_welcome's ring in device memory: no shm name, the CUDA block instead. */
static void
make_welcome_cuda(struct tsock__msg *m)
{
    make_welcome(m);
    m->u.welcome.device = TSOCK_DEVICE_CUDA;
    set_cuda_handles(&m->u.welcome);
}

/* The largest CUDA WELCOME: make_welcome_max's tensors, no ring name, the most slots a CUDA
 * ring may have. */
static void
make_welcome_cuda_max(struct tsock__msg *m)
{
    make_welcome_max(m);
    struct tsock__msg_welcome *w = &m->u.welcome;
    w->device = TSOCK_DEVICE_CUDA;
    w->slot_count = TSOCK__PROTO_MAX_DEVICE_SLOTS;
    w->ring_bytes = w->slot_stride * TSOCK__PROTO_MAX_DEVICE_SLOTS;
    set_cuda_handles(w);
}

/* One tensor whose single dimension is INT64_MAX bytes; free mode (samples 0). */
static void
make_welcome_huge(struct tsock__msg *m)
{
    static const int64_t dims[1] = {INT64_MAX};
    struct tsock__msg_welcome *w = &m->u.welcome;

    make(m, TSOCK__MSG_WELCOME);
    w->batch_size = 1;
    w->slot_count = 1;
    w->slot_stride = INT64_MAX;
    w->ring_bytes = INT64_MAX;
    w->heartbeat_ms = 1;
    w->nodes = UINT32_MAX; /* any split is valid in free mode */
    w->node_rank = UINT32_MAX - 1;
    set_shm_name(w, "/x");
    w->tensor_count = 1;
    set_tensor(&w->tensors[0], "\xc3\xa9t\xc3\xa9", TSOCK_UINT8, 1, dims, 0, INT64_MAX);
}

/* Fills out[] with valid messages of every type; returns how many. */
static int
valid_messages(struct tsock__msg *out)
{
    int n = 0;

    make(&out[n], TSOCK__MSG_HELLO);
    out[n].u.hello.pid = 4242;
    strcpy(out[n++].u.hello.name, "trainer-0");
    make(&out[n], TSOCK__MSG_HELLO); /* unnamed consumer */
    out[n++].u.hello.pid = UINT32_MAX;
    make(&out[n], TSOCK__MSG_HELLO);
    memset(out[n++].u.hello.name, '~', TSOCK_MAX_NAME);
    make_welcome(&out[n++]);
    make_welcome_max(&out[n++]);
    make_welcome_huge(&out[n++]);
    make_welcome_cuda(&out[n++]);
    make_welcome_cuda_max(&out[n++]);
    make(&out[n], TSOCK__MSG_REJECT);
    out[n++].u.reject.code = TSOCK_E_VERSION;
    make(&out[n], TSOCK__MSG_REJECT);
    out[n].u.reject.code = TSOCK_E_GROUP_MISMATCH;
    memset(out[n++].u.reject.text, 't', TSOCK__PROTO_MAX_TEXT);
    make(&out[n], TSOCK__MSG_HELLO); /* a rank of a group, checkpointable too */
    out[n].u.hello.flags = TSOCK__HELLO_HAS_GROUP | TSOCK__HELLO_WANT_IDS;
    strcpy(out[n].u.hello.group, "resnet");
    out[n].u.hello.rank = 3;
    out[n].u.hello.world = 4;
    out[n].u.hello.batch = 32;
    out[n].u.hello.drop_last = 1;
    out[n++].u.hello.timeout_ms = 600000;
    make(&out[n], TSOCK__MSG_HELLO); /* every group field at its largest */
    out[n].u.hello.flags = TSOCK__HELLO_HAS_GROUP;
    memset(out[n].u.hello.group, 'g', TSOCK__PROTO_MAX_GROUP_NAME);
    out[n].u.hello.rank = UINT32_MAX - 1;
    out[n].u.hello.world = UINT32_MAX;
    out[n].u.hello.batch = UINT32_MAX;
    out[n].u.hello.resume = UINT64_MAX;
    out[n++].u.hello.timeout_ms = UINT32_MAX;
    static uint8_t many_ranks[4 * TSOCK__PROTO_MAX_GROUP_RANKS];
    for (uint32_t i = 0; i < TSOCK__PROTO_MAX_GROUP_RANKS; i++)
        store_le(many_ranks + 4 * i, 2 * i + 1, 4);
    make(&out[n], TSOCK__MSG_GROUP_FAILED);
    out[n].u.group_failed.code = TSOCK_E_GROUP_LOST;
    out[n].u.group_failed.rank_count = 1;
    out[n++].u.group_failed.ranks = (const uint8_t *)"\2\0\0\0";
    make(&out[n], TSOCK__MSG_GROUP_FAILED);
    out[n].u.group_failed.code = TSOCK_E_GROUP_INCOMPLETE;
    out[n].u.group_failed.timeout_ms = UINT32_MAX;
    out[n].u.group_failed.rank_count = TSOCK__PROTO_MAX_GROUP_RANKS;
    out[n++].u.group_failed.ranks = many_ranks;
    make(&out[n], TSOCK__MSG_BATCH);
    out[n].u.batch.samples = 1;
    out[n++].u.batch.seq = 0;
    make(&out[n], TSOCK__MSG_BATCH);
    out[n].u.batch.slot = MAX_SLOTS - 1;
    out[n].u.batch.samples = UINT32_MAX;
    out[n].u.batch.seq = UINT64_MAX;
    out[n].u.batch.epoch = UINT64_MAX;
    out[n].u.batch.index_in_epoch = UINT64_MAX;
    out[n].u.batch.position = UINT64_MAX;
    out[n++].u.batch.flags = TSOCK__BATCH_EPOCH_END;
    make(&out[n], TSOCK__MSG_BATCH); /* a joiner's first batch: mid-stream, mid-epoch */
    out[n].u.batch.slot = 2;
    out[n].u.batch.samples = 32;
    out[n].u.batch.seq = 77;
    out[n].u.batch.epoch = 3;
    out[n].u.batch.index_in_epoch = 9;
    out[n++].u.batch.position = 3 * 1000 + 9 * 32;
    make(&out[n], TSOCK__MSG_RELEASE);
    out[n].u.release.slot = 5;
    out[n++].u.release.seq = 0x0123456789ABCDEFu;
    make(&out[n], TSOCK__MSG_RELEASE);
    out[n].u.release.slot = MAX_SLOTS - 1;
    out[n++].u.release.seq = UINT64_MAX;
    make(&out[n++], TSOCK__MSG_HEARTBEAT);
    make(&out[n++], TSOCK__MSG_BYE);
    make(&out[n++], TSOCK__MSG_PAUSE);
    make(&out[n], TSOCK__MSG_PAUSE);
    out[n++].u.pause.epochs = 3;
    make(&out[n], TSOCK__MSG_PAUSE);
    out[n++].u.pause.epochs = UINT64_MAX;
    make(&out[n++], TSOCK__MSG_RESUME);
    make(&out[n], TSOCK__MSG_RESUME);
    out[n++].u.pause.epochs = 90;
    make(&out[n++], TSOCK__MSG_PAUSED);
    make(&out[n++], TSOCK__MSG_RESUMED);
    make(&out[n], TSOCK__MSG_SHUTDOWN);
    out[n].u.shutdown.epochs = 90;
    out[n++].u.shutdown.reason = TSOCK__SHUTDOWN_END;
    make(&out[n], TSOCK__MSG_SHUTDOWN);
    out[n++].u.shutdown.reason = TSOCK__SHUTDOWN_STOPPED;
    make(&out[n], TSOCK__MSG_STATS_REQUEST);
    out[n++].u.stats_request.request_id = 0x0102030405060708u;
    make(&out[n], TSOCK__MSG_CONSUMER_STATS);
    out[n].u.consumer_stats.batches = 40;
    out[n].u.consumer_stats.samples = 1280;
    out[n].u.consumer_stats.epochs = 1;
    out[n++].u.consumer_stats.wait_ns = UINT64_MAX;
    return n;
}

#define MAX_SAMPLES 40

/* ------------------------------------------------------------------------------------------ */
/* Round trips, truncation, trailing bytes, short buffers                                     */
/* ------------------------------------------------------------------------------------------ */

/* The step from one cut (truncation length, buffer size) to the next: every one for messages
 * up to 4 KiB and near either end of longer ones, every 61st in between. */
static int
next_cut(int at, int n)
{
    return n <= 4096 || at < 512 || at >= n - 512 ? 1 : 61;
}

static void
test_roundtrip_one(const struct tsock__msg *m)
{
    uint8_t buf[BUF], out[BUF];
    struct tsock__msg d;
    struct wire w;
    int n = tsock__msg_encode(m, buf, sizeof buf);

    CHECK(n >= TSOCK__PROTO_HEADER_SIZE && n <= TSOCK__PROTO_MAX_MESSAGE);
    if (n < TSOCK__PROTO_HEADER_SIZE)
        return;
    spec_encode(m, &w);
    CHECK_EQ(w.n, n);
    CHECK(memcmp(w.b, buf, w.n) == 0);
    CHECK(memcmp(buf, "TSCK\x03\x00", 6) == 0);
    CHECK_EQ(buf[6] | buf[7] << 8, m->type);
    CHECK_EQ(decode_exact(buf, (size_t)n, &d), 0);
    CHECK(msg_same(&d, m));
    /* A decoded WELCOME's attach blob is a view of the frame, where the wire has it: right
     * after the shm_name length byte for a host ring, at the end for a device ring. */
    if (m->type == TSOCK__MSG_WELCOME) {
        CHECK_EQ(tsock__msg_decode(buf, (size_t)n, &d), 0);
        const uint8_t *at = d.u.welcome.device == TSOCK_DEVICE_CPU
                                ? buf + TSOCK__PROTO_HEADER_SIZE + 64 + 1
                                : buf + n - 4 - d.u.welcome.classes_len - d.u.welcome.attach_len;
        CHECK(d.u.welcome.attach == at);
        CHECK_EQ(d.u.welcome.attach_len, m->u.welcome.attach_len);
    }

    /* Every truncation, as it arrives and with a header that agrees with the shorter body (in
     * the middle of the CUDA WELCOMEs of several KiB, every 61st: their handles are opaque). */
    for (int len = 0; len < n; len += next_cut(len, n)) {
        CHECK_EQ(decode_exact(buf, (size_t)len, &d), TSOCK_E_PROTOCOL);
        if (len >= TSOCK__PROTO_HEADER_SIZE) {
            memcpy(out, buf, (size_t)len);
            store_le(out + 8, (uint64_t)len - 12, 4);
            CHECK_EQ(decode_exact(out, (size_t)len, &d), TSOCK_E_PROTOCOL);
        }
    }
    /* A trailing byte, with the header as it was and with a header that counts it. */
    memcpy(out, buf, (size_t)n);
    out[n] = 0;
    CHECK_EQ(decode_exact(out, (size_t)n + 1, &d), TSOCK_E_PROTOCOL);
    store_le(out + 8, (uint64_t)n + 1 - 12, 4);
    CHECK_EQ(decode_exact(out, (size_t)n + 1, &d), TSOCK_E_PROTOCOL);

    /* Every buffer too small: -ENOBUFS, and nothing written at or past its end (checked up to
     * 64 bytes past the message's own end). */
    size_t guard = (size_t)n + 64;
    for (int size = 0; size < n; size += next_cut(size, n)) {
        memset(out, 0xA5, guard);
        CHECK_EQ(tsock__msg_encode(m, out, (size_t)size), -ENOBUFS);
        int untouched = 1;
        for (size_t i = (size_t)size; i < guard; i++)
            untouched &= out[i] == 0xA5;
        CHECK(untouched);
    }
    CHECK_EQ(tsock__msg_encode(m, out, (size_t)n), n);
    CHECK_EQ(tsock__msg_encode(m, NULL, 0), -ENOBUFS);
}

static void
test_roundtrip(void)
{
    struct tsock__msg msgs[MAX_SAMPLES];
    int n = valid_messages(msgs);
    int seen[TSOCK__MSG_TYPE_LAST + 1] = {0};

    for (int i = 0; i < n; i++) {
        test_roundtrip_one(&msgs[i]);
        seen[msgs[i].type] = 1;
    }
    /* STATS_REPLY has a codec of its own (test_proto_stats.c). */
    for (int t = TSOCK__MSG_HELLO; t <= TSOCK__MSG_TYPE_LAST; t++)
        CHECK(seen[t] || t == TSOCK__MSG_STATS_REPLY);
    /* The largest message there is stays far below the frame limit. */
    CHECK_EQ(tsock__msg_encode(&msgs[4], scratch, sizeof scratch), 2673);

    /* Every TSOCK_E_* code can be carried by REJECT. */
    for (int code = TSOCK_E_PROTOCOL; code > TSOCK_E_LAST; code--) {
        struct tsock__msg m;
        make(&m, TSOCK__MSG_REJECT);
        m.u.reject.code = code;
        test_roundtrip_one(&m);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Golden frames, written byte by byte from docs/protocol.md                                  */
/* ------------------------------------------------------------------------------------------ */

static void
expect_golden(const struct tsock__msg *m, const uint8_t *golden, size_t len)
{
    uint8_t buf[BUF];
    struct tsock__msg d;

    CHECK_EQ(tsock__msg_encode(m, buf, sizeof buf), len);
    CHECK(memcmp(buf, golden, len) == 0);
    CHECK_EQ(decode_exact(golden, len, &d), 0);
    CHECK(msg_same(&d, m));
}

static void
test_golden(void)
{
    static const uint8_t hello[] = {'T',  'S',  'C',  'K',  0x03, 0x00,
                                    0x01, 0x00, 0x0B, 0x00, 0x00, 0x00, /* header */
                                    0x04, 0x03, 0x02, 0x01,             /* pid */
                                    0x00, 0x00, 0x00, 0x00,             /* flags */
                                    0x02, 'a',  'b'};                   /* name */
    static const uint8_t batch[] = {'T',  'S',  'C',  'K',  0x03, 0x00, 0x04, 0x00,
                                    0x2C, 0x00, 0x00, 0x00,                         /* header */
                                    0x03, 0x00, 0x00, 0x00,                         /* slot */
                                    0x20, 0x00, 0x00, 0x00,                         /* samples */
                                    0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* seq */
                                    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* epoch */
                                    0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* index */
                                    0xA0, 0x0F, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* position */
                                    0x01, 0x00, 0x00, 0x00};                        /* flags */
    static const uint8_t reject[] = {'T',  'S',  'C',  'K',  0x03, 0x00, 0x03, 0x00, 0x05,
                                     0x00, 0x00, 0x00, 0xEE, 0xD8, 0xFF, 0xFF, 0x00};
    static const uint8_t release[] = {'T',  'S',  'C',  'K',  0x03, 0x00, 0x05, 0x00,
                                      0x0C, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00,
                                      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    static const uint8_t heartbeat[] = {'T', 'S', 'C', 'K', 3, 0, 6, 0, 0, 0, 0, 0};
    static const uint8_t bye[] = {'T', 'S', 'C', 'K', 3, 0, 7, 0, 0, 0, 0, 0};
    static const uint8_t shutdown[] = {'T', 'S', 'C', 'K', 3, 0, 8, 0, 12, 0, 0, 0,
                                       2,   0,   0,   0,   3, 0, 0, 0, 0,  0, 0, 0};
    static const uint8_t pause[] = {'T', 'S', 'C',  'K',  3,    0, 9, 0, 8, 0,
                                    0,   0,   0x30, 0x20, 0x10, 0, 0, 0, 0, 0};
    static const uint8_t resume[] = {'T', 'S', 'C', 'K', 3, 0, 10, 0, 8, 0,
                                     0,   0,   7,   0,   0, 0, 0,  0, 0, 0};
    static const uint8_t resumed[] = {'T', 'S', 'C', 'K', 3, 0, 11, 0, 0, 0, 0, 0};
    static const uint8_t welcome[] = {
        'T',  'S',  'C',  'K',  0x03, 0x00, 0x02, 0x00, 0x64, 0x00, 0x00, 0x00, /* header */
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* consumer_id */
        0x02, 0x00, 0x00, 0x00,                                                 /* batch_size */
        0x03, 0x00, 0x00, 0x00,                                                 /* slot_count */
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* slot_stride */
        0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* ring_bytes */
        0xFA, 0x00, 0x00, 0x00,                                                 /* heartbeat */
        0x00, 0x00, 0x00, 0x00,                                                 /* device */
        0x50, 0xC3, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* samples */
        0x50, 0xC3, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* dataset */
        0x01, 0x00, 0x00, 0x00,                                                 /* nodes */
        0x00, 0x00, 0x00, 0x00,                                                 /* node_rank */
        0x02, '/',  'r',                                                        /* shm_name */
        0x01,                                                                   /* tensors */
        0x01, 'x',                                                              /* name */
        0x07,                                                                   /* float32 */
        0x01,                                                                   /* ndim */
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* dim 0 */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* offset */
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* bytes */
        0x00, 0x00, 0x00, 0x00};                                                /* no classes */
    static const int64_t two[1] = {2};
    struct tsock__msg m;

    make(&m, TSOCK__MSG_HELLO);
    m.u.hello.pid = 0x01020304;
    strcpy(m.u.hello.name, "ab");
    expect_golden(&m, hello, sizeof hello);

    make(&m, TSOCK__MSG_BATCH);
    m.u.batch.slot = 3;
    m.u.batch.samples = 32;
    m.u.batch.seq = 0x1122334455667788u;
    m.u.batch.epoch = 2;
    m.u.batch.index_in_epoch = 5;
    m.u.batch.position = 4000;
    m.u.batch.flags = TSOCK__BATCH_EPOCH_END;
    expect_golden(&m, batch, sizeof batch);

    make(&m, TSOCK__MSG_REJECT);
    m.u.reject.code = TSOCK_E_VERSION;
    expect_golden(&m, reject, sizeof reject);

    make(&m, TSOCK__MSG_RELEASE);
    m.u.release.slot = 9;
    m.u.release.seq = 0x0807060504030201u;
    expect_golden(&m, release, sizeof release);

    make(&m, TSOCK__MSG_HEARTBEAT);
    expect_golden(&m, heartbeat, sizeof heartbeat);
    make(&m, TSOCK__MSG_BYE);
    expect_golden(&m, bye, sizeof bye);
    make(&m, TSOCK__MSG_SHUTDOWN);
    m.u.shutdown.reason = TSOCK__SHUTDOWN_STOPPED;
    m.u.shutdown.epochs = 3;
    expect_golden(&m, shutdown, sizeof shutdown);
    make(&m, TSOCK__MSG_PAUSE);
    m.u.pause.epochs = 0x102030;
    expect_golden(&m, pause, sizeof pause);
    make(&m, TSOCK__MSG_RESUME);
    m.u.pause.epochs = 7;
    expect_golden(&m, resume, sizeof resume);
    make(&m, TSOCK__MSG_RESUMED);
    expect_golden(&m, resumed, sizeof resumed);

    make(&m, TSOCK__MSG_WELCOME);
    m.u.welcome.consumer_id = 1;
    m.u.welcome.batch_size = 2;
    m.u.welcome.slot_count = 3;
    m.u.welcome.slot_stride = 16;
    m.u.welcome.ring_bytes = 48;
    m.u.welcome.heartbeat_ms = 250;
    m.u.welcome.samples = 50000;
    m.u.welcome.dataset = 50000;
    m.u.welcome.nodes = 1;
    set_shm_name(&m.u.welcome, "/r");
    m.u.welcome.tensor_count = 1;
    set_tensor(&m.u.welcome.tensors[0], "x", TSOCK_FLOAT32, 1, two, 0, 8);
    expect_golden(&m, welcome, sizeof welcome);

    /* The same ring in device memory with 3 slots: no shm name, then the CUDA block. */
    static const uint8_t cuda_head[] = {
        'T',  'S',  'C',  'K',  0x03, 0x00, 0x02, 0x00, 0x72, 0x01, 0x00, 0x00, /* body 370 */
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* consumer_id */
        0x02, 0x00, 0x00, 0x00,                                                 /* batch_size */
        0x03, 0x00, 0x00, 0x00,                                                 /* slot_count */
        0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* slot_stride */
        0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* ring_bytes */
        0xFA, 0x00, 0x00, 0x00,                                                 /* heartbeat */
        0x01, 0x00, 0x00, 0x00,                                                 /* device CUDA */
        0x50, 0xC3, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* samples */
        0x50, 0xC3, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* dataset */
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* nodes, rank */
        0x00,                                                                   /* shm_name "" */
        0x01,                                                                   /* tensors */
        0x01, 'x',  0x07, 0x01,                                                 /* x float32 */
        0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* dim 0 */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* offset */
        0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};                        /* bytes */
    uint8_t cuda[sizeof cuda_head + 16 + 64 + 3 * 64 + 4];
    size_t at = sizeof cuda_head;
    memcpy(cuda, cuda_head, at);
    for (int i = 0; i < 16; i++)
        cuda[at++] = (uint8_t)(0x10 + i); /* device_uuid 10 11 .. 1f */
    for (int i = 0; i < 64; i++)
        cuda[at++] = (uint8_t)(0x40 + i); /* mem_handle 40 41 .. 7f */
    for (int s = 0; s < 3; s++) {
        memset(cuda + at, s + 1, 64); /* event handle of slot s: 64 bytes of s + 1 */
        at += 64;
    }
    memset(cuda + at, 0, 4); /* no class names */
    at += 4;
    CHECK_EQ(at, sizeof cuda);
    CHECK_EQ(sizeof cuda, 382);
    m.u.welcome.device = TSOCK_DEVICE_CUDA;
    set_cuda_handles(&m.u.welcome);
    expect_golden(&m, cuda, sizeof cuda);
}

/* ------------------------------------------------------------------------------------------ */
/* Header                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static void
test_header(void)
{
    uint8_t buf[BUF];
    struct tsock__msg m, d;
    int n;

    make(&m, TSOCK__MSG_SHUTDOWN);
    m.u.shutdown.reason = TSOCK__SHUTDOWN_END;
    n = tsock__msg_encode(&m, buf, sizeof buf);
    CHECK_EQ(n, 24);
    CHECK_EQ(decode_exact(buf, 24, &d), 0);

    /* Wrong magic, one byte at a time. */
    for (int i = 0; i < 4; i++) {
        buf[i] ^= 0x20;
        CHECK_EQ(decode_exact(buf, 24, &d), TSOCK_E_PROTOCOL);
        buf[i] ^= 0x20;
    }
    /* Another version: TSOCK_E_VERSION, whatever follows the header. */
    static const uint16_t versions[] = {0, 1, 2, 4, 0x100, 0xFFFF};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        store_le(buf + 4, versions[i], 2);
        CHECK_EQ(decode_exact(buf, 24, &d), TSOCK_E_VERSION);
        CHECK_EQ(decode_exact(buf, 12, &d), TSOCK_E_VERSION);
        store_le(buf + 6, 0x77, 2);
        store_le(buf + 8, 0xFFFFFFFF, 4);
        CHECK_EQ(decode_exact(buf, 24, &d), TSOCK_E_VERSION);
        CHECK_EQ(decode_exact(buf, 11, &d), TSOCK_E_PROTOCOL); /* shorter than a header */
        n = tsock__msg_encode(&m, buf, sizeof buf);
    }
    /* Body lengths that disagree with the frame. */
    static const uint32_t lengths[] = {0, 3, 5, 0x10004, 0x80000004u, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        store_le(buf + 8, lengths[i], 4);
        CHECK_EQ(decode_exact(buf, 24, &d), TSOCK_E_PROTOCOL);
    }
    store_le(buf + 8, 12, 4);
    CHECK_EQ(decode_exact(buf, 24, &d), 0);

    /* Unknown types, with empty and non-empty bodies; the encoder refuses them too. */
    static const uint16_t types[] = {
        0, TSOCK__MSG_STATS_REPLY, TSOCK__MSG_TYPE_LAST + 1, 0x100, 0x109, 0xFFFF};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        store_le(buf + 6, types[i], 2);
        CHECK_EQ(decode_exact(buf, 16, &d), TSOCK_E_PROTOCOL);
        store_le(buf + 8, 0, 4);
        CHECK_EQ(decode_exact(buf, 12, &d), TSOCK_E_PROTOCOL);
        store_le(buf + 8, 4, 4);
        make(&d, types[i]);
        CHECK_EQ(tsock__msg_encode(&d, scratch, sizeof scratch), -EINVAL);
    }

    /* PAUSE's and RESUME's body is the consumer's count of epochs, 8 bytes: a short or missing
     * one is refused. */
    static const int counted[] = {TSOCK__MSG_PAUSE, TSOCK__MSG_RESUME};
    for (size_t i = 0; i < 2; i++) {
        make(&m, counted[i]);
        m.u.pause.epochs = 1234;
        n = tsock__msg_encode(&m, buf, sizeof buf);
        CHECK_EQ(n, 20);
        CHECK_EQ(decode_exact(buf, 20, &d), 0);
        CHECK_EQ(d.type, counted[i]);
        CHECK_EQ(d.u.pause.epochs, 1234);
        store_le(buf + 8, 0, 4);
        CHECK_EQ(decode_exact(buf, 12, &d), TSOCK_E_PROTOCOL);
        store_le(buf + 8, 4, 4);
        CHECK_EQ(decode_exact(buf, 16, &d), TSOCK_E_PROTOCOL);
    }

    /* HEARTBEAT, BYE and RESUMED have empty bodies: the header alone is the whole frame, and
     * any body at all (zeros, or another message's body under this type) is refused, whether
     * the header counts it or not. */
    static const int empty[] = {TSOCK__MSG_HEARTBEAT, TSOCK__MSG_BYE, TSOCK__MSG_RESUMED,
                                TSOCK__MSG_PAUSED};
    static const uint32_t bodies[] = {1, 4, 8, 12, 44};
    for (size_t i = 0; i < sizeof empty / sizeof empty[0]; i++) {
        make(&m, empty[i]);
        n = tsock__msg_encode(&m, buf, sizeof buf);
        CHECK_EQ(n, 12);
        CHECK_EQ(buf[6] | buf[7] << 8, empty[i]);
        CHECK_EQ(buf[8] | buf[9] | buf[10] | buf[11], 0);
        CHECK_EQ(decode_exact(buf, 12, &d), 0);
        CHECK_EQ(d.type, empty[i]);
        for (size_t j = 0; j < sizeof bodies / sizeof bodies[0]; j++) {
            memset(buf + 12, 0, bodies[j]);
            store_le(buf + 8, bodies[j], 4);
            CHECK_EQ(decode_exact(buf, 12 + bodies[j], &d), TSOCK_E_PROTOCOL);
            CHECK_EQ(decode_exact(buf, 12, &d), TSOCK_E_PROTOCOL); /* body announced, missing */
            store_le(buf + 8, 0, 4);
            CHECK_EQ(decode_exact(buf, 12 + bodies[j], &d), TSOCK_E_PROTOCOL); /* not announced */
        }
        /* A SHUTDOWN and a BATCH relabelled with this type. */
        struct tsock__msg other;
        make(&other, TSOCK__MSG_SHUTDOWN);
        other.u.shutdown.reason = TSOCK__SHUTDOWN_END;
        n = tsock__msg_encode(&other, buf, sizeof buf);
        store_le(buf + 6, (uint64_t)empty[i], 2);
        CHECK_EQ(decode_exact(buf, (size_t)n, &d), TSOCK_E_PROTOCOL);
        make(&other, TSOCK__MSG_BATCH);
        other.u.batch.samples = 1;
        n = tsock__msg_encode(&other, buf, sizeof buf);
        CHECK_EQ(n, 56);
        store_le(buf + 6, (uint64_t)empty[i], 2);
        CHECK_EQ(decode_exact(buf, (size_t)n, &d), TSOCK_E_PROTOCOL);
        /* And the other way round: an empty body under a type that needs one. */
        make(&m, empty[i]);
        tsock__msg_encode(&m, buf, sizeof buf);
        store_le(buf + 6, TSOCK__MSG_BATCH, 2);
        CHECK_EQ(decode_exact(buf, 12, &d), TSOCK_E_PROTOCOL);
    }

    /* Frames larger than the limit are refused before anything else is looked at, even when
     * the header agrees with their size. */
    size_t big = TSOCK__PROTO_MAX_MESSAGE + 1;
    uint8_t *huge = calloc(1, big + 64);
    if (!huge)
        abort();
    make(&m, TSOCK__MSG_HEARTBEAT);
    tsock__msg_encode(&m, huge, 12);
    for (size_t size = big; size < big + 64; size += 7) {
        store_le(huge + 8, size - 12, 4);
        CHECK_EQ(tsock__msg_decode(huge, size, &d), TSOCK_E_PROTOCOL);
        store_le(huge + 4, 1, 2); /* even another version's */
        CHECK_EQ(tsock__msg_decode(huge, size, &d), TSOCK_E_PROTOCOL);
        store_le(huge + 4, TSOCK__PROTO_VERSION, 2);
    }
    store_le(huge + 8, TSOCK__PROTO_MAX_MESSAGE - 12, 4);
    CHECK_EQ(tsock__msg_decode(huge, TSOCK__PROTO_MAX_MESSAGE, &d), TSOCK_E_PROTOCOL);
    free(huge);

    /* Bad arguments. */
    CHECK_EQ(tsock__msg_decode(NULL, 0, &d), TSOCK_E_PROTOCOL);
    CHECK_EQ(tsock__msg_decode(buf, 12, NULL), -EINVAL);
    CHECK_EQ(tsock__msg_decode(NULL, 12, &d), -EINVAL);
    CHECK_EQ(tsock__msg_encode(NULL, buf, sizeof buf), -EINVAL);
    CHECK_EQ(tsock__msg_encode(&m, NULL, 12), -EINVAL);
}

/* ------------------------------------------------------------------------------------------ */
/* Field rules: one case per rule, each next to a valid neighbour                             */
/* ------------------------------------------------------------------------------------------ */

/* Decodes the naive encoding of m after setting byte `off` of it to `v`. */
static int
patched_decode(const struct tsock__msg *m, size_t off, uint8_t v)
{
    struct wire w;
    struct tsock__msg d;

    spec_encode(m, &w);
    w.b[off] = v;
    return decode_exact(w.b, w.n, &d);
}

/* Frame offset of tensor t's name length byte in a WELCOME. */
static size_t
tensor_offset(const struct tsock__msg_welcome *w, uint32_t t)
{
    size_t off = 12 + 64 + 1 + (w->device == TSOCK_DEVICE_CUDA ? 0 : w->attach_len) + 1;

    for (uint32_t i = 0; i < t; i++)
        off += 1 + strlen(w->tensors[i].name) + 2 + 8u * w->tensors[i].ndim + 16;
    return off;
}

/* WELCOME's class names: NUL-terminated names of 1..255 name bytes, 32 KiB in all. */
static void
test_welcome_classes(void)
{
    struct tsock__msg m, base;
    static uint8_t big[TSOCK__PROTO_MAX_CLASS_BYTES + 1];
    make_welcome(&base);
    EXPECT_VALID(base);
    CHECK_EQ(tsock__proto_class_count(base.u.welcome.classes, base.u.welcome.classes_len), 3);
    m = base;
    m.u.welcome.classes_len--; /* the last name without its NUL */
    EXPECT_INVALID(m);
    static const char empty_name[] = "a\0\0b";
    m.u.welcome.classes = (const uint8_t *)empty_name;
    m.u.welcome.classes_len = sizeof empty_name;
    EXPECT_INVALID(m);
    static const char control[] = "a\tb";
    m.u.welcome.classes = (const uint8_t *)control;
    m.u.welcome.classes_len = sizeof control;
    EXPECT_INVALID(m);
    /* 255 name bytes are a name; 256 are not. */
    memset(big, 'c', sizeof big);
    big[255] = 0;
    m.u.welcome.classes = big;
    m.u.welcome.classes_len = 256;
    EXPECT_VALID(m);
    big[255] = 'c';
    big[256] = 0;
    m.u.welcome.classes_len = 257;
    EXPECT_INVALID(m);
    /* 32768 bytes in all (128 names of 255 bytes) fit; one byte more does not. */
    big[256] = 'c';
    for (size_t i = 255; i < sizeof big; i += 256)
        big[i] = 0;
    m.u.welcome.classes_len = TSOCK__PROTO_MAX_CLASS_BYTES;
    EXPECT_VALID(m);
    CHECK_EQ(tsock__proto_class_count(big, TSOCK__PROTO_MAX_CLASS_BYTES), 128);
    big[TSOCK__PROTO_MAX_CLASS_BYTES] = 0;
    m.u.welcome.classes_len = TSOCK__PROTO_MAX_CLASS_BYTES + 1;
    EXPECT_INVALID(m);
}

static void
test_hello_rules(void)
{
    struct tsock__msg m, base;

    make(&base, TSOCK__MSG_HELLO);
    base.u.hello.pid = 1;
    strcpy(base.u.hello.name, "abc");
    EXPECT_VALID(base);

    m = base;
    m.u.hello.flags = TSOCK__HELLO_WANT_IDS;
    EXPECT_VALID(m);
    m.u.hello.flags = TSOCK__HELLO_IDS_IF_ABLE;
    EXPECT_VALID(m);
    m.u.hello.flags = 8;
    EXPECT_INVALID(m);
    m.u.hello.flags = 0x80000000u | TSOCK__HELLO_WANT_IDS;
    EXPECT_INVALID(m);

    m = base;
    strcpy(m.u.hello.name, "a\x1b[31m");
    EXPECT_INVALID(m);
    strcpy(m.u.hello.name, "a\x7f");
    EXPECT_INVALID(m);
    memset(m.u.hello.name, 'n', sizeof m.u.hello.name); /* 64 bytes, no room for the NUL */
    EXPECT_INVALID(m);
    m.u.hello.name[TSOCK_MAX_NAME] = '\0'; /* 63 bytes */
    EXPECT_VALID(m);

    /* A NUL inside the name on the wire. */
    CHECK_EQ(patched_decode(&base, 12 + 9 + 1, 0), TSOCK_E_PROTOCOL);
    CHECK_EQ(patched_decode(&base, 12 + 9 + 1, 'z'), 0);
    /* A name length running past the frame. */
    CHECK_EQ(patched_decode(&base, 12 + 8, 4), TSOCK_E_PROTOCOL);
}

static void
test_welcome_ring_rules(void)
{
    struct tsock__msg m, base;
    struct tsock__msg_welcome *w = &m.u.welcome;

    make_welcome(&base);
    EXPECT_VALID(base);

    m = base;
    w->batch_size = 0;
    EXPECT_INVALID(m);

    m = base;
    w->slot_count = 0;
    w->ring_bytes = 0;
    EXPECT_INVALID(m);
    w->slot_count = MAX_SLOTS + 1;
    w->ring_bytes = w->slot_stride * w->slot_count;
    EXPECT_INVALID(m);
    w->slot_count = MAX_SLOTS;
    w->ring_bytes = w->slot_stride * w->slot_count;
    EXPECT_VALID(m);

    m = base;
    w->ring_bytes++;
    EXPECT_INVALID(m);
    w->ring_bytes -= 2;
    EXPECT_INVALID(m);

    /* slot_stride * slot_count wraps to ring_bytes in 64 bits. */
    m = base;
    w->slot_stride = 1ull << 63;
    w->slot_count = 1;
    w->ring_bytes = 1ull << 63;
    EXPECT_VALID(m);
    w->slot_count = 2;
    w->ring_bytes = 0;
    EXPECT_INVALID(m);

    m = base;
    w->heartbeat_ms = 0;
    EXPECT_INVALID(m);

    /* A host ring's WELCOME relabelled as a CUDA ring: its blob is a shared-memory name, not
     * handles, so it is refused; on the wire (the device field patched), it names a
     * shared-memory object and has no handles (test_welcome_cuda_rules covers the CUDA block). */
    m = base;
    w->device = TSOCK_DEVICE_CUDA;
    EXPECT_INVALID(m);
    CHECK_EQ(patched_decode(&base, 12 + 36, TSOCK_DEVICE_CUDA), TSOCK_E_PROTOCOL);
    CHECK_EQ(patched_decode(&base, 12 + 36, 2), TSOCK_E_PROTOCOL);
    w->device = 2;
    EXPECT_INVALID(m);
    w->device = UINT32_MAX;
    EXPECT_INVALID(m);

    /* samples: any value (0 is free mode) that is this node's share of the dataset; it sits
     * at body offset 40, after device. */
    static const uint64_t samples[] = {0, 1, 1281167, UINT64_MAX};
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        m = base;
        w->samples = samples[i];
        w->dataset = samples[i];
        EXPECT_VALID(m);
    }
    struct wire wire;
    struct tsock__msg d;
    m = base;
    w->samples = 0;
    w->dataset = 0;
    spec_encode(&m, &wire);
    wire.b[12 + 40 + 7] = 0x80;
    wire.b[12 + 48 + 7] = 0x80;
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), 0);
    CHECK(d.u.welcome.samples == 0x8000000000000000u);
    CHECK_EQ(d.u.welcome.device, TSOCK_DEVICE_CPU);
    CHECK_EQ(d.u.welcome.attach_len, base.u.welcome.attach_len);
    CHECK(memcmp(d.u.welcome.attach, base.u.welcome.attach, base.u.welcome.attach_len) == 0);
    /* A WELCOME without the samples field (the layout before it existed) is refused. */
    memmove(wire.b + 12 + 40, wire.b + 12 + 48, wire.n - (12 + 48));
    wire.n -= 8;
    store_le(wire.b + 8, wire.n - 12, 4);
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), TSOCK_E_PROTOCOL);
    /* Nor one without the dataset and node fields (protocol 3 before groups). */
    spec_encode(&base, &wire);
    memmove(wire.b + 12 + 48, wire.b + 12 + 64, wire.n - (12 + 64));
    wire.n -= 16;
    store_le(wire.b + 8, wire.n - 12, 4);
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), TSOCK_E_PROTOCOL);
}

/* A BATCH with its sample ids (protocol 3): golden bytes, the ids a view into the frame,
 * exactly `samples` of them, and no more than a frame holds. */
static void
test_batch_ids(void)
{
    static const uint8_t golden[] = {'T',  'S',  'C',  'K',  0x03, 0x00, 0x04, 0x00,
                                     0x34, 0x00, 0x00, 0x00,                         /* body 52 */
                                     0x01, 0x00, 0x00, 0x00,                         /* slot */
                                     0x02, 0x00, 0x00, 0x00,                         /* samples */
                                     0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
                                     0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* epoch */
                                     0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* index */
                                     0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* position */
                                     0x02, 0x00, 0x00, 0x00,                         /* flags */
                                     0x05, 0x00, 0x00, 0x00,                         /* id 5 */
                                     0x04, 0x03, 0x02, 0x01}; /* 0x01020304 */
    static const uint8_t ids[] = {5, 0, 0, 0, 4, 3, 2, 1};
    struct tsock__msg m, d;

    make(&m, TSOCK__MSG_BATCH);
    m.u.batch.slot = 1;
    m.u.batch.samples = 2;
    m.u.batch.seq = 7;
    m.u.batch.position = 64;
    m.u.batch.flags = TSOCK__BATCH_HAS_IDS;
    m.u.batch.ids = ids;
    int n = tsock__msg_encode(&m, scratch, sizeof scratch);
    CHECK_EQ(n, (int)sizeof golden);
    CHECK(memcmp(scratch, golden, sizeof golden) == 0);
    uint8_t *copy = malloc(sizeof golden);
    memcpy(copy, golden, sizeof golden);
    CHECK_EQ(tsock__msg_decode(copy, sizeof golden, &d), 0);
    CHECK(d.u.batch.ids == copy + 12 + 44); /* a view, not a copy */
    CHECK_EQ(d.u.batch.flags, TSOCK__BATCH_HAS_IDS);
    free(copy);
    EXPECT_VALID(m);

    /* One id short, one too many: the frame's length must be exactly samples * 4 ids. */
    CHECK_EQ(decode_exact(golden, sizeof golden - 4, &d), TSOCK_E_PROTOCOL);
    struct wire w;
    spec_encode(&m, &w);
    w_insert(&w, w.n, "\0\0\0\0", 4);
    CHECK_EQ(decode_exact(w.b, w.n, &d), TSOCK_E_PROTOCOL);

    /* The largest batch with ids fills a frame; one more sample does not fit. */
    uint8_t *big = calloc((size_t)TSOCK__BATCH_MAX_IDS + 1, 4);
    uint8_t *frame = malloc(TSOCK__PROTO_MAX_MESSAGE);
    m.u.batch.ids = big;
    m.u.batch.samples = TSOCK__BATCH_MAX_IDS;
    n = tsock__msg_encode(&m, frame, TSOCK__PROTO_MAX_MESSAGE);
    CHECK(n > TSOCK__PROTO_MAX_MESSAGE - 4 && n <= TSOCK__PROTO_MAX_MESSAGE);
    CHECK_EQ(decode_exact(frame, (size_t)n, &d), 0);
    m.u.batch.samples = TSOCK__BATCH_MAX_IDS + 1;
    CHECK_EQ(tsock__msg_encode(&m, frame, TSOCK__PROTO_MAX_MESSAGE), -EINVAL);
    /* A huge count with the flag never becomes a length: refused, nothing read. */
    memcpy(copy = malloc(sizeof golden), golden, sizeof golden);
    store_le(copy + 12 + 4, 0xFFFFFFFFu, 4);
    CHECK_EQ(tsock__msg_decode(copy, sizeof golden, &d), TSOCK_E_PROTOCOL);
    free(copy);
    free(frame);
    free(big);
}

/* The CUDA block: present exactly for device 1, exact in length, no all-zero handle, at most
 * TSOCK__PROTO_MAX_DEVICE_SLOTS slots, and no shared-memory name beside it. */
static void
test_welcome_cuda_rules(void)
{
    static const char name[] = "/tsock-1234-ring";
    static uint8_t own[CUDA_BLOB_MAX], again[BUF];
    struct tsock__msg m, base, d;
    struct tsock__msg_welcome *w = &m.u.welcome;
    struct wire wire;
    uint8_t *blob;

    make_welcome_cuda(&base);
    EXPECT_VALID(base);
    make_welcome_cuda_max(&m);
    EXPECT_VALID(m);
    /* The largest valid message without class names: 18 882 bytes (docs/protocol.md). */
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch),
             12 + 66 + TSOCK_MAX_TENSORS * (19 + TSOCK_MAX_NAME + 8 * TSOCK_MAX_DIMS) + 80 +
                 64 * TSOCK__PROTO_MAX_DEVICE_SLOTS + 4);

    /* A name and handles: which ring is it? The struct holds one blob, so the name goes in on
     * the wire, as a non-empty shm_name in front of the tensors; and in the struct, a blob
     * that is the name followed by the handles is the wrong length. */
    spec_encode(&base, &wire);
    CHECK_EQ(wire.b[12 + 64], 0);
    wire.b[12 + 64] = (uint8_t)(sizeof name - 1);
    w_insert(&wire, 12 + 64 + 1, name, sizeof name - 1);
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), TSOCK_E_PROTOCOL);
    m = base;
    memcpy(own, name, sizeof name - 1);
    memcpy(own + sizeof name - 1, base.u.welcome.attach, base.u.welcome.attach_len);
    w->attach = own;
    w->attach_len += (uint32_t)(sizeof name - 1);
    EXPECT_INVALID(m);

    m = base;
    blob = own_attach(w, own, sizeof own);
    memset(blob, 0, TSOCK__PROTO_DEVICE_ID_SIZE);
    EXPECT_INVALID(m);
    m = base;
    blob = own_attach(w, own, sizeof own);
    memset(blob + TSOCK__PROTO_DEVICE_ID_SIZE, 0, TSOCK__PROTO_HANDLE_SIZE);
    EXPECT_INVALID(m);
    /* one non-zero byte is enough to be taken for a handle */
    blob[TSOCK__PROTO_DEVICE_ID_SIZE + TSOCK__PROTO_HANDLE_SIZE - 1] = 1;
    EXPECT_VALID(m);
    for (uint32_t s = 0; s < base.u.welcome.slot_count; s++) {
        m = base;
        blob = own_attach(w, own, sizeof own);
        /* event handle s starts where the blob of an s-slot ring would end */
        memset(blob + CUDA_BLOB_SIZE(s), 0, TSOCK__PROTO_HANDLE_SIZE);
        EXPECT_INVALID(m);
    }
    /* Handles past slot_count are not part of the message: bytes after the blob change
     * nothing, and a blob that counts them (or lacks a byte, or is missing) is refused. */
    m = base;
    blob = own_attach(w, own, sizeof own);
    memset(blob + w->attach_len, 0x55, TSOCK__PROTO_HANDLE_SIZE);
    int n = tsock__msg_encode(&m, scratch, sizeof scratch);
    CHECK_EQ(tsock__msg_encode(&base, again, sizeof again), n);
    CHECK(n > 0 && memcmp(scratch, again, (size_t)n) == 0);
    w->attach_len += TSOCK__PROTO_HANDLE_SIZE;
    EXPECT_INVALID(m);
    w->attach_len = base.u.welcome.attach_len - 1;
    EXPECT_INVALID(m);
    w->attach = NULL;
    w->attach_len = 0;
    EXPECT_INVALID(m);
    w->attach_len = base.u.welcome.attach_len; /* a length, but no bytes */
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);

    make_welcome_cuda_max(&m);
    w->slot_count = TSOCK__PROTO_MAX_DEVICE_SLOTS + 1;
    w->ring_bytes = w->slot_stride * w->slot_count;
    set_cuda_handles(w); /* every handle of the 257 non-zero */
    CHECK_EQ(w->attach_len, CUDA_BLOB_MAX);
    EXPECT_INVALID(m);

    /* Truncated anywhere in the block, or one byte too long. */
    spec_encode(&base, &wire);
    for (size_t cut = 1; cut <= 80 + 64 * base.u.welcome.slot_count; cut += 13) {
        store_le(wire.b + 8, wire.n - cut - 12, 4);
        CHECK_EQ(decode_exact(wire.b, wire.n - cut, &d), TSOCK_E_PROTOCOL);
    }
    wire.b[wire.n] = 1;
    store_le(wire.b + 8, wire.n + 1 - 12, 4);
    CHECK_EQ(decode_exact(wire.b, wire.n + 1, &d), TSOCK_E_PROTOCOL);
    store_le(wire.b + 8, wire.n - 12, 4);
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), 0);
    CHECK_EQ(d.u.welcome.attach_len, 16 + 64 + 64 * 3);
    CHECK(memcmp(d.u.welcome.attach, base.u.welcome.attach, 16 + 64 + 64 * 3) == 0);
    CHECK(msg_same(&d, &base));

    /* A host WELCOME followed by a CUDA block (its first 80 bytes, or all of it), and a CUDA
     * WELCOME without one; in the struct, a host ring whose blob is handles. */
    make_welcome(&m);
    spec_encode(&m, &wire);
    w_insert(&wire, wire.n, cuda_blob(), 80);
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), TSOCK_E_PROTOCOL);
    spec_encode(&m, &wire);
    w_insert(&wire, wire.n, cuda_blob(), CUDA_BLOB_SIZE(m.u.welcome.slot_count));
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), TSOCK_E_PROTOCOL);
    set_cuda_handles(w);
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);
    m.u.welcome.device = TSOCK_DEVICE_CUDA;
    EXPECT_VALID(m);
    spec_encode(&m, &wire);
    size_t bare = wire.n - 80 - 64 * m.u.welcome.slot_count;
    store_le(wire.b + 8, bare - 12, 4);
    CHECK_EQ(decode_exact(wire.b, bare, &d), TSOCK_E_PROTOCOL);
}

static void
test_welcome_shm_rules(void)
{
    static const char *const bad[] = {"", "/", "tsock", "/a/b", "/a/", "/a\x01", "/a\x7f", "\x1f"};
    static uint8_t longest[TSOCK__PROTO_MAX_SHM_NAME + 1];
    struct tsock__msg m, base;
    struct tsock__msg_welcome *w = &m.u.welcome;

    make_welcome(&base);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m = base;
        set_shm_name(w, bad[i]);
        EXPECT_INVALID(m);
    }
    m = base;
    w->attach = (const uint8_t *)"/a\0b"; /* a NUL inside the name */
    w->attach_len = 4;
    EXPECT_INVALID(m);
    w->attach = NULL; /* no name at all */
    w->attach_len = 0;
    EXPECT_INVALID(m);
    w->attach_len = 2; /* a length, but no bytes */
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);
    m = base;
    set_shm_name(w, "/\xc3\xa9");
    EXPECT_VALID(m);
    longest[0] = '/';
    memset(longest + 1, 's', TSOCK__PROTO_MAX_SHM_NAME);
    w->attach = longest;
    w->attach_len = TSOCK__PROTO_MAX_SHM_NAME;
    EXPECT_VALID(m);
    w->attach_len++; /* 256 bytes: more than the u8 length can say */
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);

    CHECK_EQ(patched_decode(&base, 12 + 64 + 1 + 3, 0), TSOCK_E_PROTOCOL);
    CHECK_EQ(patched_decode(&base, 12 + 64 + 1 + 3, 'q'), 0);
}

static void
test_welcome_tensor_rules(void)
{
    struct tsock__msg m, base;
    struct tsock__msg_welcome *w = &m.u.welcome;
    struct tsock__tensor_desc *img = &w->tensors[0], *lab = &w->tensors[1];

    make_welcome(&base);

    m = base;
    w->tensor_count = 0;
    EXPECT_INVALID(m);
    w->tensor_count = TSOCK_MAX_TENSORS + 1;
    EXPECT_INVALID(m);
    CHECK_EQ(patched_decode(&base, tensor_offset(&base.u.welcome, 0) - 1, 3), TSOCK_E_PROTOCOL);
    CHECK_EQ(patched_decode(&base, tensor_offset(&base.u.welcome, 0) - 1, 255), TSOCK_E_PROTOCOL);

    static const int dtypes[] = {0, TSOCK_BFLOAT16 + 1, 255};
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
        m = base;
        img->dtype = (uint8_t)dtypes[i];
        EXPECT_INVALID(m);
    }
    m = base;
    img->dtype = TSOCK_INT8; /* same size: still valid */
    EXPECT_VALID(m);

    m = base;
    img->ndim = TSOCK_MAX_DIMS + 1;
    EXPECT_INVALID(m);
    img->ndim = 255;
    EXPECT_INVALID(m);

    static const int64_t bad_dims[] = {0, -1, INT64_MIN, -60};
    for (size_t i = 0; i < sizeof bad_dims / sizeof bad_dims[0]; i++) {
        m = base;
        img->sample_shape[1] = bad_dims[i];
        EXPECT_INVALID(m);
    }

    m = base;
    img->sample_bytes++;
    EXPECT_INVALID(m);
    img->sample_bytes -= 2;
    EXPECT_INVALID(m);
    m = base;
    lab->dtype = TSOCK_INT32; /* 4 bytes, but sample_bytes says 8 */
    EXPECT_INVALID(m);

    /* Products that wrap around in 64 bits to figures that would otherwise pass. */
    m = base;
    img->ndim = 2;
    img->sample_shape[0] = 1ll << 32;
    img->sample_shape[1] = 1ll << 32;
    img->sample_bytes = 0;
    EXPECT_INVALID(m);
    m = base;
    w->tensor_count = 1;
    w->batch_size = 1u << 16;
    img->ndim = 1;
    img->sample_shape[0] = 1ll << 48;
    img->sample_bytes = 1ull << 48;
    EXPECT_INVALID(m);
    m = base;
    lab->offset = UINT64_MAX - 7;
    EXPECT_INVALID(m);

    /* Room in the slot: the label ends exactly at the stride in base. */
    m = base;
    lab->offset++;
    EXPECT_INVALID(m);
    m = base;
    w->batch_size++;
    EXPECT_INVALID(m);
    m = base;
    w->slot_stride--;
    w->ring_bytes = w->slot_stride * w->slot_count;
    EXPECT_INVALID(m);
}

static void
test_welcome_name_rules(void)
{
    struct tsock__msg m, base;
    struct tsock__msg_welcome *w = &m.u.welcome;

    make_welcome(&base);

    m = base;
    w->tensors[1].name[0] = '\0';
    EXPECT_INVALID(m);
    strcpy(w->tensors[1].name, "la\tbel");
    EXPECT_INVALID(m);
    strcpy(w->tensors[1].name, "image"); /* a duplicate */
    EXPECT_INVALID(m);
    strcpy(w->tensors[1].name, "image2");
    EXPECT_VALID(m);
    memset(w->tensors[1].name, 'l', sizeof w->tensors[1].name); /* 64 bytes */
    EXPECT_INVALID(m);
    w->tensors[1].name[TSOCK_MAX_NAME] = '\0';
    EXPECT_VALID(m);

    size_t name1 = tensor_offset(&base.u.welcome, 1) + 1;
    CHECK_EQ(patched_decode(&base, name1 + 2, 0), TSOCK_E_PROTOCOL);
    CHECK_EQ(patched_decode(&base, name1 + 2, 'B'), 0);
    CHECK_EQ(patched_decode(&base, name1 - 1, 0), TSOCK_E_PROTOCOL); /* empty name */
}

static void
test_long_name_on_wire(void)
{
    /* A 255-byte name in the last tensor, whose name field lies near the end of struct
     * tsock_msg: refused without writing past the field (AddressSanitizer watches the end of
     * the heap block). */
    struct tsock__msg max, *d = malloc(sizeof *d);
    struct wire w, longer;
    size_t off, rest;

    if (!d)
        abort();
    make_welcome_max(&max);
    spec_encode(&max, &w);
    off = tensor_offset(&max.u.welcome, TSOCK_MAX_TENSORS - 1);
    rest = off + 1 + TSOCK_MAX_NAME;
    memcpy(longer.b, w.b, off);
    longer.n = off;
    w_le(&longer, 255, 1);
    memset(longer.b + longer.n, 'n', 255);
    longer.n += 255;
    memcpy(longer.b + longer.n, w.b + rest, w.n - rest);
    longer.n += w.n - rest;
    store_le(longer.b + 8, longer.n - 12, 4);
    CHECK_EQ(tsock__msg_decode(longer.b, longer.n, d), TSOCK_E_PROTOCOL);
    CHECK_EQ(tsock__msg_decode(w.b, w.n, d), 0);
    free(d);
}

static void
test_small_message_rules(void)
{
    struct tsock__msg m;

    static const int32_t codes[] = {
        0, 1, -1, -EINVAL, TSOCK_E_BASE, TSOCK_E_LAST, -20000, INT32_MIN, INT32_MAX};
    make(&m, TSOCK__MSG_REJECT);
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        m.u.reject.code = codes[i];
        EXPECT_INVALID(m);
    }

    make(&m, TSOCK__MSG_BATCH);
    m.u.batch.samples = 1;
    EXPECT_VALID(m);
    m.u.batch.samples = 0;
    EXPECT_INVALID(m);
    m.u.batch.samples = 1;
    m.u.batch.slot = MAX_SLOTS;
    EXPECT_INVALID(m);
    m.u.batch.slot = UINT32_MAX;
    EXPECT_INVALID(m);
    m.u.batch.slot = 0;
    m.u.batch.flags = 4;
    EXPECT_INVALID(m);
    m.u.batch.flags = TSOCK__BATCH_HAS_IDS; /* the flag without ids */
    EXPECT_INVALID(m);
    m.u.batch.flags = 0;
    m.u.batch.ids = (const uint8_t *)"\1\0\0\0"; /* ids without the flag */
    EXPECT_INVALID(m);
    m.u.batch.ids = NULL;
    m.u.batch.flags = 0x80000000u | TSOCK__BATCH_EPOCH_END;
    EXPECT_INVALID(m);

    /* position: any value, even one where position + samples wraps (the consumer, not the
     * codec, checks positions against the stream); it sits at body offset 32, before flags. */
    static const uint64_t positions[] = {0, 1, 1ull << 40, UINT64_MAX};
    make(&m, TSOCK__MSG_BATCH);
    m.u.batch.samples = UINT32_MAX;
    for (size_t i = 0; i < sizeof positions / sizeof positions[0]; i++) {
        m.u.batch.position = positions[i];
        EXPECT_VALID(m);
    }
    struct wire wire;
    struct tsock__msg d;
    m.u.batch.position = 0;
    m.u.batch.flags = TSOCK__BATCH_EPOCH_END;
    spec_encode(&m, &wire);
    CHECK_EQ(wire.n, 56);
    wire.b[12 + 32] = 0x11;
    wire.b[12 + 39] = 0x22;
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), 0);
    CHECK(d.u.batch.position == 0x2200000000000011u);
    CHECK_EQ(d.u.batch.flags, TSOCK__BATCH_EPOCH_END);
    CHECK(d.u.batch.index_in_epoch == 0);
    /* A BATCH without position (the layout before it existed) is refused: 40-byte body. */
    memmove(wire.b + 12 + 32, wire.b + 12 + 40, 4);
    wire.n -= 8;
    store_le(wire.b + 8, wire.n - 12, 4);
    CHECK_EQ(decode_exact(wire.b, wire.n, &d), TSOCK_E_PROTOCOL);

    make(&m, TSOCK__MSG_RELEASE);
    m.u.release.slot = MAX_SLOTS;
    EXPECT_INVALID(m);
    m.u.release.slot = UINT32_MAX;
    EXPECT_INVALID(m);

    static const uint32_t reasons[] = {0, 3, UINT32_MAX};
    make(&m, TSOCK__MSG_SHUTDOWN);
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
        m.u.shutdown.reason = reasons[i];
        EXPECT_INVALID(m);
    }
}

/* Protocol 3's group fields: HELLO's group block, WELCOME's dataset and node split, REJECT's
 * sentence, GROUP_FAILED; golden bytes from docs/protocol.md and one case per rule. */
static void
test_group_golden(void)
{
    static const uint8_t hello[] = {'T',  'S',  'C',  'K',  0x03, 0x00, 0x01, 0x00,
                                    0x25, 0x00, 0x00, 0x00, /* header: HELLO, body 37 */
                                    0x04, 0x03, 0x02, 0x01, /* pid */
                                    0x02, 0x00, 0x00, 0x00, /* flags: HAS_GROUP */
                                    0x00,                   /* name "" */
                                    0x02, 'g',  '1',        /* group "g1" */
                                    0x01, 0x00, 0x00, 0x00, /* rank 1 */
                                    0x04, 0x00, 0x00, 0x00, /* world 4 */
                                    0x20, 0x00, 0x00, 0x00, /* batch 32 */
                                    0x01,                   /* drop_last */
                                    0xE8, 0x03, 0x00, 0x00, /* timeout 1000 ms */
                                    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01}; /* resume */
    static const uint8_t failed[] = {
        'T',  'S',  'C',  'K',  0x03, 0x00,
        0x0F, 0x00, 0x14, 0x00, 0x00, 0x00, /* header: GROUP_FAILED, body 20 */
        0xDC, 0xD8, 0xFF, 0xFF,             /* code -10020 */
        0xE8, 0x03, 0x00, 0x00,             /* timeout 1000 ms */
        0x02, 0x00, 0x00, 0x00,             /* 2 ranks */
        0x01, 0x00, 0x00, 0x00,             /* rank 1 */
        0x03, 0x00, 0x00, 0x00};            /* rank 3 */
    static const uint8_t reject[] = {'T',  'S',  'C',  'K',  0x03, 0x00, 0x03, 0x00,
                                     0x07, 0x00, 0x00, 0x00, 0xDB, 0xD8, 0xFF, 0xFF, /* -10021 */
                                     0x02, 'n',  'o'};
    struct tsock__msg m;

    make(&m, TSOCK__MSG_HELLO);
    m.u.hello.pid = 0x01020304;
    m.u.hello.flags = TSOCK__HELLO_HAS_GROUP;
    strcpy(m.u.hello.group, "g1");
    m.u.hello.rank = 1;
    m.u.hello.world = 4;
    m.u.hello.batch = 32;
    m.u.hello.drop_last = 1;
    m.u.hello.timeout_ms = 1000;
    m.u.hello.resume = 0x0102030405060708ull;
    expect_golden(&m, hello, sizeof hello);

    make(&m, TSOCK__MSG_GROUP_FAILED);
    m.u.group_failed.code = TSOCK_E_GROUP_INCOMPLETE;
    m.u.group_failed.timeout_ms = 1000;
    m.u.group_failed.rank_count = 2;
    m.u.group_failed.ranks = failed + 24;
    expect_golden(&m, failed, sizeof failed);
    /* Decoded, the ranks are a view of the frame. */
    struct tsock__msg d;
    CHECK_EQ(tsock__msg_decode(failed, sizeof failed, &d), 0);
    CHECK(d.u.group_failed.ranks == failed + 24);

    make(&m, TSOCK__MSG_REJECT);
    m.u.reject.code = TSOCK_E_GROUP_MISMATCH;
    strcpy(m.u.reject.text, "no");
    expect_golden(&m, reject, sizeof reject);
}

static void
test_group_rules(void)
{
    struct tsock__msg m, base;

    /* HELLO: a group block is all or nothing, its fields in range. */
    make(&base, TSOCK__MSG_HELLO);
    base.u.hello.flags = TSOCK__HELLO_HAS_GROUP;
    strcpy(base.u.hello.group, "g");
    base.u.hello.world = 1;
    EXPECT_VALID(base);
    m = base;
    m.u.hello.group[0] = '\0';
    EXPECT_INVALID(m);
    strcpy(m.u.hello.group, "a\x1b");
    EXPECT_INVALID(m);
    memset(m.u.hello.group, 'g', sizeof m.u.hello.group); /* 65 bytes: too long */
    EXPECT_INVALID(m);
    m = base;
    m.u.hello.world = 0;
    EXPECT_INVALID(m);
    m.u.hello.world = 4;
    m.u.hello.rank = 4;
    EXPECT_INVALID(m);
    m.u.hello.rank = 3;
    EXPECT_VALID(m);
    m.u.hello.drop_last = 2;
    EXPECT_INVALID(m);
    /* Group fields without the flag: the encoder refuses (the wire has no room for them). */
    m = base;
    m.u.hello.flags = 0;
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);
    make(&m, TSOCK__MSG_HELLO);
    m.u.hello.timeout_ms = 1;
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);
    make(&m, TSOCK__MSG_HELLO);
    m.u.hello.batch = 1;
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);
    make(&m, TSOCK__MSG_HELLO); /* a restored state's fingerprint belongs to a rank */
    m.u.hello.resume = 1;
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);
    /* The block's group name running past the frame. */
    CHECK_EQ(patched_decode(&base, 12 + 9, 20), TSOCK_E_PROTOCOL);

    /* WELCOME: with a sampler, samples is this node's share ceil(dataset / nodes). */
    make_welcome(&base);
    m = base;
    m.u.welcome.nodes = 0;
    EXPECT_INVALID(m);
    m.u.welcome.nodes = 2;
    m.u.welcome.node_rank = 2;
    EXPECT_INVALID(m);
    m.u.welcome.node_rank = 1;
    EXPECT_INVALID(m); /* 1281167 is not ceil(1281167 / 2) */
    m.u.welcome.samples = 640584;
    EXPECT_VALID(m);
    m.u.welcome.samples = 640583;
    EXPECT_INVALID(m);
    m = base;
    m.u.welcome.dataset = 0; /* a sampler without a dataset */
    EXPECT_INVALID(m);
    m.u.welcome.samples = 0; /* free mode */
    EXPECT_VALID(m);
    m.u.welcome.dataset = 5; /* free mode with a dataset */
    EXPECT_INVALID(m);

    /* REJECT's sentence: name bytes, at most 255. */
    make(&m, TSOCK__MSG_REJECT);
    m.u.reject.code = TSOCK_E_GROUP_MISMATCH;
    strcpy(m.u.reject.text, "world size differs\n");
    EXPECT_INVALID(m);
    strcpy(m.u.reject.text, "world size differs");
    EXPECT_VALID(m);
    memset(m.u.reject.text, 'x', sizeof m.u.reject.text); /* 256 bytes: too long */
    EXPECT_INVALID(m);

    /* GROUP_FAILED: a group code, ranks strictly ascending, a timeout only when incomplete. */
    static const uint8_t ranks[] = {1, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0};
    make(&base, TSOCK__MSG_GROUP_FAILED);
    base.u.group_failed.code = TSOCK_E_GROUP_LOST;
    base.u.group_failed.rank_count = 2;
    base.u.group_failed.ranks = ranks;
    EXPECT_VALID(base);
    m = base;
    m.u.group_failed.timeout_ms = 1;
    EXPECT_INVALID(m);
    m.u.group_failed.code = TSOCK_E_GROUP_INCOMPLETE;
    EXPECT_VALID(m);
    static const int32_t codes[] = {0, TSOCK_E_GROUP_MISMATCH, TSOCK_E_EPOCH_INTERRUPTED, -1};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        m = base;
        m.u.group_failed.code = codes[i];
        EXPECT_INVALID(m);
    }
    m = base;
    m.u.group_failed.rank_count = 3; /* 1, 3, 3: a rank twice */
    EXPECT_INVALID(m);
    m.u.group_failed.ranks = ranks + 4; /* 3, 3, 2 */
    EXPECT_INVALID(m);
    m = base;
    m.u.group_failed.rank_count = 0;
    EXPECT_INVALID(m);
    m.u.group_failed.rank_count = TSOCK__PROTO_MAX_GROUP_RANKS + 1;
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);
    m = base;
    m.u.group_failed.ranks = NULL;
    CHECK_EQ(tsock__msg_encode(&m, scratch, sizeof scratch), -EINVAL);
    /* A rank count larger than the frame: refused, never read past. */
    CHECK_EQ(patched_decode(&base, 12 + 8, 3), TSOCK_E_PROTOCOL);
    CHECK_EQ(patched_decode(&base, 12 + 11, 0x80), TSOCK_E_PROTOCOL);
}

static void
test_type_names(void)
{
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_HELLO), "HELLO") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_WELCOME), "WELCOME") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_REJECT), "REJECT") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_BATCH), "BATCH") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_RELEASE), "RELEASE") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_HEARTBEAT), "HEARTBEAT") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_BYE), "BYE") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_SHUTDOWN), "SHUTDOWN") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_PAUSE), "PAUSE") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_RESUME), "RESUME") == 0);
    CHECK(strcmp(tsock__msg_type_name(TSOCK__MSG_RESUMED), "RESUMED") == 0);
    CHECK_EQ(TSOCK__MSG_PAUSE, 9);
    CHECK_EQ(TSOCK__MSG_RESUME, 10);
    CHECK_EQ(TSOCK__MSG_RESUMED, 11);
    CHECK(strcmp(tsock__msg_type_name(0), "?") == 0);
    CHECK(strcmp(tsock__msg_type_name(12), "STATS_REQUEST") == 0);
    CHECK(strcmp(tsock__msg_type_name(13), "STATS_REPLY") == 0);
    CHECK(strcmp(tsock__msg_type_name(14), "CONSUMER_STATS") == 0);
    CHECK_EQ(TSOCK__MSG_GROUP_FAILED, 15);
    CHECK(strcmp(tsock__msg_type_name(15), "GROUP_FAILED") == 0);
    CHECK_EQ(TSOCK__MSG_PAUSED, 16);
    CHECK(strcmp(tsock__msg_type_name(16), "PAUSED") == 0);
    CHECK(strcmp(tsock__msg_type_name(17), "?") == 0);
    CHECK(strcmp(tsock__msg_type_name(-1), "?") == 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Random input                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* An accepted frame is the canonical encoding of what it decodes to, and decoding that gives
 * the same message again. Returns 1 when so. */
static int
canonical(const uint8_t *bytes, size_t len)
{
    static uint8_t buf[BUF];
    static struct tsock__msg first, again;

    memset(&first, 0, sizeof first);
    memset(&again, 0, sizeof again);
    if (tsock__msg_decode(bytes, len, &first) != 0)
        return 0;
    int n = tsock__msg_encode(&first, buf, sizeof buf);
    if (n < 0 || (size_t)n != len || memcmp(buf, bytes, len) != 0)
        return 0;
    return tsock__msg_decode(buf, len, &again) == 0 && msg_same(&again, &first);
}

/* decode_exact without clearing *msg first: for loops that only look at the result code (a
 * WELCOME's tensor table makes the struct over 2 KiB, too much to clear a million times under
 * TSan). */
static int
decode_code(const uint8_t *bytes, size_t len, struct tsock__msg *msg)
{
    uint8_t *copy = malloc(len ? len : 1);

    if (!copy)
        abort();
    if (len)
        memcpy(copy, bytes, len);
    int r = tsock__msg_decode(copy, len, msg);
    free(copy);
    return r;
}

static void
test_random_bytes(void)
{
    static uint8_t bytes[BUF];
    struct tsock__msg d;
    long accepted = 0, bad_results = 0, not_canonical = 0;

    for (int i = 0; i < 300000; i++) {
        size_t len = (size_t)(rnd() % (i % 10 == 0 ? RANDOM_MAX : 160));
        for (size_t j = 0; j < len; j++)
            bytes[j] = (uint8_t)rnd();
        /* Most get a plausible header, so the body parsers see them. */
        if (i % 4 != 0 && len >= 12) {
            store_le(bytes, TSOCK__PROTO_MAGIC, 4);
            store_le(bytes + 4, i % 50 ? TSOCK__PROTO_VERSION : rnd() % 3, 2);
            store_le(bytes + 6, rnd() % (TSOCK__MSG_TYPE_LAST + 2), 2);
            store_le(bytes + 8, len - 12, 4);
            if (len > 20 && i % 3 == 0)
                bytes[12 + 8] = (uint8_t)(rnd() % 16); /* short HELLO names */
        }
        int r = decode_code(bytes, len, &d);
        if (r == 0) {
            accepted++;
            not_canonical += !canonical(bytes, len);
        } else if (r != TSOCK_E_PROTOCOL && r != TSOCK_E_VERSION) {
            bad_results++;
        }
    }
    CHECK(accepted > 0);
    CHECK_EQ(bad_results, 0);
    CHECK_EQ(not_canonical, 0);
}

static void
test_random_mutations(void)
{
    struct tsock__msg msgs[MAX_SAMPLES], d;
    uint8_t buf[BUF];
    int count = valid_messages(msgs);
    long accepted = 0, rejected = 0, bad_results = 0, not_canonical = 0;

    for (int k = 0; k < count; k++) {
        int n = tsock__msg_encode(&msgs[k], buf, sizeof buf);
        CHECK(n > 0);
        if (n <= 0)
            continue;
        /* Fewer rounds for the CUDA WELCOMEs of several KiB: their handles take most flips. */
        int rounds = n > 4096 ? 2000 : 20000;
        for (int i = 0; i < rounds; i++) {
            size_t pos = (size_t)(rnd() % (uint64_t)n);
            uint8_t old = buf[pos];
            buf[pos] ^= (uint8_t)(rnd() % 255 + 1);
            int r = decode_code(buf, (size_t)n, &d);
            if (r == 0) {
                accepted++;
                not_canonical += !canonical(buf, (size_t)n);
            } else if (r == TSOCK_E_PROTOCOL || r == TSOCK_E_VERSION) {
                rejected++;
            } else {
                bad_results++;
            }
            buf[pos] = old;
        }
    }
    CHECK(accepted > 0);
    CHECK(rejected > 0);
    CHECK_EQ(bad_results, 0);
    CHECK_EQ(not_canonical, 0);
}

int
main(void)
{
    test_roundtrip();
    test_golden();
    test_batch_ids();
    test_header();
    test_hello_rules();
    test_welcome_classes();
    test_welcome_ring_rules();
    test_welcome_shm_rules();
    test_welcome_cuda_rules();
    test_welcome_tensor_rules();
    test_welcome_name_rules();
    test_long_name_on_wire();
    test_small_message_rules();
    test_group_golden();
    test_group_rules();
    test_type_names();
    test_random_bytes();
    test_random_mutations();
    release_decoded();
    return CHECK_DONE();
}
