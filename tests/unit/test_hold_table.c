/* The consumer's hold table: directed tests of every documented error and edge, then a long
 * random run checked after every step against a deliberately plain reference model (lists
 * scanned from scratch, no counters), comparing every answer and the release queue. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "ring/hold_table.h"
#include "ring/ring.h"

static struct tsock__hold_table table;

static struct tsock__hold_batch
batch(uint32_t slot, uint64_t seq, uint32_t samples)
{
    return (struct tsock__hold_batch){.slot = slot,
                                      .samples = samples,
                                      .seq = seq,
                                      .position = seq * 1000 + 7,
                                      .epoch = seq / 5,
                                      .index_in_epoch = seq % 5,
                                      .flags = (uint32_t)(seq % 5 == 4)};
}

static int
announce(uint32_t slot, uint64_t seq, uint32_t samples)
{
    struct tsock__hold_batch b = batch(slot, seq, samples);
    return tsock__hold_table_announce(&table, &b);
}

static int
batches_equal(const struct tsock__hold_batch *a, const struct tsock__hold_batch *b)
{
    return a->slot == b->slot && a->samples == b->samples && a->seq == b->seq &&
           a->position == b->position && a->epoch == b->epoch &&
           a->index_in_epoch == b->index_in_epoch && a->flags == b->flags;
}

/* A deep copy of the table, compared field by field, to prove a rejected call changed
 * nothing. */
static struct tsock__hold_slot saved_entry[TSOCK__RING_MAX_SLOTS];
static uint32_t saved_queue[TSOCK__RING_MAX_SLOTS];
static struct tsock__hold_release saved_releases[TSOCK__RING_MAX_SLOTS];
static struct tsock__hold_table saved;

static void
save(void)
{
    saved = table;
    memcpy(saved_entry, table.entry, table.slots * sizeof *table.entry);
    memcpy(saved_queue, table.queue, table.slots * sizeof *table.queue);
    memcpy(saved_releases, table.releases, table.slots * sizeof *table.releases);
}

static int
unchanged(void)
{
    if (table.slots != saved.slots || table.queue_head != saved.queue_head ||
        table.queue_len != saved.queue_len || table.head_offset != saved.head_offset ||
        table.release_len != saved.release_len || table.held != saved.held)
        return 0;
    for (uint32_t s = 0; s < table.slots; s++) {
        const struct tsock__hold_slot *x = &table.entry[s], *y = &saved_entry[s];
        if (x->queued != y->queued || x->pending != y->pending || x->views != y->views ||
            !batches_equal(&x->batch, &y->batch))
            return 0;
        if (table.queue[s] != saved_queue[s] || table.releases[s].slot != saved_releases[s].slot ||
            table.releases[s].seq != saved_releases[s].seq)
            return 0;
    }
    return 1;
}

static void
expect_rejected(int rc, int want)
{
    CHECK_EQ(rc, want);
    CHECK(unchanged());
    CHECK_EQ(tsock__hold_table_check(&table), 0);
}

/* ---- directed tests ---------------------------------------------------------------------- */

static void
test_init_and_free(void)
{
    CHECK_EQ(tsock__hold_table_init(&table, 0), -EINVAL);
    CHECK(table.entry == NULL);
    CHECK_EQ(tsock__hold_table_init(&table, TSOCK__RING_MAX_SLOTS + 1), -EINVAL);
    CHECK_EQ(tsock__hold_table_init(NULL, 4), -EINVAL);
    tsock__hold_table_free(&table); /* zeroed: a no-op */
    tsock__hold_table_free(NULL);
    CHECK_EQ(tsock__hold_table_check(&table), -EPROTO);

    CHECK_EQ(tsock__hold_table_init(&table, TSOCK__RING_MAX_SLOTS), 0);
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    CHECK_EQ(announce(TSOCK__RING_MAX_SLOTS - 1, 0, 1), 0);
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    tsock__hold_table_free(&table);
    CHECK(table.entry == NULL && table.slots == 0);
    tsock__hold_table_free(&table); /* twice is fine */

    CHECK_EQ(tsock__hold_table_init(&table, 3), 0);
    CHECK(tsock__hold_table_head(&table, NULL) == NULL);
    uint32_t off = 99;
    CHECK(tsock__hold_table_head(&table, &off) == NULL);
    CHECK_EQ(off, 0);
    CHECK_EQ(tsock__hold_table_available(&table), 0);
    CHECK_EQ(tsock__hold_table_held_count(&table), 0);
    CHECK_EQ(tsock__hold_table_queued(&table), 0);
    CHECK_EQ(tsock__hold_table_pending(&table), 0);
    for (uint32_t s = 0; s < 3; s++) {
        CHECK_EQ(tsock__hold_table_refs(&table, s), 0);
        CHECK_EQ(tsock__hold_table_holds(&table, s, 0), 0);
    }
    tsock__hold_table_free(&table);

    /* Queries on a table that is not set up answer "nothing" or -EINVAL, never crash. */
    CHECK(tsock__hold_table_head(NULL, &off) == NULL);
    CHECK_EQ(tsock__hold_table_available(NULL), 0);
    CHECK_EQ(tsock__hold_table_held_count(NULL), 0);
    CHECK_EQ(tsock__hold_table_refs(&table, 0), -EINVAL);
    CHECK_EQ(tsock__hold_table_holds(NULL, 0, 0), -EINVAL);
    CHECK_EQ(tsock__hold_table_take(&table, 1, 0), -ENOENT);
    CHECK_EQ(tsock__hold_table_unref(&table, 0, 0), -EINVAL);
    CHECK_EQ(tsock__hold_table_drop_queue(NULL), 0);
    CHECK_EQ(tsock__hold_table_discard(NULL, 5), 0);
    CHECK_EQ(tsock__hold_table_take_releases(NULL, NULL, 0), 0);
    tsock__hold_table_reset(NULL);
}

