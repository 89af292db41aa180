/* tsock-producer: serves a dataset to tsock consumers through a rolling buffer of slots.
 *
 * Datasets: "synthetic" (see synthetic.h: deterministic samples that tsock-consume checks byte
 * by byte) and the image datasets "imagenet", "folder" and "list", which the library's image
 * pipeline (tsock/pipeline.h) reads, decodes and augments on worker threads straight into the
 * slots. The library's sampler decides which sample ids go into each batch; this program fills
 * the slots it is handed, publishes them and reports (producer_report.h).
 *
 * Exit status: 0 after a complete run or a SIGINT/SIGTERM (at any time, the index scan
 * included), 1 on an error, 2 on a bad command line.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "producer_options.h"
#include "producer_report.h"
#include "synthetic.h"
#include "tsock/pipeline.h"
#include "tsock/tsock.h"

#define PROG "tsock-producer"

/* How long one blocking library call may last before the loop looks at the signal flag. */
#define POLL_MS 200
/* How long to wait, after the last batch, for consumers to release their batches or leave. */
#define DRAIN_MS 10000

static volatile sig_atomic_t g_signal;
/* What the signal handler cancels: the pipeline while it indexes (a scan of a cold network
 * disk takes minutes), the producer's blocked wait while it serves. Both cancels are
 * async-signal-safe. */
static tsock_pipeline *_Atomic g_indexing;
static tsock_producer *_Atomic g_serving;

static void
on_signal(int sig)
{
    g_signal = sig;
    tsock_pipeline *pl = atomic_load(&g_indexing);
    if (pl)
        tsock_pipeline_cancel(pl);
    tsock_producer *p = atomic_load(&g_serving);
    if (p)
        tsock_producer_cancel(p);
}

static void
log_to_stderr(void *user, int level, const char *message)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    const char *name = level >= 0 && level <= 3 ? names[level] : "log";
    fprintf(stderr, PROG ": [%s] %s\n", name, message);
}

