/* Reading: the queue of producer batches the service thread received, cut into this
 * consumer's batches and epochs. A batch that lies inside one producer batch is a zero-copy
 * view of its slot; any other is gathered into memory the batch owns. Every function runs on
 * the caller's thread with mu held. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/sync.h"
#include "engine/consumer_internal.h"

static tsock_batch *
new_batch(tsock_consumer *c)
{
    tsock_batch *b = c->free_batches;
    if (b) {
        c->free_batches = b->next_free;
        return b;
    }
    b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->owner = c;
    b->device = -1;
    b->gather_device = -1;
    b->next_all = c->all_batches;
    c->all_batches = b;
    return b;
}

void
tsock__consumer_recycle(tsock_consumer *c, tsock_batch *b)
{
    b->next_free = c->free_batches;
    c->free_batches = b;
}

/* Room in a batch's own buffers for `samples` samples of every tensor, in the memory the
 * session's ring is read from (host memory, or the GPU the ring is read on). */
static int
reserve_gather(tsock_consumer *c, tsock_batch *b, uint32_t samples)
{
    int device = c->ring->ops->view_device(c->ring);
    if (b->gather_ops != c->ring->ops || b->gather_device != device) {
        tsock__consumer_free_gathers(b);
        b->gather_ops = c->ring->ops;
        b->gather_device = device;
    }
    for (uint32_t t = 0; t < c->welcome.tensor_count; t++) {
        size_t need = (size_t)c->welcome.tensors[t].sample_bytes * samples;
        if (b->gather_cap[t] >= need)
            continue;
        void *grown = NULL;
        int err = b->gather_ops->buffer_alloc(device, need, &grown);
        if (err < 0)
            return err;
        b->gather_ops->buffer_free(device, b->gather[t]);
        b->gather[t] = grown;
        b->gather_cap[t] = need;
    }
    return 0;
}

/* Where sample `sample` of tensor `tensor` of the producer batch `h` is in the ring. */
static const uint8_t *
sample_at(const tsock_consumer *c, const struct tsock__hold_batch *h, uint32_t tensor,
          uint32_t sample)
{
    const struct tsock__tensor_desc *d = &c->welcome.tensors[tensor];
    return c->ring_base + (size_t)h->slot * c->welcome.slot_stride + d->offset +
           (size_t)d->sample_bytes * sample;
}

/* Waits (mu held) for the gather copies queued so far, polling them every millisecond against
 * next's deadline, the session's end and a cancel, so that a device that never finishes them
 * (a dead producer's event, a stalled device) blocks nobody for ever. Returns 0 once they are
 * complete, or a negative code with c->gather_pending set: they may still read the ring. */
static int
wait_copies(tsock_consumer *c, struct tsock__ring_view *ring)
{
    const struct tsock__backend *ops = ring->ops;
    for (;;) {
        int done = ops->copies_done(ring);
        if (done == 1) {
            c->gather_pending = 0;
            return 0;
        }
        int err = done < 0                                                ? done
                  : c->terminal_error && c->terminal_error != TSOCK_E_END ? c->terminal_error
                  : tsock__consumer_cancelled(c)                          ? TSOCK_E_CANCELLED
                  : tsock__now_ns() >= c->read_deadline                   ? -ETIMEDOUT
                                                                          : 0;
        if (err < 0) {
            c->gather_pending = 1;
            tsock__channel_wake(c->channel); /* the service thread watches them from now on */
            return err;
        }
        uint64_t soon = tsock__deadline(1);
        (void)tsock__cond_wait_until(&c->cond, &c->mu,
                                     soon < c->read_deadline ? soon : c->read_deadline);
    }
}

/* Copies n samples of producer batch h from `offset` into b's own buffers at sample `at`,
 * complete on return:
 * the slot's reference may be dropped right after, and the producer may then refill it.
 *
 * The copies are queued without mu, and waited for with mu released between polls: the
 * service thread must keep heartbeating (and noticing a lost producer) meanwhile, and no
 * release goes out while they may read the ring (gathering, gather_pending). `gathering` keeps
 * the ring open; the head batch keeps its slot, as it stays queued until take. Returns 1
 * when the copy is complete, 0 when the queue was dropped meanwhile (the producer stopped:
 * the samples are not this batch's), or a negative code: a failed copy, next's deadline, the
 * session's end, a cancel (the copies queued so far are then left to the service thread). */
