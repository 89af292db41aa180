/* tsock-producer's reporting (see producer_report.h). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "producer_report.h"

/* ---- consumers ------------------------------------------------------------------------------ */

static struct consumer_rec *
table_find(struct consumer_table *t, uint64_t id)
{
    for (size_t i = 0; i < t->count; i++)
        if (t->recs[i].id == id)
            return &t->recs[i];
    if (t->count == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        struct consumer_rec *r = realloc(t->recs, cap * sizeof(*r));
        if (!r)
            return NULL;
        t->recs = r;
        t->cap = cap;
    }
    struct consumer_rec *r = &t->recs[t->count++];
    memset(r, 0, sizeof(*r));
    r->id = id;
    return r;
}

int
table_update(struct consumer_table *t, tsock_producer *p)
{
    for (size_t i = 0; i < t->count; i++)
        t->recs[i].connected = 0;
    int n = tsock_producer_consumer_count(p);
    if (n < 0)
        return -1;
    int holding = 0;
    for (int i = 0; i < n; i++) {
        uint64_t id;
        /* -ENOENT: a consumer left between the count and this call; the rest is read later. */
        if (tsock_producer_stat(p, i, TSOCK_STAT_ID, &id) != 0)
            break;
        struct consumer_rec *r = table_find(t, id);
        if (!r)
            return -1;
        r->connected = 1;
        tsock_producer_stat(p, i, TSOCK_STAT_PID, &r->pid);
        tsock_producer_stat(p, i, TSOCK_STAT_BATCHES, &r->batches);
        tsock_producer_stat(p, i, TSOCK_STAT_SAMPLES, &r->samples);
        tsock_producer_stat(p, i, TSOCK_STAT_RELEASED, &r->released);
        tsock_producer_stat(p, i, TSOCK_STAT_HELD, &r->held);
        tsock_producer_stat(p, i, TSOCK_STAT_BAD_MESSAGES, &r->bad_messages);
        if (r->held > 0)
            holding++;
    }
    return holding;
}

/* ---- a one-line JSON writer ------------------------------------------------------------------ */

struct jw {
    FILE *f;
    int first; /* no member written yet in the current object */
};

static void
jw_key(struct jw *w, const char *key)
{
    fprintf(w->f, "%s\"%s\": ", w->first ? "" : ", ", key);
    w->first = 0;
}

static void
jw_str(struct jw *w, const char *key, const char *s)
{
    jw_key(w, key);
    if (s)
        cli_json_string(w->f, s);
    else
        fputs("null", w->f);
}

static void
jw_u64(struct jw *w, const char *key, uint64_t v)
{
    jw_key(w, key);
    fprintf(w->f, "%" PRIu64, v);
}

static void
jw_num(struct jw *w, const char *key, double v)
{
    jw_key(w, key);
    fprintf(w->f, "%.6g", v);
}

static void
jw_bool(struct jw *w, const char *key, int v)
{
    jw_key(w, key);
    fputs(v ? "true" : "false", w->f);
}

static void
jw_open(struct jw *w, const char *key)
{
    if (key)
        jw_key(w, key);
    fputc('{', w->f);
    w->first = 1;
}

static void
jw_close(struct jw *w)
{
    fputc('}', w->f);
    w->first = 0;
}

/* ---- records ------------------------------------------------------------------------------- */

static uint64_t
pipeline_stat(tsock_pipeline *pl, int key)
{
    uint64_t v = 0;
    if (pl)
        tsock_pipeline_stat(pl, key, &v);
    return v;
}

static void
write_consumers(struct jw *w, const struct consumer_table *t)
{
    jw_key(w, "consumers");
    fputc('[', w->f);
    for (size_t i = 0; i < t->count; i++) {
        const struct consumer_rec *c = &t->recs[i];
        if (i)
            fputs(", ", w->f);
        jw_open(w, NULL);
        jw_u64(w, "id", c->id);
        jw_u64(w, "pid", c->pid);
        jw_u64(w, "batches", c->batches);
        jw_u64(w, "samples", c->samples);
        jw_u64(w, "released", c->released);
        jw_u64(w, "held", c->held);
        jw_num(w, "batches_per_s", c->rate);
        jw_u64(w, "bad_messages", c->bad_messages);
        jw_bool(w, "connected", c->connected);
        jw_close(w);
    }
    fputc(']', w->f);
}

