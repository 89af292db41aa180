/* tsock-producer's options: usage text, parsing and checks. */
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "producer_options.h"
#include "tsock/pipeline.h"

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: tsock-producer --dataset synthetic|imagenet|folder|list|webdataset [options]\n"
            "\n"
            "Reads, decodes and augments a dataset once and serves every batch to all the\n"
            "tsock consumers that connect, through a rolling buffer of shared-memory slots.\n"
            "\n"
            "Dataset:\n"
            "  --dataset NAME             synthetic: generated samples every consumer can check\n"
            "                             imagenet:  an ImageFolder tree (ROOT/<class>/<file>);\n"
            "                                        ROOT/train or ROOT/val is used when it\n"
            "                                        exists, as in ImageNet's own layout\n"
            "                             folder:    an ImageFolder tree, ROOT itself\n"
            "                             list:      a file of 'path label' lines (--list)\n"
            "                             webdataset: WebDataset tar shards (--shards)\n"
            "  --root DIR                 the tree (imagenet, folder)\n"
            "  --list FILE                the list file (list)\n"
            "  --shards SPEC              the tar shards (webdataset): a brace pattern\n"
            "                             DIR/train-{0000..0099}.tar, a directory (the split's\n"
            "                             shards in its _info.json, else its *.tar), or a file\n"
            "                             listing shard paths\n"
            "  --label-key KEY            webdataset: labels from this field of each sample's\n"
            "                             json member (default: its cls member)\n"
            "  --shuffle samples|shards   webdataset: samples (default) permutes all samples;\n"
            "                             shards permutes shards, then samples within windows\n"
            "                             of --shard-window shards (fewer random reads)\n"
            "  --shard-window N           shards shuffled together by --shuffle shards\n"
            "                             (default 4)\n"
            "  --split train|val          train: RandomResizedCrop + horizontal flip (default)\n"
            "                             val: Resize(size*256/224) + CenterCrop(size)\n"
            "  --image-size N             output images are N x N x 3 uint8 (default 224;\n"
            "                             synthetic: 32)\n"
            "  --crop-scale MIN,MAX       RandomResizedCrop's area range (default 0.08,1)\n"
            "  --no-flip                  no horizontal flips (train)\n"
            "  --workers N                decoding threads (default: one per CPU)\n"
            "  --io auto|uring|pread      how files are read (default auto: io_uring, else\n"
            "                             pread)\n"
            "  --io-depth N               reads in flight (default 64)\n"
            "  --on-error skip|fail       a file that cannot be decoded: replace it with the\n"
            "                             next good sample and go on (default), or stop\n"
            "  --decoder cpu|gpu          where JPEGs are decoded: the workers (default), or\n"
            "                             the GPU (nvJPEG, with --device cuda; the rest on\n"
            "                             the workers)\n"
            "  --index-cache FILE         keep the dataset index here between runs (outside\n"
            "                             the dataset)\n"
            "  --entry-points-mb N        memory for the JPEGs' entry points kept across\n"
            "                             epochs, which let later epochs skip entropy\n"
            "                             decoding outside the crop (default 1024; 0: none;\n"
            "                             about 2 KiB per ImageNet-sized file)\n"
            "  --samples N                samples in the synthetic dataset (default 4096)\n"
            "\n"
            "%s"
            "Where the ring lives, and what consumers see (converted once, for every job):\n"
            "  --device cpu|cuda[:N]      keep the ring in host shared memory (default) or in\n"
            "                             the memory of GPU N (a CUDA build with an NVIDIA GPU);\n"
            "                             consumers use it in place\n"
            "  --output uint8|float16|float32\n"
            "                             the image dtype consumers see, converted once on the\n"
            "                             GPU, or on the CPU at publish for a host ring\n"
            "                             (default uint8: a quarter of the bytes of float32)\n"
            "  --layout nhwc|nchw         the image layout consumers see (default nhwc)\n"
            "  --normalize[=M1,M2,M3,S1,S2,S3]\n"
            "                             (x/255 - mean) / std per channel, ImageNet's mean and\n"
            "                             std when no values are given; implies float32 unless\n"
            "                             --output float16\n"
            "\n"
            "Serving:\n"
            "  --endpoint ADDR            ZeroMQ endpoint (ipc:///path or tcp://host:port);\n"
            "                             default: the per-user ipc endpoint\n"
            "  --batch-size N             samples per batch (default 64)\n"
            "  --slots N                  slots in the ring, 2 or more (default 8)\n"
            "  --epochs N                 epochs to serve, 0 = until stopped (default 0: a\n"
            "                             producer beside training jobs serves them all)\n"
            "  --seed N                   seed of the shuffle and augmentations (default 0)\n"
            "  --nodes N                  one producer per node: serve only this node's share\n"
            "                             of the dataset, the same split on every node for the\n"
            "                             same --seed (default: SLURM_NNODES, else torchrun's\n"
            "                             WORLD_SIZE / LOCAL_WORLD_SIZE, else 1)\n"
            "  --node-rank K              this node, 0..N-1 (default: SLURM_NODEID, else\n"
            "                             torchrun's GROUP_RANK)\n"
            "  --wait-consumers N         publish nothing until N consumers joined and read (a\n"
            "                             job paused before its first read counts once it\n"
            "                             reads: docs/semantics.md; default 0)\n"
            "  --heartbeat-ms N           heartbeat interval (library default 250)\n"
            "  --heartbeat-timeout-ms N   silence after which a consumer is dropped and its\n"
            "                             slots reclaimed (library default 3000)\n"
            "\n"
            "Who may connect (docs/security.md):\n"
            "  --curve-secret-key FILE    authenticate and encrypt with CURVE: this producer's\n"
            "                             secret key file (tsock-keygen; mode 0600)\n"
            "  --curve-authorized-keys PATH\n"
            "                             the client public keys accepted: a file with one\n"
            "                             key per line, or a directory of *.key files\n"
            "  --insecure-open-to-network serve an endpoint other hosts or users can reach\n"
            "                             (0.0.0.0, *, SOURCE;ADDRESS, ipc://@NAME)\n"
            "                             WITHOUT authentication (refused otherwise): anyone\n"
            "                             who reaches it can join, hold slots, read batches\n"
            "\n"
            "Reporting:\n"
            "  --stats-json FILE          write one JSON object per interval and a final one\n"
            "                             (the file is replaced once the producer started)\n"
            "  --stats-interval SECONDS   interval of the live status line and of the JSON\n"
            "                             records (default 1)\n"
            "  --quiet                    print only errors and warnings (no status line)\n"
            "  --verbose                  print every library log line\n"
            "  --help                     show this help\n"
            "  --version                  show the version and the build's features\n"
            "\n"
            "Batches hold: image uint8 [B,N,N,3], label int64 [B], index int64 [B] (sample id).\n"
            "While no consumer is connected nothing is published: the producer waits for one\n"
            "(a consumer may join or rejoin at any time) until its epochs are served or it is\n"
            "stopped.\n"
            "Exit status: 0 done or stopped by SIGINT/SIGTERM, 1 error, 2 bad usage.\n",
            augment_options_usage);
}

