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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/devapi_sim.h"

/* ---- settings ------------------------------------------------------------------------------ */

static struct {
    char device[64];
    int devices, fail, capture_env;
    unsigned long seed, max_delay_us;
    long stall_after;
    const char *stall_file;
} cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static atomic_int global_capture, stale_error;
static atomic_long executed, spin_waits;
static atomic_uint contexts; /* bit d: a context was created on device d */

static void
load_cfg(void)
{
    const char *v = getenv("TSOCK_CUDA_SIM_DEVICE");
    if (v && *v)
        snprintf(cfg.device, sizeof cfg.device, "%s", v);
    else
        snprintf(cfg.device, sizeof cfg.device, "u%u", (unsigned)getuid());
    for (char *c = cfg.device; *c; c++)
        if (*c == '/')
            *c = '_';
    v = getenv("TSOCK_CUDA_SIM_DEVICES");
    cfg.devices = v ? atoi(v) : 1;
    if (cfg.devices < 1 || cfg.devices > 8)
        cfg.devices = 1;
    v = getenv("TSOCK_CUDA_SIM_SEED");
    cfg.seed = v ? strtoul(v, NULL, 10) : 1;
    v = getenv("TSOCK_CUDA_SIM_MAX_DELAY_US");
    cfg.max_delay_us = v ? strtoul(v, NULL, 10) : 500;
    v = getenv("TSOCK_CUDA_SIM_STALL_AFTER");
    cfg.stall_after = v ? atol(v) : -1;
    cfg.stall_file = getenv("TSOCK_CUDA_SIM_STALL_FILE");
    v = getenv("TSOCK_CUDA_SIM_CAPTURE");
    cfg.capture_env = v && strcmp(v, "1") == 0;
    static const struct {
        const char *name;
        int err;
    } fails[] = {{"no-device", TSOCK__DEV_NO_DEVICE},
                 {"old-driver", TSOCK__DEV_OLD_DRIVER},
                 {"exclusive", TSOCK__DEV_EXCLUSIVE},
                 {"fork", TSOCK__DEV_FORK},
                 {"ipc", TSOCK__DEV_IPC}};
    v = getenv("TSOCK_CUDA_SIM_FAIL");
    for (size_t i = 0; v && i < sizeof fails / sizeof fails[0]; i++)
        if (strcmp(v, fails[i].name) == 0)
            cfg.fail = fails[i].err;
}

static void
settings(void)
{
    pthread_once(&cfg_once, load_cfg);
}

void
tsock__dev_sim_set_global_capture(int on)
{
    atomic_store(&global_capture, on);
}

void
tsock__dev_sim_set_stale_error(void)
{
    atomic_store(&stale_error, 1);
}

long
tsock__dev_sim_spin_waits(void)
{
    return atomic_load(&spin_waits);
}

unsigned
tsock__dev_sim_contexts(void)
{
    return atomic_load(&contexts);
}

/* ---- rule violations ----------------------------------------------------------------------- */

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void
violation(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n*** tsock simulated device (pid %d): RULE BROKEN: %s\n*** at:\n",
            (int)getpid(), msg);
    void *frames[24];
    backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
    abort();
}

/* Whether `pid` still runs. A killed process that its parent has not reaped yet is a zombie:
 * dead for us (its queued work will never run), though kill(pid, 0) still finds it. */
static int
alive(int32_t pid)
{
    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM))
        return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 1;
    buf[n] = 0;
    const char *end = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces */
    return !(end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X'));
}

/* ---- shared segments (device memory and events) ------------------------------------------ */

#define SEG_MAGIC 0x7453494du
#define SEG_HEADER 4096u
#define SEG_USERS 16
#define SEG_READS 64
enum { SEG_MEM = 1, SEG_EVENT = 2 };

struct seg {
    uint32_t magic, kind;
    int32_t owner;
    uint32_t flags; /* events: TSOCK__DEV_EVENT_* */
    uint64_t size;
    atomic_uint_fast64_t recorded, completed; /* events */
    atomic_int freed;
    pthread_mutex_t mu; /* robust, process-shared: guards users and reads */
    struct {
        int32_t pid, opens, pending; /* pending: queued waits of that process, not yet run */
    } users[SEG_USERS];
    struct {
        int32_t pid;
        uint32_t used;
        uint64_t off, len;
    } reads[SEG_READS]; /* queued reads by other processes, not yet run */
    char name[48];
};
_Static_assert(sizeof(struct seg) <= SEG_HEADER, "the header fits its page");

