/*
 * tsock image pipeline: index an image dataset, then read, decode and augment the samples of
 * each batch on worker threads, straight into a producer's slot.
 *
 * This is what tsock-producer --dataset imagenet|folder|list|webdataset runs; a C program that
 * serves its own producer can use it the same way:
 *
 *     tsock_pipeline_create(&pl, TSOCK_SOURCE_FOLDER, "/data/imagenet/train");
 *     tsock_pipeline_set_workers(pl, 8);               // any setter, before open
 *     tsock_pipeline_open(pl);                         // index (or its cache) + header check
 *     tsock_pipeline_add_tensors(pl, layout);          // image, label, index
 *     tsock_producer_create(&p, NULL, layout, 256, 8);
 *     tsock_producer_set_sampler(p, tsock_pipeline_samples(pl), seed, epochs);
 *     ... tsock_producer_acquire(p, -1, &slot);
 *         tsock_pipeline_fill(pl, slot);               // every planned sample of the slot
 *         tsock_producer_publish(p, slot, tsock_slot_planned(slot));
 *
 * Datasets. TSOCK_SOURCE_FOLDER is torchvision's ImageFolder layout, root/<class>/<file>
 * (deeper files count for their class), classes sorted by name and numbered from 0 as
 * ImageFolder numbers them; files are the ones with one of ImageFolder's image extensions.
 * TSOCK_SOURCE_LIST is a text file of "path label" lines (paths relative to the list's folder
 * or absolute). Sample ids are positions in the index: for a folder, ImageFolder's order.
 *
 * TSOCK_SOURCE_WEBDATASET reads WebDataset tar shards; `path` is a SPEC: a brace pattern
 * (DIR/train-{0000..1023}.tar), a directory (the shards its timm _info.json or info.json
 * names for the split, else its *.tar files by name), one .tar file, or a file listing shard
 * paths. A sample is a run of consecutive members sharing a key (the path up to the first dot
 * of the file name); its image is the jpg, jpeg, png or webp member, its label the decimal in
 * its cls member or a json member's field (tsock_pipeline_set_shard_options). Tar headers may
 * be ustar, GNU or PAX. Each shard is indexed once (offset and length of each image member;
 * the index cache keeps it, keyed by each shard's size and mtime), then each sample is one
 * read of its member at its offset. Sample ids are positions in shard order (SPEC's order),
 * then tar order; tsock_pipeline_sample_path gives a sample's key. Malformed samples (bad
 * checksum, truncation, no image, no label, duplicate key) are logged with shard, offset and
 * key and left out; with TSOCK_ON_ERROR_FAIL they fail the open. docs/pipeline.md has the
 * rules.
 *
 * Presets (what each sample becomes; output uint8 RGB, HWC):
 *  - TSOCK_PRESET_TRAIN: RandomResizedCrop(size, scale, ratio 3/4..4/3) with torchvision's
 *    sampling rule, then RandomHorizontalFlip(0.5).
 *  - TSOCK_PRESET_VAL: Resize(size * 256 / 224, antialiased bilinear) on the shorter side, then
 *    CenterCrop(size): Resize(256) + CenterCrop(224) at the default size.
 * Everything random derives from (seed, epoch, sample id), so the bytes of a batch do not
 * depend on the number of workers, the read method or the thread timing.
 *
 * Bad files. The index leaves out files that cannot be samples: empty, unreadable, too large
 * (see the log), and files whose header shows they are not an image tsock decodes (not an
 * image, an unsupported format, a corrupt or truncated header, over the pixel limit). That
 * header check reads the start of every file once, when the index is built; the index cache
 * remembers its result. A file that passes it but cannot be read or decoded when its turn
 * comes (truncated beyond repair, corrupt data, vanished) is logged once with its path and
 * left out from then on: by default (TSOCK_ON_ERROR_SKIP) its place in the batch is filled
 * with the next sample id after it whose file decodes (its image, label and id, with the bad
 * sample's random crop), so a batch is always full and every image in it is real. With
 * TSOCK_ON_ERROR_FAIL the load fails with TSOCK_E_BAD_SAMPLE instead. Both are counted (see
 * tsock_pipeline_stat).
 *
 * Threads: a pipeline is driven by one thread at a time (the producer's loop); it runs its
 * own worker threads. Memory: the index (about 47 bytes per sample for ImageNet paths), one
 * decoder per worker, and the files of one batch in flight; nothing grows with epochs.
 */