enum {
    OPT_DATASET = 256,
    OPT_ROOT,
    OPT_LIST,
    OPT_SHARDS,
    OPT_LABEL_KEY,
    OPT_SHUFFLE,
    OPT_SHARD_WINDOW,
    OPT_SPLIT,
    OPT_IMAGE_SIZE,
    OPT_CROP_SCALE,
    OPT_NO_FLIP,
    OPT_WORKERS,
    OPT_IO,
    OPT_IO_DEPTH,
    OPT_ON_ERROR,
    OPT_DECODER,
    OPT_INDEX_CACHE,
    OPT_ENTRY_POINTS_MB,
    OPT_SAMPLES,
    OPT_ENDPOINT,
    OPT_BATCH_SIZE,
    OPT_SLOTS,
    OPT_EPOCHS,
    OPT_SEED,
    OPT_NODES,
    OPT_NODE_RANK,
    OPT_WAIT_CONSUMERS,
    OPT_HEARTBEAT_MS,
    OPT_HEARTBEAT_TIMEOUT_MS,
    OPT_CURVE_SECRET_KEY,
    OPT_CURVE_AUTHORIZED_KEYS,
    OPT_INSECURE_OPEN_TO_NETWORK,
    OPT_STATS_JSON,
    OPT_STATS_INTERVAL,
    OPT_DEVICE,
    OPT_OUTPUT,
    OPT_LAYOUT,
    OPT_NORMALIZE,
    OPT_QUIET,
    OPT_VERBOSE,
    OPT_HELP,
    OPT_VERSION
};