/* The ordinary life of batches: announced in order, read from the head in pieces, a view that
 * outlives the queue's reference, releases in the order the last references went. */
static void
test_flow(void)
{
    struct tsock__hold_release out[8];
    uint32_t off = 99;
    CHECK_EQ(tsock__hold_table_init(&table, 4), 0);
    CHECK_EQ(announce(2, 10, 4), 0);
    CHECK_EQ(announce(0, 11, 3), 0);
    CHECK_EQ(tsock__hold_table_queued(&table), 2);
    CHECK_EQ(tsock__hold_table_held_count(&table), 2);
    const struct tsock__hold_batch *h = tsock__hold_table_head(&table, &off);
    struct tsock__hold_batch want = batch(2, 10, 4);
    CHECK(h != NULL && batches_equal(h, &want));
    CHECK_EQ(off, 0);
    CHECK_EQ(tsock__hold_table_holds(&table, 2, 10), 1);
    CHECK_EQ(tsock__hold_table_holds(&table, 2, 11), 0);
    CHECK_EQ(tsock__hold_table_refs(&table, 2), 1);

    /* A view of the first 3 samples, then a gather of the last one: the view keeps slot 2. */
    CHECK_EQ(tsock__hold_table_take(&table, 3, 1), 0);
    CHECK_EQ(tsock__hold_table_refs(&table, 2), 2);
    CHECK(tsock__hold_table_head(&table, &off) == h);
    CHECK_EQ(off, 3);
    CHECK_EQ(tsock__hold_table_available(&table), 1);
    CHECK_EQ(tsock__hold_table_take(&table, 1, 0), 1);
    CHECK_EQ(tsock__hold_table_refs(&table, 2), 1);
    CHECK_EQ(tsock__hold_table_pending(&table), 0);
    CHECK_EQ(tsock__hold_table_holds(&table, 2, 10), 1);
    want = batch(0, 11, 3);
    h = tsock__hold_table_head(&table, &off);
    CHECK(h != NULL && batches_equal(h, &want));
    CHECK_EQ(off, 0);

    /* A view of all of slot 0: the queue's reference goes at once, the view's stays. */
    CHECK_EQ(tsock__hold_table_take(&table, 3, 1), 1);
    CHECK_EQ(tsock__hold_table_queued(&table), 0);
    CHECK_EQ(tsock__hold_table_refs(&table, 0), 1);
    CHECK_EQ(tsock__hold_table_held_count(&table), 2);
    CHECK_EQ(tsock__hold_table_check(&table), 0);

    /* Releases go in the order the slots were let go, not announced. */
    CHECK_EQ(tsock__hold_table_unref(&table, 0, 11), 1);
    CHECK_EQ(tsock__hold_table_holds(&table, 0, 11), 0);
    CHECK_EQ(tsock__hold_table_unref(&table, 2, 10), 1);
    CHECK_EQ(tsock__hold_table_pending(&table), 2);
    CHECK_EQ(tsock__hold_table_held_count(&table), 0);
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 8), 2);
    CHECK(out[0].slot == 0 && out[0].seq == 11);
    CHECK(out[1].slot == 2 && out[1].seq == 10);
    CHECK_EQ(tsock__hold_table_pending(&table), 0);
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 8), 0);

    /* The slots are free again: the producer may announce them anew. */
    CHECK_EQ(announce(0, 12, 1), 0);
    CHECK_EQ(announce(2, 13, 1), 0);
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    tsock__hold_table_free(&table);
}

