/* tsock-producer: serves a dataset to tsock consumers through a rolling buffer of slots.
 *
 * For now the only dataset is "synthetic" (see synthetic.h): deterministic images, labels and
 * indices that tsock-consume checks byte by byte. The library's sampler decides which sample
 * ids go into each batch; this program only fills the slots it is handed.
 *
 * Exit status: 0 after a complete run or a SIGINT/SIGTERM, 1 on a library error, 2 on a bad
 * command line.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "synthetic.h"
#include "cli.h"
#include "tsock/tsock.h"

#define PROG "tsock-producer"

/* How long one blocking library call may last before the loop looks at the signal flag. */
#define POLL_MS 200
/* How long to wait, after the last batch, for consumers to release their batches or leave. */
#define DRAIN_MS 10000

static volatile sig_atomic_t g_signal;

static void
on_signal(int sig)
{
    g_signal = sig;
}

static void
log_to_stderr(void *user, int level, const char *message)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    const char *name = level >= 0 && level <= 3 ? names[level] : "log";
    fprintf(stderr, PROG ": [%s] %s\n", name, message);
}

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " --dataset synthetic [options]\n"
            "\n"
            "Serves batches to tsock consumers through a rolling buffer of shared-memory slots.\n"
            "\n"
            "  --dataset NAME             dataset to serve; supported: synthetic\n"
            "  --endpoint ADDR            ZeroMQ endpoint (ipc:///path or tcp://host:port);\n"
            "                             default: the per-user ipc endpoint\n"
            "  --batch-size N             samples per batch (default 64)\n"
            "  --slots N                  slots in the ring, 2 or more (default 8)\n"
            "  --samples N                samples in the dataset (default 4096)\n"
            "  --image-size N             images are N x N x 3 uint8 (default 32)\n"
            "  --epochs N                 epochs to serve, 0 = forever (default 1)\n"
            "  --seed N                   shuffling seed (default 0)\n"
            "  --wait-consumers N         publish nothing until N consumers joined (default 0)\n"
            "  --stats-json FILE          write final statistics as JSON to FILE\n"
            "  --heartbeat-ms N           heartbeat interval (library default 250)\n"
            "  --heartbeat-timeout-ms N   silence after which a consumer is dropped and its\n"
            "                             slots reclaimed (library default 3000)\n"
            "  --quiet                    print only errors and warnings\n"
            "  --verbose                  print every library log line\n"
            "  --help                     show this help\n"
            "\n"
            "Batches hold: image uint8 [B,N,N,3], label int64 [B], index int64 [B] (sample id).\n"
            "Exit status: 0 done or stopped by SIGINT/SIGTERM, 1 library error, 2 bad usage.\n");
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double
cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* ---- per-consumer figures ---------------------------------------------------------------- */

/* The library lists only the consumers connected now, so the last figures of every consumer
 * that ever joined are kept here, by id, for the final statistics. */
struct consumer_rec {
    uint64_t id, pid, batches, samples, released, held, bad_messages;
    int connected;
};

struct consumer_table {
    struct consumer_rec *recs;
    size_t count, cap;
};

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

/* Samples the library's per-consumer statistics into the table. Returns the number of connected
 * consumers that still hold slots, or -1 when the list could not be read. */
static int
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

/* ---- final statistics -------------------------------------------------------------------- */

struct run_stats {
    uint64_t batches, samples, epochs;
    uint64_t joined, lost, bad_messages, wait_ns;
    double wall_s, cpu_s;
    int finished;      /* the sampler issued every epoch and finish was called */
    int stopped_by;    /* signal number, or 0 */
    const char *error; /* NULL, or the text of the error that ended the run */
};

static void
json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

struct config {
    const char *endpoint;
    const char *stats_path;
    uint64_t batch_size, slots, samples, image_size, epochs, seed, wait_consumers;
    int heartbeat_ms, heartbeat_timeout_ms;
    int quiet, verbose;
};

