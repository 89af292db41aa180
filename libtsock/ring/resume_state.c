/* The codec of a consumer's saved position (see resume_state.h). */
#include "ring/resume_state.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tsock/tsock.h"

/* ---- checksums --------------------------------------------------------------------------- */

/* One byte's step of the reflected CRC-32, bit by bit. */
static uint32_t
crc_byte(uint32_t crc)
{
    for (int k = 0; k < 8; k++)
        crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    return crc;
}

uint32_t
tsock__crc32(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    crc = ~crc;
    if (n < 1024) {
        for (size_t i = 0; i < n; i++)
            crc = crc_byte(crc ^ b[i]);
        return ~crc;
    }
    /* A state of a large dataset is up to n/8 bytes (160 KB for ImageNet), saved as often as
     * after every batch: a byte-wise table, built here (no shared state), is 8x faster. */
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++)
        table[i] = crc_byte(i);
    for (size_t i = 0; i < n; i++)
        crc = (crc >> 8) ^ table[(crc ^ b[i]) & 0xFF];
    return ~crc;
}

uint64_t
tsock__state_fingerprint(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t
tsock__state_group_fingerprint(const struct tsock__resume_state *s, const uint32_t *ids)
{
    uint8_t head[52];
    uint64_t fields[5] = {s->samples, s->epoch, s->index, s->delivered,
                          (uint64_t)s->world << 32 | s->batch};
    for (int f = 0; f < 5; f++)
        for (int k = 0; k < 8; k++)
            head[8 * f + k] = (uint8_t)(fields[f] >> (8 * k));
    uint32_t more[3] = {s->nodes, s->node_rank, (uint32_t)s->drop_last};
    for (int f = 0; f < 3; f++)
        for (int k = 0; k < 4; k++)
            head[40 + 4 * f + k] = (uint8_t)(more[f] >> (8 * k));
    uint64_t h = tsock__state_fingerprint(TSOCK__FP_START, head, sizeof head);
    for (uint64_t i = 0; i < s->delivered; i++) {
        uint8_t id[4] = {(uint8_t)ids[i], (uint8_t)(ids[i] >> 8), (uint8_t)(ids[i] >> 16),
                         (uint8_t)(ids[i] >> 24)};
        h = tsock__state_fingerprint(h, id, 4);
    }
    return h ? h : 1;
}

/* ---- the set's two encodings ------------------------------------------------------------- */

static size_t
varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static size_t
bitmap_bytes(uint64_t samples)
{
    return (size_t)((samples + 7) / 8);
}

/* Bytes of the delta list for the set bits of s->bits, or SIZE_MAX once it exceeds `limit`
 * (the bitmap's size: past it the list loses anyway, and scanning on would waste time). */
static size_t
deltas_size(const struct tsock__resume_state *s, size_t limit)
{
    size_t size = 0;
    uint64_t prev = 0;
    int first = 1;
    for (size_t byte = 0; byte < bitmap_bytes(s->samples); byte++) {
        if (!s->bits[byte])
            continue;
        for (int k = 0; k < 8; k++) {
            if (!((s->bits[byte] >> k) & 1))
                continue;
            uint64_t id = (uint64_t)byte * 8 + (uint64_t)k;
            size += varint_size(first ? id : id - prev - 1);
            prev = id;
            first = 0;
            if (size > limit)
                return SIZE_MAX;
        }
    }
    return size;
}

static enum tsock__state_encoding
choose(const struct tsock__resume_state *s, size_t *payload)
{
    if (s->delivered == 0) {
        *payload = 0;
        return TSOCK__STATE_SET_NONE;
    }
    size_t bitmap = bitmap_bytes(s->samples);
    size_t deltas = deltas_size(s, bitmap);
    if (deltas < bitmap) {
        *payload = deltas;
        return TSOCK__STATE_SET_DELTAS;
    }
    *payload = bitmap;
    return TSOCK__STATE_SET_BITMAP;
}

/* The rules every state obeys, checked by the encoder and the decoder alike. The delivered
 * count is whole batches (next returns full batches until the epoch's last, and a state with
 * the last one in it is the next epoch's header) and less than the epoch. */
static const char *
check_header(const struct tsock__resume_state *s)
{
    if (s->samples < 1 || s->samples > TSOCK__STATE_MAX_SAMPLES)
        return "dataset size out of range";
    if (s->batch < 1)
        return "batch size 0";
    if (s->delivered >= s->samples || s->delivered % s->batch != 0)
        return "delivered count is not whole batches of a part of the epoch";
    if (s->version != 1 && s->version != TSOCK__STATE_VERSION)
        return "unknown version";
    if (!s->group)
        return s->world || s->nodes || s->node_rank || s->index ? "group fields of a solo state"
                                                                : NULL;
    if (s->version == 1)
        return "state of a group rank in version 1";
    if (s->world < 1 || s->nodes < 1 || s->node_rank >= s->nodes || s->world % s->nodes != 0)
        return "group world size or node out of range";
    if ((s->index == 0) != (s->delivered == 0) || s->index > s->delivered / s->batch)
        return "group step does not match the group's delivered count";
    return NULL;
}

static size_t
group_bytes(const struct tsock__resume_state *s)
{
    return s->group ? TSOCK__STATE_GROUP_SIZE : 0;
}

size_t
tsock__state_size(const struct tsock__resume_state *s)
{
    size_t payload;
    choose(s, &payload);
    return TSOCK__STATE_HEADER_SIZE + group_bytes(s) + payload + 4;
}

/* ---- encoding ---------------------------------------------------------------------------- */

static uint8_t *
put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint8_t *
put_deltas(uint8_t *p, const struct tsock__resume_state *s)
{
    uint64_t prev = 0;
    int first = 1;
    for (size_t byte = 0; byte < bitmap_bytes(s->samples); byte++) {
        for (int k = 0; k < 8 && s->bits[byte]; k++) {
            if (!((s->bits[byte] >> k) & 1))
                continue;
            uint64_t id = (uint64_t)byte * 8 + (uint64_t)k;
            p = put_varint(p, first ? id : id - prev - 1);
            prev = id;
            first = 0;
        }
    }
    return p;
}

/* Set bits of the bitmap, for the encoder's check that it matches the count. */
static uint64_t
popcount(const uint8_t *bits, uint64_t samples)
{
    uint64_t n = 0;
    for (size_t i = 0; i < bitmap_bytes(samples); i++)
        n += (uint64_t)__builtin_popcount(bits[i]);
    return n;
}

long
tsock__state_encode(const struct tsock__resume_state *in, uint8_t *buf, size_t cap)
{
    if (!in)
        return -EINVAL;
    struct tsock__resume_state copy = *in;
    const struct tsock__resume_state *s = &copy;
    if (!copy.version)
        copy.version = TSOCK__STATE_VERSION;
    if ((!buf && cap) || check_header(s) || (s->delivered && !s->bits))
        return -EINVAL;
    if (s->delivered && popcount(s->bits, s->samples) != s->delivered)
        return -EINVAL;
    if ((s->samples & 7) && s->delivered && (s->bits[s->samples / 8] >> (s->samples & 7)) != 0)
        return -EINVAL; /* bits past n */
    size_t payload;
    enum tsock__state_encoding enc = choose(s, &payload);
    size_t total = TSOCK__STATE_HEADER_SIZE + group_bytes(s) + payload + 4;
    if (cap < total)
        return -EMSGSIZE;
    uint8_t *p = buf;
    p = put_le(p, TSOCK__STATE_MAGIC, 4);
    p = put_le(p, (uint64_t)s->version, 2);
    p = put_le(p, s->drop_last ? TSOCK__STATE_DROP_LAST : 0, 2);
    p = put_le(p, s->samples, 8);
    p = put_le(p, s->epoch, 8);
    p = put_le(p, s->batch, 4);
    p = put_le(p, group_bytes(s), 4);
    p = put_le(p, s->layout, 8);
    p = put_le(p, s->delivered, 8);
    *p++ = (uint8_t)enc;
    if (s->group) {
        p = put_le(p, s->world, 4);
        p = put_le(p, s->nodes, 4);
        p = put_le(p, s->node_rank, 4);
        p = put_le(p, s->index, 8);
    }
    if (enc == TSOCK__STATE_SET_BITMAP) {
        memcpy(p, s->bits, payload);
        p += payload;
    } else if (enc == TSOCK__STATE_SET_DELTAS) {
        p = put_deltas(p, s);
    }
    p = put_le(p, tsock__crc32(0, buf, (size_t)(p - buf)), 4);
    return (long)(p - buf);
}

/* ---- decoding ---------------------------------------------------------------------------- */

static uint64_t
get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The bitmap's ids into out[], which has room for `count`. Returns NULL or the problem. */
static const char *
read_bitmap(const uint8_t *p, const struct tsock__resume_state *s, uint32_t *out)
{
    if ((s->samples & 7) && (p[s->samples / 8] >> (s->samples & 7)) != 0)
        return "delivered bitmap has bits past the dataset size";
    uint64_t n = 0;
    for (size_t byte = 0; byte < bitmap_bytes(s->samples); byte++) {
        for (int k = 0; k < 8 && p[byte]; k++) {
            if (!((p[byte] >> k) & 1))
                continue;
            if (n == s->delivered)
                return "delivered bitmap has more ids than its count";
            out[n++] = (uint32_t)((uint64_t)byte * 8 + (uint64_t)k);
        }
    }
    return n == s->delivered ? NULL : "delivered bitmap has fewer ids than its count";
}

/* The delta list in p[0, len) into out[count]: strictly increasing ids below n, the list
 * exactly filling len, and not something the bitmap would have encoded (the encoding of a
 * state is unique). */
static const char *
read_deltas(const uint8_t *p, size_t len, const struct tsock__resume_state *s, uint32_t *out)
{
    if (len >= bitmap_bytes(s->samples))
        return "delta list no smaller than the bitmap (not an encoder's choice)";
    size_t pos = 0;
    uint64_t next_min = 0; /* the smallest id the next entry may name */
    for (uint64_t i = 0; i < s->delivered; i++) {
        uint64_t v = 0;
        int shift = 0;
        for (;;) {
            if (pos == len)
                return "delta list truncated";
            uint8_t b = p[pos++];
            if (shift == 63 && (b & 0x7E))
                return "delta out of range";
            v |= (uint64_t)(b & 0x7F) << shift;
            if (!(b & 0x80)) {
                if (b == 0 && shift > 0)
                    return "delta not in its shortest form";
                break;
            }
            shift += 7;
            if (shift > 63)
                return "delta out of range";
        }
        if (v >= s->samples - next_min)
            return "delivered id past the dataset size";
        out[i] = (uint32_t)(next_min + v);
        next_min = next_min + v + 1;
    }
    return pos == len ? NULL : "delta list longer than its count";
}

static const char *
read_header(const uint8_t *buf, size_t len, struct tsock__resume_state *s, int *enc)
{
    if (len < TSOCK__STATE_HEADER_SIZE + 4)
        return "truncated (shorter than a header)";
    if (get_le(buf, 4) != TSOCK__STATE_MAGIC)
        return "not a tsock consumer state (bad magic)";
    uint64_t version = get_le(buf + 4, 2);
    if (version != 1 && version != TSOCK__STATE_VERSION)
        return "state of another version (this library reads versions 1 and 2)";
    uint64_t flags = get_le(buf + 6, 2);
    if (flags & ~(uint64_t)TSOCK__STATE_DROP_LAST)
        return "unknown flags";
    if (tsock__crc32(0, buf, len - 4) != (uint32_t)get_le(buf + len - 4, 4))
        return "checksum mismatch (corrupt or truncated)";
    memset(s, 0, sizeof *s);
    s->version = (int)version;
    s->drop_last = (flags & TSOCK__STATE_DROP_LAST) != 0;
    s->samples = get_le(buf + 8, 8);
    s->epoch = get_le(buf + 16, 8);
    s->batch = (uint32_t)get_le(buf + 24, 4);
    uint64_t group = get_le(buf + 28, 4);
    if (group != 0 && (version == 1 || group != TSOCK__STATE_GROUP_SIZE))
        return version == 1 ? "state of a group rank in version 1" : "group block of a wrong size";
    if (len < TSOCK__STATE_HEADER_SIZE + group + 4)
        return "truncated (shorter than its group block)";
    s->layout = get_le(buf + 32, 8);
    s->delivered = get_le(buf + 40, 8);
    *enc = buf[48];
    if (group) {
        const uint8_t *g = buf + TSOCK__STATE_HEADER_SIZE;
        s->group = 1;
        s->world = (uint32_t)get_le(g, 4);
        s->nodes = (uint32_t)get_le(g + 4, 4);
        s->node_rank = (uint32_t)get_le(g + 8, 4);
        s->index = get_le(g + 12, 8);
    }
    return check_header(s);
}

int
tsock__state_decode(const uint8_t *buf, size_t len, struct tsock__resume_state *s, uint32_t **ids,
                    const char **why)
{
    static const char *unused;
    if (!why)
        why = &unused;
    *why = "invalid arguments";
    if (!s || !ids || (!buf && len))
        return -EINVAL;
    *ids = NULL;
    int enc = 0;
    *why = read_header(buf, len, s, &enc);
    if (*why)
        return TSOCK_E_BAD_STATE;
    const uint8_t *payload = buf + TSOCK__STATE_HEADER_SIZE + group_bytes(s);
    size_t payload_len = len - TSOCK__STATE_HEADER_SIZE - group_bytes(s) - 4;
    if ((enc == TSOCK__STATE_SET_NONE) != (s->delivered == 0) || enc > TSOCK__STATE_SET_DELTAS) {
        *why = "set encoding does not match the delivered count";
        return TSOCK_E_BAD_STATE;
    }
    if (enc == TSOCK__STATE_SET_NONE) {
        *why = payload_len ? "trailing bytes after the header" : NULL;
        return payload_len ? TSOCK_E_BAD_STATE : 0;
    }
    if (enc == TSOCK__STATE_SET_BITMAP && payload_len != bitmap_bytes(s->samples)) {
        *why = "bitmap length does not match the dataset size";
        return TSOCK_E_BAD_STATE;
    }
    /* Both encodings bound the count by the bytes present: a bitmap names at most 8 ids per
     * byte, a delta list one per byte at least. So the allocation is bounded by the input. */
    if (s->delivered > (uint64_t)payload_len * 8) {
        *why = "delivered count larger than the set can hold";
        return TSOCK_E_BAD_STATE;
    }
    uint32_t *out = malloc((size_t)s->delivered * sizeof *out);
    if (!out)
        return -ENOMEM;
    *why = enc == TSOCK__STATE_SET_BITMAP ? read_bitmap(payload, s, out)
                                          : read_deltas(payload, payload_len, s, out);
    if (!*why && enc == TSOCK__STATE_SET_BITMAP) {
        s->bits = payload; /* the encoder sends a bitmap only when the list is no smaller */
        if (deltas_size(s, payload_len) < payload_len)
            *why = "bitmap where the delta list is smaller (not an encoder's choice)";
        s->bits = NULL;
    }
    if (*why) {
        free(out);
        return TSOCK_E_BAD_STATE;
    }
    *ids = out;
    return 0;
}
