/* Saving and restoring a consumer's position (docs/semantics.md, "Resume").
 *
 * A consumer cannot recompute which sample ids the producer put into a batch (the producer's
 * permutations chain from epoch to epoch and depend on join points), so a checkpointing
 * consumer asks for them in its HELLO and keeps, per slot, the ids of the batch announced in
 * it, and per epoch a bitmap of the ids next returned. A state is that bitmap plus the epoch
 * (ring/resume_state.h codes it).
 *
 * Restored, the consumer joins like any late joiner. Its first window (n consecutive stream
 * samples from its join point) holds every sample exactly once, so its restored epoch is the
 * complement of the saved set taken from that window as it passes: saved ids are discarded,
 * the others gathered into its batches, and once the epoch is complete the rest of the window
 * (saved ids only) is skipped like drop_last's tail, so the next epoch starts at the next
 * window. The producer decodes nothing more for it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/consumer_internal.h"

/* ---- the producer's layout and the restored state's checks ------------------------------- */

/* The tensors' names, dtypes and shapes: what the caller's code depends on. */
static uint64_t
layout_fingerprint(const struct tsock__msg_welcome *w)
{
    uint64_t h = tsock__state_fingerprint(TSOCK__FP_START, &w->tensor_count, 4);
    for (uint32_t t = 0; t < w->tensor_count; t++) {
        const struct tsock__tensor_desc *d = &w->tensors[t];
        h = tsock__state_fingerprint(h, d->name, strlen(d->name) + 1);
        uint8_t kind[2] = {d->dtype, d->ndim};
        h = tsock__state_fingerprint(h, kind, 2);
        for (int i = 0; i < d->ndim; i++) {
            uint8_t dim[8];
            for (int k = 0; k < 8; k++)
                dim[k] = (uint8_t)((uint64_t)d->sample_shape[i] >> (8 * k));
            h = tsock__state_fingerprint(h, dim, 8);
        }
    }
    return h;
}

static uint32_t
consumer_batch(const tsock_consumer *c, const struct tsock__msg_welcome *w)
{
    return c->batch_size ? c->batch_size : w->batch_size;
}

/* A restored state must describe this producer's dataset and layout, and this consumer's
 * batch size and drop_last (its batches and their numbering continue). */
static int
check_restored(const tsock_consumer *c, const struct tsock__msg_welcome *w)
{
    const struct tsock__resume_state *s = &c->resume.restore;
    int err = tsock__group_check_restored(c, w);
    if (err < 0)
        return err;
    if (s->samples != w->samples) {
        tsock__log(TSOCK_LOG_ERROR,
                   "cannot resume: the state is of a dataset of %llu samples, the producer "
                   "serves %llu (its dataset, or with tsock-producer --nodes its node's share "
                   "of one)",
                   (unsigned long long)s->samples, (unsigned long long)w->samples);
        return TSOCK_E_BAD_STATE;
    }
    if (s->layout != layout_fingerprint(w)) {
        tsock__log(TSOCK_LOG_ERROR, "cannot resume: the state was saved with another batch "
                                    "layout (tensor names, dtypes or shapes differ)");
        return TSOCK_E_BAD_STATE;
    }
    if (s->batch != consumer_batch(c, w) || s->drop_last != c->drop_last) {
        tsock__log(TSOCK_LOG_ERROR,
                   "cannot resume: the state was saved with batch size %u and drop_last %d, "
                   "this consumer uses %u and %d",
                   s->batch, s->drop_last, consumer_batch(c, w), c->drop_last);
        return TSOCK_E_BAD_STATE;
    }
    return 0;
}

/* ---- at WELCOME and BATCH (service thread) ----------------------------------------------- */

static int
size_buffers(tsock_consumer *c, const struct tsock__msg_welcome *w)
{
    size_t ids = (size_t)w->slot_count * w->batch_size;
    uint32_t *slot_ids = realloc(c->resume.slot_ids, ids * sizeof *slot_ids);
    if (!slot_ids)
        return -ENOMEM;
    c->resume.slot_ids = slot_ids;
    c->resume.slot_ids_cap = w->batch_size;
    uint32_t batch = consumer_batch(c, w);
    if (c->resume.taken_cap < batch) {
        uint32_t *taken = realloc(c->resume.taken, (size_t)batch * sizeof *taken);
        if (!taken)
            return -ENOMEM;
        c->resume.taken = taken;
        c->resume.taken_cap = batch;
    }
    if (c->resume.delivered_n != w->samples) {
        /* A replacement producer with another dataset: nothing delivered refers to it. */
        free(c->resume.delivered);
        c->resume.delivered = calloc((size_t)((w->samples + 7) / 8), 1);
        if (!c->resume.delivered)
            return -ENOMEM;
        c->resume.delivered_n = w->samples;
    }
    return 0;
}

