/* Data-parallel groups: which samples each rank of a group takes, and who has joined.
 * Pure arithmetic and bookkeeping, no I/O; docs/distributed.md is the design.
 *
 * Three pieces:
 * - node shares: with several nodes, each node's producer serves a fixed share of the dataset,
 *   derived from (samples, seed, nodes) alone, so producers agree without messages;
 * - the rank plan: a group is one window of `window` consecutive samples of its producer's
 *   stream (an exact cover of what that producer serves); the plan says which window positions
 *   make each of a rank's batches so that every rank gets the same number of samples and
 *   batches, the shards are disjoint, and the tail is padded or dropped as
 *   torch.utils.data.distributed.DistributedSampler does;
 * - membership: the start barrier (a group starts when all this node's ranks joined), the
 *   checks that the ranks agree, the missing ranks for the timeout's message.
 */
#ifndef TSOCK_GROUPS_H
#define TSOCK_GROUPS_H

#include <stddef.h>
#include <stdint.h>

/* Samples each node serves: ceil(samples / nodes), the short nodes padded. */
uint64_t tsock__groups_node_samples(uint64_t samples, uint32_t nodes);

/* Writes node `node`'s share into ids[0 .. tsock__groups_node_samples() - 1]: the dataset ids at
 * positions node, node + nodes, node + 2·nodes, ... of the seeded permutation of the reserved
 * epoch TSOCK__GROUPS_SPLIT_EPOCH, positions past the end wrapping to the start (padding).
 * Every node computing this gets disjoint shares (up to the padding) whose union is the whole
 * dataset. Returns 0, -EINVAL (samples == 0 or over the sampler's limit, nodes == 0,
 * node >= nodes, ids NULL) or -ENOMEM. */
#define TSOCK__GROUPS_SPLIT_EPOCH UINT64_MAX
int tsock__groups_node_share(uint64_t samples, uint64_t seed, uint32_t nodes, uint32_t node,
                             uint64_t *ids);

/* Places global rank `rank` of a group of `world` ranks spread over `nodes` nodes: launchers
 * number ranks node-major, so node `rank / (world / nodes)` holds it as local rank
 * `rank % (world / nodes)`. Returns 0 and fills *local and *local_world (either may be NULL)
 * when the rank lives on `node`; -ERANGE when it lives on another node; -EINVAL when world is 0,
 * rank >= world, nodes is 0, node >= nodes or world is not a multiple of nodes. */
int tsock__groups_place(uint32_t rank, uint32_t world, uint32_t nodes, uint32_t node,
                        uint32_t *local, uint32_t *local_world);

/* One rank's epochs over its group's window. */
struct tsock__rank_plan {
    uint64_t samples;     /* N: the whole dataset (over every node) */
    uint64_t window;      /* M: samples of one group epoch on this producer */
    uint32_t world;       /* W */
    uint32_t local_world; /* L: the group's ranks on this producer */
    uint32_t local;       /* l: this rank among them */
    uint32_t batch;       /* B: samples per batch, the same on every rank */
    int drop_last;
    uint64_t per_rank;    /* T: samples per rank and epoch */
    uint64_t batches;     /* batches per rank and epoch */
    uint64_t full_rounds; /* g: group batches of L·B samples in the window */
    uint64_t tail;        /* R: window samples after the full rounds */
};

/* Sets up rank `local` of `local_world` ranks on a producer whose windows are `window` samples,
 * in a group of `world` ranks over a dataset of `samples`. Without drop_last every rank gets
 * ceil(samples / world) samples per epoch, padded as DistributedSampler pads; with it,
 * floor(floor(samples / world) / batch) full batches. Returns 0 or -EINVAL when a count is 0,
 * local >= local_world, world is not a multiple of local_world, or the window cannot hold this
 * producer's share (window < ceil(samples / (world / local_world))). */
int tsock__rank_plan_init(struct tsock__rank_plan *p, uint64_t samples, uint64_t window,
                          uint32_t world, uint32_t local_world, uint32_t local, uint32_t batch,
                          int drop_last);

