/* The producer's ring in device memory.
 *
 * The ring is one plain cudaMalloc allocation: legacy IPC exports whole allocations made by
 * cudaMalloc, and stream-ordered or pooled allocators break it. Its handle is taken once and
 * opened once per consumer. Each slot has an interprocess event (timing disabled, as IPC
 * requires) that the producer records after the slot's copy; a consumer makes its stream wait
 * on it, so nobody synchronises a CPU thread with the copy.
 *
 * Workers write a batch into pinned staging memory; publish queues one host-to-device copy of
 * the whole staging slot on the producer's own non-blocking stream, records the slot's event,
 * and returns at once, so that the caller fills the next batch (in the other staging buffer)
 * while this one is copied (issue 20). The engine's service thread announces the batch only
 * once publish_done sees the slot's event complete (issue 12, item 2): a producer killed
 * mid-copy never leaves consumers waiting on an event that will never complete. The caller
 * waits only when it reuses a staging buffer whose copy is still running, and sleeps in the
 * driver then (the staging events have BlockingSync, item 13). Consumers still make their
 * streams wait on the slot's event, which costs nothing once it has completed.
 *
 * With a conversion the staging slot goes to a device scratch slot first; the kernel writes
 * the converted tensor into the ring slot, and the other tensors are copied device to device.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/cuda/cuda_int.h"
#include "backend/cuda/gpudec.h"

struct tsock__cuda_ring {
    struct tsock__slot_memory base;
    int device;
    uint32_t slots;
    size_t in_stride, out_stride;
    struct tsock__convert_plan cv;
    uint8_t *ring;    /* device: slots * out_stride */
    uint8_t *scratch; /* device: one staging slot, with a conversion only */
    uint8_t *staging[2];
    tsock__dev_event_t staged[2]; /* the copy out of staging[i] has finished */
    int current;
    tsock__dev_stream_t stream;
    tsock__dev_event_t *events; /* interprocess, one per slot */
    uint8_t *blob;              /* the attach blob: uuid, memory handle, event handles */
    /* The GPU decoder (gpudec.c), made on the first fill that asks for it. */
    struct tsock__cuda_gpudec *gpudec;
    uint32_t batch_size;
};

/* Pinned staging memory is locked: where the driver counts it against RLIMIT_MEMLOCK (some
 * container runtimes set a small one), say what was needed, what the limit is and the fixes,
 * rather than only the runtime's error name. */
static void
explain_pinned_limit(size_t needed)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    tsock__log(TSOCK_LOG_ERROR,
               "pinned staging needs %zu bytes of locked memory and this process may lock %llu "
               "(RLIMIT_MEMLOCK): fewer --slots do not help here, a smaller --batch-size does; "
               "or raise the limit (ulimit -l unlimited, docker run --ulimit memlock=-1, a "
               "Kubernetes container with IPC_LOCK)",
               needed, (unsigned long long)rl.rlim_cur);
}

