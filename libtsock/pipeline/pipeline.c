/* The pipeline handle: options, open (index, reader, workers), accessors and statistics. */
#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "pipeline/pipeline_int.h"

/* Defaults: the ImageNet training preset, as torchvision's reference scripts use it. */
#define DEFAULT_SIZE 224
#define DEFAULT_SCALE_MIN 0.08
#define DEFAULT_IO_DEPTH 64

/* The public enums are passed to the reader and the index as they are. */
_Static_assert((int)TSOCK_READ_AUTO == (int)TSOCK__IO_AUTO &&
                   (int)TSOCK_READ_URING == (int)TSOCK__IO_URING &&
                   (int)TSOCK_READ_PREAD == (int)TSOCK__IO_PREAD,
               "the public read modes are the reader's");
_Static_assert((int)TSOCK_SOURCE_FOLDER == (int)TSOCK__INDEX_FOLDER &&
                   (int)TSOCK_SOURCE_LIST == (int)TSOCK__INDEX_LIST &&
                   (int)TSOCK_SOURCE_WEBDATASET == (int)TSOCK__INDEX_SHARDS,
               "the public sources are the index's");

int
tsock_pipeline_create(tsock_pipeline **out, int source, const char *path)
{
    if (!out || !path || !path[0] ||
        (source != TSOCK_SOURCE_FOLDER && source != TSOCK_SOURCE_LIST &&
         source != TSOCK_SOURCE_WEBDATASET))
        return -EINVAL;
    struct tsock_pipeline *pl = calloc(1, sizeof *pl);
    if (!pl)
        return -ENOMEM;
    pl->path = strdup(path);
    if (!pl->path) {
        free(pl);
        return -ENOMEM;
    }
    pl->source = source;
    pl->preset = TSOCK_PRESET_TRAIN;
    pl->size = DEFAULT_SIZE;
    pl->scale_min = DEFAULT_SCALE_MIN;
    pl->scale_max = 1.0;
    pl->flip = 1;
    pl->io_mode = TSOCK_READ_AUTO;
    pl->io_depth = DEFAULT_IO_DEPTH;
    pl->on_error = TSOCK_ON_ERROR_SKIP;
    pl->points_budget = TSOCK_PIPELINE_DEFAULT_ENTRY_POINT_BYTES;
    pl->tensor_image = -1;
    tsock__pipeline_augment_defaults(pl);
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->work_cv, NULL);
    pthread_cond_init(&pl->done_cv, NULL);
    *out = pl;
    return 0;
}

int
tsock_pipeline_set_preset(tsock_pipeline *pl, int preset)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && preset != TSOCK_PRESET_TRAIN && preset != TSOCK_PRESET_VAL)
        r = -EINVAL;
    if (r == 0)
        pl->preset = preset;
    return r;
}

int
tsock_pipeline_set_image_size(tsock_pipeline *pl, int size)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && (size < 1 || size > TSOCK__PIPELINE_MAX_SIZE))
        r = -EINVAL;
    if (r == 0)
        pl->size = size;
    return r;
}

int
tsock_pipeline_set_crop_scale(tsock_pipeline *pl, double min, double max)
{
    int r = tsock__pipeline_settable(pl);
    /* Written so that NaN fails too. */
    if (r == 0 && !(min > 0.0 && min <= max && max <= 1.0))
        r = -EINVAL;
    if (r == 0) {
        pl->scale_min = min;
        pl->scale_max = max;
    }
    return r;
}

int
tsock_pipeline_set_flip(tsock_pipeline *pl, int enabled)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0)
        pl->flip = enabled != 0;
    return r;
}

int
tsock_pipeline_set_workers(tsock_pipeline *pl, int workers)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && (workers < 0 || workers > TSOCK_PIPELINE_MAX_WORKERS))
        r = -EINVAL;
    if (r == 0)
        pl->workers = workers;
    return r;
}

int
tsock_pipeline_set_io(tsock_pipeline *pl, int mode, int depth)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 &&
        ((mode != TSOCK_READ_AUTO && mode != TSOCK_READ_URING && mode != TSOCK_READ_PREAD) ||
         depth < 1 || depth > TSOCK_PIPELINE_MAX_IO_DEPTH))
        r = -EINVAL;
    if (r == 0) {
        pl->io_mode = mode;
        pl->io_depth = depth;
    }
    return r;
}

