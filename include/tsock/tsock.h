/*
 * tsock: one data-loading pipeline shared by several training processes.
 *
 * A producer fills the slots of a rolling buffer (host shared memory, or GPU memory with the
 * CUDA backend) and announces each filled slot to every connected consumer over ZeroMQ.
 * Consumers read the batch in place, without copying it, and release it when done; a slot is
 * refilled only after every consumer it was given to has released it.
 *
 * This header is the reference manual. Conventions that hold for every function:
 *  - Functions that can fail return int: 0 (or a count) on success, a negative errno value or a
 *    TSOCK_E_* code on failure. tsock_strerror() names every code.
 *  - Accessors (functions that only read a property) answer a bad argument, such as a NULL
 *    handle or an index out of range, with one sentinel per return type: NULL for a pointer,
 *    0 for an unsigned count, size or flag, and -EINVAL for a signed result (a dtype, a
 *    dimension, a device). Where a valid answer is itself negative (-1: host memory), -EINVAL
 *    still tells a bad argument apart.
 *  - Handles are opaque. Each *_create has a *_destroy; destroying NULL does nothing.
 *  - Options are set with setters after *_create and before *_start.
 *  - The library never prints, exits or aborts. Diagnostics go to the log callback.
 *  - A producer handle is used by one thread at a time; so is a consumer handle (except for
 *    tsock_producer_cancel and tsock_consumer_cancel: any thread, or a signal handler). Each
 *    runs one internal service thread of its own for the socket, heartbeats and liveness, so a
 *    caller that is busy (decoding, training) for a long time is never taken for dead. The
 *    library's threads block every signal, so signals reach the application's threads.
 */
#ifndef TSOCK_TSOCK_H
#define TSOCK_TSOCK_H

#include <stddef.h>
#include <stdint.h>

#include "tsock/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TSOCK_API __attribute__((visibility("default")))
#else
#define TSOCK_API
#endif

/* ------------------------------------------------------------------------------------------ */
/* Errors, version, logging                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* tsock's own error codes. They live in a range no errno value reaches; every other negative
 * return value is a negated errno (for example -ETIMEDOUT, -EINVAL, -ENOMEM). */
enum tsock_error {
    TSOCK_E_BASE = -10000,
    TSOCK_E_PROTOCOL = -10001,         /* a peer sent a malformed or unexpected message */
    TSOCK_E_VERSION = -10002,          /* the peer speaks another protocol version */
    TSOCK_E_PRODUCER_LOST = -10003,    /* the producer stopped answering (heartbeat timeout) */
    TSOCK_E_PRODUCER_STOPPED = -10004, /* the producer shut down before the stream ended */
    TSOCK_E_END = -10005,              /* the stream ended: the producer published its last batch */
    TSOCK_E_STATE = -10006,            /* the call is not allowed in the handle's current state */
    TSOCK_E_LAYOUT = -10007,           /* a batch layout is empty, too large or inconsistent */
    TSOCK_E_FULL = -10008,             /* the producer has no room for another consumer */
    TSOCK_E_REJECTED = -10009,         /* the producer refused this consumer (see the log) */
    TSOCK_E_NOT_HELD = -10010,         /* releasing a batch that is not held */
    TSOCK_E_BUSY_ENDPOINT = -10011,    /* another live producer already serves this endpoint */
    TSOCK_E_EPOCH_INTERRUPTED = -10012, /* the producer went away mid-epoch; with reconnect on,
                                           the epoch ended early and the next call starts a new
                                           one on the new producer */
    TSOCK_E_BAD_SAMPLE = -10013,        /* a sample's file could not be read or decoded, and the
                                             pipeline was told to fail on such files */
    TSOCK_E_NO_DEVICE = -10014,         /* no usable GPU: no CUDA device, driver or runtime, an
                                             unsupported device index, or no peer access */
    TSOCK_E_DEVICE_UNUSABLE = -10015,   /* a GPU exists but this process cannot use it: driver
                                             older than the runtime, exclusive-process compute
                                             mode, CUDA initialised before fork, or CUDA IPC
                                             blocked (no shared PID namespace or /dev/shm); the
                                             log says which */
    TSOCK_E_CANCELLED = -10016,         /* a *_cancel call stopped the wait (Ctrl-C, shutdown) */
    TSOCK_E_INSECURE = -10017,          /* refused to serve an endpoint that other hosts or
                                           users can reach without authentication
                                           (docs/security.md) */
    TSOCK_E_AUTH = -10018,              /* the producer refused this client's security
                                           handshake: CURVE key not authorized, keys on one
                                           side only, or another server key */
    TSOCK_E_BAD_STATE = -10019,         /* a saved consumer state is corrupt, truncated, of
                                             another version, or foreign (another dataset size
                                             or layout, a free-mode producer): see the log */
    TSOCK_E_GROUP_INCOMPLETE = -10020,  /* ranks of this consumer's group did not join within
                                           the group timeout; the log names them */
    TSOCK_E_GROUP_MISMATCH = -10021,    /* the producer refused this rank: it disagrees with the
                                           group's joined ranks (world size, batch size,
                                           drop_last), repeats a joined rank, or is out of range;
                                           the log names the field */
    TSOCK_E_GROUP_LOST = -10022,        /* another rank of this consumer's group was lost (it
                                           left, or its heartbeats stopped): the group is over */
    TSOCK_E_LAST = -10023
};

/* A static, human-readable description of any return code (0, a negated errno, TSOCK_E_*).
 * Never returns NULL. Any thread. */
TSOCK_API const char *tsock_strerror(int code);

/* The library's version as TSOCK_VERSION_NUMBER and as a static string. Any thread. */
TSOCK_API int tsock_version(void);
TSOCK_API const char *tsock_version_string(void);

/* What this build of the library holds, as a static string of space-separated KEY=VALUE
 * words: "version=0.2.0 cuda=1 io_uring=1". cuda=1: the CUDA backend was compiled with a CUDA
 * toolkit (GPU rings work where a driver and a device are present; cuda=0 leaves only the
 * simulated device). io_uring=1: the reader can use io_uring. Words may be added; never
 * NULL. Any thread. */
TSOCK_API const char *tsock_build_info(void);

enum tsock_log_level {
    TSOCK_LOG_ERROR = 0,
    TSOCK_LOG_WARN = 1,
    TSOCK_LOG_INFO = 2,
    TSOCK_LOG_DEBUG = 3
};

/* Receives every log line the library writes. `message` is valid only during the call and has
 * no trailing newline. The callback may be called from any thread, including the internal
 * service threads, so it must be thread-safe and must not call back into tsock. */
typedef void (*tsock_log_fn)(void *user, int level, const char *message);

/* Installs the process-wide log callback (NULL: discard everything, the default) and the most
 * verbose level to pass on. Call it before creating handles; any thread. */
TSOCK_API void tsock_set_log(tsock_log_fn fn, void *user, int max_level);

/* ------------------------------------------------------------------------------------------ */
/* Batch layout                                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef enum tsock_dtype {
    TSOCK_UINT8 = 1,
    TSOCK_INT8 = 2,
    TSOCK_INT16 = 3,
    TSOCK_INT32 = 4,
    TSOCK_INT64 = 5,
    TSOCK_FLOAT16 = 6,
    TSOCK_FLOAT32 = 7,
    TSOCK_FLOAT64 = 8,
    TSOCK_UINT16 = 9,
    TSOCK_UINT32 = 10,
    TSOCK_UINT64 = 11,
    TSOCK_BFLOAT16 = 12
} tsock_dtype;

/* Bytes per element of `dtype`, or 0 for an unknown dtype. Any thread. */
TSOCK_API size_t tsock_dtype_size(int dtype);
/* A short name such as "uint8" or "float32", or "unknown". Any thread. */
TSOCK_API const char *tsock_dtype_name(int dtype);

