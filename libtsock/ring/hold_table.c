/* The consumer's hold table (see hold_table.h for the references and states).
 *
 * The queue's reference and the views' references are counted apart (`queued`, `views`) so
 * that a stray unref can never take away the queue's reference and release a batch the
 * consumer has not read yet.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ring/hold_table.h"
#include "ring/ring.h"

static int
slot_ok(const struct tsock__hold_table *t, uint32_t slot)
{
    return t != NULL && t->entry != NULL && slot < t->slots;
}

static int
slot_held(const struct tsock__hold_slot *e)
{
    return e->queued || e->views > 0;
}

int
tsock__hold_table_init(struct tsock__hold_table *t, uint32_t slots)
{
    if (t == NULL)
        return -EINVAL;
    memset(t, 0, sizeof *t);
    if (slots == 0 || slots > TSOCK__RING_MAX_SLOTS)
        return -EINVAL;
    t->entry = calloc(slots, sizeof *t->entry);
    t->queue = calloc(slots, sizeof *t->queue);
    t->releases = calloc(slots, sizeof *t->releases);
    if (t->entry == NULL || t->queue == NULL || t->releases == NULL) {
        tsock__hold_table_free(t);
        return -ENOMEM;
    }
    t->slots = slots;
    return 0;
}

void
tsock__hold_table_free(struct tsock__hold_table *t)
{
    if (t == NULL)
        return;
    free(t->entry);
    free(t->queue);
    free(t->releases);
    memset(t, 0, sizeof *t);
}

void
tsock__hold_table_reset(struct tsock__hold_table *t)
{
    if (t == NULL || t->entry == NULL)
        return;
    memset(t->entry, 0, (size_t)t->slots * sizeof *t->entry);
    t->queue_head = 0;
    t->queue_len = 0;
    t->head_offset = 0;
    t->release_len = 0;
    t->held = 0;
}

/* The slot's last reference went: it owes the producer a release. The release queue cannot
 * overflow: a slot is in it at most once, and announce refuses it while it is. */
static void
drop_last_reference(struct tsock__hold_table *t, uint32_t slot)
{
    struct tsock__hold_slot *e = &t->entry[slot];
    e->pending = 1;
    t->releases[t->release_len++] = (struct tsock__hold_release){slot, e->batch.seq};
    t->held--;
}

int
tsock__hold_table_announce(struct tsock__hold_table *t, const struct tsock__hold_batch *b)
{
    if (b == NULL || !slot_ok(t, b->slot) || b->samples == 0)
        return -EINVAL;
    struct tsock__hold_slot *e = &t->entry[b->slot];
    if (slot_held(e) || e->pending)
        return -EBUSY;
    /* Every queued slot is held and no slot is queued twice, so the queue has room. */
    e->batch = *b;
    e->queued = 1;
    t->held++;
    t->queue[(t->queue_head + t->queue_len++) % t->slots] = b->slot;
    return 0;
}

const struct tsock__hold_batch *
tsock__hold_table_head(const struct tsock__hold_table *t, uint32_t *offset)
{
    if (t == NULL || t->queue_len == 0) {
        if (offset != NULL)
            *offset = 0;
        return NULL;
    }
    if (offset != NULL)
        *offset = t->head_offset;
    return &t->entry[t->queue[t->queue_head]].batch;
}

uint32_t
tsock__hold_table_available(const struct tsock__hold_table *t)
{
    const struct tsock__hold_batch *h = tsock__hold_table_head(t, NULL);
    return h != NULL ? h->samples - t->head_offset : 0;
}

/* The head batch leaves the queue with the queue's reference. */
static void
pop_head(struct tsock__hold_table *t)
{
    uint32_t slot = t->queue[t->queue_head];
    struct tsock__hold_slot *e = &t->entry[slot];
    t->queue_head = (t->queue_head + 1) % t->slots;
    t->queue_len--;
    t->head_offset = 0;
    e->queued = 0;
    if (e->views == 0)
        drop_last_reference(t, slot);
}

int
tsock__hold_table_take(struct tsock__hold_table *t, uint32_t n, int ref)
{
    if (t == NULL || t->queue_len == 0)
        return -ENOENT;
    uint32_t available = tsock__hold_table_available(t);
    if (n == 0 || n > available)
        return -EINVAL;
    struct tsock__hold_slot *e = &t->entry[t->queue[t->queue_head]];
    if (ref) {
        if (e->views == UINT32_MAX)
            return -EOVERFLOW;
        e->views++;
    }
    t->head_offset += n;
    if (t->head_offset < e->batch.samples)
        return 0;
    pop_head(t);
    return 1;
}

uint64_t
tsock__hold_table_discard(struct tsock__hold_table *t, uint64_t n)
{
    uint64_t done = 0;
    while (done < n && t != NULL && t->queue_len > 0) {
        uint32_t available = tsock__hold_table_available(t);
        uint32_t k = n - done < available ? (uint32_t)(n - done) : available;
        (void)tsock__hold_table_take(t, k, 0);
        done += k;
    }
    return done;
}

uint32_t
tsock__hold_table_drop_queue(struct tsock__hold_table *t)
{
    uint32_t dropped = 0;
    while (t != NULL && t->queue_len > 0) {
        pop_head(t);
        dropped++;
    }
    return dropped;
}

