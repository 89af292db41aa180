/* Writes the seed corpus of the wire-message fuzz target: one valid frame of every message type
 * (plain and extreme values) and a few malformed frames, one small file each.
 *
 *   make_proto_corpus DIR          write the files into DIR (tests/fuzz/corpus/proto)
 *   make_proto_corpus --check DIR  exit 1 unless every file in DIR is what would be written
 *
 * The files are committed; the --check run in the test suite notices when the encoder's output
 * no longer matches them, i.e. when the wire format changed and the corpus must be rewritten
 * (and the protocol version probably raised). Inputs the fuzzer found are kept in the same
 * directory under other names and are not touched.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

static int check_mode;
static int failures;

static void
emit(const char *dir, const char *name, const uint8_t *bytes, size_t len)
{
    char path[4096];
    uint8_t old[TSOCK__PROTO_MAX_MESSAGE + 1];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, check_mode ? "rb" : "wb");
    if (!f) {
        fprintf(stderr, "make_corpus: cannot open %s\n", path);
        failures++;
        return;
    }
    if (check_mode) {
        size_t got = fread(old, 1, sizeof old, f);
        if (got != len || memcmp(old, bytes, len) != 0) {
            fprintf(stderr, "make_corpus: %s differs from the encoder's output\n", path);
            failures++;
        }
    } else if (len && fwrite(bytes, 1, len, f) != len) {
        fprintf(stderr, "make_corpus: cannot write %s\n", path);
        failures++;
    }
    fclose(f);
}

static void
store_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Encodes m into buf; aborts when the encoder refuses it (a bug in this program). */
static size_t
encode(const struct tsock__msg *m, uint8_t *buf)
{
    int n = tsock__msg_encode(m, buf, TSOCK__PROTO_MAX_MESSAGE);

    if (n < 0) {
        fprintf(stderr, "make_corpus: encoding a %s failed: %d\n", tsock__msg_type_name(m->type),
                n);
        exit(2);
    }
    return (size_t)n;
}

static void
put(const char *dir, const char *name, const struct tsock__msg *m)
{
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];

    emit(dir, name, buf, encode(m, buf));
}

static void
set_tensor(struct tsock__tensor_desc *t, const char *name, int dtype, int ndim, const int64_t *dims,
           uint64_t offset, uint64_t sample_bytes)
{
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = (uint8_t)dtype;
    t->ndim = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++)
        t->sample_shape[i] = dims[i];
    t->offset = offset;
    t->sample_bytes = sample_bytes;
}

/* ImageNet-like: 32 images of 3x224x224 bytes and 32 int64 labels per slot, 8 slots, a sampler
 * over the 1 281 167 training images. */
static void
welcome(struct tsock__msg *m)
{
    static const int64_t chw[3] = {3, 224, 224};
    struct tsock__msg_welcome *w = &m->u.welcome;

    memset(m, 0, sizeof *m);
    m->type = TSOCK__MSG_WELCOME;
    w->consumer_id = 3;
    w->batch_size = 32;
    w->slot_count = 8;
    w->slot_stride = 32 * 150528 + 32 * 8;
    w->ring_bytes = w->slot_stride * 8;
    w->heartbeat_ms = 250;
    w->device = TSOCK_DEVICE_CPU;
    w->samples = 1281167;
    w->dataset = 1281167;
    w->nodes = 1;
    static const char name[] = "/tsock-4242-ring";
    w->attach = (const uint8_t *)name;
    w->attach_len = sizeof name - 1;
    w->tensor_count = 2;
    set_tensor(&w->tensors[0], "image", TSOCK_UINT8, 3, chw, 0, 150528);
    set_tensor(&w->tensors[1], "label", TSOCK_INT64, 0, NULL, 32 * 150528, 8);
}

