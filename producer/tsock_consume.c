/* tsock-consume: a verifying consumer for tests, demos and benchmarks.
 *
 * Takes batches from a tsock producer serving the synthetic dataset (see synthetic.h) and checks
 * every one: each image byte against the formula, each label and index against its sample id,
 * and, per epoch, that every sample id arrives exactly once. With --content images (an image
 * dataset, whose bytes are not known in advance) the ids, coverage and label ranges are
 * checked, and each complete epoch's bytes are digested ("epoch_digests"), so that two runs
 * can be compared byte for byte. Optionally holds each batch for a
 * while, as a training step would, and lingers between epochs, as validation would.
 *
 * Epoch accounting follows the epoch number and the epoch-end flag each batch carries.
 *  - With a producer sampler (the library reports a dataset size; tsock-producer always has
 *    one) every epoch of this consumer must be exact, whenever it joined: each sample id once,
 *    every batch but the epoch's last of the consumer's batch size, as many batches as the
 *    library announced. With --drop-last the short tail of each epoch is left out: it is
 *    counted under "dropped", and only the rest must be there. An epoch cut short by the loss
 *    of the producer (TSOCK_E_EPOCH_INTERRUPTED, with --reconnect-ms) is counted under
 *    "interrupted_epochs" and checked for duplicates only.
 *  - In free mode (no sampler) epochs follow the producer's marks; a consumer that joins in
 *    the middle of one sees a partial first epoch, checked for duplicates only and reported
 *    under "partial_epochs".
 * Only complete epochs count towards --epochs.
 *
 * Exit status: 0 the run completed and every check passed; 1 a library error ended the run
 * (producer lost or stopped, timeout, stream ended before --epochs epochs); 2 bad command line;
 * 3 the run completed but a check failed; 128 + the signal's number when SIGINT (130) or
 * SIGTERM (143) interrupted it, at any time, the wait for a producer included.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "consume_device.h"
#include "consume_state.h"
#include "synthetic.h"
#include "tsock/tsock.h"

#define PROG "tsock-consume"

/* Longest single wait inside the library, so a signal is noticed promptly. */
#define POLL_MS 100

static volatile sig_atomic_t g_signal;
/* The consumer whose wait the signal handler cancels (async-signal-safe): the start may wait
 * forever (--connect-timeout-ms -1) for a producer that never comes. */
static tsock_consumer *_Atomic g_consumer;

static void
on_signal(int sig)
{
    g_signal = sig;
    tsock_consumer *c = atomic_load(&g_consumer);
    if (c)
        tsock_consumer_cancel(c);
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
            "Consumes batches from a tsock producer and verifies them: every byte of the\n"
            "synthetic dataset, or the sample ids, coverage and labels of an image dataset.\n"
            "\n"
            "  --endpoint ADDR            ZeroMQ endpoint of the producer (default: the per-user\n"
            "                             ipc endpoint)\n"
            "  --epochs N                 stop after N complete epochs; 0 = until the stream\n"
            "                             ends (default 1)\n"
            "  --samples N                dataset size, for the coverage check (default: the\n"
            "                             producer's; 4096 when it has no sampler); a value\n"
            "                             other than the producer's is an error\n"
            "  --batch-size N             samples per batch, any size; 0 = the producer's\n"
            "                             (default 0)\n"
            "  --drop-last                leave out the short last batch of each epoch\n"
            "  --nodes N                  check that the producer serves one of N node shares\n"
            "                             (tsock-producer --nodes N); the split itself comes\n"
            "                             from the producer, and --samples, when given, is the\n"
            "                             whole dataset, an epoch ceil(samples / N) of its ids\n"
            "  --delay-ms N               hold each batch N ms, like a training step (default 0)\n"
            "  --hold N                   keep the last N batches held while asking for the next,\n"
            "                             as a prefetching loop does (default 0, at most 64)\n"
            "  --join-after-ms N          wait N ms before connecting (default 0)\n"
            "  --pause-between-epochs-ms N\n"
            "                             after each epoch's last batch, wait N ms before asking\n"
            "                             for the next epoch, like validation (default 0)\n"
            "  --epoch-grace-ms N         how long the library waits between epochs before it\n"
            "                             pauses this consumer (library default 100)\n"
            "  --reconnect-ms N           when the producer goes away, wait up to N ms for one on\n"
            "                             the same endpoint and go on there; 0 = fail (default)\n"
            "  --timeout-ms N             longest wait for one batch, -1 = forever (default "
            "10000)\n"
            "  --connect-timeout-ms N     longest wait for the producer to answer, -1 = forever\n"
            "                             (default 10000)\n"
            "  --heartbeat-ms N           heartbeat interval (library default 250)\n"
            "  --heartbeat-timeout-ms N   producer silence taken as its death (library default\n"
            "                             3000)\n"
            "  --curve-secret-key FILE    authenticate with CURVE: this consumer's secret key\n"
            "                             file (tsock-keygen; mode 0600)\n"
            "  --curve-server-key FILE    with --curve-secret-key: the producer's public key\n"
            "  --name NAME                name shown in the producer's statistics\n"
            "  --json                     print one JSON object with the results at the end\n"
            "  --trace-times              with --json: add the receive time of every batch\n"
            "  --latency-samples N        next() latencies kept for p50/p99: all of them up to\n"
            "                             N, then a uniform sample of N (default 65536), so\n"
            "                             memory stays bounded however long the run\n"
            "  --content synthetic|images what the batches hold: the synthetic dataset (every\n"
            "                             byte checked; default) or real images (ids, coverage\n"
            "                             and labels checked; every epoch's bytes digested)\n"
            "  --no-digest                with --content images: do not read the image bytes\n"
            "                             (no epoch digests; for benchmarks of the handoff)\n"
            "  --normalize[=M1,M2,M3,S1,S2,S3]\n"
            "                             the producer normalised its float images with these\n"
            "                             means and stds (no values: ImageNet's); float16 and\n"
            "                             float32 images, HWC or NCHW, are checked element by\n"
            "                             element against that conversion of the synthetic bytes\n"
            "  --save-state FILE          save this consumer's position to FILE (atomically:\n"
            "                             a temporary file, fsync, rename) after every release\n"
            "  --save-every N             with --save-state: save after every N-th release\n"
            "                             instead (default 1)\n"
            "  --resume FILE              restore the position saved in FILE: the interrupted\n"
            "                             epoch goes on with exactly the samples it lacked,\n"
            "                             numbered on; FILE may also be --save-state's\n"
            "  --stall-after N            after the N-th batch (released, and saved when\n"
            "                             due) say so on stderr and read nothing more until a\n"
            "                             signal: a job stopped at a known step, for tests\n"
            "  --ids-out FILE             append one line 'EPOCH ID' per sample received; a\n"
            "                             batch's lines are on disk before any saved state\n"
            "                             covers the batch\n"
            "  --group NAME               be a rank of the data-parallel group NAME: each rank\n"
            "                             gets its own disjoint, equal share of every group\n"
            "                             epoch (DistributedSampler's); needs --rank and\n"
            "                             --world-size\n"
            "  --rank R                   with --group: this rank, 0 .. world size - 1\n"
            "  --world-size W             with --group: the group's number of ranks\n"
            "  --group-timeout MS         with --group: how long the producer waits for the\n"
            "                             group's other ranks (library default 600000)\n"
            "  --quiet                    print only errors and warnings\n"
            "  --verbose                  print every library log line\n"
            "  --help                     show this help\n"
            "\n"
            "Exit status: 0 clean run, 1 library error (producer lost or stopped, timeout,\n"
            "stream ended early), 2 bad usage, 3 a check failed, 130 SIGINT, 143 SIGTERM\n"
            "(at any time, the wait for a producer included).\n");
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

