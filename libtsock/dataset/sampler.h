/* The sample stream: which sample ids go into each batch, epoch after epoch.
 *
 * Epoch e visits every sample id 0..n-1 exactly once, in a permutation that depends only on
 * (seed, e), so a run is reproducible whatever the thread timing. Batches never straddle an
 * epoch: the last batch of an epoch holds the remainder.
 */
#ifndef TSOCK_SAMPLER_H
#define TSOCK_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* The most distinct consumer phases an epoch can keep (one per connected consumer). */
#define TSOCK__SAMPLER_MAX_PHASES 64

struct tsock__sampler {
    uint64_t samples; /* dataset size n */
    uint64_t seed;
    uint64_t epochs;   /* 0: endless */
    uint64_t epoch;    /* epoch of the next batch */
    uint64_t position; /* position of the next batch's first sample within its epoch */
    uint64_t batch_in_epoch;
    uint64_t *perm;                           /* permutation of the current epoch, n entries */
    uint64_t keep[TSOCK__SAMPLER_MAX_PHASES]; /* sorted, unique phases in (0, n) */
    size_t keep_count;
    /* Shard order (tsock__sampler_set_shards); shards == 0: plain permutations. */
    uint64_t *shard_starts; /* shards + 1 first ids */
    uint64_t *shard_order;  /* scratch: shards entries */
    uint32_t shards, window;
};

/* Sets up the stream. Returns 0, -EINVAL (samples == 0 or too large), -ENOMEM. */
int tsock__sampler_init(struct tsock__sampler *s, uint64_t samples, uint64_t seed, uint64_t epochs);
void tsock__sampler_free(struct tsock__sampler *s);

/* Orders epochs by shards: a seeded permutation of the `shards` shards (shard s holds the ids
 * starts[s]..starts[s+1]-1; starts[shards] == samples), then each run of `window` consecutive
 * shards of that order shuffled as one (sampler.c has the derivation). Still a permutation of
 * every id, so exact epochs, joiners' segments and groups work as with plain permutations.
 * Copies starts. Before the first batch. Returns 0, -EINVAL (starts not increasing from 0 to
 * samples, window == 0), -ENOMEM. */
int tsock__sampler_set_shards(struct tsock__sampler *s, const uint64_t *starts, uint32_t shards,
                              uint32_t window);

/* Writes epoch `epoch`'s shard-ordered permutation into perm (see tsock__sampler_set_shards);
 * `order` is scratch of `shards` entries. */
void tsock__sampler_shard_permutation(uint64_t samples, uint64_t seed, uint64_t epoch,
                                      const uint64_t *starts, uint32_t shards, uint32_t window,
                                      uint64_t *order, uint64_t *perm);

/* Whether the stream has issued its last epoch (never for an endless one). */
int tsock__sampler_exhausted(const struct tsock__sampler *s);

/* Tells the sampler the phases (offsets within an epoch where a consumer's window starts) of
 * the consumers whose windows will straddle the start of the next epoch. When that epoch
 * starts, it keeps the set of samples of every segment between consecutive phases and only
 * shuffles inside segments (sampler.c explains why that is necessary and sufficient for every
 * such consumer to see each sample exactly once per its own epoch). Phases of 0 or >= n need no
 * boundary and are ignored. Call it before the batch that starts an epoch; the set stays until
 * the next call. Returns 0 or -EINVAL (more than TSOCK__SAMPLER_MAX_PHASES). */
int tsock__sampler_keep_segments(struct tsock__sampler *s, const uint64_t *phases, size_t count);

/* Stream position of the next batch's first sample: samples issued since the stream began. */
uint64_t tsock__sampler_stream_position(const struct tsock__sampler *s);

/* Fills ids[0..] with the next batch of at most `max` ids and reports its place (epoch,
 * index_in_epoch and epoch_end may be NULL). Returns the number of ids (>= 1), or 0 when every
 * epoch has been issued or max == 0. */
uint32_t tsock__sampler_next(struct tsock__sampler *s, uint32_t max, uint64_t *ids, uint64_t *epoch,
                             uint64_t *index_in_epoch, int *epoch_end);

/* Writes the permutation of epoch `epoch` for (samples, seed) into perm[0..samples-1]: a
 * Fisher-Yates shuffle driven by splitmix64 seeded from (seed, epoch); sampler.c documents the
 * exact derivation, which is part of reproducibility. Requires 1 <= samples <= 2^32. */
void tsock__sampler_permutation(uint64_t samples, uint64_t seed, uint64_t epoch, uint64_t *perm);

#endif
