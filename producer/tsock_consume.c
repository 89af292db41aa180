/* tsock-consume: a verifying consumer for tests, demos and benchmarks.
 *
 * Takes batches from a tsock producer serving the synthetic dataset (see synthetic.h) and checks
 * every one: each image byte against the formula, each label against its sample id, and, per
 * epoch, that every sample id arrives exactly once. Optionally holds each batch for a while, as
 * a training step would.
 *
 * Epoch accounting follows the epoch number and the epoch-end flag each batch carries. An epoch
 * is complete when its epoch-end batch arrived; only complete epochs count towards --epochs and
 * are checked for missing samples. When the consumer joins in the middle of an epoch (its first
 * batch is not the first of its epoch), that first epoch is partial: it is checked for
 * duplicates only and reported under "partial_epochs".
 *
 * Exit status: 0 the run completed and every check passed; 1 a library error ended the run
 * (producer lost or stopped, timeout, stream ended before --epochs epochs); 2 bad command line;
 * 3 the run completed but a check failed; 130 interrupted by SIGINT/SIGTERM.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "synthetic.h"
#include "tsock/tsock.h"

#define PROG "tsock-consume"

/* Longest single wait inside the library, so a signal is noticed promptly. */
#define POLL_MS 100

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
            "usage: " PROG " [options]\n"
            "\n"
            "Consumes batches of the synthetic dataset from a tsock producer and verifies them.\n"
            "\n"
            "  --endpoint ADDR            ZeroMQ endpoint of the producer (default: the per-user\n"
            "                             ipc endpoint)\n"
            "  --epochs N                 stop after N complete epochs; 0 = until the stream\n"
            "                             ends (default 1)\n"
            "  --samples N                dataset size, for the coverage check (default 4096)\n"
            "  --delay-ms N               hold each batch N ms, like a training step (default 0)\n"
            "  --timeout-ms N             longest wait for one batch, -1 = forever (default "
            "10000)\n"
            "  --connect-timeout-ms N     longest wait for the producer to answer, -1 = forever\n"
            "                             (default 10000)\n"
            "  --heartbeat-ms N           heartbeat interval (library default 250)\n"
            "  --heartbeat-timeout-ms N   producer silence taken as its death (library default\n"
            "                             3000)\n"
            "  --name NAME                name shown in the producer's statistics\n"
            "  --json                     print one JSON object with the results at the end\n"
            "  --quiet                    print only errors and warnings\n"
            "  --verbose                  print every library log line\n"
            "  --help                     show this help\n"
            "\n"
            "Exit status: 0 clean run, 1 library error (producer lost or stopped, timeout,\n"
            "stream ended early), 2 bad usage, 3 a check failed, 130 interrupted.\n");
}

static void
bad_usage(const char *fmt, ...)
{
    va_list ap;
    fputs(PROG ": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n" PROG ": try '" PROG " --help'\n", stderr);
    exit(2);
}

/* Parses a decimal integer in [min, max] for option `opt`; anything else ends the program with
 * status 2 and a message naming the option. */
static int64_t
parse_i64(const char *opt, const char *s, int64_t min, int64_t max)
{
    char *end = NULL;
    const char *digits = s[0] == '-' ? s + 1 : s;
    if (digits[0] < '0' || digits[0] > '9')
        bad_usage("--%s: '%s' is not a valid value (expected an integer in %" PRId64 "..%" PRId64
                  ")",
                  opt, s, min, max);
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        bad_usage("--%s: '%s' is not a valid value (expected an integer in %" PRId64 "..%" PRId64
                  ")",
                  opt, s, min, max);
    return (int64_t)v;
}

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void
sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !g_signal)
        ;
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
    const char *name;
    int64_t epochs, samples, delay_ms, timeout_ms, connect_timeout_ms;
    int heartbeat_ms, heartbeat_timeout_ms;
    int json, quiet, verbose;
};

/* ---- results ----------------------------------------------------------------------------- */

struct results {
    uint64_t batches, samples, epochs, partial_epochs;
    uint64_t content_errors, label_errors, index_errors, layout_errors;
    uint64_t duplicates, missing, out_of_order;
    uint64_t wait_ns;
    uint64_t *lat; /* latency of every successful next, ns */
    size_t lat_count, lat_cap;
    uint64_t *per_epoch; /* samples received per epoch seen, in order */
    size_t per_epoch_count, per_epoch_cap;
    uint32_t capacity, slots;
};

