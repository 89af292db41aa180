/* Devices, errors, fences and plain device memory for the CUDA backend. */
#include <cuda.h> /* CUcontext and CUresult only: nothing links against libcuda */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"

/* cuCtxGetCurrent and cuCtxSetCurrent from the driver the runtime loaded, for the guard. */
typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*ctx_set_fn)(CUcontext);
static ctx_get_fn ctx_get;
static ctx_set_fn ctx_set;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void
load_ctx_fns(void)
{
    enum cudaDriverEntryPointQueryResult status;
    void *get = NULL, *set = NULL;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
        return;
    if (cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
        return;
    ctx_get = (ctx_get_fn)get;
    ctx_set = (ctx_set_fn)set;
}

/* Failures that mean "there is no usable GPU here" rather than a bug or a transient error. The
 * static runtime reports a missing libcuda or driver through these on the first call. */
static int
means_no_device(cudaError_t e)
{
    switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorInitializationError:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorStubLibrary:
    case cudaErrorSystemNotReady:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorPeerAccessUnsupported:
    case cudaErrorNotSupported: return 1;
    default: return 0;
    }
}

int
tsock__cuda_fail(cudaError_t e, const char *what)
{
    tsock__log(TSOCK_LOG_ERROR, "%s failed: %s (%s)", what, cudaGetErrorName(e),
               cudaGetErrorString(e));
    if (means_no_device(e))
        return TSOCK_E_NO_DEVICE;
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

int
tsock__cuda_enter(int device, struct tsock__cuda_guard *g)
{
    g->switched = 0;
    g->previous_ctx = NULL;
    pthread_once(&ctx_once, load_ctx_fns);
    cudaError_t e = cudaGetDevice(&g->previous);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaGetDevice");
    CUcontext current = NULL;
    if (ctx_get && ctx_get(&current) != CUDA_SUCCESS)
        current = NULL;
    g->previous_ctx = current;
    /* Already on the device (or on a thread without a context, where the next call makes
     * this device's primary context current, as wanted). */
    if (g->previous == device)
        return 0;
    e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaSetDevice");
    g->switched = 1;
    return 0;
}

void
tsock__cuda_leave(const struct tsock__cuda_guard *g)
{
    if (!g->switched)
        return;
    if (ctx_set)
        (void)ctx_set((CUcontext)g->previous_ctx); /* NULL: back to no context at all */
    else
        (void)cudaSetDevice(g->previous);
}

int
tsock__cuda_device_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* The usual answer on a machine without a GPU: say it once, at INFO. */
        tsock__log(TSOCK_LOG_INFO, "no CUDA device: %s (%s)", cudaGetErrorName(e),
                   cudaGetErrorString(e));
        (void)cudaGetLastError();
        return TSOCK_E_NO_DEVICE;
    }
    return n > 0 ? n : TSOCK_E_NO_DEVICE;
}

int
tsock__cuda_find_uuid(const uint8_t uuid[TSOCK__CUDA_UUID_SIZE])
{
    int n = tsock__cuda_device_count();
    if (n < 0)
        return n;
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp prop;
        cudaError_t e = cudaGetDeviceProperties(&prop, d);
        if (e != cudaSuccess)
            return tsock__cuda_fail(e, "cudaGetDeviceProperties");
        if (memcmp(prop.uuid.bytes, uuid, TSOCK__CUDA_UUID_SIZE) == 0)
            return d;
    }
    return -1;
}

int
tsock__cuda_fence_arm(int device, void **fence, void *stream)
{
    /* NULL is the legacy default stream of the *current* device: make it the fence's. */
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    cudaError_t e = cudaSuccess;
    if (!*fence) {
        cudaEvent_t ev;
        e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e == cudaSuccess)
            *fence = ev;
    }
    if (e == cudaSuccess)
        e = cudaEventRecord((cudaEvent_t)*fence, (cudaStream_t)stream);
    tsock__cuda_leave(&g);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "recording a release fence (is the stream one of the batch's "
                                   "device?)");
    return 1;
}

int
tsock__cuda_fence_done(int device, void *fence)
{
    /* The caller is a service thread that may never have chosen a device: query from the
     * fence's own, so no other device's context gets created. */
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    cudaError_t e = cudaEventQuery((cudaEvent_t)fence);
    tsock__cuda_leave(&g);
    if (e == cudaSuccess)
        return 1;
    if (e == cudaErrorNotReady)
        return 0;
    return tsock__cuda_fail(e, "cudaEventQuery (release fence)");
}

void
tsock__cuda_fence_destroy(void *fence)
{
    if (fence)
        (void)cudaEventDestroy((cudaEvent_t)fence);
}

int
tsock__cuda_alloc(int device, size_t bytes, void **ptr)
{
    struct tsock__cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    cudaError_t e = cudaMalloc(ptr, bytes);
    tsock__cuda_leave(&g);
    return e == cudaSuccess ? 0 : tsock__cuda_fail(e, "cudaMalloc (gather buffer)");
}

void
tsock__cuda_free(int device, void *ptr)
{
    struct tsock__cuda_guard g;
    if (!ptr || tsock__cuda_enter(device, &g) < 0)
        return;
    (void)cudaFree(ptr);
    tsock__cuda_leave(&g);
}
