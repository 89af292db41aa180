/* The device API on the real CUDA runtime (cudart, linked statically). With the .cu files and
 * nvjpeg_decode.c (the GPU decoder's entries) it is all of tsock that includes CUDA headers. Every
 * wrapper records the raw cudaError_t for error_text and maps it to what the user must do about it.
 */
#ifdef TSOCK_HAVE_CUDA /* else devapi_none.c */
#include <cuda.h>      /* CUcontext and CUresult only: nothing links against libcuda */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda/devapi.h"
#include "backend/cuda/nvjpeg_decode.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == TSOCK__DEV_HANDLE_SIZE, "64-byte memory handles");
_Static_assert(sizeof(cudaIpcEventHandle_t) == TSOCK__DEV_HANDLE_SIZE, "64-byte event handles");
_Static_assert(sizeof(cudaUUID_t) == TSOCK__DEV_UUID_SIZE, "device UUIDs are 16 bytes");
_Static_assert(cudaEventBlockingSync == TSOCK__DEV_EVENT_BLOCKING_SYNC &&
                   cudaEventDisableTiming == TSOCK__DEV_EVENT_DISABLE_TIMING &&
                   cudaEventInterprocess == TSOCK__DEV_EVENT_INTERPROCESS,
               "event flags as CUDA numbers them");

cudaError_t tsock__cuda_convert_launch(const struct tsock__convert_plan *cv, const uint8_t *in,
                                       uint8_t *out, uint32_t samples, cudaStream_t stream);

static _Thread_local cudaError_t last;

static int
map(cudaError_t e)
{
    last = e;
    switch (e) {
    case cudaSuccess: return TSOCK__DEV_OK;
    case cudaErrorNotReady: return TSOCK__DEV_NOT_READY;
    case cudaErrorNoDevice:
    case cudaErrorStubLibrary: /* libcuda.so is the toolkit's stub: no driver installed */
        return TSOCK__DEV_NO_DEVICE;
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice: return TSOCK__DEV_OLD_DRIVER;
    case cudaErrorDevicesUnavailable: return TSOCK__DEV_EXCLUSIVE;
    case cudaErrorInitializationError: return TSOCK__DEV_FORK;
    case cudaErrorMapBufferObjectFailed:
    case cudaErrorPeerAccessUnsupported: return TSOCK__DEV_IPC;
    case cudaErrorMemoryAllocation: return TSOCK__DEV_NO_MEMORY;
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureWrongThread: return TSOCK__DEV_CAPTURE;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevicePointer: return TSOCK__DEV_INVALID;
    case cudaErrorLaunchFailure:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorLaunchOutOfResources: return TSOCK__DEV_LAUNCH;
    default: return TSOCK__DEV_OTHER;
    }
}

static const char *
error_text(int raw)
{
    return cudaGetErrorString((cudaError_t)raw);
}

static int
last_raw(void)
{
    return (int)last;
}

/* Whether this machine (or container) shows an NVIDIA GPU at all: the driver's device nodes.
 * Without them a runtime error (e.g. "insufficient driver" from a libcuda with no kernel
 * driver behind it) means that no device exists, not that one exists and is unusable. */
static int
device_nodes_exist(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}

static int
device_count(int *n)
{
    *n = 0;
    int r = map(cudaGetDeviceCount(n));
    if (r != TSOCK__DEV_OK) {
        (void)cudaGetLastError(); /* not sticky, but leave nothing for the next caller */
        if (r != TSOCK__DEV_NO_DEVICE && !device_nodes_exist())
            r = TSOCK__DEV_NO_DEVICE; /* last_raw still names the runtime's own error */
    }
    return r;
}

static int
device_uuid(int device, uint8_t uuid[TSOCK__DEV_UUID_SIZE])
{
    struct cudaDeviceProp prop;
    int r = map(cudaGetDeviceProperties(&prop, device));
    if (r == TSOCK__DEV_OK)
        memcpy(uuid, prop.uuid.bytes, TSOCK__DEV_UUID_SIZE);
    return r;
}

