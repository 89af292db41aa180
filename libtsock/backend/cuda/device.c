/* Devices, errors, fences and plain device memory for the CUDA backend. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"

/* What each environment failure means for the user (issue 12, item 10). */
static const char *
advice(int e)
{
    switch (e) {
    case TSOCK__DEV_NO_DEVICE: return "no CUDA device or driver in this process";
    case TSOCK__DEV_OLD_DRIVER:
        return "the NVIDIA driver is older than this build's CUDA runtime needs: update the "
               "driver, or build tsock with an older toolkit";
    case TSOCK__DEV_EXCLUSIVE:
        return "the GPU is in EXCLUSIVE_PROCESS (or PROHIBITED) compute mode, so a producer and "
               "its consumers cannot share it: nvidia-smi -c DEFAULT";
    case TSOCK__DEV_FORK:
        return "CUDA was initialised before this process was forked: a forked child cannot use "
               "CUDA (start workers with spawn, or initialise CUDA after fork)";
    case TSOCK__DEV_IPC:
        return "CUDA IPC could not map the producer's handle: producer and consumers need a "
               "shared PID namespace (docker --ipc=host --pid=host) and /dev/shm";
    case TSOCK__DEV_OWN_HANDLE: return "a process cannot open an IPC handle it exported itself";
    case TSOCK__DEV_CAPTURE:
        return "the call is illegal while a CUDA graph is being captured in global mode";
    default: return NULL;
    }
}

int
tsock__cuda_fail(int e, const char *what)
{
    const struct tsock__devapi *d = tsock__dev();
    const char *why = advice(e);
    tsock__log(TSOCK_LOG_ERROR, "%s failed%s%s: %s%s", what, why ? ": " : "", why ? why : "",
               d->error_text(d->last_raw()), tsock__dev_simulated() ? " [simulated device]" : "");
    switch (e) {
    case TSOCK__DEV_NO_DEVICE: return TSOCK_E_NO_DEVICE;
    case TSOCK__DEV_OLD_DRIVER:
    case TSOCK__DEV_EXCLUSIVE:
    case TSOCK__DEV_FORK:
    case TSOCK__DEV_IPC: return TSOCK_E_DEVICE_UNUSABLE;
    case TSOCK__DEV_NO_MEMORY: return -ENOMEM;
    case TSOCK__DEV_INVALID: return -EINVAL;
    default: return -EIO;
    }
}

int
tsock__cuda_enter(int device, struct tsock__cuda_guard *g)
{
    const struct tsock__devapi *d = tsock__dev();
    g->switched = 0;
    int e = d->get_device(&g->previous);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaGetDevice");
    g->previous_ctx = d->context_get();
    /* Already on the device with a context: nothing to do. A thread without one gets this
     * device's made current explicitly, so no call below creates one on device 0. */
    if (g->previous == device && g->previous_ctx)
        return 0;
    e = d->set_device(device);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "cudaSetDevice");
    g->switched = 1;
    return 0;
}

void
tsock__cuda_leave(const struct tsock__cuda_guard *g)
{
    if (!g->switched)
        return;
    tsock__dev()->context_set(g->previous_ctx); /* NULL: back to no context at all */
}

int
tsock__cuda_device_count(void)
{
    int n = 0;
    int e = tsock__dev()->device_count(&n);
    if (e == TSOCK__DEV_NO_DEVICE || (e == TSOCK__DEV_OK && n == 0)) {
        /* The usual answer on a machine without a GPU: say it once, at INFO. */
        tsock__log(TSOCK_LOG_INFO, "no CUDA device: %s",
                   tsock__dev()->error_text(tsock__dev()->last_raw()));
        return TSOCK_E_NO_DEVICE;
    }
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "counting CUDA devices");
    return n;
}

int
tsock__cuda_find_uuid(const uint8_t uuid[TSOCK__CUDA_UUID_SIZE])
{
    int n = tsock__cuda_device_count();
    if (n < 0)
        return n;
    for (int dev = 0; dev < n; dev++) {
        uint8_t u[TSOCK__CUDA_UUID_SIZE];
        int e = tsock__dev()->device_uuid(dev, u);
        if (e != TSOCK__DEV_OK)
            return tsock__cuda_fail(e, "cudaGetDeviceProperties");
        if (memcmp(u, uuid, TSOCK__CUDA_UUID_SIZE) == 0)
            return dev;
    }
    return -1;
}

void
tsock__cuda_relax_begin(struct tsock__cuda_relax *r)
{
    r->relaxed = tsock__dev()->capture_relax(&r->previous) == TSOCK__DEV_OK;
}

void
tsock__cuda_relax_end(const struct tsock__cuda_relax *r)
{
    if (r->relaxed)
        tsock__dev()->capture_restore(r->previous);
}

