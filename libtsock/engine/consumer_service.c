/* The consumer engine's service half: the channel's handlers (the handshake, batches, the
 * producer's goodbyes and losses), pausing between epochs, and the service thread that runs
 * the channel, sends releases and watches stream-ordered release fences. Every handler runs on
 * the service thread with `mu` held. */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sync.h"
#include "engine/consumer_internal.h"

/* How long closing waits for stream-ordered releases whose work has not finished. */
#define CLOSE_FENCE_WAIT_MS 5000

static void
send_msg(tsock_consumer *c, int type)
{
    struct tsock__msg m;
    m.type = (uint16_t)type;
    if (type == TSOCK__MSG_HELLO) {
        memset(&m.u.hello, 0, sizeof m.u.hello);
        m.u.hello.pid = (uint32_t)getpid();
        m.u.hello.flags = c->checkpointing ? TSOCK__HELLO_WANT_IDS : 0;
        if (tsock__leave_wants_ids(c))
            m.u.hello.flags |= TSOCK__HELLO_IDS_IF_ABLE; /* to leave an epoch early */
        memcpy(m.u.hello.name, c->name, sizeof m.u.hello.name);
        tsock__group_fill_hello(c, &m.u.hello);
    }
    if (type == TSOCK__MSG_PAUSE || type == TSOCK__MSG_RESUME) /* what a finite stream owes */
        m.u.pause.epochs = tsock__leave_epochs_done(c);
    int err = tsock__channel_send(c->channel, 0, &m);
    if (err < 0 && err != -EAGAIN)
        tsock__log(TSOCK_LOG_WARN, "sending %s failed: %s", tsock__msg_type_name(type),
                   tsock_strerror(err));
}

/* Sets the error every later call reports, once; wakes the caller. */
static void
fail(tsock_consumer *c, int code)
{
    if (!c->terminal_error)
        c->terminal_error = code;
    if (!c->welcomed && !c->start_error)
        c->start_error = code;
    pthread_cond_broadcast(&c->cond);
}

/* Only the producer can send to this socket: anything impossible means it is broken. */
static void
protocol_error(tsock_consumer *c, const char *what)
{
    c->stat_bad++;
    tsock__log(TSOCK_LOG_ERROR, "protocol error from the producer: %s", what);
    fail(c, TSOCK_E_PROTOCOL);
}

/* The producer is gone: remove what its ring left behind if it died, since a process killed
 * with SIGKILL could not. */
static void
producer_lost(tsock_consumer *c)
{
    fail(c, TSOCK_E_PRODUCER_LOST);
    if (c->ops)
        c->ops->remove_orphan(c->welcome.attach, c->welcome.attach_len);
}

/* ---- handshake --------------------------------------------------------------------------- */

/* A replacement producer must publish the same tensors, or the caller's code would misread. */
static int
same_layout(const struct tsock__msg_welcome *a, const struct tsock__msg_welcome *b)
{
    if (a->tensor_count != b->tensor_count)
        return 0;
    for (uint32_t t = 0; t < a->tensor_count; t++) {
        const struct tsock__tensor_desc *x = &a->tensors[t], *y = &b->tensors[t];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim ||
            x->sample_bytes != y->sample_bytes ||
            memcmp(x->sample_shape, y->sample_shape, sizeof x->sample_shape))
            return 0;
    }
    return 1;
}

/* Keeps what the WELCOME says. The ring itself is attached by the caller's thread
 * (consumer_session.c): the first use of a GPU can take seconds, and this thread must go on
 * heartbeating meanwhile. BATCHes that come before the attach is done join the hold table: the
 * consumer's window has started. */
