/* Shared by the C files of the CUDA backend: error mapping and the current-device guard. This
 * folder is the only part of tsock that includes CUDA headers. */
#ifndef TSOCK_CUDA_INT_H
#define TSOCK_CUDA_INT_H

#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "core/core.h"
#include "image/convert.h"
#include "proto/proto.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == TSOCK_CUDA_IPC_HANDLE_SIZE,
               "the wire carries cudaIpcMemHandle_t as 64 bytes");
_Static_assert(sizeof(cudaIpcEventHandle_t) == TSOCK_CUDA_IPC_HANDLE_SIZE,
               "the wire carries cudaIpcEventHandle_t as 64 bytes");
_Static_assert(sizeof(cudaUUID_t) == TSOCK_CUDA_UUID_SIZE, "device UUIDs are 16 bytes");

/* Logs `what` failed with the CUDA error's name and string, and maps the error: no device,
 * driver, runtime or peer access -> TSOCK_E_NO_DEVICE; out of memory -> -ENOMEM; else -EIO. */
int tsock__cuda_fail(cudaError_t e, const char *what);

/* Makes `device` current for the calling thread and, on leave, restores exactly the context
 * that was current before (none, on a thread that never used CUDA). Restoring by device
 * ordinal would not do: cudaGetDevice says 0 on such a thread, and cudaSetDevice(0) would
 * create a context on GPU 0 in every process using another GPU. */
struct tsock_cuda_guard {
    void *previous_ctx; /* CUcontext, through the driver entry points */
    int previous;       /* device ordinal, where the driver entry points are not there */
    int switched;
};
int tsock__cuda_enter(int device, struct tsock_cuda_guard *g);
void tsock__cuda_leave(const struct tsock_cuda_guard *g);

/* Finds the ordinal (in this process) of the device with this UUID, or -1 when this process
 * does not see it (CUDA_VISIBLE_DEVICES). Returns the ordinal, -1, or a negative code. */
int tsock__cuda_find_uuid(const uint8_t uuid[TSOCK_CUDA_UUID_SIZE]);

/* convert.cu: queues the conversion of `samples` samples of cv->tensor from `in` (the staging
 * copy of the tensor, in device memory) to `out` on `stream`. */
cudaError_t tsock__cuda_convert_launch(const struct tsock_convert *cv, const uint8_t *in,
                                       uint8_t *out, uint32_t samples, cudaStream_t stream);

#endif