/* Where a tensor's data lives. */
typedef enum tsock_device { TSOCK_DEVICE_CPU = 0, TSOCK_DEVICE_CUDA = 1 } tsock_device;

/* The most tensors a layout may hold, and the most dimensions one sample may have. */
#define TSOCK_MAX_TENSORS 16
#define TSOCK_MAX_DIMS 8
/* The longest tensor name, in bytes, without the terminating NUL. */
#define TSOCK_MAX_NAME 63

/* A batch layout: the named tensors every batch holds, each with a dtype and the shape of one
 * sample. A batch of n samples has, for each tensor, shape [n, sample_shape...]. */
typedef struct tsock_layout tsock_layout;

/* Creates an empty layout. Returns 0 and sets *out, or -ENOMEM. The caller owns the layout. */
TSOCK_API int tsock_layout_create(tsock_layout **out);

/* Appends a tensor. `name` is copied (1..TSOCK_MAX_NAME bytes, no control characters, unique
 * in the layout);
 * `sample_shape` has `ndim` (0..TSOCK_MAX_DIMS) positive dimensions and is copied.
 * Returns the new tensor's index (0, 1, ...) or -EINVAL / TSOCK_E_LAYOUT. */
TSOCK_API int tsock_layout_add(tsock_layout *layout, const char *name, int dtype, int ndim,
                               const int64_t *sample_shape);

/* Destroys a layout; NULL does nothing. A producer copies the layout, so it may be destroyed
 * right after tsock_producer_create. */
TSOCK_API void tsock_layout_destroy(tsock_layout *layout);

/* ------------------------------------------------------------------------------------------ */
/* Producer                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct tsock_producer tsock_producer;
typedef struct tsock_slot tsock_slot;

/* Creates a producer that will serve `endpoint` with batches of at most `batch_size` samples
 * laid out as `layout`, in a ring of `slots` slots (2 or more). `endpoint` is a ZeroMQ address
 * ("ipc:///path", "tcp://127.0.0.1:5555") or NULL for the default ipc endpoint in the per-user
 * directory (see tsock_default_endpoint). Nothing is bound or allocated until tsock_producer_start.
 * Returns 0 and sets *out, or -EINVAL, -ENOMEM, TSOCK_E_LAYOUT. The caller owns the producer. */
TSOCK_API int tsock_producer_create(tsock_producer **out, const char *endpoint,
                                    const tsock_layout *layout, uint32_t batch_size,
                                    uint32_t slots);

/* Heartbeat interval and the silence after which a consumer is declared dead and its slots
 * are reclaimed. Defaults: 250 ms and 3000 ms. Returns 0, -EINVAL, or TSOCK_E_STATE after start. */
TSOCK_API int tsock_producer_set_heartbeat(tsock_producer *p, int interval_ms, int timeout_ms);

/* Who may connect (docs/security.md). With CURVE keys, every connection is authenticated and
 * encrypted by ZeroMQ's CURVE security, and only clients (consumers and tsock_stats_query
 * callers) whose public key is listed in `authorized_keys` complete the handshake; the others
 * receive nothing and are logged (warning level) with their key. `server_secret_key_file` is
 * the producer's secret key file (from tsock_curve_keygen or tsock-keygen; it must not be
 * readable by group or others). `authorized_keys` is a file with one Z85 public key per line
 * ("KEY [comment]"; blank and '#' lines ignored) or a directory of "*.key" public key files;
 * neither may be writable by group or others. Both paths or neither (NULL, NULL: no CURVE,
 * the default). The keys are read here (a bad file fails now, its reason logged) and again at
 * start. Caller's thread, before start; the producer copies the paths. Returns 0, -EINVAL (a
 * NULL producer, only one of the paths, a malformed key), -ENOENT, -EACCES (a file's mode),
 * -ENAMETOOLONG, -ENOTSUP (libzmq without CURVE), or TSOCK_E_STATE after start. */
TSOCK_API int tsock_producer_set_curve(tsock_producer *p, const char *server_secret_key_file,
                                       const char *authorized_keys);

/* Without CURVE keys, tsock_producer_start refuses (TSOCK_E_INSECURE, with a log line that
 * says why and what to do) an endpoint that others can reach: any tcp endpoint but exactly one
 * loopback address (127.0.0.0/8, ::1 or the "lo" interface, read with libzmq's own address
 * rules: a "SOURCE;ADDRESS" form, '*', 0.0.0.0, ::, a host's address are all refused), an
 * abstract ipc name ("ipc://@NAME", which has no file permissions), and every other
 * transport. `open_to_network` != 0 serves it anyway, unauthenticated and unencrypted:
 * anyone who reaches it can join, hold slots and read batches. ipc socket files are protected
 * by file modes; every ipc endpoint without keys also admits only the producer's user and
 * root (the peer's SO_PEERCRED user id, which libzmq reports). Caller's thread, before start.
 * Returns 0, -EINVAL or TSOCK_E_STATE. */
TSOCK_API int tsock_producer_set_insecure(tsock_producer *p, int open_to_network);

/* Lets the library choose which samples go into each batch: a dataset of `samples` samples,
 * visited in epochs; epoch e is a permutation of 0..samples-1 derived from (seed, e) only.
 * `epochs` = 0 means endless. Batches never straddle epochs: the last batch of an epoch may be
 * short. Without this call the producer is in free mode: the caller decides what each batch
 * holds and how many samples it has. Returns 0, -EINVAL, or TSOCK_E_STATE after start. */
TSOCK_API int tsock_producer_set_sampler(tsock_producer *p, uint64_t samples, uint64_t seed,
                                         uint64_t epochs);

/* Serves one node's share of the sampler's dataset, for jobs spread over `nodes` machines with
 * one producer each (docs/distributed.md). Node `node_rank` gets M = ceil(samples / nodes)
 * sample ids: those at positions node_rank, node_rank + nodes, ... of one permutation derived
 * from the sampler's (samples, seed) alone, positions past the end wrapping to the start (so a
 * share holds up to one id that another node also holds when nodes does not divide samples).
 * Every producer with the same samples, seed and nodes computes the same split, so the shares
 * are disjoint and together the whole dataset with no message between nodes. The sampler's
 * epochs are then epochs of the share: tsock_slot_sample_ids gives the dataset's ids, while
 * consumers see M as the dataset size (tsock_consumer_dataset_size) and a checkpointing
 * consumer's saved state is a state over the share, which a producer serving a share of
 * another size refuses (docs/semantics.md, "Resume"). Default 1 node (the whole dataset).
 * Needs tsock_producer_set_sampler. Caller's thread, before start. Returns 0, -EINVAL
 * (nodes == 0 or node_rank >= nodes), or TSOCK_E_STATE after start; start fails with -EINVAL
 * (and a log line) when there is no sampler or more nodes than samples. */
TSOCK_API int tsock_producer_set_nodes(tsock_producer *p, uint32_t nodes, uint32_t node_rank);

/* Shard order, for datasets kept in tar shards on storage where random reads are slow: each
 * epoch of the sampler is a seeded permutation of the `shards` shards, then the samples of
 * each run of `window` consecutive shards of that order shuffled together, so that an epoch
 * reads about `window` shards at a time; still every sample exactly once per epoch, for
 * joiners, groups, node shares and resumed consumers as with plain permutations
 * (docs/pipeline.md, "Shuffle orders"). Shard s holds the ids starts[s]..starts[s+1]-1;
 * `starts` has shards + 1 entries, from 0 to the sampler's samples (see
 * tsock_pipeline_shard_starts), and is copied. A window larger than `shards` is `shards`.
 * Needs tsock_producer_set_sampler. Caller's thread, before start. Returns 0, -EINVAL
 * (starts NULL or decreasing, shards or window 0), -ENOMEM, or TSOCK_E_STATE after start;
 * start fails with -EINVAL (logged) when the last start is not the sampler's samples. */
