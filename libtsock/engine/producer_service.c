/* The producer engine's service half: the channel's handlers (joining, releases, pauses,
 * goodbyes, statistics requests, lost consumers) and the service thread that runs the channel
 * and announces published slots. Every handler runs on the service thread with `mu` held. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sync.h"
#include "engine/producer_internal.h"

/* Consumer rates are measured over windows of about this length. */
#define RATE_WINDOW_NS 1000000000u
/* STATS_REQUESTs answered per second at most: each reply costs a walk over the consumers and
 * the ring and up to 14 KB queued for a peer that may never read it, so a flood of requests
 * must not turn into a flood of work or memory. Legitimate watchers ask about once a second. */
#define STATS_REPLIES_PER_S 20
/* How long a closing producer lets its last messages (SHUTDOWN) leave. */
#define CLOSE_LINGER_MS 200
/* How long a stopping producer waits, beyond the heartbeat timeout, for the goodbyes of
 * consumers that still read its ring (a dead one is dropped after the heartbeat timeout). */
#define GOODBYE_EXTRA_MS 2000

#define MAX_CONSUMERS TSOCK__PRODUCER_MAX_CONSUMERS

/* ---- the roster -------------------------------------------------------------------------- */

/* "consumer 3 \"trainer-0\" (pid 1234)": how logs name a consumer, by what its job chose. */
static void
consumer_label(const struct tsock__consumer_rec *c, char *buf, size_t size)
{
    if (c->name[0])
        snprintf(buf, size, "consumer %llu \"%s\" (pid %u)", (unsigned long long)c->consumer_id,
                 c->name, c->pid);
    else
        snprintf(buf, size, "consumer %llu (pid %u)", (unsigned long long)c->consumer_id, c->pid);
}

/* Forgets a consumer and frees its slots. `lost`: it vanished without saying BYE. */
static void
drop_consumer(tsock_producer *p, int index, const char *why, int lost)
{
    struct tsock__consumer_rec *c = &p->consumers[index];
    if (!c->active)
        return;
    p->stat_lost += lost != 0;
    /* A rank's group hears of it now, unless the verdict on an unreachable one waits for the
     * end of the pass (a rank saying BYE ends nothing; a lost one ends its group). */
    if (!c->unreachable)
        tsock__pgroup_leave(p, index, lost);
    int freed = tsock__ring_drop_consumer(&p->ring, (uint32_t)index);
    tsock__channel_unwatch(p->channel, index);
    char label[TSOCK_MAX_NAME + 64];
    consumer_label(c, label, sizeof label);
    tsock__log(TSOCK_LOG_INFO, "%s %s; %d slots reclaimed", label, why, freed < 0 ? 0 : freed);
    c->active = 0;
    p->consumer_count--;
    pthread_cond_broadcast(&p->cond);
}

/* A send to the consumer failed. EHOSTUNREACH: its connection is gone. EAGAIN: it stopped
 * reading a queue deep enough for thousands of messages. Either way it cannot be served. The
 * log says which job and what happened, not the socket's errno ("No route to host"). */
static void
drop_unreachable(tsock_producer *p, int index, int type, int err)
{
    char label[TSOCK_MAX_NAME + 64];
    consumer_label(&p->consumers[index], label, sizeof label);
    if (err == -EHOSTUNREACH)
        tsock__log(TSOCK_LOG_WARN,
                   "%s is gone: its connection closed without a goodbye (the process exited or "
                   "was killed) while a %s was sent to it",
                   label, tsock__msg_type_name(type));
    else
        tsock__log(TSOCK_LOG_WARN, "%s cannot be sent a %s (%s): it stopped reading its messages",
                   label, tsock__msg_type_name(type), tsock_strerror(err));
    p->consumers[index].unreachable = 1;
    drop_consumer(p, index, "is unreachable", 0);
}