static int
keep_welcome(tsock_consumer *c, const struct tsock__msg_welcome *w)
{
    const struct tsock__backend *ops = tsock__backend_for_wire(w->device);
    if (!ops)
        return TSOCK_E_PROTOCOL;
    /* The WELCOME's blob is a view of the channel's buffer: keep a copy of it. */
    uint8_t *blob = malloc(w->attach_len ? w->attach_len : 1);
    if (!blob)
        return -ENOMEM;
    memcpy(blob, w->attach, w->attach_len);
    int err = tsock__hold_table_init(&c->holds, w->slot_count);
    if (err == 0)
        err = tsock__classes_keep(c, w);
    if (err < 0) {
        free(blob);
        return err;
    }
    free(c->attach);
    c->attach = blob;
    c->ops = ops;
    c->welcome = *w;
    c->welcome.attach = c->attach;
    c->welcome.classes = NULL; /* kept apart (consumer_classes.c) */
    c->welcome.classes_len = 0;
    c->ring_closed = 0;
    return 0;
}

static void
on_welcome(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    tsock_consumer *c = ctx;
    const struct tsock__msg_welcome *w = &m->u.welcome;
    if (c->welcomed)
        return; /* the answer to a repeated HELLO */
    int err = 0;
    if (c->generation > 1 && !same_layout(&c->welcome, w))
        err = TSOCK_E_LAYOUT;
    if (!err && (c->checkpointing || tsock__leave_wants_ids(c)))
        err = tsock__resume_on_welcome(c, w);
    if (!err)
        err = keep_welcome(c, w);
    if (err) {
        tsock__log(TSOCK_LOG_ERROR, "cannot join the producer: %s", tsock_strerror(err));
        fail(c, err);
        return;
    }
    c->welcomed = 1;
    tsock__channel_watch(c->channel, 0, NULL); /* heartbeats, and the producer's liveness */
    pthread_cond_broadcast(&c->cond);
}

/* ---- batches ----------------------------------------------------------------------------- */

static void
release_now(tsock_consumer *c, const struct tsock__msg_batch *b)
{
    struct tsock__msg m;
    m.type = TSOCK__MSG_RELEASE;
    m.u.release.slot = b->slot;
    m.u.release.seq = b->seq;
    (void)tsock__channel_send(c->channel, 0, &m);
}

static void
on_batch(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    tsock_consumer *c = ctx;
    const struct tsock__msg_batch *b = &m->u.batch;
    const struct tsock__msg_welcome *w = &c->welcome;
    if (!c->welcomed || b->samples > w->batch_size) {
        protocol_error(c, "BATCH larger than a slot, or before WELCOME");
        return;
    }
    /* Sent before the producer saw our PAUSE: not ours to read, unless the producer may have
     * decided the stream's end first (no PAUSED yet: kept until we know, consumer_leave.c). */
    if (c->phase != TSOCK__PHASE_ACTIVE && !c->pause_unacked) {
        release_now(c, b);
        return;
    }
    if (c->terminal_error == TSOCK_E_GROUP_LOST || c->terminal_error == TSOCK_E_GROUP_INCOMPLETE) {
        release_now(c, b); /* sent before the producer ended our group: nobody will read it */
        return;
    }
    if (c->ring_closed) {
        /* A late BATCH after this session's ring was closed (the producer was declared lost
         * and everything was given back): nothing can be read from it any more. A BATCH
         * while the caller is still attaching the ring is kept: the ring is not closed. */
        release_now(c, b);
        return;
    }
    /* The producer sends every batch to a consumer that is not paused; a gap would break the
     * consumer's epoch. */
    if (w->samples && c->expect_position != TSOCK__ANY_POSITION &&
        b->position != c->expect_position) {
        protocol_error(c, "BATCH out of stream order");
        return;
    }
    struct tsock__hold_batch hb = {
        .slot = b->slot,
        .samples = b->samples,
        .seq = b->seq,
        .position = b->position,
        .epoch = b->epoch,
        .index_in_epoch = b->index_in_epoch,
        .flags = b->flags,
    };
    /* Checked before it is announced: a batch with bad ids must never be read. */
    if (tsock__resume_check_batch(c, b) < 0) {
        protocol_error(c, "BATCH without its sample ids, or with ids outside the dataset");
        return;
    }
    if (tsock__hold_table_announce(&c->holds, &hb) < 0) {
        protocol_error(c, "BATCH for a slot out of range or still held");
        return;
    }
    tsock__resume_on_batch(c, b);
    c->expect_position = b->position + b->samples;
    if (tsock__group_member(c))
        tsock__consumer_group_pass_others(c);
    pthread_cond_signal(&c->cond);
}

