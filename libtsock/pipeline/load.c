/* Loading a batch. The driving thread (the caller of tsock_pipeline_load) reads the batch's
 * files into one arena with the reader, many at a time; as each file arrives its position goes
 * on a queue, and the workers decode queued files straight into the output. Bad files are
 * replaced here (see pipeline.h). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "pipeline/pipeline_int.h"

#define ARENA_ALIGN 64
/* A file that keeps growing while it is read is given up after this many tries. */
#define MAX_REREADS 3
/* A file that grew past this since it was indexed is not read into memory (the index itself
 * leaves out files of 4 GiB and more; no image tsock decodes comes near this). */
#define MAX_FILE_BYTES ((size_t)1 << 30)
/* No position: a known-bad sample is not read. */
#define NO_REQ UINT32_MAX

/* ---- the left-out set ---------------------------------------------------------------------- */

static int
is_bad(const struct tsock_pipeline *pl, uint64_t id)
{
    return (atomic_load_explicit(&pl->bad_bits[id / 64], memory_order_relaxed) >> (id % 64)) & 1;
}

/* Marks a sample's file bad and logs it, once per file. */
static void
mark_bad(struct tsock_pipeline *pl, uint64_t id, int code)
{
    uint64_t bit = (uint64_t)1 << (id % 64);
    if (atomic_fetch_or(&pl->bad_bits[id / 64], bit) & bit)
        return;
    atomic_fetch_add(&pl->st_bad_files, 1);
    char name[2 * TSOCK__INDEX_MAX_PATH + 64];
    tsock__log(pl->on_error == TSOCK_ON_ERROR_FAIL ? TSOCK_LOG_ERROR : TSOCK_LOG_WARN,
               "pipeline: %s (sample %llu): %s%s",
               tsock__index_describe(pl->index, id, name, sizeof name), (unsigned long long)id,
               code == -EPROTO    ? "corrupt or truncated beyond repair"
               : code == -EFBIG   ? "over the decoder's limits"
               : code == -ENOTSUP ? "an image kind tsock does not decode"
               : code == -EILSEQ  ? "not an image"
               : code == -ENODATA ? "empty"
                                  : strerror(-code),
               pl->on_error == TSOCK_ON_ERROR_FAIL ? "" : "; left out from now on");
}

/* ---- one sample --------------------------------------------------------------------------- */

/* The read of sample `id` into buf (capacity bytes): its whole file, or its member of a tar
 * shard (exactly its indexed length at its offset). */
static struct tsock__read_req
sample_request(const struct tsock_pipeline *pl, uint64_t id, void *buf, size_t capacity)
{
    const char *shard = tsock__index_shard_path(pl->index, id);
    uint32_t size = pl->index->entries[id].size;
    if (shard)
        return (struct tsock__read_req){.path = shard,
                                        .buf = buf,
                                        .capacity = size,
                                        .range = 1,
                                        .offset = tsock__index_offset(pl->index, id)};
    return (struct tsock__read_req){.path = tsock__index_path(pl->index, id),
                                    .expected = size,
                                    .buf = buf,
                                    .capacity = capacity};
}

/* CPU time of the calling thread, in ns: decode figures must not count time a busy machine
 * spent running something else. */
static uint64_t
thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Adds one decode's thread CPU time to the statistics, split between the codec and the
 * resampling in the proportion of the monotonic time the decoder measured for each (see
 * tsock__decode_report). */
static void
count_decode(struct worker *w, uint64_t cpu_ns)
{
    struct tsock_pipeline *pl = w->pl;
    const struct tsock__decode_report *rep = tsock__decoder_report(w->decoder);
    uint64_t parts = rep->codec_ns + rep->resample_ns, resample = 0;

    if (parts > 0)
        resample = (uint64_t)((double)cpu_ns * (double)rep->resample_ns / (double)parts);
    atomic_fetch_add_explicit(&pl->st_decode_ns, cpu_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&pl->st_codec_cpu_ns, cpu_ns - resample, memory_order_relaxed);
    atomic_fetch_add_explicit(&pl->st_resample_cpu_ns, resample, memory_order_relaxed);
}