static void
send_to(tsock_producer *p, int index, const struct tsock__msg *msg)
{
    int err = tsock__channel_send(p->channel, index, msg);
    if (err < 0)
        drop_unreachable(p, index, msg->type, err);
}

/* A BYE from a consumer dropped as unreachable: it left after all. Returns 1 if it was one. */
static int
bye_after_unreachable(tsock_producer *p, const struct tsock__peer_id *from)
{
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        struct tsock__consumer_rec *c = &p->consumers[i];
        if (!c->active && c->unreachable && c->peer.len == from->len &&
            memcmp(c->peer.bytes, from->bytes, from->len) == 0) {
            tsock__pgroup_leave(p, i, 0);
            c->unreachable = 0;
            tsock__log(TSOCK_LOG_INFO, "consumer %llu had said BYE: it left",
                       (unsigned long long)c->consumer_id);
            return 1;
        }
    }
    return 0;
}

/* After a whole pass over the socket: the consumers dropped as unreachable whose BYE did not
 * come are lost. */
static void
settle_unreachable(tsock_producer *p)
{
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        struct tsock__consumer_rec *c = &p->consumers[i];
        if (!c->active && c->unreachable) {
            tsock__pgroup_leave(p, i, 1);
            c->unreachable = 0;
            p->stat_lost++;
            tsock__log(TSOCK_LOG_INFO, "consumer %llu was lost (no BYE)",
                       (unsigned long long)c->consumer_id);
        }
    }
}

/* Refuses a peer with a code and, when there is more to say, a sentence for its log. */
static void
reject_why(tsock_producer *p, const struct tsock__peer_id *to, int code, const char *why)
{
    struct tsock__msg m;
    memset(&m.u.reject, 0, sizeof m.u.reject);
    m.type = TSOCK__MSG_REJECT;
    m.u.reject.code = code;
    if (why)
        snprintf(m.u.reject.text, sizeof m.u.reject.text, "%s", why);
    (void)tsock__channel_reply(p->channel, to, &m); /* best effort to an unknown peer */
}

static void
reject(tsock_producer *p, const struct tsock__peer_id *to, int code)
{
    reject_why(p, to, code, NULL);
}

static void
fill_welcome(const tsock_producer *p, const struct tsock__consumer_rec *c, struct tsock__msg *m)
{
    struct tsock__msg_welcome *w = &m->u.welcome;
    memset(m, 0, sizeof *m);
    m->type = TSOCK__MSG_WELCOME;
    w->consumer_id = c->consumer_id;
    w->batch_size = p->batch_size;
    w->slot_count = p->slot_count;
    w->slot_stride = p->shape.stride;
    w->ring_bytes = p->shape.bytes;
    w->heartbeat_ms = (uint32_t)p->hb_interval_ms;
    w->device = p->memory->ops->wire_device;
    w->samples = p->use_sampler ? p->sampler_samples : 0;
    /* The whole dataset and this node's place in the split (producer_nodes.c): a rank of a
     * group computes its share of the whole from them (dataset/groups.h). */
    w->dataset = p->use_sampler ? p->dataset_samples : 0;
    w->nodes = p->nodes > 1 ? p->nodes : 1;
    w->node_rank = p->nodes > 1 ? p->node_rank : 0;
    w->attach_len = (uint32_t)p->memory->ops->export_blob(p->memory, &w->attach);
    w->classes = p->classes;
    w->classes_len = p->classes_len;
    w->tensor_count = (uint32_t)p->shape.layout.count;
    for (int t = 0; t < p->shape.layout.count; t++) {
        const struct tsock__layout_tensor *lt = &p->shape.layout.tensors[t];
        struct tsock__tensor_desc *d = &w->tensors[t];
        memcpy(d->name, lt->name, sizeof d->name);
        d->dtype = (uint8_t)lt->dtype;
        d->ndim = (uint8_t)lt->ndim;
        memcpy(d->sample_shape, lt->sample_shape, sizeof d->sample_shape);
        d->offset = p->shape.offsets[t];
        d->sample_bytes = lt->sample_bytes;
    }
}