static void
seg_lock(struct seg *s)
{
    if (pthread_mutex_lock(&s->mu) == EOWNERDEAD)
        pthread_mutex_consistent(&s->mu); /* its holder was killed: the tables stay usable */
}

static void
seg_unlock(struct seg *s)
{
    pthread_mutex_unlock(&s->mu);
}

static struct seg *
seg_create(int kind, size_t size, const char **err)
{
    static atomic_uint counter;
    char name[48];
    snprintf(name, sizeof name, "/tsock-sim-%.20s-%c%d-%u", cfg.device, kind == SEG_MEM ? 'm' : 'e',
             (int)getpid(), atomic_fetch_add(&counter, 1));
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        *err = "shm_open";
        return NULL;
    }
    size_t total = SEG_HEADER + size;
    if (ftruncate(fd, (off_t)total) < 0) {
        close(fd);
        shm_unlink(name);
        *err = "ftruncate";
        return NULL;
    }
    struct seg *s = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED) {
        shm_unlink(name);
        *err = "mmap";
        return NULL;
    }
    s->kind = (uint32_t)kind;
    s->owner = (int32_t)getpid();
    s->size = size;
    memcpy(s->name, name, sizeof name);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s->mu, &a);
    pthread_mutexattr_destroy(&a);
    s->magic = SEG_MAGIC;
    return s;
}

static struct seg *
seg_open(const char *name, int kind)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0 || (size_t)st.st_size < SEG_HEADER) {
        close(fd);
        return NULL;
    }
    struct seg *s = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED)
        return NULL;
    if (s->magic != SEG_MAGIC || s->kind != (uint32_t)kind) {
        munmap(s, (size_t)st.st_size);
        return NULL;
    }
    return s;
}

/* Adds `delta` to this process's opens or pending count of s. */
static void
seg_user(struct seg *s, int pending, int delta)
{
    int32_t me = (int32_t)getpid();
    seg_lock(s);
    int free_at = -1;
    for (int i = 0; i < SEG_USERS; i++) {
        if (s->users[i].pid == me) {
            free_at = i;
            break;
        }
        if (free_at < 0 && (s->users[i].pid == 0 || !alive(s->users[i].pid)))
            free_at = i;
    }
    if (free_at >= 0) {
        if (s->users[free_at].pid != me)
            s->users[free_at].pid = me, s->users[free_at].opens = 0, s->users[free_at].pending = 0;
        if (pending)
            s->users[free_at].pending += delta;
        else
            s->users[free_at].opens += delta;
    }
    seg_unlock(s);
}

/* Whether a live process other than this one has the segment open (opens) or queued work on
 * it (pending); the pid, or 0. */
static int32_t
seg_other_user(struct seg *s, int pending)
{
    int32_t me = (int32_t)getpid(), found = 0;
    seg_lock(s);
    for (int i = 0; i < SEG_USERS && !found; i++)
        if (s->users[i].pid && s->users[i].pid != me &&
            (pending ? s->users[i].pending : s->users[i].opens) > 0 && alive(s->users[i].pid))
            found = s->users[i].pid;
    for (int i = 0; pending && i < SEG_READS && !found; i++)
        if (s->reads[i].used && s->reads[i].pid != me && alive(s->reads[i].pid))
            found = s->reads[i].pid;
    seg_unlock(s);
    return found;
}

/* ---- this process's device memory --------------------------------------------------------- */

struct mapping {
    struct mapping *next;
    struct seg *seg;
    uint8_t *base; /* what the caller sees: the byte after the header */
    int imported;
};
static pthread_mutex_t maps_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mapping *maps;

static struct mapping *
find_mapping(const void *p, int exact)
{
    const uint8_t *q = p;
    pthread_mutex_lock(&maps_mu);
    struct mapping *m = maps;
    for (; m; m = m->next)
        if (exact ? q == m->base : q >= m->base && q < m->base + m->seg->size)
            break;
    pthread_mutex_unlock(&maps_mu);
    return m;
}

