/* The slot ring's state machine: every legal and illegal transition, seq-checked releases,
 * consumer drops, round-robin reuse, and a long random run checked step by step against a
 * simple reference model. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "ring/ring.h"

/* Big (tens of KiB), so static rather than on the stack. */
static struct tsock__ring ring;
static struct tsock__ring saved;

static uint64_t
bit(uint32_t consumer)
{
    return (uint64_t)1 << consumer;
}

/* Field-by-field, so struct padding never decides the answer. */
static int
rings_equal(const struct tsock__ring *a, const struct tsock__ring *b)
{
    if (a->count != b->count || a->free_count != b->free_count || a->next_hint != b->next_hint ||
        a->next_seq != b->next_seq)
        return 0;
    for (uint32_t i = 0; i < TSOCK__RING_MAX_SLOTS; i++) {
        const struct tsock__ring_slot *x = &a->slots[i], *y = &b->slots[i];
        if (x->state != y->state || x->holders != y->holders || x->seq != y->seq)
            return 0;
    }
    return 1;
}

/* Acquires a slot and publishes it to `holders`; returns the slot and sets *seq. */
static uint32_t
fill(struct tsock__ring *r, uint64_t holders, uint64_t *seq)
{
    int slot = tsock__ring_acquire(r);
    CHECK(slot >= 0);
    if (slot < 0)
        return 0;
    CHECK_EQ(tsock__ring_publish(r, (uint32_t)slot, holders, seq), 0);
    return (uint32_t)slot;
}

static void
test_init(void)
{
    CHECK_EQ(tsock__ring_init(&ring, 0), -EINVAL);
    CHECK_EQ(tsock__ring_init(&ring, TSOCK__RING_MAX_SLOTS + 1), -EINVAL);
    CHECK_EQ(tsock__ring_init(NULL, 4), -EINVAL);
    CHECK_EQ(tsock__ring_init(&ring, TSOCK__RING_MAX_SLOTS), 0);
    CHECK_EQ(ring.free_count, TSOCK__RING_MAX_SLOTS);
    CHECK_EQ(tsock__ring_check(&ring), 0);

    CHECK_EQ(tsock__ring_init(&ring, 1), 0);
    CHECK_EQ(ring.count, 1);
    CHECK_EQ(ring.free_count, 1);
    CHECK_EQ(ring.next_seq, 0);
    CHECK_EQ(ring.slots[0].state, TSOCK__SLOT_FREE);
    CHECK_EQ(ring.slots[0].holders, 0);
    CHECK_EQ(tsock__ring_check(&ring), 0);
}

/* FREE -> FILLING -> HELD -> (partial releases) -> FREE, with the seq and counters along the
 * way. Uses consumers 0 and 63 so both ends of the bit set are covered. */
static void
test_full_cycle(void)
{
    uint64_t seq = 99;
    CHECK_EQ(tsock__ring_init(&ring, 3), 0);
    CHECK_EQ(tsock__ring_acquire(&ring), 0);
    CHECK_EQ(ring.slots[0].state, TSOCK__SLOT_FILLING);
    CHECK_EQ(ring.free_count, 2);
    CHECK_EQ(tsock__ring_check(&ring), 0);

    CHECK_EQ(tsock__ring_publish(&ring, 0, bit(0) | bit(5) | bit(63), &seq), 0);
    CHECK_EQ(seq, 0);
    CHECK_EQ(ring.next_seq, 1);
    CHECK_EQ(ring.slots[0].state, TSOCK__SLOT_HELD);
    CHECK(ring.slots[0].holders == (bit(0) | bit(5) | bit(63)));
    CHECK_EQ(ring.free_count, 2);
    CHECK_EQ(tsock__ring_check(&ring), 0);

    CHECK_EQ(tsock__ring_release(&ring, 0, 63, seq), 0);
    CHECK_EQ(tsock__ring_held_by(&ring, 63), 0);
    CHECK_EQ(tsock__ring_release(&ring, 0, 0, seq), 0);
    CHECK_EQ(ring.slots[0].state, TSOCK__SLOT_HELD);
    CHECK_EQ(tsock__ring_check(&ring), 0);
    CHECK_EQ(tsock__ring_release(&ring, 0, 5, seq), 1);
    CHECK_EQ(ring.slots[0].state, TSOCK__SLOT_FREE);
    CHECK_EQ(ring.slots[0].holders, 0);
    CHECK_EQ(ring.free_count, 3);
    CHECK_EQ(tsock__ring_check(&ring), 0);

    /* Sequence numbers keep counting across slots and reuses. */
    CHECK_EQ(tsock__ring_acquire(&ring), 1);
    CHECK_EQ(tsock__ring_publish(&ring, 1, bit(1), &seq), 0);
    CHECK_EQ(seq, 1);
    CHECK_EQ(tsock__ring_publish(&ring, 1, bit(1), &seq), -EINVAL);
    CHECK_EQ(seq, 1);
}