static int
gather(tsock_consumer *c, tsock_batch *b, const struct tsock__hold_batch *h, uint32_t offset,
       uint32_t n, uint32_t at)
{
    struct tsock__ring_view *ring = c->ring;
    const struct tsock__backend *ops = ring->ops;
    uint32_t slot = h->slot;
    uint64_t seq = h->seq;
    const uint8_t *src[TSOCK_MAX_TENSORS];
    for (uint32_t t = 0; t < c->welcome.tensor_count; t++)
        src[t] = sample_at(c, h, t, offset);
    c->gathering = 1;
    pthread_mutex_unlock(&c->mu);
    int err = 0, queued = 0;
    for (uint32_t t = 0; t < c->welcome.tensor_count && err == 0; t++) {
        size_t bytes = (size_t)c->welcome.tensors[t].sample_bytes;
        err = ops->copy_out(ring, slot, b->gather[t] + bytes * at, src[t], bytes * n);
        queued += err == 0;
    }
    if (err == 0 && !ops->copies_done)
        err = ops->copy_finish(ring);
    pthread_mutex_lock(&c->mu);
    if (ops->copies_done && (err == 0 || queued > 0)) {
        int waited = wait_copies(c, ring);
        err = err < 0 ? err : waited;
    }
    c->gathering = 0;
    if (err < 0)
        return err;
    uint32_t now_offset;
    const struct tsock__hold_batch *head = tsock__hold_table_head(&c->holds, &now_offset);
    return head && head->slot == slot && head->seq == seq && now_offset == offset;
}

/* Takes n samples (tsock__resume_usable's count, up to what b still needs) from the head
 * producer batch into b. Returns n, 0 when the queue was dropped during a gather, or a
 * negative code when a copy failed. */
static int
take_from_head(tsock_consumer *c, tsock_batch *b, uint32_t n)
{
    uint32_t offset;
    const struct tsock__hold_batch *h = tsock__hold_table_head(&c->holds, &offset);
    uint32_t available = h->samples - offset;
    if (b->view) {
        for (uint32_t t = 0; t < c->welcome.tensor_count; t++)
            b->data[t] = sample_at(c, h, t, offset);
        b->view_slot = h->slot;
        b->view_seq = h->seq;
        b->generation = c->generation;
    } else {
        int err = gather(c, b, h, offset, n, b->samples);
        if (err <= 0)
            return err;
    }
    if (b->samples == 0)
        b->seq = h->seq;
    b->samples += n;
    /* In free mode the producer's epoch marks end the consumer's epochs; with a sampler only
     * the consumer's own window does. */
    b->free_end = c->plan.n == 0 && (h->flags & TSOCK__BATCH_EPOCH_END) && n == available;
    if (tsock__ids_tracked(c))
        tsock__resume_note_taken(c, h, offset, n);
    tsock__consumer_take(c, n, b->view);
    return (int)n;
}

/* Discards the tail drop_last leaves out of the previous epoch. Returns 1 when done. */
static int
skip_tail(tsock_consumer *c)
{
    if (c->plan.skip > 0) {
        uint32_t pending = tsock__hold_table_pending(&c->holds);
        c->plan.skip -= tsock__hold_table_discard(&c->holds, c->plan.skip);
        if (tsock__hold_table_pending(&c->holds) > pending)
            tsock__channel_wake(c->channel);
    }
    return c->plan.skip == 0;
}

/* Starts the batch under construction: a view when the head producer batch holds all of it
 * in one piece (`usable`: what tsock__resume_usable allows). */
static int
begin_batch(tsock_consumer *c, uint32_t want, uint32_t usable)
{
    tsock_batch *b = new_batch(c);
    if (!b)
        return -ENOMEM;
    uint32_t offset;
    const struct tsock__hold_batch *h = tsock__hold_table_head(&c->holds, &offset);
    /* Free mode: a consumer epoch is a producer epoch, so it carries the producer's marks
     * (tsock_slot_set_epoch). A consumer that joined mid-epoch then sees a first batch whose
     * index is not 0 and can tell that epoch is partial. */
    if (c->plan.n == 0 && c->plan.done == 0 && c->plan.index == 0) {
        c->plan.epoch = h->epoch;
        c->plan.index = h->index_in_epoch;
    }
    b->samples = 0;
    b->free_end = 0;
    b->view_slot = UINT32_MAX;
    b->view = usable >= want || (c->plan.n == 0 && (h->flags & TSOCK__BATCH_EPOCH_END));
    if (tsock__ids_tracked(c))
        tsock__resume_begin(c);
    if (!b->view) {
        int err = reserve_gather(c, b, want);
        if (err < 0) {
            tsock__consumer_recycle(c, b);
            return err;
        }
        for (uint32_t t = 0; t < c->welcome.tensor_count; t++)
            b->data[t] = b->gather[t];
    }
    c->building = b;
    return 0;
}