int
tsock_pipeline_set_seed(tsock_pipeline *pl, uint64_t seed)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0)
        pl->seed = seed;
    return r;
}

int
tsock_pipeline_set_decoder(tsock_pipeline *pl, int decoder)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && decoder != TSOCK_DECODER_CPU && decoder != TSOCK_DECODER_GPU)
        r = -EINVAL;
    if (r == 0)
        pl->decoder = decoder;
    return r;
}

int
tsock_pipeline_set_on_error(tsock_pipeline *pl, int policy)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && policy != TSOCK_ON_ERROR_SKIP && policy != TSOCK_ON_ERROR_FAIL)
        r = -EINVAL;
    if (r == 0)
        pl->on_error = policy;
    return r;
}

int
tsock_pipeline_set_entry_points(tsock_pipeline *pl, uint64_t max_bytes)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0)
        pl->points_budget = max_bytes;
    return r;
}

int
tsock_pipeline_set_index_cache(tsock_pipeline *pl, const char *path)
{
    int r = tsock__pipeline_settable(pl);
    if (r != 0)
        return r;
    if (path && !path[0])
        return -EINVAL;
    char *copy = path ? strdup(path) : NULL;
    if (path && !copy)
        return -ENOMEM;
    free(pl->cache_path);
    pl->cache_path = copy;
    return 0;
}

/* Copies an optional string setting (NULL clears it). */
static int
set_string(char **field, const char *value)
{
    char *copy = value ? strdup(value) : NULL;
    if (value && !copy)
        return -ENOMEM;
    free(*field);
    *field = copy;
    return 0;
}

int
tsock_pipeline_set_shard_options(tsock_pipeline *pl, const char *split, const char *label_key)
{
    int r = tsock__pipeline_settable(pl);
    if (r == 0 && (pl->source != TSOCK_SOURCE_WEBDATASET || (split && !split[0]) ||
                   (label_key && (!label_key[0] || strchr(label_key, '"')))))
        r = -EINVAL;
    if (r == 0)
        r = set_string(&pl->split, split);
    if (r == 0)
        r = set_string(&pl->label_key, label_key);
    return r;
}

uint32_t
tsock_pipeline_shards(const tsock_pipeline *pl)
{
    return pl && pl->index && pl->index->shard ? pl->index->watch_count : 0;
}

int
tsock_pipeline_shard_starts(const tsock_pipeline *pl, uint64_t *starts)
{
    uint32_t n = tsock_pipeline_shards(pl);
    if (!starts || n == 0)
        return -EINVAL;
    uint64_t id = 0;
    for (uint32_t s = 0; s <= n; s++) {
        while (id < pl->index->count && pl->index->shard[id] < s)
            id++;
        starts[s] = id;
    }
    return 0;
}

static void
log_index(const struct tsock_pipeline *pl)
{
    const struct tsock__index *idx = pl->index;
    uint64_t left = idx->empty + idx->unreadable + idx->too_large + idx->not_image;

    tsock__log(TSOCK_LOG_INFO,
               "pipeline: %s: %llu samples in %u classes (%s, %.2f s, %.1f bytes per sample); "
               "%llu files left out (%llu empty, %llu unreadable, %llu too large, %llu not "
               "decodable by their header)",
               pl->path, (unsigned long long)idx->count, idx->classes,
               pl->from_cache ? "from the index cache" : "scanned", (double)pl->index_ns * 1e-9,
               (double)tsock__index_memory(idx) / (double)(idx->count ? idx->count : 1),
               (unsigned long long)left, (unsigned long long)idx->empty,
               (unsigned long long)idx->unreadable, (unsigned long long)idx->too_large,
               (unsigned long long)idx->not_image);
}

/* Builds the index: from the cache, or by a scan followed by the header check (which clears
 * pl->from_cache, since it runs on scans only). */
