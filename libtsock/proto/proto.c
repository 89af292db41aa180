/* Wire messages (HELLO..CONSUMER_STATS, all but STATS_REPLY, which stats_reply.c codes):
 * encoder and checked decoder. proto.h states the contract, docs/protocol.md the byte layout,
 * wire.h the byte-level primitives (little-endian integers, strings, the frame header) that
 * both codecs share.
 *
 * The encoder and the decoder share one set of validity rules (check_msg): the encoder refuses
 * exactly what the decoder would reject, so a peer never receives a message from us that it
 * must throw away. The encoding of a valid message is unique, hence decode(encode(m)) == m for
 * every valid m and encode(decode(f)) == f for every accepted frame f; the fuzz target checks
 * both.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"
#include "wire.h"

/* ------------------------------------------------------------------------------------------ */
/* Validity rules, shared by the encoder and the decoder                                      */
/* ------------------------------------------------------------------------------------------ */

/* Bytes per element, indexed by tsock_dtype. Kept here rather than calling tsock_dtype_size so
 * that the codec stays a leaf with no link-time dependency (it is fuzzed on its own). */
static const uint8_t dtype_bytes[TSOCK_BFLOAT16 + 1] = {0, 1, 1, 2, 4, 8, 2, 4, 8, 2, 4, 8, 2};

/* *out = a * b; -1 when the product does not fit in 64 bits. */
static int
mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a != 0 && b > UINT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

/* *out = a + b; -1 when the sum does not fit in 64 bits. */
static int
add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b > UINT64_MAX - a)
        return -1;
    *out = a + b;
    return 0;
}

/* A POSIX shared-memory name as shm_open wants it portably: a leading '/' and no other. */
static int
check_shm_name(const uint8_t *s, size_t len)
{
    if (len < 2 || len > TSOCK__PROTO_MAX_SHM_NAME ||
        !tsock__wire_name_bytes_ok((const char *)s, len))
        return -1;
    if (s[0] != '/' || memchr(s + 1, '/', len - 1) != NULL)
        return -1;
    return 0;
}

/* One tensor of a WELCOME: a known dtype, positive dims whose byte count is sample_bytes, and
 * room in the slot for batch_size samples at its offset. All arithmetic is overflow-checked:
 * the consumer uses these figures to compute pointers into the mapped ring. */
static int
check_tensor(const struct tsock__tensor_desc *t, uint64_t batch_size, uint64_t slot_stride)
{
    uint64_t bytes, end;
    size_t len;

    if (tsock__wire_check_str(t->name, sizeof t->name, 1, &len) != 0)
        return -1;
    if (t->dtype < TSOCK_UINT8 || t->dtype > TSOCK_BFLOAT16 || t->ndim > TSOCK_MAX_DIMS)
        return -1;
    bytes = dtype_bytes[t->dtype];
    for (unsigned i = 0; i < t->ndim; i++) {
        if (t->sample_shape[i] <= 0 || mul_u64(bytes, (uint64_t)t->sample_shape[i], &bytes) != 0)
            return -1;
    }
    if (bytes != t->sample_bytes)
        return -1;
    if (mul_u64(batch_size, bytes, &end) != 0 || add_u64(end, t->offset, &end) != 0)
        return -1;
    return end <= slot_stride ? 0 : -1;
}

/* An opaque handle that is all zero bytes is certainly not one the CUDA runtime produced: a
 * producer that sends one is broken, and the consumer is told so before it reaches CUDA. */
static int
all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0)
            return 0;
    }
    return 1;
}

/* Bytes of a device ring's attach blob: the device id, the memory handle and a handle per slot. */
static uint64_t
device_blob_size(uint32_t slots)
{
    return TSOCK__PROTO_DEVICE_ID_SIZE + (uint64_t)TSOCK__PROTO_HANDLE_SIZE * (1 + (uint64_t)slots);
}

/* Where the ring lives: a host ring's blob is its shared-memory name; a device ring has at most
 * TSOCK__PROTO_MAX_DEVICE_SLOTS slots and a blob of device id and handles, none of them all zero.
 */