/* Hands the finished batch to the caller and moves the epoch plan on. */
static tsock_batch *
finish_batch(tsock_consumer *c)
{
    tsock_batch *b = c->building;
    c->building = NULL;
    b->epoch = c->plan.epoch;
    b->index = c->plan.index;
    b->epoch_end = tsock__epoch_plan_advance(&c->plan, b->samples, b->free_end);
    if (tsock__ids_tracked(c))
        tsock__resume_note_delivered(c, b);
    if (tsock__group_member(c)) {
        /* The reader, not the plan, skips what a rank leaves out: the rest of the window. */
        c->plan.skip = 0;
        c->group.pad_done = 0;
        c->group.skip_rest = b->epoch_end;
    }
    /* A view lives in the session's ring, which stays open while it is held; a gather lives in
     * its own buffers, whose memory was chosen when they were reserved. The ring may already
     * be closed when the last, partial gather of a stream is handed over. */
    b->ring = b->view ? c->ring : NULL;
    b->device = b->view ? c->ring->ops->view_device(c->ring) : b->gather_device;
    b->held = 1;
    c->held_count++;
    c->held_views += b->view;
    c->stat_batches++;
    c->stat_samples += b->samples;
    c->stat_epochs += b->epoch_end != 0;
    if (b->epoch_end) {
        c->between_epochs = 1;
        c->epoch_ended_ns = tsock__now_ns();
        tsock__channel_wake(c->channel); /* the service thread times the grace period */
    }
    return b;
}

/* Samples, up to max, the next batch may take from the head of the queue in one piece: the
 * head batch's rest (a checkpointing consumer asks tsock__resume_usable, which may skip saved
 * samples first). 0 when the queue is empty. */
static uint32_t
head_run(tsock_consumer *c, uint32_t max)
{
    if (tsock__ids_tracked(c))
        return tsock__resume_usable(c, max);
    uint32_t available = tsock__hold_table_available(&c->holds);
    return available < max ? available : max;
}

/* Builds as much of the next batch as the queue allows (mu held). Returns 1 when a batch is
 * ready in c->building, 0 when more producer batches are needed, or a negative code. */
static int
build(tsock_consumer *c)
{
    if (!skip_tail(c))
        return 0;
    uint32_t want = tsock__epoch_plan_want(&c->plan);
    while (tsock__hold_table_queued(&c->holds) > 0) {
        uint32_t usable = head_run(c, want - (c->building ? c->building->samples : 0));
        if (usable == 0)
            break; /* the queue ran out while saved samples were skipped */
        if (!c->building) {
            int err = begin_batch(c, want, usable);
            if (err < 0)
                return err;
        }
        int taken = take_from_head(c, c->building, usable);
        if (taken < 0)
            return taken;
        if (c->building->samples == want || c->building->free_end || c->building->view)
            return 1;
    }
    return 0;
}

/* ---- a rank of a group ------------------------------------------------------------------ */

/* The ids of the head batch's samples from its current offset. */
static const uint32_t *
head_ids(const tsock_consumer *c, const struct tsock__hold_batch *h, uint32_t offset)
{
    return c->resume.slot_ids + (size_t)h->slot * c->resume.slot_ids_cap + offset;
}

/* Discards n stream samples at the head, sending the releases that frees. */
static uint64_t
group_drop(tsock_consumer *c, uint64_t n)
{
    uint32_t pending = tsock__hold_table_pending(&c->holds);
    uint64_t done = tsock__hold_table_discard(&c->holds, n);
    if (tsock__hold_table_pending(&c->holds) > pending)
        tsock__channel_wake(c->channel); /* a release to send */
    return done;
}

/* Samples at the head of the queue that are the group epoch's next positions, in one piece:
 * the head batch's rest, or in a restored window the run up to the next id consumed before
 * the restore, after discarding the ones at the head. 0 when the queue ran out. */