/* Device memory, pinned staging, the stream and the per-slot events (device current). */
static int
allocate(struct tsock__cuda_ring *r)
{
    const struct tsock__devapi *d = tsock__dev();
    size_t bytes = r->out_stride * r->slots;
    int e = d->malloc((void **)&r->ring, bytes);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaMalloc (ring)");
    if (r->cv.tensor >= 0 && (e = d->malloc((void **)&r->scratch, r->in_stride)) != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaMalloc (conversion scratch)");
    for (int i = 0; i < 2; i++) {
        e = d->host_alloc((void **)&r->staging[i], r->in_stride);
        if (e != TSOCK__DEV_OK) {
            explain_pinned_limit(2 * r->in_stride);
            return tsock__cuda_fail(e, "cudaHostAlloc (staging)");
        }
        /* BlockingSync: waiting for a copy sleeps instead of spinning a core (item 13). */
        e = d->event_create(&r->staged[i],
                            TSOCK__DEV_EVENT_DISABLE_TIMING | TSOCK__DEV_EVENT_BLOCKING_SYNC);
        if (e != TSOCK__DEV_OK)
            return tsock__cuda_fail(e, "cudaEventCreateWithFlags (staging)");
    }
    e = d->stream_create(&r->stream);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaStreamCreateWithFlags");
    for (uint32_t s = 0; s < r->slots; s++) {
        e = d->event_create(&r->events[s],
                            TSOCK__DEV_EVENT_DISABLE_TIMING | TSOCK__DEV_EVENT_INTERPROCESS);
        if (e != TSOCK__DEV_OK)
            return tsock__cuda_fail(e, "cudaEventCreateWithFlags (interprocess)");
    }
    return 0;
}

/* Takes the handles consumers open, once. */
static int
export_handles(struct tsock__cuda_ring *r)
{
    const struct tsock__devapi *d = tsock__dev();
    int e = d->device_uuid(r->device, r->blob);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaGetDeviceProperties");
    tsock__dev_ipc_handle h;
    if ((e = d->ipc_mem_get(&h, r->ring)) != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaIpcGetMemHandle");
    memcpy(r->blob + TSOCK__CUDA_BLOB_MEM, h.bytes, sizeof h.bytes);
    for (uint32_t s = 0; s < r->slots; s++) {
        if ((e = d->ipc_event_get(&h, r->events[s])) != TSOCK__DEV_OK)
            return tsock__cuda_fail(e, "cudaIpcGetEventHandle");
        memcpy(r->blob + TSOCK__CUDA_BLOB_EVENTS + (size_t)s * TSOCK__CUDA_HANDLE_SIZE, h.bytes,
               sizeof h.bytes);
    }
    return 0;
}

/* Checks the device exists and can share memory and events with other processes. */
static int
check_device(int device)
{
    int n = tsock__cuda_device_count();
    if (n < 0) {
        tsock__log(TSOCK_LOG_ERROR, "cannot keep the ring on CUDA device %d: %s", device,
                   n == TSOCK_E_NO_DEVICE ? "this process has no CUDA device (no GPU or driver)"
                                          : "the GPU cannot be used (see above)");
        return n;
    }
    if (device >= n) {
        tsock__log(TSOCK_LOG_ERROR, "no CUDA device %d: this process sees %d", device, n);
        return TSOCK_E_NO_DEVICE;
    }
    int ok = 0;
    int e = tsock__dev()->device_ipc_ok(device, &ok);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "checking the GPU can be shared");
    if (!ok) {
        tsock__log(TSOCK_LOG_ERROR,
                   "CUDA device %d cannot share memory and events between "
                   "processes (IPC unsupported)",
                   device);
        return TSOCK_E_NO_DEVICE;
    }
    return 0;
}

/* The published layout: the caller's, or the conversion's output (the plan says which). */
static int
plan_conversion(const struct tsock__ring_request *req, struct tsock__ring_shape *shape,
                struct tsock__convert_plan *cv)
{
    static const struct tsock__convert_request none;
    return tsock__convert_plan_make(req->convert ? req->convert : &none, req->layout,
                                    req->batch_size, &shape->layout, shape->offsets, &shape->stride,
                                    cv);
}

int
tsock__cuda_ring_create(struct tsock__slot_memory **out, const struct tsock__ring_request *req,
                        struct tsock__ring_shape *shape)
{
    *out = NULL;
    if (req->slots == 0 || req->slots > TSOCK__CUDA_MAX_SLOTS) {
        tsock__log(TSOCK_LOG_ERROR, "a CUDA ring has at most %d slots, not %u",
                   TSOCK__CUDA_MAX_SLOTS, req->slots);
        return -EINVAL;
    }
    struct tsock__convert_plan cv;
    int err = plan_conversion(req, shape, &cv);
    if (err < 0)
        return err;
    if (tsock__mul_size(shape->stride, req->slots, &shape->bytes) < 0)
        return TSOCK_E_LAYOUT;
    /* Without a conversion a staging slot is copied as it is into a ring slot. */
    if (cv.tensor < 0 && shape->stride != req->stride)
        return -EINVAL;
    err = check_device(req->device);
    if (err < 0)
        return err;
    struct tsock__cuda_ring *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->base.ops = &tsock__backend_cuda;
    r->device = req->device;
    r->slots = req->slots;
    r->in_stride = req->stride;
    r->out_stride = shape->stride;
    r->cv = cv;
    r->batch_size = req->batch_size;
    r->events = calloc(r->slots, sizeof *r->events);
    r->blob = calloc(1, TSOCK__CUDA_BLOB_SIZE(r->slots));
    struct tsock__cuda_guard g;
    err = r->events && r->blob ? tsock__cuda_enter(r->device, &g) : -ENOMEM;
    if (err == 0) {
        err = allocate(r);
        if (err == 0)
            err = export_handles(r);
        tsock__cuda_leave(&g);
    }
    if (err < 0) {
        tsock__cuda_ring_destroy(&r->base);
        return err;
    }
    *out = &r->base;
    return 0;
}

int
tsock__cuda_ring_staging(struct tsock__slot_memory *m, uint32_t slot, uint8_t **host)
{
    struct tsock__cuda_ring *r = (struct tsock__cuda_ring *)m;
    /* An event never recorded counts as complete, so the first use does not wait. */
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(r->device, &g);
    if (err < 0)
        return err;
    int e = tsock__dev()->event_sync(r->staged[r->current]);
    tsock__cuda_leave(&g);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaEventSynchronize (staging)");
    *host = r->staging[r->current];
    return 0;
}

/* The staging slot (already on the device in scratch) into the ring slot, converting. */
static int
convert_slot(struct tsock__cuda_ring *r, uint8_t *dst, uint32_t samples)
{
    const struct tsock__devapi *d = tsock__dev();
    const struct tsock__convert_plan *cv = &r->cv;
    int e = d->memcpy_async(r->scratch, r->staging[r->current], r->in_stride, TSOCK__DEV_H2D,
                            r->stream);
    if (e == TSOCK__DEV_OK && r->gpudec)
        e = tsock__cuda_gpudec_merge(r->gpudec, r->current, r->scratch, r->stream);
    for (int t = 0; t < cv->tensor_count && e == TSOCK__DEV_OK; t++) {
        const uint8_t *in = r->scratch + cv->in_offset[t];
        if (t == cv->tensor) {
            /* The launch reports the runtime's last error: clear one that another user of the
             * shared runtime left, so it does not fail this batch (item 12). */
            d->clear_error();
            e = d->convert_launch(cv, in, dst + cv->out_offset[t], samples, r->stream);
        } else {
            e = d->memcpy_async(dst + cv->out_offset[t], in, cv->in_sample_bytes[t] * samples,
                                TSOCK__DEV_D2D, r->stream);
        }
    }
    return e;
}

int
tsock__cuda_ring_publish(struct tsock__slot_memory *m, uint32_t slot, uint32_t samples)
{
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__cuda_ring *r = (struct tsock__cuda_ring *)m;
    if (slot >= r->slots)
        return -EINVAL;
    uint8_t *dst = r->ring + (size_t)slot * r->out_stride;
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(r->device, &g);
    if (err < 0)
        return err;
    /* One copy of the whole staging slot: tensors sit at the same offsets on both sides. */
    int e = r->cv.tensor >= 0 ? convert_slot(r, dst, samples)
                              : d->memcpy_async(dst, r->staging[r->current], r->in_stride,
                                                TSOCK__DEV_H2D, r->stream);
    if (e == TSOCK__DEV_OK && r->cv.tensor < 0 && r->gpudec)
        e = tsock__cuda_gpudec_merge(r->gpudec, r->current, dst, r->stream);
    if (e == TSOCK__DEV_OK)
        e = d->event_record(r->events[slot], r->stream);
    if (e == TSOCK__DEV_OK)
        e = d->event_record(r->staged[r->current], r->stream);
    tsock__cuda_leave(&g);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "copying a batch to the GPU");
    r->current ^= 1;
    return 0;
}

