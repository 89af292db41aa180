/* The simulated device: the device API (devapi.h) in plain C, so that the CUDA backend's
 * ordering and lifetime logic runs, and is checked, on machines without a GPU.
 *
 *  - Device memory is a POSIX shared-memory object per allocation ("/tsock-sim-<dev>-m-..."),
 *    a header page then the bytes; an IPC memory handle names the object, so another process
 *    maps the same bytes. Memory in use (mem_info) is the sum of the objects that exist.
 *  - Events live in shared memory too (a header page each): a record bumps `recorded` and
 *    queues a marker; the stream's executor sets `completed` when it reaches the marker. A
 *    query is done when completed >= recorded, so waits work from any process.
 *  - Each stream has one executor thread that runs its queued work in order, each item after a
 *    seeded random delay, so work really runs later than the call that queued it.
 *  - Copies are memcpy; the conversion kernel is convert.h's per-element arithmetic.
 *
 * It enforces the rules a real GPU punishes silently, and aborts with the call site (a
 * backtrace) when one is broken: IPC events need DisableTiming | Interprocess; a process cannot
 * open its own handle; no free or destroy of an exported object while another live process has
 * queued work that uses it; no write into device memory while another live process has a
 * queued read of the same bytes that has not run yet (a slot refilled under a reader).
 *
 * Controls (environment, read once): TSOCK_CUDA_SIM_DEVICE (name of the simulated device, so
 * concurrent tests do not share one; default per user), TSOCK_CUDA_SIM_DEVICES (how many, 1),
 * TSOCK_CUDA_SIM_SEED (delays; default 1), TSOCK_CUDA_SIM_MAX_DELAY_US (default 500),
 * TSOCK_CUDA_SIM_FAIL (no-device, old-driver, exclusive, fork, ipc: the environment failure to
 * report), TSOCK_CUDA_SIM_CAPTURE=1 (queries fail as under global graph capture unless the
 * thread relaxed its capture mode), TSOCK_CUDA_SIM_STALL_AFTER=N (after N items of work this
 * process's executors stop for good, as in an exporter that dies with work queued; the file
 * TSOCK_CUDA_SIM_STALL_FILE is then created, so a test knows when to kill it).
 *
 * Mappings of events are kept until the process exits (a few pages): work queued on another
 * stream may still point at an event that its owner destroyed, as CUDA allows. */

#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/devapi_sim_decode.h"
#include "backend/cuda/devapi_sim_int.h"

/* ---- current device and context ----------------------------------------------------------- */

static _Thread_local int current = -1; /* -1: no context on this thread yet */

/* As on CUDA, the first call that needs a context makes device 0's current on a thread that
 * never chose one: the stray context the device guard exists to prevent. */
static void
need_context(void)
{
    if (current < 0)
        current = 0;
    atomic_fetch_or(&tsock__sim_contexts, 1u << current);
}

/* Queries and synchronisation are illegal while a graph is captured in global mode, unless the
 * calling thread relaxed its own capture mode. */
static _Thread_local int capture_mode; /* 0 global, 1 thread-local, 2 relaxed: as CUDA */

static int
capture_blocks(void)
{
    return (atomic_load(&tsock__sim_global_capture) || tsock__sim_cfg.capture_env ||
            atomic_load(&tsock__sim_capturing_streams) > 0) &&
           capture_mode != 2;
}

/* ---- the table ------------------------------------------------------------------------------ */

static _Thread_local int last;

static int
ret(int e)
{
    last = e;
    return e;
}

