/* The consumer's session with its producer: the DEALER socket and the service thread that owns
 * it, the handshake, heartbeats and liveness, pausing between epochs, and reconnecting to a
 * producer that replaced a dead one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "consumer_internal.h"
#include "core/sync.h"

#define ANY_POSITION UINT64_MAX

static void
send_msg(tsock_consumer *c, int type)
{
    struct tsock_msg m = {.type = (uint16_t)type};
    if (type == TSOCK_MSG_HELLO) {
        m.u.hello.pid = (uint32_t)getpid();
        memcpy(m.u.hello.name, c->name, sizeof m.u.hello.name);
    }
    int err = tsock__send(c->dealer, NULL, 0, &m);
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

/* ---- handshake --------------------------------------------------------------------------- */

static int
allocate_queues(tsock_consumer *c, uint32_t slots)
{
    c->holds = calloc(slots, sizeof *c->holds);
    c->ready = calloc(slots, sizeof *c->ready);
    c->releases = calloc(slots, sizeof *c->releases);
    return c->holds && c->ready && c->releases ? 0 : -ENOMEM;
}

/* A replacement producer must publish the same tensors, or the caller's code would misread. */
static int
same_layout(const struct tsock_msg_welcome *a, const struct tsock_msg_welcome *b)
{
    if (a->tensor_count != b->tensor_count)
        return 0;
    for (uint32_t t = 0; t < a->tensor_count; t++) {
        const struct tsock_tensor_desc *x = &a->tensors[t], *y = &b->tensors[t];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim ||
            x->sample_bytes != y->sample_bytes ||
            memcmp(x->sample_shape, y->sample_shape, sizeof x->sample_shape))
            return 0;
    }
    return 1;
}

static void
on_welcome(tsock_consumer *c, const struct tsock_msg_welcome *w)
{
    if (c->welcomed)
        return; /* the answer to a repeated HELLO */
    int err = 0;
    if (c->generation > 1 && !same_layout(&c->welcome, w))
        err = TSOCK_E_LAYOUT;
    if (!err && w->device == TSOCK_DEVICE_CUDA) {
        err = tsock__device_open_ring(c, w);
    } else if (!err) {
        err = tsock__shm_attach(&c->region, w->shm_name, w->ring_bytes);
        c->ring_base = c->region.base;
    }
    if (!err)
        err = allocate_queues(c, w->slot_count);
    if (err) {
        tsock__log(TSOCK_LOG_ERROR, "cannot use the producer's ring %s: %s",
                   w->device == TSOCK_DEVICE_CUDA ? "(GPU)" : w->shm_name, tsock_strerror(err));
        fail(c, err);
        return;
    }
    c->welcome = *w;
    c->welcomed = 1;
    pthread_cond_broadcast(&c->cond);
}

/* ---- batches ----------------------------------------------------------------------------- */

static void
release_now(tsock_consumer *c, const struct tsock_msg_batch *b)
{
    struct tsock_msg m = {.type = TSOCK_MSG_RELEASE, .u.release = {b->slot, b->seq}};
    (void)tsock__send(c->dealer, NULL, 0, &m);
}

static void
on_batch(tsock_consumer *c, const struct tsock_msg_batch *b)
{
    const struct tsock_msg_welcome *w = &c->welcome;
    if (!c->welcomed || b->slot >= w->slot_count || b->samples > w->batch_size ||
        c->holds[b->slot].refs > 0) {
        protocol_error(c, "BATCH for a slot out of range or still held");
        return;
    }
    if (c->phase != PHASE_ACTIVE) {
        release_now(c, b); /* sent before the producer saw our PAUSE: not ours to read */
        return;
    }
    if (!c->ring_base) {
        /* A late BATCH after this session's GPU ring was closed (the producer was declared
         * lost and everything was given back): nothing can be read from it any more. */
        release_now(c, b);
        return;
    }
    /* The producer sends every batch to a consumer that is not paused; a gap would break the
     * consumer's epoch. */
    if (w->samples && c->expect_position != ANY_POSITION && b->position != c->expect_position) {
        protocol_error(c, "BATCH out of stream order");
        return;
    }
    c->expect_position = b->position + b->samples;
    c->holds[b->slot] = (struct slot_hold){.refs = 1, .msg = *b};
    c->ready[(c->ready_head + c->ready_len++) % w->slot_count] = b->slot;
    pthread_cond_signal(&c->cond);
}

