/* The consumer's side of a ring in GPU memory: opening it from the handles in WELCOME, closing
 * it once the session is over and nothing refers to it, gathers into device memory, and
 * stream-ordered releases.
 *
 * A stream-ordered release records an event (the batch's fence) on the caller's stream and
 * hands the batch to the service thread, which polls the fence every millisecond or so and
 * only then drops the batch's reference to its slot, so the producer hears of the release when
 * the caller's GPU work has finished. The batch object itself returns to the free list at that
 * moment too: a gathered batch's device buffers are reused only after the work reading them is
 * done. Everything here runs with mu held and uses the backend interface only. */
#include <errno.h>
#include <stdlib.h>

#include "consumer_internal.h"

int
tsock__device_open_ring(tsock_consumer *c, const struct tsock_msg_welcome *w)
{
    int err = tsock__cuda_import_open(&c->cuda, c->device, &w->cuda, w->slot_count);
    if (err < 0)
        return err;
    c->ring_base = tsock__cuda_import_base(c->cuda);
    tsock__log(TSOCK_LOG_INFO, "opened the producer's GPU ring (%llu bytes) on CUDA device %d",
               (unsigned long long)w->ring_bytes, tsock__cuda_import_device(c->cuda));
    return 0;
}

/* The caller holds a batch that points into the session's ring. */
static int
ring_in_use(const tsock_consumer *c)
{
    if (c->deferred_count > 0)
        return 1;
    for (const tsock_batch *b = c->all_batches; b; b = b->next_all)
        if (b->held && b->view && b->generation == c->generation)
            return 1;
    return 0;
}

/* The fence has passed: the slot reference goes, the batch object is free again. */
static void
finish_release(tsock_consumer *c, tsock_batch *b)
{
    if (b->view && b->view_slot != UINT32_MAX && b->generation == c->generation)
        tsock__unref_slot(c, b->view_slot);
    b->next_free = c->free_batches;
    c->free_batches = b;
}

int
tsock__device_poll_releases(tsock_consumer *c)
{
    tsock_batch **link = &c->deferred;
    while (*link) {
        tsock_batch *b = *link;
        /* A failed query (the context is broken) counts as passed: waiting cannot help. */
        if (tsock__cuda_fence_done(b->fence_device, b->fence) == 0) {
            link = &b->next_deferred;
            continue;
        }
        *link = b->next_deferred;
        c->deferred_count--;
        finish_release(c, b);
    }
    return c->deferred_count;
}

void
tsock__device_close_if_unused(tsock_consumer *c)
{
    if (!c->cuda || !c->terminal_error || c->ready_len > 0 || ring_in_use(c))
        return;
    tsock__cuda_import_close(c->cuda);
    c->cuda = NULL;
    c->ring_base = NULL;
    tsock__log(TSOCK_LOG_INFO, "closed the GPU ring of a finished session (%s)",
               tsock_strerror(c->terminal_error));
}

void
tsock__device_retire_ring(tsock_consumer *c)
{
    if (!c->cuda)
        return;
    if (!ring_in_use(c) || c->old_cuda_count == TSOCK_MAX_OLD_MAPPINGS)
        tsock__cuda_import_close(c->cuda);
    else
        c->old_cuda[c->old_cuda_count++] = c->cuda;
    c->cuda = NULL;
    c->ring_base = NULL;
}

int
tsock__device_reserve(tsock_consumer *c, tsock_batch *b, uint32_t tensor, size_t need)
{
    void *grown = NULL;
    int err = tsock__cuda_alloc(b->gather_device, need, &grown);
    if (err < 0)
        return err;
    tsock__cuda_free(b->gather_device, b->gather[tensor]);
    b->gather[tensor] = grown;
    b->gather_cap[tensor] = need;
    return 0;
}

int
tsock__device_gather(tsock_consumer *c, tsock_batch *b, uint32_t slot, uint32_t sample,
                     uint32_t count)
{
    const struct tsock_msg_welcome *w = &c->welcome;
    for (uint32_t t = 0; t < w->tensor_count; t++) {
        size_t bytes = (size_t)w->tensors[t].sample_bytes;
        const uint8_t *src =
            c->ring_base + (size_t)slot * w->slot_stride + w->tensors[t].offset + bytes * sample;
        int err = tsock__cuda_import_copy(c->cuda, slot, b->gather[t] + bytes * b->samples, src,
                                          bytes * count);
        if (err < 0)
            return err;
    }
    /* Complete before the slot's reference is dropped: the producer may refill it then. */
    return tsock__cuda_import_sync(c->cuda);
}

int
tsock__device_release(tsock_consumer *c, tsock_batch *b, void *stream)
{
    if (b->fence && b->fence_device != b->device) {
        tsock__cuda_fence_destroy(b->fence);
        b->fence = NULL;
    }
    int err = 0;
    if (!b->fence) {
        err = tsock__cuda_fence_create(b->device, &b->fence);
        b->fence_device = b->device;
    }
    if (err == 0)
        err = tsock__cuda_fence_record(b->fence_device, b->fence, stream);
    if (err < 0)
        return err;
    b->held = 0;
    c->held_count--;
    c->stat_released++;
    b->next_deferred = c->deferred;
    c->deferred = b;
    c->deferred_count++;
    tsock__wake_signal(c->wake_fd); /* the service thread starts polling */
    return 0;
}

void
tsock__device_free_all(tsock_consumer *c)
{
    for (tsock_batch *b = c->all_batches; b; b = b->next_all) {
        tsock__cuda_fence_destroy(b->fence);
        b->fence = NULL;
        if (b->gather_device < 0)
            continue;
        for (int t = 0; t < TSOCK_MAX_TENSORS; t++) {
            tsock__cuda_free(b->gather_device, b->gather[t]);
            b->gather[t] = NULL;
        }
    }
    tsock__cuda_import_close(c->cuda);
    c->cuda = NULL;
    for (int i = 0; i < c->old_cuda_count; i++)
        tsock__cuda_import_close(c->old_cuda[i]);
    c->old_cuda_count = 0;
}