static const char *
error_text(int raw)
{
    static const char *const text[] = {
        [TSOCK__DEV_OK] = "no error",
        [TSOCK__DEV_NOT_READY] = "device not ready",
        [TSOCK__DEV_NO_DEVICE] = "no CUDA-capable device is detected (simulated)",
        [TSOCK__DEV_OLD_DRIVER] = "the driver is older than the runtime (simulated)",
        [TSOCK__DEV_EXCLUSIVE] = "all devices busy: exclusive-process mode (simulated)",
        [TSOCK__DEV_FORK] = "initialization error: CUDA used before fork (simulated)",
        [TSOCK__DEV_IPC] = "mapping the IPC handle failed (simulated)",
        [TSOCK__DEV_OWN_HANDLE] = "a process opened its own IPC handle",
        [TSOCK__DEV_NO_MEMORY] = "out of memory (simulated)",
        [TSOCK__DEV_CAPTURE] = "operation not permitted when stream is capturing (simulated)",
        [TSOCK__DEV_INVALID] = "invalid argument (simulated)",
        [TSOCK__DEV_LAUNCH] = "kernel launch failed (simulated)",
        [TSOCK__DEV_OTHER] = "unknown error (simulated)",
    };
    return raw >= 0 && raw <= TSOCK__DEV_OTHER ? text[raw] : "?";
}

static int
last_raw(void)
{
    return last;
}

static int
device_count(int *n)
{
    tsock__sim_settings();
    *n = 0;
    if (tsock__sim_cfg.fail && tsock__sim_cfg.fail != TSOCK__DEV_IPC)
        return ret(tsock__sim_cfg.fail);
    *n = tsock__sim_cfg.devices;
    return ret(TSOCK__DEV_OK);
}

static int
device_uuid(int device, uint8_t uuid[TSOCK__DEV_UUID_SIZE])
{
    if (device < 0 || device >= tsock__sim_cfg.devices)
        return ret(TSOCK__DEV_INVALID);
    memset(uuid, 0, TSOCK__DEV_UUID_SIZE);
    memcpy(uuid, "tsock-simdev", 12);
    uuid[15] = (uint8_t)device;
    return ret(TSOCK__DEV_OK);
}

static int
device_ipc_ok(int device, int *ok)
{
    *ok = device >= 0 && device < tsock__sim_cfg.devices;
    return ret(*ok ? TSOCK__DEV_OK : TSOCK__DEV_INVALID);
}

static int
can_access_peer(int *can, int device, int peer)
{
    *can = 1;
    return ret(TSOCK__DEV_OK);
}

static int
mem_info(size_t *free_bytes, size_t *total_bytes)
{
    const size_t total = (size_t)16 << 30;
    size_t used = tsock__sim_sweep();
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
    return ret(TSOCK__DEV_OK);
}

static int
get_device(int *device)
{
    *device = current < 0 ? 0 : current;
    return ret(TSOCK__DEV_OK);
}

static int
set_device(int device)
{
    tsock__sim_settings();
    if (device < 0 || device >= tsock__sim_cfg.devices)
        return ret(TSOCK__DEV_INVALID);
    current = device;
    atomic_fetch_or(&tsock__sim_contexts, 1u << device);
    return ret(TSOCK__DEV_OK);
}

static void *
context_get(void)
{
    return current < 0 ? NULL : (void *)(intptr_t)(current + 1);
}

static void
context_set(void *ctx)
{
    current = (int)(intptr_t)ctx - 1;
}

/* Unmapping memory (cudaFree, cudaIpcCloseMemHandle) while work this process queued still
 * reads or writes it: on a GPU that work faults, or reads whatever is mapped there next. */
static void
refuse_unmap_in_use(struct mapping *m, const char *what)
{
    int queued = atomic_load(&m->queued);
    if (queued > 0)
        tsock__sim_violation("%s of device memory %s while %d operation(s) this process queued "
                             "still use it",
                             what, m->seg->name, queued);
}

static int
dev_malloc(void **ptr, size_t bytes)
{
    tsock__sim_settings();
    need_context();
    /* cudaMalloc is not capture-safe: global capture mode refuses it on other threads. */
    if (capture_blocks())
        return ret(TSOCK__DEV_CAPTURE);
    const char *why = NULL;
    struct seg *s = tsock__sim_seg_create(SEG_MEM, bytes, &why);
    if (!s)
        return ret(TSOCK__DEV_NO_MEMORY);
    tsock__sim_add_mapping(s, 0);
    *ptr = (uint8_t *)s + SEG_HEADER;
    return ret(TSOCK__DEV_OK);
}