/* The largest message: 16 tensors of 8 dims, every dtype, names and ring name at full length. */
static void
welcome_max(struct tsock__msg *m)
{
    static const uint64_t size[13] = {0, 1, 1, 2, 4, 8, 2, 4, 8, 2, 4, 8, 2};
    static const int64_t dims[8] = {1, 2, 1, 1, 1, 1, 1, 3};
    struct tsock__msg_welcome *w = &m->u.welcome;
    uint64_t offset = 0;

    memset(m, 0, sizeof *m);
    m->type = TSOCK__MSG_WELCOME;
    w->consumer_id = UINT64_MAX;
    w->batch_size = 1000;
    w->slot_count = 1024;
    w->heartbeat_ms = 1000;
    w->device = TSOCK_DEVICE_CPU;
    w->samples = UINT64_MAX;
    w->dataset = UINT64_MAX;
    w->nodes = 1;
    static uint8_t ring_name[TSOCK__PROTO_MAX_SHM_NAME];
    ring_name[0] = '/';
    memset(ring_name + 1, 'r', sizeof ring_name - 1);
    w->attach = ring_name;
    w->attach_len = sizeof ring_name;
    w->tensor_count = TSOCK_MAX_TENSORS;
    for (int t = 0; t < TSOCK_MAX_TENSORS; t++) {
        char name[TSOCK_MAX_NAME + 1] = {0};
        int dtype = t % 12 + 1;

        memset(name, 'a' + t, TSOCK_MAX_NAME);
        set_tensor(&w->tensors[t], name, dtype, 8, dims, offset, size[dtype] * 6);
        offset += 1000 * size[dtype] * 6;
    }
    w->slot_stride = offset;
    w->ring_bytes = offset * 1024;
}

/* Two consumers (one paused, one that reported its figures) and an application status. */
static void
stats_reply(struct tsock__stats_reply *r)
{
    memset(r, 0, sizeof *r);
    r->request_id = 0x5EED;
    r->producer = (struct tsock__stats_producer){4242, 8, 3, 4, 1000,        32000,       1,
                                                 1990, 3, 1, 0, 1500000000u, 60000000000u};
    snprintf(r->status, sizeof r->status, "{\"images_per_s\":2410.5,\"cpu_percent\":715}");
    r->consumer_count = 2;
    r->consumers[0] = (struct tsock__stats_consumer){.id = 0,
                                                     .pid = 4300,
                                                     .flags = TSOCK__STATS_REPORTED,
                                                     .batches = 1000,
                                                     .samples = 32000,
                                                     .released = 998,
                                                     .held = 2,
                                                     .lag = 1,
                                                     .rate_milli = 75250,
                                                     .own = {998, 31936, 1, 2000000}};
    snprintf(r->consumers[0].name, sizeof r->consumers[0].name, "resnet50");
    r->consumers[1] = (struct tsock__stats_consumer){.id = 2,
                                                     .pid = 4301,
                                                     .flags = TSOCK__STATS_PAUSED,
                                                     .batches = 200,
                                                     .samples = 6400,
                                                     .released = 200};
}

static void
put_reply(const char *dir, const char *name, const struct tsock__stats_reply *r)
{
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    int n = tsock__stats_reply_encode(r, buf, sizeof buf);

    if (n < 0) {
        fprintf(stderr, "make_corpus: encoding a STATS_REPLY failed: %d\n", n);
        exit(2);
    }
    emit(dir, name, buf, (size_t)n);
}

static void
stats_replies(const char *dir)
{
    static struct tsock__stats_reply r;

    stats_reply(&r);
    put_reply(dir, "stats-reply.bin", &r);
    memset(&r, 0, sizeof r);
    r.producer.slots = 2;
    r.producer.free_slots = 2;
    put_reply(dir, "stats-reply-empty.bin", &r);
}

/* welcome()'s ring in device memory: no shm name; a device UUID, the ring's memory handle and
 * one event handle per slot, each with recognisable non-zero bytes. */