/* A release fence: its event, and the device it lives on, so that destroying it happens on
 * that device too (the table's fence_destroy gets no device). */
struct fence {
    tsock__dev_event_t event;
    int device;
};

int
tsock__cuda_fence_arm(int device, void **fence, void *stream)
{
    /* NULL is the legacy default stream of the *current* device: make it the fence's. */
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    /* Under capture a record is a node of the graph, not a record: the event would stay
     * "complete" and the slot would be freed before the graph that reads it runs (issue 20). */
    int capturing = 0;
    int e = d->stream_capturing((tsock__dev_stream_t)stream, &capturing);
    if (e != TSOCK__DEV_OK) {
        tsock__cuda_leave(&g);
        return tsock__cuda_fail(e, "cudaStreamIsCapturing (release fence)");
    }
    if (capturing) {
        tsock__cuda_leave(&g);
        tsock__log(TSOCK_LOG_ERROR,
                   "a batch cannot be released on a stream that is capturing a CUDA graph: the "
                   "release would pass before the graph runs; release it on a stream outside "
                   "the capture after launching the graph (the batch is still held)");
        return TSOCK_E_STATE;
    }
    struct fence *f = *fence;
    if (!f) {
        f = calloc(1, sizeof *f);
        e = f ? d->event_create(&f->event, TSOCK__DEV_EVENT_DISABLE_TIMING) : TSOCK__DEV_NO_MEMORY;
        if (e == TSOCK__DEV_OK) {
            f->device = device;
            *fence = f;
        } else {
            free(f);
            f = NULL;
        }
    }
    if (e == TSOCK__DEV_OK)
        e = d->event_record(f->event, (tsock__dev_stream_t)stream);
    tsock__cuda_leave(&g);
    if (e != TSOCK__DEV_OK)
        return tsock__cuda_fail(e, "recording a release fence (is the stream one of the batch's "
                                   "device?)");
    return 1;
}

/* Issue 12, item 1: only success means the reads before the fence have run; any error keeps
 * the slot held (so this never answers < 0). The service thread polls in relaxed capture mode, so
 * that a graph another thread captures in global mode (torch.cuda.graph) neither fails this
 * query nor is invalidated by it. */
int
tsock__cuda_fence_done(int device, void *fence)
{
    const struct tsock__devapi *d = tsock__dev();
    const struct fence *f = fence;
    /* The caller is a service thread that may never have chosen a device: query from the
     * fence's own, so no other device's context gets created. */
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(f->device, &g);
    if (err < 0)
        return err;
    int mode = 0;
    int relaxed = d->capture_relax(&mode) == TSOCK__DEV_OK;
    int e = d->event_query(f->event);
    if (relaxed)
        d->capture_restore(mode);
    tsock__cuda_leave(&g);
    if (e == TSOCK__DEV_OK)
        return 1;
    if (e == TSOCK__DEV_NOT_READY)
        return 0;
    /* Not passed: the slot stays held, which is safe; the error is logged once, since the
     * caller polls every millisecond. */
    static atomic_int told;
    if (!atomic_exchange(&told, 1))
        (void)tsock__cuda_fail(e, "cudaEventQuery (release fence; the slot stays held)");
    return 0;
}

void
tsock__cuda_fence_destroy(void *fence)
{
    struct fence *f = fence;
    struct tsock__cuda_guard g;
    if (!f)
        return;
    if (tsock__cuda_enter(f->device, &g) == 0) {
        (void)tsock__dev()->event_destroy(f->event);
        tsock__cuda_leave(&g);
    }
    free(f);
}

int
tsock__cuda_alloc(int device, size_t bytes, void **ptr)
{
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    /* The caller's thread: cudaMalloc is not capture-safe in global mode (issue 20). */
    struct tsock__cuda_relax rx;
    tsock__cuda_relax_begin(&rx);
    int e = tsock__dev()->malloc(ptr, bytes);
    tsock__cuda_relax_end(&rx);
    tsock__cuda_leave(&g);
    return e == TSOCK__DEV_OK ? 0 : tsock__cuda_fail(e, "cudaMalloc (gather buffer)");
}

void
tsock__cuda_free(int device, void *ptr)
{
    struct tsock__cuda_guard g;
    if (!ptr || tsock__cuda_enter(device, &g) < 0)
        return;
    struct tsock__cuda_relax rx;
    tsock__cuda_relax_begin(&rx);
    int e = tsock__dev()->free(ptr);
    if (e != TSOCK__DEV_OK)
        (void)tsock__cuda_fail(e, "cudaFree (gather buffer)");
    tsock__cuda_relax_end(&rx);
    tsock__cuda_leave(&g);
}