static void
write_pipeline(struct jw *w, tsock_pipeline *pl)
{
    static const char *const modes[] = {"auto", "uring", "pread"};
    uint64_t mode = pipeline_stat(pl, TSOCK_PIPELINE_READ_MODE);

    jw_open(w, "pipeline");
    jw_u64(w, "samples_loaded", pipeline_stat(pl, TSOCK_PIPELINE_SAMPLES));
    jw_u64(w, "files_read", pipeline_stat(pl, TSOCK_PIPELINE_FILES_READ));
    jw_u64(w, "bytes_read", pipeline_stat(pl, TSOCK_PIPELINE_BYTES_READ));
    jw_u64(w, "bad_files", pipeline_stat(pl, TSOCK_PIPELINE_BAD_FILES));
    jw_u64(w, "replaced", pipeline_stat(pl, TSOCK_PIPELINE_REPLACED));
    jw_u64(w, "left_out_at_index", pipeline_stat(pl, TSOCK_PIPELINE_LEFT_OUT));
    jw_u64(w, "not_image_at_index", pipeline_stat(pl, TSOCK_PIPELINE_NOT_IMAGE));
    jw_num(w, "decode_s", (double)pipeline_stat(pl, TSOCK_PIPELINE_DECODE_NS) * 1e-9);
    jw_num(w, "read_s", (double)pipeline_stat(pl, TSOCK_PIPELINE_READ_WAIT_NS) * 1e-9);
    jw_num(w, "index_s", (double)pipeline_stat(pl, TSOCK_PIPELINE_INDEX_NS) * 1e-9);
    jw_u64(w, "index_bytes", pipeline_stat(pl, TSOCK_PIPELINE_INDEX_BYTES));
    jw_bool(w, "index_from_cache", pipeline_stat(pl, TSOCK_PIPELINE_FROM_CACHE) != 0);
    jw_u64(w, "workers", pipeline_stat(pl, TSOCK_PIPELINE_WORKERS));
    jw_u64(w, "decoded_gpu", pipeline_stat(pl, TSOCK_PIPELINE_DECODED_GPU));
    jw_u64(w, "decoded_cpu", pipeline_stat(pl, TSOCK_PIPELINE_DECODED_CPU));
    jw_u64(w, "restart_windows", pipeline_stat(pl, TSOCK_PIPELINE_RESTART_WINDOWS));
    jw_u64(w, "own_entropy", pipeline_stat(pl, TSOCK_PIPELINE_OWN_ENTROPY));
    jw_u64(w, "entropy_redone", pipeline_stat(pl, TSOCK_PIPELINE_ENTROPY_REDONE));
    jw_u64(w, "entry_jumps", pipeline_stat(pl, TSOCK_PIPELINE_ENTRY_JUMPS));
    jw_u64(w, "entry_point_bytes", pipeline_stat(pl, TSOCK_PIPELINE_ENTRY_POINT_BYTES));
    jw_str(w, "read_mode", mode < 3 ? modes[mode] : "?");
    jw_u64(w, "classes", tsock_pipeline_classes(pl));
    /* CPU per stage, thread CPU time summed over the threads (docs/stats.md). */
    jw_num(w, "read_cpu_s", (double)pipeline_stat(pl, TSOCK_PIPELINE_READ_CPU_NS) * 1e-9);
    jw_num(w, "codec_cpu_s", (double)pipeline_stat(pl, TSOCK_PIPELINE_CODEC_CPU_NS) * 1e-9);
    jw_num(w, "resample_cpu_s", (double)pipeline_stat(pl, TSOCK_PIPELINE_RESAMPLE_CPU_NS) * 1e-9);
    jw_num(w, "driver_cpu_s", (double)pipeline_stat(pl, TSOCK_PIPELINE_DRIVER_CPU_NS) * 1e-9);
    jw_close(w);
}