/* Every refused call says why and leaves the table exactly as it was. */
static void
test_rejections(void)
{
    struct tsock__hold_release out[4];
    CHECK_EQ(tsock__hold_table_init(&table, 3), 0);
    save();
    expect_rejected(tsock__hold_table_take(&table, 1, 0), -ENOENT);
    expect_rejected(tsock__hold_table_take(&table, 1, 1), -ENOENT);
    expect_rejected(tsock__hold_table_ref(&table, 0, 0), -ENOENT);
    expect_rejected(tsock__hold_table_unref(&table, 0, 0), -ENOENT);
    expect_rejected((int)tsock__hold_table_drop_queue(&table), 0);
    expect_rejected((int)tsock__hold_table_discard(&table, 3), 0);

    CHECK_EQ(announce(1, 5, 2), 0);
    save();
    /* announce: in range, some samples, slot not ours already. */
    expect_rejected(announce(3, 6, 2), -EINVAL);
    expect_rejected(announce(UINT32_MAX, 6, 2), -EINVAL);
    expect_rejected(announce(0, 6, 0), -EINVAL);
    expect_rejected(announce(1, 6, 2), -EBUSY);
    expect_rejected(announce(1, 5, 2), -EBUSY);
    expect_rejected(tsock__hold_table_announce(&table, NULL), -EINVAL);
    /* take: 1..available. */
    expect_rejected(tsock__hold_table_take(&table, 0, 0), -EINVAL);
    expect_rejected(tsock__hold_table_take(&table, 3, 1), -EINVAL);
    expect_rejected(tsock__hold_table_take(&table, UINT32_MAX, 0), -EINVAL);
    /* ref: the publication held right now. */
    expect_rejected(tsock__hold_table_ref(&table, 1, 4), -ENOENT);
    expect_rejected(tsock__hold_table_ref(&table, 0, 5), -ENOENT);
    expect_rejected(tsock__hold_table_ref(&table, 3, 5), -EINVAL);
    /* unref: never the queue's reference, so a queued-only slot has nothing to unref. */
    expect_rejected(tsock__hold_table_unref(&table, 1, 5), -ENOENT);
    expect_rejected(tsock__hold_table_unref(&table, 3, 5), -EINVAL);
    expect_rejected(tsock__hold_table_refs(&table, 3), -EINVAL);
    expect_rejected(tsock__hold_table_holds(&table, 3, 5), -EINVAL);
    expect_rejected((int)tsock__hold_table_take_releases(&table, out, 4), 0);
    tsock__hold_table_free(&table);
}

/* Unrefs name the publication: a stale or duplicated unref cannot release newer data or take
 * more references than were given. */
static void
test_stale_and_duplicate_unref(void)
{
    struct tsock__hold_release out[4];
    CHECK_EQ(tsock__hold_table_init(&table, 1), 0);
    CHECK_EQ(announce(0, 1, 2), 0);
    CHECK_EQ(tsock__hold_table_take(&table, 1, 1), 0); /* view A */
    CHECK_EQ(tsock__hold_table_ref(&table, 0, 1), 0);  /* view B */
    CHECK_EQ(tsock__hold_table_refs(&table, 0), 3);
    CHECK_EQ(tsock__hold_table_unref(&table, 0, 1), 0);
    CHECK_EQ(tsock__hold_table_unref(&table, 0, 1), 0);
    save();
    /* Both views gone; a third unref would have eaten the queue's reference. */
    expect_rejected(tsock__hold_table_unref(&table, 0, 1), -ENOENT);
    CHECK_EQ(tsock__hold_table_refs(&table, 0), 1);
    CHECK_EQ(tsock__hold_table_available(&table), 1);

    /* Read to the end with a view; release; the slot comes back with a new seq. */
    CHECK_EQ(tsock__hold_table_take(&table, 1, 1), 1);
    CHECK_EQ(tsock__hold_table_unref(&table, 0, 1), 1);
    save();
    expect_rejected(tsock__hold_table_unref(&table, 0, 1), -ENOENT); /* duplicate of the last */
    expect_rejected(tsock__hold_table_ref(&table, 0, 1), -ENOENT);   /* no reviving */
    /* Until the release has gone out the producer cannot have reused the slot. */
    expect_rejected(announce(0, 2, 2), -EBUSY);
    CHECK_EQ(tsock__hold_table_holds(&table, 0, 1), 0);
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 4), 1);
    CHECK(out[0].slot == 0 && out[0].seq == 1);

    CHECK_EQ(announce(0, 2, 2), 0);
    CHECK_EQ(tsock__hold_table_take(&table, 2, 1), 1);
    save();
    expect_rejected(tsock__hold_table_unref(&table, 0, 1), -ENOENT); /* a view of the old use */
    expect_rejected(tsock__hold_table_unref(&table, 0, 3), -ENOENT);
    CHECK_EQ(tsock__hold_table_unref(&table, 0, 2), 1);
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 4), 1);
    CHECK(out[0].slot == 0 && out[0].seq == 2);
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    tsock__hold_table_free(&table);
}