static void
on_heartbeat(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    /* The channel noted that the producer is alive; nothing else to do. */
}

/* The producer refused our keys (or wanted keys we lack): final before the WELCOME, as a
 * REJECT is. Once welcomed, a failure can only concern a new producer on the endpoint, and
 * losing the old one is reported as such. */
static void
on_handshake_failed(void *ctx, int err)
{
    tsock_consumer *c = ctx;
    if (!c->welcomed)
        fail(c, err);
}

static void
on_reject(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    tsock_consumer *c = ctx;
    if (c->welcomed) {
        /* The peer does not know us although we were welcomed: the producer we joined is
         * gone and ZeroMQ reconnected us to one that replaced it on the endpoint (or it
         * dropped us as dead). Either way that producer is lost to us. */
        tsock__log(TSOCK_LOG_ERROR, "the producer no longer knows this consumer");
        producer_lost(c);
        return;
    }
    if (m->u.reject.text[0])
        tsock__log(TSOCK_LOG_ERROR, "the producer refused this consumer: %s", m->u.reject.text);
    fail(c, m->u.reject.code);
}

/* This rank's group is over (a rank was lost, or ranks never joined): nothing queued can make
 * a group epoch any more. The batches the caller holds stay valid until released. */
static void
on_group_failed(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    tsock_consumer *c = ctx;
    if (!c->welcomed || !tsock__group_member(c)) {
        protocol_error(c, "GROUP_FAILED to a consumer that is not a rank of a group");
        return;
    }
    fail(c, tsock__group_on_failed(c, &m->u.group_failed));
    tsock__consumer_drop_queue(c);
}

static void
on_paused(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    tsock__leave_on_paused(ctx);
}

static void
on_resumed(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    tsock_consumer *c = ctx;
    if (c->phase == TSOCK__PHASE_RESUMING) {
        c->phase = TSOCK__PHASE_ACTIVE;
        c->resume_sent = 0;
        c->expect_position = TSOCK__ANY_POSITION; /* a new window starts at the next batch */
        tsock__leave_on_resumed(c);
    }
}

static void
on_shutdown(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    tsock_consumer *c = ctx;
    if (m->u.shutdown.reason == TSOCK__SHUTDOWN_END) {
        c->stream_epochs = m->u.shutdown.epochs;
        tsock__log(TSOCK_LOG_INFO,
                   "the producer's stream ended after %llu epochs: it serves the epochs it was "
                   "started with (tsock-producer --epochs N; 0, the default, serves until "
                   "stopped)",
                   (unsigned long long)m->u.shutdown.epochs);
        /* A producer waits for a paused consumer it still owes epochs (PAUSE says how many it
         * finished) unless the pause reached it after it had decided the end: said, never
         * silent. */
        if (c->left_mid_epoch && c->phase == TSOCK__PHASE_PAUSED)
            tsock__log(TSOCK_LOG_WARN,
                       "the stream ended while this consumer was paused in the middle of epoch "
                       "%llu: that epoch ends short (%llu of %llu samples)",
                       (unsigned long long)c->plan.epoch, (unsigned long long)c->plan.done,
                       (unsigned long long)c->plan.n);
        tsock__leave_on_end(c);
        fail(c, TSOCK_E_END); /* the batches queued are the stream's last: still read them */
        return;
    }
    /* The producer is stopping and frees its ring once we say BYE: what is queued is not
     * read any more, so that BYE can come as soon as the caller's views are released. */
    fail(c, TSOCK_E_PRODUCER_STOPPED);
    tsock__consumer_drop_queue(c);
}

static void
on_unexpected(void *ctx, const struct tsock__peer_id *from, int peer, const struct tsock__msg *m)
{
    protocol_error(ctx, tsock__msg_type_name(m->type));
}

