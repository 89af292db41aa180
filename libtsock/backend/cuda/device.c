/* Devices, errors, fences and plain device memory for the CUDA backend. */
#include <errno.h>
#include <string.h>

#include "backend/cuda/cuda_int.h"

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
    case cudaErrorNotSupported:
        return 1;
    default:
        return 0;
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
tsock__cuda_enter(int device, struct tsock_cuda_guard *g)
{
    g->switched = 0;
    cudaError_t e = cudaGetDevice(&g->previous);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaGetDevice");
    if (g->previous == device)
        return 0;
    e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaSetDevice");
    g->switched = 1;
    return 0;
}

void
tsock__cuda_leave(const struct tsock_cuda_guard *g)
{
    if (g->switched)
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
tsock__cuda_find_uuid(const uint8_t uuid[TSOCK_CUDA_UUID_SIZE])
{
    int n = tsock__cuda_device_count();
    if (n < 0)
        return n;
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp prop;
        cudaError_t e = cudaGetDeviceProperties(&prop, d);
        if (e != cudaSuccess)
            return tsock__cuda_fail(e, "cudaGetDeviceProperties");
        if (memcmp(prop.uuid.bytes, uuid, TSOCK_CUDA_UUID_SIZE) == 0)
            return d;
    }
    return -1;
}

int
tsock__cuda_fence_create(int device, void **fence)
{
    struct tsock_cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    tsock__cuda_leave(&g);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaEventCreateWithFlags (release fence)");
    *fence = ev;
    return 0;
}

int
tsock__cuda_fence_record(int device, void *fence, void *stream)
{
    /* NULL is the legacy default stream of the *current* device: make it the fence's. */
    struct tsock_cuda_guard g;
    int err = tsock__cuda_enter(device, &g);
    if (err < 0)
        return err;
    cudaError_t e = cudaEventRecord((cudaEvent_t)fence, (cudaStream_t)stream);
    tsock__cuda_leave(&g);
    if (e != cudaSuccess)
        return tsock__cuda_fail(e, "cudaEventRecord on the release stream (is it a stream of "
                                   "the batch's device?)");
    return 0;
}

int
tsock__cuda_fence_done(void *fence)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)fence);
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
    struct tsock_cuda_guard g;
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
    struct tsock_cuda_guard g;
    if (!ptr || tsock__cuda_enter(device, &g) < 0)
        return;
    (void)cudaFree(ptr);
    tsock__cuda_leave(&g);
}