static void
welcome_cuda(struct tsock__msg *m)
{
    struct tsock__msg_welcome *w = &m->u.welcome;

    welcome(m);
    w->device = TSOCK_DEVICE_CUDA;
    static uint8_t blob[TSOCK__PROTO_DEVICE_ID_SIZE + 9 * TSOCK__PROTO_HANDLE_SIZE];
    uint8_t *mem = blob + TSOCK__PROTO_DEVICE_ID_SIZE, *events = mem + TSOCK__PROTO_HANDLE_SIZE;
    for (int i = 0; i < TSOCK__PROTO_DEVICE_ID_SIZE; i++)
        blob[i] = (uint8_t)(0xA0 + i);
    for (int i = 0; i < TSOCK__PROTO_HANDLE_SIZE; i++)
        mem[i] = (uint8_t)(i + 1);
    for (uint32_t s = 0; s < w->slot_count; s++)
        memset(events + (size_t)s * TSOCK__PROTO_HANDLE_SIZE, (int)(0xE0 + s),
               TSOCK__PROTO_HANDLE_SIZE);
    w->attach = blob;
    w->attach_len = (uint32_t)(TSOCK__PROTO_DEVICE_ID_SIZE +
                               (1 + (size_t)w->slot_count) * TSOCK__PROTO_HANDLE_SIZE);
}