static const struct option longopts[] = {
    {"dataset", required_argument, NULL, OPT_DATASET},
    {"root", required_argument, NULL, OPT_ROOT},
    {"list", required_argument, NULL, OPT_LIST},
    {"shards", required_argument, NULL, OPT_SHARDS},
    {"label-key", required_argument, NULL, OPT_LABEL_KEY},
    {"shuffle", required_argument, NULL, OPT_SHUFFLE},
    {"shard-window", required_argument, NULL, OPT_SHARD_WINDOW},
    {"split", required_argument, NULL, OPT_SPLIT},
    {"image-size", required_argument, NULL, OPT_IMAGE_SIZE},
    {"crop-scale", required_argument, NULL, OPT_CROP_SCALE},
    {"no-flip", no_argument, NULL, OPT_NO_FLIP},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"io", required_argument, NULL, OPT_IO},
    {"io-depth", required_argument, NULL, OPT_IO_DEPTH},
    {"on-error", required_argument, NULL, OPT_ON_ERROR},
    {"decoder", required_argument, NULL, OPT_DECODER},
    {"index-cache", required_argument, NULL, OPT_INDEX_CACHE},
    {"entry-points-mb", required_argument, NULL, OPT_ENTRY_POINTS_MB},
    {"samples", required_argument, NULL, OPT_SAMPLES},
    {"endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"batch-size", required_argument, NULL, OPT_BATCH_SIZE},
    {"slots", required_argument, NULL, OPT_SLOTS},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"nodes", required_argument, NULL, OPT_NODES},
    {"node-rank", required_argument, NULL, OPT_NODE_RANK},
    {"wait-consumers", required_argument, NULL, OPT_WAIT_CONSUMERS},
    {"heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT_MS},
    {"heartbeat-timeout-ms", required_argument, NULL, OPT_HEARTBEAT_TIMEOUT_MS},
    {"curve-secret-key", required_argument, NULL, OPT_CURVE_SECRET_KEY},
    {"curve-authorized-keys", required_argument, NULL, OPT_CURVE_AUTHORIZED_KEYS},
    {"insecure-open-to-network", no_argument, NULL, OPT_INSECURE_OPEN_TO_NETWORK},
    {"stats-json", required_argument, NULL, OPT_STATS_JSON},
    {"stats-interval", required_argument, NULL, OPT_STATS_INTERVAL},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"layout", required_argument, NULL, OPT_LAYOUT},
    {"normalize", optional_argument, NULL, OPT_NORMALIZE},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    AUGMENT_LONGOPTS,
    {NULL, 0, NULL, 0}};

/* Which of the options that only some datasets take were given, to reject the others. */
struct seen {
    int nodes, node_rank;   /* --nodes, --node-rank given */
    const char *image_only; /* an option of the image datasets */
    int samples, image_size;
};

static const char *
non_empty(const char *opt, const char *value)
{
    if (value[0] == '\0')
        cli_bad_usage("--%s: the value must not be empty", opt);
    return value;
}

static void
parse_crop_scale(const char *value, struct config *cfg)
{
    char *end;
    cfg->scale_min = cli_parse_double("crop-scale", value, &end);
    if (*end != ',')
        cli_bad_usage("--crop-scale: expected MIN,MAX (for example 0.08,1), got '%s'", value);
    const char *second = end + 1;
    cfg->scale_max = cli_parse_double("crop-scale", second, &end);
    if (*end != '\0')
        cli_bad_usage("--crop-scale: expected MIN,MAX (for example 0.08,1), got '%s'", value);
    if (!(cfg->scale_min > 0 && cfg->scale_min <= cfg->scale_max && cfg->scale_max <= 1))
        cli_bad_usage("--crop-scale: need 0 < MIN <= MAX <= 1, got '%s'", value);
}