static int
push_u64(uint64_t **arr, size_t *count, size_t *cap, uint64_t v)
{
    if (*count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 1024;
        uint64_t *a = realloc(*arr, ncap * sizeof(*a));
        if (!a)
            return -ENOMEM;
        *arr = a;
        *cap = ncap;
    }
    (*arr)[(*count)++] = v;
    return 0;
}

/* Coverage of the epoch being received: one bit per sample id. */
struct epoch_track {
    int open;    /* an epoch is being received */
    int partial; /* joined mid-epoch: the prefix was never ours to see */
    uint64_t epoch;
    uint64_t received; /* samples received in this epoch, duplicates included */
    uint64_t distinct;
    uint8_t *bits;
    size_t bytes;
};

/* Closes the open epoch. `complete`: its epoch-end batch arrived. */
static void
epoch_close(struct epoch_track *e, struct results *r, uint64_t dataset, int complete)
{
    if (!e->open)
        return;
    if (e->partial) {
        r->partial_epochs++;
    } else {
        r->missing += dataset - e->distinct;
        if (complete)
            r->epochs++;
    }
    push_u64(&r->per_epoch, &r->per_epoch_count, &r->per_epoch_cap, e->received);
    e->open = 0;
}

static void
epoch_open(struct epoch_track *e, uint64_t epoch, int partial)
{
    memset(e->bits, 0, e->bytes);
    e->open = 1;
    e->partial = partial;
    e->epoch = epoch;
    e->received = 0;
    e->distinct = 0;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n-1], in microseconds. */
static double
percentile_us(const uint64_t *v, size_t n, double q)
{
    if (n == 0)
        return 0.0;
    size_t rank = (size_t)(q * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)v[rank - 1] / 1000.0;
}

/* ---- checking one batch ------------------------------------------------------------------ */

struct tensors {
    int image, label, index;
    size_t image_bytes; /* per sample */
};

/* Finds the synthetic layout's tensors in `b`. Returns 0, or -1 (with a message) when the
 * batch does not have that layout. */
static int
find_tensors(const tsock_batch *b, struct tensors *t, char *why, size_t why_size)
{
    t->image = tsock_batch_find(b, "image");
    t->label = tsock_batch_find(b, "label");
    t->index = tsock_batch_find(b, "index");
    if (t->image < 0 || t->label < 0 || t->index < 0) {
        snprintf(why, why_size, "batch lacks one of the tensors image, label, index");
        return -1;
    }
    if (tsock_batch_tensor_dtype(b, t->image) != TSOCK_UINT8 ||
        tsock_batch_tensor_ndim(b, t->image) != 4 || tsock_batch_tensor_dim(b, t->image, 3) != 3 ||
        tsock_batch_tensor_dim(b, t->image, 1) <= 0 ||
        tsock_batch_tensor_dim(b, t->image, 2) <= 0) {
        snprintf(why, why_size, "tensor image is not uint8 [B,H,W,3]");
        return -1;
    }
    if (tsock_batch_tensor_dtype(b, t->label) != TSOCK_INT64 ||
        tsock_batch_tensor_ndim(b, t->label) != 1 ||
        tsock_batch_tensor_dtype(b, t->index) != TSOCK_INT64 ||
        tsock_batch_tensor_ndim(b, t->index) != 1) {
        snprintf(why, why_size, "tensors label and index are not int64 [B]");
        return -1;
    }
    t->image_bytes = (size_t)tsock_batch_tensor_dim(b, t->image, 1) *
                     (size_t)tsock_batch_tensor_dim(b, t->image, 2) * 3;
    return 0;
}

static void
check_batch(const tsock_batch *b, const struct tensors *t, const struct config *cfg,
            struct epoch_track *e, struct results *r)
{
    uint32_t n = tsock_batch_samples(b);
    uint64_t epoch = tsock_batch_epoch(b);
    const uint8_t *images = tsock_batch_tensor_data(b, t->image);
    const int64_t *labels = tsock_batch_tensor_data(b, t->label);
    const int64_t *indices = tsock_batch_tensor_data(b, t->index);

    if (!images || !labels || !indices || tsock_batch_tensor_dim(b, t->image, 0) != (int64_t)n ||
        tsock_batch_tensor_dim(b, t->label, 0) != (int64_t)n ||
        tsock_batch_tensor_dim(b, t->index, 0) != (int64_t)n ||
        tsock_batch_tensor_bytes(b, t->image) != (size_t)n * t->image_bytes) {
        r->layout_errors++;
        return;
    }
    if (e->open && epoch < e->epoch) {
        r->out_of_order++;
        return;
    }
    if (e->open && epoch > e->epoch)
        epoch_close(e, r, (uint64_t)cfg->samples, 0); /* its end never came: a gap */
    if (!e->open) {
        /* Only the very first epoch may start late; later ones must start at their beginning,
         * and a late start there shows up as missing samples. */
        int first = r->per_epoch_count == 0;
        epoch_open(e, epoch, first && tsock_batch_index_in_epoch(b) != 0);
    }

