/* STATS_REPLY: encoder and checked decoder, and the status-text check. proto.h states the
 * contract, docs/protocol.md the byte layout, wire.h the primitives both codecs share.
 *
 * STATS_REPLY has a codec of its own because it is kept out of struct tsock__msg (proto.h says
 * why). It follows the same rules as the message codec: the encoder and the decoder share one
 * set of validity rules (check_stats_reply), so the encoder refuses exactly what the decoder
 * would reject, and the encoding of a valid reply is unique, so decode(encode(r)) == r and
 * encode(decode(f)) == f; the fuzz target checks both.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"
#include "wire.h"

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
check_stats_producer(const struct tsock__stats_producer *p)
{
    if (p->slots < 1 || p->slots > TSOCK__WIRE_MAX_SLOTS || p->free_slots > p->slots)
        return -1;
    return p->held <= p->slots - p->free_slots ? 0 : -1;
}

static int
check_stats_consumer(const struct tsock__stats_consumer *c, uint32_t slots)
{
    size_t len;

    if (c->flags & ~(TSOCK__STATS_PAUSED | TSOCK__STATS_REPORTED))
        return -1;
    if (tsock__wire_check_str(c->name, sizeof c->name, 0, &len) != 0)
        return -1;
    return c->held <= slots ? 0 : -1;
}

static int
check_stats_reply(const struct tsock__stats_reply *r)
{
    const char *end = memchr(r->status, '\0', sizeof r->status);

    if (check_stats_producer(&r->producer) != 0)
        return -1;
    if (!end || !tsock__proto_text_ok(r->status, (size_t)(end - r->status)))
        return -1;
    if (r->consumer_count > TSOCK__STATS_MAX_CONSUMERS)
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
put_stats_producer(struct tsock__wire_writer *w, const struct tsock__stats_producer *p)
{
    tsock__wire_put_le(w, p->pid, 4);
    tsock__wire_put_le(w, p->slots, 4);
    tsock__wire_put_le(w, p->free_slots, 4);
    tsock__wire_put_le(w, p->held, 4);
    tsock__wire_put_le(w, p->batches, 8);
    tsock__wire_put_le(w, p->samples, 8);
    tsock__wire_put_le(w, p->epochs, 8);
    tsock__wire_put_le(w, p->released, 8);
    tsock__wire_put_le(w, p->joined, 8);
    tsock__wire_put_le(w, p->lost, 8);
    tsock__wire_put_le(w, p->bad_messages, 8);
    tsock__wire_put_le(w, p->wait_ns, 8);
    tsock__wire_put_le(w, p->uptime_ns, 8);
}

static void
put_stats_consumer(struct tsock__wire_writer *w, const struct tsock__stats_consumer *c)
{
    tsock__wire_put_le(w, c->id, 8);
    tsock__wire_put_le(w, c->pid, 4);
    tsock__wire_put_le(w, c->flags, 4);
    tsock__wire_put_str(w, c->name, sizeof c->name);
    tsock__wire_put_le(w, c->batches, 8);
    tsock__wire_put_le(w, c->samples, 8);
    tsock__wire_put_le(w, c->released, 8);
    tsock__wire_put_le(w, c->held, 4);
    tsock__wire_put_le(w, c->lag, 8);
    tsock__wire_put_le(w, c->rate_milli, 8);
    tsock__wire_put_own_stats(w, &c->own);
}

/* The status as a u16 length and its bytes; check_stats_reply has bounded the length. */
static void
put_text(struct tsock__wire_writer *w, const char *s)
{
    size_t len = strlen(s);

    tsock__wire_put_le(w, len, 2);
    tsock__wire_put_bytes(w, (const uint8_t *)s, len);
}

int
tsock__stats_reply_encode(const struct tsock__stats_reply *r, uint8_t *buf, size_t size)
{
    struct tsock__wire_writer w = {buf, size, 0, 0};

    if (!r || (!buf && size != 0) || check_stats_reply(r) != 0)
        return -EINVAL;
    tsock__wire_put_header(&w, TSOCK__MSG_STATS_REPLY);
    tsock__wire_put_le(&w, r->request_id, 8);
    put_stats_producer(&w, &r->producer);
    put_text(&w, r->status);
    tsock__wire_put_le(&w, r->consumer_count, 1);
    for (uint32_t i = 0; i < r->consumer_count; i++)
        put_stats_consumer(&w, &r->consumers[i]);
    return tsock__wire_finish(&w);
}

static void
get_stats_producer(struct tsock__wire_reader *r, struct tsock__stats_producer *p)
{
    p->pid = (uint32_t)tsock__wire_get_le(r, 4);
    p->slots = (uint32_t)tsock__wire_get_le(r, 4);
    p->free_slots = (uint32_t)tsock__wire_get_le(r, 4);
    p->held = (uint32_t)tsock__wire_get_le(r, 4);
    p->batches = tsock__wire_get_le(r, 8);
    p->samples = tsock__wire_get_le(r, 8);
    p->epochs = tsock__wire_get_le(r, 8);
    p->released = tsock__wire_get_le(r, 8);
    p->joined = tsock__wire_get_le(r, 8);
    p->lost = tsock__wire_get_le(r, 8);
    p->bad_messages = tsock__wire_get_le(r, 8);
    p->wait_ns = tsock__wire_get_le(r, 8);
    p->uptime_ns = tsock__wire_get_le(r, 8);
}

static void
get_stats_consumer(struct tsock__wire_reader *r, struct tsock__stats_consumer *c)
{
    c->id = tsock__wire_get_le(r, 8);
    c->pid = (uint32_t)tsock__wire_get_le(r, 4);
    c->flags = (uint32_t)tsock__wire_get_le(r, 4);
    tsock__wire_get_str(r, c->name, sizeof c->name);
    c->batches = tsock__wire_get_le(r, 8);
    c->samples = tsock__wire_get_le(r, 8);
    c->released = tsock__wire_get_le(r, 8);
    c->held = (uint32_t)tsock__wire_get_le(r, 4);
    c->lag = tsock__wire_get_le(r, 8);
    c->rate_milli = tsock__wire_get_le(r, 8);
    tsock__wire_get_own_stats(r, &c->own);
}

/* A u16 length and that many bytes of status text into dst[TSOCK_MAX_STATUS + 1]. A length
 * past the bound or the frame, or bytes that are not status text, make the frame bad. */
static void
get_text(struct tsock__wire_reader *r, char *dst)
{
    size_t len = (size_t)tsock__wire_get_le(r, 2);

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
tsock__stats_reply_decode(const uint8_t *buf, size_t size, struct tsock__stats_reply *out)
{
    struct tsock__wire_reader r = {buf, size, 0, 0};

    if (!out || (!buf && size != 0))
        return -EINVAL;
    memset(out, 0, sizeof *out);
    int type = tsock__wire_get_header(&r);
    if (type < 0)
        return type;
    if (type != TSOCK__MSG_STATS_REPLY)
        return TSOCK_E_PROTOCOL;
    out->request_id = tsock__wire_get_le(&r, 8);
    get_stats_producer(&r, &out->producer);
    get_text(&r, out->status);
    out->consumer_count = (uint32_t)tsock__wire_get_le(&r, 1);
    if (out->consumer_count > TSOCK__STATS_MAX_CONSUMERS)
        return TSOCK_E_PROTOCOL;
    for (uint32_t i = 0; i < out->consumer_count && !r.bad; i++)
        get_stats_consumer(&r, &out->consumers[i]);
    if (r.bad || r.pos != r.size || check_stats_reply(out) != 0)
        return TSOCK_E_PROTOCOL;
    return 0;
}
