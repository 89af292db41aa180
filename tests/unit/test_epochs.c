/* Per-consumer epochs on the pure code: the sampler's segment-preserving epochs and the
 * consumer's epoch plan, driven by a simulated producer and consumers that join at random
 * moments, pause between epochs, and use random batch sizes. Every completed consumer epoch
 * must hold each sample exactly once. Also measures how well consecutive epochs are shuffled. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dataset/sampler.h"
#include "ring/epoch_plan.h"

#define MAX_SIM_CONSUMERS 6

static uint64_t rng_state = 12345;

static uint64_t
rnd(uint64_t bound)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state % bound;
}

/* A simulated consumer: mirrors what consumer.c does with the stream. */
struct sim_consumer {
    int joined, paused;
    uint64_t join_at;  /* producer batch index at which it joins */
    int pause_batches; /* how long it lingers between epochs (0: continues at once) */
    int resume_countdown;
    uint64_t window_start; /* stream position of its current window */
    int has_window;
    struct tsock__epoch_plan plan;
    uint32_t pending;    /* samples of the batch being built */
    unsigned char *seen; /* per sample id: times seen in the current epoch */
    uint64_t epoch_samples;
    int epochs_done;
    int bad_epochs;
    int flag_errors;
};

/* The producer tells the sampler the phase of every running window before an epoch starts. */
static void
keep_phases(struct tsock__sampler *s, struct sim_consumer *cs, int n)
{
    uint64_t phases[MAX_SIM_CONSUMERS];
    size_t k = 0;
    for (int i = 0; i < n; i++)
        if (cs[i].joined && !cs[i].paused && cs[i].has_window)
            phases[k++] = cs[i].window_start % s->samples;
    CHECK_EQ(tsock__sampler_keep_segments(s, phases, k), 0);
}

static void
end_epoch(struct sim_consumer *c, uint64_t n)
{
    uint64_t expect = n - c->plan.skip; /* the plan already moved on; skip is the dropped tail */
    int ok = c->epoch_samples == expect;
    for (uint64_t i = 0; i < n; i++)
        ok &= c->seen[i] <= 1;
    c->bad_epochs += !ok;
    c->epochs_done++;
    memset(c->seen, 0, n);
    c->epoch_samples = 0;
}

/* Feeds one sample of the stream to a consumer that is reading. Returns 1 when its epoch
 * ended with this sample (its window may continue or it may pause). */
static int
feed_sample(struct sim_consumer *c, uint64_t id, uint64_t n)
{
    if (c->plan.skip > 0) {
        c->plan.skip--;
        return 0;
    }
    c->seen[id]++;
    c->epoch_samples++;
    c->pending++;
    if (c->pending < tsock__epoch_plan_want(&c->plan))
        return 0;
    uint64_t before = c->plan.epoch;
    int end = tsock__epoch_plan_advance(&c->plan, c->pending, 0);
    c->pending = 0;
    c->flag_errors += end != (c->plan.epoch != before);
    if (end) {
        uint64_t skip = c->plan.skip;
        end_epoch(c, n);
        c->plan.skip = skip;
    }
    return end;
}

/* After an epoch ends: continue the window or pause (dropping the rest of the stream). */
static void
after_epoch(struct sim_consumer *c, uint64_t n)
{
    if (c->pause_batches == 0) {
        c->window_start += n;
        return;
    }
    c->paused = 1;
    c->has_window = 0;
    c->resume_countdown = c->pause_batches;
    c->plan.skip = 0;
}

static void
deliver(struct sim_consumer *c, const uint64_t *ids, uint32_t count, uint64_t position, uint64_t n)
{
    if (!c->has_window) {
        c->window_start = position;
        c->has_window = 1;
    }
    for (uint32_t i = 0; i < count && !c->paused; i++)
        if (feed_sample(c, ids[i], n))
            after_epoch(c, n);
}

static void
step_consumers(struct sim_consumer *cs, int nc, uint64_t batch_index)
{
    for (int i = 0; i < nc; i++) {
        struct sim_consumer *c = &cs[i];
        if (!c->joined && batch_index == c->join_at)
            c->joined = 1;
        if (c->paused && --c->resume_countdown <= 0)
            c->paused = 0; /* resumes: the next batch starts a new window */
    }
}