/* A consumer that asks for sample ids (to save its position) needs batches whose ids fit in
 * one message. Without a sampler there are no ids: such a consumer refuses itself at WELCOME
 * (samples 0), with its own clear message, so it is admitted here. */
static int
ids_possible(tsock_producer *p, const struct tsock__msg_hello *h)
{
    if (!(h->flags & TSOCK__HELLO_WANT_IDS) || !p->use_sampler ||
        p->batch_size <= TSOCK__BATCH_MAX_IDS)
        return 1;
    tsock__log(TSOCK_LOG_ERROR,
               "refused a checkpointable consumer (pid %u): batches of %u samples are too large "
               "to carry their sample ids (at most %u)",
               h->pid, p->batch_size, (unsigned)TSOCK__BATCH_MAX_IDS);
    return 0;
}

/* A newcomer takes the first free record. Returns its index, or -1 when it was refused. */
static int
admit(tsock_producer *p, const struct tsock__peer_id *from, const struct tsock__msg_hello *h)
{
    if (p->state != TSOCK__P_RUNNING) {
        reject(p, from, p->state == TSOCK__P_FINISHED ? TSOCK_E_END : TSOCK_E_PRODUCER_STOPPED);
        return -1;
    }
    int index = 0;
    while (index < MAX_CONSUMERS && p->consumers[index].active)
        index++;
    if (index == MAX_CONSUMERS) {
        reject(p, from, TSOCK_E_FULL);
        return -1;
    }
    if (!ids_possible(p, h)) {
        reject(p, from, TSOCK_E_REJECTED);
        return -1;
    }
    struct tsock__consumer_rec *c = &p->consumers[index];
    p->stat_lost += c->unreachable != 0; /* its record is reused before the verdict */
    if (c->unreachable)
        tsock__pgroup_leave(p, index, 1);
    memset(c, 0, sizeof *c);
    char why[TSOCK__PROTO_MAX_TEXT + 1];
    int err = tsock__pgroup_admit(p, index, h, why, sizeof why);
    if (err < 0) {
        memset(c, 0, sizeof *c);
        tsock__log(TSOCK_LOG_ERROR, "refused a consumer (pid %u): %s", h->pid, why);
        reject_why(p, from, err, why);
        return -1;
    }
    c->active = 1;
    c->peer = *from;
    c->consumer_id = p->next_consumer_id++;
    c->join_order = p->stat_joined++;
    c->pid = h->pid;
    c->want_ids = (h->flags & TSOCK__HELLO_WANT_IDS) != 0;
    /* A solo consumer uses ids to pause mid-epoch (engine/consumer_leave.c, same rule). */
    if ((h->flags & TSOCK__HELLO_IDS_IF_ABLE) && p->use_sampler &&
        p->batch_size <= TSOCK__BATCH_MAX_IDS)
        c->want_ids = 1;
    memcpy(c->name, h->name, sizeof c->name);
    c->rate_mark_ns = tsock__now_ns();
    c->window_start = TSOCK__NO_WINDOW;
    c->first_window = TSOCK__NO_WINDOW;
    p->consumer_count++;
    tsock__channel_watch(p->channel, index, from);
    pthread_cond_broadcast(&p->cond);
    tsock__log(TSOCK_LOG_INFO, "consumer %llu joined (pid %u, \"%s\")",
               (unsigned long long)c->consumer_id, c->pid, c->name);
    return index;
}

/* ---- handlers ---------------------------------------------------------------------------- */

static void
on_hello(void *ctx, const struct tsock__peer_id *from, int index, const struct tsock__msg *m)
{
    tsock_producer *p = ctx;
    if (index < 0)
        index = admit(p, from, &m->u.hello);
    if (index < 0)
        return;
    /* A repeated HELLO (its first WELCOME was lost) gets the same answer again. */
    struct tsock__msg w;
    fill_welcome(p, &p->consumers[index], &w);
    send_to(p, index, &w);
}

