/* The image pipeline's insides, shared by its files:
 *   pipeline.c      the handle: options, open, accessors, statistics
 *   header_check.c  the index-time check of every file's image header
 *   load.c          loading a batch: the driving thread reads, the workers decode
 *   entry_points.c  each file's entry points into its Huffman data, kept across epochs
 */
#ifndef TSOCK_PIPELINE_INT_H
#define TSOCK_PIPELINE_INT_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "augment/augment.h"
#include "dataset/index.h"
#include "image/device_decoder.h"
#include "image/image.h"
#include "io/reader.h"
#include "tsock/pipeline.h"

/* How many consecutive sample ids after a bad one are tried as its replacement before the
 * load gives up (a dataset where that many files in a row fail is broken, not unlucky). */
#define TSOCK__PIPELINE_MAX_REPLACE 64

/* The largest image side a setter accepts (output size, the val preset's resize). */
#define TSOCK__PIPELINE_MAX_SIZE 8192

/* One batch being loaded: written by the driving thread before the workers see a position,
 * read by the workers. */
struct load_job {
    uint64_t epoch;
    const uint64_t *ids;
    uint32_t n;
    uint8_t *images;
    int64_t *labels, *indices;
    struct tsock__read_req *reqs; /* n; result < 0 or a known-bad sample: replace it */
    uint8_t *known_bad;           /* n flags: left out before this load, not read */
    /* The slot's device decoder (TSOCK_DECODER_GPU), or NULL: every image on the CPU. */
    struct tsock__device_decoder *dd;
};

struct worker {
    struct tsock_pipeline *pl;
    pthread_t thread;
    struct tsock__decoder *decoder;
    struct tsock__reader *reader; /* pread, for replacements and files that grew */
    uint8_t *buf;                 /* their bytes */
    size_t buf_cap;
    int started;
    uint8_t *aug_tmp; /* TSOCK__AUG_TMP_BYTES(size, size) of scratch, when augmenting */
};

struct tsock_pipeline {
    /* Options. */
    int source;
    char *path;
    char *cache_path;
    char *split, *label_key; /* webdataset: tsock_pipeline_set_shard_options */
    int preset, size, flip, workers, io_mode, io_depth, on_error;
    int decoder; /* a tsock_decoder */
    double scale_min, scale_max;
    uint64_t seed;
    /* Per-sample augmentations of the train preset (augment_options.c) and the val preset's
     * resize (0: size * 256 / 224). */
    struct tsock__aug_config aug;
    int val_resize;
    int bicubic;            /* resize with PIL's bicubic filter */
    uint64_t points_budget; /* bytes of entry points kept (tsock_pipeline_set_entry_points) */

    /* After open. */
    int open;
    struct tsock__index *index;
    struct tsock__reader *reader;
    struct worker *pool;
    int from_cache;
    int tensor_image; /* layout index of "image", or -1 before add_tensors */
    uint64_t index_ns;
    /* One bit per sample: its file failed at load time, so it is left out from then on. */
    _Atomic uint64_t *bad_bits;
    /* Per sample id, its file's entry points or NULL (entry_points.c); NULL without a budget. */
    struct tsock__entry_points *_Atomic *points;

    /* The batch arena: the files of one load, back to back. */
    uint8_t *arena;
    size_t arena_cap;
    struct tsock__read_req *reqs;   /* by position */
    struct tsock__read_req *gather; /* the same requests side by side, for the reader */
    uint8_t *known_bad;
    uint32_t reqs_cap;
    /* The device decoder's share of a load (device_load.c), by position: the job, whether the
     * position waits for the device, whether it must be decoded on the CPU. */
    struct tsock__image_job *djobs, *dlist;
    int *dstatus;
    uint32_t *dpos;
    uint8_t *on_device, *force_cpu;
    uint32_t dcap;

    /* Work hand-off between the driving thread and the workers, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    struct load_job job;
    uint32_t *queue; /* positions ready to decode: a FIFO of job.n entries */
    uint32_t q_head, q_tail, done;
    int error; /* the load's first error */
    int stop;

    /* tsock_pipeline_cancel: set from any thread or a signal handler, never cleared. */
    atomic_int cancel;
    /* The entry points reached points_budget, and it was said (once: entry_points.c). */
    atomic_int points_full;