static void
add_mapping(struct seg *s, int imported)
{
    struct mapping *m = calloc(1, sizeof *m);
    if (!m)
        abort();
    m->seg = s;
    m->base = (uint8_t *)s + SEG_HEADER;
    m->imported = imported;
    pthread_mutex_lock(&maps_mu);
    m->next = maps;
    maps = m;
    pthread_mutex_unlock(&maps_mu);
}

static void
remove_mapping(struct mapping *gone)
{
    pthread_mutex_lock(&maps_mu);
    for (struct mapping **pp = &maps; *pp; pp = &(*pp)->next)
        if (*pp == gone) {
            *pp = gone->next;
            break;
        }
    pthread_mutex_unlock(&maps_mu);
    size_t total = SEG_HEADER + gone->seg->size;
    munmap(gone->seg, total);
    free(gone);
}

/* ---- streams and their executors ---------------------------------------------------------- */

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
    int read_slot; /* in read_seg->reads, or -1 */
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
    uint64_t rng;
};

static unsigned
next_delay(struct tsock__dev_stream *s)
{
    if (!cfg.max_delay_us)
        return 0;
    s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
    return (unsigned)(s->rng % (cfg.max_delay_us + 1));
}

static void
sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000};
    nanosleep(&ts, NULL);
}

/* A write into device memory: no other live process may have a queued read of these bytes. */
static void
check_write(const struct op *op, const void *dst, size_t bytes)
{
    struct mapping *m = find_mapping(dst, 0);
    if (!m)
        return;
    struct seg *s = m->seg;
    uint64_t off = (uint64_t)((const uint8_t *)dst - m->base);
    int32_t me = (int32_t)getpid(), reader = 0;
    seg_lock(s);
    for (int i = 0; i < SEG_READS && !reader; i++)
        if (s->reads[i].used && s->reads[i].pid != me && s->reads[i].off < off + bytes &&
            off < s->reads[i].off + s->reads[i].len && alive(s->reads[i].pid))
            reader = s->reads[i].pid;
    seg_unlock(s);
    if (reader) {
        fprintf(stderr, "*** the write was queued at:\n");
        backtrace_symbols_fd((void *const *)op->site, op->site_depth, 2);
        violation("device memory %s [%llu, +%zu) written while process %d still has a queued "
                  "read of it that has not run (a slot refilled under a reader)",
                  s->name, (unsigned long long)off, bytes, (int)reader);
    }
}

/* Not instrumented by TSan: the bytes are shared with other processes, where TSan sees nothing
 * anyway, and instrumenting every element made a batch take seconds under it. */
#if defined(__SANITIZE_THREAD__)
__attribute__((no_sanitize("thread")))
#endif
static void
run_convert(const struct op *op)
{
    const struct tsock__convert_plan *cv = &op->cv;
    uint32_t per_sample = cv->height * cv->width * cv->channels;
    size_t in_bytes = cv->in_sample_bytes[cv->tensor], out_bytes = cv->out_sample_bytes[cv->tensor];
    check_write(op, op->dst, out_bytes * op->samples);
    for (uint32_t n = 0; n < op->samples; n++)
        for (uint32_t i = 0; i < per_sample; i++)
            tsock__convert_element(cv, (const uint8_t *)op->src + n * in_bytes,
                                   (uint8_t *)op->dst + n * out_bytes, i);
}

static void
run_op(struct op *op)
{
    switch (op->kind) {
    case OP_COPY:
        check_write(op, op->dst, op->bytes);
        memcpy(op->dst, op->src, op->bytes);
        break;
    case OP_CONVERT: run_convert(op); break;
    case OP_SIGNAL: {
        uint_fast64_t seen = atomic_load(&op->event->completed);
        while (seen < op->target &&
               !atomic_compare_exchange_weak(&op->event->completed, &seen, op->target))
            ;
        break;
    }
    case OP_WAIT:
        /* Across processes: poll the event's shared counter. An exporter that died with the
         * record still queued never completes it, and this stream then waits for ever, as a
         * real one would. */
        while (atomic_load(&op->event->completed) < op->target)
            sleep_us(50);
        if (op->event->owner != (int32_t)getpid())
            seg_user(op->event, 1, -1);
        break;
    }
    if (op->read_seg && op->read_slot >= 0) {
        seg_lock(op->read_seg);
        op->read_seg->reads[op->read_slot].used = 0;
        seg_unlock(op->read_seg);
    }
}

