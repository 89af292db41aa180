/* ImageFolder tree -> WebDataset tar shards, for tsock-mkdataset --format webdataset and its
 * converter (--from-folder).
 *
 * Classes are the tree's subdirectories sorted by name and numbered from 0 as torchvision's
 * ImageFolder numbers them; a class's files (with an image extension) are taken in name order,
 * the class folder's own files first, then each subfolder's the same way (for the flat trees
 * tsock-mkdataset writes, exactly ImageFolder's order, so the shards' ids are the folder's).
 * Each file becomes one sample of two members: KEY.EXT (the file's bytes, EXT its extension
 * lower-cased) and KEY.cls (the label in ASCII decimal), where KEY is
 * CLASS/STEM, STEM the file's path below its class with its extension removed and every other
 * '.' made '_' (a dot would end the key). Shards hold `per_shard` samples each (the last one
 * the rest), in that order, and are named OUT/PREFIX-000000.tar, ... ; an OUT/_info.json in
 * timm's layout names them ({"splits": {SPLIT: {"filenames", "num_samples",
 * "shard_lengths"}}}). Headers are POSIX ustar, with GNU long-name members for paths ustar
 * cannot hold. The output depends only on the tree and the options.
 */
#ifndef TSOCK_MKDATASET_SHARDS_H
#define TSOCK_MKDATASET_SHARDS_H

#include <stddef.h>
#include <stdint.h>

/* The files of an ImageFolder tree, in the order above. */
struct file_list {
    char **paths; /* relative to the tree: CLASS/NAME or CLASS/SUB/.../NAME */
    uint32_t *labels;
    size_t n, cap;
    char **classes; /* the class folders' names, sorted (label = index) */
};

/* Lists the image files (torchvision's image extensions) of `tree`. Returns 0, or -1 with a
 * message (no class folder, no image file, unreadable tree). Free with file_list_free, also
 * after a failure. */
int list_tree_files(const char *tree, struct file_list *l, uint64_t *nclasses, char *err,
                    size_t err_size);
void file_list_free(struct file_list *l, uint64_t nclasses);

struct shard_summary {
    uint64_t samples, shards, classes, bytes;
};

/* Writes the shards of `tree` into the existing directory `out`. `split` is the info file's
 * split name ("train" or "validation"). Returns 0, or -1 with a message in err (a shard
 * being written is removed). */
int write_shards(const char *tree, const char *out, const char *prefix, const char *split,
                 uint64_t per_shard, struct shard_summary *sum, char *err, size_t err_size);

#endif
