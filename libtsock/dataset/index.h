/* The dataset index: which files make up the dataset, in which order, with which labels.
 *
 * Two sources:
 *  - folder: an ImageFolder tree root/<class>/.../<file>, ordered and labelled exactly as
 *    torchvision's ImageFolder (find_classes + make_dataset) orders and labels it:
 *      classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
 *      label   = position of the class in that list
 *      for root, _, fnames in sorted(os.walk(class_dir, followlinks=True)):
 *          for fname in sorted(fnames): keep it if fname.lower() ends with an IMG_EXTENSION
 *    "sorted" is Python's str order: code points of the name decoded from UTF-8 with
 *    surrogateescape (tsock__index_name_compare), which is byte order for valid UTF-8. Note
 *    that os.walk tuples sort by the full directory path, so "a-b" comes before "a/x" ('-' <
 *    '/'): this is not a depth-first order. Symlinks are followed like os.walk(followlinks=True)
 *    does, except that a directory that is its own ancestor is skipped (logged) instead of
 *    being walked until ELOOP. Hidden entries are not skipped (torchvision does not skip them).
 *  - list: a text file of "path label" lines; see tsock__index_scan_list.
 *
 * Files that cannot be samples are left out here, counted and logged (the first few paths of
 * each kind): empty files, files stat cannot reach (broken symlinks, vanished files) or that
 * are not regular files, and files of 4 GiB or more. Leaving a file out shifts the sample ids
 * after it (ids are positions in this index) but never a label: labels come from the class
 * list, which includes classes left with no usable file (logged as empty classes).
 *
 * Layout in memory: one string pool of NUL-terminated paths relative to the root, and per
 * sample a 16-byte entry (pool offset, size, label). An ImageNet train path such as
 * "n01440764/n01440764_10026.JPEG" takes 31 pool bytes, so a sample costs about 47 bytes.
 *
 * The index cache file (tsock__index_save / tsock__index_load) holds the same table, so a
 * restart does not rescan. It is untrusted input: every field and length is validated. Its
 * freshness test re-stats the directories of the tree (mtime, inode, size): adding, removing
 * or renaming a file anywhere in the tree changes its directory's mtime. Changes of a file's
 * content in place are not detected; the reader copes with files whose size changed.
 *
 * This header is the interface the pipeline uses. The cache codec (the file's bytes, pure and
 * fuzzed) is in index_cache.h; index_int.h lists the files behind both and what each does.
 */
#ifndef TSOCK_DATASET_INDEX_H
#define TSOCK_DATASET_INDEX_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum tsock__index_source {
    TSOCK__INDEX_FOLDER = 0, /* an ImageFolder tree */
    TSOCK__INDEX_LIST = 1,   /* a "path label" list file */
    TSOCK__INDEX_SHARDS = 2  /* WebDataset tar shards (index_shards.c, shards.h, tar.h) */
};

/* One sample: 16 bytes. */
struct tsock__index_entry {
    uint64_t path;  /* offset in the pool of the NUL-terminated path relative to the root */
    uint32_t size;  /* bytes when the index was built (never 0: empty files are left out) */
    uint32_t label; /* < classes */
};

/* A file-system object whose change makes a cache stale: every directory of a folder tree,
 * the root included, or the list file of a list. */
struct tsock__index_watch {
    uint64_t path; /* pool offset of its path relative to the root ("" is the root itself) */
    uint64_t ino;
    uint64_t size;
    int64_t mtime_ns;
};

/* How many left-out paths of each kind are logged before only counting. */
#define TSOCK__INDEX_LOG_EXAMPLES 5

/* The longest dataset-relative path and the deepest nesting accepted (deeper or longer
 * entries are skipped and logged). */
#define TSOCK__INDEX_MAX_PATH 4095
#define TSOCK__INDEX_MAX_DEPTH 64

/* A directory whose mtime is within this much of the scan's start may change again within the
 * same timestamp tick without its mtime moving; a cache holding one is treated as stale. */
#define TSOCK__INDEX_RACY_NS 2000000000LL