#ifndef TSOCK_PIPELINE_H
#define TSOCK_PIPELINE_H

#include <stdint.h>

#include "tsock/augment.h"
#include "tsock/tsock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsock_pipeline tsock_pipeline;

typedef enum tsock_source {
    TSOCK_SOURCE_FOLDER = 0,    /* root/<class>/<file>, ImageFolder order */
    TSOCK_SOURCE_LIST = 1,      /* a "path label" list file */
    TSOCK_SOURCE_WEBDATASET = 2 /* WebDataset tar shards (see below) */
} tsock_source;

typedef enum tsock_preset {
    TSOCK_PRESET_TRAIN = 0, /* RandomResizedCrop + RandomHorizontalFlip */
    TSOCK_PRESET_VAL = 1    /* Resize + CenterCrop */
} tsock_preset;

typedef enum tsock_read_mode {
    TSOCK_READ_AUTO = 0,  /* io_uring where it works, else pread (logged) */
    TSOCK_READ_URING = 1, /* io_uring, or tsock_pipeline_open fails */
    TSOCK_READ_PREAD = 2  /* plain open + pread + close */
} tsock_read_mode;

typedef enum tsock_on_error {
    TSOCK_ON_ERROR_SKIP = 0, /* replace a bad sample and go on (counted, logged once) */
    TSOCK_ON_ERROR_FAIL = 1  /* fail the load with TSOCK_E_BAD_SAMPLE */
} tsock_on_error;

/* The most worker threads and the deepest read queue a pipeline accepts. */
#define TSOCK_PIPELINE_MAX_WORKERS 1024
#define TSOCK_PIPELINE_MAX_IO_DEPTH 4096

/* Creates a pipeline over the dataset at `path` (the root folder, or the list file), as
 * `source` says. Nothing is read before tsock_pipeline_open. Defaults: train preset, size 224,
 * crop scale 0.08..1, flip on, one worker per online CPU, TSOCK_READ_AUTO with 64 reads in
 * flight, seed 0, TSOCK_ON_ERROR_SKIP, no index cache. Returns 0 and sets *out (the caller
 * owns it), or -EINVAL, -ENOMEM. Any thread. */
TSOCK_API int tsock_pipeline_create(tsock_pipeline **out, int source, const char *path);

/* Setters: before tsock_pipeline_open, else TSOCK_E_STATE. Each returns 0, -EINVAL for a value
 * out of range, or TSOCK_E_STATE. */
/* A tsock_preset. */
TSOCK_API int tsock_pipeline_set_preset(tsock_pipeline *pl, int preset);
/* Output side in pixels, 1..8192 (images are size x size x 3). */
TSOCK_API int tsock_pipeline_set_image_size(tsock_pipeline *pl, int size);
/* RandomResizedCrop's area fraction range: 0 < min <= max <= 1 (train preset only). */
TSOCK_API int tsock_pipeline_set_crop_scale(tsock_pipeline *pl, double min, double max);
/* Non-zero: flip horizontally with probability 0.5 (train preset only). Turning flips off
 * keeps every crop box as it was. */
TSOCK_API int tsock_pipeline_set_flip(tsock_pipeline *pl, int enabled);
/* Decoding threads, 1..TSOCK_PIPELINE_MAX_WORKERS; 0 = one per online CPU. */
TSOCK_API int tsock_pipeline_set_workers(tsock_pipeline *pl, int workers);
/* How files are read (a tsock_read_mode) and how many reads are in flight at once
 * (1..TSOCK_PIPELINE_MAX_IO_DEPTH). */
TSOCK_API int tsock_pipeline_set_io(tsock_pipeline *pl, int mode, int depth);
/* The seed every random decision (crop, flip) derives from, with the epoch and sample id. */
TSOCK_API int tsock_pipeline_set_seed(tsock_pipeline *pl, uint64_t seed);