/* FILLING -> FREE directly: a publication nobody receives, and an abandon. */
static void
test_fill_to_free(void)
{
    uint64_t seq = 99;
    CHECK_EQ(tsock__ring_init(&ring, 2), 0);
    CHECK_EQ(tsock__ring_acquire(&ring), 0);
    CHECK_EQ(tsock__ring_publish(&ring, 0, 0, &seq), 0);
    CHECK_EQ(seq, 0);
    CHECK_EQ(ring.slots[0].state, TSOCK__SLOT_FREE);
    CHECK_EQ(ring.free_count, 2);
    CHECK_EQ(tsock__ring_check(&ring), 0);
    /* The empty publication still used up its number: the next batch is batch 1. */
    CHECK_EQ(ring.next_seq, 1);
    CHECK_EQ(tsock__ring_release(&ring, 0, 0, 0), -ENOENT);

    CHECK_EQ(tsock__ring_acquire(&ring), 1);
    CHECK_EQ(tsock__ring_abandon(&ring, 1), 0);
    CHECK_EQ(ring.slots[1].state, TSOCK__SLOT_FREE);
    CHECK_EQ(ring.free_count, 2);
    CHECK_EQ(ring.next_seq, 1);
    CHECK_EQ(tsock__ring_check(&ring), 0);

    /* A NULL seq pointer is allowed. */
    CHECK_EQ(tsock__ring_acquire(&ring), 0);
    CHECK_EQ(tsock__ring_publish(&ring, 0, bit(2), NULL), 0);
    CHECK_EQ(ring.slots[0].seq, 1);
}

/* Each illegal call fails with its documented code and leaves the ring untouched. */
static void
expect_rejected(int rc, int want)
{
    CHECK_EQ(rc, want);
    CHECK(rings_equal(&ring, &saved));
    CHECK_EQ(tsock__ring_check(&ring), 0);
}

static void
test_illegal_transitions(void)
{
    uint64_t seq;
    CHECK_EQ(tsock__ring_init(&ring, 4), 0);
    uint32_t held = fill(&ring, bit(1), &seq); /* slot 0: HELD by 1 */
    CHECK_EQ(tsock__ring_acquire(&ring), 1);   /* slot 1: FILLING; slots 2, 3: FREE */
    saved = ring;

    /* publish: only from FILLING, only in range. */
    expect_rejected(tsock__ring_publish(&ring, 2, bit(0), &seq), -EINVAL);
    expect_rejected(tsock__ring_publish(&ring, held, bit(0), &seq), -EINVAL);
    expect_rejected(tsock__ring_publish(&ring, 4, bit(0), &seq), -EINVAL);
    expect_rejected(tsock__ring_publish(&ring, UINT32_MAX, bit(0), &seq), -EINVAL);
    /* abandon: only from FILLING. */
    expect_rejected(tsock__ring_abandon(&ring, 2), -EINVAL);
    expect_rejected(tsock__ring_abandon(&ring, held), -EINVAL);
    expect_rejected(tsock__ring_abandon(&ring, 4), -EINVAL);
    /* release: only a HELD slot, by a holder, of the current publication. */
    expect_rejected(tsock__ring_release(&ring, 2, 1, 0), -ENOENT);
    expect_rejected(tsock__ring_release(&ring, 1, 1, 0), -ENOENT);
    expect_rejected(tsock__ring_release(&ring, 1, 1, 1), -ENOENT);
    expect_rejected(tsock__ring_release(&ring, held, 0, seq), -ENOENT);
    expect_rejected(tsock__ring_release(&ring, held, 1, seq + 1), -ENOENT);
    expect_rejected(tsock__ring_release(&ring, 4, 1, seq), -EINVAL);
    expect_rejected(tsock__ring_release(&ring, held, TSOCK__RING_MAX_CONSUMERS, seq), -EINVAL);
    expect_rejected(tsock__ring_release(&ring, held, UINT32_MAX, seq), -EINVAL);
    /* drop_consumer and held_by: consumer index in range. */
    expect_rejected(tsock__ring_drop_consumer(&ring, TSOCK__RING_MAX_CONSUMERS), -EINVAL);
    expect_rejected(tsock__ring_held_by(&ring, TSOCK__RING_MAX_CONSUMERS), -EINVAL);
    /* A consumer with nothing to drop is no error, and changes nothing. */
    expect_rejected(tsock__ring_drop_consumer(&ring, 0), 0);
}

/* A release names the publication: late and duplicated releases never free newer data. */
static void
test_stale_and_duplicate_release(void)
{
    uint64_t first, second;
    CHECK_EQ(tsock__ring_init(&ring, 1), 0);
    uint32_t slot = fill(&ring, bit(0) | bit(1), &first);

    CHECK_EQ(tsock__ring_release(&ring, slot, 0, first), 0);
    CHECK_EQ(tsock__ring_release(&ring, slot, 0, first), -ENOENT); /* duplicate */
    CHECK_EQ(ring.slots[slot].state, TSOCK__SLOT_HELD);
    CHECK(ring.slots[slot].holders == bit(1));
    CHECK_EQ(tsock__ring_release(&ring, slot, 1, first), 1);
    CHECK_EQ(tsock__ring_release(&ring, slot, 1, first), -ENOENT); /* duplicate of the last */
    CHECK_EQ(tsock__ring_check(&ring), 0);

    /* The only slot is reused: releases for the first publication must not touch it. */
    CHECK_EQ(fill(&ring, bit(0) | bit(1), &second), slot);
    CHECK(second != first);
    saved = ring;
    expect_rejected(tsock__ring_release(&ring, slot, 0, first), -ENOENT);
    expect_rejected(tsock__ring_release(&ring, slot, 1, first), -ENOENT);
    CHECK_EQ(tsock__ring_release(&ring, slot, 1, second), 0);
    CHECK_EQ(tsock__ring_release(&ring, slot, 0, second), 1);
    CHECK_EQ(tsock__ring_check(&ring), 0);
}