static void
on_malformed(void *ctx, const struct tsock__peer_id *from, int peer, size_t size, int parts,
             int err)
{
    tsock_consumer *c = ctx;
    c->stat_bad++;
    tsock__log(TSOCK_LOG_ERROR, "malformed message from the producer: %s", tsock_strerror(err));
    fail(c, err);
}

/* ---- liveness ---------------------------------------------------------------------------- */

static void
on_peer_lost(void *ctx, int peer)
{
    tsock_consumer *c = ctx;
    if (c->terminal_error)
        return;
    tsock__log(TSOCK_LOG_ERROR, "no word from the producer for %d ms", c->hb_timeout_ms);
    producer_lost(c);
}

/* Tells the producer what only this side knows, for its statistics. Sent beside HEARTBEAT
 * rather than instead of it: a producer that does not know the message counts it as bad and
 * still keeps the consumer alive. */
static void
send_own_stats(tsock_consumer *c, uint64_t now)
{
    struct tsock__msg m;
    m.type = TSOCK__MSG_CONSUMER_STATS;
    m.u.consumer_stats = (struct tsock__msg_consumer_stats){
        .batches = c->stat_batches,
        .samples = c->stat_samples,
        .epochs = c->stat_epochs,
        .wait_ns = tsock__consumer_wait_ns(c, now),
    };
    (void)tsock__channel_send(c->channel, 0, &m);
}

/* After the heartbeat: the figures, or, until welcomed, a repeated HELLO so that a producer
 * that starts late or lost the first one still hears from us. */
static void
on_beat(void *ctx, uint64_t now)
{
    tsock_consumer *c = ctx;
    if (c->welcomed)
        send_own_stats(c, now);
    else if (!c->start_error)
        send_msg(c, TSOCK__MSG_HELLO);
}

void
tsock__consumer_handlers(tsock_consumer *c, struct tsock__channel_handlers *h)
{
    memset(h, 0, sizeof *h);
    h->ctx = c;
    h->on[TSOCK__MSG_WELCOME] = on_welcome;
    h->on[TSOCK__MSG_BATCH] = on_batch;
    h->on[TSOCK__MSG_HEARTBEAT] = on_heartbeat;
    h->on[TSOCK__MSG_REJECT] = on_reject;
    h->on[TSOCK__MSG_RESUMED] = on_resumed;
    h->on[TSOCK__MSG_SHUTDOWN] = on_shutdown;
    h->on[TSOCK__MSG_GROUP_FAILED] = on_group_failed;
    h->on[TSOCK__MSG_PAUSED] = on_paused;
    h->on_unexpected = on_unexpected;
    h->on_malformed = on_malformed;
    h->on_beat = on_beat;
    h->on_peer_lost = on_peer_lost;
    h->on_handshake_failed = on_handshake_failed;
}

/* ---- between epochs ---------------------------------------------------------------------- */

/* The caller finished an epoch and has not asked for the next one within the grace period:
 * give back everything queued and stop receiving, so nobody waits for us. */
static void
pause_if_lingering(tsock_consumer *c, uint64_t now)
{
    /* A group does not pause: one rank restarting its window alone would break the group's
     * shared epoch (producer_groups.c). */
    if (c->pause_unsent) { /* the caller paused (consumer_leave.c) */
        c->pause_unsent = 0;
        send_msg(c, TSOCK__MSG_PAUSE);
        return;
    }
    if (c->phase != TSOCK__PHASE_ACTIVE || c->terminal_error || tsock__group_member(c))
        return;
    if (!c->between_epochs && !tsock__leave_unread_due(c, now)) {
        if (tsock__leave_due(c, now)) { /* stopped reading mid-epoch (consumer_leave.c) */
            tsock__leave_paused(c);
            tsock__leave_pausing(c);
            send_msg(c, TSOCK__MSG_PAUSE);
        }
        return;
    }
    if (c->between_epochs && now - c->epoch_ended_ns < (uint64_t)c->grace_ms * 1000000u)
        return;
    tsock__leave_pausing(c);
    send_msg(c, TSOCK__MSG_PAUSE);
}