/* Where JPEGs are decoded (issue 20). */
typedef enum tsock_decoder {
    TSOCK_DECODER_CPU = 0, /* libjpeg-turbo on the workers (the default) */
    TSOCK_DECODER_GPU = 1  /* nvJPEG into the slot's device memory; the rest on the CPU */
} tsock_decoder;
/* A tsock_decoder. With TSOCK_DECODER_GPU, tsock_pipeline_fill has the slot's device (a
 * producer on a CUDA device, tsock_producer_set_device) decode the batch's JPEGs: the files are
 * still read and their headers parsed on the CPU, then decoded (only the crop of
 * RandomResizedCrop), resized and flipped on the GPU straight into the slot, followed by the
 * producer's conversion. nvJPEG's hardware engine is used where the GPU has one (A100, H100,
 * H200), its CUDA decoder otherwise. Whatever the GPU does not take is decoded by the workers
 * as with TSOCK_DECODER_CPU, into the same place, with the same crop, ids and labels: PNG,
 * CMYK/YCCK and RGB-coded JPEGs, truncated JPEGs, progressive JPEGs on the hardware engine,
 * and any image whose GPU decode fails (logged). TSOCK_PIPELINE_DECODED_GPU and _CPU count
 * both. The pixels differ slightly from the CPU decoder's (another IDCT and resampler: see
 * docs/gpu.md for the bound), so the val preset's byte-identical promise holds with
 * TSOCK_DECODER_CPU only. tsock_pipeline_load (host memory) refuses to run with the GPU
 * decoder (-EINVAL); a slot in host memory makes tsock_pipeline_fill fail with TSOCK_E_STATE;
 * a machine without nvJPEG makes it fail with -ENOPKG (tsock_cuda_decoder_check says so before
 * anything starts). Returns 0, -EINVAL, or TSOCK_E_STATE after open. */
TSOCK_API int tsock_pipeline_set_decoder(tsock_pipeline *pl, int decoder);
/* A tsock_on_error. */
TSOCK_API int tsock_pipeline_set_on_error(tsock_pipeline *pl, int policy);
/* A file where the index is kept between runs (copied; NULL: none). A valid cache whose tree
 * is unchanged is loaded instead of scanning and checking the files again; otherwise the index
 * is built and the cache written (atomically; a failure to write is logged, not fatal). Keep
 * it outside the dataset folder. */
TSOCK_API int tsock_pipeline_set_index_cache(tsock_pipeline *pl, const char *path);

/* WebDataset only (else -EINVAL): `split` names the split of the directory's info file to read
 * ("train", "val" also matching "validation"; NULL: every *.tar of the directory), and
 * `label_key`, when not NULL, takes labels from that top-level integer field of each
 * sample's json member instead of its cls member. Both copied. */
TSOCK_API int tsock_pipeline_set_shard_options(tsock_pipeline *pl, const char *split,
                                               const char *label_key);

/* Entry points into each JPEG's Huffman data, learnt by the first decode of a file and kept
 * for later epochs, let a decode start at the MCU rows and columns its crop needs instead of
 * entropy-decoding everything above and beside it: from the second epoch on, the producer's
 * CPU per image was 12-18 % lower for the train preset and 8-13 % for val on photographs,
 * with the same bytes (docs/benchmarks.md). They cost 16 bytes per 8 MCUs of a row and per
 * MCU row (2.0 KiB for a 500 x 375 photograph), held for the pipeline's lifetime, up to
 * `max_bytes` in all (default TSOCK_PIPELINE_DEFAULT_ENTRY_POINT_BYTES; ImageNet's 1.28
 * million files would take about 2.5 GiB); files beyond it are decoded from their start, and
 * a warning says so when the budget fills. 0 keeps none. A file rewritten in place between
 * epochs is noticed by its length, its first and last bytes and the bytes around each point;
 * one changed elsewhere with all of those kept would decode its crop from the old file's
 * points (docs/pipeline.md). */