/* Consumers release in any order, across slots and across each other. */
static void
test_out_of_order_release(void)
{
    enum { N = 6 };
    uint32_t slot[N];
    uint64_t seq[N];
    CHECK_EQ(tsock__ring_init(&ring, N), 0);
    for (int i = 0; i < N; i++)
        slot[i] = fill(&ring, bit(2) | bit(9), &seq[i]);
    CHECK_EQ(tsock__ring_acquire(&ring), -EAGAIN);

    /* Consumer 9 goes newest first, consumer 2 in a scrambled order. */
    for (int i = N - 1; i >= 0; i--)
        CHECK_EQ(tsock__ring_release(&ring, slot[i], 9, seq[i]), 0);
    CHECK_EQ(ring.free_count, 0);
    static const int order[N] = {3, 0, 5, 1, 4, 2};
    for (int k = 0; k < N; k++) {
        int i = order[k];
        CHECK_EQ(tsock__ring_release(&ring, slot[i], 2, seq[i]), 1);
        CHECK_EQ(ring.slots[slot[i]].state, TSOCK__SLOT_FREE);
        CHECK_EQ(ring.free_count, (uint32_t)k + 1);
        CHECK_EQ(tsock__ring_check(&ring), 0);
    }

    /* Interleaved: a slot freed by one consumer while another still holds older slots. */
    CHECK_EQ(tsock__ring_init(&ring, 3), 0);
    uint64_t s0, s1, s2;
    uint32_t a = fill(&ring, bit(0) | bit(1), &s0);
    uint32_t b = fill(&ring, bit(0), &s1);
    uint32_t c = fill(&ring, bit(1), &s2);
    CHECK_EQ(tsock__ring_release(&ring, c, 1, s2), 1);
    CHECK_EQ(tsock__ring_release(&ring, a, 0, s0), 0);
    CHECK_EQ(tsock__ring_release(&ring, b, 0, s1), 1);
    CHECK_EQ(tsock__ring_release(&ring, a, 1, s0), 1);
    CHECK_EQ(ring.free_count, 3);
    CHECK_EQ(tsock__ring_check(&ring), 0);
}

/* A consumer holding several slots leaves: slots it alone held become free, shared ones keep
 * their other holders, and its stale releases are refused afterwards. */
static void
test_drop_consumer(void)
{
    uint64_t seq[6];
    uint32_t slot[6];
    CHECK_EQ(tsock__ring_init(&ring, 8), 0);
    slot[0] = fill(&ring, bit(3), &seq[0]);
    slot[1] = fill(&ring, bit(3) | bit(5), &seq[1]);
    slot[2] = fill(&ring, bit(3) | bit(5) | bit(7), &seq[2]);
    slot[3] = fill(&ring, bit(3), &seq[3]);
    slot[4] = fill(&ring, bit(5), &seq[4]);
    slot[5] = fill(&ring, bit(3) | bit(63), &seq[5]);
    int filling = tsock__ring_acquire(&ring);
    CHECK(filling >= 0);
    CHECK_EQ(tsock__ring_held_by(&ring, 3), 5);
    CHECK_EQ(tsock__ring_held_by(&ring, 5), 3);

    CHECK_EQ(tsock__ring_drop_consumer(&ring, 3), 2);
    CHECK_EQ(tsock__ring_check(&ring), 0);
    CHECK_EQ(tsock__ring_held_by(&ring, 3), 0);
    CHECK_EQ(tsock__ring_held_by(&ring, 5), 3);
    CHECK_EQ(tsock__ring_held_by(&ring, 7), 1);
    CHECK_EQ(tsock__ring_held_by(&ring, 63), 1);
    CHECK_EQ(ring.slots[slot[0]].state, TSOCK__SLOT_FREE);
    CHECK_EQ(ring.slots[slot[3]].state, TSOCK__SLOT_FREE);
    CHECK(ring.slots[slot[1]].holders == bit(5));
    CHECK(ring.slots[slot[2]].holders == (bit(5) | bit(7)));
    CHECK(ring.slots[slot[4]].holders == bit(5));
    CHECK(ring.slots[slot[5]].holders == bit(63));
    CHECK_EQ(ring.slots[filling].state, TSOCK__SLOT_FILLING);
    CHECK_EQ(ring.free_count, 3); /* 8 slots - 4 held - 1 filling */

    for (int i = 0; i < 6; i++)
        CHECK_EQ(tsock__ring_release(&ring, slot[i], 3, seq[i]), -ENOENT);
    CHECK_EQ(tsock__ring_drop_consumer(&ring, 3), 0);

    /* Dropping the other holders frees the rest; the FILLING slot is not theirs to free. */
    CHECK_EQ(tsock__ring_drop_consumer(&ring, 7), 0);
    CHECK_EQ(tsock__ring_drop_consumer(&ring, 5), 3);
    CHECK_EQ(tsock__ring_drop_consumer(&ring, 63), 1);
    CHECK_EQ(ring.free_count, 7);
    CHECK_EQ(ring.slots[filling].state, TSOCK__SLOT_FILLING);
    CHECK_EQ(tsock__ring_check(&ring), 0);
}