/* Fault injection: after N items, this process's executors stop, work still queued. */
static void
maybe_stall(void)
{
    if (cfg.stall_after < 0 || atomic_fetch_add(&executed, 1) < cfg.stall_after)
        return;
    static atomic_int told;
    if (!atomic_exchange(&told, 1) && cfg.stall_file) {
        int fd = open(cfg.stall_file, O_WRONLY | O_CREAT, 0600);
        if (fd >= 0)
            close(fd);
    }
    for (;;)
        pause();
}

static void *
executor(void *arg)
{
    struct tsock__dev_stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->destroyed)
            pthread_cond_wait(&s->cv, &s->mu);
        struct op *op = s->head;
        unsigned delay = op ? next_delay(s) : 0;
        pthread_mutex_unlock(&s->mu);
        if (!op)
            break;
        sleep_us(delay);
        maybe_stall();
        run_op(op);
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->done = op->seq;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        free(op);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return NULL;
}

static struct tsock__dev_stream *
stream_new(void)
{
    static atomic_ulong streams;
    struct tsock__dev_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->rng = (cfg.seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)getpid() << 20) ^
             (atomic_fetch_add(&streams, 1) + 1);
    if (!s->rng)
        s->rng = 1;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int err = pthread_create(&t, &a, executor, s);
    pthread_attr_destroy(&a);
    if (err) {
        free(s);
        return NULL;
    }
    return s;
}

static struct tsock__dev_stream *default_stream;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void
make_default_stream(void)
{
    default_stream = stream_new();
    if (!default_stream)
        abort();
}

/* NULL: the process's default stream, made on first use and never destroyed. */
static struct tsock__dev_stream *
resolve(tsock__dev_stream_t s)
{
    if (s)
        return s;
    pthread_once(&default_once, make_default_stream);
    return default_stream;
}

static struct op *
op_new(enum op_kind kind)
{
    struct op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->kind = kind;
    op->read_slot = -1;
    op->site_depth = backtrace(op->site, 12);
    return op;
}

static void
enqueue(tsock__dev_stream_t stream, struct op *op)
{
    struct tsock__dev_stream *s = resolve(stream);
    pthread_mutex_lock(&s->mu);
    op->seq = ++s->queued;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* ---- current device and context ----------------------------------------------------------- */

static _Thread_local int current = -1; /* -1: no context on this thread yet */

/* As on CUDA, the first call that needs a context makes device 0's current on a thread that
 * never chose one: the stray context the device guard exists to prevent. */
static void
need_context(void)
{
    if (current < 0)
        current = 0;
    atomic_fetch_or(&contexts, 1u << current);
}

/* Queries and synchronisation are illegal while a graph is captured in global mode, unless the
 * calling thread relaxed its own capture mode. */
static _Thread_local int capture_mode; /* 0 global, 1 thread-local, 2 relaxed: as CUDA */

static int
capture_blocks(void)
{
    return (atomic_load(&global_capture) || cfg.capture_env) && capture_mode != 2;
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
        [TSOCK__DEV_EXCLUSIVE] = "all devices busy or unavailable: exclusive-process mode "
                                 "(simulated)",
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
    settings();
    *n = 0;
    if (cfg.fail && cfg.fail != TSOCK__DEV_IPC)
        return ret(cfg.fail);
    *n = cfg.devices;
    return ret(TSOCK__DEV_OK);
}

static int
device_uuid(int device, uint8_t uuid[TSOCK__DEV_UUID_SIZE])
{
    if (device < 0 || device >= cfg.devices)
        return ret(TSOCK__DEV_INVALID);
    memset(uuid, 0, TSOCK__DEV_UUID_SIZE);
    memcpy(uuid, "tsock-simdev", 12);
    uuid[15] = (uint8_t)device;
    return ret(TSOCK__DEV_OK);
}

static int
device_ipc_ok(int device, int *ok)
{
    *ok = device >= 0 && device < cfg.devices;
    return ret(*ok ? TSOCK__DEV_OK : TSOCK__DEV_INVALID);
}

static int
can_access_peer(int *can, int device, int peer)
{
    *can = 1;
    return ret(TSOCK__DEV_OK);
}

/* Walks this simulated device's objects: removes those whose owner died and that no live
 * process has open (the driver frees a dead process's memory once nobody maps it), and returns
 * the bytes of the device memory that remains. */
static size_t
sweep(void)
{
    settings();
    size_t used = 0;
    char prefix[48];
    int plen = snprintf(prefix, sizeof prefix, "tsock-sim-%.20s-", cfg.device);
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        int kind = e->d_name[plen] == 'm' ? SEG_MEM : SEG_EVENT;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        struct seg *s = seg_open(name, kind);
        if (!s)
            continue;
        size_t size = s->size;
        int gone = (!alive(s->owner) || (kind == SEG_MEM && atomic_load(&s->freed))) &&
                   s->owner != (int32_t)getpid() && !seg_other_user(s, 0);
        if (gone)
            shm_unlink(name);
        else if (kind == SEG_MEM)
            used += size;
        munmap(s, SEG_HEADER + size);
    }
    if (d)
        closedir(d);
    return used;
}