static const char *
lib_error(const char *what, int rc)
{
    fprintf(stderr, PROG ": %s: %s\n", what, tsock_strerror(rc));
    return tsock_strerror(rc);
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- setup --------------------------------------------------------------------------------- */

/* Opens the image pipeline of an image dataset: indexes it (or loads the index cache) and
 * starts the workers. Returns 0 or the library's error (already reported). */
static int
open_pipeline(const struct config *cfg, tsock_pipeline **out)
{
    char *path = dataset_path(cfg);
    if (!path)
        return -ENOMEM;
    int source = cfg->dataset == DATASET_LIST         ? TSOCK_SOURCE_LIST
                 : cfg->dataset == DATASET_WEBDATASET ? TSOCK_SOURCE_WEBDATASET
                                                      : TSOCK_SOURCE_FOLDER;
    tsock_pipeline *pl = NULL;
    /* A missing nvJPEG is one message at start, before a long index scan (issue 20). */
    int rc = cfg->decoder == TSOCK_DECODER_GPU ? tsock_cuda_decoder_check(cfg->device) : 0;
    if (rc < 0) {
        fprintf(stderr, PROG ": --decoder gpu: %s\n",
                rc == -ENOPKG ? "nvJPEG is not available (see the log above for what to install)"
                              : tsock_strerror(rc));
        free(path);
        *out = NULL;
        return rc;
    }
    rc = tsock_pipeline_create(&pl, source, path);
    if (rc == 0 && source == TSOCK_SOURCE_WEBDATASET)
        rc = tsock_pipeline_set_shard_options(pl, cfg->val ? "val" : "train", cfg->label_key);
    if (rc == 0 &&
        (rc = tsock_pipeline_set_preset(pl, cfg->val ? TSOCK_PRESET_VAL : TSOCK_PRESET_TRAIN)) ==
            0 &&
        (rc = tsock_pipeline_set_image_size(pl, (int)cfg->image_size)) == 0 &&
        (rc = tsock_pipeline_set_crop_scale(pl, cfg->scale_min, cfg->scale_max)) == 0 &&
        (rc = tsock_pipeline_set_flip(pl, cfg->flip)) == 0 &&
        (rc = tsock_pipeline_set_workers(pl, cfg->workers)) == 0 &&
        (rc = tsock_pipeline_set_io(pl, cfg->io_mode, cfg->io_depth)) == 0 &&
        (rc = tsock_pipeline_set_seed(pl, cfg->seed)) == 0 &&
        (rc = tsock_pipeline_set_on_error(pl, cfg->on_error)) == 0 &&
        (rc = tsock_pipeline_set_decoder(pl, cfg->decoder)) == 0 &&
        (rc = tsock_pipeline_set_index_cache(pl, cfg->index_cache)) == 0 &&
        (rc = tsock_pipeline_set_entry_points(pl, cfg->entry_points_mb << 20)) == 0 &&
        (rc = augment_options_apply(&cfg->augment, pl)) == 0) {
        atomic_store(&g_indexing, pl);
        if (g_signal) /* came before the handler could see the pipeline */
            tsock_pipeline_cancel(pl);
        rc = tsock_pipeline_open(pl);
        atomic_store(&g_indexing, NULL);
    }
    if (rc == TSOCK_E_CANCELLED) {
        fprintf(stderr, PROG ": stopped by %s while indexing %s\n",
                g_signal == SIGINT ? "SIGINT" : "SIGTERM", path);
        tsock_pipeline_destroy(pl);
        pl = NULL;
    } else if (rc < 0) {
        fprintf(stderr, PROG ": cannot open the dataset %s: %s\n", path,
                rc == -ENOENT && source == TSOCK_SOURCE_WEBDATASET
                    ? "a shard is missing, or none holds a usable sample (see the log above)"
                : rc == -ENOENT ? "no usable image file there (see the log above)"
                                : tsock_strerror(rc));
        tsock_pipeline_destroy(pl);
        pl = NULL;
    }
    free(path);
    *out = pl;
    return rc;
}

/* The batch layout: the pipeline's tensors, or the synthetic dataset's same three. */
static int
make_layout(const struct config *cfg, tsock_pipeline *pl, tsock_layout **out)
{
    int64_t shape[3] = {(int64_t)cfg->image_size, (int64_t)cfg->image_size, 3};
    int rc = tsock_layout_create(out);
    if (rc < 0)
        return rc;
    if (pl)
        rc = tsock_pipeline_add_tensors(pl, *out);
    else if ((rc = tsock_layout_add(*out, "image", TSOCK_UINT8, 3, shape)) >= 0 &&
             (rc = tsock_layout_add(*out, "label", TSOCK_INT64, 0, NULL)) >= 0)
        rc = tsock_layout_add(*out, "index", TSOCK_INT64, 0, NULL);
    return rc < 0 ? rc : 0;
}

/* --device, --output, --layout, --normalize: the ring on a GPU or in host memory, and what the
 * image becomes there (converted once, for every consumer). Returns 0 or the error (reported). */
static int
set_device(const struct config *cfg, tsock_producer *p)
{
    const char *what = "--device";
    int rc = 0;
    if (cfg->device >= 0)
        rc = tsock_producer_set_device(p, cfg->device);
    if (rc == 0 && cfg->convert) {
        what = "--output/--layout";
        rc = tsock_producer_set_output(p, "image", cfg->output_dtype, cfg->layout);
    }
    if (rc == 0 && cfg->normalize) {
        what = "--normalize";
        rc = tsock_producer_set_normalize(p, "image", 3, cfg->mean, cfg->std);
    }
    if (rc < 0)
        lib_error(what, rc);
    return rc;
}

/* --shuffle shards: the sampler reads --shard-window shards at a time. */
static int
set_shard_order(const struct config *cfg, tsock_pipeline *pl, tsock_producer *p, const char **what)
{
    uint32_t shards = tsock_pipeline_shards(pl);
    uint64_t *starts = calloc((size_t)shards + 1, sizeof *starts);
    *what = "--shuffle shards";
    int rc = starts ? tsock_pipeline_shard_starts(pl, starts) : -ENOMEM;
    if (rc == 0)
        rc = tsock_producer_set_shard_order(p, starts, shards, cfg->shard_window);
    free(starts);
    return rc;
}

/* The dataset's class names (a folder dataset's), announced to every consumer: a training
 * script reads them as loader.dataset.classes. A dataset whose names do not fit in a WELCOME
 * is served without them, said out loud. Returns 0 or the error (reported). */
static int
set_classes(const tsock_pipeline *pl, tsock_producer *p)
{
    uint32_t count = pl ? tsock_pipeline_classes(pl) : 0;
    if (count == 0 || !tsock_pipeline_class_name(pl, 0))
        return 0;
    const char **names = calloc(count, sizeof *names);
    if (!names) {
        lib_error("class names", -ENOMEM);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < count; i++)
        names[i] = tsock_pipeline_class_name(pl, i);
    int rc = tsock_producer_set_classes(p, count, names);
    free(names);
    if (rc == -E2BIG || rc == -EINVAL) {
        fprintf(stderr,
                "tsock-producer: warning: the %u class names are not announced to consumers "
                "(%s); labels stay 0..%u\n",
                count,
                rc == -E2BIG ? "more than 32768 bytes"
                             : "a name longer than 255 bytes or with "
                               "a control character",
                count - 1);
        return 0;
    }
    if (rc < 0)
        lib_error("tsock_producer_set_classes", rc);
    return rc;
}

/* Creates and starts the producer for `samples` samples. Returns 0 or the error (reported). */
static int
start_producer(const struct config *cfg, tsock_pipeline *pl, uint64_t samples, tsock_producer **out)
{
    tsock_layout *layout = NULL;
    tsock_producer *p = NULL;
    int rc = make_layout(cfg, pl, &layout);
    if (rc < 0) {
        lib_error("batch layout", rc);
        tsock_layout_destroy(layout);
        return rc;
    }
    rc = tsock_producer_create(&p, cfg->endpoint, layout, (uint32_t)cfg->batch_size,
                               (uint32_t)cfg->slots);
    tsock_layout_destroy(layout);
    if (rc < 0) {
        lib_error("tsock_producer_create", rc);
        return rc;
    }
    const char *what = "tsock_producer_set_heartbeat";
    if (cfg->heartbeat_ms || cfg->heartbeat_timeout_ms)
        rc = tsock_producer_set_heartbeat(p, cfg->heartbeat_ms ? cfg->heartbeat_ms : 250,
                                          cfg->heartbeat_timeout_ms ? cfg->heartbeat_timeout_ms
                                                                    : 3000);
    if (rc == 0 && cfg->curve_secret_key) {
        what = "--curve-secret-key/--curve-authorized-keys";
        rc = tsock_producer_set_curve(p, cfg->curve_secret_key, cfg->curve_authorized_keys);
    }
    if (rc == 0 && cfg->insecure_open_to_network) {
        what = "--insecure-open-to-network";
        rc = tsock_producer_set_insecure(p, 1);
    }
    if (rc == 0 && (rc = set_classes(pl, p)) < 0) {
        tsock_producer_destroy(p);
        return rc;
    }
    if (rc == 0 && (rc = set_device(cfg, p)) < 0) {
        tsock_producer_destroy(p);
        return rc;
    }
    if (rc == 0) {
        what = "tsock_producer_set_sampler";
        rc = tsock_producer_set_sampler(p, samples, cfg->seed, cfg->epochs);
    }
    if (rc == 0 && pl && cfg->shuffle_shards)
        rc = set_shard_order(cfg, pl, p, &what);
    if (rc == 0 && cfg->nodes > 1) {
        what = "tsock_producer_set_nodes";
        rc = tsock_producer_set_nodes(p, cfg->nodes, cfg->node_rank);
        if (rc == 0 && !cfg->quiet)
            fprintf(stderr, "tsock-producer: serving the share of node %u of %u (%s)\n",
                    cfg->node_rank, cfg->nodes, cfg->nodes_from);
    }
    if (rc == 0) {
        what = cfg->device >= 0 ? "starting on the GPU" : "tsock_producer_start";
        rc = tsock_producer_start(p);
    }
    if (rc < 0) {
        lib_error(what, rc);
        if (rc == TSOCK_E_INSECURE)
            fprintf(stderr,
                    PROG ": %s can be reached by other hosts or users: give "
                         "--curve-secret-key and --curve-authorized-keys (docs/security.md), "
                         "bind one address, tcp://127.0.0.1:PORT, or an ipc:// socket file, "
                         "or accept the risk with --insecure-open-to-network\n",
                    cfg->endpoint);
        tsock_producer_destroy(p);
        return rc;
    }
    *out = p;
    return 0;
}

static void
announce(const struct config *cfg, const char *endpoint, tsock_pipeline *pl, uint64_t samples)
{
    char epochs[32] = "endless";
    if (cfg->epochs)
        snprintf(epochs, sizeof(epochs), "%" PRIu64, cfg->epochs);
    char what[160];
    if (pl) {
        uint64_t workers = 0;
        tsock_pipeline_stat(pl, TSOCK_PIPELINE_WORKERS, &workers);
        snprintf(what, sizeof what, "%s (%s preset, %u classes, %" PRIu64 " workers)",
                 cfg->dataset_name, cfg->val ? "val" : "train", tsock_pipeline_classes(pl),
                 workers);
    } else {
        snprintf(what, sizeof what, "synthetic");
    }
    fprintf(stderr,
            PROG ": serving %s: %s, %" PRIu64 " samples of %" PRIu64 "x%" PRIu64
                 "x3, batch %" PRIu64 ", %" PRIu64 " slots, epochs %s\n",
            endpoint ? endpoint : "?", what, samples, cfg->image_size, cfg->image_size,
            cfg->batch_size, cfg->slots, epochs);
    char augment[256];
    if (pl && !cfg->val && augment_options_describe(&cfg->augment, augment, sizeof augment))
        fprintf(stderr, PROG ": after the crop and flip: %s\n", augment);
}

/* ---- serving ------------------------------------------------------------------------------- */

struct server {
    const struct config *cfg;
    tsock_producer *p;
    tsock_pipeline *pl;
    uint64_t samples;       /* in the dataset */
    uint64_t epoch_samples; /* in one epoch: the dataset, or this node's share of it */
    struct run_stats st;
    struct consumer_table table;
    struct reporter rep;
    int status;
};

/* Fills every planned sample of an acquired slot. Returns 0 or an error (reported). */
static int
fill_slot(struct server *s, tsock_slot *slot, uint32_t n)
{
    if (s->pl) {
        int rc = tsock_pipeline_fill(s->pl, slot);
        if (rc < 0)
            s->st.error = lib_error("loading a batch", rc);
        return rc < 0 ? rc : 0;
    }
    const uint64_t *ids = tsock_slot_sample_ids(slot);
    size_t image_bytes = (size_t)s->cfg->image_size * (size_t)s->cfg->image_size * 3;
    uint8_t *images = tsock_slot_data(slot, 0);
    int64_t *labels = tsock_slot_data(slot, 1);
    int64_t *indices = tsock_slot_data(slot, 2);
    for (uint32_t i = 0; i < n; i++)
        tsock_synth_fill(ids[i], images + (size_t)i * image_bytes, image_bytes, &labels[i],
                         &indices[i]);
    return 0;
}

/* --wait-consumers: nothing is published before that many consumers joined and would receive
 * a batch (a paused one, such as a job that joined and has not read yet, counts once it reads:
 * the jobs of a sweep then start their windows together). */
static void
wait_for_consumers(struct server *s)
{
    int want = (int)s->cfg->wait_consumers;
    while (!g_signal && want > 0) {
        int rc = tsock_producer_wait_consumers(s->p, want, POLL_MS);
        if (rc >= want)
            break;
        if (rc < 0 && rc != -ETIMEDOUT && rc != -EINTR && rc != TSOCK_E_CANCELLED) {
            s->st.error = lib_error("tsock_producer_wait_consumers", rc);
            s->status = 1;
            return;
        }
        reporter_tick(&s->rep, &s->st, &s->table);
    }
    if (!g_signal && want > 0 && !s->cfg->quiet)
        fprintf(stderr, PROG ": %d consumers joined, publishing\n", want);
}

/* CPU time of the calling thread, in ns: the publishing stage's figure. */
static uint64_t
thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* tsock_producer_publish, its CPU time counted as publishing. */
static int
publish_timed(struct server *s, tsock_slot *slot, uint32_t n)
{
    uint64_t c0 = thread_cpu_ns();
    int rc = tsock_producer_publish(s->p, slot, n);
    s->st.publish_cpu_ns += thread_cpu_ns() - c0;
    return rc;
}

/* Acquires, fills and publishes one batch. Returns 1 to go on, 0 when the stream ended or an
 * error stopped the run. */
static int
serve_one(struct server *s, uint64_t *cur_epoch, uint64_t *pos_in_epoch)
{
    /* A batch published while nobody listens would be lost to every later consumer's
     * coverage, so wait for someone first, unless there is nothing left to publish. Ranks
     * waiting for the rest of their group are connected but receive nothing: the library's
     * count leaves them out, so it returns at once only when a batch would reach someone. */
    if (!tsock_producer_stream_ended(s->p)) {
        int rc = tsock_producer_wait_consumers(s->p, 1, POLL_MS);
        if (rc < 0 && rc != -ETIMEDOUT && rc != -EINTR && rc != TSOCK_E_CANCELLED) {
            s->st.error = lib_error("tsock_producer_wait_consumers", rc);
            s->status = 1;
            return 0;
        }
        if (rc < 1)
            return 1;
    }
    tsock_slot *slot = NULL;
    uint64_t c0 = thread_cpu_ns();
    int rc = tsock_producer_acquire(s->p, POLL_MS, &slot);
    s->st.publish_cpu_ns += thread_cpu_ns() - c0;
    if (rc == -ETIMEDOUT || rc == -EINTR || rc == TSOCK_E_CANCELLED)
        return 1; /* the loop looks at the signal flag */
    if (rc == TSOCK_E_END) {
        s->st.finished = 1;
        return 0;
    }
    if (rc < 0) {
        s->st.error = lib_error("tsock_producer_acquire", rc);
        s->status = 1;
        return 0;
    }
    uint32_t n = tsock_slot_planned(slot);
    uint64_t epoch = tsock_slot_epoch(slot);
    if (fill_slot(s, slot, n) < 0 || (rc = publish_timed(s, slot, n)) < 0) {
        if (rc < 0)
            s->st.error = lib_error("tsock_producer_publish", rc);
        s->status = 1;
        return 0;
    }
    s->st.batches++;
    s->st.samples += n;
    if (epoch != *cur_epoch) {
        *cur_epoch = epoch;
        *pos_in_epoch = 0;
    }
    *pos_in_epoch += n;
    if (*pos_in_epoch == s->epoch_samples)
        s->st.epochs++;
    return 1;
}

/* After the last batch: tells the consumers the stream ended and gives them time to work
 * through what they were sent, so their last releases (or goodbyes) show in the statistics. */
static void
drain(struct server *s)
{
    tsock_producer_finish(s->p);
    double deadline = now_s() + DRAIN_MS / 1000.0;
    while (!g_signal && now_s() < deadline) {
        if (table_update(&s->table, s->p) <= 0)
            break;
        reporter_tick(&s->rep, &s->st, &s->table);
        sleep_ms(20);
    }
}

static void
collect_final(struct server *s)
{
    uint64_t v;
    table_update(&s->table, s->p);
    if (tsock_producer_stat(s->p, -1, TSOCK_STAT_JOINED, &v) == 0)
        s->st.joined = v;
    if (tsock_producer_stat(s->p, -1, TSOCK_STAT_LOST, &v) == 0)
        s->st.lost = v;
    if (tsock_producer_stat(s->p, -1, TSOCK_STAT_BAD_MESSAGES, &v) == 0)
        s->st.bad_messages = v;
    if (tsock_producer_stat(s->p, -1, TSOCK_STAT_WAIT_NS, &v) == 0)
        s->st.wait_ns = v;
    s->st.stopped_by = g_signal;
    thread_cpu_read(&s->st.threads); /* while the service thread still runs */
}

static void
serve(struct server *s)
{
    uint64_t cur_epoch = UINT64_MAX, pos_in_epoch = 0;

    wait_for_consumers(s);
    while (!g_signal && s->status == 0 && serve_one(s, &cur_epoch, &pos_in_epoch)) {
        /* After every publish, so the figures of a consumer that leaves right after its last
         * batch are current. */
        table_update(&s->table, s->p);
        reporter_tick(&s->rep, &s->st, &s->table);
    }
    if (s->st.finished && !g_signal)
        drain(s);
    collect_final(s);
}

/* ---- main ---------------------------------------------------------------------------------- */

/* SIGINT and SIGTERM set a flag, which the loop polls between library calls that never block
 * longer than POLL_MS, and cancel what the program waits for (see on_signal); no SA_RESTART,
 * so a blocked call returns early. They are blocked while the library starts its producer
 * threads (which inherit the mask), so they reach this one; the index scan runs unblocked, so
 * a signal cuts a hung system call of this thread short (the scan's helper threads and the
 * pipeline's workers block every signal themselves). */
static void
setup_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void
block_signals(sigset_t *old)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, old);
}