/* Messages only a known consumer may send; anyone else is told it is not one (a consumer we
 * dropped as silent, or never knew). Returns 1 when the sender is known. */
static int
known(tsock_producer *p, const struct tsock__peer_id *from, int index, int type)
{
    if (index >= 0)
        return 1;
    if (!(type == TSOCK__MSG_BYE && bye_after_unreachable(p, from)))
        reject(p, from, TSOCK_E_REJECTED);
    return 0;
}

static void
on_release(void *ctx, const struct tsock__peer_id *from, int index, const struct tsock__msg *m)
{
    tsock_producer *p = ctx;
    if (!known(p, from, index, m->type))
        return;
    const struct tsock__msg_release *r = &m->u.release;
    int freed = tsock__ring_release(&p->ring, r->slot, (uint32_t)index, r->seq);
    if (freed < 0) {
        p->stat_bad++;
        tsock__log(TSOCK_LOG_WARN, "consumer %llu released slot %u seq %llu it does not hold",
                   (unsigned long long)p->consumers[index].consumer_id, r->slot,
                   (unsigned long long)r->seq);
        return;
    }
    p->consumers[index].released++;
    p->stat_released++;
    if (freed)
        pthread_cond_broadcast(&p->cond);
}

static void
on_heartbeat(void *ctx, const struct tsock__peer_id *from, int index, const struct tsock__msg *m)
{
    (void)known(ctx, from, index, m->type); /* the channel noted that it is alive */
}

static void
on_bye(void *ctx, const struct tsock__peer_id *from, int index, const struct tsock__msg *m)
{
    tsock_producer *p = ctx;
    if (known(p, from, index, m->type))
        drop_consumer(p, index, "left", 0);
}

/* A paused consumer gives back every batch that reaches it before its RESUMED, so the batches
 * published to it but not announced yet (the outgoing queue, flushed after the handlers) are
 * released here instead. Were they announced later, one could reach it after a RESUMED sent
 * meanwhile and be read as the start of its new window, which the producer places at the
 * next batch it publishes: the consumer's epoch would be off by the batches in between, with
 * duplicates (test_leave's test_pause_calls, about one run in twenty under load). */
static void
forget_unannounced(tsock_producer *p, int index)
{
    uint64_t bit = (uint64_t)1 << index;
    for (uint32_t k = 0; k < p->queue_len; k++) {
        struct tsock__outgoing *o = &p->queue[(p->queue_head + k) % p->slot_count];
        if (!(o->holders & bit))
            continue;
        o->holders &= ~bit;
        if (tsock__ring_release(&p->ring, o->batch.slot, (uint32_t)index, o->batch.seq) > 0)
            pthread_cond_broadcast(&p->cond);
    }
}

/* PAUSE: the consumer finished an epoch and is busy elsewhere, or stopped reading mid-epoch;
 * its window and phase end here. RESUME: it comes back; its next batch starts a new window.
 * Both say how many epochs it finished (or gave up), which a finite stream's end counts. */