TSOCK_API int tsock_producer_set_shard_order(tsock_producer *p, const uint64_t *starts,
                                             uint32_t shards, uint32_t window);

/* The dataset's class names, label i named names[i] (ImageFolder's: the folder names sorted),
 * announced to every consumer in its WELCOME (tsock_consumer_class_name; Python's
 * loader.dataset.classes). `count` names of 1..255 bytes each, no control characters, copied;
 * count 0 clears them. Caller's thread, before start. Returns 0, -EINVAL (a NULL or bad name),
 * -E2BIG (the names take more than 32768 bytes with a NUL each: consumers then get none, and
 * the caller should say so), -ENOMEM, or TSOCK_E_STATE after start. */
TSOCK_API int tsock_producer_set_classes(tsock_producer *p, uint32_t count,
                                         const char *const *names);

/* ---- the ring on a GPU (CUDA backend) ---- */

/* The number of CUDA devices this process sees, TSOCK_E_NO_DEVICE when there is none (no
 * device, no driver, or a tsock built without the CUDA toolkit), or TSOCK_E_DEVICE_UNUSABLE when
 * one exists that this process cannot use (the log says why). With TSOCK_CUDA_SIM=1 the
 * simulated device's count (docs/gpu.md). Any thread. */
TSOCK_API int tsock_cuda_device_count(void);

/* Copies `bytes` of device memory at `src` (e.g. tsock_batch_tensor_data of a batch whose
 * tensor is on TSOCK_DEVICE_CUDA, after tsock_batch_wait(batch, NULL)) to host memory at `dst`
 * owned by the caller, on CUDA device `device` (tsock_batch_device_index), on that device's
 * default stream (so it follows the wait), and returns once the copy is complete. For checks and
 * tools, not for a training loop (it synchronises). Any thread. Returns 0, -EINVAL (NULL pointer,
 * device < 0), TSOCK_E_NO_DEVICE, TSOCK_E_DEVICE_UNUSABLE or -EIO (logged). */
TSOCK_API int tsock_cuda_copy_to_host(void *dst, const void *src, size_t bytes, int device);

/* Whether this process can decode JPEGs on CUDA device `device` (tsock_pipeline_set_decoder
 * with TSOCK_DECODER_GPU, issue 20): nvJPEG is loaded (at run time: the CUDA toolkit's
 * libnvjpeg.so.13 or .12, the file TSOCK_NVJPEG_LIBRARY names, or one on the loader's path such
 * as the nvidia-nvjpeg wheel's lib folder) and starts on the device; with TSOCK_CUDA_SIM=1 the
 * simulated device's decoder. Call it before starting a producer, so that a missing library
 * is one clear message at start. Logs what is missing and how to install it. Any thread.
 * Returns 0, TSOCK_E_NO_DEVICE, TSOCK_E_DEVICE_UNUSABLE, -ENOPKG (no nvJPEG: the log says what
 * to install), or -EIO. */
TSOCK_API int tsock_cuda_decoder_check(int device);

/* Keeps the ring in the memory of CUDA device `device` (an ordinal as this process numbers its
 * devices; -1, the default, keeps it in host shared memory). The caller still fills slots
 * through tsock_slot_data, which then points into pinned host staging memory; publishing queues
 * one asynchronous copy of the batch to the GPU on the producer's own stream, and the next slot
 * is filled while it runs. Consumers map the ring once through CUDA IPC and wait for each batch
 * on their own stream (tsock_batch_wait). A CUDA ring has at most 256 slots. Whether the device
 * exists is checked by tsock_producer_start, which fails with TSOCK_E_NO_DEVICE (and logs why)
 * where it does not. Returns 0, -EINVAL (device < -1), or TSOCK_E_STATE after start. */
TSOCK_API int tsock_producer_set_device(tsock_producer *p, int device);

/* Channel order of a converted image tensor. */
typedef enum tsock_image_layout {
    TSOCK_NHWC = 0, /* [height, width, channels] per sample, as decoded (the default) */
    TSOCK_NCHW = 1  /* [channels, height, width] per sample, as torchvision models take it */
} tsock_image_layout;

/* Converts tensor `tensor` (NULL: "image"), a uint8 [height, width, channels] tensor with 1..4
 * channels, once for every consumer: to `dtype` (TSOCK_UINT8, TSOCK_FLOAT16 or TSOCK_FLOAT32)
 * in `layout` (TSOCK_NHWC or TSOCK_NCHW). Floats are x / 255 unless
 * tsock_producer_set_normalize is also called. The caller keeps filling the tensor as uint8
 * NHWC (in staging memory that tsock_slot_data points to); consumers see the converted dtype
 * and shape. On a CUDA ring (tsock_producer_set_device) the GPU converts; on a host ring
 * tsock_producer_publish converts on the caller's thread, with the same bytes (the GPU
 * kernel's C reference). Start fails with -EINVAL (logged) when the tensor is missing or not
 * of that shape. Returns 0, -EINVAL (bad dtype or
 * layout, another tensor already named by a conversion setter) or TSOCK_E_STATE after start. */
TSOCK_API int tsock_producer_set_output(tsock_producer *p, const char *tensor, int dtype,
                                        int layout);

/* Normalises tensor `tensor` (NULL: "image") once, as torchvision's Normalize after
 * ToTensor: y = (x / 255 - mean[c]) / std[c] for channel c, computed in float as one fused
 * multiply-add. `mean` and `std` hold `channels` values (copied; channels must equal the
 * tensor's); both NULL (with channels 0 or 3) means ImageNet's, mean (0.485, 0.456, 0.406) and
 * std (0.229, 0.224, 0.225). Implies float32 output unless tsock_producer_set_output chose
 * float16; uint8 output with normalisation is refused at start. Same conditions as
 * tsock_producer_set_output. Returns 0, -EINVAL (one of mean/std NULL, channels outside 1..4,
 * a value not finite or a std <= 0) or TSOCK_E_STATE after start. */
TSOCK_API int tsock_producer_set_normalize(tsock_producer *p, const char *tensor, int channels,
                                           const float *mean, const float *std);

/* Creates the shared-memory ring (mode 0600), binds the endpoint (an ipc socket file is created
 * with mode 0600 in a directory with mode 0700) and starts the service thread. Fails with
 * TSOCK_E_BUSY_ENDPOINT when a live producer already serves the endpoint; a stale socket file
 * or ring left by a dead producer is removed. With tsock_producer_set_device the ring is
 * allocated on that GPU instead; without a usable GPU (or one that cannot share memory between
 * processes) start fails with TSOCK_E_NO_DEVICE. Returns 0 or a negative code. */
TSOCK_API int tsock_producer_start(tsock_producer *p);

/* The endpoint the producer serves (the resolved default when created with NULL). Owned by
 * the producer; valid until it is destroyed. */
TSOCK_API const char *tsock_producer_endpoint(const tsock_producer *p);

/* Waits until at least `count` connected consumers would receive a batch published now, or
 * `timeout_ms` passes (-1: forever; 0: do not block). A rank of a group that waits for its
 * other ranks (docs/distributed.md, the start barrier) or whose group failed, and a consumer
 * that paused (docs/semantics.md), are connected but receive nothing, so they do not count
 * here (they do in tsock_producer_consumer_count): a loop that waits for one consumer before
 * each batch never decodes for nobody, nor uses up a finite stream while every job paused. Returns
 * that number, -ETIMEDOUT, or TSOCK_E_CANCELLED (tsock_producer_cancel). Caller's thread only. */