/* --hold: at most this many batches kept held. */
#define MAX_HOLD 64

struct config {
    const char *endpoint;
    const char *curve_secret_key, *curve_server_key; /* NULL: no CURVE */
    const char *name;
    int64_t epochs, samples, delay_ms, timeout_ms, connect_timeout_ms;
    int64_t batch_size, join_after_ms, pause_ms, reconnect_ms;
    int64_t grace_ms; /* -1: the library's default */
    int hold;         /* --hold N: batches kept held while asking for the next */
    int heartbeat_ms, heartbeat_timeout_ms;
    int drop_last, json, trace_times, quiet, verbose;
    int images;              /* --content images: real images, not the synthetic dataset's bytes */
    int no_digest;           /* --no-digest: leave the bytes of real images untouched */
    int64_t latency_samples; /* --latency-samples: the reservoir's size */
    float norm[6];           /* --normalize: the producer's means and stds (float images) */
    int normalize;
    const char *save_state; /* --save-state FILE */
    int64_t save_every;     /* --save-every N */
    int64_t stall_after;    /* --stall-after N: 0 = never */
    const char *resume;     /* --resume FILE */
    const char *ids_out;    /* --ids-out FILE */
    int64_t nodes;          /* --nodes: the producer serves one of this many node shares */
    int nodes_given;        /* --nodes was passed: a cross-check of the producer's split */
    const char *group;      /* --group NAME: a rank of a data-parallel group */
    int64_t rank, world, group_timeout_ms; /* --rank, --world-size, --group-timeout (-1: default) */
};

/* --normalize[=M1,M2,M3,S1,S2,S3], as tsock-producer takes it. */
static void
parse_normalize(const char *value, struct config *cfg)
{
    static const float imagenet[6] = {0.485f, 0.456f, 0.406f, 0.229f, 0.224f, 0.225f};
    cfg->normalize = 1;
    if (!value) {
        memcpy(cfg->norm, imagenet, sizeof cfg->norm);
        return;
    }
    const char *p = value;
    for (int i = 0; i < 6; i++) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || *end != (i < 5 ? ',' : '\0') || !(v > -1e30 && v < 1e30) ||
            (i >= 3 && !(v > 0)))
            cli_bad_usage("--normalize: expected six numbers M1,M2,M3,S1,S2,S3 (stds > 0), got "
                          "'%s'",
                          value);
        cfg->norm[i] = (float)v;
        p = end + 1;
    }
}

/* ---- results ----------------------------------------------------------------------------- */

struct u64_list {
    uint64_t *v;
    size_t count, cap;
};

/* next() latencies for p50/p99 in bounded memory: every latency while there are at most `cap`,
 * then a uniform sample of `cap` of all of them (reservoir sampling, Vitter's algorithm R), so
 * a run with --epochs 0 does not grow without bound. The percentiles are exact for runs of up
 * to `cap` batches; `seen` and `max` are always exact. The random choices are seeded, so a
 * run's figures do not depend on anything but its latencies. */
struct latency {
    uint64_t *v; /* the kept sample, unordered until latency_sort */
    size_t kept, alloc, cap;
    uint64_t seen, max, rng;
};

struct results {
    uint64_t batches, samples, epochs, partial_epochs, interrupted_epochs;
    uint64_t epoch_marks; /* whole epochs the library marked as ended (--epochs) */
    int epoch_whole;      /* the library's current epoch began at its batch 0 */
    uint64_t content_errors, label_errors, index_errors, layout_errors;
    uint64_t duplicates, missing, out_of_order, dropped;
    uint64_t batch_size_errors, epoch_size_errors;
    uint64_t views, gathers;
    uint64_t wait_ns;
    uint64_t first_seq;
    int out_of_memory;
    struct latency lat;             /* latency of successful nexts, ns */
    struct u64_list per_epoch;      /* samples received in each epoch seen, in order */
    struct u64_list interrupted;    /* samples received in each interrupted epoch */
    struct u64_list epoch_start_ns; /* receive time of each epoch's first batch, from start */
    struct u64_list epoch_end_ns;   /* receive time of each epoch's last batch, from start */
    struct u64_list batch_ns;       /* receive time of every batch, from start (--trace-times) */
    struct u64_list digests;        /* digest of each complete epoch's bytes, in order */
    uint32_t capacity, slots, batch_size;
    uint64_t dataset; /* the producer's dataset size; 0 in free mode */
    uint64_t epoch_n; /* samples of one epoch of this consumer before --drop-last: the dataset,
                         or a rank's share, ceil(dataset / world) (floor with --drop-last) */
    uint64_t batches_per_epoch; /* as the library announced it; 0 in free mode */
};

static void
push(struct results *r, struct u64_list *l, uint64_t v)
{
    if (l->count == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 1024;
        uint64_t *a = realloc(l->v, ncap * sizeof(*a));
        if (!a) {
            r->out_of_memory = 1;
            return;
        }
        l->v = a;
        l->cap = ncap;
    }
    l->v[l->count++] = v;
}

static uint64_t
splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void
latency_add(struct results *r, struct latency *l, uint64_t ns)
{
    l->seen++;
    if (ns > l->max)
        l->max = ns;
    if (l->kept < l->cap) {
        if (l->kept == l->alloc) {
            size_t n = l->alloc ? l->alloc * 2 : 1024;
            n = n < l->cap ? n : l->cap;
            uint64_t *a = realloc(l->v, n * sizeof *a);
            if (!a) {
                r->out_of_memory = 1;
                return;
            }
            l->v = a;
            l->alloc = n;
        }
        l->v[l->kept++] = ns;
        return;
    }
    /* The seen-th latency replaces a random kept one with probability cap/seen. */
    uint64_t j = splitmix64(&l->rng) % l->seen;
    if (j < l->cap)
        l->v[j] = ns;
}

/* Coverage of the epoch being received: one bit per sample id. */
struct epoch_track {
    int open;      /* an epoch is being received */
    int partial;   /* free mode: joined mid-epoch, the prefix was never ours to see */
    int short_end; /* sampler mode: its end mark came with too few samples */
    uint64_t epoch;
    uint64_t next_epoch; /* sampler mode: the number the next epoch must carry */
    uint64_t received;   /* samples received in this epoch, duplicates included */
    uint64_t distinct;
    uint64_t batches;
    uint64_t digest; /* of every byte received in this epoch, in order */
    uint8_t *bits;
    size_t bytes;
};

/* Folds `n` bytes into a digest: a multiply-rotate hash over 8-byte words, fast enough to
 * cover every image byte. Equal streams of batches give equal digests, which is how two runs
 * are compared (same seed, another worker count or read method). */
static uint64_t
digest_bytes(uint64_t h, const uint8_t *p, size_t n)
{
    const uint64_t k = 0x9E3779B97F4A7C15u;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = ((h ^ w) * k);
        h = (h << 29) | (h >> 35);
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * k;
    return h ^ (h >> 31);
}

static void
epoch_open(struct epoch_track *e, struct results *r, uint64_t epoch, int partial, uint64_t t)
{
    memset(e->bits, 0, e->bytes);
    e->open = 1;
    e->partial = partial;
    e->short_end = 0;
    e->epoch = epoch;
    e->received = 0;
    e->distinct = 0;
    e->batches = 0;
    e->digest = 0;
    push(r, &r->epoch_start_ns, t);
}

