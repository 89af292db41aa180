/* Shard order (tsock_producer_set_shard_order): the sampler's epochs read tar shards a window
 * at a time. The shards' first ids are given in dataset ids; with node shares the sampler runs
 * over share positions, so the share is sorted by dataset id (its membership is unchanged)
 * and each shard's first position found in it: a share's positions then follow shard order
 * too. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "engine/producer_internal.h"

int
tsock_producer_set_shard_order(tsock_producer *p, const uint64_t *starts, uint32_t shards,
                               uint32_t window)
{
    if (!p || !starts || shards == 0 || window == 0 || starts[0] != 0)
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    for (uint32_t s = 0; s < shards; s++)
        if (starts[s + 1] < starts[s])
            return -EINVAL;
    uint64_t *copy = malloc(((size_t)shards + 1) * sizeof *copy);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, starts, ((size_t)shards + 1) * sizeof *copy);
    free(p->shard_starts);
    p->shard_starts = copy;
    p->shards = shards;
    p->shard_window = window < shards ? window : shards;
    return 0;
}

static int
cmp_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The first position in sorted[0..n) whose id is >= id. */
static uint64_t
lower_bound(const uint64_t *sorted, uint64_t n, uint64_t id)
{
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int
tsock__producer_shards_start(tsock_producer *p)
{
    if (!p->shard_starts)
        return 0;
    if (!p->use_sampler || p->shard_starts[p->shards] != p->dataset_samples) {
        tsock__log(TSOCK_LOG_ERROR,
                   "tsock_producer_set_shard_order: the shards end at id %llu "
                   "but the sampler's dataset has %llu samples",
                   (unsigned long long)p->shard_starts[p->shards],
                   (unsigned long long)p->dataset_samples);
        return -EINVAL;
    }
    if (!p->node_share)
        return tsock__sampler_set_shards(&p->sampler, p->shard_starts, p->shards, p->shard_window);
    uint64_t m = p->sampler_samples;
    uint64_t *starts = malloc(((size_t)p->shards + 1) * sizeof *starts);
    if (!starts)
        return -ENOMEM;
    qsort(p->node_share, (size_t)m, sizeof *p->node_share, cmp_id);
    for (uint32_t s = 0; s <= p->shards; s++)
        starts[s] = lower_bound(p->node_share, m, p->shard_starts[s]);
    starts[p->shards] = m;
    int err = tsock__sampler_set_shards(&p->sampler, starts, p->shards, p->shard_window);
    free(starts);
    return err;
}