static void
simulate(uint64_t n, uint32_t producer_batch, int nc, uint64_t batches)
{
    struct tsock__sampler s;
    CHECK_EQ(tsock__sampler_init(&s, n, rnd(1000), 0), 0);
    struct sim_consumer cs[MAX_SIM_CONSUMERS];
    memset(cs, 0, sizeof cs);
    for (int i = 0; i < nc; i++) {
        cs[i].join_at = i == 0 ? 0 : rnd(batches / 2);
        cs[i].pause_batches = rnd(3) == 0 ? (int)rnd(5) + 1 : 0;
        uint32_t batch = (uint32_t)rnd(2 * producer_batch) + 1;
        int drop_last = batch <= n && rnd(3) == 0;
        tsock__epoch_plan_init(&cs[i].plan, n, batch, drop_last);
        cs[i].seen = calloc(n, 1);
    }
    uint64_t *ids = malloc(producer_batch * sizeof *ids);
    for (uint64_t b = 0; b < batches; b++) {
        step_consumers(cs, nc, b);
        if (s.position == 0 && s.epoch > 0)
            keep_phases(&s, cs, nc);
        uint64_t position = tsock__sampler_stream_position(&s);
        uint32_t count = tsock__sampler_next(&s, producer_batch, ids, NULL, NULL, NULL);
        for (int i = 0; i < nc; i++)
            if (cs[i].joined && !cs[i].paused)
                deliver(&cs[i], ids, count, position, n);
    }
    for (int i = 0; i < nc; i++) {
        CHECK_EQ(cs[i].bad_epochs, 0);
        CHECK_EQ(cs[i].flag_errors, 0);
        CHECK(cs[i].epochs_done >= 1 || cs[i].join_at > batches / 4);
        free(cs[i].seen);
    }
    free(ids);
    tsock__sampler_free(&s);
}

/* Property test: random dataset sizes, producer and consumer batch sizes, join times, pauses. */
static void
test_random_joins_exact_epochs(void)
{
    for (int round = 0; round < 300; round++) {
        uint64_t n = rnd(400) + 1;
        uint32_t pb = (uint32_t)rnd(64) + 1;
        int nc = (int)rnd(MAX_SIM_CONSUMERS) + 1;
        uint64_t batches = (n / pb + 1) * (rnd(6) + 3);
        simulate(n, pb, nc, batches);
    }
}

/* The plan's own arithmetic: batch counts and the dropped tail. */
static void
test_plan_arithmetic(void)
{
    struct tsock__epoch_plan p;
    tsock__epoch_plan_init(&p, 10, 4, 0);
    CHECK_EQ(tsock__epoch_plan_batches_per_epoch(&p), 3);
    CHECK_EQ(tsock__epoch_plan_want(&p), 4);
    CHECK_EQ(tsock__epoch_plan_advance(&p, 4, 0), 0);
    CHECK_EQ(tsock__epoch_plan_advance(&p, 4, 0), 0);
    CHECK_EQ(tsock__epoch_plan_want(&p), 2);
    CHECK_EQ(tsock__epoch_plan_advance(&p, 2, 0), 1);
    CHECK_EQ(p.epoch, 1);
    tsock__epoch_plan_init(&p, 10, 4, 1);
    CHECK_EQ(tsock__epoch_plan_batches_per_epoch(&p), 2);
    CHECK_EQ(tsock__epoch_plan_advance(&p, 4, 0), 0);
    CHECK_EQ(tsock__epoch_plan_advance(&p, 4, 0), 1);
    CHECK_EQ(p.skip, 2);
    tsock__epoch_plan_init(&p, 0, 4, 0); /* free mode: the producer's marks decide */
    CHECK_EQ(tsock__epoch_plan_advance(&p, 4, 0), 0);
    CHECK_EQ(tsock__epoch_plan_advance(&p, 3, 1), 1);
    tsock__epoch_plan_init(&p, 10, 4, 0);
    tsock__epoch_plan_advance(&p, 4, 0);
    tsock__epoch_plan_cut(&p); /* the producer vanished mid-epoch */
    CHECK_EQ(p.epoch, 1);
    CHECK_EQ(p.done, 0);
    tsock__epoch_plan_cut(&p); /* at a boundary: nothing to cut */
    CHECK_EQ(p.epoch, 1);
}

