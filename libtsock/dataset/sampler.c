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

void
tsock__sampler_permutation(uint64_t samples, uint64_t seed, uint64_t epoch, uint64_t *perm)
{
    if (perm == NULL || samples == 0 || samples > SAMPLER_MAX_SAMPLES)
        return;
    struct splitmix g = {tsock__mix64(seed ^ tsock__mix64(epoch + GOLDEN_GAMMA))};
    for (uint64_t i = 0; i < samples; i++)
        perm[i] = i;
    for (uint64_t i = samples - 1; i > 0; i--) {
        uint64_t j = splitmix_bounded(&g, i + 1);
        uint64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int
tsock__sampler_init(struct tsock_sampler *s, uint64_t samples, uint64_t seed, uint64_t epochs)
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
tsock__sampler_free(struct tsock_sampler *s)
{
    if (s == NULL)
        return;
    free(s->perm);
    s->perm = NULL;
}

static int
sampler_exhausted(const struct tsock_sampler *s)
{
    return s->perm == NULL || (s->epochs != 0 && s->epoch >= s->epochs);
}

/* Moves past a batch of k ids; returns 1 when that batch ended the epoch. */
static int
sampler_advance(struct tsock_sampler *s, uint64_t k)
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
tsock__sampler_next(struct tsock_sampler *s, uint32_t max, uint64_t *ids, uint64_t *epoch,
                    uint64_t *index_in_epoch, int *epoch_end)
{
    /* max == 0 cannot hold a batch; the stream is left where it is. */
    if (s == NULL || ids == NULL || max == 0 || sampler_exhausted(s))
        return 0;
    if (s->position == 0)
        tsock__sampler_permutation(s->samples, s->seed, s->epoch, s->perm);
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
