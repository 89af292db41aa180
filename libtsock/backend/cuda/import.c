/* A consumer's view of a producer's ring in device memory: the ring's allocation and the slots'
 * events, opened from their IPC handles once per session and kept open until the session ends
 * (opening costs milliseconds; a batch must not). Closing releases this process's mapping, so
 * the memory of a producer that died is not kept alive by its consumers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"

struct tsock__cuda_import {
    struct tsock__ring_view base_view;
    int device;
    uint32_t slots;
    uint8_t *base;
    tsock__dev_event_t *events;
    tsock__dev_stream_t copy_stream; /* gathers only */
    tsock__dev_event_t copied;       /* recorded after each gather copy: polled */
};

/* Chooses the device to open the ring on. `producer` is the producer's GPU as this process
 * numbers it, or -1 when it is hidden from this process. */
static int
choose_device(int wanted, int producer, int count)
{
    if (wanted < 0) {
        if (producer >= 0)
            return producer;
        /* IPC can open a handle of a device this process does not see; do it on device 0 and
         * let the runtime set up peer access. */
        tsock__log(TSOCK_LOG_WARN, "the producer's GPU is not visible to this process "
                                   "(CUDA_VISIBLE_DEVICES?); opening its ring on device 0");
        return 0;
    }
    if (wanted >= count) {
        tsock__log(TSOCK_LOG_ERROR, "no CUDA device %d: this process sees %d", wanted, count);
        return TSOCK_E_NO_DEVICE;
    }
    if (producer < 0 || producer == wanted)
        return wanted;
    int can = 0;
    int e = tsock__dev()->can_access_peer(&can, wanted, producer);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaDeviceCanAccessPeer");
    if (!can) {
        tsock__log(TSOCK_LOG_ERROR,
                   "CUDA device %d cannot read the producer's device %d: no "
                   "peer access between them; use device %d",
                   wanted, producer, producer);
        return TSOCK_E_NO_DEVICE;
    }
    return wanted;
}

/* Opens the memory and event handles (device current). */
static int
open_handles(struct tsock__cuda_import *imp, const uint8_t *blob)
{
    const struct tsock__devapi *d = tsock__dev();
    tsock__dev_ipc_handle h;
    memcpy(h.bytes, blob + TSOCK__CUDA_BLOB_MEM, sizeof h.bytes);
    int e = d->ipc_mem_open((void **)&imp->base, &h);
    if (e != TSOCK__DEV_OK) {
        imp->base = NULL;
        return tsock__cuda_fail(e, "cudaIpcOpenMemHandle (the producer's ring)");
    }
    for (uint32_t s = 0; s < imp->slots; s++) {
        memcpy(h.bytes, blob + TSOCK__CUDA_BLOB_EVENTS + (size_t)s * TSOCK__CUDA_HANDLE_SIZE,
               sizeof h.bytes);
        if ((e = d->ipc_event_open(&imp->events[s], &h)) != TSOCK__DEV_OK) {
            imp->events[s] = NULL;
            return tsock__cuda_fail(e, "cudaIpcOpenEventHandle (a slot's event)");
        }
    }
    e = d->stream_create(&imp->copy_stream);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaStreamCreateWithFlags");
    e = d->event_create(&imp->copied, TSOCK__DEV_EVENT_DISABLE_TIMING);
    return e == TSOCK__DEV_OK ? 0 : tsock__cuda_fail(e, "cudaEventCreateWithFlags (gather)");
}

int
tsock__cuda_import_open(struct tsock__ring_view **out, const struct tsock__attach_request *req)
{
    *out = NULL;
    uint32_t slots = req->slots;
    if (slots == 0 || slots > TSOCK__CUDA_MAX_SLOTS ||
        req->blob_len != TSOCK__CUDA_BLOB_SIZE(slots))
        return -EINVAL;
    int count = tsock__cuda_device_count();
    if (count < 0) {
        tsock__log(TSOCK_LOG_ERROR, "the producer's ring is in GPU memory, and %s",
                   count == TSOCK_E_NO_DEVICE ? "this process has no CUDA device (no GPU or driver)"
                                              : "this process cannot use its GPU (see above)");
        return count;
    }
    int producer = tsock__cuda_find_uuid(req->blob);
    if (producer < -1)
        return producer;
    int chosen = choose_device(req->device, producer, count);
    if (chosen < 0)
        return chosen;
    struct tsock__cuda_import *imp = calloc(1, sizeof *imp);
    if (!imp)
        return -ENOMEM;
    imp->base_view.ops = &tsock__backend_cuda;
    imp->device = chosen;
    imp->slots = slots;
    imp->events = calloc(slots, sizeof *imp->events);
    struct tsock__cuda_guard g;
    int err = imp->events ? tsock__cuda_enter(chosen, &g) : -ENOMEM;
    if (err == 0) {
        err = open_handles(imp, req->blob);
        tsock__cuda_leave(&g);
    }
    if (err < 0) {
        tsock__cuda_import_close(&imp->base_view);
        return err;
    }
    tsock__log(TSOCK_LOG_INFO, "opened the producer's GPU ring (%zu bytes) on CUDA device %d",
               req->ring_bytes, chosen);
    *out = &imp->base_view;
    return 0;
}

