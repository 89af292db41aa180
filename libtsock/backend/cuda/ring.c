/* The producer's ring in device memory.
 *
 * The ring is one plain cudaMalloc allocation: legacy IPC exports whole allocations made by
 * cudaMalloc, and stream-ordered or pooled allocators break it. Its handle is taken once and
 * opened once per consumer. Each slot has an interprocess event (timing disabled, as IPC
 * requires) that the producer records after the slot's copy; a consumer makes its stream wait
 * on it, so nobody synchronises a CPU thread with the copy.
 *
 * Workers write a batch into pinned staging memory; publish queues one host-to-device copy of
 * the whole staging slot on the producer's own non-blocking stream and moves to the second
 * staging buffer, so the next batch is decoded while this one travels over PCIe. Before a
 * staging buffer is written again, the copy that read it must have finished: that wait (in
 * tsock__cuda_ring_staging) is the only point where the producer waits on the GPU.
 *
 * With a conversion the staging slot goes to a device scratch slot first; the kernel writes
 * the converted tensor into the ring slot, and the other tensors are copied device to device.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"

struct tsock__cuda_ring {
    struct tsock__slot_memory base;
    int device;
    uint32_t slots;
    size_t in_stride, out_stride;
    struct tsock__convert_plan cv;
    uint8_t *ring;    /* device: slots * out_stride */
    uint8_t *scratch; /* device: one staging slot, with a conversion only */
    uint8_t *staging[2];
    cudaEvent_t staged[2]; /* the copy out of staging[i] has finished */
    int current;
    cudaStream_t stream;
    cudaEvent_t *events; /* interprocess, one per slot */
    uint8_t *blob;       /* the attach blob: uuid, memory handle, event handles */
};

/* Device memory, pinned staging, the stream and the per-slot events (device current). */
static int
allocate(struct tsock__cuda_ring *r)
{
    size_t bytes = r->out_stride * r->slots;
    cudaError_t e = cudaMalloc((void **)&r->ring, bytes);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaMalloc (ring)");
    if (r->cv.tensor >= 0 && (e = cudaMalloc((void **)&r->scratch, r->in_stride)) != cudaSuccess)
        return tsock__cuda_fail(e, "cudaMalloc (conversion scratch)");
    for (int i = 0; i < 2; i++) {
        e = cudaHostAlloc((void **)&r->staging[i], r->in_stride, cudaHostAllocDefault);
        if (e != cudaSuccess)
            return tsock__cuda_fail(e, "cudaHostAlloc (staging)");
        e = cudaEventCreateWithFlags(&r->staged[i], cudaEventDisableTiming);
        if (e != cudaSuccess)
            return tsock__cuda_fail(e, "cudaEventCreateWithFlags (staging)");
    }
    e = cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaStreamCreateWithFlags");
    for (uint32_t s = 0; s < r->slots; s++) {
        e = cudaEventCreateWithFlags(&r->events[s], cudaEventDisableTiming | cudaEventInterprocess);
        if (e != cudaSuccess)
            return tsock__cuda_fail(e, "cudaEventCreateWithFlags (interprocess)");
    }
    return 0;
}

/* Takes the handles consumers open, once. */
static int
export_handles(struct tsock__cuda_ring *r)
{
    struct cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, r->device);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaGetDeviceProperties");
    memcpy(r->blob, prop.uuid.bytes, TSOCK__CUDA_UUID_SIZE);
    cudaIpcMemHandle_t mem;
    if ((e = cudaIpcGetMemHandle(&mem, r->ring)) != cudaSuccess)
        return tsock__cuda_fail(e, "cudaIpcGetMemHandle");
    memcpy(r->blob + TSOCK__CUDA_BLOB_MEM, &mem, sizeof mem);
    for (uint32_t s = 0; s < r->slots; s++) {
        cudaIpcEventHandle_t ev;
        if ((e = cudaIpcGetEventHandle(&ev, r->events[s])) != cudaSuccess)
            return tsock__cuda_fail(e, "cudaIpcGetEventHandle");
        memcpy(r->blob + TSOCK__CUDA_BLOB_EVENTS + (size_t)s * TSOCK__CUDA_HANDLE_SIZE, &ev,
               sizeof ev);
    }
    return 0;
}