static void
on_pause_resume(void *ctx, const struct tsock__peer_id *from, int index, const struct tsock__msg *m)
{
    tsock_producer *p = ctx;
    /* known() checks the index too; said again so that the compiler sees it (UBSan builds
     * warn about the shift in forget_unannounced otherwise). */
    if (!known(p, from, index, m->type) || index < 0 || index >= MAX_CONSUMERS)
        return;
    struct tsock__consumer_rec *c = &p->consumers[index];
    /* After the end was decided, a PAUSE goes unanswered and changes nothing: without PAUSED the
     * consumer keeps its queue, the stream's last batches, and SHUTDOWN tells it the end. */
    if (m->type == TSOCK__MSG_PAUSE && p->end_decided)
        return;
    if (m->type == TSOCK__MSG_PAUSE)
        forget_unannounced(p, index);
    c->epochs_done = m->u.pause.epochs;
    c->window_start = TSOCK__NO_WINDOW;
    c->paused = m->type == TSOCK__MSG_PAUSE;
    /* Either changes what a producer waiting at a finite stream's end waits for. */
    pthread_cond_broadcast(&p->cond);
    struct tsock__msg answer;
    answer.type = m->type == TSOCK__MSG_PAUSE ? TSOCK__MSG_PAUSED : TSOCK__MSG_RESUMED;
    send_to(p, index, &answer);
}

static void
on_consumer_stats(void *ctx, const struct tsock__peer_id *from, int index,
                  const struct tsock__msg *m)
{
    tsock_producer *p = ctx;
    if (!known(p, from, index, m->type))
        return;
    p->consumers[index].own = m->u.consumer_stats;
    p->consumers[index].reported = 1;
}

/* Whether one more STATS_REPLY fits in the current second's allowance. */
static int
stats_allowed(tsock_producer *p)
{
    uint64_t now = tsock__now_ns();
    if (now - p->stats_window_ns >= 1000000000u) {
        p->stats_window_ns = now;
        p->stats_answered = 0;
    }
    if (p->stats_answered < STATS_REPLIES_PER_S) {
        p->stats_answered++;
        return 1;
    }
    if (p->stats_dropped++ % 1000 == 0)
        tsock__log(TSOCK_LOG_WARN,
                   "more than %d statistics requests per second; the excess goes "
                   "unanswered (%llu so far)",
                   STATS_REPLIES_PER_S, (unsigned long long)p->stats_dropped);
    return 0;
}

/* Answers a STATS_REQUEST from any peer, consumer or not, within the rate limit. */
static void
on_stats_request(void *ctx, const struct tsock__peer_id *from, int index,
                 const struct tsock__msg *m)
{
    tsock_producer *p = ctx;
    if (!stats_allowed(p))
        return;
    struct tsock__stats_reply *r = &p->stats_reply;
    int order[MAX_CONSUMERS];
    r->request_id = m->u.stats_request.request_id;
    tsock__producer_snapshot(p, &r->producer);
    memcpy(r->status, p->status, sizeof r->status);
    r->consumer_count = (uint32_t)tsock__producer_join_order(p, order);
    for (uint32_t i = 0; i < r->consumer_count; i++)
        tsock__producer_snapshot_consumer(p, order[i], &r->consumers[i]);
    int n = tsock__stats_reply_encode(r, p->stats_frame, sizeof p->stats_frame);
    if (n < 0) {
        tsock__log(TSOCK_LOG_ERROR, "cannot encode a statistics reply: %s", tsock_strerror(n));
        return;
    }
    /* Best effort, like any answer to a peer that may not be a consumer. */
    (void)tsock__channel_reply_frame(p->channel, from, p->stats_frame, (size_t)n);
}

static void
note_bad_message(tsock_producer *p, size_t size, int parts, int err)
{
    p->stat_bad++;
    /* A flood of garbage must not turn into a flood of log lines. */
    if (p->stat_bad <= 10 || p->stat_bad % 1000 == 0)
        tsock__log(TSOCK_LOG_WARN, "rejected a malformed message (%zu bytes, %d frames): %s", size,
                   parts, tsock_strerror(err));
}

static void
on_malformed(void *ctx, const struct tsock__peer_id *from, int index, size_t size, int parts,
             int err)
{
    tsock_producer *p = ctx;
    note_bad_message(p, size, parts, err);
    if (err == TSOCK_E_VERSION)
        reject(p, from, TSOCK_E_VERSION);
}