/* Counts which paths the decode took (statistics: docs/pipeline.md). A redone decode counts
 * whether or not it then succeeded: it cost a second decode either way. */
static void
count_codec_paths(struct tsock_pipeline *pl, const struct tsock__decode_report *rep, int r)
{
    if (rep->entropy_redone)
        atomic_fetch_add_explicit(&pl->st_entropy_redone, 1, memory_order_relaxed);
    if (r != 0)
        return;
    atomic_fetch_add_explicit(&pl->st_decoded_cpu, 1, memory_order_relaxed);
    if (rep->restart_window)
        atomic_fetch_add_explicit(&pl->st_restart_windows, 1, memory_order_relaxed);
    if (rep->own_entropy)
        atomic_fetch_add_explicit(&pl->st_own_entropy, 1, memory_order_relaxed);
    if (rep->entry_jump)
        atomic_fetch_add_explicit(&pl->st_entry_jumps, 1, memory_order_relaxed);
}

/* Decodes and augments file `id` into `out` with the random stream of (epoch, rng_id). */
static int
decode_into(struct worker *w, const uint8_t *data, size_t size, uint64_t id, uint64_t epoch,
            uint64_t rng_id, uint8_t *out)
{
    struct tsock_pipeline *pl = w->pl;
    uint64_t t0 = thread_cpu_ns();
    size_t points_bytes;
    struct tsock__entry_points *points = tsock__pipeline_points_take(pl, id, &points_bytes);
    int r;

    tsock__decoder_set_entry_points(w->decoder, points);

    if (pl->preset == TSOCK_PRESET_TRAIN) {
        struct tsock__rng rng;
        struct tsock__train_params p = tsock__pipeline_train_params(pl);
        tsock__pipeline_sample_rng(pl, epoch, rng_id, &rng);
        r = tsock__preset_train(w->decoder, data, size, &rng, &p, out, NULL, NULL);
        /* The augmentations go on drawing from the sample's stream after the crop and flip. */
        if (r == 0 && w->aug_tmp)
            tsock__aug_sample(&rng, &pl->aug, out, pl->size, pl->size, w->aug_tmp);
    } else {
        r = tsock__preset_val(w->decoder, data, size, tsock__pipeline_val_resize(pl), pl->size,
                              out);
    }
    tsock__decoder_set_entry_points(w->decoder, NULL);
    tsock__pipeline_points_put(pl, id, points, points_bytes);
    count_decode(w, thread_cpu_ns() - t0);
    count_codec_paths(w->pl, tsock__decoder_report(w->decoder), r);
    return r;
}

/* Reads a whole file on the worker (a replacement, or a file that outgrew its arena room).
 * Returns its size, or a negated errno. */
static int64_t
read_on_worker(struct worker *w, uint64_t id, size_t hint)
{
    struct tsock_pipeline *pl = w->pl;
    size_t want = hint ? hint : (size_t)pl->index->entries[id].size + 1;

    for (int tries = 0; tries < MAX_REREADS; tries++) {
        if (want > MAX_FILE_BYTES)
            return -EFBIG;
        if (want > w->buf_cap) {
            uint8_t *b = realloc(w->buf, want);
            if (!b)
                return -ENOMEM;
            w->buf = b;
            w->buf_cap = want;
        }
        struct tsock__read_req q = sample_request(pl, id, w->buf, w->buf_cap);
        uint64_t t0 = thread_cpu_ns();
        tsock__reader_read(w->reader, &q, 1);
        atomic_fetch_add_explicit(&pl->st_read_cpu_ns, thread_cpu_ns() - t0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pl->st_files, 1, memory_order_relaxed);
        if (q.result >= 0) {
            atomic_fetch_add_explicit(&pl->st_bytes, (uint64_t)q.result, memory_order_relaxed);
            return q.result;
        }
        if (q.result != -EFBIG)
            return q.result;
        want = (size_t)q.file_size + 1;
    }
    return -EFBIG;
}