static int
check_ring_place(const struct tsock__msg_welcome *w)
{
    if (!w->attach && w->attach_len)
        return -1;
    if (w->device == TSOCK_DEVICE_CPU)
        return check_shm_name(w->attach, w->attach_len);
    if (w->device != TSOCK_DEVICE_CUDA || w->slot_count > TSOCK__PROTO_MAX_DEVICE_SLOTS ||
        w->attach_len != device_blob_size(w->slot_count))
        return -1;
    if (all_zero(w->attach, TSOCK__PROTO_DEVICE_ID_SIZE))
        return -1;
    for (uint32_t h = 0; h <= w->slot_count; h++) {
        const uint8_t *handle =
            w->attach + TSOCK__PROTO_DEVICE_ID_SIZE + (size_t)h * TSOCK__PROTO_HANDLE_SIZE;
        if (all_zero(handle, TSOCK__PROTO_HANDLE_SIZE))
            return -1;
    }
    return 0;
}

/* Class names: NUL-terminated names of 1..255 name bytes, back to back, nothing after the last
 * NUL. Returns the count, or -1. */
long
tsock__proto_class_count(const uint8_t *blob, uint32_t len)
{
    if (len > TSOCK__PROTO_MAX_CLASS_BYTES || (len && !blob))
        return -1;
    long count = 0;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (blob[i] != 0)
            continue;
        size_t n = i - start;
        if (n < 1 || n > TSOCK__PROTO_MAX_CLASS_NAME ||
            !tsock__wire_name_bytes_ok((const char *)blob + start, n))
            return -1;
        count++;
        start = i + 1;
    }
    return start == len ? count : -1;
}

static int
check_welcome(const struct tsock__msg_welcome *w)
{
    uint64_t ring;

    if (w->batch_size < 1 || w->slot_count < 1 || w->slot_count > TSOCK__WIRE_MAX_SLOTS)
        return -1;
    if (mul_u64(w->slot_stride, w->slot_count, &ring) != 0 || ring != w->ring_bytes)
        return -1;
    if (w->heartbeat_ms < 1 || check_ring_place(w) != 0)
        return -1;
    /* A sampler's epoch is this node's share of the dataset; free mode has neither. */
    if (w->nodes < 1 || w->node_rank >= w->nodes)
        return -1;
    if ((w->samples == 0) != (w->dataset == 0) ||
        (w->samples != 0 && w->samples != w->dataset / w->nodes + (w->dataset % w->nodes != 0)))
        return -1;
    if (w->tensor_count < 1 || w->tensor_count > TSOCK_MAX_TENSORS)
        return -1;
    if (tsock__proto_class_count(w->classes, w->classes_len) < 0)
        return -1;
    for (uint32_t t = 0; t < w->tensor_count; t++) {
        if (check_tensor(&w->tensors[t], w->batch_size, w->slot_stride) != 0)
            return -1;
        /* Consumers look tensors up by name, so names are unique. */
        for (uint32_t u = 0; u < t; u++) {
            if (strcmp(w->tensors[u].name, w->tensors[t].name) == 0)
                return -1;
        }
    }
    return 0;
}

/* A BATCH carries ids exactly when its flag says so, and no more of them than a frame holds. */
static int
check_batch(const struct tsock__msg_batch *b)
{
    if (b->slot >= TSOCK__WIRE_MAX_SLOTS || b->samples < 1)
        return -1;
    if (b->flags & ~(TSOCK__BATCH_EPOCH_END | TSOCK__BATCH_HAS_IDS))
        return -1;
    if (!(b->flags & TSOCK__BATCH_HAS_IDS))
        return b->ids == NULL ? 0 : -1;
    return b->ids != NULL && b->samples <= TSOCK__BATCH_MAX_IDS ? 0 : -1;
}

/* A group block is all or nothing: with the flag every field in range, without it every field
 * zero, so that each HELLO has one encoding. */