static void
send_resume_if_asked(tsock_consumer *c)
{
    if (c->phase == TSOCK__PHASE_RESUMING && !c->resume_sent) {
        send_msg(c, TSOCK__MSG_RESUME);
        c->resume_sent = 1;
    }
}

/* Gather copies left queued by a gather that gave up waiting: done once they completed (or
 * their query failed: nothing more can be known, logged). */
static void
poll_gather(tsock_consumer *c)
{
    if (c->gather_pending && !c->gathering && c->ring && c->ring->ops->copies_done &&
        c->ring->ops->copies_done(c->ring) != 0)
        c->gather_pending = 0;
}

static void
send_releases(tsock_consumer *c)
{
    struct tsock__hold_release owed[64];
    uint32_t n;
    struct tsock__msg m;
    m.type = TSOCK__MSG_RELEASE;
    /* A slot being gathered from is released only once its copies have completed. */
    if (c->gathering || c->gather_pending)
        return;
    while ((n = tsock__hold_table_take_releases(&c->holds, owed, 64)) > 0) {
        for (uint32_t i = 0; i < n; i++) {
            m.u.release.slot = owed[i].slot;
            m.u.release.seq = owed[i].seq;
            (void)tsock__channel_send(c->channel, 0, &m);
        }
    }
}

/* ---- the service thread ------------------------------------------------------------------ */

/* The producer frees or refills every slot of ours once it hears BYE, so BYE goes out once:
 * after the last use of the ring, and never to a producer that was lost. */
static void
say_bye(tsock_consumer *c)
{
    if (!c->welcomed || c->bye_sent || c->terminal_error == TSOCK_E_PRODUCER_LOST)
        return;
    send_msg(c, TSOCK__MSG_BYE);
    c->bye_sent = 1;
    /* Nothing more to hear from this producer: no heartbeats, no liveness verdict. */
    tsock__channel_unwatch(c->channel, 0);
}

/* Closing: releases still waiting for their fences hold work queued on the caller's streams
 * that may read the ring. Wait for them, within a bound, before saying BYE (after which the
 * producer refills those slots) and before the ring is unmapped; keep the channel serviced
 * meanwhile so that heartbeats go on. */
static int
work_pending(tsock_consumer *c)
{
    poll_gather(c);
    return (c->deferred_count > 0 && tsock__consumer_poll_fences(c) > 0) || c->gather_pending;
}

/* The devices of the pending fences and the gather's copies, waited for on a thread of its
 * own, so that the service thread keeps heartbeating meanwhile (a producer that lost us would
 * reclaim the slots the work still reads). */
#define MAX_FENCE_DEVICES 16
struct device_wait {
    struct {
        const struct tsock__backend *ops;
        int device;
    } sync[MAX_FENCE_DEVICES];
    int n;
    struct tsock__ring_view *ring; /* a gather's copies to finish, or NULL */
    atomic_int done;
};