#define TSOCK_PIPELINE_DEFAULT_ENTRY_POINT_BYTES (1024ull << 20)
TSOCK_API int tsock_pipeline_set_entry_points(tsock_pipeline *pl, uint64_t max_bytes);

/* Augmentations (train preset; docs/pipeline.md lists every operation). They run once per
 * sample after the crop and flip, in this order: the auto-augment policy, ColorJitter,
 * RandomErasing, each drawing its random parameters from the sample's own stream (seed,
 * epoch, sample id), so the bytes do not depend on the number of workers. */
/* The val preset's Resize: the shorter side becomes `resize` pixels before the centre crop of
 * the image size (torchvision's --val-resize-size); 0 (the default) keeps size * 256 / 224.
 * 0..8192; a resize below the image size makes every val decode fail (-EINVAL). */
TSOCK_API int tsock_pipeline_set_val_resize(tsock_pipeline *pl, int resize);
/* The resizing filter of both presets (a tsock_interpolation): PIL's antialiased bilinear (the
 * default) or bicubic, as torchvision's Resize / RandomResizedCrop(interpolation=...) on PIL
 * images. */
typedef enum tsock_interpolation {
    TSOCK_INTERPOLATION_BILINEAR = 0,
    TSOCK_INTERPOLATION_BICUBIC = 1
} tsock_interpolation;
TSOCK_API int tsock_pipeline_set_interpolation(tsock_pipeline *pl, int interpolation);
/* A tsock_auto_augment policy (tsock/augment.h): TrivialAugmentWide, RandAugment with
 * `num_ops` operations (0..TSOCK_AUGMENT_MAX_OPS) of magnitude bin `magnitude`
 * (0..TSOCK_AUGMENT_RA_BINS-1; RandAugment's defaults are 2 and 9; the other policies ignore
 * both), or AutoAugment's IMAGENET policy; `interpolation` (a tsock_augment_interpolation) is
 * the geometric operations' resampling (torchvision's default: nearest). */
TSOCK_API int tsock_pipeline_set_auto_augment(tsock_pipeline *pl, int policy, int magnitude,
                                              int num_ops, int interpolation);
/* ColorJitter(brightness, contrast, saturation, hue): factors drawn from [max(0, 1 - b), 1 + b]
 * (b, c, s >= 0; 0 leaves that property alone), hue from [-hue, hue] (0 <= hue <= 0.5), applied
 * in a random order. */
TSOCK_API int tsock_pipeline_set_color_jitter(tsock_pipeline *pl, double brightness,
                                              double contrast, double saturation, double hue);
/* RandomErasing with probability p (0..1, default 0): scale 0.02..0.33, ratio 0.3..3.3, the box
 * filled with ImageNet's mean in uint8 (124, 116, 104), which is what the reference recipe's
 * erasing with value 0 after Normalize amounts to. */
TSOCK_API int tsock_pipeline_set_random_erase(tsock_pipeline *pl, double probability);

/* Builds the index (from the cache when it is fresh, else by scanning the dataset and checking
 * each file's header), sets up the reader (TSOCK_READ_AUTO falls back to pread, logged) and
 * starts the workers. Returns 0, -ENOENT (no usable image in the dataset), -EINVAL (a bad
 * list file; each bad line is logged), the reader's error for TSOCK_READ_URING where io_uring
 * cannot be used, another negated errno (opening the dataset), -ENOMEM, TSOCK_E_CANCELLED
 * (tsock_pipeline_cancel), or TSOCK_E_STATE when already open. */
TSOCK_API int tsock_pipeline_open(tsock_pipeline *pl);

/* Stops the pipeline for good, for a shutdown (Ctrl-C during a long index scan): an open in
 * progress returns TSOCK_E_CANCELLED within one directory listing, one batch of list-file stats
 * or one round of header reads per thread (well under a second, unless one system call itself
 * hangs), writing no index cache; every later open, load or fill returns TSOCK_E_CANCELLED at
 * once (a load in progress finishes its batch). The flag is never cleared: destroy the pipeline.
 * It only stores an atomic flag, so it is async-signal-safe; call it from a signal handler or
 * any thread while `pl` exists (not during or after tsock_pipeline_destroy). NULL does
 * nothing. */