TSOCK_API int tsock_producer_wait_consumers(tsock_producer *p, int count, int timeout_ms);

/* Makes a tsock_producer_wait_consumers or tsock_producer_acquire that is blocked now, or the
 * next one called, return TSOCK_E_CANCELLED at once: for a signal handler (Ctrl-C) or another
 * thread that wants the producer's caller to stop waiting. One cancel stops one call: the call
 * that returns TSOCK_E_CANCELLED consumes it (several cancels before that count as one), and
 * the producer stays usable. It only stores a flag and writes the service thread's eventfd, so
 * it is async-signal-safe and may be called from any thread while `p` exists (not during or
 * after tsock_producer_destroy). NULL does nothing. */
TSOCK_API void tsock_producer_cancel(tsock_producer *p);

/* Takes a free slot for filling. Blocks while every slot is still held by some consumer, up to
 * `timeout_ms` (-1: forever, 0: do not block). On success sets *slot (owned by the producer,
 * valid until published) and returns 0. Returns -ETIMEDOUT, TSOCK_E_END when the stream is over
 * (tsock_producer_stream_ended), TSOCK_E_CANCELLED (tsock_producer_cancel), or TSOCK_E_STATE
 * when a slot is already being filled. At a finite stream's end, while a paused consumer that
 * the stream still owes epochs keeps it open, it blocks the same way, until that consumer
 * resumes (a slot for its epochs) or leaves (TSOCK_E_END). */
TSOCK_API int tsock_producer_acquire(tsock_producer *p, int timeout_ms, tsock_slot **slot);

/* With a sampler: 1 when the stream is over (so the next tsock_producer_acquire returns
 * TSOCK_E_END at once): the sampler has issued its last epoch, every consumer window that its
 * end cut is finished, and no paused consumer that it still owes epochs waits to come back
 * (docs/semantics.md, "When a finite stream ends": a pause costs a consumer no epoch); else 0;
 * always 0 without a sampler or with endless epochs. Lets a loop that waits for consumers
 * before acquiring stop when there is nothing left to serve. Caller's thread only. */
TSOCK_API int tsock_producer_stream_ended(const tsock_producer *p);

/* Writable pointer to tensor `tensor` (a layout index) of an acquired slot: room for the
 * producer's batch_size samples, sample after sample, C order, laid out as the layout given to
 * tsock_producer_create (before any conversion). Host memory in every case: on a CUDA ring it
 * is pinned staging memory, copied to the GPU at publish. NULL for a bad index. */
TSOCK_API void *tsock_slot_data(tsock_slot *slot, int tensor);

/* With a sampler: how many samples this slot must hold, and their sample ids in batch order
 * (owned by the slot). In free mode: 0 and NULL. */
TSOCK_API uint32_t tsock_slot_planned(const tsock_slot *slot);
TSOCK_API const uint64_t *tsock_slot_sample_ids(const tsock_slot *slot);
/* With a sampler: the epoch this slot belongs to. In free mode: 0. */
TSOCK_API uint64_t tsock_slot_epoch(const tsock_slot *slot);

/* Free mode only: places the acquired slot in the stream as batch `index_in_epoch` of epoch
 * `epoch`, ending that epoch when `epoch_end` is non-zero (consumers see these on the batch).
 * Returns 0, -EINVAL, or TSOCK_E_STATE with a sampler (which places slots itself). */
TSOCK_API int tsock_slot_set_epoch(tsock_slot *slot, uint64_t epoch, uint64_t index_in_epoch,
                                   int epoch_end);

/* Announces the acquired slot, holding `samples` samples (1..batch_size; with a sampler it must
 * equal tsock_slot_planned), to every consumer connected now. A slot published while no
 * consumer is connected is free again at once. Returns 0 or -EINVAL, TSOCK_E_STATE. */
TSOCK_API int tsock_producer_publish(tsock_producer *p, tsock_slot *slot, uint32_t samples);

/* Statistic keys. Producer-wide keys take consumer index -1; per-consumer keys take an index
 * 0..tsock_producer_consumer_count()-1 in join order (the list is read at the call). */
typedef enum tsock_stat {
    TSOCK_STAT_BATCHES = 1,      /* batches published (producer) or sent (consumer) */
    TSOCK_STAT_SAMPLES = 2,      /* samples in those batches */
    TSOCK_STAT_RELEASED = 3,     /* batches released (acknowledged) */
    TSOCK_STAT_HELD = 4,         /* slots held right now */
    TSOCK_STAT_CONSUMERS = 5,    /* producer: consumers connected now */
    TSOCK_STAT_JOINED = 6,       /* producer: consumers that ever joined */
    TSOCK_STAT_LOST = 7,         /* producer: consumers gone without a goodbye (timeout, crash) */
    TSOCK_STAT_BAD_MESSAGES = 8, /* malformed messages received and rejected */
    TSOCK_STAT_WAIT_NS = 9,      /* producer: time blocked in acquire waiting for a free slot */
    TSOCK_STAT_PID = 10,         /* consumer: its process id as it reported it */
    TSOCK_STAT_ID = 11,          /* consumer: its id, unique for the producer's lifetime */
    TSOCK_STAT_EPOCHS = 12,      /* epochs completed: published batches that ended an epoch
                                    (producer), batches returned by next that ended one
                                    (consumer) */
    TSOCK_STAT_SLOTS = 13,       /* producer: slots in the ring */
    TSOCK_STAT_FREE_SLOTS = 14,  /* producer: slots neither held nor being filled; slots in use
                                    = TSOCK_STAT_SLOTS - TSOCK_STAT_FREE_SLOTS */
    TSOCK_STAT_UPTIME_NS = 15,   /* producer: time since tsock_producer_start */
    TSOCK_STAT_LAG = 16,         /* consumer: batches between the oldest batch it still holds
                                    and the newest one published (0 when it holds none) */
    TSOCK_STAT_RATE_MILLI = 17,  /* consumer: batches it released per second, x 1000, over the
                                    last interval of about a second */
    TSOCK_STAT_PAUSED = 18,      /* consumer: 1 while paused between epochs, else 0 */
    TSOCK_STAT_CONSUMED_BATCHES = 19, /* consumer: batches next returned, at its own batch size */
    TSOCK_STAT_CONSUMED_SAMPLES = 20  /* consumer: samples in those batches */
} tsock_stat;

/* Which keys work where. tsock_producer_stat, producer-wide (-1): BATCHES, SAMPLES, RELEASED,
 * HELD, CONSUMERS, JOINED, LOST, BAD_MESSAGES, WAIT_NS, PID, EPOCHS, SLOTS, FREE_SLOTS,
 * UPTIME_NS. Per consumer: BATCHES, SAMPLES, RELEASED, HELD (producer batches sent to it and
 * what it did with them), PID, ID, LAG, RATE_MILLI, PAUSED, and the figures the consumer
 * reports about itself every heartbeat interval (0 until the first report): CONSUMED_BATCHES,
 * CONSUMED_SAMPLES, EPOCHS, WAIT_NS (its time blocked in next). tsock_consumer_stat: see
 * there. tsock_stats_get: the same keys as tsock_producer_stat. */

/* Number of consumers connected now. */
TSOCK_API int tsock_producer_consumer_count(tsock_producer *p);

/* Reads one statistic into *value. Returns 0, or -EINVAL (unknown key), -ENOENT (no such
 * consumer index). Caller's thread. */
TSOCK_API int tsock_producer_stat(tsock_producer *p, int consumer, int key, uint64_t *value);

/* The most bytes of status text (tsock_producer_set_status), without the terminating NUL. */
#define TSOCK_MAX_STATUS 4096

