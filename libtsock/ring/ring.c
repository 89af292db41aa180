/* The slot ring's bookkeeping (see ring.h for the state machine).
 *
 * Every function validates its arguments before touching the ring, so a rejected call leaves
 * the ring exactly as it was: the engine can log the bad request (usually a malformed or late
 * message from a consumer) and carry on.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

static uint64_t
consumer_bit(uint32_t consumer)
{
    return (uint64_t)1 << consumer;
}

/* A slot index the ring can be asked about: inside the initialised part of the table. */
static int
slot_ok(const struct tsock__ring *r, uint32_t slot)
{
    return r != NULL && slot < r->count;
}

static int
consumer_ok(uint32_t consumer)
{
    return consumer < TSOCK__RING_MAX_CONSUMERS;
}

static void
slot_set_free(struct tsock__ring *r, struct tsock__ring_slot *s)
{
    s->state = TSOCK__SLOT_FREE;
    s->holders = 0;
    r->free_count++;
}

/* Takes consumer's bit off a HELD slot; returns 1 when that was the last holder and the slot is
 * FREE now. The caller has checked that the bit is set. */
static int
slot_drop_holder(struct tsock__ring *r, struct tsock__ring_slot *s, uint32_t consumer)
{
    s->holders &= ~consumer_bit(consumer);
    if (s->holders != 0)
        return 0;
    slot_set_free(r, s);
    return 1;
}

int
tsock__ring_init(struct tsock__ring *r, uint32_t count)
{
    if (r == NULL || count == 0 || count > TSOCK__RING_MAX_SLOTS)
        return -EINVAL;
    r->count = count;
    r->free_count = count;
    r->next_hint = 0;
    r->next_seq = 0;
    /* The whole table, not only `count` entries: tsock__ring_check can then also catch a write
     * past the ring's end, and the struct never holds leftovers of an earlier use. */
    for (uint32_t i = 0; i < TSOCK__RING_MAX_SLOTS; i++) {
        r->slots[i].state = TSOCK__SLOT_FREE;
        r->slots[i].holders = 0;
        r->slots[i].seq = 0;
    }
    return 0;
}

int
tsock__ring_acquire(struct tsock__ring *r)
{
    if (r == NULL || r->count == 0 || r->count > TSOCK__RING_MAX_SLOTS)
        return -EINVAL;
    if (r->free_count == 0)
        return -EAGAIN;
    /* Round-robin from the slot after the last one taken: every slot is reused in turn, so a
     * consumer's late release always names a slot that has had the longest time to drain,
     * and no slot stays cold while another is recycled over and over. */
    for (uint32_t k = 0; k < r->count; k++) {
        uint32_t i = (r->next_hint + k) % r->count;
        if (r->slots[i].state != TSOCK__SLOT_FREE)
            continue;
        r->slots[i].state = TSOCK__SLOT_FILLING;
        r->free_count--;
        r->next_hint = (i + 1) % r->count;
        return (int)i;
    }
    /* free_count said there was a free slot but none is: the ring is corrupt. */
    return -EAGAIN;
}

int
tsock__ring_publish(struct tsock__ring *r, uint32_t slot, uint64_t holders, uint64_t *seq)
{
    if (!slot_ok(r, slot) || r->slots[slot].state != TSOCK__SLOT_FILLING)
        return -EINVAL;
    struct tsock__ring_slot *s = &r->slots[slot];
    /* A publication with nobody to see it still takes a sequence number: the sequence is the
     * producer's batch number (tsock_batch_seq), which counts every batch published. */
    s->seq = r->next_seq++;
    if (seq != NULL)
        *seq = s->seq;
    if (holders == 0) {
        slot_set_free(r, s);
        return 0;
    }
    s->state = TSOCK__SLOT_HELD;
    s->holders = holders;
    return 0;
}

int
tsock__ring_abandon(struct tsock__ring *r, uint32_t slot)
{
    if (!slot_ok(r, slot) || r->slots[slot].state != TSOCK__SLOT_FILLING)
        return -EINVAL;
    slot_set_free(r, &r->slots[slot]);
    return 0;
}

int
tsock__ring_release(struct tsock__ring *r, uint32_t slot, uint32_t consumer, uint64_t seq)
{
    if (!slot_ok(r, slot) || !consumer_ok(consumer))
        return -EINVAL;
    struct tsock__ring_slot *s = &r->slots[slot];
    /* The seq comparison is what makes a late release harmless: once a slot has been freed and
     * republished, a release for its previous publication no longer matches. */
    if (s->state != TSOCK__SLOT_HELD || s->seq != seq || (s->holders & consumer_bit(consumer)) == 0)
        return -ENOENT;
    return slot_drop_holder(r, s, consumer);
}