static int
mem_info(size_t *free_bytes, size_t *total_bytes)
{
    const size_t total = (size_t)16 << 30;
    size_t used = sweep();
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
    settings();
    if (device < 0 || device >= cfg.devices)
        return ret(TSOCK__DEV_INVALID);
    current = device;
    atomic_fetch_or(&contexts, 1u << device);
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

static int
dev_malloc(void **ptr, size_t bytes)
{
    settings();
    need_context();
    const char *why = NULL;
    struct seg *s = seg_create(SEG_MEM, bytes, &why);
    if (!s)
        return ret(TSOCK__DEV_NO_MEMORY);
    add_mapping(s, 0);
    *ptr = (uint8_t *)s + SEG_HEADER;
    return ret(TSOCK__DEV_OK);
}

static int
dev_free(void *ptr)
{
    if (!ptr)
        return ret(TSOCK__DEV_OK);
    need_context();
    struct mapping *m = find_mapping(ptr, 1);
    if (!m || m->imported)
        violation("free of %p, which is not memory this process allocated", ptr);
    int32_t user = seg_other_user(m->seg, 1);
    if (user)
        violation("free of device memory %s while process %d has queued work that reads it",
                  m->seg->name, (int)user);
    atomic_store(&m->seg->freed, 1);
    /* The bytes stay while another process has them open; the last one to close removes them. */
    if (!seg_other_user(m->seg, 0))
        shm_unlink(m->seg->name);
    remove_mapping(m);
    return ret(TSOCK__DEV_OK);
}

static int
host_alloc(void **ptr, size_t bytes)
{
    need_context();
    return ret(posix_memalign(ptr, 4096, bytes ? bytes : 1) ? TSOCK__DEV_NO_MEMORY : TSOCK__DEV_OK);
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
    settings();
    need_context();
    *s = stream_new();
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
    settings();
    need_context();
    if (capture_blocks())
        return ret(TSOCK__DEV_CAPTURE);
    struct tsock__dev_stream *s = resolve(stream);
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->queued;
    while (s->done < target)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return ret(TSOCK__DEV_OK);
}

struct tsock__dev_event {
    struct seg *seg;
    int imported;
};

static int
event_create(tsock__dev_event_t *out, unsigned flags)
{
    settings();
    need_context();
    if ((flags & TSOCK__DEV_EVENT_INTERPROCESS) && !(flags & TSOCK__DEV_EVENT_DISABLE_TIMING))
        violation("an interprocess event needs DisableTiming as well (flags 0x%x)", flags);
    struct tsock__dev_event *e = calloc(1, sizeof *e);
    const char *why = NULL;
    if (e)
        e->seg = seg_create(SEG_EVENT, 0, &why);
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
        int32_t user = seg_other_user(e->seg, 1);
        if (user)
            violation("destroy of event %s while process %d has queued work waiting on it",
                      e->seg->name, (int)user);
        if (e->seg->flags & TSOCK__DEV_EVENT_INTERPROCESS)
            shm_unlink(e->seg->name);
    } else {
        seg_user(e->seg, 0, -1);
        /* The last user of a dead owner's objects removes them (nobody else can). */
        if (!alive(e->seg->owner))
            (void)sweep();
    }
    free(e); /* the mapping stays: queued waits may still read it */
    return ret(TSOCK__DEV_OK);
}