static int
dev_free(void *ptr)
{
    if (!ptr)
        return ret(TSOCK__DEV_OK);
    need_context();
    if (capture_blocks())
        return ret(TSOCK__DEV_CAPTURE);
    struct mapping *m = tsock__sim_find_mapping(ptr, 1);
    if (!m || m->imported)
        tsock__sim_violation("free of %p, which is not memory this process allocated", ptr);
    refuse_unmap_in_use(m, "free");
    int32_t user = tsock__sim_seg_other_user(m->seg, 1);
    if (user)
        tsock__sim_violation(
            "free of device memory %s while process %d has queued work that reads it", m->seg->name,
            (int)user);
    atomic_store(&m->seg->freed, 1);
    /* The bytes stay while another process has them open; the last one to close removes them. */
    if (!tsock__sim_seg_other_user(m->seg, 0))
        shm_unlink(m->seg->name);
    tsock__sim_remove_mapping(m);
    return ret(TSOCK__DEV_OK);
}

/* Pinned memory is locked memory: like a driver that counts it against RLIMIT_MEMLOCK (as
 * some container runtimes make it), the simulated device refuses what the limit leaves no
 * room for, so the producer's explanation of that failure can be tested. It counts every
 * pinned allocation the process made (the staging buffers live as long as the ring). */
static _Atomic size_t pinned_bytes;

static int
host_alloc(void **ptr, size_t bytes)
{
    need_context();
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        atomic_load(&pinned_bytes) + bytes > rl.rlim_cur)
        return ret(TSOCK__DEV_NO_MEMORY);
    if (posix_memalign(ptr, 4096, bytes ? bytes : 1))
        return ret(TSOCK__DEV_NO_MEMORY);
    atomic_fetch_add(&pinned_bytes, bytes);
    return ret(TSOCK__DEV_OK);
}

static int
host_free(void *ptr)
{
    free(ptr);
    return ret(TSOCK__DEV_OK);
}

static int
stream_create(tsock__dev_stream_t *s)
{
    tsock__sim_settings();
    need_context();
    *s = tsock__sim_stream_new();
    return ret(*s ? TSOCK__DEV_OK : TSOCK__DEV_NO_MEMORY);
}

/* As cudaStreamDestroy: returns at once; the executor finishes the queued work, then exits. */
static int
stream_destroy(tsock__dev_stream_t stream)
{
    need_context();
    if (!stream)
        return ret(TSOCK__DEV_INVALID);
    pthread_mutex_lock(&stream->mu);
    stream->destroyed = 1;
    pthread_cond_broadcast(&stream->cv);
    pthread_mutex_unlock(&stream->mu);
    return ret(TSOCK__DEV_OK);
}

static int
stream_sync(tsock__dev_stream_t stream)
{
    tsock__sim_settings();
    need_context();
    struct tsock__dev_stream *s = tsock__sim_resolve(stream);
    if (capture_blocks() || s->capturing)
        return ret(TSOCK__DEV_CAPTURE);
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->queued;
    while (s->done < target)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return ret(TSOCK__DEV_OK);
}

static int
device_sync(void)
{
    tsock__sim_settings();
    need_context();
    if (capture_blocks())
        return ret(TSOCK__DEV_CAPTURE);
    tsock__sim_wait_idle();
    return ret(TSOCK__DEV_OK);
}

struct tsock__dev_event {
    struct seg *seg;
    int imported;
};

/* CUDA: "Performing operations on the imported event after the exported event has been freed
 * with cudaEventDestroy will result in undefined behavior." */
static void
refuse_destroyed_import(const struct tsock__dev_event *e, const char *what)
{
    if (e->imported && atomic_load(&e->seg->destroyed))
        tsock__sim_violation("%s on imported event %s after its exporter destroyed it (undefined "
                             "behaviour in CUDA)",
                             what, e->seg->name);
}

static int
event_create(tsock__dev_event_t *out, unsigned flags)
{
    tsock__sim_settings();
    need_context();
    if ((flags & TSOCK__DEV_EVENT_INTERPROCESS) && !(flags & TSOCK__DEV_EVENT_DISABLE_TIMING))
        tsock__sim_violation("an interprocess event needs DisableTiming as well (flags 0x%x)",
                             flags);
    struct tsock__dev_event *e = calloc(1, sizeof *e);
    const char *why = NULL;
    if (e)
        e->seg = tsock__sim_seg_create(SEG_EVENT, 0, &why);
    if (!e || !e->seg) {
        free(e);
        return ret(TSOCK__DEV_NO_MEMORY);
    }
    e->seg->flags = flags;
    /* Only exported events need a name; the rest are unlinked at once (the mapping stays). */
    if (!(flags & TSOCK__DEV_EVENT_INTERPROCESS))
        shm_unlink(e->seg->name);
    *out = e;
    return ret(TSOCK__DEV_OK);
}

