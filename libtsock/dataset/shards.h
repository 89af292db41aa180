/* Which shards make up a WebDataset source: the SPEC of tsock-producer --shards, resolved to a
 * list of shard files in order (the order sample ids follow).
 *
 * SPEC is one of:
 *  - a brace pattern: DIR/name-{0000..1023}.tar (numeric ranges keep the width of their first
 *    bound's zero padding; {a,b,c} lists too; several braces expand left to right, the
 *    leftmost varying slowest, as the shell and WebDataset expand them);
 *  - a directory: the shards named by the split in its timm-style _info.json or info.json
 *    ("splits": {NAME: {"filenames": [...], "num_samples": N}}) when there is one, else every
 *    *.tar file in it, sorted by name (byte order);
 *  - a file ending in .tar: that one shard;
 *  - any other file: a list of shard paths, one per line, relative to the list's directory or
 *    absolute (blank lines and lines starting with '#' are skipped).
 * Shard paths are kept relative to `root` (the pattern's or list's directory, or the
 * directory itself) where they lie in it, absolute otherwise.
 */
#ifndef TSOCK_DATASET_SHARDS_H
#define TSOCK_DATASET_SHARDS_H

#include <stdint.h>

/* The most shards a source may have (the index keeps a shard number in 32 bits). */
#define TSOCK__SHARDS_MAX 1000000u

struct tsock__shard_list {
    char *root;   /* the directory relative shard paths are relative to */
    char **paths; /* count paths, in id order */
    uint32_t count;
    int64_t expected; /* num_samples of the info file's split, or -1 */
    char *info;       /* the info file used, or NULL */
};

/* Resolves SPEC. `split` names the info file's split to use ("train" also matches nothing
 * else; "val" matches "val" or "validation"); NULL or no info file: the rules above. Returns 0,
 * -ENOENT (nothing matched, or a file of the spec does not exist: logged with its name),
 * -EINVAL (a malformed pattern, list or info file, or an unknown split: logged), -ENOMEM. */
int tsock__shards_resolve(const char *spec, const char *split, struct tsock__shard_list *out);

void tsock__shards_free(struct tsock__shard_list *l);

/* The info file's part of tsock__shards_resolve, on its bytes (untrusted: fuzzed by
 * tests/fuzz/fuzz_tar.c): the "filenames" of split `split` ("val" also matches "validation")
 * under "splits", and its "num_samples" (-1 when absent). Returns 0 and a malloc'ed array of
 * *count malloc'ed names (the caller frees each and the array), or -EINVAL (no such split, or
 * not a non-empty list of plain strings: logged), -E2BIG (too many shards), -ENOMEM. Reads
 * no byte outside text[0, size). */
int tsock__shards_parse_info(const char *text, size_t size, const char *split, char ***names,
                             uint32_t *count, int64_t *expected);

#endif