    for (uint32_t i = 0; i < n; i++) {
        int64_t id = indices[i];
        if (id < 0 || id >= cfg->samples) {
            r->index_errors++;
            continue;
        }
        if (labels[i] != tsock_synth_label((uint64_t)id))
            r->label_errors++;
        r->content_errors +=
            tsock_synth_verify((uint64_t)id, images + (size_t)i * t->image_bytes, t->image_bytes);
        uint8_t bit = (uint8_t)(1u << (id & 7));
        if (e->bits[id >> 3] & bit) {
            r->duplicates++;
        } else {
            e->bits[id >> 3] |= bit;
            e->distinct++;
        }
    }
    e->received += n;
    r->samples += n;
    if (tsock_batch_is_epoch_end(b))
        epoch_close(e, r, (uint64_t)cfg->samples, 1);
}

/* ---- main -------------------------------------------------------------------------------- */

enum {
    OPT_ENDPOINT = 256,
    OPT_EPOCHS,
    OPT_SAMPLES,
    OPT_DELAY_MS,
    OPT_TIMEOUT_MS,
    OPT_CONNECT_TIMEOUT_MS,
    OPT_HEARTBEAT_MS,
    OPT_HEARTBEAT_TIMEOUT_MS,
    OPT_NAME,
    OPT_JSON,
    OPT_QUIET,
    OPT_VERBOSE,
    OPT_HELP
};

static void
parse_args(int argc, char **argv, struct config *cfg)
{
    static const struct option longopts[] = {
        {"endpoint", required_argument, NULL, OPT_ENDPOINT},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"samples", required_argument, NULL, OPT_SAMPLES},
        {"delay-ms", required_argument, NULL, OPT_DELAY_MS},
        {"timeout-ms", required_argument, NULL, OPT_TIMEOUT_MS},
        {"connect-timeout-ms", required_argument, NULL, OPT_CONNECT_TIMEOUT_MS},
        {"heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT_MS},
        {"heartbeat-timeout-ms", required_argument, NULL, OPT_HEARTBEAT_TIMEOUT_MS},
        {"name", required_argument, NULL, OPT_NAME},
        {"json", no_argument, NULL, OPT_JSON},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"verbose", no_argument, NULL, OPT_VERBOSE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0}};

    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":hqv", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case OPT_ENDPOINT:
            if (optarg[0] == '\0')
                bad_usage("--endpoint: the endpoint must not be empty");
            cfg->endpoint = optarg;
            break;
        case OPT_EPOCHS:
            cfg->epochs = parse_i64("epochs", optarg, 0, INT64_C(1) << 40);
            break;
        case OPT_SAMPLES:
            cfg->samples = parse_i64("samples", optarg, 1, INT64_C(1) << 32);
            break;
        case OPT_DELAY_MS:
            cfg->delay_ms = parse_i64("delay-ms", optarg, 0, 3600000);
            break;
        case OPT_TIMEOUT_MS:
            cfg->timeout_ms = parse_i64("timeout-ms", optarg, -1, INT32_MAX);
            break;
        case OPT_CONNECT_TIMEOUT_MS:
            cfg->connect_timeout_ms = parse_i64("connect-timeout-ms", optarg, -1, INT32_MAX);
            break;
        case OPT_HEARTBEAT_MS:
            cfg->heartbeat_ms = (int)parse_i64("heartbeat-ms", optarg, 1, 600000);
            break;
        case OPT_HEARTBEAT_TIMEOUT_MS:
            cfg->heartbeat_timeout_ms = (int)parse_i64("heartbeat-timeout-ms", optarg, 1, 3600000);
            break;
        case OPT_NAME:
            if (optarg[0] == '\0' || strlen(optarg) > TSOCK_MAX_NAME)
                bad_usage("--name: the name must have 1 to %d bytes", TSOCK_MAX_NAME);
            cfg->name = optarg;
            break;
        case OPT_JSON:
            cfg->json = 1;
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
            bad_usage("%s: missing value", argv[optind - 1]);
            break;
        default:
            if (optopt && optopt < 256)
                bad_usage("unknown option '-%c'", optopt);
            bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        bad_usage("unexpected argument '%s' (every setting is an --option)", argv[optind]);
    if (cfg->heartbeat_ms || cfg->heartbeat_timeout_ms) {
        int interval = cfg->heartbeat_ms ? cfg->heartbeat_ms : 250;
        int timeout = cfg->heartbeat_timeout_ms ? cfg->heartbeat_timeout_ms : 3000;
        if (timeout <= interval)
            bad_usage("--heartbeat-timeout-ms (%d) must be greater than --heartbeat-ms (%d)",
                      timeout, interval);
    }
}