/* A small out[] takes the oldest releases; the rest stay pending, in order, still blocking
 * their slots. */
static void
test_partial_take_releases(void)
{
    struct tsock__hold_release out[4];
    CHECK_EQ(tsock__hold_table_init(&table, 5), 0);
    static const uint32_t order[5] = {3, 1, 4, 0, 2};
    for (uint32_t i = 0; i < 5; i++)
        CHECK_EQ(announce(order[i], 100 + i, 1), 0);
    CHECK_EQ(tsock__hold_table_drop_queue(&table), 5);
    CHECK_EQ(tsock__hold_table_pending(&table), 5);
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 0), 0);
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 2), 2);
    CHECK(out[0].slot == 3 && out[0].seq == 100 && out[1].slot == 1 && out[1].seq == 101);
    CHECK_EQ(tsock__hold_table_pending(&table), 3);
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    CHECK_EQ(announce(3, 200, 1), 0);
    CHECK_EQ(announce(4, 201, 1), -EBUSY);
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 4), 3);
    CHECK(out[0].slot == 4 && out[1].slot == 0 && out[2].slot == 2 && out[2].seq == 104);
    CHECK_EQ(announce(4, 201, 1), 0);
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    tsock__hold_table_free(&table);
}

/* discard walks across batches (drop_last's tail); drop_queue leaves views alone; reset
 * forgets everything. */
static void
test_discard_drop_reset(void)
{
    struct tsock__hold_release out[4];
    uint32_t off;
    CHECK_EQ(tsock__hold_table_init(&table, 4), 0);
    CHECK_EQ(announce(0, 1, 4), 0);
    CHECK_EQ(announce(1, 2, 4), 0);
    CHECK_EQ(announce(2, 3, 4), 0);
    CHECK_EQ(tsock__hold_table_take(&table, 1, 1), 0); /* a view into slot 0 */
    CHECK_EQ(tsock__hold_table_discard(&table, 0), 0);
    CHECK_EQ(tsock__hold_table_discard(&table, 5), 5); /* 3 of slot 0, 2 of slot 1 */
    const struct tsock__hold_batch *h = tsock__hold_table_head(&table, &off);
    CHECK(h != NULL && h->slot == 1 && off == 2);
    CHECK_EQ(tsock__hold_table_pending(&table), 0); /* slot 0 is still viewed */
    CHECK_EQ(tsock__hold_table_discard(&table, 100), 6);
    CHECK_EQ(tsock__hold_table_queued(&table), 0);
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 4), 2);
    CHECK(out[0].slot == 1 && out[1].slot == 2);

    CHECK_EQ(announce(1, 4, 2), 0);
    CHECK_EQ(announce(3, 5, 2), 0);
    CHECK_EQ(tsock__hold_table_take(&table, 1, 1), 0); /* a view into slot 1 */
    CHECK_EQ(tsock__hold_table_drop_queue(&table), 2);
    CHECK_EQ(tsock__hold_table_queued(&table), 0);
    CHECK_EQ(tsock__hold_table_held_count(&table), 2); /* slots 0 and 1, by their views */
    CHECK_EQ(tsock__hold_table_take_releases(&table, out, 4), 1);
    CHECK(out[0].slot == 3 && out[0].seq == 5);
    CHECK_EQ(tsock__hold_table_check(&table), 0);

    CHECK_EQ(announce(2, 6, 2), 0);
    CHECK_EQ(tsock__hold_table_unref(&table, 0, 1), 1);
    tsock__hold_table_reset(&table);
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    CHECK_EQ(tsock__hold_table_held_count(&table), 0);
    CHECK_EQ(tsock__hold_table_queued(&table), 0);
    CHECK_EQ(tsock__hold_table_pending(&table), 0);
    CHECK(tsock__hold_table_head(&table, NULL) == NULL);
    for (uint32_t s = 0; s < 4; s++)
        CHECK_EQ(tsock__hold_table_refs(&table, s), 0);
    CHECK_EQ(tsock__hold_table_unref(&table, 1, 4), -ENOENT); /* a view of the old session */
    CHECK_EQ(announce(1, 0, 3), 0);                           /* a new producer starts at 0 */
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    tsock__hold_table_free(&table);
}

