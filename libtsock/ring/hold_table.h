/* The consumer's side of the ring: which producer batches it was announced, which it still
 * reads, and which releases it owes the producer.
 *
 * Pure logic: no I/O, no locks (the consumer engine serialises calls under its mutex), and
 * allocation only in init. Each slot of the producer's ring has one entry here. A batch the
 * producer announces to this consumer holds its slot through two kinds of reference:
 *   - the queue's: from announce until every sample of the batch has been taken (or the queue
 *     is dropped); the queue is a FIFO of announced batches, read from its head;
 *   - one per view: a caller's zero-copy batch that points into the slot (take with `ref`, or
 *     ref), until unref.
 * When the last reference goes, (slot, seq) joins the queue of pending releases, which the
 * engine drains with take_releases and sends to the producer. Until then the slot counts as
 * still ours: the producer cannot have reused it, so an announce for it is refused.
 *
 * Per slot:
 *   FREE --announce--> HELD (queued, plus any views) --last reference goes--> RELEASING
 *   RELEASING --take_releases--> FREE
 * reset forgets everything at once (the producer is gone; nothing is owed to a new one).
 *
 * Every function validates its arguments before changing anything, so a rejected call leaves
 * the table as it was: the engine turns the error into a protocol error or a log line.
 */
#ifndef TSOCK_HOLD_TABLE_H
#define TSOCK_HOLD_TABLE_H

#include <stdint.h>

/* What the table remembers of a producer batch (the fields of a BATCH message the consumer
 * needs after announce; the engine copies them from its decoded message). */
struct tsock__hold_batch {
    uint32_t slot;
    uint32_t samples;  /* >= 1 */
    uint64_t seq;      /* the producer's publication number for this use of the slot */
    uint64_t position; /* stream position of the batch's first sample */
    uint64_t epoch;
    uint64_t index_in_epoch;
    uint32_t flags; /* the BATCH message's flags, kept as they came */
};

/* A release the consumer owes the producer: publication `seq` of `slot` is no longer read. */
struct tsock__hold_release {
    uint32_t slot;
    uint64_t seq;
};

/* One slot's entry (internal to hold_table.c; in the header so the table can be embedded). */
struct tsock__hold_slot {
    uint8_t queued;  /* the batch is in the queue (the queue's reference) */
    uint8_t pending; /* released: (slot, batch.seq) is in the pending-release queue */
    uint32_t views;  /* references held by views */
    struct tsock__hold_batch batch;
};

struct tsock__hold_table {
    uint32_t slots;
    struct tsock__hold_slot *entry; /* `slots` entries */
    uint32_t *queue;                /* announced slots, oldest first: a ring of `slots` */
    uint32_t queue_head, queue_len;
    uint32_t head_offset;                 /* samples of the head batch already taken */
    struct tsock__hold_release *releases; /* pending releases, oldest first: `slots` entries */
    uint32_t release_len;
    uint32_t held; /* slots with at least one reference */
};

/* Allocates a table for a ring of `slots` slots (1..TSOCK__RING_MAX_SLOTS), all FREE. Returns 0,
 * -EINVAL or -ENOMEM (the table is then empty and free is still safe). */
int tsock__hold_table_init(struct tsock__hold_table *t, uint32_t slots);

/* Frees what init allocated and zeroes the table. A zeroed table or NULL is a no-op. */
void tsock__hold_table_free(struct tsock__hold_table *t);

/* Forgets every batch, view and pending release (e.g. the producer is gone and a new session
 * begins): all slots FREE, nothing owed. Views the caller still has must not be unref'd
 * afterwards (the engine tells them apart by session). */
void tsock__hold_table_reset(struct tsock__hold_table *t);

/* The producer announced batch `b`: it joins the tail of the queue and holds its slot.
 * Returns 0; -EINVAL for a slot out of range or a batch of no samples; -EBUSY when the slot is
 * still held or its release has not been taken yet (the producer cannot legitimately have
 * reused it: a protocol error). */