struct tsock__index {
    int source;        /* enum tsock__index_source */
    char *source_path; /* the root (folder) or the list file (list), as given */
    char *root;        /* directory the sample paths are relative to: the root, or the
                        * list file's directory (list paths may also be absolute) */
    uint32_t classes;  /* folder: class directories; list: largest label + 1 */
    uint64_t count;    /* samples */
    struct tsock__index_entry *entries; /* count entries, in sample-id order */
    uint64_t *class_names;              /* folder: pool offset of each class's name; list: NULL */
    char *pool;
    uint64_t pool_size;
    struct tsock__index_watch *watch;
    uint32_t watch_count;
    uint64_t total_bytes; /* sum of the entries' sizes */
    int64_t scan_time_ns; /* CLOCK_REALTIME when the scan started */
    /* Left out, by reason. */
    uint64_t empty;         /* size 0 */
    uint64_t unreadable;    /* stat failed, or not a regular file */
    uint64_t too_large;     /* 4 GiB or more */
    uint64_t not_image;     /* removed by a check of the files' contents (tsock__index_remove) */
    uint32_t empty_classes; /* classes with no sample (their labels are still reserved) */
    /* Shards only (NULL and 0 otherwise). A sample's entry path is its key, its size the
     * image member's length; the watches are the shards, in id order. */
    uint64_t *offsets;    /* count: where the sample's image member's data starts */
    uint32_t *shard;      /* count: the shard (watch index) holding the sample */
    char *options;        /* what else the index depends on: "split=...;label_key=..." */
    uint64_t bad_members; /* samples the tar index parser rejected (logged, left out) */
};

/* Scans an ImageFolder tree with `threads` threads (0: one per online CPU), one class
 * directory at a time per thread; the result does not depend on the thread count. Only
 * directories are opened: files are only fstatat'ed (and only those with an image
 * extension). Returns 0 and sets *out (owned by the caller), or -ENOENT (no class directory,
 * or no usable file at all), a negated errno from opening the root, -ENOMEM. */
int tsock__index_scan_folder(const char *root, int threads, struct tsock__index **out);
/* The same, stopped by `cancel` (NULL: never): once it reads non-zero, every thread stops
 * after the directory listing it is in, and the scan returns TSOCK_E_CANCELLED. */
int tsock__index_scan_folder_until(const char *root, int threads, const atomic_int *cancel,
                                   struct tsock__index **out);

/* Reads a list file: one sample per line, "path label", where label is a decimal integer in
 * 0..2^32-2 after the last run of blanks and path is everything before it (so it may hold
 * spaces), relative to the list file's directory or absolute. Blank lines and lines whose
 * first non-blank character is '#' are skipped; a trailing '\r' is ignored. Any malformed
 * line (no label, a label that is not a number or out of range, an empty path, a NUL byte)
 * rejects the whole list: each bad line is logged with its number and -EINVAL returned.
 * Listed files are fstatat'ed on `threads` threads and left out by the same rules as in a
 * folder; samples keep the list's order. Returns 0, -EINVAL, -ENOENT (no usable file),
 * a negated errno from reading the list, -ENOMEM. */
int tsock__index_scan_list(const char *list_path, int threads, struct tsock__index **out);
/* The same, stopped by `cancel` (NULL: never) within LIST_CHUNK stats per thread. */
int tsock__index_scan_list_until(const char *list_path, int threads, const atomic_int *cancel,
                                 struct tsock__index **out);

/* Loads a cache written by tsock__index_save and checks it belongs to (source, path) and is
 * fresh (every watched object has the recorded inode, size and mtime, and none was modified
 * within TSOCK__INDEX_RACY_NS of the scan). Returns 0 and sets *out, or -ENOENT (no cache),
 * -EBADMSG (not a valid cache: bad magic, version, length, field, checksum), -ESTALE (valid
 * but for another source, or the tree changed), another negated errno from reading it. */
int tsock__index_load(const char *cache_path, int source, const char *path,
                      struct tsock__index **out);

/* Writes the index to `cache_path` atomically: a temporary file in the same directory, then
 * rename. On any failure (a full disk included) the temporary file is removed and the previous
 * cache, if any, is left as it was. Returns 0 or a negated errno. */
int tsock__index_save(const struct tsock__index *idx, const char *cache_path);

/* The usual way in: loads the cache when `cache_path` is not NULL and it is valid and fresh,
 * otherwise scans (folder or list per `source`) and, when `cache_path` is not NULL, writes a
 * new cache. Why a cache was not used, and a failure to write one, are logged; neither fails
 * the call. A scan whose directories changed within TSOCK__INDEX_RACY_NS is not cached (its
 * cache would be stale at once), nor is one inside the folder tree (writing it would change
 * the tree): keep the cache outside the dataset. Returns what the scan returns. */
int tsock__index_open(int source, const char *path, const char *cache_path, int threads,
                      struct tsock__index **out);

/* A check of a fresh scan's files (for example of their image headers): sets drop[i] to
 * non-zero for every sample i to leave out, and returns 0 or a negated errno (which fails the
 * open). It runs only after a scan, never on a cache, so what it removed stays removed in the
 * cache it leads to, and a restart neither re-reads the files nor logs them again. */