int
tsock__resume_on_welcome(tsock_consumer *c, const struct tsock__msg_welcome *w)
{
    if (!c->checkpointing) /* ids for leaving an epoch early, when the producer sends them */
        return tsock__leave_on_welcome(c, w) ? size_buffers(c, w) : 0;
    if (w->samples == 0 || w->samples > TSOCK__STATE_MAX_SAMPLES) {
        tsock__log(TSOCK_LOG_ERROR, "cannot save or resume a consumer's position: the producer "
                                    "has no sampler (free mode), so epochs are not exact");
        return c->resume.restored ? TSOCK_E_BAD_STATE : -ENOTSUP;
    }
    if (c->resume.restored == 1) {
        int err = check_restored(c, w);
        if (err < 0)
            return err;
    }
    return size_buffers(c, w);
}

static uint32_t
batch_id(const struct tsock__msg_batch *b, uint32_t i)
{
    const uint8_t *p = b->ids + 4 * (size_t)i;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int
tsock__resume_check_batch(const tsock_consumer *c, const struct tsock__msg_batch *b)
{
    if (!tsock__ids_tracked(c))
        return 0;
    if (!b->ids || b->samples > c->resume.slot_ids_cap || b->slot >= c->welcome.slot_count)
        return -1;
    for (uint32_t i = 0; i < b->samples; i++)
        if (batch_id(b, i) >= c->resume.delivered_n)
            return -1;
    return 0;
}

void
tsock__resume_on_batch(tsock_consumer *c, const struct tsock__msg_batch *b)
{
    if (!tsock__ids_tracked(c))
        return;
    uint32_t *out = c->resume.slot_ids + (size_t)b->slot * c->resume.slot_ids_cap;
    for (uint32_t i = 0; i < b->samples; i++)
        out[i] = batch_id(b, i);
}

/* ---- reading (caller's thread) ----------------------------------------------------------- */

void
tsock__resume_start(tsock_consumer *c)
{
    if (tsock__group_member(c)) {
        tsock__group_resume_start(c);
        return;
    }
    if (!tsock__ids_tracked(c))
        return;
    c->resume.delivered_epoch = c->plan.epoch;
    if (c->resume.restored != 1)
        return;
    c->resume.restored = 2;
    const struct tsock__resume_state *s = &c->resume.restore;
    c->plan.epoch = s->epoch;
    c->plan.done = s->delivered;
    c->plan.index = s->delivered / s->batch;
    c->resume.delivered_epoch = s->epoch;
    for (uint64_t i = 0; i < s->delivered; i++)
        tsock__bit_set(c->resume.delivered, c->resume.restore_ids[i]);
    c->resume.resuming = s->delivered > 0;
    c->resume.window_left = s->samples;
    tsock__log(TSOCK_LOG_INFO, "resuming epoch %llu: %llu of %llu samples were delivered",
               (unsigned long long)s->epoch, (unsigned long long)s->delivered,
               (unsigned long long)s->samples);
}

/* The ids of head batch h from `offset`. */
static const uint32_t *
head_ids(const tsock_consumer *c, const struct tsock__hold_batch *h, uint32_t offset)
{
    return c->resume.slot_ids + (size_t)h->slot * c->resume.slot_ids_cap + offset;
}

/* Leaves the restored epoch's filter: its epoch ended (or was cut), or its window ran out,
 * which a producer that keeps windows exact never lets happen. */
static int
still_resuming(tsock_consumer *c)
{
    if (!c->resume.resuming)
        return 0;
    if (c->plan.epoch != c->resume.restore.epoch) {
        c->resume.resuming = 0;
        return 0;
    }
    if (c->resume.window_left == 0) {
        tsock__log(TSOCK_LOG_WARN, "the restored epoch's window ended before its remaining "
                                   "samples came: the rest of the epoch is not filtered");
        c->resume.resuming = 0;
        return 0;
    }
    return 1;
}

uint32_t
tsock__resume_usable(tsock_consumer *c, uint32_t max)
{
    for (;;) {
        uint32_t offset;
        const struct tsock__hold_batch *h = tsock__hold_table_head(&c->holds, &offset);
        if (!h)
            return 0;
        uint32_t available = h->samples - offset;
        if (!still_resuming(c))
            return available < max ? available : max;
        if (available > c->resume.window_left)
            available = (uint32_t)c->resume.window_left;
        const uint32_t *ids = head_ids(c, h, offset);
        uint32_t run = 0;
        while (run < available && !tsock__bit_test(c->resume.delivered, ids[run]))
            run++;
        if (run > 0)
            return run < max ? run : max;
        /* Saved ids at the head: discard their run, releasing the slot when it empties. */
        while (run < available && tsock__bit_test(c->resume.delivered, ids[run]))
            run++;
        uint32_t pending = tsock__hold_table_pending(&c->holds);
        tsock__hold_table_discard(&c->holds, run);
        c->resume.window_left -= run;
        if (tsock__hold_table_pending(&c->holds) > pending)
            tsock__channel_wake(c->channel);
    }
}

void
tsock__resume_begin(tsock_consumer *c)
{
    c->resume.taken_n = 0;
}

void
tsock__resume_note_taken(tsock_consumer *c, const struct tsock__hold_batch *h, uint32_t offset,
                         uint32_t n)
{
    if (!tsock__ids_tracked(c))
        return;
    if (tsock__group_member(c)) {
        tsock__group_note_passed(c, head_ids(c, h, offset), n);
        return;
    }
    if (c->resume.taken_n + n <= c->resume.taken_cap) {
        memcpy(c->resume.taken + c->resume.taken_n, head_ids(c, h, offset),
               (size_t)n * sizeof *c->resume.taken);
        c->resume.taken_n += n;
    }
    if (c->resume.resuming)
        c->resume.window_left -= n < c->resume.window_left ? n : c->resume.window_left;
}

static void
clear_delivered(tsock_consumer *c, uint64_t epoch)
{
    memset(c->resume.delivered, 0, (size_t)((c->resume.delivered_n + 7) / 8));
    c->resume.delivered_epoch = epoch;
}

void
tsock__resume_note_delivered(tsock_consumer *c, const tsock_batch *b)
{
    if (tsock__group_member(c)) {
        tsock__group_note_delivered(c, b);
        return;
    }
    if (!tsock__ids_tracked(c) || !c->resume.delivered)
        return;
    if (c->resume.delivered_epoch != b->epoch) /* an epoch was cut since the last batch */
        clear_delivered(c, b->epoch);
    for (uint32_t i = 0; i < c->resume.taken_n; i++)
        tsock__bit_set(c->resume.delivered, c->resume.taken[i]);
    c->resume.taken_n = 0;
    if (!b->epoch_end)
        return;
    clear_delivered(c, c->plan.epoch);
    if (c->resume.resuming) {
        /* The rest of the restored window holds saved ids only (and drop_last's tail). */
        c->plan.skip = c->resume.window_left;
        c->resume.resuming = 0;
    }
}

void
tsock__resume_free(tsock_consumer *c)
{
    free(c->resume.slot_ids);
    free(c->resume.delivered);
    free(c->resume.taken);
    free(c->resume.restore_ids);
    tsock__group_resume_free(c);
}

/* ---- the public calls -------------------------------------------------------------------- */

int
tsock_consumer_set_checkpointing(tsock_consumer *c, int on)
{
    if (!c)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->checkpointing = on != 0 || c->resume.restored;
    return 0;
}

int
tsock_consumer_restore_state(tsock_consumer *c, const void *state, size_t len)
{
    if (!c || (!state && len))
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    struct tsock__resume_state s;
    uint32_t *ids = NULL;
    const char *why = NULL;
    int err = tsock__state_decode(state, len, &s, &ids, &why);
    if (err == TSOCK_E_BAD_STATE)
        tsock__log(TSOCK_LOG_ERROR, "cannot restore the consumer state: %s", why);
    if (err < 0)
        return err;
    free(c->resume.restore_ids);
    c->resume.restore = s;
    c->resume.restore_ids = ids;
    /* A rank's HELLO carries it so that the producer refuses ranks restored from states
     * saved at different steps (docs/distributed.md). */
    c->group.restore_fp = s.group ? tsock__state_group_fingerprint(&s, ids) : 0;
    c->resume.restored = 1;
    c->checkpointing = 1;
    return 0;
}

/* The state of a started consumer (mu held). */
static int
describe(tsock_consumer *c, struct tsock__resume_state *s)
{
    if (!c->checkpointing || !c->ready_to_read || !c->resume.delivered)
        return TSOCK_E_STATE;
    if (tsock__group_member(c)) {
        int err = tsock__group_describe(c, s);
        s->layout = layout_fingerprint(&c->welcome);
        return err;
    }
    *s = (struct tsock__resume_state){
        .samples = c->resume.delivered_n,
        .epoch = c->plan.epoch,
        .batch = c->plan.batch,
        .drop_last = c->plan.drop_last,
        .layout = layout_fingerprint(&c->welcome),
        .delivered = c->plan.done,
        .bits = c->resume.delivered,
    };
    if (c->resume.delivered_epoch != c->plan.epoch && c->plan.done == 0)
        s->bits = NULL; /* an epoch was cut and nothing of the next was delivered yet */
    return 0;
}

int
tsock__resume_save(tsock_consumer *c, void *buf, size_t cap, size_t *len)
{
    struct tsock__resume_state s;
    int err = describe(c, &s);
    long n = 0;
    if (err == 0) {
        *len = tsock__state_size(&s);
        n = tsock__state_encode(&s, buf, cap);
    }
    if (err < 0)
        return err;
    /* -EINVAL from the encoder: the delivered count is not whole batches, which happens only
     * once the stream ended inside an epoch, leaving nothing to resume. */
    return n < 0 ? (n == -EMSGSIZE ? -ENOSPC : TSOCK_E_STATE) : 0;
}