int
tsock__ring_drop_consumer(struct tsock__ring *r, uint32_t consumer)
{
    if (r == NULL || r->count > TSOCK__RING_MAX_SLOTS || !consumer_ok(consumer))
        return -EINVAL;
    int freed = 0;
    for (uint32_t i = 0; i < r->count; i++) {
        struct tsock__ring_slot *s = &r->slots[i];
        if (s->state == TSOCK__SLOT_HELD && (s->holders & consumer_bit(consumer)) != 0)
            freed += slot_drop_holder(r, s, consumer);
    }
    return freed;
}

int
tsock__ring_held_by(const struct tsock__ring *r, uint32_t consumer)
{
    if (r == NULL || r->count > TSOCK__RING_MAX_SLOTS || !consumer_ok(consumer))
        return -EINVAL;
    int held = 0;
    for (uint32_t i = 0; i < r->count; i++) {
        const struct tsock__ring_slot *s = &r->slots[i];
        if (s->state == TSOCK__SLOT_HELD && (s->holders & consumer_bit(consumer)) != 0)
            held++;
    }
    return held;
}

int
tsock__ring_holds(const struct tsock__ring *r, uint32_t slot, uint32_t consumer, uint64_t seq)
{
    if (!slot_ok(r, slot) || !consumer_ok(consumer))
        return -EINVAL;
    return (tsock__ring_holders(r, slot, seq) & consumer_bit(consumer)) != 0;
}

uint64_t
tsock__ring_holders(const struct tsock__ring *r, uint32_t slot, uint64_t seq)
{
    if (!slot_ok(r, slot))
        return 0;
    const struct tsock__ring_slot *s = &r->slots[slot];
    return s->state == TSOCK__SLOT_HELD && s->seq == seq ? s->holders : 0;
}

/* A ring that init has set up (a zeroed one is not). */
static int
ring_ok(const struct tsock__ring *r)
{
    return r != NULL && r->count > 0 && r->count <= TSOCK__RING_MAX_SLOTS;
}

int
tsock__ring_held_count(const struct tsock__ring *r)
{
    if (!ring_ok(r))
        return -EINVAL;
    int held = 0;
    for (uint32_t i = 0; i < r->count; i++)
        held += r->slots[i].state == TSOCK__SLOT_HELD;
    return held;
}

int
tsock__ring_free_count(const struct tsock__ring *r)
{
    return ring_ok(r) ? (int)r->free_count : -EINVAL;
}

uint64_t
tsock__ring_published(const struct tsock__ring *r)
{
    return r != NULL ? r->next_seq : 0;
}

int
tsock__ring_oldest_seq(const struct tsock__ring *r, uint32_t consumer, uint64_t *seq)
{
    if (r == NULL || r->count > TSOCK__RING_MAX_SLOTS || !consumer_ok(consumer))
        return -EINVAL;
    int found = 0;
    uint64_t oldest = 0;
    for (uint32_t i = 0; i < r->count; i++) {
        const struct tsock__ring_slot *s = &r->slots[i];
        if (s->state != TSOCK__SLOT_HELD || (s->holders & consumer_bit(consumer)) == 0)
            continue;
        if (!found || s->seq < oldest)
            oldest = s->seq;
        found = 1;
    }
    if (found && seq != NULL)
        *seq = oldest;
    return found;
}

int
tsock__ring_lag(const struct tsock__ring *r, uint32_t consumer, uint64_t *lag)
{
    uint64_t oldest = 0;
    int found = tsock__ring_oldest_seq(r, consumer, &oldest);
    if (found < 0)
        return found;
    /* A held publication was issued, so next_seq > oldest. */
    if (lag != NULL)
        *lag = found ? r->next_seq - 1 - oldest : 0;
    return 0;
}

/* One slot's own invariants: a known state, holders exactly when HELD, and a sequence number
 * that was actually handed out. */
static int
slot_consistent(const struct tsock__ring *r, const struct tsock__ring_slot *s)
{
    switch (s->state) {
    case TSOCK__SLOT_FREE:
    case TSOCK__SLOT_FILLING: return s->holders == 0;
    case TSOCK__SLOT_HELD: return s->holders != 0 && s->seq < r->next_seq;
    default: return 0;
    }
}

/* The table past `count` is never used; anything there means a write out of bounds. */
static int
unused_slot_clean(const struct tsock__ring_slot *s)
{
    return s->state == TSOCK__SLOT_FREE && s->holders == 0 && s->seq == 0;
}

int
tsock__ring_check(const struct tsock__ring *r)
{
    if (r == NULL || r->count == 0 || r->count > TSOCK__RING_MAX_SLOTS)
        return -EPROTO;
    if (r->next_hint >= r->count)
        return -EPROTO;
    uint32_t free_slots = 0;
    for (uint32_t i = 0; i < r->count; i++) {
        if (!slot_consistent(r, &r->slots[i]))
            return -EPROTO;
        free_slots += r->slots[i].state == TSOCK__SLOT_FREE;
    }
    for (uint32_t i = r->count; i < TSOCK__RING_MAX_SLOTS; i++) {
        if (!unused_slot_clean(&r->slots[i]))
            return -EPROTO;
    }
    return free_slots == r->free_count ? 0 : -EPROTO;
}
