/* The consumer's lowest layer: references to the producer's slots, the queue of releases the
 * service thread sends, releases fenced on a stream, and the rings sessions attached. Every
 * function runs with mu held and calls nothing else of the consumer. */
#include <errno.h>
#include <stdlib.h>

#include "engine/consumer_internal.h"

void
tsock__consumer_take(tsock_consumer *c, uint32_t n, int view)
{
    uint32_t pending = tsock__hold_table_pending(&c->holds);
    (void)tsock__hold_table_take(&c->holds, n, view);
    if (tsock__hold_table_pending(&c->holds) > pending)
        tsock__channel_wake(c->channel); /* a release to send */
}

void
tsock__consumer_drop_queue(tsock_consumer *c)
{
    if (tsock__hold_table_drop_queue(&c->holds) > 0)
        tsock__channel_wake(c->channel);
}

/* A batch that pointed into an earlier session's ring is done with it: the ring is detached
 * when that was its last user, not before (a view into a detached ring would dangle). */
static void
drop_old_ring_user(tsock_consumer *c, const struct tsock__ring_view *ring)
{
    for (int i = 0; i < c->old_ring_count; i++) {
        struct tsock__old_ring *o = &c->old_rings[i];
        if (o->ring != ring)
            continue;
        if (--o->users == 0) {
            o->ring->ops->detach(o->ring);
            *o = c->old_rings[--c->old_ring_count];
        }
        return;
    }
}

void
tsock__consumer_finish_release(tsock_consumer *c, tsock_batch *b)
{
    /* A view of an earlier session's ring owes nothing to this session's producer. */
    if (b->view && b->view_slot != UINT32_MAX && b->generation == c->generation &&
        tsock__hold_table_unref(&c->holds, b->view_slot, b->view_seq) == 1)
        tsock__channel_wake(c->channel); /* a release to send */
    if (b->ring && b->ring != c->ring)
        drop_old_ring_user(c, b->ring);
    b->ring = NULL;
    b->next_free = c->free_batches;
    c->free_batches = b;
}

void
tsock__consumer_free_gathers(tsock_batch *b)
{
    for (int t = 0; t < TSOCK_MAX_TENSORS; t++) {
        if (b->gather_ops)
            b->gather_ops->buffer_free(b->gather_device, b->gather[t]);
        b->gather[t] = NULL;
        b->gather_cap[t] = 0;
    }
}

int
tsock__consumer_poll_fences(tsock_consumer *c)
{
    tsock_batch **link = &c->deferred;
    while (*link) {
        tsock_batch *b = *link;
        /* Only a fence seen to pass frees the slot: after a failed query (a broken context, a
         * graph being captured) the caller's kernels may still read it. */
        if (b->fence_ops->fence_passed(b->fence_device, b->fence) != 1) {
            link = &b->next_deferred;
            continue;
        }
        *link = b->next_deferred;
        c->deferred_count--;
        tsock__consumer_finish_release(c, b);
    }
    return c->deferred_count;
}

/* Held views into `ring`, and releases of them still waiting for their fences. */
static int
ring_users(const tsock_consumer *c, const struct tsock__ring_view *ring)
{
    int users = 0;
    for (const tsock_batch *b = c->all_batches; b; b = b->next_all)
        users += b->held && b->ring == ring;
    for (const tsock_batch *b = c->deferred; b; b = b->next_deferred)
        users += b->ring == ring;
    return users;
}

int
tsock__consumer_ring_in_use(const tsock_consumer *c)
{
    /* Any pending fence counts: a gather's fence guards memory of its own, but the work before
     * it may also read the ring. */
    return c->deferred_count > 0 || c->gathering || c->gather_pending ||
           (c->ring && ring_users(c, c->ring) > 0);
}

int
tsock__consumer_close_ring_if_unused(tsock_consumer *c)
{
    if (!c->ring || !c->terminal_error || tsock__hold_table_queued(&c->holds) > 0 ||
        tsock__consumer_ring_in_use(c))
        return 0;
    c->ring->ops->detach(c->ring);
    c->ring = NULL;
    c->ring_base = NULL;
    c->ring_closed = 1;
    tsock__log(TSOCK_LOG_INFO, "closed the ring of a finished session (%s)",
               tsock_strerror(c->terminal_error));
    return 1;
}

int
tsock__consumer_retire_ring(tsock_consumer *c)
{
    if (!c->ring)
        return 0;
    /* A gather's copies left queued: the service thread is stopped, so wait here (issue 20). */
    if (c->gather_pending) {
        (void)c->ring->ops->copy_finish(c->ring);
        c->gather_pending = 0;
    }
    int users = ring_users(c, c->ring) + c->gathering;
    if (users > 0 && c->old_ring_count == TSOCK__MAX_OLD_RINGS) {
        tsock__log(TSOCK_LOG_ERROR,
                   "cannot open a new session: the rings of %d earlier sessions are still in use "
                   "by held batches; release them first",
                   TSOCK__MAX_OLD_RINGS);
        return -EBUSY;
    }
    if (users == 0)
        c->ring->ops->detach(c->ring);
    else
        c->old_rings[c->old_ring_count++] = (struct tsock__old_ring){c->ring, users};
    c->ring = NULL;
    c->ring_base = NULL;
    c->ring_closed = 1;
    return 0;
}

uint64_t
tsock__consumer_wait_ns(const tsock_consumer *c, uint64_t now)
{
    uint64_t since = c->waiting_since;
    return c->stat_wait_ns + (since && now > since ? now - since : 0);
}

/* Here, in the lowest layer, so that the reader, the session and the service thread can ask
 * without calling up into the API half (which consumes a cancel when its call reports it). */
int
tsock__consumer_cancelled(tsock_consumer *c)
{
    return atomic_load(&c->cancel) != 0;
}