/* The plan of a restored group epoch (docs/semantics.md, "Resume"): the group's ranks saved
 * after `consumed` samples of every node's window (the same step on every node), and the epoch
 * goes on over the window with those samples left out, re-dealt among `world` ranks (any
 * number, the same node count): the plan of a dataset of samples - nodes·consumed samples over
 * a window of window - consumed, whose positions count the samples left. Every node's filtered
 * window then has ceil((samples - nodes·consumed) / nodes) samples, as tsock__rank_plan_init
 * requires, and with the world it was saved with the plan is exactly the rest of the
 * uninterrupted epoch's (its per_rank is T minus the rank's samples so far). Returns 0, or
 * -EINVAL for counts out of range (consumed >= window included) or a plan with no batch
 * (drop_last with fewer samples left than world · batch). */
int tsock__rank_plan_init_rest(struct tsock__rank_plan *p, uint64_t samples, uint64_t window,
                               uint64_t consumed, uint32_t world, uint32_t local_world,
                               uint32_t local, uint32_t batch, int drop_last);

/* Fills pos[0 .. k-1] with the window positions (0 <= pos < window) of the rank's batch
 * `index` (0 <= index < batches) and returns k (1..batch), or 0 when index is out of range.
 * Positions ascend except a padding sample, which comes last; it is a position of another
 * rank's tail in the same last group round, so every position of a batch lies in the stream
 * range a rank reads for that batch anyway. After its last batch a rank skips the rest of the
 * window: the next epoch starts at window position `window`. */
uint32_t tsock__rank_plan_batch(const struct tsock__rank_plan *p, uint64_t index, uint64_t *pos);

/* Start barrier and agreement checks of one group on one producer. */
#define TSOCK__GROUP_NAME_MAX 64
#define TSOCK__GROUP_MAX_LOCAL 1024

struct tsock__group {
    char name[TSOCK__GROUP_NAME_MAX + 1];
    uint32_t world, nodes, node;
    uint32_t local_world;
    uint32_t batch;
    int drop_last;
    uint64_t resume; /* the fingerprint of the state its ranks restored; 0: they start fresh */
    uint32_t joined; /* ranks joined so far */
    uint64_t member[TSOCK__GROUP_MAX_LOCAL]; /* by local rank: peer id, 0 = not joined */
};

/* Starts a group's record with its first rank's declaration. Validates the name (1..64 bytes,
 * no NUL or control character) and the placement; *why (if not NULL) gets a static sentence on
 * failure. Returns 0, -EINVAL (bad name or counts, more than TSOCK__GROUP_MAX_LOCAL local
 * ranks) or -ERANGE (the rank belongs to another node). Does not join the rank: call
 * tsock__group_join next. */
int tsock__group_init(struct tsock__group *g, const char *name, uint32_t world, uint32_t nodes,
                      uint32_t node, uint32_t batch, int drop_last, const char **why);

/* Joins global rank `rank` as peer `peer` (non-zero, the caller's id for the connection).
 * Returns 1 when this join completes the group (start it at the next batch), 0 when ranks are
 * still missing, or a negative errno with *why set: -EINVAL (world, batch or drop_last differ
 * from the ranks already joined, or peer is 0), -ERANGE (rank out of range or on another node),
 * -EEXIST (that rank has joined already). */
int tsock__group_join(struct tsock__group *g, uint32_t rank, uint32_t world, uint32_t batch,
                      int drop_last, uint64_t peer, const char **why);

/* Checks, before tsock__group_join, that a rank restored the same saved state as the group's
 * (g->resume, its first rank's: 0 when that rank started fresh). Ranks that restore states
 * saved at different steps, or fresh ranks mixed with restored ones, would not complete the
 * group's epoch exactly. Returns 0, or -EINVAL with *why naming the restored state. */
int tsock__group_check_resume(const struct tsock__group *g, uint64_t resume, const char **why);

/* Whether every local rank has joined. */
int tsock__group_complete(const struct tsock__group *g);

/* Removes peer `peer` (it left or died). Returns its global rank, or -ENOENT if it is not a
 * member. The group is then incomplete: its other ranks must be told their epoch is over. */
long tsock__group_leave(struct tsock__group *g, uint64_t peer);

/* Writes "group 'NAME': ranks 1, 3 of 4 did not join" (global ranks) into buf, truncated to
 * size with a NUL; returns the length it needed, as snprintf does. */
int tsock__group_describe_missing(const struct tsock__group *g, char *buf, size_t size);

#endif