static uint32_t
group_run(tsock_consumer *c)
{
    for (;;) {
        uint32_t offset;
        const struct tsock__hold_batch *h = tsock__hold_table_head(&c->holds, &offset);
        if (!h)
            return 0;
        uint32_t available = h->samples - offset;
        if (!c->group.filtering || c->group.skip_rest)
            return available;
        const uint32_t *ids = head_ids(c, h, offset);
        uint32_t run = 0;
        while (run < available && !tsock__group_saved(c, ids[run]))
            run++;
        if (run > 0)
            return run;
        while (run < available && tsock__group_saved(c, ids[run]))
            run++;
        c->resume.window_left -= run < c->resume.window_left ? run : c->resume.window_left;
        group_drop(c, run);
    }
}

/* Notes n samples at the head as passed at the group epoch's next positions. */
static void
group_pass(tsock_consumer *c, uint32_t n)
{
    uint32_t offset;
    const struct tsock__hold_batch *h = tsock__hold_table_head(&c->holds, &offset);
    tsock__group_note_passed(c, c->checkpointing ? head_ids(c, h, offset) : NULL, n);
}

/* Discards the queue up to the group epoch's position `to` (other ranks' blocks, drop_last's
 * tail). Returns 1 once there, 0 when the queue ran out first. */
static int
group_discard_to(tsock_consumer *c, uint64_t to)
{
    while (c->group.pos < to) {
        uint32_t run = group_run(c);
        if (run == 0)
            break;
        uint32_t n = to - c->group.pos < run ? (uint32_t)(to - c->group.pos) : run;
        group_pass(c, n);
        c->group.pos += group_drop(c, n);
    }
    return c->group.pos >= to;
}

/* The end of a group epoch: the rest of its window goes. A restored window is M stream
 * samples whatever was filtered out of it. Returns 1 once done. */
static int
group_skip_window(tsock_consumer *c)
{
    if (!c->group.filtering)
        return group_discard_to(c, c->group.plan.window);
    c->resume.window_left -= group_drop(c, c->resume.window_left);
    if (c->resume.window_left > 0)
        return 0;
    tsock__group_window_done(c);
    return 1;
}

int
tsock__consumer_group_settle(tsock_consumer *c)
{
    for (;;) {
        if (c->group.skip_rest || group_discard_to(c, tsock__group_saved_to(c)))
            return 0;
        if (c->terminal_error)
            return c->terminal_error;
        if (tsock__consumer_cancelled(c))
            return TSOCK_E_CANCELLED;
        tsock__cond_wait_until(&c->cond, &c->mu, TSOCK__NO_DEADLINE);
    }
}

/* Whether rank batch `index` of plan p (counted from the plan's start: a restored epoch's plan
 * starts at the restore) ends with a padding sample: the tail batch of a rank that is one
 * short (dataset/groups.c, tail_batch). */
static int
has_padding(const struct tsock__rank_plan *p, uint64_t index)
{
    uint64_t r = p->tail % p->local_world;
    return !p->drop_last && index >= p->full_rounds && r != 0 && p->local >= r;
}

/* The padding sample comes first in the stream (it is another rank's, earlier in the same tail
 * round): copy it into its place at the end of the batch before the queue passes it. Returns 1
 * when done, 0 when more batches are needed, or a negative code. */
static int
group_take_padding(tsock_consumer *c, uint64_t at, uint32_t k)
{
    if (!group_discard_to(c, at) || group_run(c) == 0)
        return 0;
    uint32_t offset;
    const struct tsock__hold_batch *h = tsock__hold_table_head(&c->holds, &offset);
    if (!h)
        return 0;
    if (!c->building) {
        int err = begin_batch(c, k, 0); /* a gather: the padding is never beside its block */
        if (err < 0)
            return err;
    }
    int got = gather(c, c->building, h, offset, 1, k - 1);
    if (got <= 0)
        return got;
    if (c->building->samples == 0)
        c->building->seq = h->seq;
    c->group.pad_done = 1;
    return 1;
}

/* Builds the rank's next batch: its block of the current group batch, a view when that block
 * is one producer batch's, gathered otherwise; the other ranks' blocks are discarded (so
 * released) as the queue passes them. Returns 1 when a batch is ready, 0 when more producer
 * batches are needed, or a negative code. */