const uint8_t *
tsock__cuda_import_base(const struct tsock__ring_view *v)
{
    const struct tsock__cuda_import *imp = (const struct tsock__cuda_import *)v;
    return imp->base;
}

int
tsock__cuda_import_device(const struct tsock__ring_view *v)
{
    const struct tsock__cuda_import *imp = (const struct tsock__cuda_import *)v;
    return imp->device;
}

/* Every call below runs with the ring's device current (item 11), explicit stream or not: a
 * thread that never used CUDA would otherwise get a context made on device 0. */
int
tsock__cuda_import_wait(struct tsock__ring_view *v, uint32_t slot, void *stream)
{
    struct tsock__cuda_import *imp = (struct tsock__cuda_import *)v;
    if (slot >= imp->slots)
        return -EINVAL;
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(imp->device, &g);
    if (err < 0)
        return err;
    int e = tsock__dev()->stream_wait((tsock__dev_stream_t)stream, imp->events[slot]);
    tsock__cuda_leave(&g);
    return e == TSOCK__DEV_OK ? 0 : tsock__cuda_fail(e, "cudaStreamWaitEvent (batch ready)");
}

int
tsock__cuda_import_copy(struct tsock__ring_view *v, uint32_t slot, void *dst, const void *src,
                        size_t bytes)
{
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__cuda_import *imp = (struct tsock__cuda_import *)v;
    if (slot >= imp->slots)
        return -EINVAL;
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(imp->device, &g);
    if (err < 0)
        return err;
    int e = d->stream_wait(imp->copy_stream, imp->events[slot]);
    if (e == TSOCK__DEV_OK)
        e = d->memcpy_async(dst, src, bytes, TSOCK__DEV_D2D, imp->copy_stream);
    if (e == TSOCK__DEV_OK)
        e = d->event_record(imp->copied, imp->copy_stream);
    tsock__cuda_leave(&g);
    return e == TSOCK__DEV_OK ? 0 : tsock__cuda_fail(e, "queuing a gather copy");
}

int
tsock__cuda_import_sync(struct tsock__ring_view *v)
{
    struct tsock__cuda_import *imp = (struct tsock__cuda_import *)v;
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(imp->device, &g);
    if (err < 0)
        return err;
    /* The caller's thread: a graph another thread captures must not fail it (issue 20). */
    struct tsock__cuda_relax rx;
    tsock__cuda_relax_begin(&rx);
    int e = tsock__dev()->stream_sync(imp->copy_stream);
    tsock__cuda_relax_end(&rx);
    tsock__cuda_leave(&g);
    return e == TSOCK__DEV_OK ? 0 : tsock__cuda_fail(e, "cudaStreamSynchronize (gather)");
}

int
tsock__cuda_import_copies_done(struct tsock__ring_view *v)
{
    struct tsock__cuda_import *imp = (struct tsock__cuda_import *)v;
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(imp->device, &g);
    if (err < 0)
        return err;
    struct tsock__cuda_relax rx;
    tsock__cuda_relax_begin(&rx);
    int e = tsock__dev()->event_query(imp->copied);
    tsock__cuda_relax_end(&rx);
    tsock__cuda_leave(&g);
    if (e == TSOCK__DEV_OK)
        return 1;
    return e == TSOCK__DEV_NOT_READY ? 0 : tsock__cuda_fail(e, "cudaEventQuery (gather)");
}

void
tsock__cuda_import_close(struct tsock__ring_view *v)
{
    struct tsock__cuda_import *imp = (struct tsock__cuda_import *)v;
    if (!imp)
        return;
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__cuda_guard g;
    if (tsock__cuda_enter(imp->device, &g) == 0) {
        /* Nothing is unmapped under a queued gather copy, capture or not (issue 20). */
        struct tsock__cuda_relax rx;
        tsock__cuda_relax_begin(&rx);
        if (imp->copy_stream) {
            (void)d->stream_sync(imp->copy_stream);
            (void)d->stream_destroy(imp->copy_stream);
        }
        if (imp->copied)
            (void)d->event_destroy(imp->copied);
        tsock__cuda_relax_end(&rx);
        for (uint32_t s = 0; imp->events && s < imp->slots; s++)
            if (imp->events[s])
                (void)d->event_destroy(imp->events[s]);
        if (imp->base)
            (void)d->ipc_mem_close(imp->base);
        tsock__cuda_leave(&g);
    }
    free(imp->events);
    free(imp);
}
