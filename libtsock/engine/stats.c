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

#include "core/core.h"
#include "core/json.h"
#include "core/sync.h"
#include "engine/stats.h"
#include "transport/channel.h"

/* ---- keys -------------------------------------------------------------------------------- */

int
tsock__stats_producer_value(const struct tsock__stats_producer *p, uint32_t consumers, int key,
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
tsock__stats_consumer_value(const struct tsock__stats_consumer *c, int key, uint64_t *value)
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
    case TSOCK_STAT_PAUSED: *value = (c->flags & TSOCK__STATS_PAUSED) != 0; return 0;
    case TSOCK_STAT_CONSUMED_BATCHES: *value = c->own.batches; return 0;
    case TSOCK_STAT_CONSUMED_SAMPLES: *value = c->own.samples; return 0;
    case TSOCK_STAT_EPOCHS: *value = c->own.epochs; return 0;
    case TSOCK_STAT_WAIT_NS: *value = c->own.wait_ns; return 0;
    default: return -EINVAL;
    }
}

/* ---- the snapshot ------------------------------------------------------------------------ */

struct tsock_stats {
    char endpoint[TSOCK__ENDPOINT_MAX];
    struct tsock__channel_security security;
    struct tsock__stats_reply reply;
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
json_producer(struct jbuf *b, const struct tsock__stats_reply *r)
{
    const struct tsock__stats_producer *p = &r->producer;
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
json_consumer(struct jbuf *b, const struct tsock__stats_consumer *c)
{
    jb_printf(b, "{\"id\":%llu,\"pid\":%u,\"name\":", (unsigned long long)c->id, c->pid);
    jb_string(b, c->name);
    jb_printf(b, ",\"paused\":%s,\"batches\":%llu,\"samples\":%llu,\"released\":%llu,",
              (c->flags & TSOCK__STATS_PAUSED) ? "true" : "false", (unsigned long long)c->batches,
              (unsigned long long)c->samples, (unsigned long long)c->released);
    jb_printf(b, "\"held\":%u,\"lag\":%llu,\"rate\":%.3f,", c->held, (unsigned long long)c->lag,
              (double)c->rate_milli / 1000.0);
    jb_printf(b, "\"reported\":%s,\"consumed_batches\":%llu,\"consumed_samples\":%llu,",
              (c->flags & TSOCK__STATS_REPORTED) ? "true" : "false",
              (unsigned long long)c->own.batches, (unsigned long long)c->own.samples);
    jb_printf(b, "\"epochs\":%llu,\"wait_s\":%.6f}", (unsigned long long)c->own.epochs,
              seconds(c->own.wait_ns));
}

static int
build_json(tsock_stats *s)
{
    const struct tsock__stats_reply *r = &s->reply;
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

/* A producer drops requests beyond its rate limit, so an unanswered request is repeated this
 * often (with the same id) until the answer comes or the timeout passes: the channel's beat. */
#define RESEND_MS 250

/* One query in flight: what the channel's handlers fill in. */
struct query {
    struct tsock__channel *channel;
    uint64_t request_id;
    struct tsock__stats_reply *reply;
    int result; /* 0 while waiting, 1 answered, or an error code */
};

static void
on_reply(void *ctx, const uint8_t *frame, size_t size)
{
    struct query *q = ctx;
    if (q->result != 0)
        return;
    int err = tsock__stats_reply_decode(frame, size, q->reply);
    if (err < 0)
        q->result = err;
    else if (q->reply->request_id == q->request_id)
        q->result = 1; /* else a late answer to an earlier request */
}

/* A producer refuses a request in another protocol version with REJECT. */
static void
on_reject(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    struct query *q = ctx;
    if (q->result == 0)
        q->result = m->u.reject.code;
}

static void
on_other(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    struct query *q = ctx;
    if (q->result == 0)
        q->result = TSOCK_E_PROTOCOL;
}

static void
on_malformed(void *ctx, const struct tsock__peer_id *from, int peer, size_t size, int parts,
             int err)
{
    struct query *q = ctx;
    if (q->result == 0)
        q->result = err;
}

static void
on_handshake_failed(void *ctx, int err)
{
    struct query *q = ctx;
    if (q->result == 0)
        q->result = err;
}

static void
send_request(void *ctx, uint64_t now)
{
    struct query *q = ctx;
    struct tsock__msg m;
    m.type = TSOCK__MSG_STATS_REQUEST;
    m.u.stats_request.request_id = q->request_id;
    int err = tsock__channel_send(q->channel, 0, &m);
    if (err < 0 && err != -EAGAIN && q->result == 0) /* EAGAIN: not connected yet */
        q->result = err;
}

/* An ipc endpoint without its socket file has no producer: say so at once. */
static int
check_ipc_file(const char *endpoint)
{
    const char *path = tsock__channel_ipc_file(endpoint);
    struct stat st;
    if (!path || stat(path, &st) == 0)
        return 0;
    return -errno;
}

static int
query(tsock_stats *s, int timeout_ms)
{
    int err = check_ipc_file(s->endpoint);
    if (err < 0)
        return err;
    struct query q = {
        .request_id = tsock__mix64(tsock__now_ns() ^ ((uint64_t)getpid() << 32)),
        .reply = &s->reply,
    };
    struct tsock__channel_handlers h = {
        .ctx = &q,
        .on_unexpected = on_other,
        .on_malformed = on_malformed,
        .on_stats_reply = on_reply,
        .on_beat = send_request,
        .on_handshake_failed = on_handshake_failed,
    };
    h.on[TSOCK__MSG_REJECT] = on_reject;
    struct tsock__channel_timing t = {.beat_ms = RESEND_MS, .timeout_ms = 0};
    err = tsock__channel_connect(&q.channel, s->endpoint, &h, t, &s->security);
    if (err < 0)
        return err;
    uint64_t deadline = tsock__deadline(timeout_ms);
    while (q.result == 0) {
        uint64_t now = tsock__now_ns();
        if (deadline != TSOCK__NO_DEADLINE && now >= deadline) {
            q.result = -ETIMEDOUT;
            break;
        }
        int wait_ms = deadline == TSOCK__NO_DEADLINE ? -1 : (int)((deadline - now) / 1000000u) + 1;
        tsock__channel_wait(q.channel, wait_ms);
        tsock__channel_dispatch(q.channel);
    }
    tsock__channel_close(q.channel, 0);
    return q.result < 0 ? q.result : 0;
}

int
tsock_stats_query(tsock_stats **out, const char *endpoint, int timeout_ms)
{
    return tsock_stats_query_curve(out, endpoint, timeout_ms, NULL, NULL);
}

int
tsock_stats_query_curve(tsock_stats **out, const char *endpoint, int timeout_ms,
                        const char *client_secret_key_file, const char *server_public_key_file)
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
        err = tsock__channel_security_set(&s->security, 0, client_secret_key_file,
                                          server_public_key_file);
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
