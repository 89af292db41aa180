/* Slot memory: the one interface between the engines and where a ring's slots live.
 *
 * A backend is a table of operations. The producer engine creates a ring with one, fills slots
 * through it, publishes through it, and hands consumers the ring's attach blob (opaque bytes
 * in WELCOME). A consumer engine picks the backend that the WELCOME names, attaches with the
 * blob, and reads, waits, copies out, allocates gather buffers and fences releases through the
 * same table. The engines choose the table once and never branch on which one it is.
 *
 *   shm/     host shared memory (a POSIX shared-memory object; the default)
 *   cuda/    device memory shared through CUDA IPC, through its device API (cuda/devapi.h):
 *            the CUDA runtime, or the simulated device with TSOCK_CUDA_SIM=1; a build without
 *            a toolkit has no runtime (every process sees no device) but keeps the simulator
 *
 * Errors are negative codes (negated errno or TSOCK_E_*). Each failure is logged where it
 * happens, with what failed and why.
 */
#ifndef TSOCK_BACKEND_H
#define TSOCK_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/convert.h"
#include "core/layout.h"

struct tsock__backend;
struct tsock__device_decoder;

/* A producer's ring: the first member of every backend's producer-side object. */
struct tsock__slot_memory {
    const struct tsock__backend *ops;
};

/* A consumer's attachment to a producer's ring: the first member of every backend's view. */
struct tsock__ring_view {
    const struct tsock__backend *ops;
};

/* What a producer asks for: slots laid out as the caller fills them, optionally converted. */
struct tsock__ring_request {
    const tsock_layout *layout;
    const size_t *offsets; /* of each tensor inside a slot, as tsock__layout_place gave them */
    size_t stride;         /* bytes of one slot as the caller fills it */
    uint32_t batch_size, slots;
    int device;                                   /* CUDA ordinal; -1 for host memory */
    const struct tsock__convert_request *convert; /* empty tensor name: none */
};

/* What consumers see of that ring (after any conversion): written by create. */
struct tsock__ring_shape {
    tsock_layout layout;
    size_t offsets[TSOCK_MAX_TENSORS];
    size_t stride; /* bytes from one slot to the next */
    size_t bytes;  /* the whole ring */
};

/* What a consumer attaches with: the WELCOME's figures and attach blob, and its own wishes. */
struct tsock__attach_request {
    const uint8_t *blob;
    size_t blob_len;
    size_t ring_bytes;
    uint32_t slots;
    int device; /* tsock_consumer_set_device: a CUDA ordinal, or -1 for the producer's own */
};

struct tsock__backend {
    const char *name;     /* "shm", "cuda": for logs */
    uint32_t wire_device; /* the WELCOME's device field (TSOCK_DEVICE_CPU, TSOCK_DEVICE_CUDA) */

    /* ---- producer side ---- */

    /* Makes the ring and writes what consumers will see into *shape. */
    int (*create)(struct tsock__slot_memory **out, const struct tsock__ring_request *req,
                  struct tsock__ring_shape *shape);
    /* The attach blob, owned by the ring and valid until close. Returns its length. */
    size_t (*export_blob)(const struct tsock__slot_memory *m, const uint8_t **blob);
    /* Where the caller writes `slot`'s batch (the slot itself, or a staging buffer). */
    int (*fill_pointer)(struct tsock__slot_memory *m, uint32_t slot, uint8_t **base);
    /* The caller is done writing `slot`: make it readable by consumers before they hear of it.
     * For device memory the copy (and conversion) is queued and publish returns at once; the
     * batch is announced only once publish_done says so. */
    int (*publish)(struct tsock__slot_memory *m, uint32_t slot, uint32_t samples);
    /* The device decoder (image/device_decoder.h) that writes into `slot`'s device memory while
     * the caller fills it, or NULL with *err set (logged) when it cannot start. NULL member:
     * the backend has none (host memory). */
    struct tsock__device_decoder *(*device_decoder)(struct tsock__slot_memory *m, uint32_t slot,
                                                    int *err);
    /* 1 once what publish queued for `slot` has completed, 0 while it runs, < 0 on error: a
     * batch is never announced whose event might never complete (a producer killed mid-copy).
     * Called by the service thread. NULL: publish made the slot readable already. */
    int (*publish_done)(struct tsock__slot_memory *m, uint32_t slot);
    /* Frees the ring (and removes its name). NULL does nothing. */
    void (*close)(struct tsock__slot_memory *m);

