/* Issue 18, item 5: a cancel that stops tsock_consumer_save_state is consumed by it, as
 * tsock.h says (one cancel stops one call): the next call is not cancelled too.
 *
 * Ranks 0 and 1 of a group of 2, checkpointing, rank batches of 2 producer batches. The test
 * publishes rank 0's block only, so saving rank 0's position, which first reads past the rest
 * of its group's step (rank 1's block), waits; a pending cancel stops it. The next next()
 * must then wait for its batch (none is published: it times out), not return at once with
 * TSOCK_E_CANCELLED. */
#include <errno.h>
#include <stdint.h>

#include "check.h"
#include "tsock/tsock.h"

#define SAMPLES 100
#define BATCH 5
#define SLOTS 4

#include "id_producer.h"

static tsock_consumer *
start_rank(uint32_t rank)
{
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "save", rank, 2), 0);
    CHECK_EQ(tsock_consumer_set_batch_size(c, 2 * BATCH), 0);
    CHECK_EQ(tsock_consumer_set_checkpointing(c, 1), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    return c;
}

int
main(void)
{
    tsock_producer *p = id_producer_start("save-cancel", 1, NULL);
    tsock_consumer *rank0 = start_rank(0), *rank1 = start_rank(1);
    /* Both ranks joined: the group's window starts at the next batch. */
    CHECK_EQ(tsock_producer_wait_consumers(p, 2, 10000), 2);
    id_producer_publish_one(p);
    id_producer_publish_one(p);
    tsock_batch *b = NULL;
    CHECK_EQ(tsock_consumer_next(rank0, 5000, &b), 0);
    CHECK_EQ(tsock_batch_samples(b), 2 * BATCH);
    CHECK_EQ(tsock_consumer_release(rank0, b), 0);

    uint8_t state[4096];
    size_t len = 0;
    tsock_consumer_cancel(rank0);
    CHECK_EQ(tsock_consumer_save_state(rank0, state, sizeof state, &len), TSOCK_E_CANCELLED);
    CHECK_EQ(tsock_consumer_next(rank0, 300, &b), -ETIMEDOUT);

    /* Rank 1's block comes: saving completes now, and rank 0 reads on. */
    id_producer_publish_one(p);
    id_producer_publish_one(p);
    CHECK_EQ(tsock_consumer_save_state(rank0, state, sizeof state, &len), 0);
    CHECK(len > 0);
    tsock_consumer_destroy(rank0);
    tsock_consumer_destroy(rank1);
    id_producer_stop(p, NULL);
    return CHECK_DONE();
}