static int
device_ipc_ok(int device, int *ok)
{
    int ipc_events = 0, unified = 0, mode = 0;
    int r = map(cudaDeviceGetAttribute(&ipc_events, cudaDevAttrIpcEventSupport, device));
    if (r == TSOCK__DEV_OK)
        r = map(cudaDeviceGetAttribute(&unified, cudaDevAttrUnifiedAddressing, device));
    if (r == TSOCK__DEV_OK)
        r = map(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, device));
    if (r == TSOCK__DEV_OK &&
        (mode == cudaComputeModeExclusiveProcess || mode == cudaComputeModeProhibited))
        r = TSOCK__DEV_EXCLUSIVE; /* consumers could not open a context to read the ring */
    *ok = ipc_events && unified;
    return r;
}

static int
can_access_peer(int *can, int device, int peer)
{
    return map(cudaDeviceCanAccessPeer(can, device, peer));
}

static int
mem_info(size_t *free_bytes, size_t *total_bytes)
{
    return map(cudaMemGetInfo(free_bytes, total_bytes));
}

static int
get_device(int *device)
{
    return map(cudaGetDevice(device));
}

static int
set_device(int device)
{
    return map(cudaSetDevice(device));
}

/* cuCtxGetCurrent / cuCtxSetCurrent from the driver the runtime loaded (issue 12, item 14:
 * the code builds with every toolkit from 12.0, which configure accepts). */
typedef CUresult (*ctx_get_fn)(CUcontext *);
typedef CUresult (*ctx_set_fn)(CUcontext);
static ctx_get_fn ctx_get;
static ctx_set_fn ctx_set;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

/* The ByVersion form exists from 12.5 and the plain one is deprecated there (an error with
 * warnings as errors); before 12.5 only the plain one exists. */
static int
entry_point(const char *symbol, void **fn)
{
    enum cudaDriverEntryPointQueryResult status;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, fn, 12000, cudaEnableDefault, &status);
#else
    cudaError_t e = cudaGetDriverEntryPoint(symbol, fn, cudaEnableDefault, &status);
#endif
    return e == cudaSuccess && status == cudaDriverEntryPointSuccess;
}

static void
load_ctx_fns(void)
{
    void *get = NULL, *set = NULL;
    if (!entry_point("cuCtxGetCurrent", &get) || !entry_point("cuCtxSetCurrent", &set))
        return;
    ctx_get = (ctx_get_fn)get;
    ctx_set = (ctx_set_fn)set;
}

static void *
context_get(void)
{
    pthread_once(&ctx_once, load_ctx_fns);
    CUcontext current = NULL;
    if (!ctx_get || ctx_get(&current) != CUDA_SUCCESS)
        return NULL;
    return current;
}

static void
context_set(void *ctx)
{
    pthread_once(&ctx_once, load_ctx_fns);
    if (ctx_set)
        (void)ctx_set((CUcontext)ctx);
}

static int
dev_malloc(void **ptr, size_t bytes)
{
    return map(cudaMalloc(ptr, bytes));
}

static int
dev_free(void *ptr)
{
    return map(cudaFree(ptr));
}

static int
host_alloc(void **ptr, size_t bytes)
{
    return map(cudaHostAlloc(ptr, bytes, cudaHostAllocDefault));
}

static int
host_free(void *ptr)
{
    return map(cudaFreeHost(ptr));
}

static int
stream_create(tsock__dev_stream_t *s)
{
    return map(cudaStreamCreateWithFlags((cudaStream_t *)s, cudaStreamNonBlocking));
}

static int
stream_destroy(tsock__dev_stream_t s)
{
    return map(cudaStreamDestroy((cudaStream_t)s));
}

static int
stream_sync(tsock__dev_stream_t s)
{
    return map(cudaStreamSynchronize((cudaStream_t)s));
}

static int
device_sync(void)
{
    return map(cudaDeviceSynchronize());
}

static int
stream_wait(tsock__dev_stream_t s, tsock__dev_event_t e)
{
    return map(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0));
}

static int
event_create(tsock__dev_event_t *e, unsigned flags)
{
    return map(cudaEventCreateWithFlags((cudaEvent_t *)e, flags));
}

static int
event_destroy(tsock__dev_event_t e)
{
    return map(cudaEventDestroy((cudaEvent_t)e));
}

