/* The simulated device (devapi_sim.c): streams, each with one executor thread that runs its
 * queued work in order after a seeded random delay, and the checks made when work runs. */
#include <execinfo.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/devapi_sim_int.h"

/* ---- streams and their executors ---------------------------------------------------------- */

static atomic_int hold_all; /* tsock__dev_sim_hold_all */

static unsigned
next_delay(struct tsock__dev_stream *s)
{
    if (!tsock__sim_cfg.max_delay_us)
        return 0;
    s->rng ^= s->rng << 13, s->rng ^= s->rng >> 7, s->rng ^= s->rng << 17;
    return (unsigned)(s->rng % (tsock__sim_cfg.max_delay_us + 1));
}

void
tsock__sim_sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- reads and writes of device memory ------------------------------------------------------ */

#define MAX_SIGNALS 64

struct signal_after {
    struct seg *event;
    uint64_t target;
};

/* The signals queued on s after op (op is running: still s's head), at most MAX_SIGNALS. */
static int
signals_after(struct tsock__dev_stream *s, const struct op *op, struct signal_after *out)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (const struct op *o = op->next; o && n < MAX_SIGNALS; o = o->next)
        if (o->kind == OP_SIGNAL)
            out[n++] = (struct signal_after){o->event, o->target};
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Whether read r cannot run before the write `op` on stream s: it is queued after it on the
 * same stream, or behind a wait that only a signal queued after the write on s meets. */
static int
read_ordered_after(const struct seg_read *r, struct tsock__dev_stream *s, const struct op *op,
                   const struct signal_after *sig, int nsig)
{
    if (r->pid == (int32_t)getpid() && r->stream == (uint64_t)(uintptr_t)s && r->seq > op->seq)
        return 1;
    for (uint32_t w = 0; w < r->waits; w++)
        for (int i = 0; i < nsig; i++)
            if (sig[i].event->id == r->wait[w].event && sig[i].target >= r->wait[w].target &&
                atomic_load(&sig[i].event->completed) < r->wait[w].target)
                return 1;
    return 0;
}

/* A write into device memory: no live process (this one included) may have a queued read of
 * these bytes that could run before it. */
static void
check_write(const struct op *op, struct tsock__dev_stream *stream, const void *dst, size_t bytes)
{
    struct mapping *m = tsock__sim_find_mapping(dst, 0);
    if (!m)
        return;
    struct seg *s = m->seg;
    uint64_t off = (uint64_t)((const uint8_t *)dst - m->base);
    struct signal_after sig[MAX_SIGNALS];
    int nsig = signals_after(stream, op, sig);
    int32_t reader = 0;
    tsock__sim_seg_lock(s);
    for (int i = 0; i < SEG_READS && !reader; i++) {
        const struct seg_read *r = &s->reads[i];
        if (r->used && r->off < off + bytes && off < r->off + r->len &&
            (r->pid == (int32_t)getpid() || tsock__sim_alive(r->pid)) &&
            !read_ordered_after(r, stream, op, sig, nsig))
            reader = r->pid;
    }
    tsock__sim_seg_unlock(s);
    if (reader) {
        fprintf(stderr, "*** the write was queued at:\n");
        backtrace_symbols_fd((void *const *)op->site, op->site_depth, 2);
        tsock__sim_violation(
            "device memory %s [%llu, +%zu) written while process %d%s still has a queued "
            "read of it that has not run and is not ordered after the write (a slot refilled "
            "under a reader)",
            s->name, (unsigned long long)off, bytes, (int)reader,
            reader == (int32_t)getpid() ? " (this one)" : "");
    }
}

void
tsock__sim_register_read(struct op *op, struct tsock__dev_stream *stream, const void *src,
                         size_t bytes)
{
    struct mapping *m = tsock__sim_find_mapping(src, 0);
    if (!m)
        return;
    struct seg_read r = {.pid = (int32_t)getpid(), .used = 1, .len = bytes};
    r.off = (uint64_t)((const uint8_t *)src - m->base);
    r.stream = (uint64_t)(uintptr_t)stream;
    /* The waits still pending before it on its stream: the latest READ_WAITS of them (keeping
     * fewer only makes the check stricter). */
    pthread_mutex_lock(&stream->mu);
    r.seq = stream->queued + 1; /* the caller queues op next, under no other lock */
    for (const struct op *o = stream->head; o; o = o->next)
        if (o->kind == OP_WAIT && atomic_load(&o->event->completed) < o->target) {
            if (r.waits == READ_WAITS)
                memmove(&r.wait[0], &r.wait[1], sizeof r.wait[0] * (READ_WAITS - 1)), r.waits--;
            r.wait[r.waits].event = o->event->id;
            r.wait[r.waits++].target = o->target;
        }
    pthread_mutex_unlock(&stream->mu);
    struct seg *s = m->seg;
    tsock__sim_seg_lock(s);
    int at = -1;
    for (int i = 0; i < SEG_READS && at < 0; i++)
        if (!s->reads[i].used || !tsock__sim_alive(s->reads[i].pid))
            at = i;
    if (at >= 0)
        s->reads[at] = r;
    tsock__sim_seg_unlock(s);
    if (at < 0)
        tsock__sim_violation("the simulator's table of queued reads of %s is full (%d entries): "
                             "raise SEG_READS",
                             s->name, SEG_READS);
    op->read_seg = s;
    op->read_slot = at;
}

void
tsock__sim_use_mapping(struct op *op, const void *p)
{
    struct mapping *m = tsock__sim_find_mapping(p, 0);
    if (!m)
        return;
    atomic_fetch_add(&m->queued, 1);
    op->uses[op->uses[0] ? 1 : 0] = m;
}

