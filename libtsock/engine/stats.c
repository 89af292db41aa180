/* Statistics: what each tsock_stat key means for a snapshot, and the stats client that asks a
 * running producer for one over its endpoint (tsock_stats_query) and shows it as figures or as
 * JSON. The client is a plain DEALER that sends STATS_REQUEST and never HELLO, so the producer
 * never counts it as a consumer. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "core/core.h"
#include "core/json.h"
#include "core/sync.h"
#include "engine/stats.h"
#include "transport/transport.h"

/* ---- keys -------------------------------------------------------------------------------- */

int
tsock__stats_producer_value(const struct tsock_stats_producer *p, uint32_t consumers, int key,
                            uint64_t *value)
{
    switch (key) {
    case TSOCK_STAT_BATCHES: *value = p->batches; return 0;
    case TSOCK_STAT_SAMPLES: *value = p->samples; return 0;
    case TSOCK_STAT_RELEASED: *value = p->released; return 0;
    case TSOCK_STAT_HELD: *value = p->held; return 0;
    case TSOCK_STAT_CONSUMERS: *value = consumers; return 0;
    case TSOCK_STAT_JOINED: *value = p->joined; return 0;
    case TSOCK_STAT_LOST: *value = p->lost; return 0;
    case TSOCK_STAT_BAD_MESSAGES: *value = p->bad_messages; return 0;
    case TSOCK_STAT_WAIT_NS: *value = p->wait_ns; return 0;
    case TSOCK_STAT_PID: *value = p->pid; return 0;
    case TSOCK_STAT_EPOCHS: *value = p->epochs; return 0;
    case TSOCK_STAT_SLOTS: *value = p->slots; return 0;
    case TSOCK_STAT_FREE_SLOTS: *value = p->free_slots; return 0;
    case TSOCK_STAT_UPTIME_NS: *value = p->uptime_ns; return 0;
    default: return -EINVAL;
    }
}

int
tsock__stats_consumer_value(const struct tsock_stats_consumer *c, int key, uint64_t *value)
{
    switch (key) {
    case TSOCK_STAT_BATCHES: *value = c->batches; return 0;
    case TSOCK_STAT_SAMPLES: *value = c->samples; return 0;
    case TSOCK_STAT_RELEASED: *value = c->released; return 0;
    case TSOCK_STAT_HELD: *value = c->held; return 0;
    case TSOCK_STAT_PID: *value = c->pid; return 0;
    case TSOCK_STAT_ID: *value = c->id; return 0;
    case TSOCK_STAT_LAG: *value = c->lag; return 0;
    case TSOCK_STAT_RATE_MILLI: *value = c->rate_milli; return 0;
    case TSOCK_STAT_PAUSED: *value = (c->flags & TSOCK_STATS_PAUSED) != 0; return 0;
    case TSOCK_STAT_CONSUMED_BATCHES: *value = c->own.batches; return 0;
    case TSOCK_STAT_CONSUMED_SAMPLES: *value = c->own.samples; return 0;
    case TSOCK_STAT_EPOCHS: *value = c->own.epochs; return 0;
    case TSOCK_STAT_WAIT_NS: *value = c->own.wait_ns; return 0;
    default: return -EINVAL;
    }
}

/* ---- the snapshot ------------------------------------------------------------------------ */

struct tsock_stats {
    char endpoint[TSOCK_ENDPOINT_MAX];
    struct tsock_stats_reply reply;
    char *json;
};

int
tsock_stats_consumer_count(const tsock_stats *s)
{
    return s ? (int)s->reply.consumer_count : -EINVAL;
}

int
tsock_stats_get(const tsock_stats *s, int consumer, int key, uint64_t *value)
{
    if (!s || !value || consumer < -1)
        return -EINVAL;
    if (consumer < 0)
        return tsock__stats_producer_value(&s->reply.producer, s->reply.consumer_count, key, value);
    if ((uint32_t)consumer >= s->reply.consumer_count)
        return -ENOENT;
    return tsock__stats_consumer_value(&s->reply.consumers[consumer], key, value);
}

const char *
tsock_stats_consumer_name(const tsock_stats *s, int consumer)
{
    if (!s || consumer < 0 || (uint32_t)consumer >= s->reply.consumer_count)
        return NULL;
    return s->reply.consumers[consumer].name;
}

const char *
tsock_stats_status(const tsock_stats *s)
{
    return s ? s->reply.status : NULL;
}

const char *
tsock_stats_json(const tsock_stats *s)
{
    return s ? s->json : NULL;
}

void
tsock_stats_destroy(tsock_stats *s)
{
    if (!s)
        return;
    free(s->json);
    free(s);
}

/* ---- JSON -------------------------------------------------------------------------------- */