static void
valid(const char *dir)
{
    struct tsock__msg m;

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_HELLO;
    m.u.hello.pid = 4242;
    snprintf(m.u.hello.name, sizeof m.u.hello.name, "trainer-0");
    put(dir, "hello.bin", &m);
    m.u.hello.name[0] = '\0';
    put(dir, "hello-unnamed.bin", &m);
    m.u.hello.flags = TSOCK__HELLO_WANT_IDS;
    put(dir, "hello-want-ids.bin", &m);
    m.u.hello.flags = TSOCK__HELLO_IDS_IF_ABLE;
    put(dir, "hello-ids-if-able.bin", &m);
    m.u.hello.flags = TSOCK__HELLO_HAS_GROUP;
    snprintf(m.u.hello.group, sizeof m.u.hello.group, "resnet");
    m.u.hello.rank = 1;
    m.u.hello.world = 4;
    m.u.hello.batch = 32;
    m.u.hello.drop_last = 1;
    m.u.hello.timeout_ms = 600000;
    put(dir, "hello-group.bin", &m);
    m.u.hello.resume = 0x0123456789ABCDEFull;
    put(dir, "hello-group-restored.bin", &m);
    m.u.hello.resume = 0;

    welcome(&m);
    put(dir, "welcome.bin", &m);
    m.u.welcome.samples = 0;
    m.u.welcome.dataset = 0;
    put(dir, "welcome-free.bin", &m);
    welcome(&m);
    m.u.welcome.dataset = 2 * 1281167 - 1; /* node 1 of 2 of a larger dataset */
    m.u.welcome.nodes = 2;
    m.u.welcome.node_rank = 1;
    put(dir, "welcome-node.bin", &m);
    welcome(&m);
    static const char classes[] = "n01440764\0n01443537\0goldfish";
    m.u.welcome.classes = (const uint8_t *)classes;
    m.u.welcome.classes_len = sizeof classes;
    put(dir, "welcome-classes.bin", &m);
    welcome_max(&m);
    put(dir, "welcome-max.bin", &m);
    welcome_cuda(&m);
    put(dir, "welcome-cuda.bin", &m);

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_REJECT;
    m.u.reject.code = TSOCK_E_VERSION;
    put(dir, "reject-version.bin", &m);
    m.u.reject.code = TSOCK_E_FULL;
    put(dir, "reject-full.bin", &m);
    m.u.reject.code = TSOCK_E_GROUP_MISMATCH;
    snprintf(m.u.reject.text, sizeof m.u.reject.text,
             "group 'resnet': the world size differs from the group's other ranks");
    put(dir, "reject-group-mismatch.bin", &m);

    static const uint8_t ranks[8] = {1, 0, 0, 0, 3, 0, 0, 0};
    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_GROUP_FAILED;
    m.u.group_failed.code = TSOCK_E_GROUP_INCOMPLETE;
    m.u.group_failed.timeout_ms = 600000;
    m.u.group_failed.rank_count = 2;
    m.u.group_failed.ranks = ranks;
    put(dir, "group-failed-incomplete.bin", &m);
    m.u.group_failed.code = TSOCK_E_GROUP_LOST;
    m.u.group_failed.timeout_ms = 0;
    m.u.group_failed.rank_count = 1;
    put(dir, "group-failed-lost.bin", &m);

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_BATCH;
    m.u.batch.slot = 5;
    m.u.batch.samples = 32;
    m.u.batch.seq = 1000;
    m.u.batch.epoch = 2;
    m.u.batch.index_in_epoch = 40;
    m.u.batch.position = 2 * 1281167 + 40 * 32;
    put(dir, "batch.bin", &m);
    m.u.batch.samples = 17;
    m.u.batch.index_in_epoch = 40036;
    m.u.batch.position = 2 * 1281167 + 40036 * 32;
    m.u.batch.flags = TSOCK__BATCH_EPOCH_END;
    put(dir, "batch-epoch-end.bin", &m);
    m.u.batch.slot = 1023;
    m.u.batch.samples = UINT32_MAX;
    m.u.batch.seq = UINT64_MAX;
    m.u.batch.epoch = UINT64_MAX;
    m.u.batch.index_in_epoch = UINT64_MAX;
    m.u.batch.position = UINT64_MAX;
    put(dir, "batch-max.bin", &m);
    static const uint8_t ids[12] = {7, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x34, 0x12, 0, 0};
    m.u.batch.samples = 3;
    m.u.batch.flags = TSOCK__BATCH_HAS_IDS | TSOCK__BATCH_EPOCH_END;
    m.u.batch.ids = ids;
    put(dir, "batch-ids.bin", &m);

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_RELEASE;
    m.u.release.slot = 5;
    m.u.release.seq = 1000;
    put(dir, "release.bin", &m);

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_HEARTBEAT;
    put(dir, "heartbeat.bin", &m);
    m.type = TSOCK__MSG_BYE;
    put(dir, "bye.bin", &m);
    m.type = TSOCK__MSG_PAUSE;
    m.u.pause.epochs = 2;
    put(dir, "pause.bin", &m);
    m.type = TSOCK__MSG_RESUME;
    put(dir, "resume.bin", &m);
    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_RESUMED;
    put(dir, "resumed.bin", &m);
    m.type = TSOCK__MSG_PAUSED;
    put(dir, "paused.bin", &m);

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_SHUTDOWN;
    m.u.shutdown.reason = TSOCK__SHUTDOWN_END;
    put(dir, "shutdown-end.bin", &m);
    m.u.shutdown.reason = TSOCK__SHUTDOWN_STOPPED;
    put(dir, "shutdown-stopped.bin", &m);

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_STATS_REQUEST;
    m.u.stats_request.request_id = 0x5EED;
    put(dir, "stats-request.bin", &m);
    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_CONSUMER_STATS;
    m.u.consumer_stats = (struct tsock__msg_consumer_stats){40036, 1281167, 1, 2500000000u};
    put(dir, "consumer-stats.bin", &m);
    stats_replies(dir);
}

/* Broken STATS_REPLYs: cut short, a status that is not UTF-8 text, more held slots than the
 * ring has, a consumer count past the limit. */
static void
stats_malformed(const char *dir)
{
    static struct tsock__stats_reply r;
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    int n;

    stats_reply(&r);
    n = tsock__stats_reply_encode(&r, buf, sizeof buf);
    emit(dir, "bad-stats-reply-truncated.bin", buf, (size_t)n - 1);
    buf[12 + 96 + 2] = 0xC0; /* first status byte: an overlong UTF-8 lead */
    emit(dir, "bad-stats-reply-status.bin", buf, (size_t)n);
    n = tsock__stats_reply_encode(&r, buf, sizeof buf);
    store_le(buf + 12 + 20, 9, 4); /* held 9 of 8 slots */
    emit(dir, "bad-stats-reply-held.bin", buf, (size_t)n);
    n = tsock__stats_reply_encode(&r, buf, sizeof buf);
    buf[12 + 96 + 2 + strlen(r.status)] = TSOCK__STATS_MAX_CONSUMERS + 1;
    emit(dir, "bad-stats-reply-count.bin", buf, (size_t)n);
}