/* Sets the application's status: one JSON object, as text, with the figures only the program
 * knows (for example {"images_per_s": 2410.5, "read_mb_per_s": 260.1, "decode_ms": 3.2,
 * "cpu_percent": 715}). Every statistics reply carries it verbatim, and tsock-stat shows it.
 * Call it whenever the figures change, typically once per reporting interval; the text is
 * copied. `json_object` must be a JSON object (RFC 8259) of at most TSOCK_MAX_STATUS bytes, in
 * UTF-8, on one line: no control characters (no tabs, no newlines). NULL or "" clears it.
 * Any thread, at any time between create and destroy. Returns 0, -EINVAL (not such a text),
 * or -EMSGSIZE (longer than TSOCK_MAX_STATUS). */
TSOCK_API int tsock_producer_set_status(tsock_producer *p, const char *json_object);

/* Tells every consumer the stream ended (they receive TSOCK_E_END after the batches already
 * sent) and stops. A slot acquired but not published is dropped. Safe to call from the
 * producer's thread only; returns 0. Destroy still has to be called. */
TSOCK_API int tsock_producer_finish(tsock_producer *p);

/* Stops the producer if running (consumers receive TSOCK_E_PRODUCER_STOPPED unless finish was
 * called), removes its shared memory and socket file, and frees it. NULL does nothing.
 * The ring (and on a GPU its events) is freed only after every consumer said goodbye (which a
 * consumer does once nothing of its own reads the ring: its held batches released and their
 * stream-ordered releases passed) or was found dead, waiting at most the heartbeat timeout
 * plus 2 s: destroy can therefore block that long while a consumer holds a batch. */
TSOCK_API void tsock_producer_destroy(tsock_producer *p);

/* Writes the default endpoint, "ipc://<runtime dir>/tsock/default.sock", into buf (creating
 * the per-user directory with mode 0700). The runtime dir is $XDG_RUNTIME_DIR, or
 * /tmp/tsock-<uid>. Returns the string length, or -ENAMETOOLONG / a negated errno. */
TSOCK_API int tsock_default_endpoint(char *buf, size_t size);

/* Generates a CURVE key pair with libzmq and writes it as two new files: the secret key with
 * mode 0600, the public key with mode 0644, each 40 Z85 characters and a newline (the format
 * docs/security.md describes). Existing files are never replaced. Any thread. Returns 0,
 * -EINVAL, -EEXIST (a file exists), -ENOTSUP (libzmq without CURVE) or a negated errno. */
TSOCK_API int tsock_curve_keygen(const char *secret_key_file, const char *public_key_file);

/* ------------------------------------------------------------------------------------------ */
/* Consumer                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct tsock_consumer tsock_consumer;
typedef struct tsock_batch tsock_batch;

/* Creates a consumer for `endpoint` (NULL: the default endpoint). Nothing is connected until
 * tsock_consumer_start. Returns 0 and sets *out, or -ENOMEM, -EINVAL. */
TSOCK_API int tsock_consumer_create(tsock_consumer **out, const char *endpoint);

/* Heartbeat interval and the producer silence after which every call fails with
 * TSOCK_E_PRODUCER_LOST. Defaults: 250 ms and 3000 ms. TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_heartbeat(tsock_consumer *c, int interval_ms, int timeout_ms);

/* Connects with CURVE (docs/security.md): `client_secret_key_file` is this consumer's secret
 * key file (its public key, derived from it, must be in the producer's authorized keys; the
 * file must not be readable by group or others), `server_public_key_file` the producer's public
 * key file. Both or neither (NULL, NULL: no CURVE, the default). When the producer refuses the
 * handshake (a key it does not list, another server key, or keys on one side only), start
 * fails with TSOCK_E_AUTH (logged), and the producer logs the refused key. The keys are read here
 * (a bad file fails now, its reason logged). Caller's thread, before start; the paths are copied.
 * Returns 0, -EINVAL, -ENOENT, -EACCES, -ENAMETOOLONG, -ENOTSUP (libzmq without CURVE), or
 * TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_curve(tsock_consumer *c, const char *client_secret_key_file,
                                       const char *server_public_key_file);

/* A name shown in the producer's statistics (copied, at most TSOCK_MAX_NAME bytes, no control
 * characters). Returns 0, -EINVAL, or TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_name(tsock_consumer *c, const char *name);

/* The consumer's own batch size: 0 (the default) takes the producer's. Any other size works:
 * a batch that lies inside one producer batch is a zero-copy view of the slot, any other is
 * gathered into memory the consumer owns. TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_batch_size(tsock_consumer *c, uint32_t batch_size);

/* Non-zero: drop the last batch of each epoch when it is short. Default 0 (keep it). */
TSOCK_API int tsock_consumer_set_drop_last(tsock_consumer *c, int drop_last);

/* Data-parallel groups (docs/distributed.md). A consumer may be rank `rank` of a group of
 * `world_size` ranks called `name` (a DDP job's ranks, each its own process). The producer
 * (which needs a sampler) starts the group's epochs when its last rank has joined (the start
 * barrier: until then next() of every rank waits), then all its ranks share one epoch with
 * torch.utils.data.distributed.DistributedSampler's semantics: each rank gets its own disjoint
 * share, every rank the same number of samples and batches (tsock_consumer_batches_per_epoch,
 * the same on every rank), the shares together every sample once, the tail padded by
 * repeating samples of other ranks' shares or, with tsock_consumer_set_drop_last, left out so
 * that every batch is full. Epochs are numbered from 0 at the group's start, the same on every
 * rank. A group does not pause between epochs (tsock_consumer_set_epoch_grace does not apply):
 * a rank that stops reading keeps what it was sent, up to the slot count. The ranks must
 * agree on world_size, batch size and drop_last.
 *
 * Errors next() reports for a rank: TSOCK_E_GROUP_INCOMPLETE when ranks did not join within
 * the group timeout (the log names them: "group 'resnet': ranks 1, 3 of 4 did not join within
 * 600 s"); TSOCK_E_GROUP_LOST once another rank of the group was lost (it left or died), after
 * one TSOCK_E_EPOCH_INTERRUPTED when this rank was inside an epoch (it had returned batches of
 * it); both are final. Start fails with TSOCK_E_GROUP_MISMATCH (the log says which field) when
 * the producer refuses the rank: world size, batch size or drop_last differ from the ranks
 * already joined, or that rank has joined already; with TSOCK_E_REJECTED (logged) when the
 * producer has no sampler, or with drop_last a rank's share holds no full batch, or when the
 * ranks restored different saved states ("the restored state differs ...": they must all
 * restore states saved at the same step, or none).
 *
 * A rank saves and restores its position as any consumer does (below), and its state is its
 * group's: the samples the group's ranks consumed in the epoch up to this rank's step, the
 * same bytes on every rank that saved at that step. Restored into ranks of any world size (the
 * same node count), the group's interrupted epoch goes on with exactly the samples the group
 * had not consumed, dealt among the ranks with DistributedSampler's padding or drop_last over
 * that rest; with the world size it was saved with, every rank gets exactly the batches it
 * would have got (docs/semantics.md, "Resuming a group"). */