static int
event_record(tsock__dev_event_t e, tsock__dev_stream_t s)
{
    return map(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
}

static int
event_query(tsock__dev_event_t e)
{
    return map(cudaEventQuery((cudaEvent_t)e));
}

static int
event_sync(tsock__dev_event_t e)
{
    return map(cudaEventSynchronize((cudaEvent_t)e));
}

static int
memcpy_async(void *dst, const void *src, size_t bytes, enum tsock__dev_copy kind,
             tsock__dev_stream_t s)
{
    enum cudaMemcpyKind k = kind == TSOCK__DEV_H2D   ? cudaMemcpyHostToDevice
                            : kind == TSOCK__DEV_D2H ? cudaMemcpyDeviceToHost
                                                     : cudaMemcpyDeviceToDevice;
    return map(cudaMemcpyAsync(dst, src, bytes, k, (cudaStream_t)s));
}

static int
ipc_mem_get(tsock__dev_ipc_handle *h, void *ptr)
{
    cudaIpcMemHandle_t m;
    int r = map(cudaIpcGetMemHandle(&m, ptr));
    memcpy(h->bytes, &m, sizeof m);
    return r;
}

static int
ipc_mem_open(void **ptr, const tsock__dev_ipc_handle *h)
{
    cudaIpcMemHandle_t m;
    memcpy(&m, h->bytes, sizeof m);
    return map(cudaIpcOpenMemHandle(ptr, m, cudaIpcMemLazyEnablePeerAccess));
}

static int
ipc_mem_close(void *ptr)
{
    return map(cudaIpcCloseMemHandle(ptr));
}

static int
ipc_event_get(tsock__dev_ipc_handle *h, tsock__dev_event_t e)
{
    cudaIpcEventHandle_t m;
    int r = map(cudaIpcGetEventHandle(&m, (cudaEvent_t)e));
    memcpy(h->bytes, &m, sizeof m);
    return r;
}

static int
ipc_event_open(tsock__dev_event_t *e, const tsock__dev_ipc_handle *h)
{
    cudaIpcEventHandle_t m;
    memcpy(&m, h->bytes, sizeof m);
    return map(cudaIpcOpenEventHandle((cudaEvent_t *)e, m));
}

static void
clear_error(void)
{
    (void)cudaGetLastError();
}

static int
convert_launch(const struct tsock__convert_plan *cv, const uint8_t *in, uint8_t *out,
               uint32_t samples, tsock__dev_stream_t s)
{
    return map(tsock__cuda_convert_launch(cv, in, out, samples, (cudaStream_t)s));
}

static int
capture_relax(int *previous)
{
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    int r = map(cudaThreadExchangeStreamCaptureMode(&mode));
    *previous = (int)mode;
    return r;
}

static void
capture_restore(int previous)
{
    enum cudaStreamCaptureMode mode = (enum cudaStreamCaptureMode)previous;
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
}

static int
stream_capturing(tsock__dev_stream_t s, int *capturing)
{
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    int r = map(cudaStreamIsCapturing((cudaStream_t)s, &status));
    *capturing = status != cudaStreamCaptureStatusNone;
    return r;
}

const struct tsock__devapi tsock__devapi_real = {
    .name = "cuda",
    .error_text = error_text,
    .last_raw = last_raw,
    .device_count = device_count,
    .device_uuid = device_uuid,
    .device_ipc_ok = device_ipc_ok,
    .can_access_peer = can_access_peer,
    .mem_info = mem_info,
    .get_device = get_device,
    .set_device = set_device,
    .context_get = context_get,
    .context_set = context_set,
    .malloc = dev_malloc,
    .free = dev_free,
    .host_alloc = host_alloc,
    .host_free = host_free,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_sync = stream_sync,
    .stream_wait = stream_wait,
    .device_sync = device_sync,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_query,
    .event_sync = event_sync,
    .memcpy_async = memcpy_async,
    .ipc_mem_get = ipc_mem_get,
    .ipc_mem_open = ipc_mem_open,
    .ipc_mem_close = ipc_mem_close,
    .ipc_event_get = ipc_event_get,
    .ipc_event_open = ipc_event_open,
    .clear_error = clear_error,
    .convert_launch = convert_launch,
    .capture_relax = capture_relax,
    .capture_restore = capture_restore,
    .jpeg_create = tsock__nvjpeg_create,
    .jpeg_decode = tsock__nvjpeg_decode,
    .jpeg_destroy = tsock__nvjpeg_destroy,
    .stream_capturing = stream_capturing,
};

#endif
