/* ImageFolder tree -> a copy of it, for tsock-mkdataset --from-folder TREE --format folder,
 * optionally with restart markers added to every JPEG (--restart-interval, see restarts.h).
 *
 * The copy holds the files an ImageFolder (and --format webdataset) indexes: every class
 * folder of TREE (also one without images, so the class numbering stays the same) and, below
 * them, every file with one of torchvision's image extensions, at the same relative path.
 * Other files are not copied. Without an interval the bytes are copied unchanged. With one,
 * every file is transcoded; a file that cannot be (not a JPEG, such as a PNG, whatever its
 * name; corrupt or truncated; a JPEG libjpeg cannot read) is copied unchanged and listed with
 * the reason. */
#ifndef TSOCK_MKDATASET_COPYTREE_H
#define TSOCK_MKDATASET_COPYTREE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A file copied unchanged although an interval was asked for. */
struct copy_skip {
    char *path; /* relative to the tree */
    char *reason;
};

struct copy_summary {
    uint64_t classes, files, transcoded, bytes_in, bytes_out;
    uint64_t transcoded_bytes_in, transcoded_bytes_out; /* of the transcoded files alone */
    struct copy_skip *skipped;                          /* in the tree's file order */
    size_t nskipped;
};

/* Copies `tree` into the existing empty directory `out` with `threads` threads (the output
 * does not depend on their number); interval 0 copies the bytes. Returns 0, or -1 with a
 * message (cannot list, read or write; a file being written is removed). Free the summary
 * with copy_summary_free, also after a failure. */
int copy_tree(const char *tree, const char *out, unsigned interval, unsigned threads,
              struct copy_summary *sum, char *err, size_t err_size);

void copy_summary_free(struct copy_summary *sum);

/* Prints what the copy did to the files: as JSON members (", \"transcoded\": ..., ", to go
 * inside the caller's object; every file not transcoded listed with its reason), or as text
 * lines (the first 20 such files, and how many more). */
void copy_summary_print(FILE *f, const struct copy_summary *sum, unsigned interval, int json);

#endif