int tsock__hold_table_announce(struct tsock__hold_table *t, const struct tsock__hold_batch *b);

/* The oldest announced batch not fully taken, or NULL when the queue is empty; *offset (may be
 * NULL) gets how many of its samples were taken already. The pointer stays valid until the
 * slot is announced again or the table is reset or freed. */
const struct tsock__hold_batch *tsock__hold_table_head(const struct tsock__hold_table *t,
                                                       uint32_t *offset);

/* Samples of the head batch not taken yet (0 when the queue is empty). */
uint32_t tsock__hold_table_available(const struct tsock__hold_table *t);

/* Takes n (1..available) samples from the head batch. With `ref` non-zero the caller also gets
 * a view reference to the head's slot, taken before the queue's reference can go, so a view of
 * the last samples never sees its slot released under it. When the head is exhausted it leaves
 * the queue and the queue's reference is dropped (queuing the release when it was the last).
 * Returns 1 when the head was exhausted, 0 when samples remain, -ENOENT when the queue is
 * empty, -EINVAL for n == 0 or n > available. */
int tsock__hold_table_take(struct tsock__hold_table *t, uint32_t n, int ref);

/* Takes and discards up to n samples across the queue, from its head (drop_last's tail).
 * Returns how many were discarded: less than n only when the queue ran out. */
uint64_t tsock__hold_table_discard(struct tsock__hold_table *t, uint64_t n);

/* Drops every queued batch (pausing between epochs): each loses the queue's reference, views
 * keep theirs. Returns how many batches left the queue. */
uint32_t tsock__hold_table_drop_queue(struct tsock__hold_table *t);

/* Adds a view reference to publication `seq` of `slot`, which must be held (a released slot is
 * not revived). Returns 0, -EINVAL for a slot out of range, -ENOENT when that publication is not
 * held. */
int tsock__hold_table_ref(struct tsock__hold_table *t, uint32_t slot, uint64_t seq);

/* Drops a view reference to publication `seq` of `slot`. Returns 1 when it was the slot's last
 * reference (the release is queued now), 0 when references remain, -EINVAL for a slot out of
 * range, -ENOENT when no view of that publication is held (stale or duplicate unref; the queue's
 * own reference is never dropped by unref). */
int tsock__hold_table_unref(struct tsock__hold_table *t, uint32_t slot, uint64_t seq);

/* Moves up to `cap` pending releases, oldest first, into out[] and forgets them; their slots
 * are FREE again. Returns how many were moved (the rest stay pending). At most `slots` are ever
 * pending. */
uint32_t tsock__hold_table_take_releases(struct tsock__hold_table *t,
                                         struct tsock__hold_release *out, uint32_t cap);

/* 1 when this consumer still holds publication `seq` of `slot` (queued or viewed), 0 when not
 * (never announced, released, or another publication), -EINVAL for a slot out of range. */
int tsock__hold_table_holds(const struct tsock__hold_table *t, uint32_t slot, uint64_t seq);

/* References to `slot` (the queue's plus views'), or -EINVAL for a slot out of range. */
int tsock__hold_table_refs(const struct tsock__hold_table *t, uint32_t slot);

/* Slots with at least one reference. */
uint32_t tsock__hold_table_held_count(const struct tsock__hold_table *t);

/* Batches in the queue (announced, not fully taken). */
uint32_t tsock__hold_table_queued(const struct tsock__hold_table *t);

/* Releases waiting for take_releases. */
uint32_t tsock__hold_table_pending(const struct tsock__hold_table *t);

/* Checks the invariants (queue and release queue agree with the per-slot entries, no slot twice,
 * counts match, the head offset inside the head batch). Returns 0 or -EPROTO; for tests and
 * debug builds. */
int tsock__hold_table_check(const struct tsock__hold_table *t);

#endif