int
main(int argc, char **argv)
{
    struct config cfg;
    struct server s = {.cfg = &cfg};
    sigset_t old;

    cli_init(PROG);
    parse_options(argc, argv, &cfg);
    tsock_set_log(log_to_stderr, NULL, cfg.verbose ? TSOCK_LOG_DEBUG : TSOCK_LOG_WARN);
    reporter_open(&s.rep, &cfg);
    setup_signals();
    double t0 = now_s();
    s.samples = cfg.samples;
    if (cfg.dataset != DATASET_SYNTHETIC) {
        int rc = open_pipeline(&cfg, &s.pl);
        if (rc == TSOCK_E_CANCELLED)
            return 0; /* as a signal at any later time */
        if (rc < 0)
            return 1;
        s.samples = tsock_pipeline_samples(s.pl);
    }
    if (g_signal) {
        tsock_pipeline_destroy(s.pl);
        return 0; /* the scan had just finished */
    }
    block_signals(&old);
    int rc = start_producer(&cfg, s.pl, s.samples, &s.p);
    if (rc == 0)
        atomic_store(&g_serving, s.p);
    s.epoch_samples = (s.samples + cfg.nodes - 1) / cfg.nodes; /* tsock_producer_set_nodes */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0) {
        tsock_pipeline_destroy(s.pl);
        return 1;
    }
    /* Only now: the file may belong to a producer already serving this endpoint, which this
     * one, failing to start, must not truncate. */
    rc = reporter_open_json(&s.rep);
    if (rc < 0) {
        fprintf(stderr, PROG ": --stats-json: cannot open '%s': %s\n", cfg.stats_path,
                strerror(-rc));
        tsock_producer_destroy(s.p);
        tsock_pipeline_destroy(s.pl);
        return 1;
    }
    /* The endpoint string belongs to the producer; keep a copy for the statistics. */
    char *endpoint = strdup(tsock_producer_endpoint(s.p));
    s.rep.producer = s.p;
    s.rep.pipeline = s.pl;
    s.rep.publish_cpu_ns = &s.st.publish_cpu_ns;
    s.rep.endpoint = endpoint;
    if (!cfg.quiet)
        announce(&cfg, endpoint, s.pl, s.samples);

    serve(&s);

    /* Tells the consumers (stream ended, or producer stopped) and removes the ring and the
     * socket file. */
    atomic_store(&g_serving, NULL);
    tsock_producer_destroy(s.p);
    s.rep.producer = NULL;
    s.st.wall_s = now_s() - t0;
    s.st.cpu_s = cpu_seconds();
    rc = reporter_close(&s.rep, &s.st, &s.table);
    if (rc < 0) {
        fprintf(stderr, PROG ": --stats-json: cannot write '%s': %s\n", cfg.stats_path,
                strerror(-rc));
        s.status = 1;
    }
    if (!cfg.quiet)
        fprintf(stderr,
                PROG ": %s: %" PRIu64 " batches, %" PRIu64 " samples, %" PRIu64
                     " epochs in %.2f s (cpu %.2f s); consumers joined %" PRIu64 ", lost %" PRIu64
                     ", bad messages %" PRIu64 "\n",
                g_signal ? "stopped by signal" : (s.st.finished ? "finished" : "ended"),
                s.st.batches, s.st.samples, s.st.epochs, s.st.wall_s, s.st.cpu_s, s.st.joined,
                s.st.lost, s.st.bad_messages);
    tsock_pipeline_destroy(s.pl);
    free(endpoint);
    free(s.table.recs);
    return s.status;
}
