/* Internals shared by the files of the dataset index (index.h is the interface):
 *
 *   index.c           lifetime and accessors, name order, empty classes, removal
 *   index_leftout.c   the record of files left out by a scan, and its log lines
 *   index_folder.c    the ImageFolder scan (directory walk on the core/ thread pool)
 *   index_list.c      the list-file scan
 *   index_cache.c     the cache file's bytes: encode and decode (pure, fuzzed)
 *   index_store.c     the cache file on disk: save, load, freshness
 *   index_shards.c    the WebDataset scan (shards.c resolves SPEC, tar.c parses a shard)
 *   index_open.c      open: cache or scan, check, save
 *
 * Calls go down this list's dependencies only (open -> store -> cache -> index.c; the scans
 * -> leftout and index.c), never back up.
 */
#ifndef TSOCK_DATASET_INDEX_INT_H
#define TSOCK_DATASET_INDEX_INT_H

#include <stddef.h>
#include <stdint.h>

#include "dataset/index.h"

/* The most samples an index holds: the cache format's limit, which the scans enforce too. */
#define TSOCK__INDEX_MAX_SAMPLES ((uint64_t)1 << 32)

/* Scratch bytes per scan thread: getdents64 reads many entries per call; 64 KiB holds about
 * 2000 ImageNet names. */
#define TSOCK__INDEX_DENTS_BUFFER (64 * 1024)

/* Why a scan left a file out. */
enum tsock__index_reason {
    TSOCK__INDEX_EMPTY = 0,      /* size 0 */
    TSOCK__INDEX_UNREADABLE = 1, /* stat failed, or not a regular file */
    TSOCK__INDEX_TOO_LARGE = 2,  /* 4 GiB or more */
    TSOCK__INDEX_REASONS = 3
};

/* Up to TSOCK__INDEX_LOG_EXAMPLES left-out paths per reason, kept so that the log names the
 * first ones in sample order whatever the thread timing. Zero it to start; one per thread. */
struct tsock__index_leftout {
    uint64_t count[TSOCK__INDEX_REASONS];
    char *example[TSOCK__INDEX_REASONS][TSOCK__INDEX_LOG_EXAMPLES];
    uint32_t examples[TSOCK__INDEX_REASONS];
};

/* Counts one file left out for `reason`, keeping its path (the concatenation of a, b and c;
 * NULL counts as "") while fewer than TSOCK__INDEX_LOG_EXAMPLES are kept. */
void tsock__index_leftout_add(struct tsock__index_leftout *l, int reason, const char *a,
                              const char *b, const char *c);
void tsock__index_leftout_free(struct tsock__index_leftout *l);

/* Logs the first examples across `nparts` records `stride` bytes apart, in order, then one
 * count line per reason naming `where`. */
void tsock__index_leftout_log(struct tsock__index_leftout *parts, size_t nparts, size_t stride,
                              const char *where);

/* Whether a name is "." or "..". */
int tsock__index_is_dot(const char *name);

/* Sets idx->empty_classes from the entries' labels. Returns 0 or -ENOMEM. */
int tsock__index_count_empty_classes(struct tsock__index *idx);

/* Whether a shards index (a cache's) was built from SPEC with these options and the shards
 * SPEC names now are the index's, in the same order. */
int tsock__index_shards_match(const struct tsock__index *idx, const char *spec,
                              const struct tsock__shard_options *opt);

/* Logs the classes with no sample (the first few by name, for a folder) and their count. */
void tsock__index_log_empty_classes(const struct tsock__index *idx);

#endif