TSOCK_API void tsock_pipeline_cancel(tsock_pipeline *pl);

/* After open: samples in the index (0 before), classes (labels are 0..classes-1), the name
 * of a class (folder source; NULL otherwise or out of range), the path of a sample relative to
 * the dataset root (or absolute, in a list; NULL out of range), and the output side. Strings
 * are owned by the pipeline. Any thread, while no setter or open runs. */
TSOCK_API uint64_t tsock_pipeline_samples(const tsock_pipeline *pl);
TSOCK_API uint32_t tsock_pipeline_classes(const tsock_pipeline *pl);
TSOCK_API const char *tsock_pipeline_class_name(const tsock_pipeline *pl, uint32_t label);
TSOCK_API const char *tsock_pipeline_sample_path(const tsock_pipeline *pl, uint64_t id);
TSOCK_API int tsock_pipeline_image_size(const tsock_pipeline *pl);

/* After open, WebDataset only: the number of shards (0 for other sources or before open), and
 * the first sample id of each shard: starts[0..shards] (shards + 1 entries, the last one the
 * sample count; a shard with no usable sample starts where the next does), for
 * tsock_producer_set_shard_order. Returns 0, or -EINVAL (no shards, starts NULL). */
TSOCK_API uint32_t tsock_pipeline_shards(const tsock_pipeline *pl);
TSOCK_API int tsock_pipeline_shard_starts(const tsock_pipeline *pl, uint64_t *starts);

/* Appends the pipeline's tensors to a producer layout: "image" uint8 [size, size, 3], "label"
 * int64 [], "index" int64 [] (the sample id). tsock_pipeline_fill writes to these tensors of
 * the slot, so call this once, on the layout the producer is created with. Returns the layout
 * index of "image" (label and index follow it), or an error of tsock_layout_add. */
TSOCK_API int tsock_pipeline_add_tensors(tsock_pipeline *pl, tsock_layout *layout);

/* Loads the `n` samples `ids` of epoch `epoch`: images to `images` (n * size * size * 3
 * bytes), labels and sample ids to `labels` and `indices` (n int64 each; a replaced sample
 * gets its replacement's label and id). All three are required. Blocks until every sample is
 * written; the files are read on the calling thread and decoded on the workers. Returns n, or
 * -EINVAL (a NULL pointer, an id out of range), TSOCK_E_STATE (not open), TSOCK_E_BAD_SAMPLE
 * (TSOCK_ON_ERROR_FAIL and a file failed; the failing paths are logged and the outputs are then
 * unspecified), TSOCK_E_CANCELLED (tsock_pipeline_cancel), -ENOMEM. */
TSOCK_API int tsock_pipeline_load(tsock_pipeline *pl, uint64_t epoch, const uint64_t *ids,
                                  uint32_t n, uint8_t *images, int64_t *labels, int64_t *indices);

/* Loads every planned sample of an acquired slot (tsock_slot_sample_ids, of the slot's epoch)
 * into the slot's tensors added by tsock_pipeline_add_tensors. Returns the number of samples
 * (tsock_slot_planned), or an error of tsock_pipeline_load, or TSOCK_E_STATE when
 * tsock_pipeline_add_tensors was not called or the slot has no plan (no sampler). */
TSOCK_API int tsock_pipeline_fill(tsock_pipeline *pl, tsock_slot *slot);