/* Acquisition goes round the ring from the slot after the last one taken. */
static void
test_round_robin(void)
{
    CHECK_EQ(tsock__ring_init(&ring, 4), 0);
    /* Freed at once each time, yet the next acquire moves on instead of reusing slot 0. */
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(tsock__ring_acquire(&ring), i % 4);
        CHECK_EQ(tsock__ring_abandon(&ring, (uint32_t)(i % 4)), 0);
    }
    CHECK_EQ(ring.next_hint, 10 % 4);

    /* With gaps: busy slots are skipped, the search wraps. */
    CHECK_EQ(tsock__ring_init(&ring, 4), 0);
    CHECK_EQ(tsock__ring_acquire(&ring), 0);
    CHECK_EQ(tsock__ring_acquire(&ring), 1);
    CHECK_EQ(tsock__ring_acquire(&ring), 2);
    CHECK_EQ(tsock__ring_abandon(&ring, 0), 0);
    CHECK_EQ(tsock__ring_acquire(&ring), 3);
    CHECK_EQ(tsock__ring_acquire(&ring), 0); /* wrapped */
    CHECK_EQ(tsock__ring_abandon(&ring, 2), 0);
    CHECK_EQ(tsock__ring_abandon(&ring, 3), 0);
    CHECK_EQ(tsock__ring_acquire(&ring), 2); /* after 0: 1 busy, 2 free */
    CHECK_EQ(tsock__ring_acquire(&ring), 3);
    CHECK_EQ(tsock__ring_acquire(&ring), -EAGAIN);
    CHECK_EQ(tsock__ring_check(&ring), 0);

    /* One slot: always slot 0. */
    CHECK_EQ(tsock__ring_init(&ring, 1), 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(tsock__ring_acquire(&ring), 0);
        CHECK_EQ(tsock__ring_acquire(&ring), -EAGAIN);
        CHECK_EQ(tsock__ring_publish(&ring, 0, 0, NULL), 0);
    }
}

/* A full ring refuses to hand out a slot, without side effects, until a slot is freed. */
static void
test_acquire_when_full(void)
{
    uint64_t seq[5];
    CHECK_EQ(tsock__ring_init(&ring, 5), 0);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(fill(&ring, bit(0) | bit(1), &seq[i]), (uint32_t)i);
    saved = ring;
    expect_rejected(tsock__ring_acquire(&ring), -EAGAIN);
    expect_rejected(tsock__ring_acquire(&ring), -EAGAIN);

    /* Releasing by one holder is not enough. */
    CHECK_EQ(tsock__ring_release(&ring, 2, 0, seq[2]), 0);
    CHECK_EQ(tsock__ring_acquire(&ring), -EAGAIN);
    CHECK_EQ(tsock__ring_release(&ring, 2, 1, seq[2]), 1);
    CHECK_EQ(tsock__ring_acquire(&ring), 2);
    CHECK_EQ(tsock__ring_acquire(&ring), -EAGAIN);
    CHECK_EQ(tsock__ring_check(&ring), 0);
}

/* tsock__ring_check is not vacuous: it notices each kind of corruption. */
static void
test_check_detects_corruption(void)
{
    uint64_t seq;
    CHECK_EQ(tsock__ring_init(&ring, 4), 0);
    fill(&ring, bit(0), &seq);
    CHECK_EQ(tsock__ring_acquire(&ring), 1);
    saved = ring;
    CHECK_EQ(tsock__ring_check(&ring), 0);
    CHECK_EQ(tsock__ring_check(NULL), -EPROTO);

    ring.free_count++;
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    ring.slots[2].holders = bit(4); /* FREE with a holder */
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    ring.slots[1].holders = bit(4); /* FILLING with a holder */
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    ring.slots[0].holders = 0; /* HELD by nobody */
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    ring.slots[0].seq = ring.next_seq; /* a number never handed out */
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    ring.slots[3].state = 7;
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    ring.next_hint = 4;
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    ring.slots[4].state = TSOCK__SLOT_FILLING; /* past the end */
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    ring.count = 0;
    CHECK_EQ(tsock__ring_check(&ring), -EPROTO);
    ring = saved;
    CHECK_EQ(tsock__ring_check(&ring), 0);
}