    /* ---- consumer side ---- */

    int (*attach)(struct tsock__ring_view **out, const struct tsock__attach_request *req);
    /* The ring's first byte as this process addresses it (host or device pointer). */
    const uint8_t *(*view_base)(const struct tsock__ring_view *v);
    /* The CUDA ordinal the ring's pointers are used on, or -1 for host memory. */
    int (*view_device)(const struct tsock__ring_view *v);
    /* Makes `stream` wait until `slot`'s batch is ready to read (host: ready already). */
    int (*wait)(struct tsock__ring_view *v, uint32_t slot, void *stream);
    /* Copies `bytes` of `slot` at `src` into a gather buffer; done with copy_finish. */
    int (*copy_out)(struct tsock__ring_view *v, uint32_t slot, void *dst, const void *src,
                    size_t bytes);
    /* Returns when every copy_out so far is complete, so the slot may be released. */
    int (*copy_finish)(struct tsock__ring_view *v);
    /* 1 when every copy_out so far is complete, 0 while one runs, < 0 on error: a gather polls
     * it against next()'s deadline and the session's end. NULL: copy_out completes at once. */
    int (*copies_done)(struct tsock__ring_view *v);
    /* Detaches: nothing of the producer's stays mapped here. NULL does nothing. */
    void (*detach)(struct tsock__ring_view *v);

    /* Gather buffers and release fences live on a device (-1: host), not on a view: they
     * outlive the session whose ring they were filled from. */
    int (*buffer_alloc)(int device, size_t bytes, void **ptr);
    void (*buffer_free)(int device, void *ptr);
    /* Arms *fence (creating it on first use) on `stream`: returns 1 when a release must wait
     * for fence_passed, 0 when it takes effect at once (host memory), or a negative code. */
    int (*fence_arm)(int device, void **fence, void *stream);
    /* 1 when the work before the armed fence has finished, 0 while it runs, < 0 on error. Only
     * 1 may release the slot: the CUDA table answers 0 on a query error (logged), never < 0. */
    int (*fence_passed)(int device, void *fence);
    void (*fence_destroy)(void *fence);
    /* Returns when every piece of work this process queued on `device` (any stream) has
     * finished: a consumer closing with batches never released calls it before saying BYE, as
     * the caller's kernels may still read them (host, -1: nothing to wait for). Blocks: never
     * call it holding a lock another thread needs. */
    int (*device_sync)(int device);
    /* The devices of this kind the process sees (> 0), or TSOCK_E_NO_DEVICE (the host table:
     * host memory is no device). What tsock_cuda_device_count answers, asked through the table
     * so that nothing outside backend/cuda/ calls into it. */
    int (*device_count)(void);

    /* A consumer that found its producer dead removes what the ring left behind, since a
     * process killed with SIGKILL could not (host: the shared-memory name). Returns 1 when
     * something was removed. */
    int (*remove_orphan)(const uint8_t *blob, size_t blob_len);
};

extern const struct tsock__backend tsock__backend_shm;
extern const struct tsock__backend tsock__backend_cuda; /* cuda/ or nocuda/ */

/* The producer's table: host memory for device -1, CUDA otherwise. */
const struct tsock__backend *tsock__backend_for_device(int device);

/* The consumer's table for a WELCOME's device field, or NULL for an unknown one. */
const struct tsock__backend *tsock__backend_for_wire(uint32_t wire_device);

#endif