/* Makes this consumer rank `rank` of group `name` of `world_size` ranks, before start. `name`
 * is 1 to 64 bytes of UTF-8 without control characters (copied). Caller's thread. Returns 0,
 * -EINVAL (a bad name, world_size 0, rank >= world_size), or TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_group(tsock_consumer *c, const char *name, uint32_t rank,
                                       uint32_t world_size);

/* How long the producer waits for the group's other ranks, from the group's first HELLO,
 * before every waiting rank fails with TSOCK_E_GROUP_INCOMPLETE (the first rank's timeout
 * applies to the group). Default 600000 ms (10 minutes). Before start; caller's thread. Returns
 * 0, -EINVAL, or TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_group_timeout(tsock_consumer *c, uint32_t timeout_ms);

/* Between epochs. After the last batch of an epoch was returned, a consumer that asks for the
 * next batch within `grace_ms` goes on where it was (no sample is skipped). One that waits
 * longer (validation, checkpointing) is paused: it gives back every slot it holds or was sent,
 * so it slows nobody, and its next call rejoins the stream at the current position with a
 * fresh, exact epoch. Default 100 ms; 0 pauses at once. The same grace applies to a consumer
 * that has read nothing of its epoch yet (after start) and to one that stops reading in the
 * middle of an epoch (plus twice its slowest step: see tsock_consumer_pause below). Batches the
 * caller holds are never taken back. TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_epoch_grace(tsock_consumer *c, int grace_ms);

/* Leaving an epoch early (docs/semantics.md, "Leaving an epoch early"). A consumer that stops
 * calling next in the middle of an epoch (a step limit, then validation) is paused as it is
 * between epochs: the batches announced to it and not yet taken go back to the producer, which
 * from then on gives it nothing, so the other consumers never wait for it. Its next call of
 * next goes on with the same epoch: exactly the samples of that epoch it had not received
 * (epoch number and batch index continue), gathered from the stream as it passes, then normal
 * exact epochs. The library pauses a consumer on its own once it has not called next for the
 * epoch grace plus twice its slowest step so far (time between one batch's return and the next
 * call; halved at each epoch's end), so that a consumer whose steps are merely slow is not paused
 * between two of them; tsock_consumer_pause says so at once (the pause is done on return; PAUSE
 * goes to the producer right after).
 *
 * Mid-epoch pauses need the sample ids of each batch (4 bytes a sample in each BATCH message,
 * and a bitmap of the epoch's ids, n/8 bytes): a consumer asks the producer for them whenever
 * it can use them, that is for a solo consumer of a producer with a sampler whose batches hold
 * at most 16370 samples. A rank of a group (its ranks share one epoch) and a consumer of a
 * producer in free mode keep the batches sent to them until they read them, as before.
 *
 * tsock_consumer_pause: the caller will not read for a while; pause now, mid-epoch or between
 * epochs (the epoch grace is not waited for). Nothing the caller holds is released: release
 * held batches as usual. The batches announced and not taken go back once the producer
 * confirms the pause; after the stream's end, which the producer may have decided first, they
 * are the stream's last and stay for next to return. Any
 * thread but a signal handler. Returns 0 (also when paused already, or after the end);
 * TSOCK_E_STATE before start; -ENOTSUP mid-epoch for a consumer that cannot pause there (above);
 * -EBUSY mid-epoch while a batch is half gathered (a next that timed out: call next again). */
TSOCK_API int tsock_consumer_pause(tsock_consumer *c);

/* Gives up the rest of the current epoch: the next batch starts the next epoch (its number one
 * more, its index 0), a fresh exact epoch from wherever the stream is then, as after a pause
 * between epochs. What torch's DataLoader does when a new iterator replaces one left by break
 * (Python's tsock.DataLoader calls it there). The consumer is paused until its next call of
 * next, which rejoins the stream. Nothing the caller holds is released. Any thread but a
 * signal handler. Returns 0 (also at an epoch's boundary, where there is nothing to give up);
 * TSOCK_E_STATE before start; -ENOTSUP for a rank of a group or a producer in free mode;
 * -EBUSY while a batch is half gathered (a next that timed out). */
TSOCK_API int tsock_consumer_end_epoch(tsock_consumer *c);

/* When the producer dies or stops, wait up to `timeout_ms` for a producer to come back on the
 * same endpoint and go on with the next epoch there, instead of failing. An epoch cut short by
 * the loss ends with TSOCK_E_EPOCH_INTERRUPTED from next(); the call after that starts a new
 * epoch. 0 (the default) turns it off. A rank of a group (tsock_consumer_set_group) does not
 * reconnect: after TSOCK_E_EPOCH_INTERRUPTED it returns the producer's error, and the job
 * restarts as a whole, from its checkpoints. TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_reconnect(tsock_consumer *c, int timeout_ms);

/* The CUDA device this consumer uses a producer's GPU ring from (an ordinal of this process):
 * -1 (the default) uses the producer's own GPU, found by its UUID; another device reads the
 * ring through peer access, and start fails with TSOCK_E_NO_DEVICE (and a log line) where the
 * two GPUs have none. A host ring ignores it. Returns 0, -EINVAL (device < -1) or
 * TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_set_device(tsock_consumer *c, int device);

/* Connects, introduces itself and maps the ring read-only (a GPU ring: opens its CUDA IPC
 * handles once, kept open until the producer goes away or the consumer is destroyed). Waits up
 * to `timeout_ms` (-1: forever) for the producer to answer. Returns 0, -ETIMEDOUT,
 * TSOCK_E_VERSION, TSOCK_E_FULL, TSOCK_E_REJECTED, TSOCK_E_AUTH (CURVE refused), TSOCK_E_NO_DEVICE
 * (a GPU ring and no usable GPU or peer access here), TSOCK_E_CANCELLED (tsock_consumer_cancel) or
 * a negated errno from mapping the ring. A start that failed, cancelled while it waited included,
 * is not retried: destroy the consumer (a start cancelled before it began leaves the consumer
 * startable). */
TSOCK_API int tsock_consumer_start(tsock_consumer *c, int timeout_ms);

/* Makes a tsock_consumer_start or tsock_consumer_next that is blocked now, or the next one
 * called, return TSOCK_E_CANCELLED at once (a pending cancel wins over a batch that is ready):
 * a way out of a wait for a producer that never comes (-1: forever) on Ctrl-C, or at shutdown
 * from another thread. One cancel stops one call: the call that returns TSOCK_E_CANCELLED
 * consumes it (several cancels before that count as one); after a cancelled next the consumer
 * goes on as before, the batches it holds stay valid. It only stores a flag and writes the
 * service thread's eventfd, so it is async-signal-safe: call it from a signal handler, or from
 * any thread while `c` exists (not during or after tsock_consumer_destroy). NULL does
 * nothing. */
TSOCK_API void tsock_consumer_cancel(tsock_consumer *c);

/* Epochs. With a producer sampler (tsock_producer_set_sampler), each consumer has epochs of its
 * own: its epoch 0 starts with the first sample it receives, and every epoch holds each of the
 * producer's samples exactly once, whenever it joined. Without one (free mode), epochs end at
 * the producer's epoch marks, so a consumer that joined mid-epoch first gets the rest of it. The
 * last batch of an epoch has tsock_batch_is_epoch_end set; the call after it starts the next epoch.
 */

/* The next batch. Blocks up to `timeout_ms` (-1: forever, 0: poll). On success sets *batch
 * (owned by the consumer, valid until released) and returns 0. A consumer may hold several
 * batches at once, up to the producer's slot count. Returns -ETIMEDOUT; TSOCK_E_END once the
 * stream ended and every batch sent before the end was returned; TSOCK_E_PRODUCER_LOST within
 * the heartbeat timeout when the producer died; TSOCK_E_PRODUCER_STOPPED when it shut down
 * (batches sent but not yet returned are dropped then: the producer frees its ring once this
 * consumer no longer reads it); -EBUSY (logged) when reconnecting (tsock_consumer_set_reconnect)
 * needs to keep a ninth ring of earlier sessions that held batches still point into: release
 * some and call again; TSOCK_E_CANCELLED after tsock_consumer_cancel. */
