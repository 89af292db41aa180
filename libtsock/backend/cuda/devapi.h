/* The device API of the CUDA backend: every CUDA runtime and driver call that backend/cuda makes
 * goes through one table, so the same backend code runs on a real GPU (devapi_real.c and, for
 * the GPU decoder, nvjpeg_decode.c: the C files that include CUDA headers) or on the simulated
 * device (devapi_sim.c, plain C: POSIX shared memory, executor threads), which the GPU tests use on
 * machines without a GPU.
 *
 * tsock__dev() picks the table once per process: the simulated device when the environment
 * variable TSOCK_CUDA_SIM is exactly "1" (logged at WARN on first use, so a run on it can never
 * pass for a real one), the real runtime otherwise.
 *
 * Streams and events are opaque pointers: a cudaStream_t / cudaEvent_t on the real runtime, the
 * simulator's own objects on the simulated device. A NULL stream is the legacy default stream
 * of the current device. Every call returns a tsock__dev_err; tsock__dev_fail (device.c) turns
 * one into a logged tsock error code. */
#ifndef TSOCK_CUDA_DEVAPI_H
#define TSOCK_CUDA_DEVAPI_H

#include <stddef.h>
#include <stdint.h>

#include "backend/convert.h"

#define TSOCK__DEV_UUID_SIZE 16
#define TSOCK__DEV_HANDLE_SIZE 64

/* What went wrong, by what the user must do about it (issue 12, item 10). */
enum tsock__dev_err {
    TSOCK__DEV_OK = 0,
    TSOCK__DEV_NOT_READY,  /* queued work has not finished (queries only) */
    TSOCK__DEV_NO_DEVICE,  /* no GPU, or no driver library at all */
    TSOCK__DEV_OLD_DRIVER, /* the driver is older than this build's CUDA runtime needs */
    TSOCK__DEV_EXCLUSIVE,  /* the GPU is in EXCLUSIVE_PROCESS / PROHIBITED compute mode */
    TSOCK__DEV_FORK,       /* CUDA was initialised before this process was forked */
    TSOCK__DEV_IPC,        /* IPC handles cannot be opened: no shared PID namespace, /dev/shm */
    TSOCK__DEV_OWN_HANDLE, /* a process opened an IPC handle it exported itself */
    TSOCK__DEV_NO_MEMORY,  /* device or pinned memory exhausted */
    TSOCK__DEV_CAPTURE,    /* the call is illegal while a stream capture is in progress */
    TSOCK__DEV_INVALID,    /* a bad argument, handle or flag */
    TSOCK__DEV_LAUNCH,     /* a kernel launch failed */
    TSOCK__DEV_OTHER,      /* anything else */
    TSOCK__DEV_NO_LIBRARY  /* a library loaded at run time is missing (nvJPEG) */
};

enum tsock__dev_copy { TSOCK__DEV_H2D = 1, TSOCK__DEV_D2H = 2, TSOCK__DEV_D2D = 3 };

/* Event flags, as CUDA numbers them. */
#define TSOCK__DEV_EVENT_BLOCKING_SYNC 0x1u
#define TSOCK__DEV_EVENT_DISABLE_TIMING 0x2u
#define TSOCK__DEV_EVENT_INTERPROCESS 0x4u

typedef struct tsock__dev_stream *tsock__dev_stream_t;
/* A JPEG decoder on a device (issue 20): nvjpeg_*.c on the real runtime, devapi_sim_decode.c on
 * the simulated device. */
struct tsock__dev_jpeg;
/* One image: decode `data`, take the crop (source pixels), resize it to resize_w x resize_h,
 * keep the out_w x out_h window at (win_x, win_y), mirror it when `flip`, and write it to dst
 * (device memory: out_h rows of out_w RGB pixels, no padding), as image/image.h's
 * tsock__decode_resize describes. */
struct tsock__dev_jpeg_job {
    const uint8_t *data; /* host memory, valid during the call only */
    size_t size;
    int crop_x, crop_y, crop_w, crop_h;
    int resize_w, resize_h, win_x, win_y, out_w, out_h, flip;
    uint8_t *dst;
    uint64_t
        sample; /* the sample id: the simulator fails the ones TSOCK_CUDA_SIM_DECODE_FAIL names */
};
typedef struct tsock__dev_event *tsock__dev_event_t;
typedef struct {
    uint8_t bytes[TSOCK__DEV_HANDLE_SIZE];
} tsock__dev_ipc_handle;

struct tsock__devapi {
    const char *name; /* "cuda", "simulated" */
    /* The error's name and text, for logs. */
    const char *(*error_text)(int raw);
    /* The last call's raw error code (cudaError_t; the simulator's own), for error_text. */
    int (*last_raw)(void);