static int
write_stats(const struct config *cfg, const char *endpoint, const struct run_stats *st,
            const struct consumer_table *t)
{
    size_t len = strlen(cfg->stats_path);
    char *tmp = malloc(len + 32);
    if (!tmp)
        return -ENOMEM;
    snprintf(tmp, len + 32, "%s.tmp.%ld", cfg->stats_path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int err = -errno;
        free(tmp);
        return err;
    }
    fprintf(f, "{\n  \"program\": \"" PROG "\",\n  \"version\": ");
    json_string(f, tsock_version_string());
    fprintf(f, ",\n  \"dataset\": \"synthetic\",\n  \"endpoint\": ");
    json_string(f, endpoint ? endpoint : "");
    fprintf(f,
            ",\n  \"batch_size\": %" PRIu64 ",\n  \"slots\": %" PRIu64
            ",\n  \"dataset_samples\": %" PRIu64 ",\n  \"image_size\": %" PRIu64
            ",\n  \"epochs_requested\": %" PRIu64 ",\n  \"seed\": %" PRIu64 ",\n",
            cfg->batch_size, cfg->slots, cfg->samples, cfg->image_size, cfg->epochs, cfg->seed);
    fprintf(f,
            "  \"batches\": %" PRIu64 ",\n  \"samples\": %" PRIu64 ",\n  \"epochs\": %" PRIu64
            ",\n  \"cpu_s\": %.6f,\n  \"wall_s\": %.6f,\n  \"consumers_joined\": %" PRIu64
            ",\n  \"consumers_lost\": %" PRIu64 ",\n  \"bad_messages\": %" PRIu64
            ",\n  \"acquire_wait_s\": %.6f,\n  \"finished\": %s,\n  \"stopped_by_signal\": ",
            st->batches, st->samples, st->epochs, st->cpu_s, st->wall_s, st->joined, st->lost,
            st->bad_messages, (double)st->wait_ns * 1e-9, st->finished ? "true" : "false");
    if (st->stopped_by)
        json_string(f, st->stopped_by == SIGINT ? "SIGINT" : "SIGTERM");
    else
        fputs("null", f);
    fputs(",\n  \"error\": ", f);
    if (st->error)
        json_string(f, st->error);
    else
        fputs("null", f);
    fputs(",\n  \"consumers\": [", f);
    for (size_t i = 0; i < t->count; i++) {
        const struct consumer_rec *r = &t->recs[i];
        fprintf(f,
                "%s\n    {\"id\": %" PRIu64 ", \"pid\": %" PRIu64 ", \"batches\": %" PRIu64
                ", \"samples\": %" PRIu64 ", \"released\": %" PRIu64 ", \"held\": %" PRIu64
                ", \"bad_messages\": %" PRIu64 ", \"connected\": %s}",
                i ? "," : "", r->id, r->pid, r->batches, r->samples, r->released, r->held,
                r->bad_messages, r->connected ? "true" : "false");
    }
    fputs(t->count ? "\n  ]\n}\n" : "]\n}\n", f);
    int err = ferror(f) ? -EIO : 0;
    if (fclose(f) != 0 && err == 0)
        err = -errno;
    if (err == 0 && rename(tmp, cfg->stats_path) != 0)
        err = -errno;
    if (err != 0)
        unlink(tmp);
    free(tmp);
    return err;
}

/* ---- main -------------------------------------------------------------------------------- */

enum {
    OPT_DATASET = 256,
    OPT_ENDPOINT,
    OPT_BATCH_SIZE,
    OPT_SLOTS,
    OPT_SAMPLES,
    OPT_IMAGE_SIZE,
    OPT_EPOCHS,
    OPT_SEED,
    OPT_WAIT_CONSUMERS,
    OPT_STATS_JSON,
    OPT_HEARTBEAT_MS,
    OPT_HEARTBEAT_TIMEOUT_MS,
    OPT_QUIET,
    OPT_VERBOSE,
    OPT_HELP
};

