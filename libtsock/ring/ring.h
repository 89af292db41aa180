/* The slot ring's bookkeeping: which slot is free, being filled, or held by which consumers.
 *
 * Pure logic: no I/O, no locks (the producer engine serialises calls), no allocation after
 * init. Consumers are identified by a small index 0..TSOCK__RING_MAX_CONSUMERS-1 chosen by the
 * engine; a slot's holders are a bit set of those indices.
 *
 * State machine per slot:
 *   FREE --acquire--> FILLING --publish(holders)--> HELD (one bit per holder)
 *   HELD --release(last holder) or drop_consumer(last holder)--> FREE
 *   FILLING --publish(no holders) or abandon--> FREE
 * A release names the slot and the sequence number it was published with, so a late or
 * duplicated release for an older use of the slot is rejected instead of freeing new data.
 */
#ifndef TSOCK_RING_H
#define TSOCK_RING_H

#include <stdint.h>

#define TSOCK__RING_MAX_SLOTS 1024
#define TSOCK__RING_MAX_CONSUMERS 64

enum tsock__slot_state { TSOCK__SLOT_FREE = 0, TSOCK__SLOT_FILLING = 1, TSOCK__SLOT_HELD = 2 };

struct tsock__ring_slot {
    uint8_t state;
    uint64_t holders; /* bit i: consumer i has not released it yet */
    uint64_t seq;     /* sequence number of the current publication */
};

struct tsock__ring {
    uint32_t count;
    uint32_t free_count;
    uint32_t next_hint; /* where the search for a free slot starts: keeps reuse round-robin */
    uint64_t next_seq;  /* sequence number the next publish gets */
    struct tsock__ring_slot slots[TSOCK__RING_MAX_SLOTS];
};

/* Sets up `count` free slots (1..TSOCK__RING_MAX_SLOTS). Returns 0 or -EINVAL. */
int tsock__ring_init(struct tsock__ring *r, uint32_t count);

/* Takes a free slot into FILLING, preferring the slot after the last one taken. Returns the
 * slot index, or -EAGAIN when none is free. */
int tsock__ring_acquire(struct tsock__ring *r);

/* Moves a FILLING slot to HELD by `holders`, giving it the next sequence number (written to
 * *seq). With holders == 0 the slot is FREE at once. Returns 0, or -EINVAL when the slot is not
 * FILLING. */
int tsock__ring_publish(struct tsock__ring *r, uint32_t slot, uint64_t holders, uint64_t *seq);

/* Returns a FILLING slot to FREE without publishing. Returns 0 or -EINVAL. */
int tsock__ring_abandon(struct tsock__ring *r, uint32_t slot);

/* Consumer `consumer` is done with publication `seq` of `slot`. Returns 1 when this freed the
 * slot, 0 when other holders remain, -EINVAL for an out-of-range slot or consumer, and
 * -ENOENT when that consumer does not hold that publication (stale or duplicate release). */
int tsock__ring_release(struct tsock__ring *r, uint32_t slot, uint32_t consumer, uint64_t seq);

/* Releases every slot `consumer` holds (it left or died). Returns how many slots became FREE
 * as a result, or -EINVAL. */
int tsock__ring_drop_consumer(struct tsock__ring *r, uint32_t consumer);

/* Number of slots `consumer` holds right now (-EINVAL for a bad index). */
int tsock__ring_held_by(const struct tsock__ring *r, uint32_t consumer);

/* Queries, so that the engine never reads the ring's fields. They change nothing. */

/* 1 when `consumer` still holds publication `seq` of `slot` (HELD, that seq, its bit set), 0 when
 * not (released, dropped, never given it, or the slot was republished since), -EINVAL for an
 * out-of-range slot or consumer. */
int tsock__ring_holds(const struct tsock__ring *r, uint32_t slot, uint32_t consumer, uint64_t seq);

/* The consumers that still hold publication `seq` of `slot` (a bit set; 0 when that publication
 * is no longer held or the slot is out of range). Lets the engine filter a whole holder mask in
 * one call. */
uint64_t tsock__ring_holders(const struct tsock__ring *r, uint32_t slot, uint64_t seq);

/* Slots in HELD state (-EINVAL for an uninitialised ring). */
int tsock__ring_held_count(const struct tsock__ring *r);

/* Slots in FREE state (-EINVAL for an uninitialised ring, e.g. before the producer started). */
int tsock__ring_free_count(const struct tsock__ring *r);

/* Publications so far: the sequence number the next publish gets. */
uint64_t tsock__ring_published(const struct tsock__ring *r);

/* The oldest publication `consumer` still holds: writes its sequence number to *seq and returns
 * 1, returns 0 when it holds nothing, -EINVAL for a bad index. */
int tsock__ring_oldest_seq(const struct tsock__ring *r, uint32_t consumer, uint64_t *seq);

/* How far `consumer` trails: publications issued after the oldest one it still holds (0 when it
 * holds nothing or holds only the newest), or -EINVAL for a bad index. Written to *lag. */
int tsock__ring_lag(const struct tsock__ring *r, uint32_t consumer, uint64_t *lag);

/* Checks the invariants (free_count matches, FREE and FILLING slots have no holders, HELD slots
 * have holders and a sequence number already issued; several slots may be FILLING at once). Returns
 * 0 or -EPROTO; for tests and debug builds. */
int tsock__ring_check(const struct tsock__ring *r);

#endif