static int
event_record(tsock__dev_event_t e, tsock__dev_stream_t s)
{
    need_context();
    struct op *op = op_new(OP_SIGNAL);
    if (!op)
        return ret(TSOCK__DEV_NO_MEMORY);
    op->event = e->seg;
    op->target = atomic_fetch_add(&e->seg->recorded, 1) + 1;
    enqueue(s, op);
    return ret(TSOCK__DEV_OK);
}

static int
event_query(tsock__dev_event_t e)
{
    settings();
    need_context();
    if (capture_blocks())
        return ret(TSOCK__DEV_CAPTURE);
    return ret(atomic_load(&e->seg->completed) >= atomic_load(&e->seg->recorded)
                   ? TSOCK__DEV_OK
                   : TSOCK__DEV_NOT_READY);
}

/* Without BlockingSync a real event wait spins a CPU core; the count lets tests see it. */
static int
event_sync(tsock__dev_event_t e)
{
    settings();
    need_context();
    if (capture_blocks())
        return ret(TSOCK__DEV_CAPTURE);
    uint64_t target = atomic_load(&e->seg->recorded);
    if (atomic_load(&e->seg->completed) < target &&
        !(e->seg->flags & TSOCK__DEV_EVENT_BLOCKING_SYNC))
        atomic_fetch_add(&spin_waits, 1);
    while (atomic_load(&e->seg->completed) < target)
        sleep_us(50);
    return ret(TSOCK__DEV_OK);
}

static int
stream_wait(tsock__dev_stream_t s, tsock__dev_event_t e)
{
    need_context();
    struct op *op = op_new(OP_WAIT);
    if (!op)
        return ret(TSOCK__DEV_NO_MEMORY);
    op->event = e->seg;
    op->target = atomic_load(&e->seg->recorded);
    if (e->seg->owner != (int32_t)getpid())
        seg_user(e->seg, 1, 1);
    enqueue(s, op);
    return ret(TSOCK__DEV_OK);
}

/* A queued read of another process's device memory: recorded in its segment until it runs. */
static void
register_read(struct op *op, const void *src, size_t bytes)
{
    struct mapping *m = find_mapping(src, 0);
    if (!m || m->seg->owner == (int32_t)getpid())
        return;
    struct seg *s = m->seg;
    seg_lock(s);
    for (int i = 0; i < SEG_READS; i++)
        if (!s->reads[i].used || !alive(s->reads[i].pid)) {
            s->reads[i].pid = (int32_t)getpid();
            s->reads[i].off = (uint64_t)((const uint8_t *)src - m->base);
            s->reads[i].len = bytes;
            s->reads[i].used = 1;
            op->read_seg = s;
            op->read_slot = i;
            break;
        }
    seg_unlock(s);
}

static int
memcpy_async(void *dst, const void *src, size_t bytes, enum tsock__dev_copy kind,
             tsock__dev_stream_t s)
{
    need_context();
    int dst_dev = find_mapping(dst, 0) != NULL, src_dev = find_mapping(src, 0) != NULL;
    if (dst_dev != (kind != TSOCK__DEV_D2H) || src_dev != (kind != TSOCK__DEV_H2D))
        violation("memcpy kind %d does not match its pointers (dst %s, src %s memory)", (int)kind,
                  dst_dev ? "device" : "host", src_dev ? "device" : "host");
    struct op *op = op_new(OP_COPY);
    if (!op)
        return ret(TSOCK__DEV_NO_MEMORY);
    op->dst = dst;
    op->src = src;
    op->bytes = bytes;
    register_read(op, src, bytes);
    enqueue(s, op);
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
        violation("a process opened its own %s IPC handle (CUDA refuses this)", what);
    return sh->name;
}