/* Loads sample `id` from the worker's buffer into position `pos`. */
static int
load_on_worker(struct worker *w, uint32_t pos, uint64_t id, uint64_t rng_id, size_t hint)
{
    const struct load_job *job = &w->pl->job;
    size_t image_bytes = (size_t)w->pl->size * (size_t)w->pl->size * 3;
    int64_t got = read_on_worker(w, id, hint);
    if (got < 0)
        return (int)got;
    return decode_into(w, w->buf, (size_t)got, id, job->epoch, rng_id,
                       job->images + (size_t)pos * image_bytes);
}

/* Fills position `pos`, whose own sample failed, with the next sample id after it whose file
 * decodes; the crop and flip are still the bad sample's own. */
static int
replace(struct worker *w, uint32_t pos)
{
    struct tsock_pipeline *pl = w->pl;
    const struct load_job *job = &pl->job;
    uint64_t id = job->ids[pos], n = pl->index->count;

    for (uint64_t k = 1; k <= TSOCK__PIPELINE_MAX_REPLACE && k < n + 1; k++) {
        uint64_t c = (id + k) % n;
        if (is_bad(pl, c))
            continue;
        int r = load_on_worker(w, pos, c, id, 0);
        if (r == 0) {
            job->labels[pos] = pl->index->entries[c].label;
            job->indices[pos] = (int64_t)c;
            atomic_fetch_add_explicit(&pl->st_replaced, 1, memory_order_relaxed);
            return 0;
        }
        if (r == -ENOMEM) /* not the file's fault */
            return r;
        mark_bad(pl, c, r);
    }
    tsock__log(TSOCK_LOG_ERROR,
               "pipeline: no usable file among the %d samples after sample %llu: giving up",
               TSOCK__PIPELINE_MAX_REPLACE, (unsigned long long)id);
    return TSOCK_E_BAD_SAMPLE;
}

/* Loads position `pos` of the current job. Returns 0 or the load's error. */
static int
process(struct worker *w, uint32_t pos)
{
    struct tsock_pipeline *pl = w->pl;
    const struct load_job *job = &pl->job;
    uint64_t id = job->ids[pos];
    size_t image_bytes = (size_t)pl->size * (size_t)pl->size * 3;

    if (!job->known_bad[pos]) {
        const struct tsock__read_req *q = &job->reqs[pos];
        int r;
        if (q->result == -EFBIG) /* the file grew since the index was built */
            r = load_on_worker(w, pos, id, id, (size_t)q->file_size + 1);
        else if (q->result < 0)
            r = (int)q->result;
        else if (job->dd && !pl->force_cpu[pos] &&
                 tsock__pipeline_device_try(pl, pos, q->buf, (size_t)q->result))
            r = 0; /* the device decodes it once the workers are done */
        else
            r = decode_into(w, q->buf, (size_t)q->result, id, job->epoch, id,
                            job->images + (size_t)pos * image_bytes);
        if (r == 0) {
            job->labels[pos] = pl->index->entries[id].label;
            job->indices[pos] = (int64_t)id;
            return 0;
        }
        if (r == -ENOMEM)
            return r;
        mark_bad(pl, id, r);
    }
    if (pl->on_error == TSOCK_ON_ERROR_FAIL)
        return TSOCK_E_BAD_SAMPLE;
    return replace(w, pos);
}

/* ---- workers ------------------------------------------------------------------------------ */

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    struct tsock_pipeline *pl = w->pl;

    /* Named, so that per-thread CPU figures (/proc/PID/task, top -H) tell workers apart. */
    pthread_setname_np(pthread_self(), "tsock-decode");
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (!pl->stop && pl->q_head == pl->q_tail)
            pthread_cond_wait(&pl->work_cv, &pl->mu);
        if (pl->stop)
            break;
        uint32_t pos = pl->queue[pl->q_head++];
        pthread_mutex_unlock(&pl->mu);
        int r = process(w, pos);
        pthread_mutex_lock(&pl->mu);
        if (r != 0 && pl->error == 0)
            pl->error = r;
        if (++pl->done == pl->job.n)
            pthread_cond_signal(&pl->done_cv);
    }
    pthread_mutex_unlock(&pl->mu);
    return NULL;
}

