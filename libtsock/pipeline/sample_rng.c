/* The random stream of one sample in one epoch, shared by the CPU workers (load.c) and the
 * device decoder's round (device_load.c), so that both draw the same crop and flip. Its own
 * file so that neither of those two calls the other back. */
#include "core/core.h"
#include "pipeline/pipeline_int.h"

/* Every random decision about sample `id` in epoch `epoch` comes from this stream. */
void
tsock__pipeline_sample_rng(const struct tsock_pipeline *pl, uint64_t epoch, uint64_t id,
                           struct tsock__rng *rng)
{
    tsock__rng_seed(rng, tsock__mix64(pl->seed ^ tsock__mix64(epoch ^ tsock__mix64(~id))));
}