/* --device cpu, cuda or cuda:N. */
static void
parse_device(const char *value, struct config *cfg)
{
    if (strcmp(value, "cpu") == 0)
        cfg->device = -1;
    else if (strcmp(value, "cuda") == 0)
        cfg->device = 0;
    else if (strncmp(value, "cuda:", 5) == 0)
        cfg->device = (int)cli_parse_u64("device", value + 5, 0, 1023);
    else
        cli_bad_usage("--device: '%s' is not a valid value (expected cpu, cuda or cuda:N)", value);
}

/* --normalize=M1,M2,M3,S1,S2,S3: three means and three positive standard deviations. Each
 * must survive the conversion to float (1e39 is a finite double but an infinite float); the
 * range of the results is checked once the output dtype is known (check_normalize). */
static void
parse_normalize(const char *value, struct config *cfg)
{
    static const float imagenet[6] = {0.485f, 0.456f, 0.406f, 0.229f, 0.224f, 0.225f};
    float v[6];
    cfg->normalize = 1;
    if (!value) {
        memcpy(v, imagenet, sizeof v);
    } else {
        const char *p = value;
        for (int i = 0; i < 6; i++) {
            char *end;
            v[i] = (float)cli_parse_double("normalize", p, &end);
            if (*end != (i < 5 ? ',' : '\0'))
                cli_bad_usage("--normalize: expected six numbers M1,M2,M3,S1,S2,S3, got '%s'",
                              value);
            if (!isfinite(v[i]))
                cli_bad_usage("--normalize: value %d is out of the range of float, got '%s'", i + 1,
                              value);
            p = end + 1;
        }
        for (int i = 3; i < 6; i++)
            if (!(v[i] > 0) || !isnormal(v[i]))
                cli_bad_usage("--normalize: standard deviations must be positive (at least "
                              "%g), got '%s'",
                              (double)FLT_MIN, value);
    }
    memcpy(cfg->mean, v, sizeof cfg->mean);
    memcpy(cfg->std, v + 3, sizeof cfg->std);
}