static void
epoch_forget(struct epoch_track *e, struct results *r)
{
    push(r, &r->per_epoch, e->received);
    e->next_epoch = e->epoch + 1;
    e->open = 0;
}

/* The samples a complete epoch must hold: all of them, less the short tail --drop-last
 * leaves out. */
static uint64_t
epoch_expected(const struct results *r, const struct config *cfg)
{
    uint64_t n = r->epoch_n;
    return cfg->drop_last && r->batch_size ? n - n % r->batch_size : n;
}

/* Closes the open epoch after its end mark. Sampler mode: the epoch must be exact. */
static void
epoch_close_complete(struct epoch_track *e, struct results *r, const struct config *cfg,
                     uint64_t samples)
{
    if (r->dataset > 0) {
        uint64_t n = r->epoch_n, tail = n - epoch_expected(r, cfg);
        uint64_t shortfall = n - e->distinct;
        uint64_t dropped = shortfall < tail ? shortfall : tail;
        r->dropped += dropped;
        r->missing += shortfall - dropped;
        if (r->batches_per_epoch && e->batches != r->batches_per_epoch)
            r->epoch_size_errors++;
        r->epochs++;
        if (!cfg->no_digest)
            push(r, &r->digests, e->digest);
    } else if (e->partial) {
        r->partial_epochs++;
    } else {
        r->missing += samples - e->distinct;
        r->epochs++;
    }
    epoch_forget(e, r);
}

/* Closes the open epoch whose end mark never came (or came too early): every sample it lacks
 * is missing, and in sampler mode that is a broken epoch. */
static void
epoch_close_broken(struct epoch_track *e, struct results *r, uint64_t samples)
{
    if (e->partial) {
        r->partial_epochs++;
    } else {
        r->missing += samples - e->distinct;
        if (r->dataset > 0)
            r->epoch_size_errors++;
    }
    epoch_forget(e, r);
}

/* The stream ended: an epoch still open was cut by the end (not an error; checked for
 * duplicates only). */
static void
epoch_close_at_end(struct epoch_track *e, struct results *r)
{
    if (!e->open)
        return;
    r->partial_epochs++;
    epoch_forget(e, r);
}

/* The library ended the epoch early because its producer went away (reconnect on). */
static void
epoch_close_interrupted(struct epoch_track *e, struct results *r)
{
    r->interrupted_epochs++;
    push(r, &r->interrupted, e->open ? e->received : 0);
    if (e->open)
        epoch_forget(e, r);
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
    struct image_form form;
    struct host_copy copies[3]; /* device batches: image, label, index copied back */
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
    /* uint8 [B,H,W,3] as decoded, or the producer's conversion: float16/float32, [B,H,W,3] or
     * [B,3,H,W] (--layout nchw). */
    int dtype = tsock_batch_tensor_dtype(b, t->image);
    int nchw = tsock_batch_tensor_ndim(b, t->image) == 4 &&
               tsock_batch_tensor_dim(b, t->image, 1) == 3 &&
               tsock_batch_tensor_dim(b, t->image, 3) != 3;
    int hdim = nchw ? 2 : 1;
    if ((dtype != TSOCK_UINT8 && dtype != TSOCK_FLOAT16 && dtype != TSOCK_FLOAT32) ||
        tsock_batch_tensor_ndim(b, t->image) != 4 ||
        tsock_batch_tensor_dim(b, t->image, nchw ? 1 : 3) != 3 ||
        tsock_batch_tensor_dim(b, t->image, hdim) <= 0 ||
        tsock_batch_tensor_dim(b, t->image, hdim + 1) <= 0 || (nchw && dtype == TSOCK_UINT8)) {
        snprintf(why, why_size,
                 "tensor image is not uint8 [B,H,W,3], nor float16/float32 "
                 "[B,H,W,3] or [B,3,H,W]");
        return -1;
    }
    t->form.dtype = dtype;
    t->form.nchw = nchw;
    t->form.height = tsock_batch_tensor_dim(b, t->image, hdim);
    t->form.width = tsock_batch_tensor_dim(b, t->image, hdim + 1);
    if (tsock_batch_tensor_dtype(b, t->label) != TSOCK_INT64 ||
        tsock_batch_tensor_ndim(b, t->label) != 1 ||
        tsock_batch_tensor_dtype(b, t->index) != TSOCK_INT64 ||
        tsock_batch_tensor_ndim(b, t->index) != 1) {
        snprintf(why, why_size, "tensors label and index are not int64 [B]");
        return -1;
    }
    t->image_bytes = (size_t)t->form.height * (size_t)t->form.width * 3 *
                     (dtype == TSOCK_UINT8     ? 1
                      : dtype == TSOCK_FLOAT16 ? 2
                                               : 4);
    return 0;
}

/* Places the batch in this consumer's epochs (sampler mode). Returns 0, or -1 when the batch
 * cannot be counted at all. */
static int
place_sampler(const tsock_batch *b, const struct config *cfg, struct epoch_track *e,
              struct results *r, uint64_t t)
{
    uint32_t n = tsock_batch_samples(b);
    uint64_t epoch = tsock_batch_epoch(b);
    int end = tsock_batch_is_epoch_end(b);

    if (e->open && (e->short_end || epoch != e->epoch))
        epoch_close_broken(e, r, r->dataset);
    if (!e->open) {
        /* Epochs are numbered 0, 1, 2, ... and each starts at its first batch; a resumed run's
         * first epoch is the rest of an interrupted one: numbered on, checked for duplicates. */
        int resumed = cfg->resume && r->per_epoch.count == 0;
        if (resumed)
            e->next_epoch = epoch;
        if (epoch != e->next_epoch)
            r->out_of_order++;
        epoch_open(e, r, epoch, resumed, t);
        if (resumed)
            e->batches = tsock_batch_index_in_epoch(b);
    }
    if (tsock_batch_index_in_epoch(b) != e->batches)
        r->out_of_order++;
    /* Every batch but an epoch's last has the consumer's batch size; with --drop-last, all. */
    uint32_t want = r->batch_size;
    if (n == 0 || n > want || (n != want && (!end || cfg->drop_last)))
        r->batch_size_errors++;
    return 0;
}

/* Places the batch in the producer's epochs (free mode). Returns 0, or -1 when the batch goes
 * back to an epoch already closed. */
static int
place_free(const tsock_batch *b, const struct config *cfg, struct epoch_track *e, struct results *r,
           uint64_t t)
{
    uint64_t epoch = tsock_batch_epoch(b);
    if (e->open && epoch < e->epoch) {
        r->out_of_order++;
        return -1;
    }
    if (e->open && epoch > e->epoch)
        epoch_close_broken(e, r, (uint64_t)cfg->samples); /* its end never came: a gap */
    if (!e->open) {
        /* Only the very first epoch may start late; later ones must start at their beginning,
         * and a late start there shows up as missing samples. */
        int first = r->per_epoch.count == 0;
        epoch_open(e, r, epoch, first && tsock_batch_index_in_epoch(b) != 0, t);
    }
    return 0;
}