static void
on_message(tsock_consumer *c, const struct tsock_msg *m)
{
    switch (m->type) {
    case TSOCK_MSG_WELCOME: on_welcome(c, &m->u.welcome); return;
    case TSOCK_MSG_BATCH: on_batch(c, &m->u.batch); return;
    case TSOCK_MSG_HEARTBEAT: return;
    case TSOCK_MSG_REJECT:
        if (c->welcomed) {
            /* The peer does not know us although we were welcomed: the producer we joined is
             * gone and ZeroMQ reconnected us to one that replaced it on the endpoint (or it
             * dropped us as dead). Either way that producer is lost to us. */
            tsock__log(TSOCK_LOG_ERROR, "the producer no longer knows this consumer");
            fail(c, TSOCK_E_PRODUCER_LOST);
            tsock__shm_remove_if_orphaned(c->welcome.shm_name);
            return;
        }
        fail(c, m->u.reject.code);
        return;
    case TSOCK_MSG_RESUMED:
        if (c->phase == PHASE_RESUMING) {
            c->phase = PHASE_ACTIVE;
            c->resume_sent = 0;
            c->expect_position = ANY_POSITION; /* a new window starts at the next batch */
        }
        return;
    case TSOCK_MSG_SHUTDOWN:
        fail(c,
             m->u.shutdown.reason == TSOCK_SHUTDOWN_END ? TSOCK_E_END : TSOCK_E_PRODUCER_STOPPED);
        return;
    default: protocol_error(c, tsock__msg_type_name(m->type)); return;
    }
}

static void
receive_all(tsock_consumer *c)
{
    struct tsock_msg m;
    while (tsock__recv(c->dealer, 0, &c->frame) > 0) {
        int err = (c->frame.parts != 1 || c->frame.oversized)
                      ? TSOCK_E_PROTOCOL
                      : tsock__msg_decode(c->frame.data, c->frame.size, &m);
        if (err < 0) {
            c->stat_bad++;
            tsock__log(TSOCK_LOG_ERROR, "malformed message from the producer: %s",
                       tsock_strerror(err));
            fail(c, err);
            continue;
        }
        c->last_heard_ns = tsock__now_ns();
        on_message(c, &m);
    }
}

static void
send_releases(tsock_consumer *c)
{
    for (uint32_t i = 0; i < c->release_len; i++) {
        struct tsock_msg m = {.type = TSOCK_MSG_RELEASE};
        m.u.release.slot = c->releases[i].slot;
        m.u.release.seq = c->releases[i].seq;
        (void)tsock__send(c->dealer, NULL, 0, &m);
    }
    c->release_len = 0;
}

/* ---- between epochs ---------------------------------------------------------------------- */

/* The caller finished an epoch and has not asked for the next one within the grace period:
 * give back everything queued and stop receiving, so nobody waits for us. */
static void
pause_if_lingering(tsock_consumer *c, uint64_t now)
{
    if (!c->between_epochs || c->phase != PHASE_ACTIVE || c->terminal_error ||
        now - c->epoch_ended_ns < (uint64_t)c->grace_ms * 1000000u)
        return;
    tsock__drop_queue(c);
    c->plan.skip = 0; /* the next epoch starts fresh wherever the stream is */
    c->phase = PHASE_PAUSED;
    send_msg(c, TSOCK_MSG_PAUSE);
}

static void
send_resume_if_asked(tsock_consumer *c)
{
    if (c->phase == PHASE_RESUMING && !c->resume_sent) {
        send_msg(c, TSOCK_MSG_RESUME);
        c->resume_sent = 1;
    }
}

