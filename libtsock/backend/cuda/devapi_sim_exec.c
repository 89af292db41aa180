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

/* A write into device memory: no other live process may have a queued read of these bytes. */
static void
check_write(const struct op *op, const void *dst, size_t bytes)
{
    struct mapping *m = tsock__sim_find_mapping(dst, 0);
    if (!m)
        return;
    struct seg *s = m->seg;
    uint64_t off = (uint64_t)((const uint8_t *)dst - m->base);
    int32_t me = (int32_t)getpid(), reader = 0;
    tsock__sim_seg_lock(s);
    for (int i = 0; i < SEG_READS && !reader; i++)
        if (s->reads[i].used && s->reads[i].pid != me && s->reads[i].off < off + bytes &&
            off < s->reads[i].off + s->reads[i].len && tsock__sim_alive(s->reads[i].pid))
            reader = s->reads[i].pid;
    tsock__sim_seg_unlock(s);
    if (reader) {
        fprintf(stderr, "*** the write was queued at:\n");
        backtrace_symbols_fd((void *const *)op->site, op->site_depth, 2);
        tsock__sim_violation(
            "device memory %s [%llu, +%zu) written while process %d still has a queued "
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
}

/* Fault injection: after N items, this process's executors stop, work still queued. */
static void
maybe_stall(void)
{
    if (tsock__sim_cfg.stall_after < 0 ||
        atomic_fetch_add(&tsock__sim_executed, 1) < tsock__sim_cfg.stall_after)
        return;
    static atomic_int told;
    if (!atomic_exchange(&told, 1) && tsock__sim_cfg.stall_file) {
        int fd = open(tsock__sim_cfg.stall_file, O_WRONLY | O_CREAT, 0600);
        if (fd >= 0)
            close(fd);
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
        while (!s->head && !s->destroyed)
            pthread_cond_wait(&s->cv, &s->mu);
        struct op *op = s->head;
        unsigned delay = op ? next_delay(s) : 0;
        pthread_mutex_unlock(&s->mu);
        if (!op)
            break;
        tsock__sim_sleep_us(delay);
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
        count_unfinished(-1);
    }
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return NULL;
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