/* Checks one batch: its place in the epochs, then every sample's bytes, label and index. */
static void
check_batch(tsock_batch *b, struct tensors *t, const struct config *cfg, struct epoch_track *e,
            struct results *r, uint64_t now)
{
    uint32_t n = tsock_batch_samples(b);
    /* Host pointers: the batch's own, or copies of a batch in GPU memory. */
    const void *tensor_bytes[3] = {NULL, NULL, NULL};
    int which[3] = {t->image, t->label, t->index};
    for (int k = 0; k < 3; k++)
        if (consume_tensor_bytes(b, which[k], &t->copies[k], &tensor_bytes[k]) < 0)
            tensor_bytes[k] = NULL; /* logged by the library; a layout error below */
    const uint8_t *images = tensor_bytes[0];
    const int64_t *labels = tensor_bytes[1];
    const int64_t *indices = tensor_bytes[2];
    memcpy(t->form.mean, cfg->norm, sizeof t->form.mean);
    memcpy(t->form.std, cfg->norm + 3, sizeof t->form.std);

    if (!images || !labels || !indices || tsock_batch_tensor_dim(b, t->image, 0) != (int64_t)n ||
        tsock_batch_tensor_dim(b, t->label, 0) != (int64_t)n ||
        tsock_batch_tensor_dim(b, t->index, 0) != (int64_t)n ||
        tsock_batch_tensor_bytes(b, t->image) != (size_t)n * t->image_bytes ||
        tsock_batch_tensor_bytes(b, t->label) != (size_t)n * sizeof(int64_t) ||
        tsock_batch_tensor_bytes(b, t->index) != (size_t)n * sizeof(int64_t)) {
        r->layout_errors++;
        return;
    }
    int placed = r->dataset > 0 ? place_sampler(b, cfg, e, r, now) : place_free(b, cfg, e, r, now);
    if (placed < 0)
        return;

    for (uint32_t i = 0; i < n; i++) {
        int64_t id = indices[i];
        if (id < 0 || id >= cfg->samples) {
            r->index_errors++;
            continue;
        }
        if (cfg->images) {
            /* Real images: only the label's range is known here. */
            r->label_errors += labels[i] < 0;
        } else {
            if (labels[i] != tsock_synth_label((uint64_t)id))
                r->label_errors++;
            const uint8_t *image = images + (size_t)i * t->image_bytes;
            r->content_errors += t->form.dtype == TSOCK_UINT8
                                     ? tsock_synth_verify((uint64_t)id, image, t->image_bytes)
                                     : consume_verify_converted((uint64_t)id, image, &t->form);
        }
        uint8_t bit = (uint8_t)(1u << (id & 7));
        if (e->bits[id >> 3] & bit) {
            r->duplicates++;
        } else {
            e->bits[id >> 3] |= bit;
            e->distinct++;
        }
    }
    if (!cfg->no_digest) {
        e->digest = digest_bytes(e->digest, images, (size_t)n * t->image_bytes);
        e->digest = digest_bytes(e->digest, (const uint8_t *)labels, (size_t)n * sizeof(int64_t));
        e->digest = digest_bytes(e->digest, (const uint8_t *)indices, (size_t)n * sizeof(int64_t));
    }
    e->received += n;
    e->batches++;
    r->samples += n;
    if (!tsock_batch_is_epoch_end(b))
        return;
    push(r, &r->epoch_end_ns, now);
    if (r->dataset > 0 && e->received != epoch_expected(r, cfg)) {
        /* Too short for an epoch: the stream may have ended inside it (then it is partial) or
         * the library cut it wrongly (then the next batch shows it). Decided later. */
        e->short_end = 1;
        return;
    }
    epoch_close_complete(e, r, cfg, (uint64_t)cfg->samples);
}

/* ---- main -------------------------------------------------------------------------------- */

enum {
    OPT_ENDPOINT = 256,
    OPT_EPOCHS,
    OPT_SAMPLES,
    OPT_BATCH_SIZE,
    OPT_DROP_LAST,
    OPT_DELAY_MS,
    OPT_HOLD,
    OPT_JOIN_AFTER_MS,
    OPT_PAUSE_MS,
    OPT_EPOCH_GRACE_MS,
    OPT_RECONNECT_MS,
    OPT_TIMEOUT_MS,
    OPT_CONNECT_TIMEOUT_MS,
    OPT_HEARTBEAT_MS,
    OPT_HEARTBEAT_TIMEOUT_MS,
    OPT_CURVE_SECRET_KEY,
    OPT_CURVE_SERVER_KEY,
    OPT_NAME,
    OPT_JSON,
    OPT_TRACE_TIMES,
    OPT_LATENCY_SAMPLES,
    OPT_CONTENT,
    OPT_NO_DIGEST,
    OPT_NORMALIZE,
    OPT_SAVE_STATE,
    OPT_SAVE_EVERY,
    OPT_STALL_AFTER,
    OPT_RESUME,
    OPT_NODES,
    OPT_IDS_OUT,
    OPT_GROUP,
    OPT_RANK,
    OPT_WORLD_SIZE,
    OPT_GROUP_TIMEOUT,
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
        {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
        {"drop-last", no_argument, NULL, OPT_DROP_LAST},
        {"delay-ms", required_argument, NULL, OPT_DELAY_MS},
        {"hold", required_argument, NULL, OPT_HOLD},
        {"join-after-ms", required_argument, NULL, OPT_JOIN_AFTER_MS},
        {"pause-between-epochs-ms", required_argument, NULL, OPT_PAUSE_MS},
        {"epoch-grace-ms", required_argument, NULL, OPT_EPOCH_GRACE_MS},
        {"reconnect-ms", required_argument, NULL, OPT_RECONNECT_MS},
        {"timeout-ms", required_argument, NULL, OPT_TIMEOUT_MS},
        {"connect-timeout-ms", required_argument, NULL, OPT_CONNECT_TIMEOUT_MS},
        {"heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT_MS},
        {"heartbeat-timeout-ms", required_argument, NULL, OPT_HEARTBEAT_TIMEOUT_MS},
        {"curve-secret-key", required_argument, NULL, OPT_CURVE_SECRET_KEY},
        {"curve-server-key", required_argument, NULL, OPT_CURVE_SERVER_KEY},
        {"name", required_argument, NULL, OPT_NAME},
        {"json", no_argument, NULL, OPT_JSON},
        {"trace-times", no_argument, NULL, OPT_TRACE_TIMES},
        {"latency-samples", required_argument, NULL, OPT_LATENCY_SAMPLES},
        {"content", required_argument, NULL, OPT_CONTENT},
        {"no-digest", no_argument, NULL, OPT_NO_DIGEST},
        {"normalize", optional_argument, NULL, OPT_NORMALIZE},
        {"save-state", required_argument, NULL, OPT_SAVE_STATE},
        {"save-every", required_argument, NULL, OPT_SAVE_EVERY},
        {"stall-after", required_argument, NULL, OPT_STALL_AFTER},
        {"resume", required_argument, NULL, OPT_RESUME},
        {"nodes", required_argument, NULL, OPT_NODES},
        {"ids-out", required_argument, NULL, OPT_IDS_OUT},
        {"group", required_argument, NULL, OPT_GROUP},
        {"rank", required_argument, NULL, OPT_RANK},
        {"world-size", required_argument, NULL, OPT_WORLD_SIZE},
        {"group-timeout", required_argument, NULL, OPT_GROUP_TIMEOUT},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"verbose", no_argument, NULL, OPT_VERBOSE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0}};