static int
event_destroy(tsock__dev_event_t e)
{
    need_context();
    if (!e)
        return ret(TSOCK__DEV_INVALID);
    if (!e->imported) {
        int32_t user = tsock__sim_seg_other_user(e->seg, 1);
        if (user)
            tsock__sim_violation(
                "destroy of event %s while process %d has queued work waiting on it", e->seg->name,
                (int)user);
        atomic_store(&e->seg->destroyed, 1);
        if (e->seg->flags & TSOCK__DEV_EVENT_INTERPROCESS)
            shm_unlink(e->seg->name);
    } else {
        tsock__sim_seg_user(e->seg, 0, -1);
        /* The last user of a dead owner's objects removes them (nobody else can). */
        if (!tsock__sim_alive(e->seg->owner))
            (void)tsock__sim_sweep();
    }
    free(e); /* the mapping stays: queued waits may still read it */
    return ret(TSOCK__DEV_OK);
}

static int
event_record(tsock__dev_event_t e, tsock__dev_stream_t s)
{
    need_context();
    refuse_destroyed_import(e, "cudaEventRecord");
    /* Under capture a record becomes a node of the graph: the event itself records nothing,
     * and a query says it is complete (an empty set of work). */
    if (tsock__sim_resolve(s)->capturing)
        return ret(TSOCK__DEV_OK);
    struct op *op = tsock__sim_op_new(OP_SIGNAL);
    if (!op)
        return ret(TSOCK__DEV_NO_MEMORY);
    op->event = e->seg;
    op->target = atomic_fetch_add(&e->seg->recorded, 1) + 1;
    tsock__sim_enqueue(s, op);
    return ret(TSOCK__DEV_OK);
}

static int
event_query(tsock__dev_event_t e)
{
    tsock__sim_settings();
    need_context();
    if (capture_blocks())
        return ret(TSOCK__DEV_CAPTURE);
    refuse_destroyed_import(e, "cudaEventQuery");
    return ret(atomic_load(&e->seg->completed) >= atomic_load(&e->seg->recorded)
                   ? TSOCK__DEV_OK
                   : TSOCK__DEV_NOT_READY);
}

/* Without BlockingSync a real event wait spins a CPU core; the count lets tests see it. */
static int
event_sync(tsock__dev_event_t e)
{
    tsock__sim_settings();
    need_context();
    if (capture_blocks())
        return ret(TSOCK__DEV_CAPTURE);
    refuse_destroyed_import(e, "cudaEventSynchronize");
    uint64_t target = atomic_load(&e->seg->recorded);
    if (atomic_load(&e->seg->completed) < target &&
        !(e->seg->flags & TSOCK__DEV_EVENT_BLOCKING_SYNC))
        atomic_fetch_add(&tsock__sim_spin_waits, 1);
    while (atomic_load(&e->seg->completed) < target)
        tsock__sim_sleep_us(50);
    return ret(TSOCK__DEV_OK);
}

static int
stream_wait(tsock__dev_stream_t s, tsock__dev_event_t e)
{
    need_context();
    refuse_destroyed_import(e, "cudaStreamWaitEvent");
    struct op *op = tsock__sim_op_new(OP_WAIT);
    if (!op)
        return ret(TSOCK__DEV_NO_MEMORY);
    op->event = e->seg;
    op->target = atomic_load(&e->seg->recorded);
    if (e->seg->owner != (int32_t)getpid())
        tsock__sim_seg_user(e->seg, 1, 1);
    tsock__sim_enqueue(s, op);
    return ret(TSOCK__DEV_OK);
}

