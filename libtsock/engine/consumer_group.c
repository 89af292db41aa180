/* A consumer that is a rank of a data-parallel group (docs/distributed.md).
 *
 * The rank declares its group in HELLO; the producer holds the group's ranks back until all
 * joined (the start barrier), then sends every one of them every batch, so that all their
 * windows start at the same stream position. A group epoch is one window; dataset/groups.c's
 * rank plan says which window positions make each of this rank's batches (its block of every
 * group batch, the tail split and padded, or dropped, as DistributedSampler does), and
 * consumer_read.c cuts them out of the queue. Here: the setters, the HELLO block, the plan,
 * and the sentence for a group that is over. Called by the API, the reader and the service;
 * calls none of them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/consumer_internal.h"

#define DEFAULT_GROUP_TIMEOUT_MS 600000u

int
tsock_consumer_set_group(tsock_consumer *c, const char *name, uint32_t rank, uint32_t world_size)
{
    if (!c || !name)
        return -EINVAL;
    size_t len = strlen(name);
    /* UTF-8 without control characters: the group's name appears in logs and messages. */
    if (len < 1 || len > TSOCK__GROUP_NAME_MAX || !tsock__proto_text_ok(name, len) ||
        world_size == 0 || rank >= world_size)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    memcpy(c->group.name, name, len + 1);
    c->group.rank = rank;
    c->group.world = world_size;
    if (!c->group.timeout_ms)
        c->group.timeout_ms = DEFAULT_GROUP_TIMEOUT_MS;
    return 0;
}

int
tsock_consumer_set_group_timeout(tsock_consumer *c, uint32_t timeout_ms)
{
    if (!c)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->group.timeout_ms = timeout_ms;
    return 0;
}

void
tsock__group_fill_hello(const tsock_consumer *c, struct tsock__msg_hello *h)
{
    if (!tsock__group_member(c))
        return;
    h->flags |= TSOCK__HELLO_HAS_GROUP;
    memcpy(h->group, c->group.name, sizeof h->group);
    h->rank = c->group.rank;
    h->world = c->group.world;
    h->batch = c->batch_size; /* 0: the producer's, which it resolves */
    h->drop_last = c->drop_last != 0;
    h->timeout_ms = c->group.timeout_ms ? c->group.timeout_ms : DEFAULT_GROUP_TIMEOUT_MS;
    /* Only before the state is applied: a later session's window starts a fresh group epoch. */
    h->resume = c->resume.restored == 1 ? c->group.restore_fp : 0;
}

void
tsock__group_reset(tsock_consumer *c)
{
    c->group.pos = 0;
    c->group.skip_rest = 0;
    c->group.pad_done = 0;
}

int
tsock__group_start(tsock_consumer *c)
{
    const struct tsock__msg_welcome *w = &c->welcome;
    uint32_t batch = c->batch_size ? c->batch_size : w->batch_size;
    uint32_t local = 0, local_world = 0;
    int err = w->samples ? tsock__groups_place(c->group.rank, c->group.world, w->nodes,
                                               w->node_rank, &local, &local_world)
                         : -EINVAL;
    if (err == 0)
        err = tsock__rank_plan_init(&c->group.plan, w->dataset, w->samples, c->group.world,
                                    local_world, local, batch, c->drop_last);
    if (err < 0) {
        tsock__log(TSOCK_LOG_ERROR,
                   "group '%s': rank %u of %u cannot take a share of this producer's epochs "
                   "(dataset %llu, nodes %u, node %u, batch %u%s)",
                   c->group.name, c->group.rank, c->group.world, (unsigned long long)w->dataset,
                   w->nodes, w->node_rank, batch, c->drop_last ? ", drop_last" : "");
        return -EINVAL;
    }
    free(c->group.positions);
    free(c->group.scan_positions);
    c->group.positions = malloc((size_t)batch * sizeof *c->group.positions);
    c->group.scan_positions = malloc((size_t)batch * sizeof *c->group.scan_positions);
    if (!c->group.positions || !c->group.scan_positions)
        return -ENOMEM;
    c->group.view_budget = w->slot_count > local_world ? (w->slot_count - 1) / local_world : 0;
    if (c->group.view_budget == 0)
        tsock__log(TSOCK_LOG_INFO,
                   "group '%s': %u local ranks on %u slots: each rank's batches are copied out "
                   "of the ring; zero-copy views need --slots %u or more on the producer",
                   c->group.name, local_world, w->slot_count, local_world + 1);
    /* The rank's epochs as the epoch plan counts them: T samples in batches of B, the last
     * short (padding) or left out (drop_last); the reader, not the plan, walks the window. */
    tsock__epoch_plan_init(&c->plan, c->group.plan.per_rank, batch, c->drop_last);
    tsock__group_reset(c);
    tsock__log(TSOCK_LOG_INFO,
               "group '%s': rank %u of %u, %llu samples in %llu batches per epoch; waiting for "
               "the group's other ranks",
               c->group.name, c->group.rank, c->group.world,
               (unsigned long long)c->group.plan.per_rank,
               (unsigned long long)c->group.plan.batches);
    return 0;
}

int
tsock__group_on_failed(tsock_consumer *c, const struct tsock__msg_group_failed *g)
{
    char ranks[160];
    size_t used = 0;
    for (uint32_t i = 0; i < g->rank_count && used < sizeof ranks; i++) {
        const uint8_t *p = g->ranks + 4 * (size_t)i;
        uint32_t r =
            (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        int n = snprintf(ranks + used, sizeof ranks - used, "%s%u", i ? ", " : "", r);
        used += n > 0 ? (size_t)n : 0;
    }
    const char *s = g->rank_count == 1 ? "" : "s";
    if (g->code == TSOCK_E_GROUP_INCOMPLETE)
        snprintf(c->group.failure, sizeof c->group.failure,
                 "group '%s': rank%s %s of %u did not join within %g s", c->group.name, s, ranks,
                 c->group.world, (double)g->timeout_ms / 1000.0);
    else
        snprintf(c->group.failure, sizeof c->group.failure,
                 "group '%s': rank%s %s of %u was lost; the group is over", c->group.name, s, ranks,
                 c->group.world);
    tsock__log(TSOCK_LOG_INFO, "%s", c->group.failure);
    return g->code;
}

void
tsock__group_report(tsock_consumer *c, int err)
{
    if ((err != TSOCK_E_GROUP_LOST && err != TSOCK_E_GROUP_INCOMPLETE) || c->group.failure_logged ||
        !c->group.failure[0])
        return;
    c->group.failure_logged = 1;
    tsock__log(TSOCK_LOG_ERROR, "%s", c->group.failure);
}

void
tsock__group_free(tsock_consumer *c)
{
    free(c->group.positions);
    free(c->group.scan_positions);
    c->group.positions = NULL;
}