/* A well-formed message no consumer sends (WELCOME, BATCH, ...). */
static void
on_unexpected(void *ctx, const struct tsock__peer_id *from, int index, const struct tsock__msg *m)
{
    tsock_producer *p = ctx;
    p->stat_bad++;
    if (p->stat_bad <= 10 || p->stat_bad % 1000 == 0)
        tsock__log(TSOCK_LOG_WARN, "rejected a %s message, which no consumer sends",
                   tsock__msg_type_name(m->type));
}

static void
on_peer_lost(void *ctx, int index)
{
    drop_consumer(ctx, index, "timed out (no heartbeat)", 1);
}

static void
on_send_failed(void *ctx, int index, int err)
{
    drop_unreachable(ctx, index, TSOCK__MSG_HEARTBEAT, err);
}

/* Starts a new rate window for every consumer whose current one is over. */
static void
update_rates(void *ctx, uint64_t now)
{
    tsock_producer *p = ctx;
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        struct tsock__consumer_rec *c = &p->consumers[i];
        uint64_t elapsed = now - c->rate_mark_ns;
        if (!c->active || elapsed < RATE_WINDOW_NS)
            continue;
        double per_s = (double)(c->released - c->rate_mark_released) * 1e9 / (double)elapsed;
        c->rate_milli = (uint64_t)(per_s * 1000.0 + 0.5);
        c->rate_mark_ns = now;
        c->rate_mark_released = c->released;
    }
}

/* ---- announcing -------------------------------------------------------------------------- */

/* The consumers that asked for sample ids. */
static uint64_t
want_ids_mask(const tsock_producer *p)
{
    uint64_t mask = 0;
    for (int i = 0; i < MAX_CONSUMERS; i++)
        if (p->consumers[i].active && p->consumers[i].want_ids)
            mask |= (uint64_t)1 << i;
    return mask;
}

/* Sends batch b to the consumers in `to`: the plain message to those that did not ask for ids,
 * the message with ids to those that did, each encoded once. Returns the consumers a send
 * failed for. */
static uint64_t
send_batch(tsock_producer *p, uint64_t to, const struct tsock__msg_batch *b)
{
    struct tsock__msg m;
    m.type = TSOCK__MSG_BATCH;
    m.u.batch = *b;
    m.u.batch.ids = NULL;
    uint64_t with_ids = p->use_sampler ? to & want_ids_mask(p) : 0;
    uint64_t failed = 0;
    if (to & ~with_ids)
        failed |= tsock__channel_send_many(p->channel, to & ~with_ids, &m);
    if (with_ids) {
        /* The slot is held by these consumers, so its ids cannot have been refilled. */
        const uint64_t *ids = p->slot_ids + (size_t)b->slot * p->batch_size;
        for (uint32_t i = 0; i < b->samples; i++)
            for (int k = 0; k < 4; k++)
                p->ids_wire[4 * i + (uint32_t)k] = (uint8_t)(ids[i] >> (8 * k));
        m.u.batch.flags |= TSOCK__BATCH_HAS_IDS;
        m.u.batch.ids = p->ids_wire;
        failed |= tsock__channel_send_many(p->channel, with_ids, &m);
    }
    return failed;
}

/* Whether the head of the queue may be announced: what publish queued for its slot (on a GPU,
 * the copy) has completed (issue 12 item 2, issue 20). An error keeps it unannounced: a
 * consumer must never wait on an event that may not complete. */
static int
copy_done(tsock_producer *p, const struct tsock__outgoing *o)
{
    if (!p->memory->ops->publish_done)
        return 1;
    int done = p->memory->ops->publish_done(p->memory, o->batch.slot);
    if (done < 0 && !p->copy_error_told) {
        p->copy_error_told = 1;
        tsock__log(TSOCK_LOG_ERROR, "a batch's copy to the GPU failed (%s): it is not announced",
                   tsock_strerror(done));
    }
    return done == 1;
}

