/* tsock-producer's command line: what it serves and how. */
#ifndef TSOCK_PRODUCER_OPTIONS_H
#define TSOCK_PRODUCER_OPTIONS_H

#include <stdint.h>

#include "augment_options.h"

enum dataset_kind {
    DATASET_SYNTHETIC = 0, /* checkable generated samples (synthetic.h) */
    DATASET_IMAGENET = 1,  /* an ImageFolder tree, or its train/ or val/ folder */
    DATASET_FOLDER = 2,    /* an ImageFolder tree, as given */
    DATASET_LIST = 3,      /* a "path label" list file */
    DATASET_WEBDATASET = 4 /* WebDataset tar shards (--shards SPEC) */
};

struct config {
    int dataset; /* enum dataset_kind */
    const char *dataset_name;
    const char *root;         /* imagenet, folder */
    const char *list;         /* list */
    const char *shards;       /* webdataset: the SPEC */
    const char *label_key;    /* webdataset: json field of the label (NULL: cls) */
    int shuffle_shards;       /* --shuffle shards */
    uint32_t shard_window;    /* --shard-window: shards read together (default 4) */
    const char *index_cache;  /* NULL: none */
    uint64_t entry_points_mb; /* --entry-points-mb: their memory cap in MiB (0: none kept) */
    int val;                  /* --split val: the val preset */
    const char *endpoint;
    const char *curve_secret_key;      /* --curve-secret-key: the producer's secret key file */
    const char *curve_authorized_keys; /* --curve-authorized-keys: the clients it accepts */
    int insecure_open_to_network;      /* --insecure-open-to-network */
    const char *stats_path;
    uint64_t batch_size, slots, samples, image_size, epochs, seed, wait_consumers;
    int workers; /* 0: one per CPU */
    int io_mode; /* tsock_read_mode */
    int io_depth;
    int flip;
    int on_error; /* tsock_on_error */
    int decoder;  /* tsock_decoder */
    double scale_min, scale_max;
    int heartbeat_ms, heartbeat_timeout_ms;
    double status_interval_s; /* live status line and --stats-json records */
    int device;               /* -1: host shared memory; else the CUDA device */
    int output_dtype;         /* tsock_dtype of the image as consumers see it (GPU only) */
    int layout;               /* tsock_image_layout (GPU only) */
    int convert;              /* --output or --layout given */
    int normalize;            /* --normalize given */
    float mean[3], std[3];    /* its values; ImageNet's when --normalize has none */
    int quiet, verbose;
    /* Several nodes: this producer serves node node_rank's share of nodes (1: the whole
     * dataset); nodes_from names where the values came from (a flag or the launcher's
     * environment), for the start message. */
    uint32_t nodes, node_rank;
    const char *nodes_from;
    struct augment_options augment; /* crop/resize sizes and augmentations (augment_options.h) */
};

/* Parses the command line into cfg (defaults filled in), exiting with status 2 and a message
 * naming the option on any bad usage, and with status 0 after --help. */
void parse_options(int argc, char **argv, struct config *cfg);

/* The folder the pipeline indexes: for --dataset imagenet, ROOT/train or ROOT/val when that
 * folder exists (ImageNet's usual layout), else ROOT. Returns a malloc'ed path or NULL. */
char *dataset_path(const struct config *cfg);

#endif