    static const float none[6] = {0, 0, 0, 1, 1, 1};
    memcpy(cfg->norm, none, sizeof cfg->norm);
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":hqv", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case OPT_ENDPOINT:
            if (optarg[0] == '\0')
                cli_bad_usage("--endpoint: the endpoint must not be empty");
            cfg->endpoint = optarg;
            break;
        case OPT_EPOCHS: cfg->epochs = cli_parse_i64("epochs", optarg, 0, INT64_C(1) << 40); break;
        case OPT_SAMPLES:
            cfg->samples = cli_parse_i64("samples", optarg, 1, INT64_C(1) << 32);
            break;
        case OPT_BATCH_SIZE:
            cfg->batch_size = cli_parse_i64("batch-size", optarg, 0, UINT32_MAX);
            break;
        case OPT_DROP_LAST: cfg->drop_last = 1; break;
        case OPT_DELAY_MS: cfg->delay_ms = cli_parse_i64("delay-ms", optarg, 0, 3600000); break;
        case OPT_HOLD: cfg->hold = (int)cli_parse_i64("hold", optarg, 0, MAX_HOLD); break;
        case OPT_JOIN_AFTER_MS:
            cfg->join_after_ms = cli_parse_i64("join-after-ms", optarg, 0, 3600000);
            break;
        case OPT_PAUSE_MS:
            cfg->pause_ms = cli_parse_i64("pause-between-epochs-ms", optarg, 0, 3600000);
            break;
        case OPT_EPOCH_GRACE_MS:
            cfg->grace_ms = cli_parse_i64("epoch-grace-ms", optarg, 0, INT32_MAX);
            break;
        case OPT_RECONNECT_MS:
            cfg->reconnect_ms = cli_parse_i64("reconnect-ms", optarg, 0, INT32_MAX);
            break;
        case OPT_TIMEOUT_MS:
            cfg->timeout_ms = cli_parse_i64("timeout-ms", optarg, -1, INT32_MAX);
            break;
        case OPT_CONNECT_TIMEOUT_MS:
            cfg->connect_timeout_ms = cli_parse_i64("connect-timeout-ms", optarg, -1, INT32_MAX);
            break;
        case OPT_HEARTBEAT_MS:
            cfg->heartbeat_ms = (int)cli_parse_i64("heartbeat-ms", optarg, 1, 600000);
            break;
        case OPT_HEARTBEAT_TIMEOUT_MS:
            cfg->heartbeat_timeout_ms =
                (int)cli_parse_i64("heartbeat-timeout-ms", optarg, 1, 3600000);
            break;
        case OPT_CURVE_SECRET_KEY: cfg->curve_secret_key = optarg; break;
        case OPT_CURVE_SERVER_KEY: cfg->curve_server_key = optarg; break;
        case OPT_NAME:
            if (optarg[0] == '\0' || strlen(optarg) > TSOCK_MAX_NAME)
                cli_bad_usage("--name: the name must have 1 to %d bytes", TSOCK_MAX_NAME);
            cfg->name = optarg;
            break;
        case OPT_JSON: cfg->json = 1; break;
        case OPT_TRACE_TIMES: cfg->trace_times = 1; break;
        case OPT_LATENCY_SAMPLES:
            cfg->latency_samples = cli_parse_i64("latency-samples", optarg, 1, INT64_C(1) << 26);
            break;
        case OPT_NO_DIGEST: cfg->no_digest = 1; break;
        case OPT_NORMALIZE: parse_normalize(optarg, cfg); break;
        case OPT_SAVE_STATE:
            if (optarg[0] == '\0')
                cli_bad_usage("--save-state: the file name must not be empty");
            cfg->save_state = optarg;
            break;
        case OPT_SAVE_EVERY:
            cfg->save_every = cli_parse_i64("save-every", optarg, 1, INT64_C(1) << 40);
            break;
        case OPT_STALL_AFTER:
            cfg->stall_after = cli_parse_i64("stall-after", optarg, 1, INT64_C(1) << 40);
            break;
        case OPT_RESUME:
            if (optarg[0] == '\0')
                cli_bad_usage("--resume: the file name must not be empty");
            cfg->resume = optarg;
            break;
        case OPT_NODES:
            cfg->nodes = cli_parse_i64("nodes", optarg, 1, 65536);
            cfg->nodes_given = 1;
            break;
        case OPT_IDS_OUT:
            if (optarg[0] == '\0')
                cli_bad_usage("--ids-out: the file name must not be empty");
            cfg->ids_out = optarg;
            break;
        case OPT_GROUP:
            if (optarg[0] == '\0' || strlen(optarg) > 64)
                cli_bad_usage("--group: the group name must have 1 to 64 bytes");
            cfg->group = optarg;
            break;
        case OPT_RANK: cfg->rank = cli_parse_i64("rank", optarg, 0, UINT32_MAX - 1); break;
        case OPT_WORLD_SIZE: cfg->world = cli_parse_i64("world-size", optarg, 1, UINT32_MAX); break;
        case OPT_GROUP_TIMEOUT:
            cfg->group_timeout_ms = cli_parse_i64("group-timeout", optarg, 0, UINT32_MAX);
            break;
        case OPT_CONTENT:
            if (strcmp(optarg, "synthetic") == 0)
                cfg->images = 0;
            else if (strcmp(optarg, "images") == 0)
                cfg->images = 1;
            else
                cli_bad_usage("--content: '%s' is not a valid value (expected synthetic or "
                              "images)",
                              optarg);
            break;
        case 'q':
        case OPT_QUIET: cfg->quiet = 1; break;
        case 'v':
        case OPT_VERBOSE: cfg->verbose = 1; break;
        case 'h':
        case OPT_HELP: usage(stdout); exit(0);
        case ':': cli_bad_usage("%s: missing value", argv[optind - 1]); break;
        default:
            if (optopt && optopt < 256)
                cli_bad_usage("unknown option '-%c'", optopt);
            cli_bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        cli_bad_usage("unexpected argument '%s' (every setting is an --option)", argv[optind]);
    if (cfg->save_every && !cfg->save_state)
        cli_bad_usage("--save-every needs --save-state");
    if (!cfg->group && (cfg->world || cfg->rank >= 0 || cfg->group_timeout_ms >= 0))
        cli_bad_usage("--rank, --world-size and --group-timeout need --group");
    if (cfg->group && (!cfg->world || cfg->rank < 0))
        cli_bad_usage("--group needs --rank and --world-size");
    if (cfg->group && cfg->rank >= cfg->world)
        cli_bad_usage("--rank %" PRId64 " is not below --world-size %" PRId64, cfg->rank,
                      cfg->world);
    cli_check_heartbeat(cfg->heartbeat_ms, cfg->heartbeat_timeout_ms);
    cli_check_curve_client(cfg->curve_secret_key, cfg->curve_server_key);
}

static void
json_u64_list(FILE *f, const char *key, const struct u64_list *l)
{
    fprintf(f, ", \"%s\": [", key);
    for (size_t i = 0; i < l->count; i++)
        fprintf(f, "%s%" PRIu64, i ? ", " : "", l->v[i]);
    fputc(']', f);
}

/* A list of times in ns, written in seconds. */
static void
json_times(FILE *f, const char *key, const struct u64_list *l)
{
    fprintf(f, ", \"%s\": [", key);
    for (size_t i = 0; i < l->count; i++)
        fprintf(f, "%s%.6f", i ? ", " : "", (double)l->v[i] * 1e-9);
    fputc(']', f);
}