static void
parse_one(int c, const char *arg, struct config *cfg, struct seen *seen)
{
    static const char *const outputs[] = {"uint8", "float16", "float32", NULL};
    static const int output_dtypes[] = {TSOCK_UINT8, TSOCK_FLOAT16, TSOCK_FLOAT32};
    static const char *const layouts[] = {"nhwc", "nchw", NULL};
    static const char *const datasets[] = {"synthetic", "imagenet",   "folder",
                                           "list",      "webdataset", NULL};
    static const char *const shuffles[] = {"samples", "shards", NULL};
    static const char *const splits[] = {"train", "val", NULL};
    static const char *const io_modes[] = {"auto", "uring", "pread", NULL};
    static const char *const on_errors[] = {"skip", "fail", NULL};

    switch (c) {
    case OPT_DATASET:
        cfg->dataset = cli_parse_choice("dataset", arg, datasets);
        cfg->dataset_name = datasets[cfg->dataset];
        break;
    case OPT_ROOT:
        cfg->root = non_empty("root", arg);
        seen->image_only = "--root";
        break;
    case OPT_LIST:
        cfg->list = non_empty("list", arg);
        seen->image_only = "--list";
        break;
    case OPT_SHARDS:
        cfg->shards = non_empty("shards", arg);
        seen->image_only = "--shards";
        break;
    case OPT_LABEL_KEY:
        cfg->label_key = non_empty("label-key", arg);
        seen->image_only = "--label-key";
        break;
    case OPT_SHUFFLE:
        cfg->shuffle_shards = cli_parse_choice("shuffle", arg, shuffles);
        seen->image_only = "--shuffle";
        break;
    case OPT_SHARD_WINDOW:
        cfg->shard_window = (uint32_t)cli_parse_u64("shard-window", arg, 1, 1000000);
        seen->image_only = "--shard-window";
        break;
    case OPT_SPLIT:
        cfg->val = cli_parse_choice("split", arg, splits);
        seen->image_only = "--split";
        break;
    case OPT_IMAGE_SIZE:
        cfg->image_size = cli_parse_u64("image-size", arg, 1, 8192);
        seen->image_size = 1;
        break;
    case OPT_CROP_SCALE:
        parse_crop_scale(arg, cfg);
        seen->image_only = "--crop-scale";
        break;
    case OPT_NO_FLIP:
        cfg->flip = 0;
        seen->image_only = "--no-flip";
        break;
    case OPT_WORKERS:
        cfg->workers = (int)cli_parse_u64("workers", arg, 1, TSOCK_PIPELINE_MAX_WORKERS);
        seen->image_only = "--workers";
        break;
    case OPT_IO:
        cfg->io_mode = cli_parse_choice("io", arg, io_modes);
        seen->image_only = "--io";
        break;
    case OPT_IO_DEPTH:
        cfg->io_depth = (int)cli_parse_u64("io-depth", arg, 1, TSOCK_PIPELINE_MAX_IO_DEPTH);
        seen->image_only = "--io-depth";
        break;
    case OPT_ON_ERROR:
        cfg->on_error = cli_parse_choice("on-error", arg, on_errors);
        seen->image_only = "--on-error";
        break;
    case OPT_DECODER: {
        static const char *const decoders[] = {"cpu", "gpu", NULL};
        cfg->decoder = cli_parse_choice("decoder", arg, decoders);
        seen->image_only = "--decoder";
        break;
    }
    case OPT_INDEX_CACHE:
        cfg->index_cache = non_empty("index-cache", arg);
        seen->image_only = "--index-cache";
        break;
    case OPT_ENTRY_POINTS_MB:
        cfg->entry_points_mb = cli_parse_u64("entry-points-mb", arg, 0, UINT64_C(1) << 30);
        seen->image_only = "--entry-points-mb";
        break;
    case OPT_SAMPLES:
        cfg->samples = cli_parse_u64("samples", arg, 1, UINT64_C(1) << 32);
        seen->samples = 1;
        break;
    case OPT_ENDPOINT: cfg->endpoint = non_empty("endpoint", arg); break;
    case OPT_BATCH_SIZE: cfg->batch_size = cli_parse_u64("batch-size", arg, 1, 1u << 20); break;
    case OPT_SLOTS: cfg->slots = cli_parse_u64("slots", arg, 2, 1024); break;
    case OPT_EPOCHS: cfg->epochs = cli_parse_u64("epochs", arg, 0, UINT64_C(1) << 40); break;
    case OPT_SEED: cfg->seed = cli_parse_u64("seed", arg, 0, UINT64_MAX); break;
    case OPT_NODES:
        cfg->nodes = (uint32_t)cli_parse_u64("nodes", arg, 1, 65536);
        seen->nodes = 1;
        break;
    case OPT_NODE_RANK:
        cfg->node_rank = (uint32_t)cli_parse_u64("node-rank", arg, 0, 65535);
        seen->node_rank = 1;
        break;
    case OPT_WAIT_CONSUMERS:
        cfg->wait_consumers = cli_parse_u64("wait-consumers", arg, 0, 1024);
        break;
    case OPT_HEARTBEAT_MS:
        cfg->heartbeat_ms = (int)cli_parse_u64("heartbeat-ms", arg, 1, 600000);
        break;
    case OPT_HEARTBEAT_TIMEOUT_MS:
        cfg->heartbeat_timeout_ms = (int)cli_parse_u64("heartbeat-timeout-ms", arg, 1, 3600000);
        break;
    case OPT_CURVE_SECRET_KEY: cfg->curve_secret_key = non_empty("curve-secret-key", arg); break;
    case OPT_CURVE_AUTHORIZED_KEYS:
        cfg->curve_authorized_keys = non_empty("curve-authorized-keys", arg);
        break;
    case OPT_INSECURE_OPEN_TO_NETWORK: cfg->insecure_open_to_network = 1; break;
    case OPT_STATS_JSON: cfg->stats_path = non_empty("stats-json", arg); break;
    case OPT_STATS_INTERVAL: {
        char *end;
        cfg->status_interval_s = cli_parse_double("stats-interval", arg, &end);
        if (*end != '\0' || cfg->status_interval_s < 0.05 || cfg->status_interval_s > 3600)
            cli_bad_usage("--stats-interval: need a number of seconds in 0.05..3600, got '%s'",
                          arg);
        break;
    }
    case OPT_DEVICE: parse_device(arg, cfg); break;
    case OPT_OUTPUT:
        cfg->output_dtype = output_dtypes[cli_parse_choice("output", arg, outputs)];
        cfg->convert = 1;
        break;
    case OPT_LAYOUT:
        cfg->layout = cli_parse_choice("layout", arg, layouts) ? TSOCK_NCHW : TSOCK_NHWC;
        cfg->convert = 1;
        break;
    case OPT_NORMALIZE: parse_normalize(arg, cfg); break;
    case 'q':
    case OPT_QUIET: cfg->quiet = 1; break;
    case 'v':
    case OPT_VERBOSE: cfg->verbose = 1; break;
    default:
        if (augment_options_parse(c, arg, &cfg->augment))
            seen->image_only = cfg->augment.first;
        break;
    }
}