/* Spearman correlation of the positions of each sample in two orders. */
static double
spearman(const uint64_t *a, const uint64_t *b, uint64_t n)
{
    uint64_t *pos_a = malloc(n * sizeof *pos_a), *pos_b = malloc(n * sizeof *pos_b);
    for (uint64_t i = 0; i < n; i++) {
        pos_a[a[i]] = i;
        pos_b[b[i]] = i;
    }
    double d2 = 0;
    for (uint64_t i = 0; i < n; i++) {
        double d = (double)pos_a[i] - (double)pos_b[i];
        d2 += d * d;
    }
    free(pos_a);
    free(pos_b);
    double nn = (double)n;
    return 1.0 - 6.0 * d2 / (nn * (nn * nn - 1.0));
}

/* Shuffling quality. Without late joiners consecutive epochs are independent permutations.
 * With late joiners whose windows stay open, exact coverage without idling forces each
 * segment between their phases to keep its set of samples (see dataset/sampler.c), so the
 * correlation between consecutive epochs cannot drop below 1 - sum(f_i^3) for segment
 * fractions f_i; the sampler reaches that bound and shuffles each segment independently. */
static void
test_shuffle_quality(void)
{
    const uint64_t n = 20000;
    struct tsock__sampler s;
    uint64_t *prev = malloc(n * sizeof *prev), *ids = malloc(n * sizeof *ids);
    CHECK_EQ(tsock__sampler_init(&s, n, 99, 0), 0);
    tsock__sampler_next(&s, (uint32_t)n, prev, NULL, NULL, NULL);
    tsock__sampler_next(&s, (uint32_t)n, ids, NULL, NULL, NULL);
    double free_rho = spearman(prev, ids, n);
    printf("consecutive epochs, no late joiner: rho = %.4f\n", free_rho);
    CHECK(fabs(free_rho) < 0.03);

    uint64_t phases[3] = {3000, 9000, 15000}; /* three consumers joined mid-epoch */
    CHECK_EQ(tsock__sampler_keep_segments(&s, phases, 3), 0);
    memcpy(prev, ids, n * sizeof *ids);
    tsock__sampler_next(&s, (uint32_t)n, ids, NULL, NULL, NULL);
    double rho = spearman(prev, ids, n);
    double f[4] = {0.15, 0.30, 0.30, 0.25}, bound = 1.0;
    for (int i = 0; i < 4; i++)
        bound -= f[i] * f[i] * f[i];
    printf("3 late joiners: rho = %.4f, lower bound for exact coverage %.4f\n", rho, bound);
    CHECK(fabs(rho - bound) < 0.02);
    /* Inside each segment the order is a fresh permutation. */
    uint64_t from = 0;
    for (int i = 0; i <= 3; i++) {
        uint64_t to = i < 3 ? phases[i] : n, len = to - from;
        uint64_t *a = malloc(len * sizeof *a), *b = malloc(len * sizeof *b);
        uint64_t *rank = malloc(n * sizeof *rank);
        memset(rank, 0xff, n * sizeof *rank); /* UINT64_MAX: not in this segment */
        for (uint64_t k = 0; k < len; k++)
            rank[prev[from + k]] = k;
        int outside = 0;
        for (uint64_t k = 0; k < len; k++) {
            a[k] = k;
            outside += rank[ids[from + k]] >= len;
            b[k] = rank[ids[from + k]] < len ? rank[ids[from + k]] : 0;
        }
        CHECK_EQ(outside, 0); /* the segment kept its set of samples */
        double seg_rho = spearman(a, b, len);
        printf("  segment %d (%llu samples): rho = %.4f\n", i, (unsigned long long)len, seg_rho);
        CHECK(fabs(seg_rho) < 0.06);
        free(a);
        free(b);
        free(rank);
        from = to;
    }
    /* Once those consumers leave, the next epoch is an independent permutation again. */
    CHECK_EQ(tsock__sampler_keep_segments(&s, NULL, 0), 0);
    memcpy(prev, ids, n * sizeof *ids);
    tsock__sampler_next(&s, (uint32_t)n, ids, NULL, NULL, NULL);
    double after = spearman(prev, ids, n);
    printf("after they left: rho = %.4f\n", after);
    CHECK(fabs(after) < 0.03);
    tsock__sampler_free(&s);
    free(prev);
    free(ids);
}

int
main(void)
{
    test_plan_arithmetic();
    test_random_joins_exact_epochs();
    test_shuffle_quality();
    return CHECK_DONE();
}