/* tsock__hold_table_check is not vacuous: it notices each kind of corruption. */
static void
test_check_detects_corruption(void)
{
    CHECK_EQ(tsock__hold_table_init(&table, 4), 0);
    CHECK_EQ(announce(2, 1, 3), 0);
    CHECK_EQ(announce(0, 2, 3), 0);
    CHECK_EQ(tsock__hold_table_take(&table, 1, 1), 0);
    CHECK_EQ(announce(3, 3, 3), 0);
    CHECK_EQ(tsock__hold_table_drop_queue(&table), 3);
    CHECK_EQ(announce(0, 4, 3), -EBUSY);
    CHECK_EQ(announce(1, 4, 3), 0);
    CHECK_EQ(tsock__hold_table_take(&table, 2, 0), 0);
    /* Now: slot 2 viewed, slots 0 and 3 pending, slot 1 queued at offset 2. */
    CHECK_EQ(tsock__hold_table_check(&table), 0);
    save();

#define CORRUPT(stmt)                                                                              \
    do {                                                                                           \
        stmt;                                                                                      \
        CHECK_EQ(tsock__hold_table_check(&table), -EPROTO);                                        \
        table = saved;                                                                             \
        memcpy(table.entry, saved_entry, table.slots * sizeof *table.entry);                       \
        memcpy(table.queue, saved_queue, table.slots * sizeof *table.queue);                       \
        memcpy(table.releases, saved_releases, table.slots * sizeof *table.releases);              \
        CHECK_EQ(tsock__hold_table_check(&table), 0);                                              \
    } while (0)

    CORRUPT(table.held++);
    CORRUPT(table.head_offset = 3);
    CORRUPT(table.queue_len = 0);
    CORRUPT(table.queue_len = 5);
    CORRUPT(table.queue_head = 4);
    CORRUPT(table.queue[table.queue_head] = 2);
    CORRUPT(table.release_len = 1);
    CORRUPT(table.releases[0].seq++);
    CORRUPT(table.releases[1].slot = table.releases[0].slot);
    CORRUPT(table.entry[2].views = 0);
    CORRUPT(table.entry[2].queued = 1);
    CORRUPT(table.entry[0].pending = 0);
    CORRUPT(table.entry[3].views = 1);
    CORRUPT(table.entry[1].batch.slot = 0);
    CORRUPT(table.entry[1].batch.samples = 0);
    CORRUPT(table.slots = 0);
#undef CORRUPT
    CHECK_EQ(tsock__hold_table_check(NULL), -EPROTO);
    tsock__hold_table_free(&table);
}

/* ---- property test: random operations against a reference model ------------------------- */

/* The model keeps the documented behaviour in the plainest form: the queue as an array shifted
 * on every pop, each view reference as its own list entry, the releases as a list. It keeps no
 * counts: every answer is worked out by scanning the lists. */
#define MODEL_SLOTS 64
#define MODEL_VIEWS 512

