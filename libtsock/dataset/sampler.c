/* The sample stream (see sampler.h).
 *
 * Reproducibility contract: the permutation of epoch e depends on (samples, seed, e) only and
 * is computed as follows; changing any step changes every run's data order, so treat it as
 * part of the format.
 *
 *   state0 = tsock__mix64(seed ^ tsock__mix64(e + 0x9E3779B97F4A7C15))
 *   draw k (k = 0, 1, ...): r_k = tsock__mix64(state0 + k * 0x9E3779B97F4A7C15)
 *       (the standard splitmix64 stream seeded with state0; its first output is r_0)
 *   perm[i] = i; then for i = n-1 down to 1: j = bounded(i + 1); swap perm[i], perm[j]
 *   bounded(m), m <= 2^32: x = r_k >> 32 (the high half of one draw, one draw per attempt);
 *       m == 2^32: x;
 *       else Lemire's multiply-shift: p = x * m (64-bit); accept when (uint32_t)p >=
 *       (2^32 - m) mod m and return p >> 32; otherwise retry with the next draw.
 *
 * Segment-preserving epochs (consumers that joined mid-epoch). A consumer's epoch is the N
 * samples that follow its first one, so its window straddles two producer epochs: the suffix
 * [o, N) of epoch e and the prefix [0, o) of epoch e + 1, where o is its phase. Both must be
 * the whole dataset, hence epoch e + 1 must start with the same set of samples as epoch e did
 * up to o. With several phases o_1 < ... < o_m, epoch e + 1 keeps the set of every segment
 * [o_i, o_i+1) of epoch e and shuffles freely inside each. This is not a choice but the only
 * freedom there is: at every step the next sample must be one the oldest running window has
 * not had yet, and those are exactly the rest of its segment. When boundaries are kept, epoch
 * e + 1 is epoch e with each segment shuffled by the same splitmix64 stream as above (draws
 * continue from one segment to the next, segments in increasing order), so the result is
 * reproducible from (samples, seed, e, phases).
 *
 * Shard order (tsock__sampler_set_shards, for tar shards on storage where random reads are
 * slow): from the same stream as above, first the shard numbers 0..S-1 are shuffled (the
 * same Fisher-Yates), then perm is the shards' id ranges concatenated in that order, then each
 * run of `window` consecutive shards of it (the last run may be shorter) is shuffled in place,
 * runs in order, draws continuing. An epoch then reads `window` shards at a time, each
 * sample once. When boundaries are kept (joiners), each kept segment is shuffled in chunks of
 * about one window's samples (samples * window / S, at least 1) from its start instead of as a
 * whole, so reads stay within a few shards at a time.
 *
 * The epoch is mixed before it meets the seed so that nearby (seed, epoch) pairs never share a
 * stream: with a plain seed ^ epoch, seed 1 epoch 0 would replay seed 0 epoch 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dataset/sampler.h"

#define GOLDEN_GAMMA 0x9E3779B97F4A7C15u

/* Largest dataset: the permutation is one array of n uint64_t (32 GiB at this size), and the
 * bounded draws below work on 32-bit ranges. */
#define SAMPLER_MAX_SAMPLES ((uint64_t)1 << 32)

struct splitmix {
    uint64_t state;
};

static uint64_t
splitmix_next(struct splitmix *g)
{
    /* tsock__mix64 adds the gamma itself, so this yields the textbook splitmix64 sequence. */
    uint64_t r = tsock__mix64(g->state);
    g->state += GOLDEN_GAMMA;
    return r;
}

/* Uniform integer in [0, m) for 1 <= m <= 2^32, without modulo bias (Lemire 2019). The high
 * half of each draw is used because splitmix64's high bits are its best mixed. */