/* Statistic keys; totals since open unless said otherwise. */
typedef enum tsock_pipeline_stat_key {
    TSOCK_PIPELINE_SAMPLES = 1,      /* samples loaded (replacements included) */
    TSOCK_PIPELINE_FILES_READ = 2,   /* files read, by the reader and for replacements */
    TSOCK_PIPELINE_BYTES_READ = 3,   /* bytes of those files */
    TSOCK_PIPELINE_BAD_FILES = 4,    /* distinct files that failed at load time (left out since) */
    TSOCK_PIPELINE_REPLACED = 5,     /* samples filled with a replacement */
    TSOCK_PIPELINE_LEFT_OUT = 6,     /* files the index left out: empty, unreadable, too large,
                                        not an image by their header */
    TSOCK_PIPELINE_NOT_IMAGE = 7,    /* of those, left out by the header check */
    TSOCK_PIPELINE_DECODE_NS = 8,    /* worker CPU time spent decoding and augmenting, summed */
    TSOCK_PIPELINE_READ_WAIT_NS = 9, /* time the driving thread spent reading files */
    TSOCK_PIPELINE_INDEX_NS = 10,    /* time tsock_pipeline_open spent on the index */
    TSOCK_PIPELINE_INDEX_BYTES = 11, /* memory the index holds */
    TSOCK_PIPELINE_WORKERS = 12,     /* worker threads */
    TSOCK_PIPELINE_READ_MODE = 13,   /* TSOCK_READ_URING or TSOCK_READ_PREAD, as it reads */
    TSOCK_PIPELINE_FROM_CACHE = 14,  /* 1 when the index came from the cache */
    TSOCK_PIPELINE_DECODED_GPU = 15, /* images the device decoded (TSOCK_DECODER_GPU) */
    TSOCK_PIPELINE_DECODED_CPU = 16, /* images the workers decoded (replacements included) */
    /* CPU time per stage, in ns, each thread measuring its own (CLOCK_THREAD_CPUTIME_ID),
     * summed over the threads. The decode's share (TSOCK_PIPELINE_DECODE_NS) is split between
     * the codec and tsock's own passes in the proportion of the monotonic time each took
     * inside that decode (the two interleave, and the thread CPU clock is a system call). */
    TSOCK_PIPELINE_READ_CPU_NS = 17,      /* reading files: the driving thread's reads (handing
                                             each file to the workers included) and the workers'
                                             own reads (replacements) */
    TSOCK_PIPELINE_CODEC_CPU_NS = 18,     /* the codec: JPEG entropy decoding (tsock's Huffman
                                             decoder or libjpeg-turbo's), IDCT, upsampling and
                                             YCbCr-to-RGB (libjpeg-turbo); PNG (libpng) */
    TSOCK_PIPELINE_RESAMPLE_CPU_NS = 19,  /* colour (CMYK to RGB) and resampling, crop, flip */
    TSOCK_PIPELINE_DRIVER_CPU_NS = 20,    /* the driving thread's CPU in tsock_pipeline_load:
                                             its reads plus handing out and waiting for the
                                             batch (the serial part of a load) */
    TSOCK_PIPELINE_RESTART_WINDOWS = 21,  /* of TSOCK_PIPELINE_DECODED_CPU, the JPEGs decoded
                                             from the restart intervals under their crop only
                                             (files with restart markers; docs/pipeline.md) */
    TSOCK_PIPELINE_OWN_ENTROPY = 22,      /* of TSOCK_PIPELINE_DECODED_CPU, the JPEGs whose
                                             Huffman data tsock's own decoder turned into
                                             coefficients (libjpeg did the rest) */
    TSOCK_PIPELINE_ENTROPY_REDONE = 23,   /* JPEGs whose Huffman data tsock's decoder gave
                                             back (corrupt or unusual: docs/pipeline.md),
                                             decoded again from the start by libjpeg alone */
    TSOCK_PIPELINE_ENTRY_JUMPS = 24,      /* of TSOCK_PIPELINE_OWN_ENTROPY, the JPEGs whose
                                             decode started at entry points an earlier decode
                                             of the file learnt (tsock_pipeline_set_entry_points) */
    TSOCK_PIPELINE_ENTRY_POINT_BYTES = 25 /* memory the files' entry points hold now */
} tsock_pipeline_stat_key;

/* Reads one statistic into *value. Returns 0, or -EINVAL for an unknown key. Any thread
 * (values read while a load runs may be a moment old). */
TSOCK_API int tsock_pipeline_stat(const tsock_pipeline *pl, int key, uint64_t *value);

/* Stops the workers and frees everything; NULL does nothing. Not while a load runs. */
TSOCK_API void tsock_pipeline_destroy(tsock_pipeline *pl);

#ifdef __cplusplus
}
#endif

#endif
