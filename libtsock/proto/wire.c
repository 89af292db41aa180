/* Wire primitives of the codecs: wire.h states the contract, docs/protocol.md the byte layout. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "wire.h"

/* ------------------------------------------------------------------------------------------ */
/* Names                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Names end up in logs and in Python strings, so control characters (NUL included) are
 * refused. Bytes 0x80..0xFF pass, so UTF-8 names work; they are not validated as UTF-8. */
int
tsock__wire_name_bytes_ok(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return 0;
    }
    return 1;
}

int
tsock__wire_check_str(const char *s, size_t cap, size_t min, size_t *len)
{
    const char *end = memchr(s, '\0', cap);

    if (!end)
        return -1;
    *len = (size_t)(end - s);
    if (*len < min || !tsock__wire_name_bytes_ok(s, *len))
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Encoding                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void
store_le(uint8_t *p, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void
tsock__wire_put_le(struct tsock__wire_writer *w, uint64_t v, unsigned n)
{
    if (w->overflow || n > w->size - w->pos) {
        w->overflow = 1;
        return;
    }
    store_le(w->buf + w->pos, v, n);
    w->pos += n;
}

void
tsock__wire_put_bytes(struct tsock__wire_writer *w, const uint8_t *p, size_t n)
{
    if (w->overflow || n > w->size - w->pos) {
        w->overflow = 1;
        return;
    }
    if (n)
        memcpy(w->buf + w->pos, p, n);
    w->pos += n;
}

/* A string as a u8 length and its bytes; the caller's check has already bounded the length. */
void
tsock__wire_put_str(struct tsock__wire_writer *w, const char *s, size_t cap)
{
    size_t len = (size_t)((const char *)memchr(s, '\0', cap) - s);

    tsock__wire_put_le(w, len, 1);
    tsock__wire_put_bytes(w, (const uint8_t *)s, len);
}

void
tsock__wire_put_header(struct tsock__wire_writer *w, int type)
{
    tsock__wire_put_le(w, TSOCK__PROTO_MAGIC, 4);
    tsock__wire_put_le(w, TSOCK__PROTO_VERSION, 2);
    tsock__wire_put_le(w, (uint64_t)type, 2);
    tsock__wire_put_le(w, 0, 4); /* body length, filled in by tsock__wire_finish */
}

int
tsock__wire_finish(struct tsock__wire_writer *w)
{
    if (w->overflow)
        return -ENOBUFS;
    store_le(w->buf + 8, w->pos - TSOCK__PROTO_HEADER_SIZE, 4);
    return (int)w->pos;
}

void
tsock__wire_put_own_stats(struct tsock__wire_writer *w, const struct tsock__msg_consumer_stats *c)
{
    tsock__wire_put_le(w, c->batches, 8);
    tsock__wire_put_le(w, c->samples, 8);
    tsock__wire_put_le(w, c->epochs, 8);
    tsock__wire_put_le(w, c->wait_ns, 8);
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding                                                                                   */
/* ------------------------------------------------------------------------------------------ */

uint64_t
tsock__wire_get_le(struct tsock__wire_reader *r, unsigned n)
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

const uint8_t *
tsock__wire_get_view(struct tsock__wire_reader *r, size_t n)
{
    if (r->bad || n > r->size - r->pos) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->buf + r->pos;
    r->pos += n;
    return p;
}

void
tsock__wire_get_str(struct tsock__wire_reader *r, char *dst, size_t cap)
{
    size_t len = (size_t)tsock__wire_get_le(r, 1);

    if (r->bad)
        return;
    if (len >= cap || len > r->size - r->pos ||
        !tsock__wire_name_bytes_ok((const char *)r->buf + r->pos, len)) {
        r->bad = 1;
        return;
    }
    memcpy(dst, r->buf + r->pos, len);
    dst[len] = '\0';
    r->pos += len;
}

int
tsock__wire_get_header(struct tsock__wire_reader *r)
{
    uint64_t magic, version, type, body_length;

    if (r->size < TSOCK__PROTO_HEADER_SIZE || r->size > TSOCK__PROTO_MAX_MESSAGE)
        return TSOCK_E_PROTOCOL;
    magic = tsock__wire_get_le(r, 4);
    version = tsock__wire_get_le(r, 2);
    type = tsock__wire_get_le(r, 2);
    body_length = tsock__wire_get_le(r, 4);
    if (magic != TSOCK__PROTO_MAGIC)
        return TSOCK_E_PROTOCOL;
    /* Checked before anything else in the frame: the header layout is the same in every
     * version, so a peer of another version is told so rather than called malformed. */
    if (version != TSOCK__PROTO_VERSION)
        return TSOCK_E_VERSION;
    if (body_length != r->size - TSOCK__PROTO_HEADER_SIZE)
        return TSOCK_E_PROTOCOL;
    return (int)type;
}

void
tsock__wire_get_own_stats(struct tsock__wire_reader *r, struct tsock__msg_consumer_stats *c)
{
    c->batches = tsock__wire_get_le(r, 8);
    c->samples = tsock__wire_get_le(r, 8);
    c->epochs = tsock__wire_get_le(r, 8);
    c->wait_ns = tsock__wire_get_le(r, 8);
}