/* Announces, in order, every published slot whose copy has completed to the consumers still
 * holding it: encoded once per variant (with and without sample ids), sent to all of them.
 * Returns how many published slots still wait for their copies. */
static uint32_t
flush_outgoing(tsock_producer *p)
{
    while (p->queue_len > 0) {
        struct tsock__outgoing *o = &p->queue[p->queue_head];
        /* A holder dropped since publish has had its bit cleared by the ring. */
        uint64_t to = o->holders & tsock__ring_holders(&p->ring, o->batch.slot, o->batch.seq);
        if (to && !copy_done(p, o))
            break;
        p->queue_head = (p->queue_head + 1) % p->slot_count;
        p->queue_len--;
        if (!to)
            continue;
        uint64_t failed = send_batch(p, to, &o->batch);
        for (int i = 0; i < MAX_CONSUMERS; i++) {
            uint64_t bit = (uint64_t)1 << i;
            if (!(to & bit))
                continue;
            p->consumers[i].batches++;
            p->consumers[i].samples += o->batch.samples;
            if (failed & bit)
                drop_unreachable(p, i, TSOCK__MSG_BATCH, -EHOSTUNREACH);
        }
    }
    return p->queue_len;
}

/* Stopping: the batches published last are announced once their copies complete, within the
 * heartbeat timeout (a device that stalls longer is not waited for: they are dropped). */
static void
flush_remaining(tsock_producer *p)
{
    uint64_t deadline = tsock__deadline(p->hb_timeout_ms);
    while (flush_outgoing(p) > 0) {
        if (tsock__now_ns() >= deadline) {
            tsock__log(TSOCK_LOG_WARN,
                       "stopping with %u published batch(es) whose copy to the GPU did not "
                       "complete within %d ms: they are not announced",
                       p->queue_len, p->hb_timeout_ms);
            p->queue_len = 0;
            return;
        }
        pthread_mutex_unlock(&p->mu);
        tsock__channel_wait(p->channel, 1);
        pthread_mutex_lock(&p->mu);
        tsock__channel_dispatch(p->channel);
        settle_unreachable(p);
    }
}

static void
send_shutdown(tsock_producer *p, uint32_t reason)
{
    struct tsock__msg m;
    m.type = TSOCK__MSG_SHUTDOWN;
    m.u.shutdown.reason = reason;
    m.u.shutdown.epochs = p->stat_epochs; /* so that a job's EndOfStream can say it */
    for (int i = 0; i < MAX_CONSUMERS; i++)
        if (p->consumers[i].active)
            send_to(p, i, &m);
    p->shutdown_sent = 1;
}

/* ---- the service thread ------------------------------------------------------------------ */

/* After SHUTDOWN: the ring (and, on a GPU, the slots' events) is freed once the service
 * thread ends, and a consumer may still read it, or have queued work that waits on it. So
 * keep serving (releases, heartbeats, liveness) until every consumer has said BYE or been
 * found dead, within a bound: a consumer that holds a batch past it is on its own. */
static void
await_goodbyes(tsock_producer *p)
{
    uint64_t deadline = tsock__deadline(p->hb_timeout_ms + GOODBYE_EXTRA_MS);
    tsock__channel_dispatch(p->channel);
    settle_unreachable(p);
    while (p->consumer_count > 0) {
        uint64_t now = tsock__now_ns();
        if (now >= deadline) {
            tsock__log(TSOCK_LOG_WARN,
                       "stopping with %d consumer(s) that did not say goodbye within %d ms",
                       p->consumer_count, p->hb_timeout_ms + GOODBYE_EXTRA_MS);
            return;
        }
        pthread_mutex_unlock(&p->mu);
        tsock__channel_wait(p->channel, (int)((deadline - now) / 1000000u) + 1);
        pthread_mutex_lock(&p->mu);
        tsock__channel_dispatch(p->channel);
        settle_unreachable(p);
    }
}