/* Every normalised value (x/255 - mean) / std, x in 0..255, must be finite in the output
 * dtype (float16 when asked for, else float32): a huge mean or a tiny std would fill the
 * batches with infinities. */
static void
check_normalize(const struct config *cfg)
{
    double max = cfg->output_dtype == TSOCK_FLOAT16 ? 65504.0 : (double)FLT_MAX;
    for (int c = 0; c < 3; c++) {
        double m = cfg->mean[c], sd = cfg->std[c];
        double worst = fmax(fabs(0.0 - m), fabs(1.0 - m)) / sd;
        if (!(worst <= max))
            cli_bad_usage("--normalize: channel %d gives values up to %g, beyond the range of "
                          "%s; check the means and standard deviations",
                          c + 1, worst, cfg->output_dtype == TSOCK_FLOAT16 ? "float16" : "float32");
    }
}

/* The options of --dataset webdataset, and only of it. */
static void
check_webdataset(struct config *cfg)
{
    if (cfg->dataset != DATASET_WEBDATASET) {
        if (cfg->shards || cfg->label_key || cfg->shuffle_shards || cfg->shard_window)
            cli_bad_usage("%s: only for --dataset webdataset", cfg->shards      ? "--shards"
                                                               : cfg->label_key ? "--label-key"
                                                               : cfg->shuffle_shards
                                                                   ? "--shuffle"
                                                                   : "--shard-window");
        return;
    }
    if (!cfg->shards)
        cli_bad_usage("--dataset webdataset needs --shards SPEC (a brace pattern such as "
                      "DIR/train-{0000..0099}.tar, a directory, or a file listing shards)");
    if (cfg->root || cfg->list)
        cli_bad_usage("%s: not for --dataset webdataset (give the shards with --shards)",
                      cfg->root ? "--root" : "--list");
    if (cfg->shard_window && !cfg->shuffle_shards)
        cli_bad_usage("--shard-window: only with --shuffle shards");
    if (!cfg->shard_window)
        cfg->shard_window = 4;
}

