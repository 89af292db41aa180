/* Several nodes (docs/distributed.md, "Several nodes"): a producer that serves one node's share
 * of its sampler's dataset.
 *
 * The sampler runs over the share's positions 0..M-1 exactly as over a dataset of M samples,
 * so windows, segments and epochs need nothing new. Only the application sees dataset ids:
 * tsock_slot_sample_ids maps each position through the share's table. Everything the
 * consumers see stays in positions: WELCOME's samples is M and a checkpointing consumer's BATCH
 * ids are positions (below M, as the wire requires), so its saved state is a state over the
 * share (docs/semantics.md, "Resume"). */
#include <errno.h>
#include <stdlib.h>

#include "dataset/groups.h"
#include "engine/producer_internal.h"

int
tsock_producer_set_nodes(tsock_producer *p, uint32_t nodes, uint32_t node_rank)
{
    if (!p || nodes == 0 || node_rank >= nodes)
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    p->nodes = nodes;
    p->node_rank = node_rank;
    return 0;
}

void
tsock__producer_nodes_free(tsock_producer *p)
{
    free(p->node_share);
    free(p->slot_dataset_ids);
    p->node_share = NULL;
    p->slot_dataset_ids = NULL;
}

/* The share's table and the slots' dataset ids (a start retried after a failed one computes
 * them again from the whole dataset). */
static int
take_share(tsock_producer *p)
{
    uint64_t m = tsock__groups_node_samples(p->dataset_samples, p->nodes);
    size_t ids = (size_t)p->slot_count * p->batch_size;
    if (m == 0 || m > SIZE_MAX / sizeof(uint64_t))
        return -EINVAL;
    p->node_share = malloc((size_t)m * sizeof(uint64_t));
    p->slot_dataset_ids = calloc(ids, sizeof(uint64_t));
    if (!p->node_share || !p->slot_dataset_ids)
        return -ENOMEM;
    int err = tsock__groups_node_share(p->dataset_samples, p->sampler_seed, p->nodes, p->node_rank,
                                       p->node_share);
    if (err < 0)
        return err;
    p->sampler_samples = m;
    return 0;
}

int
tsock__producer_nodes_start(tsock_producer *p)
{
    tsock__producer_nodes_free(p);
    p->sampler_samples = p->dataset_samples;
    if (p->nodes <= 1)
        return 0;
    if (!p->use_sampler) {
        tsock__log(TSOCK_LOG_ERROR, "tsock_producer_set_nodes needs a sampler "
                                    "(tsock_producer_set_sampler): a node share is a share of "
                                    "the sampler's dataset");
        return -EINVAL;
    }
    if (p->dataset_samples < p->nodes) {
        tsock__log(TSOCK_LOG_ERROR,
                   "%u nodes but a dataset of %llu samples: some node would serve only "
                   "other nodes' samples (at most one node per sample)",
                   p->nodes, (unsigned long long)p->dataset_samples);
        return -EINVAL;
    }
    int err = take_share(p);
    if (err < 0) {
        p->sampler_samples = p->dataset_samples;
        tsock__producer_nodes_free(p);
        return err;
    }
    tsock__log(TSOCK_LOG_INFO, "serving node %u of %u: %llu of the dataset's %llu samples",
               p->node_rank, p->nodes, (unsigned long long)p->sampler_samples,
               (unsigned long long)p->dataset_samples);
    return 0;
}

void
tsock__producer_nodes_map(tsock_producer *p, struct tsock_slot *s)
{
    if (!p->node_share || !s->ids)
        return;
    uint64_t *out = p->slot_dataset_ids + (size_t)s->index * p->batch_size;
    for (uint32_t i = 0; i < s->planned; i++)
        out[i] = p->node_share[s->ids[i]];
    s->ids = out;
}
