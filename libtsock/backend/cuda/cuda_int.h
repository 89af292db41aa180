/* Shared by the C files of the CUDA backend: error mapping and the current-device guard. They
 * reach CUDA only through the device API (devapi.h): the real runtime or the simulated device. */
#ifndef TSOCK_CUDA_INT_H
#define TSOCK_CUDA_INT_H

#include "backend/backend.h"
#include "backend/cuda/devapi.h"
#include "core/core.h"

/* The attach blob of a device ring (docs/protocol.md, WELCOME): the device's UUID (ordinals
 * differ between processes with CUDA_VISIBLE_DEVICES), the IPC handle of the ring's one
 * allocation, and the IPC handle of each slot's event, recorded after the slot's copy. */
#define TSOCK__CUDA_UUID_SIZE TSOCK__DEV_UUID_SIZE
#define TSOCK__CUDA_HANDLE_SIZE TSOCK__DEV_HANDLE_SIZE
#define TSOCK__CUDA_BLOB_MEM TSOCK__CUDA_UUID_SIZE
#define TSOCK__CUDA_BLOB_EVENTS (TSOCK__CUDA_UUID_SIZE + TSOCK__CUDA_HANDLE_SIZE)
#define TSOCK__CUDA_BLOB_SIZE(slots)                                                               \
    (TSOCK__CUDA_BLOB_EVENTS + (size_t)(slots)*TSOCK__CUDA_HANDLE_SIZE)
/* The wire's bound on a device ring's slots (one event handle each). */
#define TSOCK__CUDA_MAX_SLOTS 256

/* Logs `what` failed, with what the user can do about this kind of failure and the runtime's
 * own text, and maps it: no device -> TSOCK_E_NO_DEVICE; a device that exists but this process
 * cannot use (old driver, exclusive mode, CUDA before fork, IPC blocked) ->
 * TSOCK_E_DEVICE_UNUSABLE; out of memory -> -ENOMEM; else -EIO. */
int tsock__cuda_fail(int dev_err, const char *what);

/* Makes `device` current for the calling thread and, on leave, restores exactly the context
 * that was current before (none, on a thread that never used CUDA). Restoring by device
 * ordinal would not do: cudaGetDevice says 0 on such a thread, and cudaSetDevice(0) would
 * create a context on GPU 0 in every process using another GPU. */
struct tsock__cuda_guard {
    void *previous_ctx; /* CUcontext, through the driver entry points */
    int previous;       /* device ordinal, where the driver entry points are not there */
    int switched;
};
int tsock__cuda_enter(int device, struct tsock__cuda_guard *g);
void tsock__cuda_leave(const struct tsock__cuda_guard *g);

/* Finds the ordinal (in this process) of the device with this UUID, or -1 when this process
 * does not see it (CUDA_VISIBLE_DEVICES). Returns the ordinal, -1, or a negative code. */
int tsock__cuda_find_uuid(const uint8_t uuid[TSOCK__CUDA_UUID_SIZE]);

/* The number of CUDA devices this process sees (> 0), TSOCK_E_NO_DEVICE when none exists, or
 * TSOCK_E_DEVICE_UNUSABLE when one exists that this process cannot use (logged). */
int tsock__cuda_device_count(void);

/* ring.c: the producer's ring (a tsock__slot_memory). */
int tsock__cuda_ring_create(struct tsock__slot_memory **out, const struct tsock__ring_request *req,
                            struct tsock__ring_shape *shape);
size_t tsock__cuda_ring_export(const struct tsock__slot_memory *m, const uint8_t **blob);
int tsock__cuda_ring_staging(struct tsock__slot_memory *m, uint32_t slot, uint8_t **host);
int tsock__cuda_ring_publish(struct tsock__slot_memory *m, uint32_t slot, uint32_t samples);
int tsock__cuda_ring_publish_done(struct tsock__slot_memory *m, uint32_t slot);
void tsock__cuda_ring_destroy(struct tsock__slot_memory *m);
/* The ring's GPU decoder, bound to the slot being filled (backend.h, device_decoder). */
struct tsock__device_decoder *tsock__cuda_ring_decoder(struct tsock__slot_memory *m, uint32_t slot,
                                                       int *err);

/* import.c: a consumer's view of a producer's ring (a tsock__ring_view). */
int tsock__cuda_import_open(struct tsock__ring_view **out, const struct tsock__attach_request *req);
const uint8_t *tsock__cuda_import_base(const struct tsock__ring_view *v);
int tsock__cuda_import_device(const struct tsock__ring_view *v);
int tsock__cuda_import_wait(struct tsock__ring_view *v, uint32_t slot, void *stream);
int tsock__cuda_import_copy(struct tsock__ring_view *v, uint32_t slot, void *dst, const void *src,
                            size_t bytes);
int tsock__cuda_import_sync(struct tsock__ring_view *v);
int tsock__cuda_import_copies_done(struct tsock__ring_view *v);
void tsock__cuda_import_close(struct tsock__ring_view *v);

/* device.c: the calling thread's capture mode relaxed around a synchronous call that a
 * caller's thread makes (a graph another thread captures in global mode would fail it). */
struct tsock__cuda_relax {
    int previous, relaxed;
};
void tsock__cuda_relax_begin(struct tsock__cuda_relax *r);
void tsock__cuda_relax_end(const struct tsock__cuda_relax *r);

/* device.c: release fences and gather buffers, on a device. */
int tsock__cuda_fence_arm(int device, void **fence, void *stream);
int tsock__cuda_fence_done(int device, void *fence);
void tsock__cuda_fence_destroy(void *fence);
int tsock__cuda_alloc(int device, size_t bytes, void **ptr);
void tsock__cuda_free(int device, void *ptr);

#endif