static void
print_json(const struct config *cfg, struct results *r, uint64_t start_ns, double wall_s,
           int error_code, const char *error, int exit_code)
{
    if (r->lat.kept > 1)
        qsort(r->lat.v, r->lat.kept, sizeof(*r->lat.v), cmp_u64);
    const uint64_t *lat = r->lat.v;
    size_t nlat = r->lat.kept;
    FILE *f = stdout;
    fputs("{\"name\": ", f);
    if (cfg->name)
        cli_json_string(f, cfg->name);
    else
        fputs("null", f);
    fprintf(f, ", \"pid\": %ld, \"endpoint\": ", (long)getpid());
    if (cfg->endpoint)
        cli_json_string(f, cfg->endpoint);
    else
        fputs("null", f);
    fprintf(f,
            ", \"batches\": %" PRIu64 ", \"samples\": %" PRIu64 ", \"epochs\": %" PRIu64
            ", \"partial_epochs\": %" PRIu64 ", \"interrupted_epochs\": %" PRIu64
            ", \"content_errors\": %" PRIu64 ", \"label_errors\": %" PRIu64
            ", \"index_errors\": %" PRIu64 ", \"layout_errors\": %" PRIu64
            ", \"duplicates\": %" PRIu64 ", \"missing\": %" PRIu64 ", \"dropped\": %" PRIu64
            ", \"out_of_order\": %" PRIu64 ", \"batch_size_errors\": %" PRIu64
            ", \"epoch_size_errors\": %" PRIu64 ", \"views\": %" PRIu64 ", \"gathers\": %" PRIu64
            ", \"wait_s\": %.6f, \"wall_s\": %.6f, \"cpu_s\": %.6f",
            r->batches, r->samples, r->epochs, r->partial_epochs, r->interrupted_epochs,
            r->content_errors, r->label_errors, r->index_errors, r->layout_errors, r->duplicates,
            r->missing, r->dropped, r->out_of_order, r->batch_size_errors, r->epoch_size_errors,
            r->views, r->gathers, (double)r->wait_ns * 1e-9, wall_s, cpu_seconds());
    fprintf(f,
            ", \"next_latency_us\": {\"p50\": %.3f, \"p99\": %.3f, \"max\": %.3f, \"count\": "
            "%" PRIu64 ", \"kept\": %zu}",
            percentile_us(lat, nlat, 0.50), percentile_us(lat, nlat, 0.99),
            (double)r->lat.max / 1000.0, r->lat.seen, nlat);
    json_u64_list(f, "per_epoch_samples", &r->per_epoch);
    json_u64_list(f, "interrupted_epoch_samples", &r->interrupted);
    fputs(", \"epoch_digests\": [", f);
    for (size_t i = 0; i < r->digests.count; i++)
        fprintf(f, "%s\"%016" PRIx64 "\"", i ? ", " : "", r->digests.v[i]);
    fputc(']', f);
    fprintf(f,
            ", \"batch_size\": %u, \"drop_last\": %s, \"batches_per_epoch\": %" PRIu64
            ", \"dataset_size\": %" PRIu64 ", \"batch_capacity\": %u, \"slots\": %u",
            r->batch_size, cfg->drop_last ? "true" : "false", r->batches_per_epoch, r->dataset,
            r->capacity, r->slots);
    if (r->batches)
        fprintf(f, ", \"first_seq\": %" PRIu64, r->first_seq);
    else
        fputs(", \"first_seq\": null", f);
    fprintf(f, ", \"start_monotonic_s\": %.6f", (double)start_ns * 1e-9);
    json_times(f, "epoch_start_times_s", &r->epoch_start_ns);
    json_times(f, "epoch_end_times_s", &r->epoch_end_ns);
    if (cfg->trace_times)
        json_times(f, "batch_times_s", &r->batch_ns);
    fputs(", \"error\": ", f);
    if (error)
        cli_json_string(f, error);
    else
        fputs("null", f);
    fprintf(f, ", \"error_code\": %d, \"exit_code\": %d}\n", error_code, exit_code);
    fflush(f);
}

/* Waits for the next batch up to --timeout-ms, in slices so a signal is noticed. */
static int
next_batch(tsock_consumer *c, const struct config *cfg, tsock_batch **b)
{
    uint64_t t0 = now_ns();
    for (;;) {
        int slice = POLL_MS;
        if (cfg->timeout_ms >= 0) {
            int64_t left = cfg->timeout_ms - (int64_t)((now_ns() - t0) / 1000000u);
            if (left < 0)
                left = 0;
            if (left < slice)
                slice = (int)left;
        }
        int rc = tsock_consumer_next(c, slice, b);
        if (rc != -ETIMEDOUT && rc != -EINTR && rc != TSOCK_E_CANCELLED)
            return rc;
        if (g_signal)
            return rc;
        if (cfg->timeout_ms >= 0 && now_ns() - t0 >= (uint64_t)cfg->timeout_ms * 1000000u)
            return -ETIMEDOUT;
    }
}

/* Applies the options to a created consumer. Returns 0, or the failing call's code with its
 * name in *call. */
static int
configure(tsock_consumer *c, const struct config *cfg, const char **call)
{
    int rc = 0;
    if (cfg->name && (rc = tsock_consumer_set_name(c, cfg->name)) < 0) {
        *call = "tsock_consumer_set_name";
        return rc;
    }
    if (cfg->heartbeat_ms || cfg->heartbeat_timeout_ms) {
        rc = tsock_consumer_set_heartbeat(c, cfg->heartbeat_ms ? cfg->heartbeat_ms : 250,
                                          cfg->heartbeat_timeout_ms ? cfg->heartbeat_timeout_ms
                                                                    : 3000);
        if (rc < 0) {
            *call = "tsock_consumer_set_heartbeat";
            return rc;
        }
    }
    if (cfg->curve_secret_key &&
        (rc = tsock_consumer_set_curve(c, cfg->curve_secret_key, cfg->curve_server_key)) < 0) {
        *call = "--curve-secret-key/--curve-server-key";
        return rc;
    }
    if (cfg->batch_size && (rc = tsock_consumer_set_batch_size(c, (uint32_t)cfg->batch_size)) < 0) {
        *call = "tsock_consumer_set_batch_size";
        return rc;
    }
    if (cfg->drop_last && (rc = tsock_consumer_set_drop_last(c, 1)) < 0) {
        *call = "tsock_consumer_set_drop_last";
        return rc;
    }
    if (cfg->grace_ms >= 0 && (rc = tsock_consumer_set_epoch_grace(c, (int)cfg->grace_ms)) < 0) {
        *call = "tsock_consumer_set_epoch_grace";
        return rc;
    }
    if (cfg->reconnect_ms && (rc = tsock_consumer_set_reconnect(c, (int)cfg->reconnect_ms)) < 0) {
        *call = "tsock_consumer_set_reconnect";
        return rc;
    }
    if (cfg->save_state && (rc = tsock_consumer_set_checkpointing(c, 1)) < 0) {
        *call = "tsock_consumer_set_checkpointing";
        return rc;
    }
    if (cfg->group && (rc = tsock_consumer_set_group(c, cfg->group, (uint32_t)cfg->rank,
                                                     (uint32_t)cfg->world)) < 0) {
        *call = "tsock_consumer_set_group";
        return rc;
    }
    if (cfg->group_timeout_ms >= 0 &&
        (rc = tsock_consumer_set_group_timeout(c, (uint32_t)cfg->group_timeout_ms)) < 0) {
        *call = "tsock_consumer_set_group_timeout";
        return rc;
    }
    return 0;
}

/* --resume: the saved position, before start. Returns 0, -1 with a message in why[] when the
 * file cannot be read, or the library's code (TSOCK_E_BAD_STATE, logged) in *code. */
static int
restore(tsock_consumer *c, const struct config *cfg, int *code, char *why, size_t why_size)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (state_file_read(cfg->resume, &buf, &len, why, why_size) < 0)
        return -1;
    *code = tsock_consumer_restore_state(c, buf, len);
    free(buf);
    return *code < 0 ? -1 : 0;
}