/* The queries the engine uses instead of reading the ring's fields. */
static void
test_queries(void)
{
    uint64_t seq[4], got = 99, lag = 99;
    /* A ring never set up (the producer before start) has no counts to give. */
    memset(&ring, 0, sizeof ring);
    CHECK_EQ(tsock__ring_free_count(&ring), -EINVAL);
    CHECK_EQ(tsock__ring_held_count(&ring), -EINVAL);
    CHECK_EQ(tsock__ring_free_count(NULL), -EINVAL);
    CHECK_EQ(tsock__ring_held_count(NULL), -EINVAL);
    CHECK_EQ(tsock__ring_published(NULL), 0);
    CHECK_EQ(tsock__ring_holds(NULL, 0, 0, 0), -EINVAL);
    CHECK_EQ(tsock__ring_holders(NULL, 0, 0), 0);
    CHECK_EQ(tsock__ring_oldest_seq(NULL, 0, &got), -EINVAL);
    CHECK_EQ(tsock__ring_lag(NULL, 0, &lag), -EINVAL);

    CHECK_EQ(tsock__ring_init(&ring, 4), 0);
    CHECK_EQ(tsock__ring_free_count(&ring), 4);
    CHECK_EQ(tsock__ring_held_count(&ring), 0);
    CHECK_EQ(tsock__ring_published(&ring), 0);
    CHECK_EQ(tsock__ring_oldest_seq(&ring, 0, &got), 0);
    CHECK_EQ(got, 99); /* untouched when nothing is held */
    CHECK_EQ(tsock__ring_lag(&ring, 0, &lag), 0);
    CHECK_EQ(lag, 0);

    uint32_t s0 = fill(&ring, bit(0) | bit(63), &seq[0]);
    uint32_t s1 = fill(&ring, bit(0), &seq[1]);
    CHECK_EQ(tsock__ring_publish(&ring, (uint32_t)tsock__ring_acquire(&ring), 0, &seq[2]), 0);
    uint32_t s3 = fill(&ring, bit(5), &seq[3]);
    int filling = tsock__ring_acquire(&ring);
    CHECK(filling >= 0);
    CHECK_EQ(tsock__ring_free_count(&ring), 0);
    CHECK_EQ(tsock__ring_held_count(&ring), 3);
    CHECK_EQ(tsock__ring_published(&ring), 4);

    saved = ring;
    CHECK_EQ(tsock__ring_holds(&ring, s0, 0, seq[0]), 1);
    CHECK_EQ(tsock__ring_holds(&ring, s0, 63, seq[0]), 1);
    CHECK_EQ(tsock__ring_holds(&ring, s0, 5, seq[0]), 0);
    CHECK_EQ(tsock__ring_holds(&ring, s0, 0, seq[1]), 0);
    CHECK_EQ(tsock__ring_holds(&ring, (uint32_t)filling, 0, 0), 0);
    CHECK_EQ(tsock__ring_holds(&ring, 4, 0, seq[0]), -EINVAL);
    CHECK_EQ(tsock__ring_holds(&ring, s0, TSOCK__RING_MAX_CONSUMERS, seq[0]), -EINVAL);
    CHECK(tsock__ring_holders(&ring, s0, seq[0]) == (bit(0) | bit(63)));
    CHECK(tsock__ring_holders(&ring, s0, seq[1]) == 0);
    CHECK(tsock__ring_holders(&ring, s3, seq[3]) == bit(5));
    CHECK(tsock__ring_holders(&ring, 4, seq[0]) == 0);
    CHECK_EQ(tsock__ring_oldest_seq(&ring, 0, &got), 1);
    CHECK_EQ(got, seq[0]);
    CHECK_EQ(tsock__ring_oldest_seq(&ring, 5, &got), 1);
    CHECK_EQ(got, seq[3]);
    CHECK_EQ(tsock__ring_oldest_seq(&ring, 5, NULL), 1);
    CHECK_EQ(tsock__ring_oldest_seq(&ring, TSOCK__RING_MAX_CONSUMERS, &got), -EINVAL);
    CHECK_EQ(tsock__ring_lag(&ring, 0, &lag), 0);
    CHECK_EQ(lag, 3); /* seq 0 held, seq 3 the newest */
    CHECK_EQ(tsock__ring_lag(&ring, 5, &lag), 0);
    CHECK_EQ(lag, 0); /* holds the newest only */
    CHECK_EQ(tsock__ring_lag(&ring, 7, &lag), 0);
    CHECK_EQ(lag, 0); /* holds nothing */
    CHECK_EQ(tsock__ring_lag(&ring, TSOCK__RING_MAX_CONSUMERS, &lag), -EINVAL);
    CHECK(rings_equal(&ring, &saved)); /* queries change nothing */

    /* Consumer 0 lets go of the oldest: its lag shrinks; 63 still holds it. */
    CHECK_EQ(tsock__ring_release(&ring, s0, 0, seq[0]), 0);
    CHECK_EQ(tsock__ring_holds(&ring, s0, 0, seq[0]), 0);
    CHECK(tsock__ring_holders(&ring, s0, seq[0]) == bit(63));
    CHECK_EQ(tsock__ring_lag(&ring, 0, &lag), 0);
    CHECK_EQ(lag, 2);
    /* Dropping 63 frees the slot; once republished, the old seq names nothing. */
    CHECK_EQ(tsock__ring_drop_consumer(&ring, 63), 1);
    CHECK_EQ(tsock__ring_free_count(&ring), 1);
    CHECK_EQ(tsock__ring_held_count(&ring), 2);
    CHECK_EQ(tsock__ring_oldest_seq(&ring, 63, &got), 0);
    uint64_t again;
    CHECK_EQ(fill(&ring, bit(63), &again), s0);
    CHECK_EQ(tsock__ring_holds(&ring, s0, 63, seq[0]), 0);
    CHECK_EQ(tsock__ring_holds(&ring, s0, 63, again), 1);
    CHECK_EQ(tsock__ring_oldest_seq(&ring, 0, &got), 1);
    CHECK_EQ(got, seq[1]);
    CHECK_EQ(tsock__ring_release(&ring, s1, 0, seq[1]), 1);
    CHECK_EQ(tsock__ring_oldest_seq(&ring, 0, &got), 0);
    CHECK_EQ(tsock__ring_check(&ring), 0);
}