static int
check_hello(const struct tsock__msg_hello *h)
{
    size_t len;
    if ((h->flags & ~(TSOCK__HELLO_WANT_IDS | TSOCK__HELLO_HAS_GROUP | TSOCK__HELLO_IDS_IF_ABLE)) !=
            0 ||
        tsock__wire_check_str(h->name, sizeof h->name, 0, &len) != 0)
        return -1;
    if (!(h->flags & TSOCK__HELLO_HAS_GROUP))
        return h->group[0] == '\0' && h->rank == 0 && h->world == 0 && h->batch == 0 &&
                       h->drop_last == 0 && h->timeout_ms == 0 && h->resume == 0
                   ? 0
                   : -1;
    if (tsock__wire_check_str(h->group, sizeof h->group, 1, &len) != 0)
        return -1;
    return h->world >= 1 && h->rank < h->world && h->drop_last <= 1 ? 0 : -1;
}

static uint32_t
u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A failed group names 1..TSOCK__PROTO_MAX_GROUP_RANKS ranks, strictly ascending; only a group
 * that timed out has a timeout. */
static int
check_group_failed(const struct tsock__msg_group_failed *g)
{
    if (g->code == TSOCK_E_GROUP_LOST) {
        if (g->timeout_ms != 0)
            return -1;
    } else if (g->code != TSOCK_E_GROUP_INCOMPLETE) {
        return -1;
    }
    if (g->rank_count < 1 || g->rank_count > TSOCK__PROTO_MAX_GROUP_RANKS || g->ranks == NULL)
        return -1;
    for (uint32_t i = 1; i < g->rank_count; i++)
        if (u32_at(g->ranks + 4 * (size_t)i) <= u32_at(g->ranks + 4 * (size_t)(i - 1)))
            return -1;
    return 0;
}