/* Checks that hold between options, once all are read. */
static void
check_combination(struct config *cfg, const struct seen *seen)
{
    if (!cfg->dataset_name)
        cli_bad_usage("--dataset is required; one of: synthetic, imagenet, folder, list, "
                      "webdataset");
    if (cfg->dataset == DATASET_SYNTHETIC) {
        if (seen->image_only)
            cli_bad_usage("%s: only for the image datasets (imagenet, folder, list, webdataset)",
                          seen->image_only);
        if (!seen->image_size)
            cfg->image_size = 32;
    } else {
        if (seen->samples)
            cli_bad_usage("--samples: only for --dataset synthetic (an image dataset has as "
                          "many samples as files)");
        check_webdataset(cfg);
        if (cfg->dataset == DATASET_LIST && !cfg->list)
            cli_bad_usage("--dataset list needs --list FILE");
        if (cfg->dataset == DATASET_LIST && cfg->root)
            cli_bad_usage("--root: not for --dataset list (paths are relative to the list "
                          "file's folder)");
        if (cfg->dataset != DATASET_LIST && cfg->dataset != DATASET_WEBDATASET && !cfg->root)
            cli_bad_usage("--dataset %s needs --root DIR", cfg->dataset_name);
        if (cfg->dataset != DATASET_LIST && cfg->list)
            cli_bad_usage("--list: only for --dataset list");
    }
    if (cfg->decoder == TSOCK_DECODER_GPU && cfg->device < 0)
        cli_bad_usage("--decoder gpu: decodes into the ring on the GPU; add --device cuda");
    if (cfg->decoder == TSOCK_DECODER_GPU && augment_options_cpu_only(&cfg->augment))
        cli_bad_usage("--decoder gpu: %s runs on the CPU workers, after a CPU decode; use "
                      "--decoder cpu (the default) with it",
                      augment_options_cpu_only(&cfg->augment));
    if (cfg->normalize && cfg->convert && cfg->output_dtype == TSOCK_UINT8)
        cli_bad_usage("--normalize: needs --output float16 or float32 (normalised values are "
                      "not bytes)");
    if (cfg->normalize)
        check_normalize(cfg);
    cli_check_heartbeat(cfg->heartbeat_ms, cfg->heartbeat_timeout_ms);
    if (!cfg->curve_secret_key != !cfg->curve_authorized_keys)
        cli_bad_usage("%s: CURVE needs both --curve-secret-key and --curve-authorized-keys",
                      cfg->curve_secret_key ? "--curve-secret-key" : "--curve-authorized-keys");
    if (cfg->curve_secret_key && cfg->insecure_open_to_network)
        cli_bad_usage("--insecure-open-to-network: contradicts --curve-secret-key (CURVE keys "
                      "already make a network endpoint safe)");
    /* The ring must be addressable: batch * (image + 16 bytes) * slots below 2^40 bytes. */
    long double ring =
        (long double)cfg->batch_size *
        ((long double)cfg->image_size * (long double)cfg->image_size * 3.0L + 16.0L) *
        (long double)cfg->slots;
    if (ring > (long double)(UINT64_C(1) << 40))
        cli_bad_usage("--batch-size x --image-size x --slots: the ring would need %.0Lf bytes, "
                      "more than 1 TiB",
                      ring);
}

/* An environment variable as a count, or -1 when unset; a set but malformed value is a usage
 * error naming the variable, never silently one node. */
static long
env_count(const char *name, long min, long max)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return -1;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < min || n > max)
        cli_bad_usage("%s=%s: expected an integer from %ld to %ld (or pass --nodes and "
                      "--node-rank)",
                      name, v, min, max);
    return n;
}

/* The launcher's view of the nodes: Slurm's, else torchrun's (which has no node count of its
 * own: WORLD_SIZE / LOCAL_WORLD_SIZE, every node running as many ranks). */
static void
nodes_from_environment(struct config *cfg)
{
    long nodes = env_count("SLURM_NNODES", 1, 65536);
    if (nodes > 0) {
        long id = env_count("SLURM_NODEID", 0, 65535);
        if (id < 0 && nodes > 1)
            cli_bad_usage("SLURM_NNODES=%ld but SLURM_NODEID is not set: pass --node-rank", nodes);
        cfg->nodes = (uint32_t)nodes;
        cfg->node_rank = id < 0 ? 0 : (uint32_t)id;
        cfg->nodes_from = "SLURM_NNODES, SLURM_NODEID";
        return;
    }
    long world = env_count("WORLD_SIZE", 1, 1L << 24);
    long local = env_count("LOCAL_WORLD_SIZE", 1, 1L << 24);
    long group = env_count("GROUP_RANK", 0, 65535);
    /* Half a torchrun environment contradicts itself: several nodes without this node's rank,
     * or a node rank without the sizes that say how many nodes there are. */
    if (world > 0 && local > 0 && group < 0 && world / local > 1)
        cli_bad_usage("WORLD_SIZE=%ld / LOCAL_WORLD_SIZE=%ld makes %ld nodes, but GROUP_RANK is "
                      "not set: set it, or pass --nodes and --node-rank",
                      world, local, world / local);
    if (group >= 0 && (world < 0 || local < 0))
        cli_bad_usage("GROUP_RANK=%ld is set without %s: set both WORLD_SIZE and "
                      "LOCAL_WORLD_SIZE, or pass --nodes and --node-rank",
                      group, world < 0 ? "WORLD_SIZE" : "LOCAL_WORLD_SIZE");
    if (world < 0 || local < 0 || group < 0)
        return;
    if (world % local != 0 || world / local > 65536)
        cli_bad_usage("WORLD_SIZE=%ld is not a multiple of LOCAL_WORLD_SIZE=%ld: pass --nodes "
                      "and --node-rank",
                      world, local);
    cfg->nodes = (uint32_t)(world / local);
    cfg->node_rank = (uint32_t)group;
    cfg->nodes_from = "WORLD_SIZE / LOCAL_WORLD_SIZE, GROUP_RANK";
}