/* After a release: the position, every --save-every batches. The --ids-out lines of every
 * batch it covers are on disk already. Returns 0 or a negated errno. */
static int
save_position(tsock_consumer *c, const struct config *cfg, uint64_t batches)
{
    if (!cfg->save_state || batches % (uint64_t)(cfg->save_every ? cfg->save_every : 1) != 0)
        return 0;
    size_t len = 0;
    int rc = tsock_consumer_save_state(c, NULL, 0, &len);
    if (rc != -ENOSPC)
        return rc;
    uint8_t *buf = malloc(len);
    if (!buf)
        return -ENOMEM;
    rc = tsock_consumer_save_state(c, buf, len, &len);
    if (rc == 0)
        rc = state_file_write(cfg->save_state, buf, len);
    free(buf);
    return rc;
}

/* Reads what the producer announced (again after a reconnect). Returns 0, or -1 with a message
 * when it does not fit --samples. */
static int
read_announced(tsock_consumer *c, struct config *cfg, struct results *r, char *why, size_t why_size)
{
    /* The node split is the producer's (its WELCOME): --nodes only checks it, and without
     * --samples the whole dataset is the one the split was made of. */
    uint32_t nodes = 1, node_rank = 0;
    uint64_t whole = 0;
    (void)tsock_consumer_node_split(c, &nodes, &node_rank, &whole);
    if (cfg->nodes_given && (uint32_t)cfg->nodes != nodes) {
        snprintf(why, why_size,
                 "--nodes %" PRId64 " but the producer serves node %u of %u node shares",
                 cfg->nodes, node_rank, nodes);
        return -1;
    }
    cfg->nodes = nodes;
    if (cfg->samples == 0)
        cfg->samples = whole ? (int64_t)whole : 4096;
    r->capacity = tsock_consumer_batch_capacity(c);
    r->slots = tsock_consumer_slot_count(c);
    r->dataset = tsock_consumer_dataset_size(c);
    /* A rank's epoch is its share (DistributedSampler's): padded up, or cut down with
     * --drop-last; ranks' shares together are checked by whoever reads their --ids-out. */
    r->epoch_n = r->dataset;
    if (cfg->group && r->dataset) {
        /* DistributedSampler's share is of the whole dataset (every node's): --samples. */
        uint64_t n = (uint64_t)cfg->samples, w = (uint64_t)cfg->world;
        r->epoch_n = cfg->drop_last ? n / w : (n + w - 1) / w;
    }
    r->batches_per_epoch = tsock_consumer_batches_per_epoch(c);
    r->batch_size = cfg->batch_size ? (uint32_t)cfg->batch_size : r->capacity;
    /* With node shares the producer's epochs hold its node's share of the ids. */
    uint64_t want = ((uint64_t)cfg->samples + nodes - 1) / nodes;
    if (r->dataset > 0 && r->dataset != want) {
        if (nodes > 1)
            snprintf(why, why_size,
                     "--samples %" PRId64 " over %" PRIu32 " nodes"
                     " but the producer's epochs have %" PRIu64 " samples, not %" PRIu64,
                     cfg->samples, nodes, r->dataset, want);
        else
            snprintf(why, why_size,
                     "--samples %" PRId64 " but the producer's dataset has %" PRIu64 " samples",
                     cfg->samples, r->dataset);
        return -1;
    }
    return 0;
}

static int
more_epochs_wanted(const struct config *cfg, const struct results *r)
{
    /* The library's epochs (batches it marked as an epoch's end), not the checker's: a
     * checker that misjudged an epoch must not keep the program running past --epochs. */
    return cfg->epochs == 0 || r->epoch_marks < (uint64_t)cfg->epochs;
}

/* The batches --hold keeps, oldest first. */
struct held_batches {
    tsock_batch *b[MAX_HOLD + 1];
    int count, keep;
};

/* Done with b: keeps it among the last `keep` batches, releasing the oldest one beyond them
 * (a prefetching loop holds its current batches while it asks for the next). Returns what the
 * release returned, or 0. */
static int
hold_or_release(tsock_consumer *c, struct held_batches *h, tsock_batch *b)
{
    h->b[h->count++] = b;
    if (h->count <= h->keep)
        return 0;
    tsock_batch *oldest = h->b[0];
    memmove(h->b, h->b + 1, (size_t)(--h->count) * sizeof h->b[0]);
    return tsock_consumer_release(c, oldest);
}

static void
release_held(tsock_consumer *c, struct held_batches *h)
{
    for (int i = 0; i < h->count; i++)
        tsock_consumer_release(c, h->b[i]);
    h->count = 0;
}

