/* The device decoder's share of a load (TSOCK_DECODER_GPU, issue 20). The workers still read and
 * probe every file; a JPEG the device takes gets its crop and flip here, from the same random
 * stream the CPU decoder would draw them from, and waits for the device instead of being
 * decoded. Once the workers are done, the driving thread hands the waiting positions to the
 * device in one batch; the positions it fails go back to the workers, marked for the CPU. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "pipeline/pipeline_int.h"

/* How far from the end an EOI marker is looked for: files often carry a few padding bytes. */
#define EOI_SEARCH 1024

int
tsock__pipeline_device_reserve(struct tsock_pipeline *pl, uint32_t n)
{
    if (n <= pl->dcap)
        return 0;
    int failed = 0;
    pl->djobs = tsock__realloc_or_keep(pl->djobs, (size_t)n * sizeof *pl->djobs, &failed);
    pl->dlist = tsock__realloc_or_keep(pl->dlist, (size_t)n * sizeof *pl->dlist, &failed);
    pl->dstatus = tsock__realloc_or_keep(pl->dstatus, (size_t)n * sizeof *pl->dstatus, &failed);
    pl->dpos = tsock__realloc_or_keep(pl->dpos, (size_t)n * sizeof *pl->dpos, &failed);
    pl->on_device = tsock__realloc_or_keep(pl->on_device, n, &failed);
    pl->force_cpu = tsock__realloc_or_keep(pl->force_cpu, n, &failed);
    if (failed)
        return -ENOMEM;
    pl->dcap = n;
    return 0;
}

void
tsock__pipeline_device_free(struct tsock_pipeline *pl)
{
    free(pl->djobs);
    free(pl->dlist);
    free(pl->dstatus);
    free(pl->dpos);
    free(pl->on_device);
    free(pl->force_cpu);
}

/* A JPEG whose data ends before its EOI marker is truncated: the CPU decoder's rules decide
 * whether it is usable (image.h), so it never goes to the device. Entropy-coded data stuffs
 * every 0xFF with 0x00, so FF D9 near the end is the marker. */
static int
ends_with_eoi(const uint8_t *data, size_t size)
{
    size_t from = size > EOI_SEARCH ? size - EOI_SEARCH : 0;
    for (size_t i = size; i >= from + 2; i--)
        if (data[i - 2] == 0xFF && data[i - 1] == 0xD9)
            return 1;
    return 0;
}

int
tsock__pipeline_device_try(struct tsock_pipeline *pl, uint32_t pos, const uint8_t *data,
                           size_t size)
{
    const struct load_job *job = &pl->job;
    struct tsock__image_info info;

    /* Anything the probe rejects is the CPU decoder's to report, with its --on-error rules. */
    if (tsock__image_probe(data, size, &info) != 0 ||
        (uint64_t)info.width * (uint64_t)info.height > TSOCK__IMAGE_MAX_PIXELS ||
        !job->dd->ops->accepts(job->dd, &info) || !ends_with_eoi(data, size))
        return 0;
    struct tsock__image_job *j = &pl->djobs[pos];
    int r;
    if (pl->preset == TSOCK_PRESET_TRAIN) {
        struct tsock__rng rng;
        struct tsock__train_params p = tsock__pipeline_train_params(pl);
        tsock__pipeline_sample_rng(pl, job->epoch, job->ids[pos], &rng);
        r = tsock__preset_train_spec(&rng, &p, info.width, info.height, &j->spec);
    } else {
        r = tsock__preset_val_spec(info.width, info.height, tsock__pipeline_val_resize(pl),
                                   pl->size, &j->spec);
    }
    if (r != 0)
        return 0;
    size_t image_bytes = (size_t)pl->size * (size_t)pl->size * 3;
    j->data = data;
    j->size = size;
    j->out = job->images + (size_t)pos * image_bytes;
    j->sample = job->ids[pos];
    pl->on_device[pos] = 1;
    return 1;
}

int64_t
tsock__pipeline_device_round(struct tsock_pipeline *pl, uint32_t *again)
{
    const struct load_job *job = &pl->job;
    uint32_t k = 0;
    for (uint32_t pos = 0; pos < job->n; pos++)
        if (pl->on_device[pos]) {
            pl->dlist[k] = pl->djobs[pos];
            pl->dpos[k++] = pos;
        }
    if (k == 0)
        return 0;
    int r = job->dd->ops->decode(job->dd, pl->dlist, k, pl->dstatus);
    if (r < 0) {
        tsock__log(TSOCK_LOG_ERROR, "pipeline: the GPU decoder (%s) failed on a batch: %s",
                   job->dd->ops->name(job->dd), tsock_strerror(r));
        return r;
    }
    uint32_t failed = 0;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t pos = pl->dpos[i];
        pl->on_device[pos] = 0;
        if (pl->dstatus[i] == 0)
            continue;
        /* Not the file's verdict: the CPU decoder gives that, with its --on-error rules. */
        tsock__log(TSOCK_LOG_WARN,
                   "pipeline: %s/%s (sample %llu): the GPU decoder (%s) failed (%s): decoded on "
                   "the CPU",
                   pl->index->root, tsock__index_path(pl->index, job->ids[pos]),
                   (unsigned long long)job->ids[pos], job->dd->ops->name(job->dd),
                   tsock_strerror(pl->dstatus[i]));
        pl->force_cpu[pos] = 1;
        again[failed++] = pos;
    }
    atomic_fetch_add_explicit(&pl->st_decoded_gpu, k - failed, memory_order_relaxed);
    return failed;
}
