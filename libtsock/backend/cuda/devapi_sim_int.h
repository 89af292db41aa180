/* Shared by the simulated device's files (devapi_sim.c describes it): its tsock__sim_settings, the
 * shared-memory objects that hold device memory and events, this process's mappings, and the
 * streams with their queued work. */
#ifndef TSOCK_CUDA_DEVAPI_SIM_INT_H
#define TSOCK_CUDA_DEVAPI_SIM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/devapi_sim.h"

struct tsock__sim_cfg {
    char device[64];
    int devices, fail, capture_env;
    unsigned long seed, max_delay_us;
    long stall_after, stall_ms;
    const char *stall_file;
};
extern struct tsock__sim_cfg tsock__sim_cfg;
extern atomic_int tsock__sim_global_capture, tsock__sim_stale_error;
extern atomic_long tsock__sim_executed, tsock__sim_spin_waits;
extern atomic_uint tsock__sim_contexts;

/* Reads the environment once (TSOCK_CUDA_SIM_*). */
void tsock__sim_settings(void);
/* Reports a broken rule with a backtrace of the call site, and aborts. */
void tsock__sim_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Whether `pid` still runs (a zombie does not). */
int tsock__sim_alive(int32_t pid);

#define SEG_MAGIC 0x7453494du
#define SEG_HEADER 32768u
#define SEG_USERS 16
#define SEG_READS 256
/* The event waits a queued read keeps: the latest ones queued before it on its stream. */
#define READ_WAITS 4
enum { SEG_MEM = 1, SEG_EVENT = 2 };

/* A queued read of device memory, until it runs: who queued it, on which of its streams, and
 * the waits queued before it there that had not run yet, so that a write ordered before one of
 * those waits' signals is not taken for a write under the read. */
struct seg_read {
    int32_t pid;
    uint32_t used;
    uint64_t off, len;
    uint64_t stream, seq; /* the reader's stream (its address in pid) and the read's place */
    uint32_t waits;
    struct {
        uint64_t event, target; /* the event's id (struct seg) and the record it waits for */
    } wait[READ_WAITS];
};

struct seg {
    uint32_t magic, kind;
    int32_t owner;
    uint32_t flags; /* events: TSOCK__DEV_EVENT_* */
    uint64_t size;
    uint64_t id; /* unique on the device: the owner's pid and a counter */
    atomic_uint_fast64_t recorded, completed; /* events */
    atomic_int freed;
    atomic_int destroyed; /* events: the exporter destroyed it (importers may not use it) */
    pthread_mutex_t mu;   /* robust, process-shared: guards users and reads */
    struct {
        int32_t pid, opens, pending; /* pending: queued waits of that process, not yet run */
    } users[SEG_USERS];
    struct seg_read reads[SEG_READS]; /* queued reads (any process), not yet run */
    char name[48];
};
_Static_assert(sizeof(struct seg) <= SEG_HEADER, "the header fits its page");

void tsock__sim_seg_lock(struct seg *s);
void tsock__sim_seg_unlock(struct seg *s);
/* A new object of `kind` with `size` bytes after its header, owned by this process; NULL and
 * *err (what failed) on failure. */
struct seg *tsock__sim_seg_create(int kind, size_t size, const char **err);
/* Maps an existing object by name, or NULL. */
struct seg *tsock__sim_seg_open(const char *name, int kind);
/* Adds `delta` to this process's opens (pending 0) or queued uses (pending 1) of s. */
void tsock__sim_seg_user(struct seg *s, int pending, int delta);
/* A live process other than this one that has s open (pending 0) or queued work on it
 * (pending 1), or 0. */
int32_t tsock__sim_seg_other_user(struct seg *s, int pending);
/* Removes the objects of dead owners that nobody maps; returns the bytes of device memory left. */
size_t tsock__sim_sweep(void);

struct mapping {
    struct mapping *next;
    struct seg *seg;
    uint8_t *base; /* what the caller sees: the byte after the header */
    int imported;
    atomic_int queued; /* operations this process queued that use it and have not run */
};

/* The mapping holding `p` (exact: starting at it), or NULL. */
struct mapping *tsock__sim_find_mapping(const void *p, int exact);
void tsock__sim_add_mapping(struct seg *s, int imported);
void tsock__sim_remove_mapping(struct mapping *gone);

enum op_kind { OP_COPY, OP_CONVERT, OP_SIGNAL, OP_WAIT };

struct op {
    struct op *next;
    enum op_kind kind;
    uint64_t seq;
    /* copies and conversions */
    void *dst;
    const void *src;
    size_t bytes;
    struct seg *write_seg, *read_seg;
    int read_slot;           /* in read_seg->reads, or -1 */
    struct mapping *uses[2]; /* the mappings it reads or writes (unmapping them is refused) */
    struct tsock__convert_plan cv;
    uint32_t samples;
    /* events */
    struct seg *event;
    uint64_t target;
    void *site[12]; /* where it was queued, for violations */
    int site_depth;
};

struct tsock__dev_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct op *head, *tail;
    uint64_t queued, done;
    int destroyed;
    int capturing; /* a graph is being captured on it (tsock__dev_sim_capture_stream) */
    int held;      /* its executor runs nothing (tsock__dev_sim_hold_stream) */
    uint64_t rng;
};

void tsock__sim_sleep_us(unsigned us);
struct tsock__dev_stream *tsock__sim_stream_new(void);
/* NULL: the process's default stream. */
struct tsock__dev_stream *tsock__sim_resolve(tsock__dev_stream_t s);
struct op *tsock__sim_op_new(enum op_kind kind);
void tsock__sim_enqueue(tsock__dev_stream_t stream, struct op *op);
/* Registers op's read of device memory at src (any process's) before it is queued on s. */
void tsock__sim_register_read(struct op *op, struct tsock__dev_stream *s, const void *src,
                              size_t bytes);
/* Notes that op uses the device memory at p (if any), until it runs. */
void tsock__sim_use_mapping(struct op *op, const void *p);
/* Streams being captured in this process: while one is, queries and synchronisation from
 * threads that did not relax their capture mode fail (global capture mode). */
extern atomic_int tsock__sim_capturing_streams;
/* Waits until no operation queued by this process is left on any stream. Stronger than
 * cudaDeviceSynchronize, which waits only for the work queued before the call: the same when
 * no other thread keeps queuing, which holds where tsock calls it (a consumer closing). */
void tsock__sim_wait_idle(void);

#endif
