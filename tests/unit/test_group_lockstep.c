/* Issue 18, item 3, the data-parallel case: ranks that prefetch (hold the batch they train on
 * while asking for the next) and then wait for each other (an all-reduce) every step. A rank
 * waiting in the all-reduce does not read, so the other ranks' blocks announced to it must be
 * released on receipt (its service thread passes them), or they pin the ring: with 4 ranks on
 * 5 slots, each holding one view, the second rank's next block used to stay pinned by the
 * first rank, the third rank's could never be published, and the all-reduce never completed.
 * Every rank must read 2 exact epochs, the same batch count each. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "tsock/tsock.h"

#define SAMPLES 400
#define BATCH 10
#define SLOTS 5
#define WORLD 4
#define EPOCHS 2

#include "id_producer.h"

/* A barrier that a failed rank can break, so that a broken ring ends the test with its error
 * instead of leaving the other ranks waiting forever. */
static pthread_mutex_t step_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t step_cond = PTHREAD_COND_INITIALIZER;
static int step_arrived, step_generation, step_broken;

static int
all_reduce(void)
{
    pthread_mutex_lock(&step_mu);
    int generation = step_generation;
    if (++step_arrived == WORLD) {
        step_arrived = 0;
        step_generation++;
        pthread_cond_broadcast(&step_cond);
    }
    while (generation == step_generation && !step_broken)
        pthread_cond_wait(&step_cond, &step_mu);
    int ok = !step_broken;
    pthread_mutex_unlock(&step_mu);
    return ok;
}

static void
break_steps(void)
{
    pthread_mutex_lock(&step_mu);
    step_broken = 1;
    pthread_cond_broadcast(&step_cond);
    pthread_mutex_unlock(&step_mu);
}

struct rank {
    int rank;
    int batches, samples, epochs, error;
    char seen[EPOCHS][SAMPLES];
};

static void *
run_rank(void *arg)
{
    struct rank *r = arg;
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "lockstep", (uint32_t)r->rank, WORLD), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    tsock_batch *held = NULL;
    while (r->epochs < EPOCHS) {
        tsock_batch *b = NULL;
        int rc = tsock_consumer_next(c, 10000, &b); /* the next step, the current one held */
        if (rc < 0) {
            r->error = rc;
            break_steps();
            break;
        }
        const int64_t *index = tsock_batch_tensor_data(b, 0);
        for (uint32_t i = 0; i < tsock_batch_samples(b); i++)
            if (index[i] >= 0 && index[i] < SAMPLES)
                r->seen[r->epochs][index[i]] = 1;
        r->batches++;
        r->samples += (int)tsock_batch_samples(b);
        r->epochs += tsock_batch_is_epoch_end(b);
        /* The all-reduce of the step it trains on, the next step's batch already fetched. */
        int ok = all_reduce();
        if (held)
            CHECK_EQ(tsock_consumer_release(c, held), 0);
        held = b;
        if (!ok)
            break;
    }
    if (held)
        tsock_consumer_release(c, held);
    tsock_consumer_destroy(c);
    return NULL;
}

int
main(void)
{
    pthread_t thread, readers[WORLD];
    tsock_producer *p = id_producer_start("lockstep", 1, &thread);
    static struct rank ranks[WORLD];
    for (int r = 0; r < WORLD; r++) {
        ranks[r].rank = r;
        pthread_create(&readers[r], NULL, run_rank, &ranks[r]);
    }
    for (int r = 0; r < WORLD; r++)
        pthread_join(readers[r], NULL);
    for (int e = 0; e < EPOCHS; e++) {
        int covered = 0;
        for (int id = 0; id < SAMPLES; id++) {
            int any = 0;
            for (int r = 0; r < WORLD; r++)
                any |= ranks[r].seen[e][id];
            covered += any;
        }
        CHECK_EQ(covered, SAMPLES);
    }
    for (int r = 0; r < WORLD; r++) {
        CHECK_EQ(ranks[r].error, 0);
        CHECK_EQ(ranks[r].epochs, EPOCHS);
        CHECK_EQ(ranks[r].batches, EPOCHS * (SAMPLES / WORLD / BATCH));
        CHECK_EQ(ranks[r].samples, EPOCHS * SAMPLES / WORLD);
    }
    id_producer_stop(p, &thread);
    return CHECK_DONE();
}