/* ---- property test: random operations against a reference model ------------------------- */

/* The model keeps the documented behaviour in the plainest form, for count <= 64. */
struct model {
    uint32_t count;
    uint32_t hint;
    uint64_t next_seq;
    uint8_t state[64];
    uint64_t holders[64];
    uint64_t seq[64];
};

static uint64_t rng_state = 0x1234567887654321u;

/* xorshift64*: the test's own generator, independent of the code under test. */
static uint64_t
rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Du;
}

static uint32_t
rnd_below(uint32_t n)
{
    return (uint32_t)((rnd() >> 32) % n);
}

static uint32_t
model_free_count(const struct model *m)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->count; i++)
        n += m->state[i] == TSOCK__SLOT_FREE;
    return n;
}

static int
model_held_by(const struct model *m, uint32_t consumer)
{
    if (consumer >= 64)
        return -EINVAL;
    int n = 0;
    for (uint32_t i = 0; i < m->count; i++)
        n += m->state[i] == TSOCK__SLOT_HELD && (m->holders[i] >> consumer & 1);
    return n;
}

static int
model_acquire(struct model *m)
{
    for (uint32_t k = 0; k < m->count; k++) {
        uint32_t i = (m->hint + k) % m->count;
        if (m->state[i] == TSOCK__SLOT_FREE) {
            m->state[i] = TSOCK__SLOT_FILLING;
            m->hint = (i + 1) % m->count;
            return (int)i;
        }
    }
    return -EAGAIN;
}

static int
model_publish(struct model *m, uint32_t slot, uint64_t holders, uint64_t *seq)
{
    if (slot >= m->count || m->state[slot] != TSOCK__SLOT_FILLING)
        return -EINVAL;
    *seq = m->next_seq++;
    m->seq[slot] = *seq;
    m->holders[slot] = holders;
    m->state[slot] = holders ? TSOCK__SLOT_HELD : TSOCK__SLOT_FREE;
    return 0;
}

static int
model_abandon(struct model *m, uint32_t slot)
{
    if (slot >= m->count || m->state[slot] != TSOCK__SLOT_FILLING)
        return -EINVAL;
    m->state[slot] = TSOCK__SLOT_FREE;
    return 0;
}

static int
model_release(struct model *m, uint32_t slot, uint32_t consumer, uint64_t seq)
{
    if (slot >= m->count || consumer >= 64)
        return -EINVAL;
    if (m->state[slot] != TSOCK__SLOT_HELD || m->seq[slot] != seq ||
        !(m->holders[slot] >> consumer & 1))
        return -ENOENT;
    m->holders[slot] &= ~bit(consumer);
    if (m->holders[slot])
        return 0;
    m->state[slot] = TSOCK__SLOT_FREE;
    return 1;
}

static int
model_drop(struct model *m, uint32_t consumer)
{
    if (consumer >= 64)
        return -EINVAL;
    int freed = 0;
    for (uint32_t i = 0; i < m->count; i++) {
        if (m->state[i] == TSOCK__SLOT_HELD && (m->holders[i] >> consumer & 1))
            freed += model_release(m, i, consumer, m->seq[i]);
    }
    return freed;
}

static int
matches_model(const struct tsock__ring *r, const struct model *m)
{
    if (r->count != m->count || r->next_hint != m->hint || r->next_seq != m->next_seq ||
        r->free_count != model_free_count(m))
        return 0;
    for (uint32_t i = 0; i < m->count; i++) {
        if (r->slots[i].state != m->state[i] || r->slots[i].holders != m->holders[i])
            return 0;
        if (m->state[i] == TSOCK__SLOT_HELD && r->slots[i].seq != m->seq[i])
            return 0;
    }
    return 1;
}

/* A slot in the given state, or any index (in range or a little past it) when none is. */
static uint32_t
pick_slot(const struct model *m, uint8_t state)
{
    uint32_t start = rnd_below(m->count);
    if (rnd_below(8) != 0) {
        for (uint32_t k = 0; k < m->count; k++) {
            uint32_t i = (start + k) % m->count;
            if (m->state[i] == state)
                return i;
        }
    }
    return rnd_below(m->count + 2);
}