/* ---- liveness and the service loop ------------------------------------------------------- */

/* The producer is silent: declare it lost and remove its ring's name if it died, since a
 * process killed with SIGKILL could not. */
static void
check_producer(tsock_consumer *c, uint64_t now)
{
    if (c->terminal_error || now - c->last_heard_ns <= (uint64_t)c->hb_timeout_ms * 1000000u)
        return;
    tsock__log(TSOCK_LOG_ERROR, "no word from the producer for %d ms", c->hb_timeout_ms);
    fail(c, TSOCK_E_PRODUCER_LOST);
    tsock__shm_remove_if_orphaned(c->welcome.shm_name);
}

/* Tells the producer what only this side knows, for its statistics. Sent beside HEARTBEAT
 * rather than instead of it: a producer that does not know the message counts it as bad and
 * still keeps the consumer alive. */
static void
send_own_stats(tsock_consumer *c, uint64_t now)
{
    struct tsock_msg m = {.type = TSOCK_MSG_CONSUMER_STATS};
    m.u.consumer_stats = (struct tsock_msg_consumer_stats){
        .batches = c->stat_batches,
        .samples = c->stat_samples,
        .epochs = c->stat_epochs,
        .wait_ns = tsock__consumer_wait_ns(c, now),
    };
    (void)tsock__send(c->dealer, NULL, 0, &m);
}

/* Sends the heartbeat and the figures (or, until welcomed, a repeated HELLO so that a producer
 * that starts late or lost the first one still hears from us). */
static void
beat(tsock_consumer *c, uint64_t now)
{
    if (c->welcomed) {
        send_msg(c, TSOCK_MSG_HEARTBEAT);
        send_own_stats(c, now);
        check_producer(c, now);
    } else if (!c->start_error) {
        send_msg(c, TSOCK_MSG_HELLO);
    }
}

/* Milliseconds until the service thread must look again. */
static int
poll_timeout(const tsock_consumer *c, uint64_t now, uint64_t next_beat)
{
    /* Stream-ordered releases wait for their fences: look again within a millisecond. */
    if (c->deferred_count > 0)
        return 1;
    uint64_t until = next_beat;
    if (c->between_epochs && c->phase == PHASE_ACTIVE) {
        uint64_t grace_end = c->epoch_ended_ns + (uint64_t)c->grace_ms * 1000000u;
        until = grace_end < until ? grace_end : until;
    }
    return until <= now ? 0 : (int)((until - now) / 1000000u) + 1;
}