static void
print_json(const struct config *cfg, struct results *r, double wall_s, int error_code,
           const char *error, int exit_code)
{
    if (r->lat_count > 1)
        qsort(r->lat, r->lat_count, sizeof(*r->lat), cmp_u64);
    FILE *f = stdout;
    fputs("{\"name\": ", f);
    if (cfg->name)
        json_string(f, cfg->name);
    else
        fputs("null", f);
    fprintf(f, ", \"pid\": %ld, \"endpoint\": ", (long)getpid());
    if (cfg->endpoint)
        json_string(f, cfg->endpoint);
    else
        fputs("null", f);
    fprintf(f,
            ", \"batches\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"epochs\": %" PRIu64
            ", \"partial_epochs\": %" PRIu64 ", \"content_errors\": %" PRIu64
            ", \"label_errors\": %" PRIu64 ", \"index_errors\": %" PRIu64
            ", \"layout_errors\": %" PRIu64 ", \"duplicates\": %" PRIu64 ", \"missing\": %" PRIu64
            ", \"out_of_order\": %" PRIu64 ", \"wait_s\": %.6f, \"wall_s\": %.6f, \"cpu_s\": %.6f",
            r->batches, r->samples, r->epochs, r->partial_epochs, r->content_errors,
            r->label_errors, r->index_errors, r->layout_errors, r->duplicates, r->missing,
            r->out_of_order, (double)r->wait_ns * 1e-9, wall_s, cpu_seconds());
    fprintf(f,
            ", \"next_latency_us\": {\"p50\": %.3f, \"p99\": %.3f, \"max\": %.3f, \"count\": %zu}",
            percentile_us(r->lat, r->lat_count, 0.50), percentile_us(r->lat, r->lat_count, 0.99),
            r->lat_count ? (double)r->lat[r->lat_count - 1] / 1000.0 : 0.0, r->lat_count);
    fputs(", \"per_epoch_samples\": [", f);
    for (size_t i = 0; i < r->per_epoch_count; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : "", r->per_epoch[i]);
    fprintf(f, "], \"batch_capacity\": %u, \"slots\": %u, \"error\": ", r->capacity, r->slots);
    if (error)
        json_string(f, error);
    else
        fputs("null", f);
    fprintf(f, ", \"error_code\": %d, \"exit_code\": %d}\n", error_code, exit_code);
    fflush(f);
}

