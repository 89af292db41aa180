/* Each file's entry points into its Huffman data (libtsock/image/image.h), kept from epoch to
 * epoch: the first decode of a file learns where its MCU rows begin, and later epochs' crops
 * start there instead of decoding everything above and beside them.
 *
 * One slot per sample id. A worker takes a file's set out of its slot for the decode (so no
 * two decodes use one set, even when a small dataset puts a file twice in flight) and puts it
 * back after. The sets' memory is capped by tsock_pipeline_set_entry_points: once the sets
 * hold that much, files without one get none (a set only grows to its file's grid, so the cap
 * is passed by at most one set per worker), and a warning says so once: those files are
 * decoded from their start every epoch, which a larger budget would spare. */
#include <stdlib.h>

#include "core/core.h"
#include "pipeline/pipeline_int.h"

int
tsock__pipeline_points_open(struct tsock_pipeline *pl)
{
    if (pl->points_budget == 0 || pl->index->count == 0)
        return 0;
    pl->points = calloc((size_t)pl->index->count, sizeof *pl->points);
    return pl->points ? 0 : -ENOMEM;
}

void
tsock__pipeline_points_free(struct tsock_pipeline *pl)
{
    if (!pl->points)
        return;
    for (uint64_t i = 0; i < pl->index->count; i++)
        tsock__entry_points_destroy(atomic_load(&pl->points[i]));
    free(pl->points);
    pl->points = NULL;
}

struct tsock__entry_points *
tsock__pipeline_points_take(struct tsock_pipeline *pl, uint64_t id, size_t *bytes)
{
    *bytes = 0;
    if (!pl->points)
        return NULL;
    struct tsock__entry_points *p =
        atomic_exchange_explicit(&pl->points[id], NULL, memory_order_acquire);
    if (p)
        *bytes = tsock__entry_points_bytes(p);
    else if (atomic_load_explicit(&pl->st_points_bytes, memory_order_relaxed) < pl->points_budget)
        p = tsock__entry_points_create(); /* NULL when out of memory: the decode goes without */
    else if (!atomic_exchange_explicit(&pl->points_full, 1, memory_order_relaxed))
        tsock__log(TSOCK_LOG_WARN,
                   "pipeline: the JPEGs' entry points fill their budget, %llu MiB: files decoded "
                   "from now on get none, and every epoch decodes them from their start (a "
                   "budget of about 2 KiB per file keeps them all: tsock_pipeline_set_entry_points"
                   ", tsock-producer --entry-points-mb)",
                   (unsigned long long)(pl->points_budget >> 20));
    return p;
}

void
tsock__pipeline_points_put(struct tsock_pipeline *pl, uint64_t id, struct tsock__entry_points *p,
                           size_t bytes)
{
    if (!p)
        return;
    /* unsigned arithmetic: a set that shrank (relearnt for a smaller grid) subtracts */
    atomic_fetch_add_explicit(&pl->st_points_bytes,
                              (uint64_t)tsock__entry_points_bytes(p) - (uint64_t)bytes,
                              memory_order_relaxed);
    /* acq_rel: a set another worker put back meanwhile is read (its size) and freed here */
    struct tsock__entry_points *old =
        atomic_exchange_explicit(&pl->points[id], p, memory_order_acq_rel);
    if (old) { /* another decode of the file put its set back meanwhile: keep one */
        atomic_fetch_sub_explicit(&pl->st_points_bytes, tsock__entry_points_bytes(old),
                                  memory_order_relaxed);
        tsock__entry_points_destroy(old);
    }
}
