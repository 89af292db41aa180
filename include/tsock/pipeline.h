/*
 * tsock image pipeline: what the producer exists to do once instead of once per job.
 *
 * A pipeline indexes an image dataset (an ImageFolder tree or a list file), and fills the slots
 * of a producer: for each sample id the sampler planned, it reads the file (io_uring, or pread
 * where io_uring is unavailable), decodes it with libjpeg-turbo (PNG through libpng), crops,
 * resizes and flips it as torchvision's presets do, and writes the result straight into the
 * sample's place in the slot, on a pool of worker threads.
 *
 * Conventions are those of tsock.h. A pipeline is used from one thread at a time; it runs
 * worker threads of its own.
 */
#ifndef TSOCK_PIPELINE_H
#define TSOCK_PIPELINE_H

#include "tsock/tsock.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsock_pipeline tsock_pipeline;

/* Dataset kinds. IMAGENET and FOLDER both read `root/<class>/<file>` with classes sorted by
 * name and numbered from 0 as torchvision's ImageFolder numbers them; IMAGENET also implies
 * the ImageNet presets (train: RandomResizedCrop 224 + flip; val: Resize 256 + CenterCrop 224).
 * LIST reads "path label" lines, paths relative to the list file's folder. */
typedef enum tsock_dataset_kind {
    TSOCK_DATASET_IMAGENET = 1,
    TSOCK_DATASET_FOLDER = 2,
    TSOCK_DATASET_LIST = 3
} tsock_dataset_kind;

typedef enum tsock_preset {
    TSOCK_PRESET_TRAIN = 1, /* RandomResizedCrop(size, scale, ratio 3/4..4/3) + flip p=0.5 */
    TSOCK_PRESET_VAL = 2    /* Resize(size * 256/224, antialiased) + CenterCrop(size) */
} tsock_preset;

typedef enum tsock_io_mode {
    TSOCK_IO_AUTO = 0,  /* io_uring when the kernel allows it, pread otherwise */
    TSOCK_IO_URING = 1, /* io_uring or fail */
    TSOCK_IO_PREAD = 2
} tsock_io_mode;

/* Creates a pipeline over `path` (the tree's root, or the list file). Nothing is read until
 * tsock_pipeline_open. Returns 0 and sets *out, or -EINVAL / -ENOMEM. */
TSOCK_API int tsock_pipeline_create(tsock_pipeline **out, int kind, const char *path);

/* Options, before open. Defaults: TRAIN, 224, scale 0.08..1, flip on, workers = online CPUs,
 * TSOCK_IO_AUTO with 64 reads in flight, seed 0, skip bad files, index cache off. */
TSOCK_API int tsock_pipeline_set_preset(tsock_pipeline *pl, int preset);
TSOCK_API int tsock_pipeline_set_image_size(tsock_pipeline *pl, int size);
TSOCK_API int tsock_pipeline_set_crop_scale(tsock_pipeline *pl, double min, double max);
TSOCK_API int tsock_pipeline_set_flip(tsock_pipeline *pl, int on);
TSOCK_API int tsock_pipeline_set_workers(tsock_pipeline *pl, int workers);
TSOCK_API int tsock_pipeline_set_io(tsock_pipeline *pl, int mode, int depth);
/* Everything random (crop boxes, flips) derives from (seed, epoch, sample id) only, so the same
 * seed gives the same bytes whatever the worker count and I/O mode. */
TSOCK_API int tsock_pipeline_set_seed(tsock_pipeline *pl, uint64_t seed);
/* Non-zero: a file that cannot be decoded makes tsock_pipeline_fill fail. Zero (default): it
 * is reported once with its path, counted, and its place in the batch holds a grey image with
 * its own id and label, so every epoch still covers every id. */
TSOCK_API int tsock_pipeline_set_fail_on_error(tsock_pipeline *pl, int fail);
/* A file where the index is kept between runs so a restart does not rescan (NULL: none). */
TSOCK_API int tsock_pipeline_set_index_cache(tsock_pipeline *pl, const char *path);

/* Indexes the dataset (or loads the cache), leaves out files that are empty or not images
 * (each reported once through the log), and starts the workers. Returns 0 or a negative code
 * (-ENOENT for a missing root, -ENODATA for a dataset with no image). */
TSOCK_API int tsock_pipeline_open(tsock_pipeline *pl);

/* After open: the number of samples and of classes. */
TSOCK_API uint64_t tsock_pipeline_samples(const tsock_pipeline *pl);
TSOCK_API uint32_t tsock_pipeline_classes(const tsock_pipeline *pl);

/* After open: adds the pipeline's tensors to `layout` ("image" uint8 [size, size, 3], "label"
 * int64, "index" int64) and returns 0. */
TSOCK_API int tsock_pipeline_add_tensors(const tsock_pipeline *pl, tsock_layout *layout);

/* Fills an acquired slot of a producer whose sampler was set with tsock_pipeline_samples()
 * samples and whose layout came from tsock_pipeline_add_tensors: every planned sample is read,
 * decoded and written in place. Returns 0, or a negative code (a decode failure with
 * fail-on-error set, -EIO for an I/O error the file system reported). */
TSOCK_API int tsock_pipeline_fill(tsock_pipeline *pl, tsock_slot *slot);

/* Pipeline figures. */
typedef enum tsock_pipeline_stat {
    TSOCK_PSTAT_IMAGES = 1,      /* images decoded */
    TSOCK_PSTAT_BYTES_READ = 2,  /* file bytes read */
    TSOCK_PSTAT_DECODE_NS = 3,   /* worker time spent decoding and resizing, summed */
    TSOCK_PSTAT_READ_NS = 4,     /* time waiting for reads, summed over workers */
    TSOCK_PSTAT_BAD_FILES = 5,   /* files left out or replaced (index time + read time) */
    TSOCK_PSTAT_INDEX_NS = 6,    /* time spent indexing (or loading the cache) */
    TSOCK_PSTAT_INDEX_BYTES = 7  /* memory held by the index */
} tsock_pipeline_stat;

TSOCK_API int tsock_pipeline_stat(const tsock_pipeline *pl, int key, uint64_t *value);

/* Stops the workers and frees everything. NULL does nothing. */
TSOCK_API void tsock_pipeline_destroy(tsock_pipeline *pl);

#ifdef __cplusplus
}
#endif

#endif