static int
open_index(struct tsock_pipeline *pl)
{
    uint64_t t0 = tsock__now_ns();

    pl->from_cache = 1;
    struct tsock__shard_options so = {.split = pl->split, .label_key = pl->label_key};
    int r =
        pl->source == TSOCK_SOURCE_WEBDATASET
            ? tsock__index_open_shards(pl->path, &so, pl->cache_path, 0,
                                       tsock__pipeline_header_check, pl, &pl->cancel, &pl->index)
            : tsock__index_open_checked(pl->source, pl->path, pl->cache_path, 0,
                                        tsock__pipeline_header_check, pl, &pl->cancel, &pl->index);
    pl->index_ns = tsock__now_ns() - t0;
    if (r == 0 && pl->index->bad_members && pl->on_error == TSOCK_ON_ERROR_FAIL) {
        tsock__log(TSOCK_LOG_ERROR,
                   "pipeline: %s: %llu samples of the shards are malformed (logged above when "
                   "the index was built); --on-error fail refuses them: fix the shards, or "
                   "leave them out with --on-error skip",
                   pl->path, (unsigned long long)pl->index->bad_members);
        r = TSOCK_E_BAD_SAMPLE;
    }
    if (r != 0) {
        tsock__log(r == TSOCK_E_CANCELLED ? TSOCK_LOG_INFO : TSOCK_LOG_ERROR,
                   "pipeline: %s: cannot index the dataset: %s", pl->path,
                   r == -ENOENT && pl->source == TSOCK_SOURCE_WEBDATASET
                       ? "a shard is missing, or no usable sample (see above)"
                   : r == -ENOENT ? "no usable image file"
                                  : tsock_strerror(r));
        tsock__index_destroy(pl->index);
        pl->index = NULL;
        return r;
    }
    size_t words = ((size_t)pl->index->count + 63) / 64;
    pl->bad_bits = calloc(words ? words : 1, sizeof *pl->bad_bits);
    if (!pl->bad_bits)
        return -ENOMEM;
    log_index(pl);
    return 0;
}

void
tsock_pipeline_cancel(tsock_pipeline *pl)
{
    if (pl)
        atomic_store(&pl->cancel, 1);
}

int
tsock_pipeline_open(tsock_pipeline *pl)
{
    int r = tsock__pipeline_settable(pl);
    if (r != 0)
        return r;
    if (pl->workers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        pl->workers = n < 1                            ? 1
                      : n > TSOCK_PIPELINE_MAX_WORKERS ? TSOCK_PIPELINE_MAX_WORKERS
                                                       : (int)n;
    }
    r = open_index(pl);
    if (r == 0)
        r = tsock__reader_create(&pl->reader, pl->io_mode, (unsigned)pl->io_depth, pl->index->root);
    if (r == 0)
        r = tsock__pipeline_points_open(pl);
    if (r == 0)
        r = tsock__pipeline_start_workers(pl);
    if (r != 0) {
        tsock__pipeline_stop_workers(pl);
        tsock__pipeline_points_free(pl);
        tsock__reader_destroy(pl->reader);
        tsock__index_destroy(pl->index);
        free(pl->bad_bits);
        pl->reader = NULL;
        pl->index = NULL;
        pl->bad_bits = NULL;
        return r;
    }
    pl->open = 1;
#ifdef __GLIBC__
    /* A scan's temporary tables (tens of MB for ImageNet) are freed by now, but glibc keeps
     * the pages; give them back, so a fresh index costs no more than one from the cache. */
    malloc_trim(0);
#endif
    return 0;
}

uint64_t
tsock_pipeline_samples(const tsock_pipeline *pl)
{
    return pl && pl->index ? pl->index->count : 0;
}

uint32_t
tsock_pipeline_classes(const tsock_pipeline *pl)
{
    return pl && pl->index ? pl->index->classes : 0;
}

const char *
tsock_pipeline_class_name(const tsock_pipeline *pl, uint32_t label)
{
    return pl ? tsock__index_class_name(pl->index, label) : NULL;
}

const char *
tsock_pipeline_sample_path(const tsock_pipeline *pl, uint64_t id)
{
    return pl ? tsock__index_path(pl->index, id) : NULL;
}

int
tsock_pipeline_image_size(const tsock_pipeline *pl)
{
    return pl ? pl->size : -EINVAL;
}

int
tsock_pipeline_add_tensors(tsock_pipeline *pl, tsock_layout *layout)
{
    if (!pl || !layout)
        return -EINVAL;
    int64_t shape[3] = {pl->size, pl->size, 3};
    int image = tsock_layout_add(layout, "image", TSOCK_UINT8, 3, shape);
    if (image < 0)
        return image;
    int r = tsock_layout_add(layout, "label", TSOCK_INT64, 0, NULL);
    if (r >= 0)
        r = tsock_layout_add(layout, "index", TSOCK_INT64, 0, NULL);
    if (r < 0)
        return r;
    pl->tensor_image = image;
    return image;
}