struct model {
    uint32_t slots;
    struct tsock__hold_batch queue[MODEL_SLOTS];
    uint32_t queue_len;
    uint32_t offset;
    struct tsock__hold_release views[MODEL_VIEWS]; /* one entry per view reference */
    uint32_t view_len;
    struct tsock__hold_release releases[MODEL_SLOTS];
    uint32_t release_len;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

/* xorshift64*: the test's own generator, seeded, so a failure replays exactly. */
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

static int
model_refs(const struct model *m, uint32_t slot)
{
    int refs = 0;
    for (uint32_t i = 0; i < m->queue_len; i++)
        refs += m->queue[i].slot == slot;
    for (uint32_t i = 0; i < m->view_len; i++)
        refs += m->views[i].slot == slot;
    return refs;
}

static int
model_pending(const struct model *m, uint32_t slot)
{
    for (uint32_t i = 0; i < m->release_len; i++)
        if (m->releases[i].slot == slot)
            return 1;
    return 0;
}

static int
model_holds(const struct model *m, uint32_t slot, uint64_t seq)
{
    if (slot >= m->slots)
        return -EINVAL;
    for (uint32_t i = 0; i < m->queue_len; i++)
        if (m->queue[i].slot == slot && m->queue[i].seq == seq)
            return 1;
    for (uint32_t i = 0; i < m->view_len; i++)
        if (m->views[i].slot == slot && m->views[i].seq == seq)
            return 1;
    return 0;
}

static uint32_t
model_held_count(const struct model *m)
{
    uint32_t n = 0;
    for (uint32_t s = 0; s < m->slots; s++)
        n += model_refs(m, s) > 0;
    return n;
}

/* A reference to (slot, seq) just went: when it was the last, the release is owed. */
static void
model_after_unref(struct model *m, uint32_t slot, uint64_t seq)
{
    if (model_refs(m, slot) == 0)
        m->releases[m->release_len++] = (struct tsock__hold_release){slot, seq};
}

static int
model_announce(struct model *m, const struct tsock__hold_batch *b)
{
    if (b->slot >= m->slots || b->samples == 0)
        return -EINVAL;
    if (model_refs(m, b->slot) > 0 || model_pending(m, b->slot))
        return -EBUSY;
    m->queue[m->queue_len++] = *b;
    return 0;
}

static void
model_pop(struct model *m)
{
    struct tsock__hold_batch h = m->queue[0];
    memmove(m->queue, m->queue + 1, (m->queue_len - 1) * sizeof m->queue[0]);
    m->queue_len--;
    m->offset = 0;
    model_after_unref(m, h.slot, h.seq);
}

static int
model_take(struct model *m, uint32_t n, int ref)
{
    if (m->queue_len == 0)
        return -ENOENT;
    if (n == 0 || n > m->queue[0].samples - m->offset)
        return -EINVAL;
    if (ref)
        m->views[m->view_len++] = (struct tsock__hold_release){m->queue[0].slot, m->queue[0].seq};
    m->offset += n;
    if (m->offset < m->queue[0].samples)
        return 0;
    model_pop(m);
    return 1;
}

static uint64_t
model_discard(struct model *m, uint64_t n)
{
    uint64_t done = 0;
    while (done < n && m->queue_len > 0) {
        done++;
        if (++m->offset == m->queue[0].samples)
            model_pop(m);
    }
    return done;
}

static uint32_t
model_drop_queue(struct model *m)
{
    uint32_t n = 0;
    for (; m->queue_len > 0; n++)
        model_pop(m);
    return n;
}

static int
model_ref(struct model *m, uint32_t slot, uint64_t seq)
{
    int held = model_holds(m, slot, seq);
    if (held <= 0)
        return held < 0 ? held : -ENOENT;
    m->views[m->view_len++] = (struct tsock__hold_release){slot, seq};
    return 0;
}

static int
model_unref(struct model *m, uint32_t slot, uint64_t seq)
{
    if (slot >= m->slots)
        return -EINVAL;
    for (uint32_t i = 0; i < m->view_len; i++) {
        if (m->views[i].slot != slot || m->views[i].seq != seq)
            continue;
        m->views[i] = m->views[--m->view_len];
        model_after_unref(m, slot, seq);
        return model_refs(m, slot) == 0;
    }
    return -ENOENT;
}

static uint32_t
model_take_releases(struct model *m, struct tsock__hold_release *out, uint32_t cap)
{
    uint32_t n = m->release_len < cap ? m->release_len : cap;
    memcpy(out, m->releases, n * sizeof *out);
    memmove(m->releases, m->releases + n, (m->release_len - n) * sizeof *out);
    m->release_len -= n;
    return n;
}

/* Outcome tallies, so the test can insist that every path was actually taken. */
struct tally {
    long announced, announce_busy, announce_bad, took, popped, take_empty, take_bad, viewed;
    long discarded, dropped, reffed, ref_bad, unref_kept, unref_freed, unref_stale, unref_bad;
    long releases_taken, releases_partial, resets;
};

struct run {
    struct model m;
    struct tally t;
    uint64_t next_seq; /* the producer's publication counter */
};

/* A slot this consumer's producer could legitimately announce now, or any index (sometimes
 * out of range) when none is free or the producer is to misbehave. */
static uint32_t
pick_announce_slot(const struct model *m)
{
    if (rnd_below(8) != 0) {
        uint32_t start = rnd_below(m->slots);
        for (uint32_t k = 0; k < m->slots; k++) {
            uint32_t s = (start + k) % m->slots;
            if (model_refs(m, s) == 0 && !model_pending(m, s))
                return s;
        }
    }
    return rnd_below(m->slots + 2);
}

/* A (slot, seq) worth asking about: mostly one the consumer holds (a view, or a queued batch),
 * otherwise a pending one, a neighbouring seq, or an arbitrary slot. */
static void
pick_publication(const struct model *m, uint32_t *slot, uint64_t *seq)
{
    uint32_t dice = rnd_below(10);
    if (dice < 5 && m->view_len > 0) {
        const struct tsock__hold_release *v = &m->views[rnd_below(m->view_len)];
        *slot = v->slot;
        *seq = v->seq;
    } else if (dice < 7 && m->queue_len > 0) {
        const struct tsock__hold_batch *q = &m->queue[rnd_below(m->queue_len)];
        *slot = q->slot;
        *seq = q->seq;
    } else if (dice < 8 && m->release_len > 0) {
        const struct tsock__hold_release *r = &m->releases[rnd_below(m->release_len)];
        *slot = r->slot;
        *seq = r->seq;
    } else {
        *slot = rnd_below(m->slots + 2);
        *seq = rnd_below(8);
    }
    if (rnd_below(6) == 0)
        *seq += rnd_below(2) ? 1 : (uint64_t)-1;
}

static void
op_announce(struct run *r)
{
    struct tsock__hold_batch b = batch(pick_announce_slot(&r->m), r->next_seq++, 0);
    uint32_t dice = rnd_below(20);
    b.samples = dice == 0 ? 0 : dice < 8 ? 1 + rnd_below(3) : 1 + rnd_below(40);
    b.position = rnd();
    b.flags = (uint32_t)rnd();
    int want = model_announce(&r->m, &b);
    CHECK_EQ(tsock__hold_table_announce(&table, &b), want);
    r->t.announced += want == 0;
    r->t.announce_busy += want == -EBUSY;
    r->t.announce_bad += want == -EINVAL;
}

static void
op_take(struct run *r)
{
    struct model *m = &r->m;
    uint32_t avail = m->queue_len ? m->queue[0].samples - m->offset : 0;
    uint32_t n;
    uint32_t dice = rnd_below(10);
    if (dice == 0)
        n = avail + 1 + rnd_below(2); /* too many */
    else if (dice == 1)
        n = rnd_below(2) ? 0 : avail; /* none, or exactly the rest */
    else
        n = 1 + rnd_below(avail ? avail : 1);
    int ref = m->view_len < MODEL_VIEWS && rnd_below(2);
    int want = model_take(m, n, ref);
    CHECK_EQ(tsock__hold_table_take(&table, n, ref), want);
    r->t.took += want == 0;
    r->t.popped += want == 1;
    r->t.viewed += want >= 0 && ref;
    r->t.take_empty += want == -ENOENT;
    r->t.take_bad += want == -EINVAL;
}

static void
op_discard(struct run *r)
{
    uint64_t n = rnd_below(4) == 0 ? rnd_below(200) : rnd_below(20);
    uint64_t want = model_discard(&r->m, n);
    CHECK_EQ(tsock__hold_table_discard(&table, n), want);
    r->t.discarded += want > 0;
}

static void
op_ref(struct run *r)
{
    if (r->m.view_len >= MODEL_VIEWS)
        return;
    uint32_t slot;
    uint64_t seq;
    pick_publication(&r->m, &slot, &seq);
    int want = model_ref(&r->m, slot, seq);
    CHECK_EQ(tsock__hold_table_ref(&table, slot, seq), want);
    r->t.reffed += want == 0;
    r->t.ref_bad += want < 0;
}

static void
op_unref(struct run *r)
{
    uint32_t slot;
    uint64_t seq;
    pick_publication(&r->m, &slot, &seq);
    int want = model_unref(&r->m, slot, seq);
    CHECK_EQ(tsock__hold_table_unref(&table, slot, seq), want);
    r->t.unref_kept += want == 0;
    r->t.unref_freed += want == 1;
    r->t.unref_stale += want == -ENOENT;
    r->t.unref_bad += want == -EINVAL;
}

/* Both sides hand over the same releases, in the same order. */
static void
op_take_releases(struct run *r)
{
    struct tsock__hold_release got[MODEL_SLOTS + 1], want[MODEL_SLOTS + 1];
    uint32_t cap = rnd_below(3) == 0 ? rnd_below(4) : MODEL_SLOTS + 1;
    uint32_t n = model_take_releases(&r->m, want, cap);
    CHECK_EQ(tsock__hold_table_take_releases(&table, got, cap), n);
    for (uint32_t i = 0; i < n; i++)
        CHECK(got[i].slot == want[i].slot && got[i].seq == want[i].seq);
    r->t.releases_taken += n > 0;
    r->t.releases_partial += n > 0 && r->m.release_len > 0;
}

static void
random_op(struct run *r)
{
    uint32_t dice = rnd_below(1000);
    if (dice < 250)
        op_announce(r);
    else if (dice < 550)
        op_take(r);
    else if (dice < 580)
        op_discard(r);
    else if (dice < 680)
        op_ref(r);
    else if (dice < 880)
        op_unref(r);
    else if (dice < 990)
        op_take_releases(r);
    else if (dice < 997) {
        long dropped = (long)model_drop_queue(&r->m);
        CHECK_EQ(tsock__hold_table_drop_queue(&table), dropped);
        r->t.dropped += dropped > 0;
    } else {
        tsock__hold_table_reset(&table);
        r->m = (struct model){.slots = r->m.slots};
        r->t.resets++;
    }
}

/* Every answer the table gives matches the model's. */
static int
matches_model(const struct model *m, int all_slots)
{
    uint32_t off = UINT32_MAX;
    const struct tsock__hold_batch *h = tsock__hold_table_head(&table, &off);
    if (m->queue_len == 0 ? h != NULL : (h == NULL || !batches_equal(h, &m->queue[0])))
        return 0;
    if (off != (m->queue_len ? m->offset : 0))
        return 0;
    if (tsock__hold_table_available(&table) != (m->queue_len ? m->queue[0].samples - m->offset : 0))
        return 0;
    if (tsock__hold_table_queued(&table) != m->queue_len ||
        tsock__hold_table_pending(&table) != m->release_len ||
        tsock__hold_table_held_count(&table) != model_held_count(m))
        return 0;
    uint32_t first = all_slots ? 0 : rnd_below(m->slots + 1);
    uint32_t last = all_slots ? m->slots + 1 : first;
    for (uint32_t s = first; s <= last; s++) {
        int refs = s < m->slots ? model_refs(m, s) : -EINVAL;
        if (tsock__hold_table_refs(&table, s) != refs)
            return 0;
    }
    for (int k = 0; k < (all_slots ? 8 : 2); k++) {
        uint32_t slot;
        uint64_t seq;
        pick_publication(m, &slot, &seq);
        if (tsock__hold_table_holds(&table, slot, seq) != model_holds(m, slot, seq))
            return 0;
    }
    return 1;
}

static void
run_episode(uint32_t slots, int steps, struct tally *t)
{
    static struct run r;
    r = (struct run){.m = {.slots = slots}, .next_seq = rnd_below(1000)};
    CHECK_EQ(tsock__hold_table_init(&table, slots), 0);
    for (int step = 0; step < steps; step++) {
        random_op(&r);
        int ok = tsock__hold_table_check(&table) == 0 && matches_model(&r.m, step % 64 == 0);
        CHECK(ok);
        if (!ok) {
            fprintf(stderr, "diverged: slots %u step %d\n", slots, step);
            break;
        }
    }
    tsock__hold_table_free(&table);
    long *dst = (long *)t;
    const long *src = (const long *)&r.t;
    for (size_t i = 0; i < sizeof *t / sizeof(long); i++)
        dst[i] += src[i];
}

static void
test_random_against_model(void)
{
    struct tally t = {0};
    long total = 0;
    while (total < 300000) {
        uint32_t slots = rnd_below(4) == 0 ? 1 + rnd_below(3) : 1 + rnd_below(MODEL_SLOTS);
        int steps = 500 + (int)rnd_below(4000);
        run_episode(slots, steps, &t);
        total += steps;
    }
    /* Each outcome happened many times: the run explored every path. */
    const long *outcome = (const long *)&t;
    for (size_t i = 0; i < sizeof t / sizeof(long); i++) {
        CHECK(outcome[i] >= 100);
        if (outcome[i] < 100)
            fprintf(stderr, "outcome %zu seen only %ld times\n", i, outcome[i]);
    }
}

int
main(void)
{
    test_init_and_free();
    test_flow();
    test_rejections();
    test_stale_and_duplicate_unref();
    test_partial_take_releases();
    test_discard_drop_reset();
    test_check_detects_corruption();
    test_random_against_model();
    return CHECK_DONE();
}