int
tsock__pipeline_start_workers(struct tsock_pipeline *pl)
{
    pl->pool = calloc((size_t)pl->workers, sizeof *pl->pool);
    if (!pl->pool)
        return -ENOMEM;
    for (int i = 0; i < pl->workers; i++) {
        struct worker *w = &pl->pool[i];
        w->pl = pl;
        int r = tsock__decoder_create(&w->decoder);
        if (r == 0)
            tsock__decoder_set_filter(w->decoder, pl->bicubic);
        if (r == 0)
            r = tsock__reader_create(&w->reader, TSOCK__IO_PREAD, 1, pl->index->root);
        if (r == 0 && pl->preset == TSOCK_PRESET_TRAIN && tsock__aug_enabled(&pl->aug)) {
            w->aug_tmp = malloc(TSOCK__AUG_TMP_BYTES(pl->size, pl->size));
            r = w->aug_tmp ? 0 : -ENOMEM;
        }
        if (r != 0)
            return r;
    }
    /* The workers take no signals: those are for the application's own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int r = 0;
    for (int i = 0; i < pl->workers && r == 0; i++) {
        r = -pthread_create(&pl->pool[i].thread, NULL, worker_main, &pl->pool[i]);
        pl->pool[i].started = r == 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

void
tsock__pipeline_stop_workers(struct tsock_pipeline *pl)
{
    if (!pl->pool)
        return;
    pthread_mutex_lock(&pl->mu);
    pl->stop = 1;
    pthread_cond_broadcast(&pl->work_cv);
    pthread_mutex_unlock(&pl->mu);
    for (int i = 0; i < pl->workers; i++) {
        struct worker *w = &pl->pool[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        tsock__decoder_destroy(w->decoder);
        tsock__reader_destroy(w->reader);
        free(w->buf);
        free(w->aug_tmp);
    }
    free(pl->pool);
    pl->pool = NULL;
}

/* ---- one batch ---------------------------------------------------------------------------- */

/* Queues position `pos` for the workers. */
static void
enqueue(struct tsock_pipeline *pl, uint32_t pos)
{
    pthread_mutex_lock(&pl->mu);
    pl->queue[pl->q_tail++] = pos;
    pthread_cond_signal(&pl->work_cv);
    pthread_mutex_unlock(&pl->mu);
}

/* Grows the per-batch arrays to n positions. */
static int
reserve(struct tsock_pipeline *pl, uint32_t n)
{
    if (n <= pl->reqs_cap)
        return 0;
    int failed = 0;
    pl->reqs = tsock__realloc_or_keep(pl->reqs, (size_t)n * sizeof *pl->reqs, &failed);
    pl->gather = tsock__realloc_or_keep(pl->gather, (size_t)n * sizeof *pl->gather, &failed);
    pl->known_bad = tsock__realloc_or_keep(pl->known_bad, n, &failed);
    pl->queue = tsock__realloc_or_keep(pl->queue, 2 * (size_t)n * sizeof *pl->queue, &failed);
    if (failed || tsock__pipeline_device_reserve(pl, n) != 0)
        return -ENOMEM;
    pl->reqs_cap = n;
    return 0;
}

/* Lays the batch's files out in the arena and builds the read requests: reqs[k] for the k-th
 * file to read, pos_of[k] its position. Returns the number of files to read, or -ENOMEM. */
static int64_t
plan_reads(struct tsock_pipeline *pl, const uint64_t *ids, uint32_t n, uint32_t *pos_of)
{
    size_t total = 0;
    for (uint32_t pos = 0; pos < n; pos++) {
        pl->known_bad[pos] = (uint8_t)is_bad(pl, ids[pos]);
        if (!pl->known_bad[pos])
            total += ((size_t)pl->index->entries[ids[pos]].size + 1 + ARENA_ALIGN - 1) &
                     ~(size_t)(ARENA_ALIGN - 1);
    }
    if (total > pl->arena_cap) {
        free(pl->arena);
        pl->arena = malloc(total);
        pl->arena_cap = pl->arena ? total : 0;
        if (!pl->arena)
            return -ENOMEM;
    }
    size_t at = 0;
    uint32_t m = 0;
    for (uint32_t pos = 0; pos < n; pos++) {
        if (pl->known_bad[pos])
            continue;
        size_t cap = (size_t)pl->index->entries[ids[pos]].size + 1;
        /* The position's request lives at its own index, so workers find it by position. */
        pl->reqs[pos] = sample_request(pl, ids[pos], pl->arena + at, cap);
        pos_of[m++] = pos;
        at += (cap + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    }
    return m;
}

/* Reads the planned files in position order of pos_of, handing each to the workers as it
 * arrives. The reader wants its requests side by side, so they are gathered into `batch` and
 * their results copied back to the positions' requests before the positions are queued. */
struct gather_ctx {
    struct tsock_pipeline *pl;
    struct tsock__read_req *batch;
    const uint32_t *pos_of;
};

static void
on_gathered(void *arg, size_t k)
{
    struct gather_ctx *g = arg;
    g->pl->reqs[g->pos_of[k]] = g->batch[k];
    enqueue(g->pl, g->pos_of[k]);
}

static int
read_batch(struct tsock_pipeline *pl, uint32_t m, const uint32_t *pos_of)
{
    struct tsock__read_req *batch = pl->gather;
    for (uint32_t k = 0; k < m; k++)
        batch[k] = pl->reqs[pos_of[k]];
    struct gather_ctx g = {pl, batch, pos_of};
    uint64_t t0 = tsock__now_ns(), c0 = thread_cpu_ns();
    int r = tsock__reader_read_each(pl->reader, batch, m, on_gathered, &g);
    atomic_fetch_add_explicit(&pl->st_read_cpu_ns, thread_cpu_ns() - c0, memory_order_relaxed);
    atomic_fetch_add_explicit(&pl->st_read_ns, tsock__now_ns() - t0, memory_order_relaxed);
    return r < 0 ? r : 0;
}

/* Waits until the workers have done every queued position; returns the round's first error. */
static int
wait_workers(struct tsock_pipeline *pl)
{
    pthread_mutex_lock(&pl->mu);
    while (pl->done < pl->job.n)
        pthread_cond_wait(&pl->done_cv, &pl->mu);
    int r = pl->error;
    pthread_mutex_unlock(&pl->mu);
    return r;
}

/* The device decoder's round (device_load.c), then the CPU for what it failed: the failed
 * positions go back to the workers as a round of their own. */
static int
device_round(struct tsock_pipeline *pl)
{
    uint32_t *again = pl->queue; /* the first half: the first round is over */
    int64_t failed = tsock__pipeline_device_round(pl, again);
    if (failed <= 0)
        return (int)failed;
    pthread_mutex_lock(&pl->mu);
    pl->job.n = (uint32_t)failed;
    pl->q_head = 0;
    pl->q_tail = (uint32_t)failed;
    pl->done = 0;
    pthread_cond_broadcast(&pl->work_cv);
    pthread_mutex_unlock(&pl->mu);
    return wait_workers(pl);
}

static int load_batch(tsock_pipeline *pl, uint64_t epoch, const uint64_t *ids, uint32_t n,
                      uint8_t *images, int64_t *labels, int64_t *indices,
                      struct tsock__device_decoder *dd);

int
tsock_pipeline_load(tsock_pipeline *pl, uint64_t epoch, const uint64_t *ids, uint32_t n,
                    uint8_t *images, int64_t *labels, int64_t *indices)
{
    if (pl && pl->decoder == TSOCK_DECODER_GPU) {
        tsock__log(TSOCK_LOG_ERROR, "pipeline: the GPU decoder writes into a producer's device "
                                    "slots only: use tsock_pipeline_fill, or TSOCK_DECODER_CPU");
        return -EINVAL;
    }
    return load_batch(pl, epoch, ids, n, images, labels, indices, NULL);
}

static int
load_round(tsock_pipeline *pl, uint64_t epoch, const uint64_t *ids, uint32_t n, uint8_t *images,
           int64_t *labels, int64_t *indices, struct tsock__device_decoder *dd)
{
    if (!pl || (n && (!ids || !images || !labels || !indices)))
        return -EINVAL;
    if (!pl->open)
        return TSOCK_E_STATE;
    if (atomic_load(&pl->cancel))
        return TSOCK_E_CANCELLED;
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] >= pl->index->count)
            return -EINVAL;
    if (n == 0)
        return 0;
    int r = reserve(pl, n);
    if (r != 0)
        return r;
    uint32_t *pos_of = pl->queue + n; /* the queue's second half */
    int64_t m = plan_reads(pl, ids, n, pos_of);
    if (m < 0)
        return (int)m;

    pthread_mutex_lock(&pl->mu);
    pl->job = (struct load_job){.epoch = epoch,
                                .ids = ids,
                                .n = n,
                                .images = images,
                                .labels = labels,
                                .indices = indices,
                                .reqs = pl->reqs,
                                .known_bad = pl->known_bad,
                                .dd = dd};
    memset(pl->on_device, 0, n);
    memset(pl->force_cpu, 0, n);
    pl->q_head = pl->q_tail = pl->done = 0;
    pl->error = 0;
    pthread_mutex_unlock(&pl->mu);

    for (uint32_t pos = 0; pos < n; pos++)
        if (pl->known_bad[pos])
            enqueue(pl, pos);
    r = read_batch(pl, (uint32_t)m, pos_of);
    if (r != 0) {
        /* Nothing was read (the reader checks its arguments first): fail each file. */
        for (int64_t k = 0; k < m; k++) {
            pl->reqs[pos_of[k]].result = r;
            enqueue(pl, pos_of[k]);
        }
    }

    r = wait_workers(pl);
    if (r == 0 && dd)
        r = device_round(pl);

    for (int64_t k = 0; k < m; k++) {
        const struct tsock__read_req *q = &pl->reqs[pos_of[k]];
        atomic_fetch_add_explicit(&pl->st_files, 1, memory_order_relaxed);
        if (q->result > 0)
            atomic_fetch_add_explicit(&pl->st_bytes, (uint64_t)q->result, memory_order_relaxed);
    }
    if (r != 0)
        return r;
    atomic_fetch_add_explicit(&pl->st_samples, n, memory_order_relaxed);
    return (int)n;
}