/* Not instrumented by TSan: the bytes are shared with other processes, where TSan sees nothing
 * anyway, and instrumenting every element made a batch take seconds under it. */
#if defined(__SANITIZE_THREAD__)
__attribute__((no_sanitize("thread")))
#endif
static void
run_convert(const struct op *op, struct tsock__dev_stream *stream)
{
    const struct tsock__convert_plan *cv = &op->cv;
    uint32_t per_sample = cv->height * cv->width * cv->channels;
    size_t in_bytes = cv->in_sample_bytes[cv->tensor], out_bytes = cv->out_sample_bytes[cv->tensor];
    check_write(op, stream, op->dst, out_bytes * op->samples);
    for (uint32_t n = 0; n < op->samples; n++)
        for (uint32_t i = 0; i < per_sample; i++)
            tsock__convert_element(cv, (const uint8_t *)op->src + n * in_bytes,
                                   (uint8_t *)op->dst + n * out_bytes, i);
}

static void
run_op(struct op *op, struct tsock__dev_stream *stream)
{
    switch (op->kind) {
    case OP_COPY:
        check_write(op, stream, op->dst, op->bytes);
        memcpy(op->dst, op->src, op->bytes);
        break;
    case OP_CONVERT: run_convert(op, stream); break;
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
            tsock__sim_sleep_us(50);
        if (op->event->owner != (int32_t)getpid())
            tsock__sim_seg_user(op->event, 1, -1);
        break;
    }
    if (op->read_seg && op->read_slot >= 0) {
        tsock__sim_seg_lock(op->read_seg);
        op->read_seg->reads[op->read_slot].used = 0;
        tsock__sim_seg_unlock(op->read_seg);
    }
    for (int i = 0; i < 2; i++)
        if (op->uses[i])
            atomic_fetch_sub(&op->uses[i]->queued, 1);
}

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Fault injection: after N items, this process's executors stop, work still queued: for good,
 * or with TSOCK_CUDA_SIM_STALL_MS for that long (a device busy for seconds). */
static void
maybe_stall(void)
{
    if (tsock__sim_cfg.stall_after < 0 ||
        atomic_fetch_add(&tsock__sim_executed, 1) < tsock__sim_cfg.stall_after)
        return;
    static atomic_int told;
    static _Atomic uint64_t stalled_at;
    uint64_t zero = 0;
    atomic_compare_exchange_strong(&stalled_at, &zero, now_ms());
    if (!atomic_exchange(&told, 1) && tsock__sim_cfg.stall_file) {
        int fd = open(tsock__sim_cfg.stall_file, O_WRONLY | O_CREAT, 0600);
        if (fd >= 0)
            close(fd);
    }
    if (tsock__sim_cfg.stall_ms > 0) {
        uint64_t until = atomic_load(&stalled_at) + (uint64_t)tsock__sim_cfg.stall_ms;
        while (now_ms() < until)
            tsock__sim_sleep_us(10000);
        return;
    }
    for (;;)
        pause();
}

/* Operations queued and not yet run, over all of this process's streams (device_sync). */
static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static uint64_t unfinished;

static void
count_unfinished(int delta)
{
    pthread_mutex_lock(&idle_mu);
    unfinished += (uint64_t)(int64_t)delta;
    if (!unfinished)
        pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&idle_mu);
}

void
tsock__sim_wait_idle(void)
{
    pthread_mutex_lock(&idle_mu);
    while (unfinished)
        pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
}

static void *
executor(void *arg)
{
    struct tsock__dev_stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while ((!s->head && !s->destroyed) || (s->head && s->held))
            pthread_cond_wait(&s->cv, &s->mu);
        struct op *op = s->head;
        unsigned delay = op ? next_delay(s) : 0;
        pthread_mutex_unlock(&s->mu);
        if (!op)
            break;
        while (atomic_load(&hold_all))
            tsock__sim_sleep_us(1000);
        tsock__sim_sleep_us(delay);
        maybe_stall();
        run_op(op, s);
        pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->done = op->seq;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        free(op);
        count_unfinished(-1);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return NULL;
}

void
tsock__dev_sim_hold_all(int on)
{
    atomic_store(&hold_all, on);
}

void
tsock__dev_sim_hold_stream(tsock__dev_stream_t stream, int on)
{
    struct tsock__dev_stream *s = tsock__sim_resolve(stream);
    pthread_mutex_lock(&s->mu);
    s->held = !!on;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

struct tsock__dev_stream *
tsock__sim_stream_new(void)
{
    static atomic_ulong streams;
    struct tsock__dev_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->rng = (tsock__sim_cfg.seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)getpid() << 20) ^
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
    default_stream = tsock__sim_stream_new();
    if (!default_stream)
        abort();
}

/* NULL: the process's default stream, made on first use and never destroyed. */
struct tsock__dev_stream *
tsock__sim_resolve(tsock__dev_stream_t s)
{
    if (s)
        return s;
    pthread_once(&default_once, make_default_stream);
    return default_stream;
}

struct op *
tsock__sim_op_new(enum op_kind kind)
{
    struct op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->kind = kind;
    op->read_slot = -1;
    op->site_depth = backtrace(op->site, 12);
    return op;
}

void
tsock__sim_enqueue(tsock__dev_stream_t stream, struct op *op)
{
    struct tsock__dev_stream *s = tsock__sim_resolve(stream);
    count_unfinished(1);
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