static void *
wait_devices(void *arg)
{
    struct device_wait *w = arg;
    for (int i = 0; i < w->n; i++)
        (void)w->sync[i].ops->device_sync(w->sync[i].device);
    if (w->ring)
        (void)w->ring->ops->copy_finish(w->ring);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Past the bound the work is waited for all the same (issue 20: BYE, then the unmapping, under
 * queued reads would let the producer refill the slots they read): the bound only decides the
 * warning. mu held; released while waiting. */
static void
finish_pending_work(tsock_consumer *c)
{
    struct device_wait w = {.n = 0};
    for (const tsock_batch *b = c->deferred; b && w.n < MAX_FENCE_DEVICES; b = b->next_deferred) {
        int known = 0;
        for (int i = 0; i < w.n; i++)
            known |= w.sync[i].ops == b->fence_ops && w.sync[i].device == b->fence_device;
        if (!known)
            w.sync[w.n].ops = b->fence_ops, w.sync[w.n++].device = b->fence_device;
    }
    w.ring = c->gather_pending ? c->ring : NULL;
    atomic_init(&w.done, 0);
    pthread_t t;
    int threaded = pthread_create(&t, NULL, wait_devices, &w) == 0;
    pthread_mutex_unlock(&c->mu);
    if (!threaded)
        (void)wait_devices(&w);
    while (!atomic_load(&w.done)) {
        tsock__channel_wait(c->channel, 1);
        pthread_mutex_lock(&c->mu);
        tsock__channel_dispatch(c->channel);
        pthread_mutex_unlock(&c->mu);
    }
    if (threaded)
        pthread_join(t, NULL);
    pthread_mutex_lock(&c->mu);
    c->gather_pending = 0;
    /* The devices are idle: a fence that still does not pass had its query fail (logged). */
    if (c->deferred_count > 0 && tsock__consumer_poll_fences(c) > 0)
        tsock__log(TSOCK_LOG_WARN,
                   "closing with %d stream-ordered release(s) whose fence cannot be queried "
                   "(see above)",
                   c->deferred_count);
}

static void
drain_fences(tsock_consumer *c)
{
    uint64_t deadline = tsock__deadline(CLOSE_FENCE_WAIT_MS);
    while (work_pending(c)) {
        if (tsock__now_ns() >= deadline) {
            tsock__log(TSOCK_LOG_WARN,
                       "closing with %d stream-ordered release(s)%s whose work has not finished "
                       "after %d ms: waiting for the device",
                       c->deferred_count, c->gather_pending ? " and a gather's copies" : "",
                       CLOSE_FENCE_WAIT_MS);
            finish_pending_work(c);
            break;
        }
        pthread_mutex_unlock(&c->mu);
        tsock__channel_wait(c->channel, 1);
        pthread_mutex_lock(&c->mu);
        tsock__channel_dispatch(c->channel);
    }
    send_releases(c);
}

/* Milliseconds until the service thread must look again, heartbeats aside (-1: no limit). */
static int
poll_timeout(const tsock_consumer *c, uint64_t now)
{
    /* Stream-ordered releases wait for their fences, a gather's copies left queued to
     * complete: look again within a millisecond. */
    if (c->deferred_count > 0 || c->gather_pending)
        return 1;
    if (!c->between_epochs || c->phase != TSOCK__PHASE_ACTIVE)
        return tsock__leave_wait_ms(c, now);
    uint64_t grace_end = c->epoch_ended_ns + (uint64_t)c->grace_ms * 1000000u;
    return grace_end <= now ? 0 : (int)((grace_end - now) / 1000000u) + 1;
}

static void *
service_main(void *arg)
{
    tsock_consumer *c = arg;
    pthread_mutex_lock(&c->mu);
    while (!c->stop_thread) {
        int wait_ms = poll_timeout(c, tsock__now_ns());
        pthread_mutex_unlock(&c->mu);
        tsock__channel_wait(c->channel, wait_ms);
        pthread_mutex_lock(&c->mu);
        tsock__channel_dispatch(c->channel);
        pause_if_lingering(c, tsock__now_ns());
        send_resume_if_asked(c);
        if (c->deferred_count > 0)
            tsock__consumer_poll_fences(c);
        poll_gather(c);
        send_releases(c);
        if (tsock__consumer_close_ring_if_unused(c))
            say_bye(c); /* the stream ended or stopped, and nothing of ours reads the ring */
        /* tsock_consumer_cancel woke us through the channel: pass it on to the caller. */
        if (tsock__consumer_cancelled(c))
            pthread_cond_broadcast(&c->cond);
    }
    drain_fences(c);
    say_bye(c);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int
tsock__consumer_service_start(tsock_consumer *c)
{
    /* The thread takes no signals: they belong to the application's threads, whose handler
     * may cancel this consumer (tsock_consumer_cancel) while it waits. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int err = pthread_create(&c->thread, NULL, service_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err)
        return -err;
    c->thread_started = 1;
    return 0;
}

void
tsock__consumer_service_stop(tsock_consumer *c)
{
    if (!c->thread_started)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop_thread = 1;
    pthread_mutex_unlock(&c->mu);
    tsock__channel_wake(c->channel);
    pthread_join(c->thread, NULL);
    c->thread_started = 0;
}