static uint64_t
splitmix_bounded(struct splitmix *g, uint64_t m)
{
    uint32_t x = (uint32_t)(splitmix_next(g) >> 32);
    if (m == SAMPLER_MAX_SAMPLES)
        return x;
    uint32_t range = (uint32_t)m;
    uint64_t p = (uint64_t)x * range;
    if ((uint32_t)p < range) {
        /* Only products whose low half falls below 2^32 mod range are biased; redraw those. */
        uint32_t threshold = (uint32_t)(0u - range) % range;
        while ((uint32_t)p < threshold) {
            x = (uint32_t)(splitmix_next(g) >> 32);
            p = (uint64_t)x * range;
        }
    }
    return p >> 32;
}

static struct splitmix
epoch_stream(uint64_t seed, uint64_t epoch)
{
    struct splitmix g = {tsock__mix64(seed ^ tsock__mix64(epoch + GOLDEN_GAMMA))};
    return g;
}

/* Fisher-Yates over perm[0..n-1] with draws from g. */
static void
shuffle(struct splitmix *g, uint64_t *perm, uint64_t n)
{
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = splitmix_bounded(g, i);
        uint64_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

void
tsock__sampler_permutation(uint64_t samples, uint64_t seed, uint64_t epoch, uint64_t *perm)
{
    if (perm == NULL || samples == 0 || samples > SAMPLER_MAX_SAMPLES)
        return;
    struct splitmix g = epoch_stream(seed, epoch);
    for (uint64_t i = 0; i < samples; i++)
        perm[i] = i;
    shuffle(&g, perm, samples);
}

void
tsock__sampler_shard_permutation(uint64_t samples, uint64_t seed, uint64_t epoch,
                                 const uint64_t *starts, uint32_t shards, uint32_t window,
                                 uint64_t *order, uint64_t *perm)
{
    if (!perm || !order || !starts || shards == 0 || window == 0 || samples == 0)
        return;
    struct splitmix g = epoch_stream(seed, epoch);
    for (uint32_t k = 0; k < shards; k++)
        order[k] = k;
    shuffle(&g, order, shards);
    uint64_t at = 0;
    for (uint32_t k = 0; k < shards; k++)
        for (uint64_t id = starts[order[k]]; id < starts[order[k] + 1]; id++)
            perm[at++] = id;
    uint64_t from = 0;
    for (uint32_t k = 0; k < shards; k += window) {
        uint64_t to = from;
        for (uint32_t w = k; w < shards && w < k + window; w++)
            to += starts[order[w] + 1] - starts[order[w]];
        shuffle(&g, perm + from, to - from);
        from = to;
    }
}

int
tsock__sampler_set_shards(struct tsock__sampler *s, const uint64_t *starts, uint32_t shards,
                          uint32_t window)
{
    if (!s || !starts || shards == 0 || window == 0 || starts[0] != 0 ||
        starts[shards] != s->samples)
        return -EINVAL;
    for (uint32_t k = 0; k < shards; k++)
        if (starts[k + 1] < starts[k])
            return -EINVAL;
    uint64_t *copy = malloc(((size_t)shards + 1) * sizeof *copy);
    uint64_t *order = malloc((size_t)shards * sizeof *order);
    if (!copy || !order) {
        free(copy);
        free(order);
        return -ENOMEM;
    }
    memcpy(copy, starts, ((size_t)shards + 1) * sizeof *copy);
    free(s->shard_starts);
    free(s->shard_order);
    s->shard_starts = copy;
    s->shard_order = order;
    s->shards = shards;
    s->window = window;
    return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int
tsock__sampler_keep_segments(struct tsock__sampler *s, const uint64_t *phases, size_t count)
{
    if (s == NULL || (count > 0 && phases == NULL) || count > TSOCK__SAMPLER_MAX_PHASES)
        return -EINVAL;
    s->keep_count = 0;
    for (size_t i = 0; i < count; i++)
        if (phases[i] > 0 && phases[i] < s->samples)
            s->keep[s->keep_count++] = phases[i];
    qsort(s->keep, s->keep_count, sizeof s->keep[0], cmp_u64);
    size_t unique = 0;
    for (size_t i = 0; i < s->keep_count; i++)
        if (unique == 0 || s->keep[unique - 1] != s->keep[i])
            s->keep[unique++] = s->keep[i];
    s->keep_count = unique;
    return 0;
}

/* Turns perm (epoch e - 1) into epoch e: a fresh permutation when no boundary must be kept,
 * otherwise each kept segment shuffled in place. */
static void
start_epoch(struct tsock__sampler *s)
{
    if ((s->epoch == 0 || s->keep_count == 0) && s->shards) {
        tsock__sampler_shard_permutation(s->samples, s->seed, s->epoch, s->shard_starts, s->shards,
                                         s->window, s->shard_order, s->perm);
        return;
    }
    if (s->epoch == 0 || s->keep_count == 0) {
        tsock__sampler_permutation(s->samples, s->seed, s->epoch, s->perm);
        return;
    }
    struct splitmix g = epoch_stream(s->seed, s->epoch);
    uint64_t chunk = s->samples;
    if (s->shards) {
        chunk = s->samples * s->window / s->shards;
        chunk = chunk ? chunk : 1;
    }
    uint64_t from = 0;
    for (size_t i = 0; i <= s->keep_count; i++) {
        uint64_t to = i < s->keep_count ? s->keep[i] : s->samples;
        for (uint64_t c = from; c < to; c += chunk)
            shuffle(&g, s->perm + c, to - c < chunk ? to - c : chunk);
        from = to;
    }
}

uint64_t
tsock__sampler_stream_position(const struct tsock__sampler *s)
{
    return s->epoch * s->samples + s->position;
}

int
tsock__sampler_init(struct tsock__sampler *s, uint64_t samples, uint64_t seed, uint64_t epochs)
{
    if (s == NULL)
        return -EINVAL;
    memset(s, 0, sizeof(*s));
    if (samples == 0 || samples > SAMPLER_MAX_SAMPLES)
        return -EINVAL;
    if (samples > SIZE_MAX / sizeof(uint64_t))
        return -ENOMEM; /* a 32-bit process cannot hold the permutation */
    /* Not filled yet: each epoch's permutation is computed when its first batch is issued, so
     * an epoch that is never reached costs nothing. */
    s->perm = malloc((size_t)samples * sizeof(uint64_t));
    if (s->perm == NULL)
        return -ENOMEM;
    s->samples = samples;
    s->seed = seed;
    s->epochs = epochs;
    return 0;
}

void
tsock__sampler_free(struct tsock__sampler *s)
{
    if (s == NULL)
        return;
    free(s->perm);
    free(s->shard_starts);
    free(s->shard_order);
    s->perm = NULL;
    s->shard_starts = NULL;
    s->shard_order = NULL;
    s->shards = 0;
}

int
tsock__sampler_exhausted(const struct tsock__sampler *s)
{
    return s->perm == NULL || (s->epochs != 0 && s->epoch >= s->epochs);
}

/* Moves past a batch of k ids; returns 1 when that batch ended the epoch. */
static int
sampler_advance(struct tsock__sampler *s, uint64_t k)
{
    s->position += k;
    s->batch_in_epoch++;
    if (s->position < s->samples)
        return 0;
    s->epoch++;
    s->position = 0;
    s->batch_in_epoch = 0;
    return 1;
}

uint32_t
tsock__sampler_next(struct tsock__sampler *s, uint32_t max, uint64_t *ids, uint64_t *epoch,
                    uint64_t *index_in_epoch, int *epoch_end)
{
    /* max == 0 cannot hold a batch; the stream is left where it is. */
    if (s == NULL || ids == NULL || max == 0 || tsock__sampler_exhausted(s))
        return 0;
    if (s->position == 0)
        start_epoch(s);
    uint64_t left = s->samples - s->position;
    uint64_t k = left < max ? left : max;
    memcpy(ids, s->perm + s->position, (size_t)k * sizeof(uint64_t));
    if (epoch != NULL)
        *epoch = s->epoch;
    if (index_in_epoch != NULL)
        *index_in_epoch = s->batch_in_epoch;
    int end = sampler_advance(s, k);
    if (epoch_end != NULL)
        *epoch_end = end;
    return (uint32_t)k;
}