/* Holder sets of every shape: nobody, one consumer, a few, or a random subset of all. */
static uint64_t
pick_holders(uint32_t consumers)
{
    uint64_t all = consumers == 64 ? UINT64_MAX : bit(consumers) - 1;
    switch (rnd_below(6)) {
    case 0: return 0;
    case 1:
    case 2: return bit(rnd_below(consumers));
    case 3:
        return bit(rnd_below(consumers)) | bit(rnd_below(consumers)) | bit(rnd_below(consumers));
    default: return rnd() & all;
    }
}

/* Mostly a consumer in use; now and then one past the valid range. */
static uint32_t
pick_consumer(uint32_t consumers)
{
    if (rnd_below(50) == 0)
        return TSOCK__RING_MAX_CONSUMERS + rnd_below(3);
    return rnd_below(consumers);
}

/* Outcome tallies, so the test can insist that every path was actually taken. */
struct tally {
    long acquired, full, published, published_empty, publish_bad, abandoned, abandon_bad;
    long freed, kept, stale, release_bad, drop_freed, drop_bad;
    long holds_yes, holds_no, holds_bad, lagging, holding_nothing;
};

static void
op_release(struct model *m, uint32_t consumers, struct tally *t)
{
    uint32_t slot = pick_slot(m, TSOCK__SLOT_HELD);
    uint32_t consumer = pick_consumer(consumers);
    uint64_t seq = slot < m->count ? m->seq[slot] : 0;
    /* Usually a genuine holder with the right seq; otherwise a stale or a foreign release. */
    int genuine = rnd_below(4) != 0;
    if (genuine && slot < m->count && m->holders[slot] != 0) {
        do
            consumer = rnd_below(64);
        while (!(m->holders[slot] >> consumer & 1));
    } else if (rnd_below(2)) {
        seq += rnd_below(2) ? 1 : (uint64_t)-1;
    }
    int want = model_release(m, slot, consumer, seq);
    CHECK_EQ(tsock__ring_release(&ring, slot, consumer, seq), want);
    t->freed += want == 1;
    t->kept += want == 0;
    t->stale += want == -ENOENT;
    t->release_bad += want == -EINVAL;
}

static void
op_fill(struct model *m, uint32_t consumers, struct tally *t)
{
    uint32_t slot = pick_slot(m, TSOCK__SLOT_FILLING);
    uint64_t holders = pick_holders(consumers), got = 0, want_seq = 0;
    int want = model_publish(m, slot, holders, &want_seq);
    CHECK_EQ(tsock__ring_publish(&ring, slot, holders, &got), want);
    if (want == 0)
        CHECK_EQ(got, want_seq);
    t->published += want == 0 && holders != 0;
    t->published_empty += want == 0 && holders == 0;
    t->publish_bad += want != 0;
}

static void
op_abandon(struct model *m, struct tally *t)
{
    uint32_t slot = pick_slot(m, TSOCK__SLOT_FILLING);
    int want = model_abandon(m, slot);
    CHECK_EQ(tsock__ring_abandon(&ring, slot), want);
    t->abandoned += want == 0;
    t->abandon_bad += want != 0;
}

static void
op_acquire(struct model *m, struct tally *t)
{
    int want = model_acquire(m);
    CHECK_EQ(tsock__ring_acquire(&ring), want);
    t->acquired += want >= 0;
    t->full += want == -EAGAIN;
}

static void
op_drop(struct model *m, uint32_t consumers, struct tally *t)
{
    uint32_t consumer = pick_consumer(consumers);
    int want = model_drop(m, consumer);
    CHECK_EQ(tsock__ring_drop_consumer(&ring, consumer), want);
    t->drop_freed += want > 0;
    t->drop_bad += want == -EINVAL;
}

/* One random operation, weighted so the ring spends time both nearly empty and full. */
static void
random_op(struct model *m, uint32_t consumers, struct tally *t)
{
    uint32_t dice = rnd_below(100);
    if (dice < 25)
        op_acquire(m, t);
    else if (dice < 45)
        op_fill(m, consumers, t);
    else if (dice < 50)
        op_abandon(m, t);
    else if (dice < 97)
        op_release(m, consumers, t);
    else
        op_drop(m, consumers, t);
}

/* Every consumer's count matches the model and stays within the bound of `count` slots. */
static int
holdings_ok(const struct model *m, uint32_t first, uint32_t last)
{
    for (uint32_t c = first; c <= last; c++) {
        int held = tsock__ring_held_by(&ring, c);
        if (held != model_held_by(m, c) || held < 0 || (uint32_t)held > m->count)
            return 0;
    }
    return 1;
}

/* The model's answers to the queries, worked out from its plain arrays. */
static int
model_holds(const struct model *m, uint32_t slot, uint32_t consumer, uint64_t seq)
{
    if (slot >= m->count || consumer >= 64)
        return -EINVAL;
    return m->state[slot] == TSOCK__SLOT_HELD && m->seq[slot] == seq &&
           (m->holders[slot] >> consumer & 1);
}

