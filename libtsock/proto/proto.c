/* Wire messages: encoder and checked decoder. proto.h states the contract, docs/protocol.md the
 * byte layout.
 *
 * Every integer is stored and loaded one byte at a time, least significant byte first, so the
 * code depends neither on the host's byte order nor on alignment. The encoder and the decoder
 * share one set of validity rules (check_msg): the encoder refuses exactly what the decoder
 * would reject, so a peer never receives a message from us that it must throw away. The
 * encoding of a valid message is unique, hence decode(encode(m)) == m for every valid m and
 * encode(decode(f)) == f for every accepted frame f; the fuzz target checks both.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"

/* The most slots a ring may have. Slot numbers in BATCH and RELEASE are below it. */
#define MAX_SLOTS 1024u

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

/* Names end up in logs and in Python strings, so control characters (NUL included) are
 * refused. Bytes 0x80..0xFF pass, so UTF-8 names work; they are not validated as UTF-8. */
static int
name_bytes_ok(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

/* A string field of a struct: NUL-terminated inside its array of `cap` bytes, at least `min`
 * bytes long, made of name bytes. Sets *len. Returns 0 or -1. */
static int
check_str(const char *s, size_t cap, size_t min, size_t *len)
{
    const char *end = memchr(s, '\0', cap);

    if (!end)
        return -1;
    *len = (size_t)(end - s);
    if (*len < min || !name_bytes_ok(s, *len))
        return -1;
    return 0;
}

/* A POSIX shared-memory name as shm_open wants it portably: a leading '/' and no other. */
static int
check_shm_name(const char *s)
{
    size_t len;

    if (check_str(s, TSOCK_PROTO_MAX_SHM_NAME + 1, 2, &len) != 0)
        return -1;
    if (s[0] != '/' || memchr(s + 1, '/', len - 1) != NULL)
        return -1;
    return 0;
}

/* One tensor of a WELCOME: a known dtype, positive dims whose byte count is sample_bytes, and
 * room in the slot for batch_size samples at its offset. All arithmetic is overflow-checked:
 * the consumer uses these figures to compute pointers into the mapped ring. */
static int
check_tensor(const struct tsock_tensor_desc *t, uint64_t batch_size, uint64_t slot_stride)
{
    uint64_t bytes, end;
    size_t len;

    if (check_str(t->name, sizeof t->name, 1, &len) != 0)
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

/* Where the ring lives: a host ring is named by its shared-memory object; a CUDA ring has no
 * name, at most TSOCK_PROTO_MAX_CUDA_SLOTS slots, and a non-zero handle for each part. */
static int
check_ring_place(const struct tsock_msg_welcome *w)
{
    size_t len;

    if (w->device == TSOCK_DEVICE_CPU)
        return check_shm_name(w->shm_name);
    if (w->device != TSOCK_DEVICE_CUDA)
        return -1;
    if (check_str(w->shm_name, sizeof w->shm_name, 0, &len) != 0 || len != 0 ||
        w->slot_count > TSOCK_PROTO_MAX_CUDA_SLOTS)
        return -1;
    if (all_zero(w->cuda.device_uuid, sizeof w->cuda.device_uuid) ||
        all_zero(w->cuda.mem, sizeof w->cuda.mem))
        return -1;
    for (uint32_t s = 0; s < w->slot_count; s++) {
        if (all_zero(w->cuda.events[s], TSOCK_CUDA_IPC_HANDLE_SIZE))
            return -1;
    }
    return 0;
}

static int
check_welcome(const struct tsock_msg_welcome *w)
{
    uint64_t ring;

    if (w->batch_size < 1 || w->slot_count < 1 || w->slot_count > MAX_SLOTS)
        return -1;
    if (mul_u64(w->slot_stride, w->slot_count, &ring) != 0 || ring != w->ring_bytes)
        return -1;
    if (w->heartbeat_ms < 1 || check_ring_place(w) != 0)
        return -1;
    if (w->tensor_count < 1 || w->tensor_count > TSOCK_MAX_TENSORS)
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

/* Returns 0 when msg is a valid message of a known type, -1 otherwise. */
static int
check_msg(const struct tsock_msg *msg)
{
    size_t len;

    switch (msg->type) {
    case TSOCK_MSG_HELLO:
        if (msg->u.hello.flags != 0)
            return -1;
        return check_str(msg->u.hello.name, sizeof msg->u.hello.name, 0, &len);
    case TSOCK_MSG_WELCOME: return check_welcome(&msg->u.welcome);
    case TSOCK_MSG_REJECT:
        return msg->u.reject.code > TSOCK_E_LAST && msg->u.reject.code < TSOCK_E_BASE ? 0 : -1;
    case TSOCK_MSG_BATCH:
        if (msg->u.batch.slot >= MAX_SLOTS || msg->u.batch.samples < 1)
            return -1;
        return (msg->u.batch.flags & ~TSOCK_BATCH_EPOCH_END) == 0 ? 0 : -1;
    case TSOCK_MSG_RELEASE: return msg->u.release.slot < MAX_SLOTS ? 0 : -1;
    case TSOCK_MSG_HEARTBEAT:
    case TSOCK_MSG_BYE:
    case TSOCK_MSG_PAUSE:
    case TSOCK_MSG_RESUME:
    case TSOCK_MSG_RESUMED:
    case TSOCK_MSG_STATS_REQUEST: /* any request id */
    case TSOCK_MSG_CONSUMER_STATS: /* any figures: they are only displayed */ return 0;
    case TSOCK_MSG_SHUTDOWN:
        return msg->u.shutdown.reason == TSOCK_SHUTDOWN_END ||
                       msg->u.shutdown.reason == TSOCK_SHUTDOWN_STOPPED
                   ? 0
                   : -1;
    default: return -1;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Appends to buf[0, size). Once something does not fit, `overflow` is set, nothing more is
 * written and the encoder reports -ENOBUFS; no byte at or past buf + size is ever touched. */
struct writer {
    uint8_t *buf;
    size_t size;
    size_t pos;
    int overflow;
};

static void
store_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void
put_le(struct writer *w, uint64_t v, unsigned n)
{
    if (w->overflow || n > w->size - w->pos) {
        w->overflow = 1;
        return;
    }
    store_le(w->buf + w->pos, v, n);
    w->pos += n;
}

/* A string as a u8 length and its bytes; check_msg has already bounded the length. */
static void
put_str(struct writer *w, const char *s, size_t cap)
{
    size_t len = (size_t)((const char *)memchr(s, '\0', cap) - s);

    put_le(w, len, 1);
    if (w->overflow || len > w->size - w->pos) {
        w->overflow = 1;
        return;
    }
    memcpy(w->buf + w->pos, s, len);
    w->pos += len;
}

static void
put_hello(struct writer *w, const struct tsock_msg_hello *h)
{
    put_le(w, h->pid, 4);
    put_le(w, h->flags, 4);
    put_str(w, h->name, sizeof h->name);
}

static void
put_tensor(struct writer *w, const struct tsock_tensor_desc *t)
{
    put_str(w, t->name, sizeof t->name);
    put_le(w, t->dtype, 1);
    put_le(w, t->ndim, 1);
    for (unsigned i = 0; i < t->ndim; i++)
        put_le(w, (uint64_t)t->sample_shape[i], 8);
    put_le(w, t->offset, 8);
    put_le(w, t->sample_bytes, 8);
}

static void
put_bytes(struct writer *w, const uint8_t *p, size_t n)
{
    if (w->overflow || n > w->size - w->pos) {
        w->overflow = 1;
        return;
    }
    memcpy(w->buf + w->pos, p, n);
    w->pos += n;
}

/* The CUDA block that ends a WELCOME of a device ring. */
static void
put_cuda(struct writer *w, const struct tsock_msg_welcome *m)
{
    put_bytes(w, m->cuda.device_uuid, sizeof m->cuda.device_uuid);
    put_bytes(w, m->cuda.mem, sizeof m->cuda.mem);
    for (uint32_t s = 0; s < m->slot_count; s++)
        put_bytes(w, m->cuda.events[s], TSOCK_CUDA_IPC_HANDLE_SIZE);
}

static void
put_welcome(struct writer *w, const struct tsock_msg_welcome *m)
{
    put_le(w, m->consumer_id, 8);
    put_le(w, m->batch_size, 4);
    put_le(w, m->slot_count, 4);
    put_le(w, m->slot_stride, 8);
    put_le(w, m->ring_bytes, 8);
    put_le(w, m->heartbeat_ms, 4);
    put_le(w, m->device, 4);
    put_le(w, m->samples, 8);
    put_str(w, m->shm_name, sizeof m->shm_name);
    put_le(w, m->tensor_count, 1);
    for (uint32_t t = 0; t < m->tensor_count; t++)
        put_tensor(w, &m->tensors[t]);
    if (m->device == TSOCK_DEVICE_CUDA)
        put_cuda(w, m);
}

static void
put_batch(struct writer *w, const struct tsock_msg_batch *b)
{
    put_le(w, b->slot, 4);
    put_le(w, b->samples, 4);
    put_le(w, b->seq, 8);
    put_le(w, b->epoch, 8);
    put_le(w, b->index_in_epoch, 8);
    put_le(w, b->position, 8);
    put_le(w, b->flags, 4);
}

static void
put_own_stats(struct writer *w, const struct tsock_msg_consumer_stats *c)
{
    put_le(w, c->batches, 8);
    put_le(w, c->samples, 8);
    put_le(w, c->epochs, 8);
    put_le(w, c->wait_ns, 8);
}

static void
put_header(struct writer *w, int type)
{
    put_le(w, TSOCK_PROTO_MAGIC, 4);
    put_le(w, TSOCK_PROTO_VERSION, 2);
    put_le(w, (uint64_t)type, 2);
    put_le(w, 0, 4); /* body length, filled in by finish_frame */
}

/* Fills in the body length. Returns the frame's size, or -ENOBUFS. */
static int
finish_frame(struct writer *w)
{
    if (w->overflow)
        return -ENOBUFS;
    store_le(w->buf + 8, w->pos - TSOCK_PROTO_HEADER_SIZE, 4);
    return (int)w->pos;
}

static void
put_body(struct writer *w, const struct tsock_msg *msg)
{
    switch (msg->type) {
    case TSOCK_MSG_HELLO: put_hello(w, &msg->u.hello); break;
    case TSOCK_MSG_WELCOME: put_welcome(w, &msg->u.welcome); break;
    case TSOCK_MSG_REJECT:
        /* Two's complement, as the conversion to uint32_t defines it. */
        put_le(w, (uint32_t)msg->u.reject.code, 4);
        break;
    case TSOCK_MSG_BATCH: put_batch(w, &msg->u.batch); break;
    case TSOCK_MSG_RELEASE:
        put_le(w, msg->u.release.slot, 4);
        put_le(w, msg->u.release.seq, 8);
        break;
    case TSOCK_MSG_SHUTDOWN: put_le(w, msg->u.shutdown.reason, 4); break;
    case TSOCK_MSG_STATS_REQUEST: put_le(w, msg->u.stats_request.request_id, 8); break;
    case TSOCK_MSG_CONSUMER_STATS: put_own_stats(w, &msg->u.consumer_stats); break;
    default: /* HEARTBEAT, BYE, PAUSE, RESUME, RESUMED: empty body */ break;
    }
}

int
tsock__msg_encode(const struct tsock_msg *msg, uint8_t *buf, size_t size)
{
    struct writer w = {buf, size, 0, 0};

    if (!msg || (!buf && size != 0) || check_msg(msg) != 0)
        return -EINVAL;
    put_header(&w, msg->type);
    put_body(&w, msg);
    return finish_frame(&w);
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* Reads from buf[0, size). A read past the end sets `bad` and yields zeros; once bad, nothing
 * more is read, so the parsers below need no bounds checks of their own. */
struct reader {
    const uint8_t *buf;
    size_t size;
    size_t pos;
    int bad;
};

static uint64_t
get_le(struct reader *r, unsigned n)
{
    uint64_t v = 0;

    if (r->bad || n > r->size - r->pos) {
        r->bad = 1;
        return 0;
    }
    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)r->buf[r->pos + i] << (8 * i);
    r->pos += n;
    return v;
}

/* A u8 length and that many name bytes into dst[cap], NUL-terminated. A length that does not
 * fit dst, runs past the frame, or bytes that are not name bytes make the frame bad. */
static void
get_str(struct reader *r, char *dst, size_t cap)
{
    size_t len = (size_t)get_le(r, 1);

    if (r->bad)
        return;
    if (len >= cap || len > r->size - r->pos ||
        !name_bytes_ok((const char *)r->buf + r->pos, len)) {
        r->bad = 1;
        return;
    }
    memcpy(dst, r->buf + r->pos, len);
    dst[len] = '\0';
    r->pos += len;
}

static void
get_hello(struct reader *r, struct tsock_msg_hello *h)
{
    h->pid = (uint32_t)get_le(r, 4);
    h->flags = (uint32_t)get_le(r, 4);
    get_str(r, h->name, sizeof h->name);
}

static void
get_tensor(struct reader *r, struct tsock_tensor_desc *t)
{
    get_str(r, t->name, sizeof t->name);
    t->dtype = (uint8_t)get_le(r, 1);
    t->ndim = (uint8_t)get_le(r, 1);
    if (t->ndim > TSOCK_MAX_DIMS) {
        r->bad = 1;
        return;
    }
    for (unsigned i = 0; i < t->ndim; i++) {
        uint64_t d = get_le(r, 8);
        if (d > INT64_MAX) { /* negative as an int64: no valid dim */
            r->bad = 1;
            return;
        }
        t->sample_shape[i] = (int64_t)d;
    }
    t->offset = get_le(r, 8);
    t->sample_bytes = get_le(r, 8);
}

static void
get_bytes(struct reader *r, uint8_t *dst, size_t n)
{
    if (r->bad || n > r->size - r->pos) {
        r->bad = 1;
        return;
    }
    memcpy(dst, r->buf + r->pos, n);
    r->pos += n;
}

/* The CUDA block; the slot count bounds the number of event handles read, so a count beyond
 * TSOCK_PROTO_MAX_CUDA_SLOTS is refused before anything is copied. */
static void
get_cuda(struct reader *r, struct tsock_msg_welcome *m)
{
    if (m->slot_count > TSOCK_PROTO_MAX_CUDA_SLOTS) {
        r->bad = 1;
        return;
    }
    get_bytes(r, m->cuda.device_uuid, sizeof m->cuda.device_uuid);
    get_bytes(r, m->cuda.mem, sizeof m->cuda.mem);
    for (uint32_t s = 0; s < m->slot_count && !r->bad; s++)
        get_bytes(r, m->cuda.events[s], TSOCK_CUDA_IPC_HANDLE_SIZE);
}

static void
get_welcome(struct reader *r, struct tsock_msg_welcome *m)
{
    m->consumer_id = get_le(r, 8);
    m->batch_size = (uint32_t)get_le(r, 4);
    m->slot_count = (uint32_t)get_le(r, 4);
    m->slot_stride = get_le(r, 8);
    m->ring_bytes = get_le(r, 8);
    m->heartbeat_ms = (uint32_t)get_le(r, 4);
    m->device = (uint32_t)get_le(r, 4);
    m->samples = get_le(r, 8);
    get_str(r, m->shm_name, sizeof m->shm_name);
    m->tensor_count = (uint32_t)get_le(r, 1);
    if (m->tensor_count > TSOCK_MAX_TENSORS) {
        r->bad = 1;
        return;
    }
    for (uint32_t t = 0; t < m->tensor_count && !r->bad; t++)
        get_tensor(r, &m->tensors[t]);
    if (m->device == TSOCK_DEVICE_CUDA)
        get_cuda(r, m);
}

/* The u32 on the wire is the two's complement of the code; converted without relying on the
 * implementation-defined conversion of out-of-range values to int32_t. */
static int32_t
i32_from_u32(uint32_t v)
{
    return v <= INT32_MAX ? (int32_t)v : (int32_t)(v - 0x80000000u) - INT32_MAX - 1;
}

static void
get_batch(struct reader *r, struct tsock_msg_batch *b)
{
    b->slot = (uint32_t)get_le(r, 4);
    b->samples = (uint32_t)get_le(r, 4);
    b->seq = get_le(r, 8);
    b->epoch = get_le(r, 8);
    b->index_in_epoch = get_le(r, 8);
    b->position = get_le(r, 8);
    b->flags = (uint32_t)get_le(r, 4);
}

static void
get_own_stats(struct reader *r, struct tsock_msg_consumer_stats *c)
{
    c->batches = get_le(r, 8);
    c->samples = get_le(r, 8);
    c->epochs = get_le(r, 8);
    c->wait_ns = get_le(r, 8);
}

static void
get_body(struct reader *r, struct tsock_msg *msg)
{
    switch (msg->type) {
    case TSOCK_MSG_HELLO: get_hello(r, &msg->u.hello); break;
    case TSOCK_MSG_WELCOME: get_welcome(r, &msg->u.welcome); break;
    case TSOCK_MSG_REJECT: msg->u.reject.code = i32_from_u32((uint32_t)get_le(r, 4)); break;
    case TSOCK_MSG_BATCH: get_batch(r, &msg->u.batch); break;
    case TSOCK_MSG_RELEASE:
        msg->u.release.slot = (uint32_t)get_le(r, 4);
        msg->u.release.seq = get_le(r, 8);
        break;
    case TSOCK_MSG_HEARTBEAT:
    case TSOCK_MSG_BYE:
    case TSOCK_MSG_PAUSE:
    case TSOCK_MSG_RESUME:
    case TSOCK_MSG_RESUMED: break;
    case TSOCK_MSG_SHUTDOWN: msg->u.shutdown.reason = (uint32_t)get_le(r, 4); break;
    case TSOCK_MSG_STATS_REQUEST: msg->u.stats_request.request_id = get_le(r, 8); break;
    case TSOCK_MSG_CONSUMER_STATS: get_own_stats(r, &msg->u.consumer_stats); break;
    default: /* unknown, or STATS_REPLY, which has a decoder of its own */ r->bad = 1; break;
    }
}

/* Bytes of the union member a message type fills (0 for empty bodies and unknown types). */
static size_t
body_struct_size(int type)
{
    switch (type) {
    case TSOCK_MSG_HELLO: return sizeof(struct tsock_msg_hello);
    case TSOCK_MSG_WELCOME: return sizeof(struct tsock_msg_welcome);
    case TSOCK_MSG_REJECT: return sizeof(struct tsock_msg_reject);
    case TSOCK_MSG_BATCH: return sizeof(struct tsock_msg_batch);
    case TSOCK_MSG_RELEASE: return sizeof(struct tsock_msg_release);
    case TSOCK_MSG_SHUTDOWN: return sizeof(struct tsock_msg_shutdown);
    case TSOCK_MSG_STATS_REQUEST: return sizeof(struct tsock_msg_stats_request);
    case TSOCK_MSG_CONSUMER_STATS: return sizeof(struct tsock_msg_consumer_stats);
    default: return 0;
    }
}

/* Reads and checks the header, leaving r at the body. Returns the type, or TSOCK_E_PROTOCOL /
 * TSOCK_E_VERSION. */
static int
get_header(struct reader *r)
{
    uint64_t magic, version, type, body_length;

    if (r->size < TSOCK_PROTO_HEADER_SIZE || r->size > TSOCK_PROTO_MAX_MESSAGE)
        return TSOCK_E_PROTOCOL;
    magic = get_le(r, 4);
    version = get_le(r, 2);
    type = get_le(r, 2);
    body_length = get_le(r, 4);
    if (magic != TSOCK_PROTO_MAGIC)
        return TSOCK_E_PROTOCOL;
    /* Checked before anything else in the frame: the header layout is the same in every
     * version, so a peer of another version is told so rather than called malformed. */
    if (version != TSOCK_PROTO_VERSION)
        return TSOCK_E_VERSION;
    if (body_length != r->size - TSOCK_PROTO_HEADER_SIZE)
        return TSOCK_E_PROTOCOL;
    return (int)type;
}

int
tsock__msg_peek_type(const uint8_t *buf, size_t size)
{
    struct reader r = {buf, size, 0, 0};

    if (!buf && size != 0)
        return -EINVAL;
    return get_header(&r);
}

int
tsock__msg_decode(const uint8_t *buf, size_t size, struct tsock_msg *msg)
{
    struct reader r = {buf, size, 0, 0};

    if (!msg || (!buf && size != 0))
        return -EINVAL;
    memset(msg, 0, offsetof(struct tsock_msg, u));
    int type = get_header(&r);
    if (type < 0)
        return type;
    /* The type's part of the message is zeroed, so that two decodings of the same frame are
     * equal byte for byte there. Only that part: a WELCOME of a CUDA ring makes the union
     * 17 KiB, and every BATCH and RELEASE would pay for clearing it. */
    memset(&msg->u, 0, body_struct_size(type));
    msg->type = (uint16_t)type;
    get_body(&r, msg);
    if (r.bad || r.pos != r.size || check_msg(msg) != 0)
        return TSOCK_E_PROTOCOL;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* STATS_REPLY                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* Length of a UTF-8 sequence that starts with byte c and may follow with the bytes in
 * [lo, hi] as its second byte (the ranges exclude overlong forms, surrogates and code points
 * above U+10FFFF, as RFC 3629 lists them); 0 for a byte that cannot start one. */
static unsigned
utf8_lead(unsigned char c, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF) {
        *lo = c == 0xE0 ? 0xA0 : 0x80;
        *hi = c == 0xED ? 0x9F : 0xBF;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        *lo = c == 0xF0 ? 0x90 : 0x80;
        *hi = c == 0xF4 ? 0x8F : 0xBF;
        return 4;
    }
    return 0;
}

int
tsock__proto_text_ok(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;

    for (size_t i = 0; i < len;) {
        unsigned char lo, hi;
        unsigned n = utf8_lead(s[i], &lo, &hi);
        if (n == 0 || n > len - i || s[i] < 0x20 || s[i] == 0x7f)
            return 0;
        for (unsigned k = 1; k < n; k++) {
            unsigned char b = s[i + k];
            if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
                return 0;
        }
        i += n;
    }
    return 1;
}

static int
check_stats_producer(const struct tsock_stats_producer *p)
{
    if (p->slots < 1 || p->slots > MAX_SLOTS || p->free_slots > p->slots)
        return -1;
    return p->held <= p->slots - p->free_slots ? 0 : -1;
}

static int
check_stats_consumer(const struct tsock_stats_consumer *c, uint32_t slots)
{
    size_t len;

    if (c->flags & ~(TSOCK_STATS_PAUSED | TSOCK_STATS_REPORTED))
        return -1;
    if (check_str(c->name, sizeof c->name, 0, &len) != 0)
        return -1;
    return c->held <= slots ? 0 : -1;
}

static int
check_stats_reply(const struct tsock_stats_reply *r)
{
    const char *end = memchr(r->status, '\0', sizeof r->status);

    if (check_stats_producer(&r->producer) != 0)
        return -1;
    if (!end || !tsock__proto_text_ok(r->status, (size_t)(end - r->status)))
        return -1;
    if (r->consumer_count > TSOCK_STATS_MAX_CONSUMERS)
        return -1;
    for (uint32_t i = 0; i < r->consumer_count; i++) {
        if (check_stats_consumer(&r->consumers[i], r->producer.slots) != 0)
            return -1;
        /* Clients key their displays by consumer id. */
        for (uint32_t j = 0; j < i; j++) {
            if (r->consumers[j].id == r->consumers[i].id)
                return -1;
        }
    }
    return 0;
}

static void
put_stats_producer(struct writer *w, const struct tsock_stats_producer *p)
{
    put_le(w, p->pid, 4);
    put_le(w, p->slots, 4);
    put_le(w, p->free_slots, 4);
    put_le(w, p->held, 4);
    put_le(w, p->batches, 8);
    put_le(w, p->samples, 8);
    put_le(w, p->epochs, 8);
    put_le(w, p->released, 8);
    put_le(w, p->joined, 8);
    put_le(w, p->lost, 8);
    put_le(w, p->bad_messages, 8);
    put_le(w, p->wait_ns, 8);
    put_le(w, p->uptime_ns, 8);
}

static void
put_stats_consumer(struct writer *w, const struct tsock_stats_consumer *c)
{
    put_le(w, c->id, 8);
    put_le(w, c->pid, 4);
    put_le(w, c->flags, 4);
    put_str(w, c->name, sizeof c->name);
    put_le(w, c->batches, 8);
    put_le(w, c->samples, 8);
    put_le(w, c->released, 8);
    put_le(w, c->held, 4);
    put_le(w, c->lag, 8);
    put_le(w, c->rate_milli, 8);
    put_own_stats(w, &c->own);
}

/* The status as a u16 length and its bytes; check_stats_reply has bounded the length. */
static void
put_text(struct writer *w, const char *s)
{
    size_t len = strlen(s);

    put_le(w, len, 2);
    if (w->overflow || len > w->size - w->pos) {
        w->overflow = 1;
        return;
    }
    memcpy(w->buf + w->pos, s, len);
    w->pos += len;
}

int
tsock__stats_reply_encode(const struct tsock_stats_reply *r, uint8_t *buf, size_t size)
{
    struct writer w = {buf, size, 0, 0};

    if (!r || (!buf && size != 0) || check_stats_reply(r) != 0)
        return -EINVAL;
    put_header(&w, TSOCK_MSG_STATS_REPLY);
    put_le(&w, r->request_id, 8);
    put_stats_producer(&w, &r->producer);
    put_text(&w, r->status);
    put_le(&w, r->consumer_count, 1);
    for (uint32_t i = 0; i < r->consumer_count; i++)
        put_stats_consumer(&w, &r->consumers[i]);
    return finish_frame(&w);
}

static void
get_stats_producer(struct reader *r, struct tsock_stats_producer *p)
{
    p->pid = (uint32_t)get_le(r, 4);
    p->slots = (uint32_t)get_le(r, 4);
    p->free_slots = (uint32_t)get_le(r, 4);
    p->held = (uint32_t)get_le(r, 4);
    p->batches = get_le(r, 8);
    p->samples = get_le(r, 8);
    p->epochs = get_le(r, 8);
    p->released = get_le(r, 8);
    p->joined = get_le(r, 8);
    p->lost = get_le(r, 8);
    p->bad_messages = get_le(r, 8);
    p->wait_ns = get_le(r, 8);
    p->uptime_ns = get_le(r, 8);
}

static void
get_stats_consumer(struct reader *r, struct tsock_stats_consumer *c)
{
    c->id = get_le(r, 8);
    c->pid = (uint32_t)get_le(r, 4);
    c->flags = (uint32_t)get_le(r, 4);
    get_str(r, c->name, sizeof c->name);
    c->batches = get_le(r, 8);
    c->samples = get_le(r, 8);
    c->released = get_le(r, 8);
    c->held = (uint32_t)get_le(r, 4);
    c->lag = get_le(r, 8);
    c->rate_milli = get_le(r, 8);
    get_own_stats(r, &c->own);
}

/* A u16 length and that many bytes of status text into dst[TSOCK_MAX_STATUS + 1]. A length
 * past the bound or the frame, or bytes that are not status text, make the frame bad. */
static void
get_text(struct reader *r, char *dst)
{
    size_t len = (size_t)get_le(r, 2);

    if (r->bad)
        return;
    if (len > TSOCK_MAX_STATUS || len > r->size - r->pos ||
        !tsock__proto_text_ok((const char *)r->buf + r->pos, len)) {
        r->bad = 1;
        return;
    }
    memcpy(dst, r->buf + r->pos, len);
    dst[len] = '\0';
    r->pos += len;
}

int
tsock__stats_reply_decode(const uint8_t *buf, size_t size, struct tsock_stats_reply *out)
{
    struct reader r = {buf, size, 0, 0};

    if (!out || (!buf && size != 0))
        return -EINVAL;
    memset(out, 0, sizeof *out);
    int type = get_header(&r);
    if (type < 0)
        return type;
    if (type != TSOCK_MSG_STATS_REPLY)
        return TSOCK_E_PROTOCOL;
    out->request_id = get_le(&r, 8);
    get_stats_producer(&r, &out->producer);
    get_text(&r, out->status);
    out->consumer_count = (uint32_t)get_le(&r, 1);
    if (out->consumer_count > TSOCK_STATS_MAX_CONSUMERS)
        return TSOCK_E_PROTOCOL;
    for (uint32_t i = 0; i < out->consumer_count && !r.bad; i++)
        get_stats_consumer(&r, &out->consumers[i]);
    if (r.bad || r.pos != r.size || check_stats_reply(out) != 0)
        return TSOCK_E_PROTOCOL;
    return 0;
}

const char *
tsock__msg_type_name(int type)
{
    static const char *const names[] = {
        "?",       "HELLO",     "WELCOME",       "REJECT",      "BATCH",
        "RELEASE", "HEARTBEAT", "BYE",           "SHUTDOWN",    "PAUSE",
        "RESUME",  "RESUMED",   "STATS_REQUEST", "STATS_REPLY", "CONSUMER_STATS"};
    _Static_assert(sizeof names / sizeof names[0] == TSOCK_MSG_TYPE_LAST + 1,
                   "every message type has a name");

    if (type < TSOCK_MSG_HELLO || type > TSOCK_MSG_TYPE_LAST)
        return names[0];
    return names[type];
}