TSOCK_API int tsock_consumer_next(tsock_consumer *c, int timeout_ms, tsock_batch **batch);

/* Gives a batch back so its slot can be refilled. The batch pointer and its tensor pointers are
 * invalid afterwards. Returns 0, or TSOCK_E_NOT_HELD for a batch this consumer does not hold.
 * Releasing after the producer is gone succeeds and does nothing. A batch on a GPU is released
 * as tsock_consumer_release_on_stream does with the legacy default stream (NULL): the slot is
 * freed once the work queued on that stream (and the streams it synchronises with) is done. */
TSOCK_API int tsock_consumer_release(tsock_consumer *c, tsock_batch *batch);

/* Stream-ordered release of a batch on a GPU: the slot goes back to the producer only once the
 * work queued on `cuda_stream` (a cudaStream_t; NULL: the legacy default stream of the batch's
 * device) so far has finished, so the caller may release right after queuing the kernels that
 * read the batch. The call never blocks: it records an event on the stream and a library
 * thread polls it (about every millisecond while releases are pending). The
 * stream must belong to the batch's device (tsock_batch_device_index). The batch pointer is
 * invalid afterwards, as with tsock_consumer_release; a host batch is released at once.
 * Caller's thread. Returns 0, TSOCK_E_NOT_HELD, TSOCK_E_STATE when the stream is capturing a
 * CUDA graph (the release would pass before the graph runs: release on a stream outside the
 * capture after launching it), or a CUDA failure (TSOCK_E_NO_DEVICE, -EIO; logged); on any
 * error the batch is still held. */
TSOCK_API int tsock_consumer_release_on_stream(tsock_consumer *c, tsock_batch *batch,
                                               void *cuda_stream);

/* Figures of this consumer's own: TSOCK_STAT_BATCHES and _SAMPLES (returned by next, at its
 * own batch size; TSOCK_STAT_CONSUMED_BATCHES and _CONSUMED_SAMPLES are the same figures),
 * _RELEASED, _HELD, _BAD_MESSAGES, _EPOCHS (epochs completed: batches returned that ended one),
 * _WAIT_NS (time blocked in next, including a wait in progress), _ID, _PID. The consumer also
 * sends BATCHES, SAMPLES, EPOCHS and WAIT_NS to its producer every heartbeat interval, where
 * tsock_producer_stat and tsock-stat show them. Any thread. Returns 0 or -EINVAL. */
TSOCK_API int tsock_consumer_stat(tsock_consumer *c, int key, uint64_t *value);

/* Checkpointing (docs/semantics.md, "Resume"). A checkpointable consumer can save its position
 * at any batch boundary as a small opaque state (about one bit per sample plus a 53-byte
 * header, less when few or most samples of the epoch were delivered), and a consumer restored
 * from it receives exactly the samples of the interrupted epoch it had not received, then
 * normal exact epochs, with the epoch numbers continuing. It needs a producer with a sampler
 * whose batches hold at most 16370 samples (the producer then sends this consumer each batch's
 * sample ids). Batches returned after the last save are the only ones a crash can make the
 * restored consumer see twice: at-least-once between the last save and the crash,
 * exactly-once otherwise. */

/* Makes the consumer checkpointable (on != 0), before start. Start then fails with -ENOTSUP
 * (logged) when the producer has no sampler, TSOCK_E_REJECTED when its batches are too large
 * to carry their ids. Returns 0, -EINVAL, or TSOCK_E_STATE after start. Caller's thread. */
TSOCK_API int tsock_consumer_set_checkpointing(tsock_consumer *c, int on);

/* Writes the consumer's position into buf[0, cap): the epoch in progress and the samples of it
 * next returned so far (all of them, whether released or not). Call it between next calls, on
 * the caller's thread. Sets *len to the state's size and returns 0; returns -ENOSPC (with *len
 * the size needed: call with cap 0 to ask) when cap is too small, -EINVAL, or TSOCK_E_STATE
 * when the consumer is not started or not checkpointable, or the stream ended inside an epoch
 * (nothing is left to resume). The caller owns buf.
 *
 * A rank of a group first reads past the other ranks' blocks of its last step (their ids are
 * part of its group's position; it releases them), waiting for the producer to send them if
 * it has not yet: the rest of one group batch, which the producer decodes for the other ranks
 * anyway. Release the batches you hold before saving: a caller holding every slot would wait
 * for good. The wait ends with the consumer's error if the producer or the group is lost, or
 * with TSOCK_E_CANCELLED (tsock_consumer_cancel). */
TSOCK_API int tsock_consumer_save_state(tsock_consumer *c, void *buf, size_t cap, size_t *len);

/* Restores a position saved by tsock_consumer_save_state, before start; implies
 * tsock_consumer_set_checkpointing(c, 1). The bytes are copied (the caller keeps buf) and
 * checked at once: TSOCK_E_BAD_STATE (with a log line saying why) for a corrupt, truncated,
 * unknown or other-version state. Start then checks them against the producer and fails with
 * TSOCK_E_BAD_STATE (logged) when the dataset size or the batch layout (tensor names, dtypes,
 * shapes) differs, when this consumer's batch size or drop_last differs from the saved ones,
 * when the producer has no sampler, when a group rank's state is restored into a solo
 * consumer or the reverse, or when a rank's state is restored against another node's producer.
 * The restored consumer joins like any late joiner and
 * takes its remaining samples from the shared stream as it passes: it waits at most one
 * producer epoch's worth of stream for them, and the producer decodes nothing more for it.
 * Returns 0, -EINVAL, -ENOMEM, TSOCK_E_BAD_STATE, or TSOCK_E_STATE after start. */
TSOCK_API int tsock_consumer_restore_state(tsock_consumer *c, const void *state, size_t len);

/* The batch size and slot count the producer announced (valid after start). */
TSOCK_API uint32_t tsock_consumer_batch_capacity(const tsock_consumer *c);
TSOCK_API uint32_t tsock_consumer_slot_count(const tsock_consumer *c);
/* Samples per epoch (the producer sampler's dataset size; 0 in free mode), and the number of
 * batches in one of this consumer's epochs at its batch size (0 in free mode; for a rank of a
 * group, the rank's own count, the same on every rank). After start. */
TSOCK_API uint64_t tsock_consumer_dataset_size(const tsock_consumer *c);
TSOCK_API uint64_t tsock_consumer_batches_per_epoch(const tsock_consumer *c);
/* The producer's node split, as its WELCOME announced it (docs/distributed.md): *nodes (>= 1)
 * producers each serve one share of a dataset of *dataset samples (every node's together), and
 * this producer serves share *node_rank (< *nodes); tsock_consumer_dataset_size is that share's
 * size. One node: 1 and 0. Free mode: *dataset 0. Any pointer may be NULL. After start, from
 * any thread. Returns 0, -EINVAL (c NULL), or TSOCK_E_STATE before a successful start. */
TSOCK_API int tsock_consumer_node_split(const tsock_consumer *c, uint32_t *nodes,
                                        uint32_t *node_rank, uint64_t *dataset);
/* Once next returned TSOCK_E_END: the whole epochs the producer published before its stream
 * ended (tsock-producer --epochs N serves N; 0, its default, serves until stopped), which the
 * consumer also logs. 0 before the end, or for NULL. Any thread. */
TSOCK_API uint64_t tsock_consumer_stream_epochs(const tsock_consumer *c);
/* The producer's class names (tsock_producer_set_classes), after start: how many (0 when it
 * announced none), and the name of label `label` (NUL-terminated, owned by the consumer and
 * valid until it is destroyed or reconnects; NULL out of range). Any thread. */
TSOCK_API uint32_t tsock_consumer_classes(const tsock_consumer *c);
TSOCK_API const char *tsock_consumer_class_name(const tsock_consumer *c, uint32_t label);