static int
memcpy_async(void *dst, const void *src, size_t bytes, enum tsock__dev_copy kind,
             tsock__dev_stream_t s)
{
    need_context();
    int dst_dev = tsock__sim_find_mapping(dst, 0) != NULL,
        src_dev = tsock__sim_find_mapping(src, 0) != NULL;
    if (dst_dev != (kind != TSOCK__DEV_D2H) || src_dev != (kind != TSOCK__DEV_H2D))
        tsock__sim_violation("memcpy kind %d does not match its pointers (dst %s, src %s memory)",
                             (int)kind, dst_dev ? "device" : "host", src_dev ? "device" : "host");
    struct op *op = tsock__sim_op_new(OP_COPY);
    if (!op)
        return ret(TSOCK__DEV_NO_MEMORY);
    op->dst = dst;
    op->src = src;
    op->bytes = bytes;
    struct tsock__dev_stream *st = tsock__sim_resolve(s);
    if (st->capturing) { /* captured into the graph, not run (this simulator runs no graph) */
        free(op);
        return ret(TSOCK__DEV_OK);
    }
    tsock__sim_register_read(op, st, src, bytes);
    tsock__sim_use_mapping(op, src);
    tsock__sim_use_mapping(op, dst);
    tsock__sim_enqueue(st, op);
    return ret(TSOCK__DEV_OK);
}

/* Handles: the object's name, and the exporting process so that opening one's own is caught. */
struct sim_handle {
    uint32_t magic;
    int32_t owner;
    char name[48];
};
_Static_assert(sizeof(struct sim_handle) <= TSOCK__DEV_HANDLE_SIZE, "fits a handle");

static void
handle_make(tsock__dev_ipc_handle *h, const struct seg *s)
{
    struct sim_handle sh = {.magic = SEG_MAGIC, .owner = s->owner};
    memcpy(sh.name, s->name, sizeof sh.name);
    memset(h, 0, sizeof *h);
    memcpy(h->bytes, &sh, sizeof sh);
}

static const char *
handle_check(const tsock__dev_ipc_handle *h, struct sim_handle *sh, const char *what)
{
    memcpy(sh, h->bytes, sizeof *sh);
    if (sh->magic != SEG_MAGIC)
        return NULL;
    if (sh->owner == (int32_t)getpid())
        tsock__sim_violation("a process opened its own %s IPC handle (CUDA refuses this)", what);
    return sh->name;
}

static int
ipc_mem_get(tsock__dev_ipc_handle *h, void *ptr)
{
    need_context();
    struct mapping *m = tsock__sim_find_mapping(ptr, 1);
    if (!m || m->imported)
        return ret(TSOCK__DEV_INVALID);
    handle_make(h, m->seg);
    return ret(TSOCK__DEV_OK);
}

static int
ipc_mem_open(void **ptr, const tsock__dev_ipc_handle *h)
{
    tsock__sim_settings();
    need_context();
    if (tsock__sim_cfg.fail == TSOCK__DEV_IPC)
        return ret(TSOCK__DEV_IPC);
    struct sim_handle sh;
    const char *name = handle_check(h, &sh, "memory");
    struct seg *s = name ? tsock__sim_seg_open(name, SEG_MEM) : NULL;
    if (!s)
        return ret(name ? TSOCK__DEV_IPC : TSOCK__DEV_INVALID);
    tsock__sim_seg_user(s, 0, 1);
    tsock__sim_add_mapping(s, 1);
    *ptr = (uint8_t *)s + SEG_HEADER;
    return ret(TSOCK__DEV_OK);
}

static int
ipc_mem_close(void *ptr)
{
    need_context();
    struct mapping *m = tsock__sim_find_mapping(ptr, 1);
    if (!m || !m->imported)
        return ret(TSOCK__DEV_INVALID);
    refuse_unmap_in_use(m, "cudaIpcCloseMemHandle");
    tsock__sim_seg_user(m->seg, 0, -1);
    /* The last user of memory whose owner freed it or died removes it, as the driver would,
     * and with a dead owner everything else it left (scratch memory, events). */
    int dead = !tsock__sim_alive(m->seg->owner);
    if ((atomic_load(&m->seg->freed) || dead) && !tsock__sim_seg_other_user(m->seg, 0))
        shm_unlink(m->seg->name);
    tsock__sim_remove_mapping(m);
    if (dead)
        (void)tsock__sim_sweep();
    return ret(TSOCK__DEV_OK);
}