static void *
service_main(void *arg)
{
    tsock_consumer *c = arg;
    uint64_t interval_ns = (uint64_t)c->hb_interval_ms * 1000000u;
    uint64_t next_beat = 0;
    pthread_mutex_lock(&c->mu);
    c->last_heard_ns = tsock__now_ns();
    while (!c->stop_thread) {
        uint64_t now = tsock__now_ns();
        if (now >= next_beat) {
            beat(c, now);
            next_beat = now + interval_ns;
        }
        int wait_ms = poll_timeout(c, now, next_beat);
        pthread_mutex_unlock(&c->mu);
        zmq_pollitem_t items[2] = {{c->dealer, 0, ZMQ_POLLIN, 0},
                                   {NULL, c->wake_fd, ZMQ_POLLIN, 0}};
        zmq_poll(items, 2, wait_ms);
        if (items[1].revents)
            tsock__wake_drain(c->wake_fd);
        pthread_mutex_lock(&c->mu);
        receive_all(c);
        pause_if_lingering(c, tsock__now_ns());
        send_resume_if_asked(c);
        if (c->deferred_count > 0)
            tsock__device_poll_releases(c);
        send_releases(c);
        tsock__device_close_if_unused(c);
    }
    if (c->welcomed && c->terminal_error != TSOCK_E_PRODUCER_LOST)
        send_msg(c, TSOCK_MSG_BYE);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- opening, closing, reconnecting ------------------------------------------------------ */

static int
wait_for_welcome(tsock_consumer *c, int timeout_ms)
{
    uint64_t deadline = tsock__deadline(timeout_ms);
    pthread_mutex_lock(&c->mu);
    int err = 0;
    while (!c->welcomed && !c->start_error && err == 0)
        err = tsock__cond_wait_until(&c->cond, &c->mu, deadline);
    if (c->welcomed)
        err = 0;
    else if (c->start_error)
        err = c->start_error;
    else
        c->start_error = err; /* timed out: the service thread stops saying HELLO */
    pthread_mutex_unlock(&c->mu);
    return err;
}

int
tsock__session_open(tsock_consumer *c, int timeout_ms)
{
    c->generation++;
    c->phase = PHASE_ACTIVE;
    c->expect_position = ANY_POSITION;
    if (c->wake_fd < 0)
        c->wake_fd = tsock__wake_open();
    if (c->wake_fd < 0)
        return c->wake_fd;
    c->zctx = zmq_ctx_new();
    if (!c->zctx)
        return -ENOMEM;
    int err = 0;
    c->dealer = tsock__dealer_open(c->zctx, c->endpoint, &err);
    if (!c->dealer)
        return err;
    err = pthread_create(&c->thread, NULL, service_main, c);
    if (err)
        return -err;
    c->thread_started = 1;
    err = wait_for_welcome(c, timeout_ms);
    if (err == 0)
        tsock__log(TSOCK_LOG_INFO, "consumer %llu connected to %s",
                   (unsigned long long)c->welcome.consumer_id, c->endpoint);
    return err;
}

void
tsock__session_close(tsock_consumer *c)
{
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stop_thread = 1;
        pthread_mutex_unlock(&c->mu);
        tsock__wake_signal(c->wake_fd);
        pthread_join(c->thread, NULL);
        c->thread_started = 0;
    }
    /* The producer reclaims every slot on BYE; let that message get out. */
    tsock__socket_close(c->dealer, 100);
    c->dealer = NULL;
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    c->zctx = NULL;
}

/* Keeps the old ring mapped while the caller may still read views into it. */
static void
retire_region(tsock_consumer *c)
{
    if (!c->region.base)
        return;
    if (c->held_count == 0 || c->old_region_count == TSOCK_MAX_OLD_MAPPINGS)
        tsock__shm_release(&c->region);
    else
        c->old_regions[c->old_region_count++] = c->region;
    memset(&c->region, 0, sizeof c->region);
}

int
tsock__session_reopen(tsock_consumer *c, int timeout_ms)
{
    tsock__session_close(c);
    pthread_mutex_lock(&c->mu);
    c->ready_len = 0; /* the old producer is gone: nothing queued is worth a release */
    c->head_offset = 0;
    c->release_len = 0;
    free(c->holds);
    free(c->ready);
    free(c->releases);
    c->holds = NULL;
    c->ready = NULL;
    c->releases = NULL;
    retire_region(c);
    tsock__device_retire_ring(c);
    c->stop_thread = 0;
    c->welcomed = 0;
    c->start_error = 0;
    c->terminal_error = 0;
    c->between_epochs = 0;
    c->resume_sent = 0;
    pthread_mutex_unlock(&c->mu);
    tsock__log(TSOCK_LOG_INFO, "waiting up to %d ms for a producer on %s", timeout_ms, c->endpoint);
    int err = tsock__session_open(c, timeout_ms);
    if (err < 0) {
        pthread_mutex_lock(&c->mu);
        c->terminal_error = err;
        pthread_mutex_unlock(&c->mu);
    }
    return err;
}

void
tsock__session_free_mappings(tsock_consumer *c)
{
    tsock__shm_release(&c->region);
    for (int i = 0; i < c->old_region_count; i++)
        tsock__shm_release(&c->old_regions[i]);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    free(c->holds);
    free(c->ready);
    free(c->releases);
}