int
tsock__hold_table_ref(struct tsock__hold_table *t, uint32_t slot, uint64_t seq)
{
    if (!slot_ok(t, slot))
        return -EINVAL;
    struct tsock__hold_slot *e = &t->entry[slot];
    if (!slot_held(e) || e->batch.seq != seq)
        return -ENOENT;
    if (e->views == UINT32_MAX)
        return -EOVERFLOW;
    e->views++;
    return 0;
}

int
tsock__hold_table_unref(struct tsock__hold_table *t, uint32_t slot, uint64_t seq)
{
    if (!slot_ok(t, slot))
        return -EINVAL;
    struct tsock__hold_slot *e = &t->entry[slot];
    /* The seq comparison keeps a view of an earlier use of the slot from releasing the
     * current one. */
    if (e->views == 0 || e->batch.seq != seq)
        return -ENOENT;
    if (--e->views > 0 || e->queued)
        return 0;
    drop_last_reference(t, slot);
    return 1;
}

uint32_t
tsock__hold_table_take_releases(struct tsock__hold_table *t, struct tsock__hold_release *out,
                                uint32_t cap)
{
    if (t == NULL || (out == NULL && cap > 0))
        return 0;
    uint32_t n = t->release_len < cap ? t->release_len : cap;
    for (uint32_t i = 0; i < n; i++) {
        out[i] = t->releases[i];
        t->entry[out[i].slot].pending = 0;
    }
    /* Usually everything goes at once; a partial take keeps the rest in order. (A table never
     * initialised has no release array: memmove must not see its NULL.) */
    if (n > 0 && t->release_len > n)
        memmove(t->releases, t->releases + n, (size_t)(t->release_len - n) * sizeof *t->releases);
    t->release_len -= n;
    return n;
}

int
tsock__hold_table_holds(const struct tsock__hold_table *t, uint32_t slot, uint64_t seq)
{
    if (!slot_ok(t, slot))
        return -EINVAL;
    const struct tsock__hold_slot *e = &t->entry[slot];
    return slot_held(e) && e->batch.seq == seq;
}

int
tsock__hold_table_refs(const struct tsock__hold_table *t, uint32_t slot)
{
    if (!slot_ok(t, slot))
        return -EINVAL;
    const struct tsock__hold_slot *e = &t->entry[slot];
    uint64_t refs = (uint64_t)e->queued + e->views;
    return refs > INT32_MAX ? INT32_MAX : (int)refs;
}

uint32_t
tsock__hold_table_held_count(const struct tsock__hold_table *t)
{
    return t != NULL ? t->held : 0;
}

uint32_t
tsock__hold_table_queued(const struct tsock__hold_table *t)
{
    return t != NULL ? t->queue_len : 0;
}

uint32_t
tsock__hold_table_pending(const struct tsock__hold_table *t)
{
    return t != NULL ? t->release_len : 0;
}

/* Every queued slot is marked queued, appears once, and counts match. */
static int
queue_consistent(const struct tsock__hold_table *t)
{
    if (t->queue_head >= t->slots || t->queue_len > t->slots)
        return 0;
    uint32_t marked = 0;
    for (uint32_t s = 0; s < t->slots; s++)
        marked += t->entry[s].queued;
    if (marked != t->queue_len)
        return 0;
    for (uint32_t i = 0; i < t->queue_len; i++) {
        uint32_t slot = t->queue[(t->queue_head + i) % t->slots];
        if (slot >= t->slots || !t->entry[slot].queued)
            return 0;
        for (uint32_t j = 0; j < i; j++)
            if (t->queue[(t->queue_head + j) % t->slots] == slot)
                return 0;
    }
    if (t->queue_len == 0)
        return t->head_offset == 0;
    const struct tsock__hold_slot *h = &t->entry[t->queue[t->queue_head]];
    return t->head_offset < h->batch.samples;
}

/* Every pending release names a released slot, with the seq it was announced with, once. */
static int
releases_consistent(const struct tsock__hold_table *t)
{
    if (t->release_len > t->slots)
        return 0;
    uint32_t marked = 0;
    for (uint32_t s = 0; s < t->slots; s++)
        marked += t->entry[s].pending;
    if (marked != t->release_len)
        return 0;
    for (uint32_t i = 0; i < t->release_len; i++) {
        const struct tsock__hold_release *r = &t->releases[i];
        if (r->slot >= t->slots || !t->entry[r->slot].pending ||
            t->entry[r->slot].batch.seq != r->seq)
            return 0;
        for (uint32_t j = 0; j < i; j++)
            if (t->releases[j].slot == r->slot)
                return 0;
    }
    return 1;
}

int
tsock__hold_table_check(const struct tsock__hold_table *t)
{
    if (t == NULL || t->entry == NULL || t->queue == NULL || t->releases == NULL || t->slots == 0 ||
        t->slots > TSOCK__RING_MAX_SLOTS)
        return -EPROTO;
    uint32_t held = 0;
    for (uint32_t s = 0; s < t->slots; s++) {
        const struct tsock__hold_slot *e = &t->entry[s];
        if (e->queued > 1 || e->pending > 1 || (e->pending && slot_held(e)))
            return -EPROTO;
        if ((slot_held(e) || e->pending) && (e->batch.slot != s || e->batch.samples == 0))
            return -EPROTO;
        held += slot_held(e);
    }
    if (held != t->held || !queue_consistent(t) || !releases_consistent(t))
        return -EPROTO;
    return 0;
}