static int
model_oldest(const struct model *m, uint32_t consumer, uint64_t *oldest)
{
    if (consumer >= 64)
        return -EINVAL;
    /* Every publication number in turn, oldest first, until one is held by the consumer. */
    for (uint64_t seq = 0; seq < m->next_seq; seq++)
        for (uint32_t i = 0; i < m->count; i++)
            if (model_holds(m, i, consumer, seq) == 1) {
                *oldest = seq;
                return 1;
            }
    return 0;
}

/* The queries agree with the model: counts, one (slot, consumer, seq) question that is mostly
 * a live publication, and one consumer's oldest publication and lag. */
static int
queries_ok(const struct model *m, uint32_t consumers, struct tally *t)
{
    int held = 0;
    for (uint32_t i = 0; i < m->count; i++)
        held += m->state[i] == TSOCK__SLOT_HELD;
    if (tsock__ring_held_count(&ring) != held ||
        tsock__ring_free_count(&ring) != (int)model_free_count(m) ||
        tsock__ring_published(&ring) != m->next_seq)
        return 0;

    uint32_t slot = pick_slot(m, TSOCK__SLOT_HELD);
    uint32_t consumer = pick_consumer(consumers);
    uint64_t seq = slot < m->count ? m->seq[slot] : rnd_below(4);
    if (rnd_below(5) == 0)
        seq += rnd_below(2) ? 1 : (uint64_t)-1;
    if (slot < m->count && m->holders[slot] != 0 && rnd_below(2)) {
        do
            consumer = rnd_below(64);
        while (!(m->holders[slot] >> consumer & 1));
    }
    int want = model_holds(m, slot, consumer, seq);
    if (tsock__ring_holds(&ring, slot, consumer, seq) != want)
        return 0;
    uint64_t mask = 0;
    for (uint32_t c = 0; c < 64; c++)
        mask |= (uint64_t)(model_holds(m, slot, c, seq) == 1) << c;
    if (tsock__ring_holders(&ring, slot, seq) != mask)
        return 0;
    t->holds_yes += want == 1;
    t->holds_no += want == 0;
    t->holds_bad += want < 0;

    uint64_t oldest = UINT64_MAX, got = UINT64_MAX, lag = UINT64_MAX;
    int found = model_oldest(m, consumer, &oldest);
    if (tsock__ring_oldest_seq(&ring, consumer, &got) != found || got != oldest)
        return 0;
    int rc = tsock__ring_lag(&ring, consumer, &lag);
    if (rc != (found < 0 ? -EINVAL : 0))
        return 0;
    if (found >= 0 && lag != (found ? m->next_seq - 1 - oldest : 0))
        return 0;
    t->lagging += found == 1 && lag > 0;
    t->holding_nothing += found == 0;
    return 1;
}

static void
run_episode(uint32_t count, uint32_t consumers, int steps, struct tally *t)
{
    struct model m = {.count = count};
    CHECK_EQ(tsock__ring_init(&ring, count), 0);
    for (int step = 0; step < steps; step++) {
        random_op(&m, consumers, t);
        int ok = tsock__ring_check(&ring) == 0 && matches_model(&ring, &m);
        uint32_t c = rnd_below(64);
        ok = ok && holdings_ok(&m, c, c) && queries_ok(&m, consumers, t);
        if (step % 256 == 0)
            ok = ok && holdings_ok(&m, 0, 63);
        CHECK(ok);
        if (!ok) {
            fprintf(stderr, "diverged: count %u consumers %u step %d\n", count, consumers, step);
            return;
        }
    }
}

static void
test_random_against_model(void)
{
    struct tally t = {0};
    long total = 0;
    while (total < 200000) {
        uint32_t count = 1 + rnd_below(64);
        uint32_t consumers = 1 + rnd_below(64);
        int steps = 500 + (int)rnd_below(3000);
        run_episode(count, consumers, steps, &t);
        total += steps;
    }
    /* Each outcome happened many times: the run explored the whole state machine. */
    long outcomes[] = {t.acquired,    t.full,           t.published,   t.published_empty,
                       t.publish_bad, t.abandoned,      t.abandon_bad, t.freed,
                       t.kept,        t.stale,          t.release_bad, t.drop_freed,
                       t.drop_bad,    t.holds_yes,      t.holds_no,    t.holds_bad,
                       t.lagging,     t.holding_nothing};
    for (size_t i = 0; i < sizeof(outcomes) / sizeof(outcomes[0]); i++) {
        CHECK(outcomes[i] >= 100);
        if (outcomes[i] < 100)
            fprintf(stderr, "outcome %zu seen only %ld times\n", i, outcomes[i]);
    }
}

int
main(void)
{
    test_init();
    test_full_cycle();
    test_fill_to_free();
    test_illegal_transitions();
    test_stale_and_duplicate_release();
    test_out_of_order_release();
    test_drop_consumer();
    test_round_robin();
    test_acquire_when_full();
    test_check_detects_corruption();
    test_queries();
    test_random_against_model();
    return CHECK_DONE();
}
