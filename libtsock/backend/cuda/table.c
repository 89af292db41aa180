/* The CUDA backend's table: the ring in device memory (ring.c), consumers' views of it
 * (import.c), and release fences and gather buffers on a device (device.c). */
#include <errno.h>

#include "backend/cuda/cuda_int.h"
#include "tsock/tsock.h"

static int
cuda_remove_orphan(const uint8_t *blob, size_t blob_len)
{
    return 0; /* device memory and IPC handles die with the process that made them */
}

/* Issue 12, item 3: a consumer closing with batches never released waits for all the work its
 * process queued on their device, on every stream (torch's non-blocking side streams too), before
 * it says BYE and the producer may overwrite the slots that work still reads. */
static int
cuda_device_sync(int device)
{
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    /* The caller's thread: a graph another thread captures must not fail it (issue 20). */
    struct tsock__cuda_relax rx;
    tsock__cuda_relax_begin(&rx);
    int e = tsock__dev()->device_sync();
    tsock__cuda_relax_end(&rx);
    tsock__cuda_leave(&g);
    return e == TSOCK__DEV_OK ? 0 : tsock__cuda_fail(e, "waiting for the device (closing)");
}

static int
cuda_device_count(void)
{
    return tsock__cuda_device_count();
}

const struct tsock__backend tsock__backend_cuda = {
    .name = "cuda",
    .wire_device = TSOCK_DEVICE_CUDA,
    .create = tsock__cuda_ring_create,
    .export_blob = tsock__cuda_ring_export,
    .fill_pointer = tsock__cuda_ring_staging,
    .publish = tsock__cuda_ring_publish,
    .publish_done = tsock__cuda_ring_publish_done,
    .close = tsock__cuda_ring_destroy,
    .device_decoder = tsock__cuda_ring_decoder,
    .attach = tsock__cuda_import_open,
    .view_base = tsock__cuda_import_base,
    .view_device = tsock__cuda_import_device,
    .wait = tsock__cuda_import_wait,
    .copy_out = tsock__cuda_import_copy,
    .copy_finish = tsock__cuda_import_sync,
    .copies_done = tsock__cuda_import_copies_done,
    .detach = tsock__cuda_import_close,
    .buffer_alloc = tsock__cuda_alloc,
    .buffer_free = tsock__cuda_free,
    .fence_arm = tsock__cuda_fence_arm,
    .fence_passed = tsock__cuda_fence_done,
    .fence_destroy = tsock__cuda_fence_destroy,
    .device_sync = cuda_device_sync,
    .device_count = cuda_device_count,
    .remove_orphan = cuda_remove_orphan,
};

/* Public (tsock.h): a synchronous copy of device bytes back to the host, on `device`. */
int
tsock_cuda_copy_to_host(void *dst, const void *src, size_t bytes, int device)
{
    if (!dst || !src || device < 0)
        return -EINVAL;
    int n = tsock__cuda_device_count();
    if (n < 0)
        return n;
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    /* The device's default stream: after tsock_batch_wait(batch, NULL) the copy waits for the
     * batch. */
    const struct tsock__devapi *d = tsock__dev();
    int e = d->memcpy_async(dst, src, bytes, TSOCK__DEV_D2H, NULL);
    if (e == TSOCK__DEV_OK)
        e = d->stream_sync(NULL);
    tsock__cuda_leave(&g);
    return e == TSOCK__DEV_OK ? 0 : tsock__cuda_fail(e, "copying device bytes to the host");
}
