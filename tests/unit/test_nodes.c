/* Node shares through the public producer API (tsock_producer_set_nodes): the bad inputs, and
 * real producers, one per simulated node, whose slots' sample ids over an epoch are each node's
 * share: M = ceil(samples / nodes) distinct ids per node, disjoint but for the padding, the
 * whole dataset together, the same set every epoch in a new order. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define SAMPLES 100
#define NODES 3
#define SHARE ((SAMPLES + NODES - 1) / NODES) /* 34: two nodes carry one padding id each */
#define BATCH 8

static tsock_producer *
make_producer(int n)
{
    char dir[128], endpoint[256];
    test_scratch_dir(dir, sizeof dir, "nodes");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/n%d.sock", dir, n);
    tsock_layout *layout = NULL;
    CHECK_EQ(tsock_layout_create(&layout), 0);
    CHECK_EQ(tsock_layout_add(layout, "index", TSOCK_INT64, 0, NULL), 0);
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, 4), 0);
    tsock_layout_destroy(layout);
    return p;
}

static void
test_bad_inputs(void)
{
    CHECK_EQ(tsock_producer_set_nodes(NULL, 2, 0), -EINVAL);
    tsock_producer *p = make_producer(0);
    CHECK_EQ(tsock_producer_set_nodes(p, 0, 0), -EINVAL);
    CHECK_EQ(tsock_producer_set_nodes(p, 2, 2), -EINVAL);
    /* A node share is a share of the sampler's dataset: no sampler, no start. */
    CHECK_EQ(tsock_producer_set_nodes(p, 2, 1), 0);
    CHECK_EQ(tsock_producer_start(p), -EINVAL);
    tsock_producer_destroy(p);

    /* More nodes than samples: some node would serve only other nodes' samples. */
    p = make_producer(1);
    CHECK_EQ(tsock_producer_set_sampler(p, 2, 1, 1), 0);
    CHECK_EQ(tsock_producer_set_nodes(p, 3, 0), 0);
    CHECK_EQ(tsock_producer_start(p), -EINVAL);
    /* The failed start left the producer as it was: one node serves the whole dataset. */
    CHECK_EQ(tsock_producer_set_nodes(p, 1, 0), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    CHECK_EQ(tsock_producer_set_nodes(p, 2, 0), TSOCK_E_STATE);
    tsock_producer_destroy(p);
}

/* One epoch of node k's producer: the sample ids its slots were planned with, in order. */
static void
serve_epoch(tsock_producer *p, uint64_t *ids)
{
    uint32_t got = 0;
    while (got < SHARE) {
        tsock_slot *slot = NULL;
        int rc = tsock_producer_acquire(p, 5000, &slot);
        CHECK_EQ(rc, 0);
        if (rc < 0)
            return;
        uint32_t n = tsock_slot_planned(slot);
        const uint64_t *planned = tsock_slot_sample_ids(slot);
        CHECK(n > 0 && got + n <= SHARE);
        for (uint32_t i = 0; i < n && got + i < SHARE; i++)
            ids[got + i] = planned[i];
        int64_t *index = tsock_slot_data(slot, 0);
        for (uint32_t i = 0; i < n; i++)
            index[i] = (int64_t)planned[i];
        CHECK_EQ(tsock_producer_publish(p, slot, n), 0);
        got += n;
    }
}

static void
test_shares(void)
{
    uint64_t ids[NODES][2][SHARE];
    for (int k = 0; k < NODES; k++) {
        tsock_producer *p = make_producer(10 + k);
        CHECK_EQ(tsock_producer_set_sampler(p, SAMPLES, 42, 2), 0);
        CHECK_EQ(tsock_producer_set_nodes(p, NODES, (uint32_t)k), 0);
        CHECK_EQ(tsock_producer_start(p), 0);
        serve_epoch(p, ids[k][0]);
        serve_epoch(p, ids[k][1]);
        tsock_slot *slot = NULL;
        CHECK_EQ(tsock_producer_acquire(p, 1000, &slot), TSOCK_E_END); /* two epochs of M */
        tsock_producer_destroy(p);
    }
    int holders[SAMPLES] = {0};
    for (int k = 0; k < NODES; k++) {
        uint8_t seen[2][SAMPLES];
        memset(seen, 0, sizeof seen);
        for (int e = 0; e < 2; e++)
            for (int i = 0; i < SHARE; i++) {
                CHECK(ids[k][e][i] < SAMPLES);
                if (ids[k][e][i] >= SAMPLES)
                    return;
                CHECK(!seen[e][ids[k][e][i]]); /* an exact epoch of the share */
                seen[e][ids[k][e][i]] = 1;
            }
        CHECK(memcmp(seen[0], seen[1], SAMPLES) == 0);              /* the share is fixed */
        CHECK(memcmp(ids[k][0], ids[k][1], sizeof ids[k][0]) != 0); /* in a new order */
        for (int id = 0; id < SAMPLES; id++)
            holders[id] += seen[0][id];
    }
    /* Together the whole dataset; the NODES * SHARE - SAMPLES padding ids on two nodes. */
    int twice = 0;
    for (int id = 0; id < SAMPLES; id++) {
        CHECK(holders[id] == 1 || holders[id] == 2);
        twice += holders[id] == 2;
    }
    CHECK_EQ(twice, NODES * SHARE - SAMPLES);
}

int
main(void)
{
    test_bad_inputs();
    test_shares();
    return CHECK_DONE();
}