/* A growing string; after a failed allocation it stays failed and the caller reports -ENOMEM. */
struct jbuf {
    char *data;
    size_t len, cap;
    int failed;
};

static void
jb_put(struct jbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->cap - b->len <= n) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->len <= n)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void TSOCK__PRINTF(2, 3) jb_printf(struct jbuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        jb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not one. */
static size_t
utf8_len(const char *s, size_t n)
{
    size_t len = (unsigned char)s[0] < 0xE0 ? 2 : (unsigned char)s[0] < 0xF0 ? 3 : 4;
    return len <= n && tsock__proto_text_ok(s, len) ? len : 0;
}

/* A JSON string. Names on the wire are printable bytes but not necessarily UTF-8: a byte that
 * starts no valid sequence becomes U+FFFD, so the output is always valid JSON and UTF-8. */
static void
jb_string(struct jbuf *b, const char *s)
{
    size_t n = strlen(s);
    jb_put(b, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : utf8_len(s + i, n - i);
        if (c == '"' || c == '\\') {
            jb_put(b, "\\", 1);
            jb_put(b, s + i, 1);
        } else if (c < 0x20 || c == 0x7f) {
            jb_printf(b, "\\u%04x", c);
        } else if (len == 0) {
            jb_put(b, "\\ufffd", 6);
            len = 1;
        } else {
            jb_put(b, s + i, len);
        }
        i += len;
    }
    jb_put(b, "\"", 1);
}

static double
seconds(uint64_t ns)
{
    return (double)ns / 1e9;
}

static void
json_producer(struct jbuf *b, const struct tsock_stats_reply *r)
{
    const struct tsock_stats_producer *p = &r->producer;
    jb_printf(b, "\"producer\":{\"pid\":%u,\"uptime_s\":%.3f,", p->pid, seconds(p->uptime_ns));
    jb_printf(b, "\"batches\":%llu,\"samples\":%llu,\"epochs\":%llu,\"released\":%llu,",
              (unsigned long long)p->batches, (unsigned long long)p->samples,
              (unsigned long long)p->epochs, (unsigned long long)p->released);
    jb_printf(b, "\"slots\":%u,\"slots_in_use\":%u,\"slots_free\":%u,\"slots_held\":%u,", p->slots,
              p->slots - p->free_slots, p->free_slots, p->held);
    jb_printf(b, "\"consumers\":%u,\"joined\":%llu,\"lost\":%llu,", r->consumer_count,
              (unsigned long long)p->joined, (unsigned long long)p->lost);
    jb_printf(b, "\"acquire_wait_s\":%.6f,\"bad_messages\":%llu}", seconds(p->wait_ns),
              (unsigned long long)p->bad_messages);
}

static void
json_consumer(struct jbuf *b, const struct tsock_stats_consumer *c)
{
    jb_printf(b, "{\"id\":%llu,\"pid\":%u,\"name\":", (unsigned long long)c->id, c->pid);
    jb_string(b, c->name);
    jb_printf(b, ",\"paused\":%s,\"batches\":%llu,\"samples\":%llu,\"released\":%llu,",
              (c->flags & TSOCK_STATS_PAUSED) ? "true" : "false", (unsigned long long)c->batches,
              (unsigned long long)c->samples, (unsigned long long)c->released);
    jb_printf(b, "\"held\":%u,\"lag\":%llu,\"rate\":%.3f,", c->held, (unsigned long long)c->lag,
              (double)c->rate_milli / 1000.0);
    jb_printf(b, "\"reported\":%s,\"consumed_batches\":%llu,\"consumed_samples\":%llu,",
              (c->flags & TSOCK_STATS_REPORTED) ? "true" : "false",
              (unsigned long long)c->own.batches, (unsigned long long)c->own.samples);
    jb_printf(b, "\"epochs\":%llu,\"wait_s\":%.6f}", (unsigned long long)c->own.epochs,
              seconds(c->own.wait_ns));
}

static int
build_json(tsock_stats *s)
{
    const struct tsock_stats_reply *r = &s->reply;
    struct jbuf b = {0};
    jb_put(&b, "{\"endpoint\":", 12);
    jb_string(&b, s->endpoint);
    jb_put(&b, ",", 1);
    json_producer(&b, r);
    /* The producer library only accepts a JSON object as status; another producer might send
     * any text, which then goes out as a string so the output stays JSON. */
    size_t status_len = strlen(r->status);
    jb_put(&b, ",\"status\":", 10);
    if (status_len == 0)
        jb_put(&b, "null", 4);
    else if (tsock__json_is_object(r->status, status_len))
        jb_put(&b, r->status, status_len);
    else
        jb_string(&b, r->status);
    jb_put(&b, ",\"consumers\":[", 14);
    for (uint32_t i = 0; i < r->consumer_count; i++) {
        if (i)
            jb_put(&b, ",", 1);
        json_consumer(&b, &r->consumers[i]);
    }
    jb_put(&b, "]}", 2);
    if (b.failed) {
        free(b.data);
        return -ENOMEM;
    }
    s->json = b.data;
    return 0;
}

/* ---- the query --------------------------------------------------------------------------- */

/* What a received frame means for the query: 1 the reply, 0 something to ignore (a late
 * reply to an earlier request), or an error code. */
static int
take_frame(const struct tsock_frame *f, uint64_t request_id, struct tsock_stats_reply *out)
{
    if (f->parts != 1 || f->oversized)
        return TSOCK_E_PROTOCOL;
    int type = tsock__msg_peek_type(f->data, f->size);
    if (type == TSOCK_MSG_STATS_REPLY) {
        int err = tsock__stats_reply_decode(f->data, f->size, out);
        return err < 0 ? err : out->request_id == request_id;
    }
    if (type < 0)
        return type;
    struct tsock_msg m;
    int err = tsock__msg_decode(f->data, f->size, &m);
    if (err < 0)
        return err;
    /* A producer refuses a request in another protocol version with REJECT. */
    return m.type == TSOCK_MSG_REJECT ? m.u.reject.code : TSOCK_E_PROTOCOL;
}

/* A producer drops requests beyond its rate limit, so an unanswered request is repeated this
 * often (with the same id) until the answer comes or the timeout passes. */
#define RESEND_MS 250

/* Sends the request and waits for its answer on `sock`. */
static int
ask(void *sock, int timeout_ms, struct tsock_frame *f, struct tsock_stats_reply *out)
{
    uint64_t request_id = tsock__mix64(tsock__now_ns() ^ ((uint64_t)getpid() << 32));
    struct tsock_msg m = {.type = TSOCK_MSG_STATS_REQUEST, .u.stats_request = {request_id}};
    uint64_t deadline = tsock__deadline(timeout_ms), resend = 0;
    for (;;) {
        uint64_t now = tsock__now_ns();
        if (now >= resend) {
            int err = tsock__send(sock, NULL, 0, &m);
            if (err < 0 && err != -EAGAIN) /* EAGAIN: not connected yet; sent again later */
                return err;
            resend = now + RESEND_MS * 1000000u;
        }
        int got;
        while ((got = tsock__recv(sock, 0, f)) > 0) {
            int err = take_frame(f, request_id, out);
            if (err != 0)
                return err < 0 ? err : 0;
        }
        if (got < 0)
            return got;
        now = tsock__now_ns();
        if (deadline != TSOCK_NO_DEADLINE && now >= deadline)
            return -ETIMEDOUT;
        uint64_t until = deadline < resend ? deadline : resend;
        zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, until > now ? (long)((until - now) / 1000000u) + 1 : 0) < 0)
            return -zmq_errno();
    }
}

