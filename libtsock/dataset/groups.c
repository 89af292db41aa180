/* Data-parallel groups (see groups.h and docs/distributed.md).
 *
 * Why every rank gets exactly T samples. Let N be the dataset, W the world, n = W / L the
 * nodes, M = ceil(N / n) the window of one node (one node: M = N), B the batch, g = floor(M /
 * (L·B)) the full group rounds, R = M - g·L·B = q·L + r the tail (0 <= r < L). Rank l gets
 * g·B + q + (l < r) window samples. Without drop_last, T = ceil(N / W) = ceil(ceil(N / n) / L)
 * = ceil(M / L) = g·B + q + (r > 0) (nested ceilings of integer divisions compose), so ranks
 * l >= r are exactly one short when r > 0, and no rank has too many: one padding sample each.
 * With drop_last, T = floor(N / W) <= floor(M / L) = g·B + q, and a rank delivers floor(T / B)
 * full batches; since q < B those lie in the g full rounds, so they are plain blocks.
 *
 * Why blocks and not DistributedSampler's stride: both give disjoint, equal, equally random
 * shards of a random window, but a block that matches one producer batch is a zero-copy view
 * of its slot, and a strided pick never is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset/groups.h"
#include "dataset/sampler.h"

/* The sampler's largest dataset: its permutations work on 32-bit ranges. */
#define GROUPS_MAX_SAMPLES ((uint64_t)1 << 32)

uint64_t
tsock__groups_node_samples(uint64_t samples, uint32_t nodes)
{
    if (nodes == 0)
        return 0;
    return samples / nodes + (samples % nodes != 0);
}

int
tsock__groups_node_share(uint64_t samples, uint64_t seed, uint32_t nodes, uint32_t node,
                         uint64_t *ids)
{
    if (ids == NULL || samples == 0 || samples > GROUPS_MAX_SAMPLES || nodes == 0 || node >= nodes)
        return -EINVAL;
    if (samples > SIZE_MAX / sizeof(uint64_t))
        return -ENOMEM;
    uint64_t *perm = malloc((size_t)samples * sizeof(uint64_t));
    if (perm == NULL)
        return -ENOMEM;
    tsock__sampler_permutation(samples, seed, TSOCK__GROUPS_SPLIT_EPOCH, perm);
    uint64_t m = tsock__groups_node_samples(samples, nodes);
    for (uint64_t i = 0; i < m; i++)
        ids[i] = perm[(node + i * nodes) % samples]; /* past the end: wrap, as padding */
    free(perm);
    return 0;
}

int
tsock__groups_place(uint32_t rank, uint32_t world, uint32_t nodes, uint32_t node, uint32_t *local,
                    uint32_t *local_world)
{
    if (world == 0 || rank >= world || nodes == 0 || node >= nodes || world % nodes != 0)
        return -EINVAL;
    uint32_t lw = world / nodes;
    if (rank / lw != node)
        return -ERANGE;
    if (local != NULL)
        *local = rank % lw;
    if (local_world != NULL)
        *local_world = lw;
    return 0;
}

int
tsock__rank_plan_init(struct tsock__rank_plan *p, uint64_t samples, uint64_t window, uint32_t world,
                      uint32_t local_world, uint32_t local, uint32_t batch, int drop_last)
{
    if (p == NULL || samples == 0 || window == 0 || world == 0 || local_world == 0 || batch == 0 ||
        local >= local_world || world % local_world != 0)
        return -EINVAL;
    /* The arithmetic above holds for exactly this window; anything else is a caller's bug. */
    if (window != tsock__groups_node_samples(samples, world / local_world))
        return -EINVAL;
    uint64_t round = (uint64_t)local_world * batch;
    *p = (struct tsock__rank_plan){
        .samples = samples,
        .window = window,
        .world = world,
        .local_world = local_world,
        .local = local,
        .batch = batch,
        .drop_last = drop_last != 0,
        .full_rounds = window / round,
        .tail = window % round,
    };
    if (p->drop_last) {
        p->per_rank = samples / world;
        p->batches = p->per_rank / batch;
    } else {
        p->per_rank = samples / world + (samples % world != 0);
        p->batches = p->full_rounds + (p->tail != 0);
    }
    /* An epoch without a batch would make every rank spin through empty epochs. */
    return p->batches == 0 ? -EINVAL : 0;
}

int
tsock__rank_plan_init_rest(struct tsock__rank_plan *p, uint64_t samples, uint64_t window,
                           uint64_t consumed, uint32_t world, uint32_t local_world, uint32_t local,
                           uint32_t batch, int drop_last)
{
    if (local_world == 0 || world % local_world != 0 || consumed >= window)
        return -EINVAL;
    uint64_t nodes = world / local_world;
    if (nodes * consumed >= samples)
        return -EINVAL;
    return tsock__rank_plan_init(p, samples - nodes * consumed, window - consumed, world,
                                 local_world, local, batch, drop_last);
}

/* The last batch without drop_last: this rank's block of the tail, then its padding sample. */
static uint32_t
tail_batch(const struct tsock__rank_plan *p, uint64_t *pos)
{
    uint64_t start = p->full_rounds * p->local_world * p->batch;
    uint64_t q = p->tail / p->local_world, r = p->tail % p->local_world;
    uint64_t l = p->local;
    uint64_t own = q + (l < r);
    uint64_t first = start + l * q + (l < r ? l : r);
    for (uint64_t j = 0; j < own; j++)
        pos[j] = first + j;
    if (r == 0 || l < r)
        return (uint32_t)own;
    /* One short: repeat a sample of another rank's tail, as DistributedSampler repeats the
     * epoch's first samples. (l - r) < l·q + r when q >= 1, so it is never this rank's own. */
    pos[own] = start + (l - r) % p->tail;
    return (uint32_t)(own + 1);
}