int
main(int argc, char **argv)
{
    cli_init(PROG);
    struct config cfg = {.epochs = 1,
                         .rank = -1,
                         .group_timeout_ms = -1,
                         .timeout_ms = 10000,
                         .connect_timeout_ms = 10000,
                         .grace_ms = -1,
                         .latency_samples = 65536,
                         .nodes = 1};
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
    r.lat.cap = (size_t)cfg.latency_samples;
    struct epoch_track et;
    memset(&et, 0, sizeof(et));
    struct held_batches held = {.count = 0, .keep = cfg.hold};

    if (cfg.join_after_ms > 0)
        sleep_ms(cfg.join_after_ms);
    uint64_t t_start = now_ns();
    int error_code = 0;
    const char *error = NULL;
    const char *failed_call = NULL;
    char why[320] = "";
    struct tensors tens = {0};
    int have_tensors = 0;
    tsock_consumer *c = NULL;
    FILE *ids_out = NULL;

    int rc = g_signal ? 0 : tsock_consumer_create(&c, cfg.endpoint);
    if (rc < 0) {
        failed_call = "tsock_consumer_create";
        error_code = rc;
        goto out;
    }
    atomic_store(&g_consumer, c);
    if (g_signal)
        goto out;
    if ((rc = configure(c, &cfg, &failed_call)) < 0) {
        error_code = rc;
        goto out;
    }
    if (cfg.resume && restore(c, &cfg, &error_code, why, sizeof(why)) < 0) {
        if (error_code)
            failed_call = "tsock_consumer_restore_state";
        else
            error = why;
        goto out;
    }
    if (cfg.ids_out && !(ids_out = fopen(cfg.ids_out, "a"))) {
        snprintf(why, sizeof(why), "--ids-out %s: %s", cfg.ids_out, strerror(errno));
        error = why;
        goto out;
    }
    rc = tsock_consumer_start(c, (int)cfg.connect_timeout_ms);
    if (rc == TSOCK_E_CANCELLED && g_signal)
        goto out; /* interrupted while waiting for the producer */
    if (rc == -ETIMEDOUT) {
        /* Name the endpoint and what to start, not the socket's errno. */
        char dflt[256] = "";
        const char *where = cfg.endpoint;
        if (!where && tsock_default_endpoint(dflt, sizeof dflt) >= 0)
            where = dflt;
        snprintf(why, sizeof(why),
                 "no tsock producer answered at %s within %" PRId64 " ms: start one there "
                 "(tsock-producer --dataset ... --endpoint %s) or check --endpoint",
                 where ? where : "the default endpoint", (int64_t)cfg.connect_timeout_ms,
                 where ? where : "...");
        failed_call = "tsock_consumer_start";
        error_code = rc; /* the JSON's code stays -ETIMEDOUT; the message says what to do */
        error = why;
        goto out;
    }
    if (rc < 0) {
        failed_call = "tsock_consumer_start";
        error_code = rc;
        goto out;
    }
    if (read_announced(c, &cfg, &r, why, sizeof(why)) < 0) {
        error = why;
        goto out;
    }
    et.bytes = (size_t)((cfg.samples + 7) / 8);
    et.bits = calloc(et.bytes, 1);
    if (!et.bits) {
        snprintf(why, sizeof(why), "out of memory for a %zu-byte coverage bitmap", et.bytes);
        error = why;
        goto out;
    }
    if (!cfg.quiet && !cfg.json)
        fprintf(stderr,
                PROG ": connected (producer batch %u, %u slots, dataset %" PRIu64
                     "; batch %u, %" PRIu64 " batches per epoch)\n",
                r.capacity, r.slots, r.dataset, r.batch_size, r.batches_per_epoch);

    while (!g_signal && more_epochs_wanted(&cfg, &r)) {
        tsock_batch *b = NULL;
        uint64_t t0 = now_ns();
        rc = next_batch(c, &cfg, &b);
        uint64_t t1 = now_ns();
        r.wait_ns += t1 - t0;
        if (rc == TSOCK_E_EPOCH_INTERRUPTED) {
            /* The producer went away mid-epoch; the next call waits for its successor. */
            epoch_close_interrupted(&et, &r);
            continue;
        }
        if (rc == TSOCK_E_END) {
            epoch_close_at_end(&et, &r);
            if (cfg.epochs == 0)
                break; /* running until the stream ends: this is the clean end */
        }
        if (rc < 0) {
            if (g_signal && (rc == -ETIMEDOUT || rc == -EINTR || rc == TSOCK_E_CANCELLED))
                break;
            failed_call = "tsock_consumer_next";
            error_code = rc;
            break;
        }
        latency_add(&r, &r.lat, t1 - t0);
        if (cfg.trace_times)
            push(&r, &r.batch_ns, t1 - t_start);
        if (r.batches == 0)
            r.first_seq = tsock_batch_seq(b);
        r.batches++;
        if (tsock_batch_is_view(b))
            r.views++;
        else
            r.gathers++;
        if (!have_tensors) {
            if (find_tensors(b, &tens, why, sizeof(why)) < 0) {
                r.layout_errors++;
                tsock_consumer_release(c, b);
                error = why;
                break;
            }
            have_tensors = 1;
        }
        /* After a reconnect the producer is another one: what it announced must still fit. */
        if (cfg.reconnect_ms && read_announced(c, &cfg, &r, why, sizeof(why)) < 0) {
            tsock_consumer_release(c, b);
            error = why;
            break;
        }
        int epoch_end = tsock_batch_is_epoch_end(b);
        /* --epochs counts whole epochs as the library numbers its batches: one that began at
         * index 0 and ended with the library's mark (not the rest of a restored epoch, nor the
         * partial first epoch of a free-mode consumer that joined mid-epoch). */
        if (tsock_batch_index_in_epoch(b) == 0)
            r.epoch_whole = 1;
        r.epoch_marks += epoch_end && r.epoch_whole;
        if (epoch_end)
            r.epoch_whole = 0;
        check_batch(b, &tens, &cfg, &et, &r, t1 - t_start);
        if (ids_out) {
            ids_out_write(ids_out, tsock_batch_epoch(b), tsock_batch_tensor_data(b, tens.index),
                          tsock_batch_samples(b));
            if ((rc = ids_out_sync(ids_out)) < 0) {
                tsock_consumer_release(c, b);
                failed_call = "writing --ids-out";
                error_code = rc;
                break;
            }
        }
        if (cfg.delay_ms > 0)
            sleep_ms(cfg.delay_ms);
        rc = hold_or_release(c, &held, b);
        if (rc < 0) {
            failed_call = "tsock_consumer_release";
            error_code = rc;
            break;
        }
        if ((rc = save_position(c, &cfg, r.batches)) < 0) {
            failed_call = "saving --save-state";
            error_code = rc;
            break;
        }
        if (cfg.stall_after && r.batches == (uint64_t)cfg.stall_after) {
            /* A training job stopped at a known step (tests kill it there): its heartbeats go
             * on, so its producer and its group wait for it as for a slow step. */
            fprintf(stderr, PROG ": stalled after %" PRIu64 " batches (--stall-after)\n",
                    r.batches);
            while (!g_signal)
                sleep_ms(100);
        }
        /* Validation, checkpointing: the library pauses this consumer once the grace is over. */
        if (epoch_end && cfg.pause_ms > 0 && more_epochs_wanted(&cfg, &r))
            sleep_ms(cfg.pause_ms);
    }

out:;
    release_held(c, &held);
    for (int k = 0; k < 3; k++)
        free(tens.copies[k].bytes);
    int exit_code = 0;
    if (r.out_of_memory && !error && !error_code) {
        snprintf(why, sizeof(why), "out of memory for the results");
        error = why;
    }
    if (error_code != 0) {
        if (!error) /* a call's failure, unless a sentence says more (no producer) */
            error = tsock_strerror(error_code);
        fprintf(stderr, PROG ": %s: %s\n", failed_call, error);
        exit_code = 1;
    } else if (g_signal) {
        error = g_signal == SIGTERM ? "interrupted by SIGTERM" : "interrupted by SIGINT";
        exit_code = 128 + g_signal;
    } else if (error) {
        fprintf(stderr, PROG ": %s\n", error);
        exit_code = 3;
    } else if (r.content_errors || r.label_errors || r.index_errors || r.layout_errors ||
               r.duplicates || r.missing || r.out_of_order || r.batch_size_errors ||
               r.epoch_size_errors) {
        exit_code = 3;
    }
    /* Releases what is still held and says goodbye, so the producer can reuse the slots now.
     * The handler runs on this thread only (the library's threads block signals), so it is not
     * inside a cancel of c here. */
    atomic_store(&g_consumer, NULL);
    tsock_consumer_destroy(c);
    double wall_s = (double)(now_ns() - t_start) * 1e-9;
    if (cfg.json) {
        print_json(&cfg, &r, t_start, wall_s, error_code, error, exit_code);
    } else if (!cfg.quiet) {
        if (r.lat.kept > 1)
            qsort(r.lat.v, r.lat.kept, sizeof(*r.lat.v), cmp_u64);
        fprintf(stderr,
                PROG
                ": %" PRIu64 " batches (%" PRIu64 " views, %" PRIu64 " gathers), %" PRIu64
                " samples, %" PRIu64 " epochs (%" PRIu64 " interrupted); content errors %" PRIu64
                ", label errors %" PRIu64 ", index errors %" PRIu64 ", duplicates %" PRIu64
                ", missing %" PRIu64 ", dropped %" PRIu64 ", batch size errors %" PRIu64
                ", epoch size errors %" PRIu64 "; waited %.3f s, next p50 %.1f us p99 %.1f us\n",
                r.batches, r.views, r.gathers, r.samples, r.epochs, r.interrupted_epochs,
                r.content_errors, r.label_errors, r.index_errors, r.duplicates, r.missing,
                r.dropped, r.batch_size_errors, r.epoch_size_errors, (double)r.wait_ns * 1e-9,
                percentile_us(r.lat.v, r.lat.kept, 0.50), percentile_us(r.lat.v, r.lat.kept, 0.99));
    }
    if (ids_out)
        fclose(ids_out);
    free(et.bits);
    free(r.lat.v);
    free(r.per_epoch.v);
    free(r.interrupted.v);
    free(r.epoch_start_ns.v);
    free(r.epoch_end_ns.v);
    free(r.batch_ns.v);
    free(r.digests.v);
    return exit_code;
}
