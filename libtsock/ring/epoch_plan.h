/* A consumer's own epochs over the producer's sample stream: how many samples its next batch
 * takes, where its epoch ends, what drop_last skips. Pure arithmetic, no I/O.
 *
 * With a producer sampler, a consumer's epoch is the `n` consecutive stream samples that start
 * at its window; the producer keeps every running window a permutation of the dataset (see
 * dataset/sampler.c), so cutting the stream at window boundaries gives exact epochs. In free
 * mode (n == 0) epochs follow the producer's epoch-end marks, which the caller tracks.
 */
#ifndef TSOCK_EPOCH_PLAN_H
#define TSOCK_EPOCH_PLAN_H

#include <stdint.h>

struct tsock__epoch_plan {
    uint64_t n;     /* samples per epoch; 0 in free mode */
    uint32_t batch; /* the consumer's batch size, >= 1 */
    int drop_last;  /* skip a short last batch (sampler mode only) */
    uint64_t epoch; /* current epoch, from 0 */
    uint64_t index; /* batches delivered in the current epoch */
    uint64_t done;  /* samples of the current epoch delivered */
    uint64_t skip;  /* samples to discard before the next epoch starts (drop_last's tail) */
};

void tsock__epoch_plan_init(struct tsock__epoch_plan *p, uint64_t n, uint32_t batch, int drop_last);

/* Samples the next batch should hold: the batch size, cut at the epoch's end in sampler mode. */
uint32_t tsock__epoch_plan_want(const struct tsock__epoch_plan *p);

/* Records a delivered batch of k samples. Returns 1 when it ends the epoch: the plan then
 * stands at the next epoch, with `skip` set to the tail drop_last leaves out. In free mode the
 * caller says whether the batch ended the producer's epoch (`free_end`). */
int tsock__epoch_plan_advance(struct tsock__epoch_plan *p, uint32_t k, int free_end);

/* Ends the current epoch early (its producer vanished) or restarts after a pause: the next
 * batch begins a new epoch. Does nothing at an epoch boundary. */
void tsock__epoch_plan_cut(struct tsock__epoch_plan *p);

/* Batches in one epoch (0 in free mode). */
uint64_t tsock__epoch_plan_batches_per_epoch(const struct tsock__epoch_plan *p);

#endif