static void
parse_args(int argc, char **argv, struct config *cfg)
{
    static const struct option longopts[] = {
        {"dataset", required_argument, NULL, OPT_DATASET},
        {"endpoint", required_argument, NULL, OPT_ENDPOINT},
        {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
        {"slots", required_argument, NULL, OPT_SLOTS},
        {"samples", required_argument, NULL, OPT_SAMPLES},
        {"image-size", required_argument, NULL, OPT_IMAGE_SIZE},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"wait-consumers", required_argument, NULL, OPT_WAIT_CONSUMERS},
        {"stats-json", required_argument, NULL, OPT_STATS_JSON},
        {"heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT_MS},
        {"heartbeat-timeout-ms", required_argument, NULL, OPT_HEARTBEAT_TIMEOUT_MS},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"verbose", no_argument, NULL, OPT_VERBOSE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0}};
    const char *dataset = NULL;

    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":hqv", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case OPT_DATASET:
            dataset = optarg;
            break;
        case OPT_ENDPOINT:
            if (optarg[0] == '\0')
                cli_bad_usage("--endpoint: the endpoint must not be empty");
            cfg->endpoint = optarg;
            break;
        case OPT_BATCH_SIZE:
            cfg->batch_size = cli_parse_u64("batch-size", optarg, 1, 1u << 20);
            break;
        case OPT_SLOTS:
            cfg->slots = cli_parse_u64("slots", optarg, 2, 1024);
            break;
        case OPT_SAMPLES:
            cfg->samples = cli_parse_u64("samples", optarg, 1, UINT64_C(1) << 32);
            break;
        case OPT_IMAGE_SIZE:
            cfg->image_size = cli_parse_u64("image-size", optarg, 1, 8192);
            break;
        case OPT_EPOCHS:
            cfg->epochs = cli_parse_u64("epochs", optarg, 0, UINT64_C(1) << 40);
            break;
        case OPT_SEED:
            cfg->seed = cli_parse_u64("seed", optarg, 0, UINT64_MAX);
            break;
        case OPT_WAIT_CONSUMERS:
            cfg->wait_consumers = cli_parse_u64("wait-consumers", optarg, 0, 1024);
            break;
        case OPT_STATS_JSON:
            if (optarg[0] == '\0')
                cli_bad_usage("--stats-json: the file name must not be empty");
            cfg->stats_path = optarg;
            break;
        case OPT_HEARTBEAT_MS:
            cfg->heartbeat_ms = (int)cli_parse_u64("heartbeat-ms", optarg, 1, 600000);
            break;
        case OPT_HEARTBEAT_TIMEOUT_MS:
            cfg->heartbeat_timeout_ms = (int)cli_parse_u64("heartbeat-timeout-ms", optarg, 1, 3600000);
            break;
        case 'q':
        case OPT_QUIET:
            cfg->quiet = 1;
            break;
        case 'v':
        case OPT_VERBOSE:
            cfg->verbose = 1;
            break;
        case 'h':
        case OPT_HELP:
            usage(stdout);
            exit(0);
        case ':':
            cli_bad_usage("%s: missing value", argv[optind - 1]);
            break;
        default:
            if (optopt && optopt < 256)
                cli_bad_usage("unknown option '-%c'", optopt);
            cli_bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        cli_bad_usage("unexpected argument '%s' (every setting is an --option)", argv[optind]);
    if (!dataset)
        cli_bad_usage("--dataset is required; supported: synthetic");
    if (strcmp(dataset, "synthetic") != 0)
        cli_bad_usage("--dataset: unknown dataset '%s'; supported: synthetic", dataset);
    if (cfg->heartbeat_ms || cfg->heartbeat_timeout_ms) {
        int interval = cfg->heartbeat_ms ? cfg->heartbeat_ms : 250;
        int timeout = cfg->heartbeat_timeout_ms ? cfg->heartbeat_timeout_ms : 3000;
        if (timeout <= interval)
            cli_bad_usage("--heartbeat-timeout-ms (%d) must be greater than --heartbeat-ms (%d)",
                      timeout, interval);
    }
    /* The ring must be addressable: batch * (image + 16 bytes) * slots below 2^40 bytes. */
    long double ring =
        (long double)cfg->batch_size *
        ((long double)cfg->image_size * (long double)cfg->image_size * 3.0L + 16.0L) *
        (long double)cfg->slots;
    if (ring > (long double)(UINT64_C(1) << 40))
        cli_bad_usage("--batch-size x --image-size x --slots: the ring would need %.0Lf bytes, more "
                  "than 1 TiB",
                  ring);
}

static const char *
lib_error(const char *what, int rc)
{
    fprintf(stderr, PROG ": %s: %s\n", what, tsock_strerror(rc));
    return tsock_strerror(rc);
}