uint32_t
tsock__rank_plan_batch(const struct tsock__rank_plan *p, uint64_t index, uint64_t *pos)
{
    if (p == NULL || pos == NULL || index >= p->batches)
        return 0;
    if (index >= p->full_rounds)
        return tail_batch(p, pos);
    uint64_t first = (index * p->local_world + p->local) * p->batch;
    for (uint32_t j = 0; j < p->batch; j++)
        pos[j] = first + j;
    return p->batch;
}

static int
valid_name(const char *name)
{
    size_t n = name != NULL ? strlen(name) : 0;
    if (n == 0 || n > TSOCK__GROUP_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return 0;
    return 1;
}

static int
fail(const char **why, const char *text, int code)
{
    if (why != NULL)
        *why = text;
    return code;
}

int
tsock__group_init(struct tsock__group *g, const char *name, uint32_t world, uint32_t nodes,
                  uint32_t node, uint32_t batch, int drop_last, const char **why)
{
    if (g == NULL || !valid_name(name))
        return fail(why, "the group name must be 1 to 64 bytes with no control character", -EINVAL);
    if (batch == 0)
        return fail(why, "the batch size must be at least 1", -EINVAL);
    uint32_t lw = 0;
    int rc =
        tsock__groups_place(node * (world / (nodes ? nodes : 1)), world, nodes, node, NULL, &lw);
    if (rc < 0)
        return fail(why, "the world size must be a positive multiple of the number of nodes", rc);
    if (lw > TSOCK__GROUP_MAX_LOCAL)
        return fail(why, "more ranks on one node than a group can hold (1024)", -EINVAL);
    memset(g, 0, sizeof(*g));
    memcpy(g->name, name, strlen(name) + 1);
    g->world = world;
    g->nodes = nodes;
    g->node = node;
    g->local_world = lw;
    g->batch = batch;
    g->drop_last = drop_last != 0;
    return 0;
}

int
tsock__group_join(struct tsock__group *g, uint32_t rank, uint32_t world, uint32_t batch,
                  int drop_last, uint64_t peer, const char **why)
{
    if (g == NULL || peer == 0)
        return fail(why, "no group or no peer", -EINVAL);
    if (world != g->world)
        return fail(why, "the world size differs from the group's other ranks", -EINVAL);
    if (batch != g->batch)
        return fail(why, "the batch size differs from the group's other ranks", -EINVAL);
    if ((drop_last != 0) != g->drop_last)
        return fail(why, "drop_last differs from the group's other ranks", -EINVAL);
    uint32_t local = 0;
    int rc = tsock__groups_place(rank, world, g->nodes, g->node, &local, NULL);
    if (rc == -ERANGE)
        return fail(why, "the rank belongs to another node's producer", -ERANGE);
    if (rc < 0)
        return fail(why, "the rank is not below the world size", -ERANGE);
    if (g->member[local] != 0)
        return fail(why, "a rank of that number has joined the group already", -EEXIST);
    g->member[local] = peer;
    g->joined++;
    return g->joined == g->local_world;
}

int
tsock__group_check_resume(const struct tsock__group *g, uint64_t resume, const char **why)
{
    if (g == NULL)
        return fail(why, "no group", -EINVAL);
    if (resume == g->resume)
        return 0;
    if (resume == 0 || g->resume == 0)
        return fail(why,
                    "the restored state differs from the group's other ranks (fresh ranks "
                    "mixed with ranks restored from a saved state)",
                    -EINVAL);
    return fail(why,
                "the restored state differs from the group's other ranks (saved at another "
                "step or by another group)",
                -EINVAL);
}

int
tsock__group_complete(const struct tsock__group *g)
{
    return g != NULL && g->joined == g->local_world;
}

long
tsock__group_leave(struct tsock__group *g, uint64_t peer)
{
    if (g == NULL || peer == 0)
        return -ENOENT;
    for (uint32_t l = 0; l < g->local_world; l++) {
        if (g->member[l] == peer) {
            g->member[l] = 0;
            g->joined--;
            return (long)g->node * g->local_world + l;
        }
    }
    return -ENOENT;
}

int
tsock__group_describe_missing(const struct tsock__group *g, char *buf, size_t size)
{
    uint32_t missing = g->local_world - g->joined;
    size_t used = 0;
    int n = snprintf(buf, size, "group '%s': rank%s", g->name, missing == 1 ? "" : "s");
    if (n < 0)
        return n;
    used += (size_t)n;
    const char *sep = " ";
    for (uint32_t l = 0; l < g->local_world; l++) {
        if (g->member[l] != 0)
            continue;
        n = snprintf(used < size ? buf + used : NULL, used < size ? size - used : 0, "%s%u", sep,
                     g->node * g->local_world + l);
        if (n < 0)
            return n;
        used += (size_t)n;
        sep = ", ";
    }
    n = snprintf(used < size ? buf + used : NULL, used < size ? size - used : 0,
                 " of %u did not join", g->world);
    return n < 0 ? n : (int)(used + (size_t)n);
}