int
tsock_pipeline_stat(const tsock_pipeline *pl, int key, uint64_t *value)
{
    if (!pl || !value)
        return -EINVAL;
    const struct tsock__index *idx = pl->index;
    switch (key) {
    case TSOCK_PIPELINE_SAMPLES: *value = atomic_load(&pl->st_samples); break;
    case TSOCK_PIPELINE_FILES_READ: *value = atomic_load(&pl->st_files); break;
    case TSOCK_PIPELINE_BYTES_READ: *value = atomic_load(&pl->st_bytes); break;
    case TSOCK_PIPELINE_BAD_FILES: *value = atomic_load(&pl->st_bad_files); break;
    case TSOCK_PIPELINE_REPLACED: *value = atomic_load(&pl->st_replaced); break;
    case TSOCK_PIPELINE_LEFT_OUT:
        *value = idx ? idx->empty + idx->unreadable + idx->too_large + idx->not_image : 0;
        break;
    case TSOCK_PIPELINE_NOT_IMAGE: *value = idx ? idx->not_image : 0; break;
    case TSOCK_PIPELINE_DECODE_NS: *value = atomic_load(&pl->st_decode_ns); break;
    case TSOCK_PIPELINE_READ_WAIT_NS: *value = atomic_load(&pl->st_read_ns); break;
    case TSOCK_PIPELINE_INDEX_NS: *value = pl->index_ns; break;
    case TSOCK_PIPELINE_INDEX_BYTES: *value = idx ? tsock__index_memory(idx) : 0; break;
    case TSOCK_PIPELINE_WORKERS: *value = (uint64_t)pl->workers; break;
    case TSOCK_PIPELINE_READ_MODE:
        *value = pl->reader ? (uint64_t)tsock__reader_mode(pl->reader) : 0;
        break;
    case TSOCK_PIPELINE_FROM_CACHE: *value = (uint64_t)(pl->open && pl->from_cache); break;
    case TSOCK_PIPELINE_DECODED_GPU: *value = atomic_load(&pl->st_decoded_gpu); break;
    case TSOCK_PIPELINE_DECODED_CPU: *value = atomic_load(&pl->st_decoded_cpu); break;
    case TSOCK_PIPELINE_READ_CPU_NS: *value = atomic_load(&pl->st_read_cpu_ns); break;
    case TSOCK_PIPELINE_CODEC_CPU_NS: *value = atomic_load(&pl->st_codec_cpu_ns); break;
    case TSOCK_PIPELINE_RESAMPLE_CPU_NS: *value = atomic_load(&pl->st_resample_cpu_ns); break;
    case TSOCK_PIPELINE_DRIVER_CPU_NS: *value = atomic_load(&pl->st_driver_cpu_ns); break;
    case TSOCK_PIPELINE_RESTART_WINDOWS: *value = atomic_load(&pl->st_restart_windows); break;
    case TSOCK_PIPELINE_OWN_ENTROPY: *value = atomic_load(&pl->st_own_entropy); break;
    case TSOCK_PIPELINE_ENTROPY_REDONE: *value = atomic_load(&pl->st_entropy_redone); break;
    case TSOCK_PIPELINE_ENTRY_JUMPS: *value = atomic_load(&pl->st_entry_jumps); break;
    case TSOCK_PIPELINE_ENTRY_POINT_BYTES: *value = atomic_load(&pl->st_points_bytes); break;
    default: return -EINVAL;
    }
    return 0;
}

void
tsock_pipeline_destroy(tsock_pipeline *pl)
{
    if (!pl)
        return;
    tsock__pipeline_stop_workers(pl);
    tsock__pipeline_points_free(pl);
    tsock__reader_destroy(pl->reader);
    tsock__index_destroy(pl->index);
    free(pl->bad_bits);
    free(pl->arena);
    free(pl->reqs);
    free(pl->gather);
    free(pl->known_bad);
    free(pl->queue);
    tsock__pipeline_device_free(pl);
    free(pl->path);
    free(pl->cache_path);
    free(pl->split);
    free(pl->label_key);
    pthread_cond_destroy(&pl->work_cv);
    pthread_cond_destroy(&pl->done_cv);
    pthread_mutex_destroy(&pl->mu);
    free(pl);
}