/* An ipc endpoint without its socket file has no producer: say so at once. */
static int
check_ipc_file(const char *endpoint)
{
    const char *path = tsock__ipc_path(endpoint);
    struct stat st;
    if (!path || path[0] == '@' || stat(path, &st) == 0)
        return 0;
    return -errno;
}

static int
query(tsock_stats *s, int timeout_ms)
{
    int err = check_ipc_file(s->endpoint);
    if (err < 0)
        return err;
    struct tsock_frame *f = malloc(sizeof *f);
    void *ctx = zmq_ctx_new();
    void *sock = NULL;
    if (!f || !ctx)
        err = -ENOMEM;
    else
        sock = tsock__dealer_open(ctx, s->endpoint, &err);
    if (sock)
        err = ask(sock, timeout_ms, f, &s->reply);
    tsock__socket_close(sock, 0);
    if (ctx)
        zmq_ctx_term(ctx);
    free(f);
    return err;
}

int
tsock_stats_query(tsock_stats **out, const char *endpoint, int timeout_ms)
{
    if (!out || timeout_ms < -1)
        return -EINVAL;
    *out = NULL;
    tsock_stats *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    int err = 0;
    if (!endpoint)
        err = tsock_default_endpoint(s->endpoint, sizeof s->endpoint);
    else if (snprintf(s->endpoint, sizeof s->endpoint, "%s", endpoint) >= (int)sizeof s->endpoint)
        err = -ENAMETOOLONG;
    if (err >= 0)
        err = query(s, timeout_ms);
    if (err >= 0)
        err = build_json(s);
    if (err < 0) {
        tsock_stats_destroy(s);
        return err;
    }
    *out = s;
    return 0;
}