struct tsock__device_decoder *
tsock__cuda_ring_decoder(struct tsock__slot_memory *m, uint32_t slot, int *err)
{
    struct tsock__cuda_ring *r = (struct tsock__cuda_ring *)m;
    *err = 0;
    if (!r->gpudec) {
        struct tsock__cuda_guard g;
        *err = tsock__cuda_enter(r->device, &g);
        if (*err < 0)
            return NULL;
        *err = tsock__cuda_gpudec_create(&r->gpudec, r->device, r->stream, r->staging, r->in_stride,
                                         r->batch_size);
        tsock__cuda_leave(&g);
        if (*err < 0)
            return NULL;
    }
    return tsock__cuda_gpudec_bind(r->gpudec, r->current);
}

/* Called by the producer's service thread, which may never have chosen a device and must not
 * fail (or break) a graph another thread of the process captures: relaxed, on the ring's
 * device. */
int
tsock__cuda_ring_publish_done(struct tsock__slot_memory *m, uint32_t slot)
{
    struct tsock__cuda_ring *r = (struct tsock__cuda_ring *)m;
    if (slot >= r->slots)
        return -EINVAL;
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(r->device, &g);
    if (err < 0)
        return err;
    int mode = 0, relaxed = d->capture_relax(&mode) == TSOCK__DEV_OK;
    int e = d->event_query(r->events[slot]);
    if (relaxed)
        d->capture_restore(mode);
    tsock__cuda_leave(&g);
    if (e == TSOCK__DEV_OK)
        return 1;
    return e == TSOCK__DEV_NOT_READY ? 0 : tsock__cuda_fail(e, "cudaEventQuery (a batch's copy)");
}

size_t
tsock__cuda_ring_export(const struct tsock__slot_memory *m, const uint8_t **blob)
{
    const struct tsock__cuda_ring *r = (const struct tsock__cuda_ring *)m;
    *blob = r->blob;
    return TSOCK__CUDA_BLOB_SIZE(r->slots);
}

void
tsock__cuda_ring_destroy(struct tsock__slot_memory *m)
{
    struct tsock__cuda_ring *r = (struct tsock__cuda_ring *)m;
    if (!r)
        return;
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__cuda_guard g;
    if (tsock__cuda_enter(r->device, &g) == 0) {
        if (r->stream)
            (void)d->stream_sync(r->stream);
        tsock__cuda_gpudec_destroy(r->gpudec);
        for (uint32_t s = 0; r->events && s < r->slots; s++)
            if (r->events[s])
                (void)d->event_destroy(r->events[s]);
        for (int i = 0; i < 2; i++) {
            if (r->staged[i])
                (void)d->event_destroy(r->staged[i]);
            if (r->staging[i])
                (void)d->host_free(r->staging[i]);
        }
        if (r->stream)
            (void)d->stream_destroy(r->stream);
        if (r->scratch)
            (void)d->free(r->scratch);
        if (r->ring)
            (void)d->free(r->ring);
        tsock__cuda_leave(&g);
    }
    free(r->events);
    free(r->blob);
    free(r);
}