int
main(int argc, char **argv)
{
    struct config cfg = {
        .epochs = 1, .samples = 4096, .timeout_ms = 10000, .connect_timeout_ms = 10000};
    parse_args(argc, argv, &cfg);
    tsock_set_log(log_to_stderr, NULL, cfg.verbose ? TSOCK_LOG_DEBUG : TSOCK_LOG_WARN);

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct results r;
    memset(&r, 0, sizeof(r));
    struct epoch_track et;
    memset(&et, 0, sizeof(et));
    et.bytes = (size_t)((cfg.samples + 7) / 8);
    et.bits = calloc(et.bytes, 1);
    if (!et.bits) {
        fprintf(stderr, PROG ": out of memory for a %zu-byte coverage bitmap\n", et.bytes);
        return 1;
    }

    uint64_t t_start = now_ns();
    int error_code = 0;
    const char *error = NULL;
    const char *failed_call = NULL;
    char why[160] = "";
    struct tensors tens;
    int have_tensors = 0;
    tsock_consumer *c = NULL;

    int rc = tsock_consumer_create(&c, cfg.endpoint);
    if (rc < 0) {
        failed_call = "tsock_consumer_create";
        error_code = rc;
        goto out;
    }
    if (cfg.name && (rc = tsock_consumer_set_name(c, cfg.name)) < 0) {
        failed_call = "tsock_consumer_set_name";
        error_code = rc;
        goto out;
    }
    if (cfg.heartbeat_ms || cfg.heartbeat_timeout_ms) {
        rc = tsock_consumer_set_heartbeat(c, cfg.heartbeat_ms ? cfg.heartbeat_ms : 250,
                                          cfg.heartbeat_timeout_ms ? cfg.heartbeat_timeout_ms
                                                                   : 3000);
        if (rc < 0) {
            failed_call = "tsock_consumer_set_heartbeat";
            error_code = rc;
            goto out;
        }
    }
    rc = tsock_consumer_start(c, (int)cfg.connect_timeout_ms);
    if (rc < 0) {
        failed_call = "tsock_consumer_start";
        error_code = rc;
        goto out;
    }
    r.capacity = tsock_consumer_batch_capacity(c);
    r.slots = tsock_consumer_slot_count(c);
    if (!cfg.quiet && !cfg.json)
        fprintf(stderr, PROG ": connected (batch %u, %u slots)\n", r.capacity, r.slots);

    while (!g_signal && (cfg.epochs == 0 || r.epochs < (uint64_t)cfg.epochs)) {
        tsock_batch *b = NULL;
        uint64_t t0 = now_ns();
        /* One logical wait of up to --timeout-ms, in slices so a signal is seen. */
        for (;;) {
            int slice = POLL_MS;
            if (cfg.timeout_ms >= 0) {
                int64_t left = cfg.timeout_ms - (int64_t)((now_ns() - t0) / 1000000u);
                if (left < 0)
                    left = 0;
                if (left < slice)
                    slice = (int)left;
            }
            rc = tsock_consumer_next(c, slice, &b);
            if (rc != -ETIMEDOUT && rc != -EINTR)
                break;
            if (g_signal)
                break;
            if (cfg.timeout_ms >= 0 && now_ns() - t0 >= (uint64_t)cfg.timeout_ms * 1000000u) {
                rc = -ETIMEDOUT;
                break;
            }
        }
        uint64_t t1 = now_ns();
        r.wait_ns += t1 - t0;
        if (rc == TSOCK_E_END && cfg.epochs == 0)
            break; /* running until the stream ends: this is the clean end */
        if (rc < 0) {
            if (g_signal && (rc == -ETIMEDOUT || rc == -EINTR))
                break;
            failed_call = "tsock_consumer_next";
            error_code = rc;
            break;
        }
        push_u64(&r.lat, &r.lat_count, &r.lat_cap, t1 - t0);
        r.batches++;
        if (!have_tensors) {
            if (find_tensors(b, &tens, why, sizeof(why)) < 0) {
                r.layout_errors++;
                tsock_consumer_release(c, b);
                error = why;
                break;
            }
            have_tensors = 1;
        }
        check_batch(b, &tens, &cfg, &et, &r);
        if (cfg.delay_ms > 0)
            sleep_ms(cfg.delay_ms);
        rc = tsock_consumer_release(c, b);
        if (rc < 0) {
            failed_call = "tsock_consumer_release";
            error_code = rc;
            break;
        }
    }

out:;
    int exit_code = 0;
    if (error_code != 0) {
        error = tsock_strerror(error_code);
        fprintf(stderr, PROG ": %s: %s\n", failed_call, error);
        exit_code = 1;
    } else if (g_signal) {
        error = "interrupted by a signal";
        exit_code = 130;
    } else if (error) {
        fprintf(stderr, PROG ": %s\n", error);
        exit_code = 3;
    } else if (r.content_errors || r.label_errors || r.index_errors || r.layout_errors ||
               r.duplicates || r.missing || r.out_of_order) {
        exit_code = 3;
    }
    /* Releases what is still held and says goodbye, so the producer can reuse the slots now. */
    tsock_consumer_destroy(c);
    double wall_s = (double)(now_ns() - t_start) * 1e-9;
    if (cfg.json) {
        print_json(&cfg, &r, wall_s, error_code, error, exit_code);
    } else if (!cfg.quiet) {
        if (r.lat_count > 1)
            qsort(r.lat, r.lat_count, sizeof(*r.lat), cmp_u64);
        fprintf(stderr,
                PROG ": %" PRIu64 " batches, %" PRIu64 " samples, %" PRIu64
                     " epochs; content errors %" PRIu64 ", label errors %" PRIu64
                     ", index errors %" PRIu64 ", duplicates %" PRIu64 ", missing %" PRIu64
                     "; waited %.3f s, next p50 %.1f us p99 %.1f us\n",
                r.batches, r.samples, r.epochs, r.content_errors, r.label_errors, r.index_errors,
                r.duplicates, r.missing, (double)r.wait_ns * 1e-9,
                percentile_us(r.lat, r.lat_count, 0.50), percentile_us(r.lat, r.lat_count, 0.99));
    }
    free(et.bits);
    free(r.lat);
    free(r.per_epoch);
    return exit_code;
}