/* Releases every held batch, says goodbye to the producer, unmaps the ring and frees the
 * consumer. NULL does nothing. Before the goodbye (after which the producer refills the slots)
 * it waits for what may still read them: on a GPU, the work queued on the device of a batch
 * never released, and stream-ordered releases whose work has not finished (at most 5 s). Not
 * concurrently with another call on the same consumer. */
TSOCK_API void tsock_consumer_destroy(tsock_consumer *c);

/* ------------------------------------------------------------------------------------------ */
/* Statistics of a running producer, from any process                                         */
/* ------------------------------------------------------------------------------------------ */

/* A snapshot of a producer's statistics: its own figures, its application status and one
 * record per consumer connected when it answered. Any process of the user that may connect to
 * the endpoint can ask; asking does not make it a consumer. A producer answers at most 20
 * requests per second (more are dropped unanswered and time out), so that a flood of them
 * costs it little. */
typedef struct tsock_stats tsock_stats;

/* Asks the producer serving `endpoint` (NULL: the default endpoint) for its statistics and
 * waits up to `timeout_ms` (-1: forever) for the answer. On success sets *out (owned by the
 * caller: free it with tsock_stats_destroy) and returns 0. Returns -ETIMEDOUT when no producer
 * answered in time, -ENOENT when an ipc endpoint has no socket file (no producer there),
 * -EINTR when a signal interrupted the wait, TSOCK_E_VERSION when the producer speaks another
 * protocol version, TSOCK_E_PROTOCOL for a malformed answer, TSOCK_E_AUTH when the producer
 * requires CURVE keys (tsock_stats_query_curve), -EINVAL, -ENOMEM, or a negated
 * errno from ZeroMQ. Any thread; each call uses its own socket. */
TSOCK_API int tsock_stats_query(tsock_stats **out, const char *endpoint, int timeout_ms);

/* tsock_stats_query over a CURVE connection, for a producer that requires keys (see
 * tsock_consumer_set_curve for the two key files; NULL, NULL is tsock_stats_query). A refused
 * handshake is TSOCK_E_AUTH (also without keys against a producer that requires them). Bad key
 * files: -EINVAL, -ENOENT, -EACCES, logged. Any thread. */
TSOCK_API int tsock_stats_query_curve(tsock_stats **out, const char *endpoint, int timeout_ms,
                                      const char *client_secret_key_file,
                                      const char *server_public_key_file);

/* Consumers in the snapshot (0..64), listed in join order; a consumer index below is 0..n-1. */
TSOCK_API int tsock_stats_consumer_count(const tsock_stats *s);

/* Reads one figure: consumer -1 for the producer's, else a consumer index; keys as for
 * tsock_producer_stat (TSOCK_STAT_CONSUMERS gives the consumer count). Returns 0, -EINVAL
 * (unknown key for that side, NULL pointer), or -ENOENT (no such consumer index). */
TSOCK_API int tsock_stats_get(const tsock_stats *s, int consumer, int key, uint64_t *value);

/* A consumer's name as it set it ("" when unnamed), or NULL for a bad index. Owned by the
 * snapshot. Printable bytes, not necessarily valid UTF-8. */
TSOCK_API const char *tsock_stats_consumer_name(const tsock_stats *s, int consumer);

/* The producer's application status (see tsock_producer_set_status), "" when none was set.
 * Owned by the snapshot. */
TSOCK_API const char *tsock_stats_status(const tsock_stats *s);

/* The whole snapshot as one JSON object on one line (no newline), valid UTF-8, owned by the
 * snapshot: {"endpoint", "producer": {...}, "status": {...} or null, "consumers": [...]};
 * docs/stats.md lists the fields. Returns NULL only for a NULL snapshot. */
TSOCK_API const char *tsock_stats_json(const tsock_stats *s);

/* Frees a snapshot; NULL does nothing. */
TSOCK_API void tsock_stats_destroy(tsock_stats *s);

/* ---- reading a batch (all pointers owned by the batch, valid until it is released) ---- */

TSOCK_API uint32_t tsock_batch_samples(const tsock_batch *b); /* samples in this batch */
/* Sequence number of the producer batch this batch starts in. */
TSOCK_API uint64_t tsock_batch_seq(const tsock_batch *b);
/* This consumer's epoch, counted from 0 at its first batch. In free mode a consumer's epochs
 * are the producer's: the epoch number is the producer's mark (tsock_slot_set_epoch). */
TSOCK_API uint64_t tsock_batch_epoch(const tsock_batch *b);
/* 1 when the batch is a zero-copy view of a slot, 0 when it was gathered from several. */
TSOCK_API int tsock_batch_is_view(const tsock_batch *b);
/* Position of this batch in its epoch, from 0, and a flag that it ends the epoch. In free mode
 * an epoch's first batch carries the position of the producer batch it starts in, so the first
 * epoch of a consumer that joined mid-epoch (a partial one) starts at a non-zero index. */
TSOCK_API uint64_t tsock_batch_index_in_epoch(const tsock_batch *b);
TSOCK_API int tsock_batch_is_epoch_end(const tsock_batch *b);

TSOCK_API int tsock_batch_tensor_count(const tsock_batch *b);
/* Index of the tensor called `name`, or -ENOENT. */
TSOCK_API int tsock_batch_find(const tsock_batch *b, const char *name);
TSOCK_API const char *tsock_batch_tensor_name(const tsock_batch *b, int tensor);
TSOCK_API int tsock_batch_tensor_dtype(const tsock_batch *b, int tensor);
/* Number of dimensions including the leading batch dimension. */
TSOCK_API int tsock_batch_tensor_ndim(const tsock_batch *b, int tensor);
/* Size of dimension `dim` (dimension 0 is the batch's sample count), or -EINVAL. */
TSOCK_API int64_t tsock_batch_tensor_dim(const tsock_batch *b, int tensor, int dim);
/* Total bytes of the tensor in this batch. */
TSOCK_API size_t tsock_batch_tensor_bytes(const tsock_batch *b, int tensor);
/* Read-only pointer to the tensor's data (host shared memory mapped read-only, or device
 * memory), C order, contiguous. NULL for a bad index. Device memory cannot be protected: never
 * write to a batch in place, other consumers read the same bytes. */
TSOCK_API const void *tsock_batch_tensor_data(const tsock_batch *b, int tensor);
/* Where the tensor's data is: TSOCK_DEVICE_CPU or TSOCK_DEVICE_CUDA; -EINVAL for a bad index. */
TSOCK_API int tsock_batch_tensor_device(const tsock_batch *b, int tensor);
/* The CUDA device (an ordinal of this process) whose address space the batch's pointers belong
 * to, -1 for a batch in host memory, or -EINVAL for a NULL batch. */
TSOCK_API int tsock_batch_device_index(const tsock_batch *b);

/* Makes `cuda_stream` (a cudaStream_t; NULL: the legacy default stream of the batch's device)
 * wait until the producer's copy of this batch to the GPU has finished, without blocking the
 * calling thread (cudaStreamWaitEvent on the slot's interprocess event). Call it before queuing
 * work that reads a GPU batch, on every stream that reads it. A batch gathered from several
 * slots is complete when next() returns it, and a host batch needs no wait: both return 0. So
 * does a batch whose session has ended (the producer stopped or was lost, or the consumer
 * reconnected): its producer may have destroyed the event, and the batch was complete when it
 * was announced. Caller's thread, while the batch is held. Returns 0, -EINVAL, or a CUDA failure
 * (logged). */
TSOCK_API int tsock_batch_wait(const tsock_batch *b, void *cuda_stream);

#ifdef __cplusplus
}
#endif

#endif