static int
ipc_mem_get(tsock__dev_ipc_handle *h, void *ptr)
{
    need_context();
    struct mapping *m = find_mapping(ptr, 1);
    if (!m || m->imported)
        return ret(TSOCK__DEV_INVALID);
    handle_make(h, m->seg);
    return ret(TSOCK__DEV_OK);
}

static int
ipc_mem_open(void **ptr, const tsock__dev_ipc_handle *h)
{
    settings();
    need_context();
    if (cfg.fail == TSOCK__DEV_IPC)
        return ret(TSOCK__DEV_IPC);
    struct sim_handle sh;
    const char *name = handle_check(h, &sh, "memory");
    struct seg *s = name ? seg_open(name, SEG_MEM) : NULL;
    if (!s)
        return ret(name ? TSOCK__DEV_IPC : TSOCK__DEV_INVALID);
    seg_user(s, 0, 1);
    add_mapping(s, 1);
    *ptr = (uint8_t *)s + SEG_HEADER;
    return ret(TSOCK__DEV_OK);
}

static int
ipc_mem_close(void *ptr)
{
    need_context();
    struct mapping *m = find_mapping(ptr, 1);
    if (!m || !m->imported)
        return ret(TSOCK__DEV_INVALID);
    seg_user(m->seg, 0, -1);
    /* The last user of memory whose owner freed it or died removes it, as the driver would,
     * and with a dead owner everything else it left (scratch memory, events). */
    int dead = !alive(m->seg->owner);
    if ((atomic_load(&m->seg->freed) || dead) && !seg_other_user(m->seg, 0))
        shm_unlink(m->seg->name);
    remove_mapping(m);
    if (dead)
        (void)sweep();
    return ret(TSOCK__DEV_OK);
}

static int
ipc_event_get(tsock__dev_ipc_handle *h, tsock__dev_event_t e)
{
    need_context();
    unsigned need = TSOCK__DEV_EVENT_DISABLE_TIMING | TSOCK__DEV_EVENT_INTERPROCESS;
    if (e->imported || (e->seg->flags & need) != need)
        violation("IPC handle of an event without DisableTiming | Interprocess (flags 0x%x)",
                  e->seg->flags);
    handle_make(h, e->seg);
    return ret(TSOCK__DEV_OK);
}

static int
ipc_event_open(tsock__dev_event_t *out, const tsock__dev_ipc_handle *h)
{
    settings();
    need_context();
    if (cfg.fail == TSOCK__DEV_IPC)
        return ret(TSOCK__DEV_IPC);
    struct sim_handle sh;
    const char *name = handle_check(h, &sh, "event");
    struct seg *s = name ? seg_open(name, SEG_EVENT) : NULL;
    if (!s)
        return ret(name ? TSOCK__DEV_IPC : TSOCK__DEV_INVALID);
    struct tsock__dev_event *e = calloc(1, sizeof *e);
    if (!e)
        return ret(TSOCK__DEV_NO_MEMORY);
    e->seg = s;
    e->imported = 1;
    seg_user(s, 0, 1);
    *out = e;
    return ret(TSOCK__DEV_OK);
}

static void
clear_error(void)
{
    atomic_store(&stale_error, 0);
}

/* As a real launch reports cudaGetLastError: a stale error left by someone else fails it. */
static int
convert_launch(const struct tsock__convert_plan *cv, const uint8_t *in, uint8_t *out,
               uint32_t samples, tsock__dev_stream_t s)
{
    need_context();
    if (atomic_exchange(&stale_error, 0))
        return ret(TSOCK__DEV_LAUNCH);
    if (!find_mapping(in, 0) || !find_mapping(out, 0))
        violation("conversion kernel given a host pointer");
    struct op *op = op_new(OP_CONVERT);
    if (!op)
        return ret(TSOCK__DEV_NO_MEMORY);
    op->cv = *cv;
    op->src = in;
    op->dst = out;
    op->samples = samples;
    enqueue(s, op);
    return ret(TSOCK__DEV_OK);
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
};