    int (*device_count)(int *n);
    int (*device_uuid)(int device, uint8_t uuid[TSOCK__DEV_UUID_SIZE]);
    /* 1 in *ok when the device can share memory and events between processes. */
    int (*device_ipc_ok)(int device, int *ok);
    int (*can_access_peer)(int *can, int device, int peer);
    int (*mem_info)(size_t *free_bytes, size_t *total_bytes);

    /* The current device and the thread's current context (NULL: none), for the guard. */
    int (*get_device)(int *device);
    int (*set_device)(int device);
    void *(*context_get)(void);
    void (*context_set)(void *ctx);

    int (*malloc)(void **ptr, size_t bytes);
    int (*free)(void *ptr);
    int (*host_alloc)(void **ptr, size_t bytes);
    int (*host_free)(void *ptr);

    int (*stream_create)(tsock__dev_stream_t *s); /* non-blocking */
    int (*stream_destroy)(tsock__dev_stream_t s);
    int (*stream_sync)(tsock__dev_stream_t s);
    int (*stream_wait)(tsock__dev_stream_t s, tsock__dev_event_t e);
    /* Waits until all work this process queued on the current device has run, on every
     * stream, torch's non-blocking side streams included (cudaDeviceSynchronize). */
    int (*device_sync)(void);

    int (*event_create)(tsock__dev_event_t *e, unsigned flags);
    int (*event_destroy)(tsock__dev_event_t e);
    int (*event_record)(tsock__dev_event_t e, tsock__dev_stream_t s);
    int (*event_query)(tsock__dev_event_t e); /* TSOCK__DEV_OK, _NOT_READY or an error */
    int (*event_sync)(tsock__dev_event_t e);

    int (*memcpy_async)(void *dst, const void *src, size_t bytes, enum tsock__dev_copy kind,
                        tsock__dev_stream_t s);

    int (*ipc_mem_get)(tsock__dev_ipc_handle *h, void *ptr);
    int (*ipc_mem_open)(void **ptr, const tsock__dev_ipc_handle *h);
    int (*ipc_mem_close)(void *ptr);
    int (*ipc_event_get)(tsock__dev_ipc_handle *h, tsock__dev_event_t e);
    int (*ipc_event_open)(tsock__dev_event_t *e, const tsock__dev_ipc_handle *h);

    /* Clears a stale sticky-free error left by another user of the shared runtime, so that the
     * launch's own error check sees only the launch (issue 12, item 12). */
    void (*clear_error)(void);
    /* Queues the conversion kernel (convert.h's arithmetic) on s. */
    int (*convert_launch)(const struct tsock__convert_plan *cv, const uint8_t *in, uint8_t *out,
                          uint32_t samples, tsock__dev_stream_t s);

    /* Sets the calling thread's stream-capture mode to relaxed and returns the previous one, so
     * that a service thread's queries are legal while another thread captures a graph in
     * global mode (issue 12, item 1). restore puts the previous mode back. */
    int (*capture_relax)(int *previous);
    void (*capture_restore)(int previous);

    /* JPEG decoding on the current device (issue 20). create starts a decoder for batches of up
     * to max_batch images: TSOCK__DEV_NO_LIBRARY when nvJPEG cannot be loaded (*why: what was
     * tried), *name says what decodes ("nvJPEG hardware", ...), *hardware is 1 when progressive
     * JPEGs must go to the CPU (a hardware engine that takes baseline JPEGs only). decode queues
     * n images on s: status[i] is 0 when image i will be in its dst once s reaches this point,
     * or a negative code when the caller must decode it otherwise (known at return: bad or
     * unsupported data). Returns TSOCK__DEV_OK or a device error (then no status is valid).
     * The decoder is used by one thread at a time. */
    int (*jpeg_create)(struct tsock__dev_jpeg **out, uint32_t max_batch, int *hardware,
                       const char **name, const char **why);
    int (*jpeg_decode)(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *jobs,
                       uint32_t n, int *status, tsock__dev_stream_t s);
    /* Waits for the decoder's queued work, and frees it. NULL does nothing. */
    void (*jpeg_destroy)(struct tsock__dev_jpeg *j);
    /* 1 in *capturing while a graph is being captured on s (cudaStreamIsCapturing): a record
     * on it is then a graph node, not a record (issue 20). */
    int (*stream_capturing)(tsock__dev_stream_t s, int *capturing);
};

/* The table of this process (see above). Never NULL. */
const struct tsock__devapi *tsock__dev(void);

/* Whether the simulated device is the one in use. */
int tsock__dev_simulated(void);

extern const struct tsock__devapi tsock__devapi_real;
extern const struct tsock__devapi tsock__devapi_sim;

#endif
