/* A consumer's own epochs (see epoch_plan.h). */
#include "ring/epoch_plan.h"

void
tsock__epoch_plan_init(struct tsock__epoch_plan *p, uint64_t n, uint32_t batch, int drop_last)
{
    *p = (struct tsock__epoch_plan){.n = n, .batch = batch ? batch : 1, .drop_last = drop_last};
}

uint32_t
tsock__epoch_plan_want(const struct tsock__epoch_plan *p)
{
    if (p->n == 0)
        return p->batch;
    uint64_t left = p->n - p->done;
    return left < p->batch ? (uint32_t)left : p->batch;
}

static void
next_epoch(struct tsock__epoch_plan *p)
{
    p->epoch++;
    p->index = 0;
    p->done = 0;
}

int
tsock__epoch_plan_advance(struct tsock__epoch_plan *p, uint32_t k, int free_end)
{
    p->done += k;
    p->index++;
    if (p->n == 0) {
        if (free_end)
            next_epoch(p);
        return free_end != 0;
    }
    uint64_t left = p->n - p->done;
    if (left != 0 && !(p->drop_last && left < p->batch))
        return 0;
    p->skip = left; /* 0 unless drop_last leaves a short tail out */
    next_epoch(p);
    return 1;
}

void
tsock__epoch_plan_cut(struct tsock__epoch_plan *p)
{
    if (p->done > 0 || p->index > 0)
        next_epoch(p);
    p->skip = 0;
}

uint64_t
tsock__epoch_plan_batches_per_epoch(const struct tsock__epoch_plan *p)
{
    if (p->n == 0)
        return 0;
    return p->drop_last ? p->n / p->batch : (p->n + p->batch - 1) / p->batch;
}