typedef int (*tsock__index_check_fn)(void *arg, const struct tsock__index *idx, uint8_t *drop);

/* tsock__index_open with a check run on a fresh scan before the cache is written, and a scan
 * stopped by `cancel` (NULL: never; see tsock__index_scan_folder_until). An index the check
 * empties fails with -ENOENT. Returns what tsock__index_open returns, TSOCK_E_CANCELLED, or
 * the check's error. */
int tsock__index_open_checked(int source, const char *path, const char *cache_path, int threads,
                              tsock__index_check_fn check, void *arg, const atomic_int *cancel,
                              struct tsock__index **out);

/* What a WebDataset index depends on besides its SPEC (shards.h). */
struct tsock__shard_options {
    const char *split;     /* the info file's split to use (NULL: none) */
    const char *label_key; /* NULL: labels from cls; else the json field */
};

/* Scans the shards of SPEC on `threads` threads (one shard at a time per thread; the result
 * does not depend on the thread count): each shard is mapped and its headers parsed
 * (tar.h). Samples are numbered in shard order, then tar order. Every rejected sample is
 * logged (shard, offset, key, why) and counted in bad_members. Returns 0 and sets *out, or
 * -ENOENT (no shard, or no good sample), a negated errno from opening a shard (the start fails:
 * logged with the shard's name), -EINVAL (a malformed SPEC), -ENOMEM, TSOCK_E_CANCELLED. */
int tsock__index_scan_shards(const char *spec, const struct tsock__shard_options *opt, int threads,
                             const atomic_int *cancel, struct tsock__index **out);

/* tsock__index_open_checked for shards: the cache is used when it was built from the same
 * SPEC and options and every shard SPEC names now is the one indexed (path, inode, size and
 * mtime). */
int tsock__index_open_shards(const char *spec, const struct tsock__shard_options *opt,
                             const char *cache_path, int threads, tsock__index_check_fn check,
                             void *arg, const atomic_int *cancel, struct tsock__index **out);

/* The shard file of sample i (shards source; relative to idx->root or absolute), or NULL. */
const char *tsock__index_shard_path(const struct tsock__index *idx, uint64_t i);

/* Where sample i's bytes are: for shards, its member's offset in its shard; 0 otherwise. */
uint64_t tsock__index_offset(const struct tsock__index *idx, uint64_t i);

/* Writes a name for sample i to buf for log lines: "ROOT/PATH", or for a shard sample
 * "ROOT/SHARD offset OFFSET key KEY". Returns buf. */
const char *tsock__index_describe(const struct tsock__index *idx, uint64_t i, char *buf,
                                  size_t size);

/* Removes the samples i with drop[i] non-zero (drop has idx->count bytes), keeping the order
 * of the others: the ids after a removed sample shift down, labels never change. Adds the
 * number removed to idx->not_image and recounts empty classes. Returns that number or
 * -EINVAL, -ENOMEM. */
int tsock__index_remove(struct tsock__index *idx, const uint8_t *drop);

/* Whether the watched objects are unchanged since the scan: 0, or -ESTALE. */
int tsock__index_check_fresh(const struct tsock__index *idx);

/* Path of sample i relative to idx->root (or absolute, in a list), or NULL when out of range.
 * Owned by the index. */
const char *tsock__index_path(const struct tsock__index *idx, uint64_t i);

/* Name of class `label` (folder source), or NULL. Owned by the index. */
const char *tsock__index_class_name(const struct tsock__index *idx, uint32_t label);

/* Bytes of memory the index holds (table, pool, class names, watches, strings). */
size_t tsock__index_memory(const struct tsock__index *idx);

/* Frees the index; NULL does nothing. */
void tsock__index_destroy(struct tsock__index *idx);

/* Python's str order for file names: compares the code points of the two NUL-terminated
 * names decoded from UTF-8 with surrogateescape (an undecodable byte b becomes U+DC00 + b).
 * Returns <0, 0 or >0. Equals strcmp's order when both names are valid UTF-8. */
int tsock__index_name_compare(const char *a, const char *b);

/* Whether a file name ends with one of torchvision's IMG_EXTENSIONS, compared case-
 * insensitively: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp. */
int tsock__index_has_image_extension(const char *name);

/* Test seam: the function tsock__index_save writes with (NULL restores write(2)), so tests can
 * inject a full disk anywhere in the file. Process-wide; set it before saving, not during. */
typedef ssize_t (*tsock__index_write_fn)(int fd, const void *buf, size_t n);
void tsock__index_set_write_hook(tsock__index_write_fn fn);

#endif