static void
resolve_nodes(struct config *cfg, const struct seen *seen)
{
    if (seen->node_rank && !seen->nodes)
        cli_bad_usage("--node-rank: needs --nodes");
    if (seen->nodes) {
        if (cfg->nodes > 1 && !seen->node_rank)
            cli_bad_usage("--nodes %u: needs --node-rank (0..%u)", cfg->nodes, cfg->nodes - 1);
        cfg->nodes_from = "--nodes, --node-rank";
    } else {
        nodes_from_environment(cfg);
    }
    if (cfg->node_rank >= cfg->nodes)
        cli_bad_usage("node rank %u (%s): must be below the %u nodes", cfg->node_rank,
                      cfg->nodes_from, cfg->nodes);
    if (cfg->dataset == DATASET_SYNTHETIC && cfg->nodes > cfg->samples)
        cli_bad_usage("--nodes %u: more nodes than the %llu samples", cfg->nodes,
                      (unsigned long long)cfg->samples);
}

void
parse_options(int argc, char **argv, struct config *cfg)
{
    struct seen seen = {0};

    *cfg = (struct config){.batch_size = 64,
                           .slots = 8,
                           .samples = 4096,
                           .image_size = 224,
                           .epochs = 0, /* until stopped: a job's epoch count is its own */
                           .io_mode = TSOCK_READ_AUTO,
                           .io_depth = 64,
                           .flip = 1,
                           .on_error = TSOCK_ON_ERROR_SKIP,
                           .entry_points_mb = TSOCK_PIPELINE_DEFAULT_ENTRY_POINT_BYTES >> 20,
                           .scale_min = 0.08,
                           .scale_max = 1.0,
                           .status_interval_s = 1.0,
                           .device = -1,
                           .output_dtype = TSOCK_UINT8,
                           .layout = TSOCK_NHWC,
                           .nodes = 1};
    augment_options_init(&cfg->augment);
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":hqv", longopts, NULL);
        if (c == -1)
            break;
        if (c == 'h' || c == OPT_HELP) {
            usage(stdout);
            exit(0);
        }
        if (c == OPT_VERSION) {
            /* The program's version and the loaded library's, both from tsock/version.h. */
            printf("tsock-producer %s (libtsock %s: %s)\n", TSOCK_VERSION_STRING,
                   tsock_version_string(), tsock_build_info());
            exit(0);
        }
        if (c == ':')
            cli_bad_usage("%s: missing value", argv[optind - 1]);
        if (c == '?') {
            if (optopt && optopt < 256)
                cli_bad_usage("unknown option '-%c'", optopt);
            cli_bad_usage("unknown option '%s'", argv[optind - 1]);
        }
        parse_one(c, optarg, cfg, &seen);
    }
    if (optind < argc)
        cli_bad_usage("unexpected argument '%s' (every setting is an --option)", argv[optind]);
    if (cfg->dataset != DATASET_SYNTHETIC)
        augment_options_check(&cfg->augment, cfg->val, &cfg->image_size, seen.image_size);
    check_combination(cfg, &seen);
    resolve_nodes(cfg, &seen);
}

static int
is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *
dataset_path(const struct config *cfg)
{
    if (cfg->dataset == DATASET_LIST)
        return strdup(cfg->list);
    if (cfg->dataset == DATASET_WEBDATASET)
        return strdup(cfg->shards);
    if (cfg->dataset == DATASET_IMAGENET) {
        size_t len = strlen(cfg->root) + 8;
        char *split = malloc(len);
        if (!split)
            return NULL;
        snprintf(split, len, "%s/%s", cfg->root, cfg->val ? "val" : "train");
        if (is_dir(split))
            return split;
        free(split);
    }
    return strdup(cfg->root);
}
