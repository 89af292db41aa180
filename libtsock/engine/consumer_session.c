/* The consumer's session with its producer: connecting the channel, starting the service
 * thread and waiting for the WELCOME; closing; and reopening a session with a producer that
 * replaced a lost one on the same endpoint. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/sync.h"
#include "engine/consumer_internal.h"

/* Lets the BYE get out when a session closes: the producer reclaims every slot on it. */
#define CLOSE_LINGER_MS 100

static int
wait_for_welcome(tsock_consumer *c, int timeout_ms)
{
    uint64_t deadline = tsock__deadline(timeout_ms);
    pthread_mutex_lock(&c->mu);
    int err = 0;
    while (!c->welcomed && !c->start_error && err == 0 && !tsock__consumer_cancelled(c))
        err = tsock__cond_wait_until(&c->cond, &c->mu, deadline);
    if (!c->welcomed && !c->start_error && err == 0)
        err = TSOCK_E_CANCELLED; /* and, below, the service thread stops saying HELLO */
    if (c->welcomed)
        err = 0;
    else if (c->start_error)
        err = c->start_error;
    else
        c->start_error = err; /* timed out: the service thread stops saying HELLO */
    pthread_mutex_unlock(&c->mu);
    return err;
}

/* The channel: connected once per consumer, reconnected for each later session. */
static int
connect_channel(tsock_consumer *c)
{
    if (c->channel)
        return tsock__channel_reconnect(c->channel, CLOSE_LINGER_MS);
    struct tsock__channel_handlers h;
    tsock__consumer_handlers(c, &h);
    struct tsock__channel_timing t = {c->hb_interval_ms, c->hb_timeout_ms};
    int err = tsock__channel_connect(&c->channel, c->endpoint, &h, t, &c->security);
    if (err == 0)
        atomic_store(&c->cancel_channel, c->channel); /* tsock_consumer_cancel may wake it */
    return err;
}

/* Attaches the ring the WELCOME describes, on the caller's thread and without mu: the first
 * use of a GPU (a CUDA context, IPC handles) can take seconds, during which the service
 * thread must keep heartbeating and queueing the BATCHes that arrive. */
static int
attach_ring(tsock_consumer *c)
{
    /* The WELCOME stays as it is once welcomed: read without mu. */
    const struct tsock__msg_welcome *w = &c->welcome;
    struct tsock__attach_request req = {
        .blob = w->attach,
        .blob_len = w->attach_len,
        .ring_bytes = w->ring_bytes,
        .slots = w->slot_count,
        .device = c->device,
    };
    struct tsock__ring_view *ring = NULL;
    int err = c->ops->attach(&ring, &req);
    pthread_mutex_lock(&c->mu);
    if (err < 0) {
        tsock__log(TSOCK_LOG_ERROR, "cannot use the producer's ring: %s", tsock_strerror(err));
        if (!c->terminal_error)
            c->terminal_error = err;
    } else {
        c->ring = ring;
        c->ring_base = ring->ops->view_base(ring);
    }
    pthread_mutex_unlock(&c->mu);
    return err;
}

int
tsock__session_open(tsock_consumer *c, int timeout_ms)
{
    c->generation++;
    c->phase = TSOCK__PHASE_ACTIVE;
    c->pause_unacked = 0; /* a PAUSE to an earlier producer is answered by nobody */
    c->expect_position = TSOCK__ANY_POSITION;
    int err = connect_channel(c);
    if (err == 0)
        err = tsock__consumer_service_start(c);
    if (err == 0)
        err = wait_for_welcome(c, timeout_ms);
    if (err == 0)
        err = attach_ring(c);
    if (err == 0)
        tsock__log(TSOCK_LOG_INFO, "consumer %llu connected to %s",
                   (unsigned long long)c->welcome.consumer_id, c->endpoint);
    return err;
}

void
tsock__session_close(tsock_consumer *c)
{
    tsock__consumer_service_stop(c);
}

void
tsock__session_abandon(tsock_consumer *c)
{
    tsock__consumer_service_stop(c); /* a BYE goes out if the producer had welcomed us */
    if (!c->channel)
        return;
    /* A HELLO still queued for an endpoint nobody serves yet would reach a producer that comes
     * up later, and the dead handle would join it and pin slots: drop the socket at once (or
     * after the BYE has left) for a fresh one that says nothing. The channel itself stays, as
     * tsock_consumer_cancel may still wake it. */
    (void)tsock__channel_reconnect(c->channel, c->bye_sent ? CLOSE_LINGER_MS : 0);
}

int
tsock__session_reopen(tsock_consumer *c, int timeout_ms)
{
    tsock__session_close(c);
    pthread_mutex_lock(&c->mu);
    int err = tsock__consumer_retire_ring(c);
    if (err < 0) {
        /* Refused, and retryable: the session stays ended, so the next call tries again
         * once the caller has released batches of earlier sessions. */
        pthread_mutex_unlock(&c->mu);
        return err;
    }
    /* The old producer is gone: nothing queued or held is worth a release. */
    tsock__hold_table_free(&c->holds);
    c->stop_thread = 0;
    c->bye_sent = 0;
    c->welcomed = 0;
    c->start_error = 0;
    c->terminal_error = 0;
    c->between_epochs = 0;
    c->resume_sent = 0;
    pthread_mutex_unlock(&c->mu);
    tsock__log(TSOCK_LOG_INFO, "waiting up to %d ms for a producer on %s", timeout_ms, c->endpoint);
    err = tsock__session_open(c, timeout_ms);
    if (err < 0) {
        pthread_mutex_lock(&c->mu);
        /* A cancelled wait for the new producer is no verdict on it: the next call that meets
         * this "lost" waits for one again. */
        c->terminal_error = err == TSOCK_E_CANCELLED ? TSOCK_E_PRODUCER_LOST : err;
        pthread_mutex_unlock(&c->mu);
    }
    return err;
}

/* A batch's own buffers and fence, wherever they are. */
static void
free_batch_memory(tsock_batch *b)
{
    tsock__consumer_free_gathers(b);
    if (b->fence_ops)
        b->fence_ops->fence_destroy(b->fence);
    b->fence = NULL;
}

void
tsock__session_free(tsock_consumer *c)
{
    tsock__channel_close(c->channel, CLOSE_LINGER_MS);
    c->channel = NULL;
    for (tsock_batch *b = c->all_batches, *next; b; b = next) {
        next = b->next_all;
        free_batch_memory(b);
        free(b);
    }
    if (c->ring)
        c->ring->ops->detach(c->ring);
    for (int i = 0; i < c->old_ring_count; i++)
        c->old_rings[i].ring->ops->detach(c->old_rings[i].ring);
    free(c->attach);
    tsock__classes_free(c);
    tsock__hold_table_free(&c->holds);
}