/* The final record's per-thread CPU (struct thread_cpu). */
static void
write_threads(struct jw *w, const struct thread_cpu *t)
{
    if (!t->ok)
        return;
    jw_open(w, "threads_cpu_s");
    jw_num(w, "main", t->main_s);
    jw_num(w, "decode_workers", t->workers_s);
    jw_u64(w, "decode_worker_threads", (uint64_t)t->workers);
    jw_num(w, "service", t->service_s);
    jw_num(w, "zmq", t->zmq_s);
    jw_num(w, "other", t->other_s);
    jw_close(w);
}

/* Peak resident memory of this process, in bytes. */
static uint64_t
max_rss_bytes(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss * 1024 : 0;
}

/* Resident memory now, in bytes (from /proc; 0 where it cannot be read). */
static uint64_t
rss_bytes(void)
{
    unsigned long long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    int ok = fscanf(f, "%llu %llu", &pages, &resident) == 2;
    fclose(f);
    return ok ? (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* The figures every record has. */
static void
write_common(struct jw *w, const struct reporter *r, const struct run_stats *st)
{
    uint64_t held = 0;
    tsock_producer_stat(r->producer, -1, TSOCK_STAT_HELD, &held);
    jw_u64(w, "batches", st->batches);
    jw_u64(w, "samples", st->samples);
    jw_u64(w, "epochs", st->epochs);
    jw_u64(w, "slots_in_use", held);
    jw_u64(w, "rss_bytes", rss_bytes());
    jw_u64(w, "max_rss_bytes", max_rss_bytes());
}

/* Ends a record: a newline, flushed so that a reader sees whole lines. A failure is reported
 * once (serving goes on; the final status says it). */
static void
end_record(struct reporter *r)
{
    fputc('\n', r->json);
    if ((fflush(r->json) != 0 || ferror(r->json)) && !r->json_failed) {
        r->json_failed = errno ? errno : EIO;
        fprintf(stderr, "tsock-producer: --stats-json %s: cannot write: %s\n", r->cfg->stats_path,
                strerror(r->json_failed));
    }
}

/* ---- the interval ---------------------------------------------------------------------------- */

/* The stages of docs/stats.md, in the order of struct reporter's last_stage_ns. */
enum { STAGE_READ, STAGE_CODEC, STAGE_RESAMPLE, STAGE_PUBLISH, STAGES };

struct rates {
    double images_s, mb_read_s, decode_ms, cpu_pct;
    double stage_ms[STAGES]; /* CPU ms per image in each stage over the interval */
};

/* The stages' CPU so far, in ns. */
static void
stage_ns(const struct reporter *r, uint64_t out[STAGES])
{
    out[STAGE_READ] = pipeline_stat(r->pipeline, TSOCK_PIPELINE_READ_CPU_NS);
    out[STAGE_CODEC] = pipeline_stat(r->pipeline, TSOCK_PIPELINE_CODEC_CPU_NS);
    out[STAGE_RESAMPLE] = pipeline_stat(r->pipeline, TSOCK_PIPELINE_RESAMPLE_CPU_NS);
    out[STAGE_PUBLISH] = r->publish_cpu_ns ? *r->publish_cpu_ns : 0;
}

static struct rates
interval_rates(struct reporter *r, const struct run_stats *st, double t, double dt)
{
    struct rates x = {0};
    double cpu = cpu_seconds();
    uint64_t bytes = pipeline_stat(r->pipeline, TSOCK_PIPELINE_BYTES_READ);
    uint64_t decode_ns = pipeline_stat(r->pipeline, TSOCK_PIPELINE_DECODE_NS);
    uint64_t images = st->samples - r->last_samples;

    x.images_s = (double)images / dt;
    x.mb_read_s = (double)(bytes - r->last_bytes) / dt / 1e6;
    x.decode_ms = images ? (double)(decode_ns - r->last_decode_ns) * 1e-6 / (double)images : 0;
    x.cpu_pct = 100.0 * (cpu - r->last_cpu) / dt;
    uint64_t stages[STAGES];
    stage_ns(r, stages);
    for (int i = 0; i < STAGES; i++) {
        x.stage_ms[i] =
            images ? (double)(stages[i] - r->last_stage_ns[i]) * 1e-6 / (double)images : 0;
        r->last_stage_ns[i] = stages[i];
    }
    r->last_t = t;
    r->last_cpu = cpu;
    r->last_samples = st->samples;
    r->last_bytes = bytes;
    r->last_decode_ns = decode_ns;
    return x;
}

static void
print_line(const struct reporter *r, const struct rates *x, const struct consumer_table *t)
{
    uint64_t held = 0;
    tsock_producer_stat(r->producer, -1, TSOCK_STAT_HELD, &held);
    char line[768];
    int n = snprintf(line, sizeof line,
                     "%7.0f img/s %6.1f MB/s read %5.2f ms/img decode cpu %4.0f%% slots %" PRIu64
                     "/%" PRIu64 " | ms/img read %.3f codec %.3f resample %.3f publish %.3f |",
                     x->images_s, x->mb_read_s, x->decode_ms, x->cpu_pct, held, r->cfg->slots,
                     x->stage_ms[STAGE_READ], x->stage_ms[STAGE_CODEC], x->stage_ms[STAGE_RESAMPLE],
                     x->stage_ms[STAGE_PUBLISH]);
    if (r->cfg->decoder == TSOCK_DECODER_GPU && n > 0 && (size_t)n < sizeof line)
        n += snprintf(line + n, sizeof line - (size_t)n,
                      " decoded gpu %" PRIu64 " cpu %" PRIu64 " |",
                      pipeline_stat(r->pipeline, TSOCK_PIPELINE_DECODED_GPU),
                      pipeline_stat(r->pipeline, TSOCK_PIPELINE_DECODED_CPU));
    for (size_t i = 0; i < t->count && n > 0 && (size_t)n < sizeof line; i++)
        if (t->recs[i].connected)
            n += snprintf(line + n, sizeof line - (size_t)n, " c%" PRIu64 " %.0f b/s held %" PRIu64,
                          t->recs[i].id, t->recs[i].rate, t->recs[i].held);
    /* \r and clear-to-end-of-line: the line rewrites itself in place. */
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
}

/* Hands the interval's figures to the library, which passes them on to tsock-stat. */
static void
publish_status(const struct reporter *r, const struct rates *x)
{
    char status[768];
    snprintf(status, sizeof status,
             "{\"dataset\": \"%s\", \"images_per_s\": %.1f, \"mb_read_per_s\": %.2f, "
             "\"decode_ms_per_image\": %.3f, \"cpu_percent\": %.1f, \"bad_files\": %" PRIu64
             ", \"replaced\": %" PRIu64 ", \"rss_bytes\": %" PRIu64 ", \"decoded_gpu\": %" PRIu64
             ", \"decoded_cpu\": %" PRIu64
             ", \"stage_cpu_ms_per_image\": {\"read\": %.4f, \"codec\": %.4f, "
             "\"resample\": %.4f, \"publish\": %.4f}}",
             r->cfg->dataset_name, x->images_s, x->mb_read_s, x->decode_ms, x->cpu_pct,
             pipeline_stat(r->pipeline, TSOCK_PIPELINE_BAD_FILES),
             pipeline_stat(r->pipeline, TSOCK_PIPELINE_REPLACED), rss_bytes(),
             pipeline_stat(r->pipeline, TSOCK_PIPELINE_DECODED_GPU),
             pipeline_stat(r->pipeline, TSOCK_PIPELINE_DECODED_CPU), x->stage_ms[STAGE_READ],
             x->stage_ms[STAGE_CODEC], x->stage_ms[STAGE_RESAMPLE], x->stage_ms[STAGE_PUBLISH]);
    tsock_producer_set_status(r->producer, status);
}

void
reporter_tick(struct reporter *r, const struct run_stats *st, struct consumer_table *t)
{
    double t_now = now_s(), dt = t_now - r->last_t;
    if (dt < r->cfg->status_interval_s)
        return;
    table_update(t, r->producer);
    for (size_t i = 0; i < t->count; i++) {
        struct consumer_rec *c = &t->recs[i];
        c->rate = (double)(c->released - c->released_before) / dt;
        c->released_before = c->released;
    }
    struct rates x = interval_rates(r, st, t_now, dt);
    publish_status(r, &x);
    if (r->tty && !r->cfg->quiet)
        print_line(r, &x, t);
    if (!r->json)
        return;
    struct jw w = {r->json, 1};
    jw_open(&w, NULL);
    jw_str(&w, "type", "interval");
    jw_num(&w, "t_s", t_now - r->t0);
    write_common(&w, r, st);
    jw_num(&w, "images_per_s", x.images_s);
    jw_num(&w, "mb_read_per_s", x.mb_read_s);
    jw_num(&w, "decode_ms_per_image", x.decode_ms);
    jw_num(&w, "cpu_percent", x.cpu_pct);
    jw_num(&w, "cpu_s", r->last_cpu); /* the process's CPU so far: a later record's difference
                                         is what the epochs between them cost */
    if (r->pipeline) {
        jw_u64(&w, "decoded_gpu", pipeline_stat(r->pipeline, TSOCK_PIPELINE_DECODED_GPU));
        jw_u64(&w, "decoded_cpu", pipeline_stat(r->pipeline, TSOCK_PIPELINE_DECODED_CPU));
    }
    jw_open(&w, "stage_cpu_ms_per_image");
    jw_num(&w, "read", x.stage_ms[STAGE_READ]);
    jw_num(&w, "codec", x.stage_ms[STAGE_CODEC]);
    jw_num(&w, "resample", x.stage_ms[STAGE_RESAMPLE]);
    jw_num(&w, "publish", x.stage_ms[STAGE_PUBLISH]);
    jw_close(&w);
    write_consumers(&w, t);
    jw_close(&w);
    end_record(r);
}

void
reporter_open(struct reporter *r, const struct config *cfg)
{
    r->cfg = cfg;
    r->tty = isatty(STDERR_FILENO);
    r->t0 = r->last_t = now_s();
    r->last_cpu = cpu_seconds();
}

int
reporter_open_json(struct reporter *r)
{
    if (!r->cfg->stats_path)
        return 0;
    r->json = fopen(r->cfg->stats_path, "w");
    return r->json ? 0 : -errno;
}

static void
write_final(struct reporter *r, const struct run_stats *st, const struct consumer_table *t)
{
    const struct config *cfg = r->cfg;
    struct jw w = {r->json, 1};

    jw_open(&w, NULL);
    jw_str(&w, "type", "final");
    jw_str(&w, "program", "tsock-producer");
    jw_str(&w, "version", tsock_version_string());
    jw_str(&w, "dataset", cfg->dataset_name);
    jw_str(&w, "endpoint", r->endpoint);
    jw_u64(&w, "batch_size", cfg->batch_size);
    jw_u64(&w, "slots", cfg->slots);
    jw_u64(&w, "dataset_samples", r->pipeline ? tsock_pipeline_samples(r->pipeline) : cfg->samples);
    jw_u64(&w, "image_size", cfg->image_size);
    jw_u64(&w, "epochs_requested", cfg->epochs);
    jw_u64(&w, "seed", cfg->seed);
    write_common(&w, r, st);
    jw_num(&w, "cpu_s", st->cpu_s);
    jw_num(&w, "wall_s", st->wall_s);
    jw_u64(&w, "consumers_joined", st->joined);
    jw_u64(&w, "consumers_lost", st->lost);
    jw_u64(&w, "bad_messages", st->bad_messages);
    jw_num(&w, "acquire_wait_s", (double)st->wait_ns * 1e-9);
    jw_num(&w, "publish_cpu_s", (double)st->publish_cpu_ns * 1e-9);
    write_threads(&w, &st->threads);
    jw_bool(&w, "finished", st->finished);
    jw_str(&w, "stopped_by_signal",
           !st->stopped_by            ? NULL
           : st->stopped_by == SIGINT ? "SIGINT"
                                      : "SIGTERM");
    jw_str(&w, "error", st->error);
    if (r->pipeline)
        write_pipeline(&w, r->pipeline);
    write_consumers(&w, t);
    jw_close(&w);
    end_record(r);
}

int
reporter_close(struct reporter *r, const struct run_stats *st, const struct consumer_table *t)
{
    if (r->tty && !r->cfg->quiet && r->last_t > r->t0)
        fputc('\n', stderr); /* end the live line */
    if (!r->json)
        return 0;
    write_final(r, st, t);
    int err = r->json_failed ? -r->json_failed : 0;
    if (fclose(r->json) != 0 && err == 0)
        err = -errno;
    r->json = NULL;
    return err;
}