int
main(int argc, char **argv)
{
    cli_init(PROG);
    struct config cfg = {
        .batch_size = 64, .slots = 8, .samples = 4096, .image_size = 32, .epochs = 1};
    parse_args(argc, argv, &cfg);
    tsock_set_log(log_to_stderr, NULL, cfg.verbose ? TSOCK_LOG_DEBUG : TSOCK_LOG_WARN);

    /* The handler only records the signal; the loop below polls the flag between library calls
     * that never block longer than POLL_MS. No SA_RESTART, so a blocked call returns early. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* Threads the library starts inherit this mask, so the signals reach the main thread. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, &old);

    int64_t shape_image[3] = {(int64_t)cfg.image_size, (int64_t)cfg.image_size, 3};
    size_t image_bytes = (size_t)cfg.image_size * (size_t)cfg.image_size * 3;
    struct run_stats st = {0};
    struct consumer_table table = {0};
    tsock_producer *p = NULL;
    tsock_layout *layout = NULL;
    int status = 0;
    double t0 = now_s();

    int rc = tsock_layout_create(&layout);
    if (rc < 0) {
        lib_error("tsock_layout_create", rc);
        return 1;
    }
    if ((rc = tsock_layout_add(layout, "image", TSOCK_UINT8, 3, shape_image)) < 0 ||
        (rc = tsock_layout_add(layout, "label", TSOCK_INT64, 0, NULL)) < 0 ||
        (rc = tsock_layout_add(layout, "index", TSOCK_INT64, 0, NULL)) < 0) {
        lib_error("tsock_layout_add", rc);
        tsock_layout_destroy(layout);
        return 1;
    }
    rc = tsock_producer_create(&p, cfg.endpoint, layout, (uint32_t)cfg.batch_size,
                               (uint32_t)cfg.slots);
    tsock_layout_destroy(layout);
    if (rc < 0) {
        lib_error("tsock_producer_create", rc);
        return 1;
    }
    if (cfg.heartbeat_ms || cfg.heartbeat_timeout_ms) {
        rc = tsock_producer_set_heartbeat(p, cfg.heartbeat_ms ? cfg.heartbeat_ms : 250,
                                          cfg.heartbeat_timeout_ms ? cfg.heartbeat_timeout_ms
                                                                   : 3000);
        if (rc < 0) {
            lib_error("tsock_producer_set_heartbeat", rc);
            tsock_producer_destroy(p);
            return 1;
        }
    }
    rc = tsock_producer_set_sampler(p, cfg.samples, cfg.seed, cfg.epochs);
    if (rc < 0) {
        lib_error("tsock_producer_set_sampler", rc);
        tsock_producer_destroy(p);
        return 1;
    }
    rc = tsock_producer_start(p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc < 0) {
        lib_error("tsock_producer_start", rc);
        tsock_producer_destroy(p);
        return 1;
    }

    /* The endpoint string belongs to the producer; keep a copy for the statistics. */
    char *endpoint = strdup(tsock_producer_endpoint(p));
    if (!cfg.quiet) {
        char epochs[32] = "endless";
        if (cfg.epochs)
            snprintf(epochs, sizeof(epochs), "%" PRIu64, cfg.epochs);
        fprintf(stderr,
                PROG ": serving %s: synthetic, %" PRIu64 " samples of %" PRIu64 "x%" PRIu64
                     "x3, batch %" PRIu64 ", %" PRIu64 " slots, epochs %s\n",
                endpoint ? endpoint : "?", cfg.samples, cfg.image_size, cfg.image_size,
                cfg.batch_size, cfg.slots, epochs);
    }

    /* --wait-consumers: nothing is published before that many consumers joined. */
    while (!g_signal && cfg.wait_consumers > 0) {
        rc = tsock_producer_wait_consumers(p, (int)cfg.wait_consumers, POLL_MS);
        if (rc >= (int)cfg.wait_consumers)
            break;
        if (rc < 0 && rc != -ETIMEDOUT && rc != -EINTR) {
            st.error = lib_error("tsock_producer_wait_consumers", rc);
            status = 1;
            break;
        }
    }
    if (!g_signal && status == 0 && cfg.wait_consumers > 0 && !cfg.quiet)
        fprintf(stderr, PROG ": %" PRIu64 " consumers joined, publishing\n", cfg.wait_consumers);

    uint64_t cur_epoch = UINT64_MAX, pos_in_epoch = 0;
    while (!g_signal && status == 0) {
        /* A batch published while nobody listens would be lost to every later consumer's
         * coverage, so wait for someone first. */
        if (tsock_producer_consumer_count(p) <= 0) {
            rc = tsock_producer_wait_consumers(p, 1, POLL_MS);
            if (rc < 0 && rc != -ETIMEDOUT && rc != -EINTR) {
                st.error = lib_error("tsock_producer_wait_consumers", rc);
                status = 1;
            }
            continue;
        }
        tsock_slot *slot = NULL;
        rc = tsock_producer_acquire(p, POLL_MS, &slot);
        if (rc == -ETIMEDOUT || rc == -EINTR) {
            continue;
        } else if (rc == TSOCK_E_END) {
            st.finished = 1;
            break;
        } else if (rc < 0) {
            st.error = lib_error("tsock_producer_acquire", rc);
            status = 1;
            break;
        }
        uint32_t n = tsock_slot_planned(slot);
        const uint64_t *ids = tsock_slot_sample_ids(slot);
        uint8_t *images = tsock_slot_data(slot, 0);
        int64_t *labels = tsock_slot_data(slot, 1);
        int64_t *indices = tsock_slot_data(slot, 2);
        if (n == 0 || n > cfg.batch_size || !ids || !images || !labels || !indices) {
            fprintf(stderr,
                    PROG ": tsock_producer_acquire: slot without a usable plan (%u samples)\n", n);
            st.error = "slot without a usable sampler plan";
            status = 1;
            break;
        }
        for (uint32_t i = 0; i < n; i++)
            tsock_synth_fill(ids[i], images + (size_t)i * image_bytes, image_bytes, &labels[i],
                             &indices[i]);
        uint64_t epoch = tsock_slot_epoch(slot);
        rc = tsock_producer_publish(p, slot, n);
        if (rc < 0) {
            st.error = lib_error("tsock_producer_publish", rc);
            status = 1;
            break;
        }
        st.batches++;
        st.samples += n;
        if (epoch != cur_epoch) {
            cur_epoch = epoch;
            pos_in_epoch = 0;
        }
        pos_in_epoch += n;
        if (pos_in_epoch == cfg.samples)
            st.epochs++;
        /* After every publish, so the figures of a consumer that leaves right after its last
         * batch are current. */
        table_update(&table, p);
    }

    if (st.finished && !g_signal) {
        tsock_producer_finish(p);
        /* Give the consumers time to work through what they were sent, so their last releases
         * (or goodbyes) show in the statistics. */
        double deadline = now_s() + DRAIN_MS / 1000.0;
        while (!g_signal && now_s() < deadline) {
            int holding = table_update(&table, p);
            if (holding <= 0)
                break;
            sleep_ms(20);
        }
    }
    table_update(&table, p);
    uint64_t v;
    if (tsock_producer_stat(p, -1, TSOCK_STAT_JOINED, &v) == 0)
        st.joined = v;
    if (tsock_producer_stat(p, -1, TSOCK_STAT_LOST, &v) == 0)
        st.lost = v;
    if (tsock_producer_stat(p, -1, TSOCK_STAT_BAD_MESSAGES, &v) == 0)
        st.bad_messages = v;
    if (tsock_producer_stat(p, -1, TSOCK_STAT_WAIT_NS, &v) == 0)
        st.wait_ns = v;
    st.stopped_by = g_signal;

    /* Tells the consumers (stream ended, or producer stopped) and removes the ring and the
     * socket file. */
    tsock_producer_destroy(p);
    st.wall_s = now_s() - t0;
    st.cpu_s = cpu_seconds();

    if (cfg.stats_path) {
        rc = write_stats(&cfg, endpoint, &st, &table);
        if (rc < 0) {
            fprintf(stderr, PROG ": --stats-json: cannot write '%s': %s\n", cfg.stats_path,
                    strerror(-rc));
            status = 1;
        }
    }
    if (!cfg.quiet)
        fprintf(stderr,
                PROG ": %s: %" PRIu64 " batches, %" PRIu64 " samples, %" PRIu64
                     " epochs in %.2f s (cpu %.2f s); consumers joined %" PRIu64 ", lost %" PRIu64
                     ", bad messages %" PRIu64 "\n",
                g_signal ? "stopped by signal" : (st.finished ? "finished" : "ended"), st.batches,
                st.samples, st.epochs, st.wall_s, st.cpu_s, st.joined, st.lost, st.bad_messages);
    free(endpoint);
    free(table.recs);
    return status;
}