/* Checks the device exists and can share memory and events with other processes. */
static int
check_device(int device)
{
    int n = tsock__cuda_device_count();
    if (n < 0) {
        tsock__log(TSOCK_LOG_ERROR,
                   "cannot keep the ring on CUDA device %d: this process has "
                   "no usable CUDA device (no GPU, driver or runtime)",
                   device);
        return n;
    }
    if (device >= n) {
        tsock__log(TSOCK_LOG_ERROR, "no CUDA device %d: this process sees %d", device, n);
        return TSOCK_E_NO_DEVICE;
    }
    int ipc_events = 0, unified = 0;
    cudaError_t e = cudaDeviceGetAttribute(&ipc_events, cudaDevAttrIpcEventSupport, device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&unified, cudaDevAttrUnifiedAddressing, device);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaDeviceGetAttribute");
    if (!ipc_events || !unified) {
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
    cudaError_t e = cudaEventSynchronize(r->staged[r->current]);
    tsock__cuda_leave(&g);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaEventSynchronize (staging)");
    *host = r->staging[r->current];
    return 0;
}

/* The staging slot (already on the device in scratch) into the ring slot, converting. */
static cudaError_t
convert_slot(struct tsock__cuda_ring *r, uint8_t *dst, uint32_t samples)
{
    const struct tsock__convert_plan *cv = &r->cv;
    cudaError_t e = cudaMemcpyAsync(r->scratch, r->staging[r->current], r->in_stride,
                                    cudaMemcpyHostToDevice, r->stream);
    for (int t = 0; t < cv->tensor_count && e == cudaSuccess; t++) {
        const uint8_t *in = r->scratch + cv->in_offset[t];
        if (t == cv->tensor)
            e = tsock__cuda_convert_launch(cv, in, dst + cv->out_offset[t], samples, r->stream);
        else
            e = cudaMemcpyAsync(dst + cv->out_offset[t], in, cv->in_sample_bytes[t] * samples,
                                cudaMemcpyDeviceToDevice, r->stream);
    }
    return e;
}

int
tsock__cuda_ring_publish(struct tsock__slot_memory *m, uint32_t slot, uint32_t samples)
{
    struct tsock__cuda_ring *r = (struct tsock__cuda_ring *)m;
    if (slot >= r->slots)
        return -EINVAL;
    uint8_t *dst = r->ring + (size_t)slot * r->out_stride;
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(r->device, &g);
    if (err < 0)
        return err;
    /* One copy of the whole staging slot: tensors sit at the same offsets on both sides. */
    cudaError_t e = r->cv.tensor >= 0 ? convert_slot(r, dst, samples)
                                      : cudaMemcpyAsync(dst, r->staging[r->current], r->in_stride,
                                                        cudaMemcpyHostToDevice, r->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(r->staged[r->current], r->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(r->events[slot], r->stream);
    tsock__cuda_leave(&g);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "queuing a batch's copy to the GPU");
    r->current ^= 1;
    return 0;
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
    struct tsock__cuda_guard g;
    if (tsock__cuda_enter(r->device, &g) == 0) {
        if (r->stream)
            (void)cudaStreamSynchronize(r->stream);
        for (uint32_t s = 0; r->events && s < r->slots; s++)
            if (r->events[s])
                (void)cudaEventDestroy(r->events[s]);
        for (int i = 0; i < 2; i++) {
            if (r->staged[i])
                (void)cudaEventDestroy(r->staged[i]);
            if (r->staging[i])
                (void)cudaFreeHost(r->staging[i]);
        }
        if (r->stream)
            (void)cudaStreamDestroy(r->stream);
        (void)cudaFree(r->scratch);
        (void)cudaFree(r->ring);
        tsock__cuda_leave(&g);
    }
    free(r->events);
    free(r->blob);
    free(r);
}
