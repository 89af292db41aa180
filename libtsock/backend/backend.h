/* The slot-memory interface every backend implements: one region holding all the ring's
 * slots, created by the producer and attached by each consumer. The host backend (shm/) is a
 * POSIX shared-memory object; the CUDA backend keeps the region in device memory. */
#ifndef TSOCK_BACKEND_H
#define TSOCK_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#define TSOCK_REGION_NAME_MAX 256

struct tsock_region {
    char name[TSOCK_REGION_NAME_MAX]; /* what a consumer needs to attach */
    uint8_t *base;
    size_t bytes;
    int owner; /* created here (producer): destroy removes the name */
};

/* Host shared memory. */

/* Creates a new region of `bytes` (mode 0600) named /tsock-<uid>-<pid>-<n>, mapped read-write.
 * Returns 0 or a negated errno. */
int tsock__shm_create(struct tsock_region *r, size_t bytes);

/* Maps an existing region read-only; fails with -EPROTO when its size is not `bytes` (so a
 * consumer never touches memory past the object's end). Returns 0 or a negated errno. */
int tsock__shm_attach(struct tsock_region *r, const char *name, size_t bytes);

/* Unmaps; when the region is the producer's own, also removes its name. */
void tsock__shm_release(struct tsock_region *r);

/* Removes the name of a region whose creator process is gone (the pid is part of the name).
 * Returns 1 when removed, 0 when the creator is alive or the name is not a tsock region. */
int tsock__shm_remove_if_orphaned(const char *name);

/* Removes every region of this user whose creator process is gone (left by a kill -9).
 * Returns how many were removed. */
int tsock__shm_sweep_orphans(void);

/* ---- CUDA device slots ----------------------------------------------------------------------
 * backend/cuda/ when the project was built with a CUDA toolkit, backend/nocuda/ otherwise (every
 * function there fails with TSOCK_E_NO_DEVICE). Nothing outside backend/cuda/ sees a CUDA type:
 * streams and events cross this interface as void pointers, handles as bytes (proto.h). Errors:
 * TSOCK_E_NO_DEVICE for no driver, no device, a bad device index or no peer access; -ENOMEM
 * when device or pinned memory runs out; -EIO for any other CUDA failure. Every failure is
 * logged with the CUDA error's name. Calls that need a device make it current for their
 * duration only, so a caller's current device is left as it was. */

struct tsock_convert;
struct tsock_cuda_handles;

/* The number of CUDA devices this process sees (> 0), or TSOCK_E_NO_DEVICE. */
int tsock__cuda_device_count(void);

/* Producer side: the ring in device memory (one cudaMalloc, exported once), an interprocess
 * event per slot, two pinned staging buffers and the producer's own stream. The caller fills
 * the current staging buffer; publish copies it to the slot (converting as `cv` says) and
 * records the slot's event, all asynchronously, then moves on to the other buffer. */
struct tsock_cuda_ring;

/* `in_stride`: bytes of one staging slot; `out_stride`: bytes of one device slot. */
int tsock__cuda_ring_create(struct tsock_cuda_ring **out, int device, size_t in_stride,
                            size_t out_stride, uint32_t slots, const struct tsock_convert *cv);
/* The staging buffer to fill next, once the copy that last read it has finished (the only
 * place the producer ever waits on the GPU). */
int tsock__cuda_ring_staging(struct tsock_cuda_ring *r, uint8_t **host);
/* Queues the copy (and conversion) of the staging buffer's `samples` samples into `slot` and
 * the record of the slot's event on the producer's stream, and flips the staging buffer. */
int tsock__cuda_ring_publish(struct tsock_cuda_ring *r, uint32_t slot, uint32_t samples);
/* What a consumer needs to open the ring (WELCOME). */
void tsock__cuda_ring_export(const struct tsock_cuda_ring *r, struct tsock_cuda_handles *h);
/* Waits for the producer's stream, then frees everything. NULL does nothing. */
void tsock__cuda_ring_destroy(struct tsock_cuda_ring *r);

/* Consumer side: a producer's ring opened through its IPC handles, kept open for the session. */
struct tsock_cuda_import;

/* Opens the ring on `device` (-1: the producer's own GPU, found by UUID). A device other than
 * the producer's reads the ring through peer access, or fails with TSOCK_E_NO_DEVICE. */
int tsock__cuda_import_open(struct tsock_cuda_import **out, int device,
                            const struct tsock_cuda_handles *h, uint32_t slots);
uint8_t *tsock__cuda_import_base(const struct tsock_cuda_import *imp);
/* The device (an ordinal of this process) the ring's pointers are used on. */
int tsock__cuda_import_device(const struct tsock_cuda_import *imp);
/* Makes `stream` (NULL: the legacy default stream of the ring's device) wait for the
 * producer's copy into `slot`. */
int tsock__cuda_import_wait(struct tsock_cuda_import *imp, uint32_t slot, void *stream);
/* Gathers: queues a device-to-device copy out of `slot` (after the producer's copy into it) on
 * the import's own stream; sync waits for every copy queued so far. */
int tsock__cuda_import_copy(struct tsock_cuda_import *imp, uint32_t slot, void *dst,
                            const void *src, size_t bytes);
int tsock__cuda_import_sync(struct tsock_cuda_import *imp);
/* Closes the events and the memory handle, so no memory of the producer stays mapped here.
 * NULL does nothing. */
void tsock__cuda_import_close(struct tsock_cuda_import *imp);

/* Fences for stream-ordered releases: an event (made on `device`) recorded on the caller's
 * stream (NULL: that device's legacy default stream), polled later by a service thread. done()
 * returns 1 when the work before the record has finished, 0 while it runs, or a negative code
 * when the query failed. */
int tsock__cuda_fence_create(int device, void **fence);
int tsock__cuda_fence_record(int device, void *fence, void *stream);
int tsock__cuda_fence_done(int device, void *fence);
void tsock__cuda_fence_destroy(void *fence);

/* Device memory for gathered batches. */
int tsock__cuda_alloc(int device, size_t bytes, void **ptr);
void tsock__cuda_free(int device, void *ptr);

#endif