static void
malformed(const char *dir)
{
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    struct tsock__msg m;
    size_t n;

    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_BATCH;
    m.u.batch.samples = 1;
    n = encode(&m, buf);
    buf[3] = 'X';
    emit(dir, "bad-magic.bin", buf, n);
    n = encode(&m, buf);
    store_le(buf + 4, 1, 2); /* a peer of protocol version 1 */
    emit(dir, "bad-version.bin", buf, n);
    n = encode(&m, buf);
    store_le(buf + 6, TSOCK__MSG_TYPE_LAST + 1, 2);
    emit(dir, "bad-type.bin", buf, n);
    n = encode(&m, buf);
    store_le(buf + 8, 0xFFFFFFF0u, 4);
    emit(dir, "bad-length.bin", buf, n);
    n = encode(&m, buf);
    buf[n] = 0;
    store_le(buf + 8, n + 1 - TSOCK__PROTO_HEADER_SIZE, 4);
    emit(dir, "bad-trailing.bin", buf, n + 1);
    emit(dir, "bad-empty.bin", buf, 0);
    /* The BATCH layout without `position` (40-byte body): flags moved up over it. */
    n = encode(&m, buf);
    memmove(buf + TSOCK__PROTO_HEADER_SIZE + 32, buf + TSOCK__PROTO_HEADER_SIZE + 40, 4);
    n -= 8;
    store_le(buf + 8, n - TSOCK__PROTO_HEADER_SIZE, 4);
    emit(dir, "bad-batch-no-position.bin", buf, n);
    /* A BATCH with ids: one id short (body length fixed up), and the flag without ids. */
    static const uint8_t ids[8] = {1, 0, 0, 0, 2, 0, 0, 0};
    m.u.batch.samples = 2;
    m.u.batch.flags = TSOCK__BATCH_HAS_IDS;
    m.u.batch.ids = ids;
    n = encode(&m, buf);
    store_le(buf + 8, n - 4 - TSOCK__PROTO_HEADER_SIZE, 4);
    emit(dir, "bad-batch-ids-short.bin", buf, n - 4);
    store_le(buf + 8, n - 8 - TSOCK__PROTO_HEADER_SIZE, 4);
    emit(dir, "bad-batch-ids-missing.bin", buf, n - 8);
    /* A message with an empty body carrying one, announced and not. */
    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_PAUSE;
    n = encode(&m, buf);
    store_le(buf + 8, 4, 4); /* its count of epochs cut short */
    emit(dir, "bad-pause-short.bin", buf, TSOCK__PROTO_HEADER_SIZE + 4);
    store_le(buf + 8, 0, 4); /* its count missing */
    emit(dir, "bad-pause-body.bin", buf, TSOCK__PROTO_HEADER_SIZE);
    m.type = TSOCK__MSG_RESUMED;
    n = encode(&m, buf);
    buf[n] = 0;
    emit(dir, "bad-resumed-trailing.bin", buf, n + 1);
    m.type = TSOCK__MSG_RESUME;
    n = encode(&m, buf);
    emit(dir, "bad-resume-truncated.bin", buf, n - 1);

    stats_malformed(dir);

    /* GROUP_FAILED naming a rank twice, and with a rank count past the frame. */
    static const uint8_t twice[8] = {2, 0, 0, 0, 2, 0, 0, 0};
    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_GROUP_FAILED;
    m.u.group_failed.code = TSOCK_E_GROUP_LOST;
    m.u.group_failed.rank_count = 1;
    m.u.group_failed.ranks = twice;
    n = encode(&m, buf);
    store_le(buf + TSOCK__PROTO_HEADER_SIZE + 8, 2, 4);
    memcpy(buf + n, twice + 4, 4);
    store_le(buf + 8, n + 4 - TSOCK__PROTO_HEADER_SIZE, 4);
    emit(dir, "bad-group-failed-twice.bin", buf, n + 4);
    n = encode(&m, buf);
    store_le(buf + TSOCK__PROTO_HEADER_SIZE + 8, 0x40000000u, 4);
    emit(dir, "bad-group-failed-count.bin", buf, n);
    /* A HELLO whose group rank is not below its world. */
    memset(&m, 0, sizeof m);
    m.type = TSOCK__MSG_HELLO;
    m.u.hello.flags = TSOCK__HELLO_HAS_GROUP;
    snprintf(m.u.hello.group, sizeof m.u.hello.group, "g");
    m.u.hello.world = 2;
    n = encode(&m, buf);
    store_le(buf + n - 17, 2, 4); /* rank 2 of 2 */
    emit(dir, "bad-hello-group-rank.bin", buf, n);

    welcome(&m);
    n = encode(&m, buf);
    emit(dir, "bad-truncated-welcome.bin", buf, n - 1);
    store_le(buf + 12 + 24, m.u.welcome.ring_bytes + 1, 8); /* ring_bytes != stride * count */
    emit(dir, "bad-ring-bytes.bin", buf, n);
    /* The protocol-3 WELCOME before the dataset and node fields: the shm name moved up. */
    n = encode(&m, buf);
    memmove(buf + TSOCK__PROTO_HEADER_SIZE + 48, buf + TSOCK__PROTO_HEADER_SIZE + 64,
            n - TSOCK__PROTO_HEADER_SIZE - 64);
    n -= 16;
    store_le(buf + 8, n - TSOCK__PROTO_HEADER_SIZE, 4);
    emit(dir, "bad-welcome-no-dataset.bin", buf, n);
    /* The WELCOME layout without `samples`: the shm name moved up over it. */
    n = encode(&m, buf);
    memmove(buf + TSOCK__PROTO_HEADER_SIZE + 40, buf + TSOCK__PROTO_HEADER_SIZE + 48,
            n - TSOCK__PROTO_HEADER_SIZE - 48);
    n -= 8;
    store_le(buf + 8, n - TSOCK__PROTO_HEADER_SIZE, 4);
    emit(dir, "bad-welcome-no-samples.bin", buf, n);

    /* CUDA rings: the last event handle all zeros; the block cut short; a version-1 style
     * WELCOME of a CUDA ring (a shm name, no block). */
    welcome_cuda(&m);
    n = encode(&m, buf);
    memset(buf + n - TSOCK__PROTO_HANDLE_SIZE, 0, TSOCK__PROTO_HANDLE_SIZE);
    emit(dir, "bad-welcome-cuda-zero-event.bin", buf, n);
    n = encode(&m, buf);
    store_le(buf + 8, n - 1 - TSOCK__PROTO_HEADER_SIZE, 4);
    emit(dir, "bad-welcome-cuda-truncated.bin", buf, n - 1);
    welcome(&m);
    n = encode(&m, buf);
    store_le(buf + TSOCK__PROTO_HEADER_SIZE + 36, TSOCK_DEVICE_CUDA, 4);
    emit(dir, "bad-welcome-cuda-no-handles.bin", buf, n);
}

int
main(int argc, char **argv)
{
    const char *dir;

    if (argc == 3 && strcmp(argv[1], "--check") == 0) {
        check_mode = 1;
        dir = argv[2];
    } else if (argc == 2) {
        dir = argv[1];
    } else {
        fprintf(stderr, "usage: %s [--check] DIR\n", argv[0]);
        return 2;
    }
    valid(dir);
    malformed(dir);
    return failures ? 1 : 0;
}