static int
build_rank(tsock_consumer *c)
{
    const struct tsock__rank_plan *rp = &c->group.plan;
    if (c->group.skip_rest) {
        if (!group_skip_window(c))
            return 0;
        tsock__group_reset(c); /* the next group epoch starts at the next window */
    }
    uint64_t *pos = c->group.positions;
    uint64_t index = c->plan.index - c->group.index_base;
    uint32_t k = tsock__rank_plan_batch(rp, index, pos);
    uint32_t pad = (uint32_t)has_padding(rp, index), own = k - pad;
    if (pad && !c->group.pad_done) {
        int done = group_take_padding(c, pos[k - 1], k);
        if (done <= 0)
            return done;
    }
    if (own > 0 && !(c->building && c->building->samples > 0) && !group_discard_to(c, pos[0]))
        return 0;
    while (!c->building || c->building->samples < own) {
        uint32_t available = group_run(c);
        if (available == 0)
            return 0;
        uint32_t need = own - (c->building ? c->building->samples : 0);
        if (!c->building) {
            /* Beyond its share of the ring's views, a rank copies its block out (below). */
            int may_view = c->held_views < (int)c->group.view_budget;
            int err = begin_batch(c, own, may_view ? available : 0);
            if (err < 0)
                return err;
        }
        int taken = take_from_head(c, c->building, available < need ? available : need);
        if (taken < 0)
            return taken;
        c->group.pos += (uint64_t)taken;
        if (taken == 0)
            return 0;
    }
    c->building->samples += pad;
    return 1;
}

/* The next stream position the rank needs from the queue (mu held): its next block's first
 * sample, that batch's padding sample when it comes first, or after its epoch's last batch the
 * window's end. Returns 0 when the rank is inside a block or in a restored window (nothing to
 * pass before the caller reads on). */
static int
next_needed(tsock_consumer *c, uint64_t *to)
{
    if (c->group.filtering || (c->building && c->building->samples > 0))
        return 0;
    if (c->group.skip_rest) {
        /* After the epoch's last batch: the rest of the window is other ranks' (or nobody's);
         * the caller's next read starts the next window (build_rank, tsock__group_reset). */
        *to = c->group.plan.window;
        return 1;
    }
    const struct tsock__rank_plan *rp = &c->group.plan;
    uint64_t index = c->plan.index - c->group.index_base;
    if (index >= rp->batches)
        return 0;
    uint64_t *pos = c->group.scan_positions;
    uint32_t k = tsock__rank_plan_batch(rp, index, pos);
    if (k == 0)
        return 0;
    *to = pos[0];
    if (has_padding(rp, index) && !c->group.pad_done && pos[k - 1] < *to)
        *to = pos[k - 1];
    return 1;
}

void
tsock__consumer_group_pass_others(tsock_consumer *c)
{
    uint64_t to;
    /* Not while the caller copies out of the head batch (without mu), nor before it has set up
     * the rank's plan. */
    if (!c->ready_to_read || c->gathering || c->phase != TSOCK__PHASE_ACTIVE || c->terminal_error)
        return;
    if (next_needed(c, &to))
        (void)group_discard_to(c, to);
}

/* Leaving the pause or the grace period: the caller wants its next epoch (mu held). */
void
tsock__consumer_start_next_epoch(tsock_consumer *c)
{
    c->between_epochs = 0;
    if (c->phase == TSOCK__PHASE_PAUSED) {
        c->phase = TSOCK__PHASE_RESUMING;
        tsock__channel_wake(c->channel); /* the service thread sends RESUME */
    }
}

/* Waits for the next batch (mu held). */
int
tsock__consumer_wait_batch(tsock_consumer *c, uint64_t deadline, tsock_batch **batch)
{
    c->read_deadline = deadline;
    for (;;) {
        int got = c->phase != TSOCK__PHASE_ACTIVE ? 0
                  : tsock__group_member(c)        ? build_rank(c)
                                                  : build(c);
        if (got < 0)
            return got;
        if (got) {
            *batch = finish_batch(c);
            return 0;
        }
        if (c->terminal_error == TSOCK_E_END && c->building && c->building->samples > 0) {
            /* The stream ended inside this batch: hand over what there is, ending the epoch. */
            *batch = finish_batch(c);
            c->stat_epochs += !(*batch)->epoch_end;
            (*batch)->epoch_end = 1;
            return 0;
        }
        if (c->terminal_error)
            return c->terminal_error;
        if (tsock__consumer_cancelled(c))
            return TSOCK_E_CANCELLED;
        int err = tsock__cond_wait_until(&c->cond, &c->mu, deadline);
        if (err < 0)
            return err;
    }
}