    /* Statistics. */
    _Atomic uint64_t st_samples, st_files, st_bytes, st_bad_files, st_replaced, st_decode_ns,
        st_read_ns, st_decoded_gpu, st_decoded_cpu, st_restart_windows, st_own_entropy,
        st_entropy_redone, st_entry_jumps, st_points_bytes;
    /* Thread CPU per stage (tsock_pipeline_stat_key 15..18). */
    _Atomic uint64_t st_read_cpu_ns, st_codec_cpu_ns, st_resample_cpu_ns, st_driver_cpu_ns;
};

/* The entry point store (entry_points.c). open: one slot per sample when there is a budget;
 * take: the file's set, or a new one while the budget has room, or NULL (*bytes: its size
 * now); put: back into its slot after the decode, its growth counted. */
int tsock__pipeline_points_open(struct tsock_pipeline *pl);
void tsock__pipeline_points_free(struct tsock_pipeline *pl);
struct tsock__entry_points *tsock__pipeline_points_take(struct tsock_pipeline *pl, uint64_t id,
                                                        size_t *bytes);
void tsock__pipeline_points_put(struct tsock_pipeline *pl, uint64_t id,
                                struct tsock__entry_points *p, size_t bytes);

/* The tsock__index_check_fn of tsock__index_open_checked: reads the start of every file and
 * marks those whose header shows they cannot be decoded. `arg` is the pipeline. */
int tsock__pipeline_header_check(void *arg, const struct tsock__index *idx, uint8_t *drop);

/* The random stream of sample `id` in `epoch` (sample_rng.c): every crop and flip comes from it. */
void tsock__pipeline_sample_rng(const struct tsock_pipeline *pl, uint64_t epoch, uint64_t id,
                                struct tsock__rng *rng);

/* The train preset's crop and flip parameters from the pipeline's options: the CPU decoder
 * (load.c) and the device's share (device_load.c) must draw the same crop for a sample. */
static inline struct tsock__train_params
tsock__pipeline_train_params(const struct tsock_pipeline *pl)
{
    return (struct tsock__train_params){.size = pl->size,
                                        .scale_min = pl->scale_min,
                                        .scale_max = pl->scale_max,
                                        .ratio_min = 3.0 / 4.0,
                                        .ratio_max = 4.0 / 3.0,
                                        .flip = pl->flip};
}

/* The val preset's resize (the shorter side before the center crop): the option's value, or
 * Resize(256) for CenterCrop(224) in proportion for other sizes. */
static inline int
tsock__pipeline_val_resize(const struct tsock_pipeline *pl)
{
    return pl->val_resize ? pl->val_resize : (int)(((int64_t)pl->size * 256 + 112) / 224);
}

/* device_load.c: the device decoder's share of a load.
 * reserve: grows the per-position arrays to n (-ENOMEM).
 * try: on a worker, queues position `pos` (its file's bytes in data/size) for the device when
 *   the device takes it; returns 1 when queued (labels are the caller's), 0 for the CPU.
 * round: on the driving thread once the workers are done, decodes every queued position on the
 *   device; the positions the device failed are marked force_cpu and written to `again`.
 *   Returns how many (>= 0), or a negative code when the device failed. */
int tsock__pipeline_device_reserve(struct tsock_pipeline *pl, uint32_t n);
int tsock__pipeline_device_try(struct tsock_pipeline *pl, uint32_t pos, const uint8_t *data,
                               size_t size);
int64_t tsock__pipeline_device_round(struct tsock_pipeline *pl, uint32_t *again);
void tsock__pipeline_device_free(struct tsock_pipeline *pl);

/* Starts and stops the workers (load.c). */
int tsock__pipeline_start_workers(struct tsock_pipeline *pl);
void tsock__pipeline_stop_workers(struct tsock_pipeline *pl);

/* The augmentation options' defaults (augment_options.c): none, erasing filled with
 * ImageNet's mean. */
void tsock__pipeline_augment_defaults(struct tsock_pipeline *pl);

/* Every setter's first check (pipeline.c, augment_options.c): the handle must exist (-EINVAL)
 * and not be open yet (TSOCK_E_STATE); 0 when it may be set. Inline so that neither file calls
 * the other for it. */
static inline int
tsock__pipeline_settable(const struct tsock_pipeline *pl)
{
    if (!pl)
        return -EINVAL;
    return pl->open ? TSOCK_E_STATE : 0;
}

#endif