static int
ipc_event_get(tsock__dev_ipc_handle *h, tsock__dev_event_t e)
{
    need_context();
    unsigned need = TSOCK__DEV_EVENT_DISABLE_TIMING | TSOCK__DEV_EVENT_INTERPROCESS;
    if (e->imported || (e->seg->flags & need) != need)
        tsock__sim_violation(
            "IPC handle of an event without DisableTiming | Interprocess (flags 0x%x)",
            e->seg->flags);
    handle_make(h, e->seg);
    return ret(TSOCK__DEV_OK);
}

static int
ipc_event_open(tsock__dev_event_t *out, const tsock__dev_ipc_handle *h)
{
    tsock__sim_settings();
    need_context();
    if (tsock__sim_cfg.fail == TSOCK__DEV_IPC)
        return ret(TSOCK__DEV_IPC);
    struct sim_handle sh;
    const char *name = handle_check(h, &sh, "event");
    struct seg *s = name ? tsock__sim_seg_open(name, SEG_EVENT) : NULL;
    if (!s)
        return ret(name ? TSOCK__DEV_IPC : TSOCK__DEV_INVALID);
    struct tsock__dev_event *e = calloc(1, sizeof *e);
    if (!e)
        return ret(TSOCK__DEV_NO_MEMORY);
    e->seg = s;
    e->imported = 1;
    tsock__sim_seg_user(s, 0, 1);
    *out = e;
    return ret(TSOCK__DEV_OK);
}

static void
clear_error(void)
{
    atomic_store(&tsock__sim_stale_error, 0);
}

/* As a real launch reports cudaGetLastError: a stale error left by someone else fails it. */
static int
convert_launch(const struct tsock__convert_plan *cv, const uint8_t *in, uint8_t *out,
               uint32_t samples, tsock__dev_stream_t s)
{
    need_context();
    if (atomic_exchange(&tsock__sim_stale_error, 0))
        return ret(TSOCK__DEV_LAUNCH);
    if (!tsock__sim_find_mapping(in, 0) || !tsock__sim_find_mapping(out, 0))
        tsock__sim_violation("conversion kernel given a host pointer");
    struct op *op = tsock__sim_op_new(OP_CONVERT);
    if (!op)
        return ret(TSOCK__DEV_NO_MEMORY);
    op->cv = *cv;
    op->src = in;
    op->dst = out;
    op->samples = samples;
    struct tsock__dev_stream *st = tsock__sim_resolve(s);
    tsock__sim_register_read(op, st, in, cv->in_sample_bytes[cv->tensor] * samples);
    tsock__sim_use_mapping(op, in);
    tsock__sim_use_mapping(op, out);
    tsock__sim_enqueue(st, op);
    return ret(TSOCK__DEV_OK);
}

static int
stream_capturing(tsock__dev_stream_t s, int *capturing)
{
    need_context();
    *capturing = tsock__sim_resolve(s)->capturing;
    return ret(TSOCK__DEV_OK);
}

void
tsock__dev_sim_capture_stream(tsock__dev_stream_t s, int on)
{
    struct tsock__dev_stream *st = tsock__sim_resolve(s);
    if (st->capturing == !!on)
        return;
    st->capturing = !!on;
    atomic_fetch_add(&tsock__sim_capturing_streams, on ? 1 : -1);
}

size_t
tsock__dev_sim_sweep(void)
{
    return tsock__sim_sweep();
}

static int
capture_relax(int *previous)
{
    *previous = capture_mode;
    capture_mode = 2;
    return ret(TSOCK__DEV_OK);
}

static void
capture_restore(int previous)
{
    capture_mode = previous;
}

const struct tsock__devapi tsock__devapi_sim = {
    .name = "simulated",
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
    .jpeg_create = tsock__sim_jpeg_create,
    .jpeg_decode = tsock__sim_jpeg_decode,
    .jpeg_destroy = tsock__sim_jpeg_destroy,
    .stream_capturing = stream_capturing,
};
