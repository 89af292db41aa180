/* Opening an index (see tsock__index_open in index.h): the cache when it is valid and fresh,
 * otherwise a scan, the caller's check of it, and a new cache.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "core/file.h"
#include "dataset/index_int.h"

static int
is_racy(const struct tsock__index *idx)
{
    for (uint32_t i = 0; i < idx->watch_count; i++)
        if (idx->watch[i].mtime_ns > idx->scan_time_ns - TSOCK__INDEX_RACY_NS)
            return 1;
    return 0;
}

/* Whether the cache file would go into a directory the index watches: writing it there
 * changes that directory's mtime, so the cache would be stale at once, on every run. */
static int
cache_in_tree(const struct tsock__index *idx, const char *cache_path)
{
    char *dir = tsock__dir_of(cache_path);
    struct stat cache_dir, root;
    int inside = 0;

    if (dir && stat(dir, &cache_dir) == 0 && stat(idx->root, &root) == 0 &&
        cache_dir.st_dev == root.st_dev)
        for (uint32_t i = 0; i < idx->watch_count && !inside; i++)
            inside = idx->watch[i].ino == (uint64_t)cache_dir.st_ino;
    free(dir);
    return inside;
}

/* Runs the caller's check on a fresh scan and removes what it marks. An index left with no
 * sample is an error, as a scan that finds no usable file is. */
static int
apply_check(tsock__index_check_fn check, void *arg, struct tsock__index **idx)
{
    uint8_t *drop = calloc((size_t)(*idx)->count + 1, 1);
    int r = drop ? check(arg, *idx, drop) : -ENOMEM;

    if (r >= 0)
        r = tsock__index_remove(*idx, drop);
    free(drop);
    if (r >= 0 && (*idx)->count == 0) {
        tsock__log(TSOCK_LOG_ERROR, "index: %s: no file passed the image header check",
                   (*idx)->source_path);
        r = -ENOENT;
    }
    if (r < 0) {
        tsock__index_destroy(*idx);
        *idx = NULL;
        return r;
    }
    return 0;
}

/* Why a cache was not used (a missing one only at debug level). */
static void
log_cache_unused(const char *cache_path, int r)
{
    tsock__log(r == -ENOENT ? TSOCK_LOG_DEBUG : TSOCK_LOG_INFO,
               "index: cache %s not used (%s); scanning", cache_path,
               r == -ESTALE    ? "the dataset changed since it was written"
               : r == -EBADMSG ? "not a valid index cache"
                               : strerror(-r));
}

/* A scan's end: the caller's check, then a new cache where one may be written. */
static int
after_scan(int r, tsock__index_check_fn check, void *arg, const char *cache_path,
           struct tsock__index **out)
{
    if (r == 0 && check)
        r = apply_check(check, arg, out);
    if (r != 0 || !cache_path)
        return r;
    if (cache_in_tree(*out, cache_path))
        tsock__log(TSOCK_LOG_WARN,
                   "index: cache %s not written: it is inside the dataset tree, where writing "
                   "it would change the tree and so make itself stale; put it elsewhere",
                   cache_path);
    else if (is_racy(*out))
        tsock__log(TSOCK_LOG_INFO,
                   "index: cache %s not written: the dataset was modified in the last %d s, "
                   "so it may still change unnoticed; the next run will write it",
                   cache_path, (int)(TSOCK__INDEX_RACY_NS / 1000000000LL));
    else
        tsock__index_save(*out, cache_path); /* logs its own failure; the index is usable */
    return 0;
}

int
tsock__index_open(int source, const char *path, const char *cache_path, int threads,
                  struct tsock__index **out)
{
    return tsock__index_open_checked(source, path, cache_path, threads, NULL, NULL, NULL, out);
}

int
tsock__index_open_checked(int source, const char *path, const char *cache_path, int threads,
                          tsock__index_check_fn check, void *arg, const atomic_int *cancel,
                          struct tsock__index **out)
{
    int r;

    if (!path || !out || (source != TSOCK__INDEX_FOLDER && source != TSOCK__INDEX_LIST))
        return -EINVAL;
    if (cache_path) {
        r = tsock__index_load(cache_path, source, path, out);
        if (r == 0) {
            tsock__log(TSOCK_LOG_INFO, "index: %s: %llu samples from cache %s", path,
                       (unsigned long long)(*out)->count, cache_path);
            return 0;
        }
        log_cache_unused(cache_path, r);
    }
    r = source == TSOCK__INDEX_FOLDER ? tsock__index_scan_folder_until(path, threads, cancel, out)
                                      : tsock__index_scan_list_until(path, threads, cancel, out);
    return after_scan(r, check, arg, cache_path, out);
}

int
tsock__index_open_shards(const char *spec, const struct tsock__shard_options *opt,
                         const char *cache_path, int threads, tsock__index_check_fn check,
                         void *arg, const atomic_int *cancel, struct tsock__index **out)
{
    int r;

    if (!spec || !out)
        return -EINVAL;
    if (cache_path) {
        r = tsock__index_load(cache_path, TSOCK__INDEX_SHARDS, spec, out);
        if (r == 0 && !tsock__index_shards_match(*out, spec, opt)) {
            tsock__index_destroy(*out);
            *out = NULL;
            r = -ESTALE;
        }
        if (r == 0) {
            tsock__log(TSOCK_LOG_INFO, "index: %s: %llu samples from cache %s", spec,
                       (unsigned long long)(*out)->count, cache_path);
            return 0;
        }
        log_cache_unused(cache_path, r);
    }
    r = tsock__index_scan_shards(spec, opt, threads, cancel, out);
    return after_scan(r, check, arg, cache_path, out);
}