/* Returns 0 when msg is a valid message of a known type, -1 otherwise. */
static int
check_msg(const struct tsock__msg *msg)
{
    size_t len;

    switch (msg->type) {
    case TSOCK__MSG_HELLO: return check_hello(&msg->u.hello);
    case TSOCK__MSG_WELCOME: return check_welcome(&msg->u.welcome);
    case TSOCK__MSG_REJECT:
        if (msg->u.reject.code <= TSOCK_E_LAST || msg->u.reject.code >= TSOCK_E_BASE)
            return -1;
        return tsock__wire_check_str(msg->u.reject.text, sizeof msg->u.reject.text, 0, &len);
    case TSOCK__MSG_GROUP_FAILED: return check_group_failed(&msg->u.group_failed);
    case TSOCK__MSG_BATCH: return check_batch(&msg->u.batch);
    case TSOCK__MSG_RELEASE: return msg->u.release.slot < TSOCK__WIRE_MAX_SLOTS ? 0 : -1;
    case TSOCK__MSG_PAUSE: /* any count of epochs */
    case TSOCK__MSG_RESUME:
    case TSOCK__MSG_HEARTBEAT:
    case TSOCK__MSG_BYE:
    case TSOCK__MSG_RESUMED:
    case TSOCK__MSG_PAUSED:
    case TSOCK__MSG_STATS_REQUEST: /* any request id */
    case TSOCK__MSG_CONSUMER_STATS: /* any figures: they are only displayed */ return 0;
    case TSOCK__MSG_SHUTDOWN:
        return msg->u.shutdown.reason == TSOCK__SHUTDOWN_END ||
                       msg->u.shutdown.reason == TSOCK__SHUTDOWN_STOPPED
                   ? 0
                   : -1;
    default: return -1;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void
put_hello(struct tsock__wire_writer *w, const struct tsock__msg_hello *h)
{
    tsock__wire_put_le(w, h->pid, 4);
    tsock__wire_put_le(w, h->flags, 4);
    tsock__wire_put_str(w, h->name, sizeof h->name);
    if (!(h->flags & TSOCK__HELLO_HAS_GROUP))
        return;
    tsock__wire_put_str(w, h->group, sizeof h->group);
    tsock__wire_put_le(w, h->rank, 4);
    tsock__wire_put_le(w, h->world, 4);
    tsock__wire_put_le(w, h->batch, 4);
    tsock__wire_put_le(w, h->drop_last, 1);
    tsock__wire_put_le(w, h->timeout_ms, 4);
    tsock__wire_put_le(w, h->resume, 8);
}

static void
put_tensor(struct tsock__wire_writer *w, const struct tsock__tensor_desc *t)
{
    tsock__wire_put_str(w, t->name, sizeof t->name);
    tsock__wire_put_le(w, t->dtype, 1);
    tsock__wire_put_le(w, t->ndim, 1);
    for (unsigned i = 0; i < t->ndim; i++)
        tsock__wire_put_le(w, (uint64_t)t->sample_shape[i], 8);
    tsock__wire_put_le(w, t->offset, 8);
    tsock__wire_put_le(w, t->sample_bytes, 8);
}

static void
put_welcome(struct tsock__wire_writer *w, const struct tsock__msg_welcome *m)
{
    tsock__wire_put_le(w, m->consumer_id, 8);
    tsock__wire_put_le(w, m->batch_size, 4);
    tsock__wire_put_le(w, m->slot_count, 4);
    tsock__wire_put_le(w, m->slot_stride, 8);
    tsock__wire_put_le(w, m->ring_bytes, 8);
    tsock__wire_put_le(w, m->heartbeat_ms, 4);
    tsock__wire_put_le(w, m->device, 4);
    tsock__wire_put_le(w, m->samples, 8);
    tsock__wire_put_le(w, m->dataset, 8);
    tsock__wire_put_le(w, m->nodes, 4);
    tsock__wire_put_le(w, m->node_rank, 4);
    /* On the wire a host ring's blob is the name string; a device ring's follows the tensors. */
    int host = m->device == TSOCK_DEVICE_CPU;
    tsock__wire_put_le(w, host ? m->attach_len : 0, 1);
    if (host)
        tsock__wire_put_bytes(w, m->attach, m->attach_len);
    tsock__wire_put_le(w, m->tensor_count, 1);
    for (uint32_t t = 0; t < m->tensor_count; t++)
        put_tensor(w, &m->tensors[t]);
    if (!host)
        tsock__wire_put_bytes(w, m->attach, m->attach_len);
    tsock__wire_put_le(w, m->classes_len, 4);
    tsock__wire_put_bytes(w, m->classes, m->classes_len);
}

static void
put_batch(struct tsock__wire_writer *w, const struct tsock__msg_batch *b)
{
    tsock__wire_put_le(w, b->slot, 4);
    tsock__wire_put_le(w, b->samples, 4);
    tsock__wire_put_le(w, b->seq, 8);
    tsock__wire_put_le(w, b->epoch, 8);
    tsock__wire_put_le(w, b->index_in_epoch, 8);
    tsock__wire_put_le(w, b->position, 8);
    tsock__wire_put_le(w, b->flags, 4);
    if (b->flags & TSOCK__BATCH_HAS_IDS)
        tsock__wire_put_bytes(w, b->ids, (size_t)b->samples * 4);
}

static void
put_body(struct tsock__wire_writer *w, const struct tsock__msg *msg)
{
    switch (msg->type) {
    case TSOCK__MSG_HELLO: put_hello(w, &msg->u.hello); break;
    case TSOCK__MSG_WELCOME: put_welcome(w, &msg->u.welcome); break;
    case TSOCK__MSG_REJECT:
        /* Two's complement, as the conversion to uint32_t defines it. */
        tsock__wire_put_le(w, (uint32_t)msg->u.reject.code, 4);
        tsock__wire_put_str(w, msg->u.reject.text, sizeof msg->u.reject.text);
        break;
    case TSOCK__MSG_GROUP_FAILED:
        tsock__wire_put_le(w, (uint32_t)msg->u.group_failed.code, 4);
        tsock__wire_put_le(w, msg->u.group_failed.timeout_ms, 4);
        tsock__wire_put_le(w, msg->u.group_failed.rank_count, 4);
        tsock__wire_put_bytes(w, msg->u.group_failed.ranks,
                              (size_t)msg->u.group_failed.rank_count * 4);
        break;
    case TSOCK__MSG_BATCH: put_batch(w, &msg->u.batch); break;
    case TSOCK__MSG_RELEASE:
        tsock__wire_put_le(w, msg->u.release.slot, 4);
        tsock__wire_put_le(w, msg->u.release.seq, 8);
        break;
    case TSOCK__MSG_PAUSE:
    case TSOCK__MSG_RESUME: tsock__wire_put_le(w, msg->u.pause.epochs, 8); break;
    case TSOCK__MSG_SHUTDOWN:
        tsock__wire_put_le(w, msg->u.shutdown.reason, 4);
        tsock__wire_put_le(w, msg->u.shutdown.epochs, 8);
        break;
    case TSOCK__MSG_STATS_REQUEST: tsock__wire_put_le(w, msg->u.stats_request.request_id, 8); break;
    case TSOCK__MSG_CONSUMER_STATS: tsock__wire_put_own_stats(w, &msg->u.consumer_stats); break;
    default: /* HEARTBEAT, BYE, RESUMED, PAUSED: empty body */ break;
    }
}

int
tsock__msg_encode(const struct tsock__msg *msg, uint8_t *buf, size_t size)
{
    struct tsock__wire_writer w = {buf, size, 0, 0};

    if (!msg || (!buf && size != 0) || check_msg(msg) != 0)
        return -EINVAL;
    tsock__wire_put_header(&w, msg->type);
    put_body(&w, msg);
    return tsock__wire_finish(&w);
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void
get_hello(struct tsock__wire_reader *r, struct tsock__msg_hello *h)
{
    h->pid = (uint32_t)tsock__wire_get_le(r, 4);
    h->flags = (uint32_t)tsock__wire_get_le(r, 4);
    tsock__wire_get_str(r, h->name, sizeof h->name);
    if (!(h->flags & TSOCK__HELLO_HAS_GROUP))
        return;
    tsock__wire_get_str(r, h->group, sizeof h->group);
    h->rank = (uint32_t)tsock__wire_get_le(r, 4);
    h->world = (uint32_t)tsock__wire_get_le(r, 4);
    h->batch = (uint32_t)tsock__wire_get_le(r, 4);
    h->drop_last = (uint8_t)tsock__wire_get_le(r, 1);
    h->timeout_ms = (uint32_t)tsock__wire_get_le(r, 4);
    h->resume = tsock__wire_get_le(r, 8);
}

static void
get_tensor(struct tsock__wire_reader *r, struct tsock__tensor_desc *t)
{
    tsock__wire_get_str(r, t->name, sizeof t->name);
    t->dtype = (uint8_t)tsock__wire_get_le(r, 1);
    t->ndim = (uint8_t)tsock__wire_get_le(r, 1);
    if (t->ndim > TSOCK_MAX_DIMS) {
        r->bad = 1;
        return;
    }
    for (unsigned i = 0; i < t->ndim; i++) {
        uint64_t d = tsock__wire_get_le(r, 8);
        if (d > INT64_MAX) { /* negative as an int64: no valid dim */
            r->bad = 1;
            return;
        }
        t->sample_shape[i] = (int64_t)d;
    }
    t->offset = tsock__wire_get_le(r, 8);
    t->sample_bytes = tsock__wire_get_le(r, 8);
}

static void
get_welcome(struct tsock__wire_reader *r, struct tsock__msg_welcome *m)
{
    m->consumer_id = tsock__wire_get_le(r, 8);
    m->batch_size = (uint32_t)tsock__wire_get_le(r, 4);
    m->slot_count = (uint32_t)tsock__wire_get_le(r, 4);
    m->slot_stride = tsock__wire_get_le(r, 8);
    m->ring_bytes = tsock__wire_get_le(r, 8);
    m->heartbeat_ms = (uint32_t)tsock__wire_get_le(r, 4);
    m->device = (uint32_t)tsock__wire_get_le(r, 4);
    m->samples = tsock__wire_get_le(r, 8);
    m->dataset = tsock__wire_get_le(r, 8);
    m->nodes = (uint32_t)tsock__wire_get_le(r, 4);
    m->node_rank = (uint32_t)tsock__wire_get_le(r, 4);
    size_t name_len = (size_t)tsock__wire_get_le(r, 1);
    const uint8_t *name = tsock__wire_get_view(r, name_len);
    m->tensor_count = (uint32_t)tsock__wire_get_le(r, 1);
    if (m->tensor_count > TSOCK_MAX_TENSORS) {
        r->bad = 1;
        return;
    }
    for (uint32_t t = 0; t < m->tensor_count && !r->bad; t++)
        get_tensor(r, &m->tensors[t]);
    if (m->device == TSOCK_DEVICE_CPU) {
        m->attach = name;
        m->attach_len = (uint32_t)name_len;
    } else if (name_len == 0 && m->device == TSOCK_DEVICE_CUDA &&
               m->slot_count <= TSOCK__PROTO_MAX_DEVICE_SLOTS) {
        /* The slot count bounds the blob, so nothing past a valid one is ever taken. */
        m->attach_len = (uint32_t)device_blob_size(m->slot_count);
        m->attach = tsock__wire_get_view(r, m->attach_len);
    } else {
        r->bad = 1;
        return;
    }
    m->classes_len = (uint32_t)tsock__wire_get_le(r, 4);
    if (m->classes_len > TSOCK__PROTO_MAX_CLASS_BYTES) {
        r->bad = 1;
        return;
    }
    m->classes = tsock__wire_get_view(r, m->classes_len);
}

/* The u32 on the wire is the two's complement of the code; converted without relying on the
 * implementation-defined conversion of out-of-range values to int32_t. */
static int32_t
i32_from_u32(uint32_t v)
{
    return v <= INT32_MAX ? (int32_t)v : (int32_t)(v - 0x80000000u) - INT32_MAX - 1;
}

static void
get_batch(struct tsock__wire_reader *r, struct tsock__msg_batch *b)
{
    b->slot = (uint32_t)tsock__wire_get_le(r, 4);
    b->samples = (uint32_t)tsock__wire_get_le(r, 4);
    b->seq = tsock__wire_get_le(r, 8);
    b->epoch = tsock__wire_get_le(r, 8);
    b->index_in_epoch = tsock__wire_get_le(r, 8);
    b->position = tsock__wire_get_le(r, 8);
    b->flags = (uint32_t)tsock__wire_get_le(r, 4);
    /* The count is checked before the view is taken, so a huge `samples` is never used as a
     * length; the view itself fails (the reader goes bad) when the frame is shorter. */
    if ((b->flags & TSOCK__BATCH_HAS_IDS) && b->samples <= TSOCK__BATCH_MAX_IDS)
        b->ids = tsock__wire_get_view(r, (size_t)b->samples * 4);
}

static void
get_group_failed(struct tsock__wire_reader *r, struct tsock__msg_group_failed *g)
{
    g->code = i32_from_u32((uint32_t)tsock__wire_get_le(r, 4));
    g->timeout_ms = (uint32_t)tsock__wire_get_le(r, 4);
    g->rank_count = (uint32_t)tsock__wire_get_le(r, 4);
    /* The count is bounded before it is used as a length, as BATCH's ids are. */
    if (g->rank_count >= 1 && g->rank_count <= TSOCK__PROTO_MAX_GROUP_RANKS)
        g->ranks = tsock__wire_get_view(r, (size_t)g->rank_count * 4);
}

static void
get_body(struct tsock__wire_reader *r, struct tsock__msg *msg)
{
    switch (msg->type) {
    case TSOCK__MSG_HELLO: get_hello(r, &msg->u.hello); break;
    case TSOCK__MSG_WELCOME: get_welcome(r, &msg->u.welcome); break;
    case TSOCK__MSG_REJECT:
        msg->u.reject.code = i32_from_u32((uint32_t)tsock__wire_get_le(r, 4));
        tsock__wire_get_str(r, msg->u.reject.text, sizeof msg->u.reject.text);
        break;
    case TSOCK__MSG_GROUP_FAILED: get_group_failed(r, &msg->u.group_failed); break;
    case TSOCK__MSG_BATCH: get_batch(r, &msg->u.batch); break;
    case TSOCK__MSG_RELEASE:
        msg->u.release.slot = (uint32_t)tsock__wire_get_le(r, 4);
        msg->u.release.seq = tsock__wire_get_le(r, 8);
        break;
    case TSOCK__MSG_PAUSE:
    case TSOCK__MSG_RESUME: msg->u.pause.epochs = tsock__wire_get_le(r, 8); break;
    case TSOCK__MSG_HEARTBEAT:
    case TSOCK__MSG_BYE:
    case TSOCK__MSG_RESUMED:
    case TSOCK__MSG_PAUSED: break;
    case TSOCK__MSG_SHUTDOWN:
        msg->u.shutdown.reason = (uint32_t)tsock__wire_get_le(r, 4);
        msg->u.shutdown.epochs = tsock__wire_get_le(r, 8);
        break;
    case TSOCK__MSG_STATS_REQUEST:
        msg->u.stats_request.request_id = tsock__wire_get_le(r, 8);
        break;
    case TSOCK__MSG_CONSUMER_STATS: tsock__wire_get_own_stats(r, &msg->u.consumer_stats); break;
    default: /* unknown, or STATS_REPLY, which has a decoder of its own */ r->bad = 1; break;
    }
}

/* Bytes of the union member a message type fills (0 for empty bodies and unknown types). */
static size_t
body_struct_size(int type)
{
    switch (type) {
    case TSOCK__MSG_HELLO: return sizeof(struct tsock__msg_hello);
    case TSOCK__MSG_WELCOME: return sizeof(struct tsock__msg_welcome);
    case TSOCK__MSG_REJECT: return sizeof(struct tsock__msg_reject);
    case TSOCK__MSG_BATCH: return sizeof(struct tsock__msg_batch);
    case TSOCK__MSG_RELEASE: return sizeof(struct tsock__msg_release);
    case TSOCK__MSG_PAUSE:
    case TSOCK__MSG_RESUME: return sizeof(struct tsock__msg_pause);
    case TSOCK__MSG_SHUTDOWN: return sizeof(struct tsock__msg_shutdown);
    case TSOCK__MSG_STATS_REQUEST: return sizeof(struct tsock__msg_stats_request);
    case TSOCK__MSG_CONSUMER_STATS: return sizeof(struct tsock__msg_consumer_stats);
    case TSOCK__MSG_GROUP_FAILED: return sizeof(struct tsock__msg_group_failed);
    default: return 0;
    }
}

int
tsock__msg_peek_type(const uint8_t *buf, size_t size)
{
    struct tsock__wire_reader r = {buf, size, 0, 0};

    if (!buf && size != 0)
        return -EINVAL;
    return tsock__wire_get_header(&r);
}

int
tsock__msg_decode(const uint8_t *buf, size_t size, struct tsock__msg *msg)
{
    struct tsock__wire_reader r = {buf, size, 0, 0};

    if (!msg || (!buf && size != 0))
        return -EINVAL;
    memset(msg, 0, offsetof(struct tsock__msg, u));
    int type = tsock__wire_get_header(&r);
    if (type < 0)
        return type;
    /* The type's part of the message is zeroed, so that two decodings of the same frame are
     * equal byte for byte there. Only that part: a WELCOME's tensor table makes the union about
     * 2 KiB, and every BATCH and RELEASE would pay for clearing it. */
    memset(&msg->u, 0, body_struct_size(type));
    msg->type = (uint16_t)type;
    get_body(&r, msg);
    if (r.bad || r.pos != r.size || check_msg(msg) != 0)
        return TSOCK_E_PROTOCOL;
    return 0;
}

const char *
tsock__msg_type_name(int type)
{
    static const char *const names[] = {"?",
                                        "HELLO",
                                        "WELCOME",
                                        "REJECT",
                                        "BATCH",
                                        "RELEASE",
                                        "HEARTBEAT",
                                        "BYE",
                                        "SHUTDOWN",
                                        "PAUSE",
                                        "RESUME",
                                        "RESUMED",
                                        "STATS_REQUEST",
                                        "STATS_REPLY",
                                        "CONSUMER_STATS",
                                        "GROUP_FAILED",
                                        "PAUSED"};
    _Static_assert(sizeof names / sizeof names[0] == TSOCK__MSG_TYPE_LAST + 1,
                   "every message type has a name");

    if (type < TSOCK__MSG_HELLO || type > TSOCK__MSG_TYPE_LAST)
        return names[0];
    return names[type];
}