static void *
service_main(void *arg)
{
    tsock_producer *p = arg;
    /* Named, so that per-thread CPU figures (/proc/PID/task, top -H) show the service. */
    pthread_setname_np(pthread_self(), "tsock-service");
    pthread_mutex_lock(&p->mu);
    while (!p->stop_thread) {
        /* A group waiting for its ranks fails at its deadline. */
        int wait_ms = tsock__pgroup_expire(p, tsock__now_ns());
        /* Published batches wait for their copies: look again within a millisecond. */
        if (p->queue_len > 0 && wait_ms != 0)
            wait_ms = 1;
        pthread_mutex_unlock(&p->mu);
        tsock__channel_wait(p->channel, wait_ms);
        pthread_mutex_lock(&p->mu);
        tsock__channel_dispatch(p->channel);
        settle_unreachable(p);
        flush_outgoing(p);
        /* The end goes out after the last batch, once its copy completed and it was announced. */
        if (p->state == TSOCK__P_FINISHED && !p->shutdown_sent && p->queue_len == 0)
            send_shutdown(p, TSOCK__SHUTDOWN_END);
        /* tsock_producer_cancel woke us through the channel: pass it on to the caller. */
        if (atomic_load(&p->cancel))
            pthread_cond_broadcast(&p->cond);
    }
    flush_remaining(p);
    if (!p->shutdown_sent)
        send_shutdown(p, p->state == TSOCK__P_FINISHED ? TSOCK__SHUTDOWN_END
                                                       : TSOCK__SHUTDOWN_STOPPED);
    await_goodbyes(p);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int
tsock__producer_service_start(tsock_producer *p)
{
    struct tsock__channel_handlers h = {
        .ctx = p,
        .on_unexpected = on_unexpected,
        .on_malformed = on_malformed,
        .on_beat = update_rates,
        .on_peer_lost = on_peer_lost,
        .on_send_failed = on_send_failed,
    };
    h.on[TSOCK__MSG_HELLO] = on_hello;
    h.on[TSOCK__MSG_RELEASE] = on_release;
    h.on[TSOCK__MSG_HEARTBEAT] = on_heartbeat;
    h.on[TSOCK__MSG_BYE] = on_bye;
    h.on[TSOCK__MSG_PAUSE] = on_pause_resume;
    h.on[TSOCK__MSG_RESUME] = on_pause_resume;
    h.on[TSOCK__MSG_CONSUMER_STATS] = on_consumer_stats;
    h.on[TSOCK__MSG_STATS_REQUEST] = on_stats_request;
    struct tsock__channel_timing t = {p->hb_interval_ms, p->hb_timeout_ms};
    int err = tsock__channel_bind(&p->channel, p->endpoint, &h, t, &p->security);
    if (err < 0)
        return err;
    atomic_store(&p->cancel_channel, p->channel); /* tsock_producer_cancel may wake it */
    /* The thread takes no signals: they belong to the application's threads, whose handler
     * may cancel this producer's wait (tsock_producer_cancel). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    err = pthread_create(&p->thread, NULL, service_main, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        atomic_store(&p->cancel_channel, NULL);
        tsock__channel_close(p->channel, 0);
        p->channel = NULL;
        return -err;
    }
    p->thread_started = 1;
    return 0;
}

void
tsock__producer_service_stop(tsock_producer *p)
{
    if (p->thread_started) {
        pthread_mutex_lock(&p->mu);
        p->stop_thread = 1;
        if (p->state == TSOCK__P_RUNNING)
            p->state = TSOCK__P_STOPPED;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->mu);
        tsock__channel_wake(p->channel);
        pthread_join(p->thread, NULL);
        p->thread_started = 0;
    }
    atomic_store(&p->cancel_channel, NULL);
    /* Linger a little so the SHUTDOWN messages reach the consumers. */
    tsock__channel_close(p->channel, CLOSE_LINGER_MS);
    p->channel = NULL;
}