/* A load, with the driving thread's CPU time around it counted (the serial part of a load). */
static int
load_batch(tsock_pipeline *pl, uint64_t epoch, const uint64_t *ids, uint32_t n, uint8_t *images,
           int64_t *labels, int64_t *indices, struct tsock__device_decoder *dd)
{
    if (!pl)
        return -EINVAL;
    uint64_t t0 = thread_cpu_ns();
    int r = load_round(pl, epoch, ids, n, images, labels, indices, dd);
    atomic_fetch_add_explicit(&pl->st_driver_cpu_ns, thread_cpu_ns() - t0, memory_order_relaxed);
    return r;
}

int
tsock_pipeline_fill(tsock_pipeline *pl, tsock_slot *slot)
{
    if (!pl || !slot)
        return -EINVAL;
    uint32_t n = tsock_slot_planned(slot);
    const uint64_t *ids = tsock_slot_sample_ids(slot);
    if (pl->tensor_image < 0 || n == 0 || !ids)
        return TSOCK_E_STATE;
    struct tsock__device_decoder *dd = NULL;
    if (pl->decoder == TSOCK_DECODER_GPU) {
        /* The device decoder resizes bilinearly straight into the slot: nothing of the CPU's
         * per-sample work after the crop would run, so refuse rather than skip it. */
        if (tsock__aug_enabled(&pl->aug) || pl->bicubic || pl->val_resize) {
            tsock__log(TSOCK_LOG_ERROR, "pipeline: the GPU decoder applies no augmentation, "
                                        "bicubic resize or val resize size: use "
                                        "TSOCK_DECODER_CPU with them");
            return -ENOTSUP;
        }
        int err = 0;
        dd = tsock__slot_device_decoder(slot, &err);
        if (!dd) {
            if (err == TSOCK_E_STATE)
                tsock__log(TSOCK_LOG_ERROR, "pipeline: the GPU decoder needs a producer whose "
                                            "ring is on a CUDA device (--device cuda)");
            return err;
        }
    }
    return load_batch(pl, tsock_slot_epoch(slot), ids, n, tsock_slot_data(slot, pl->tensor_image),
                      tsock_slot_data(slot, pl->tensor_image + 1),
                      tsock_slot_data(slot, pl->tensor_image + 2), dd);
}
