/* The tar index parser: finds the samples of one WebDataset shard in its bytes.
 *
 * A shard is a tar archive. Its members are grouped into samples by key: a member's key is its
 * path up to the first dot of its file name (the part after the last '/'), its extension the
 * rest, lower-cased. A sample is a run of consecutive members sharing a key. Of a sample's
 * members, the image is the first present of jpg, jpeg, png and webp (in that order of
 * preference), the label the ASCII decimal content of `cls`, or, when a label key is given,
 * the top-level integer field of that name in `json`. Members of other extensions, and members
 * that are not regular files (directories, links, devices), are ignored.
 *
 * Headers: POSIX ustar (the 155-byte prefix joined to the name), GNU (long names in a 'L'
 * member before the header they name; base-256 sizes) and PAX (Python's default since 3.8:
 * 'x' extended headers whose "path" and "size" records override the next header's fields;
 * 'g' global headers are skipped). Both checksum conventions (unsigned and signed byte sums)
 * are accepted. The archive ends at its first all-zero header block, or at the end of the
 * bytes when that falls on a member boundary.
 *
 * Bad input is reported, never trusted: a header whose checksum is wrong, a truncated header,
 * a member whose data runs past the end of the shard (each stops the scan of the shard: what
 * follows cannot be located), a sample without an image or without a label, a label that is
 * not a decimal integer in range, a key met again in the same shard after other keys (the later
 * sample is the bad one), the same extension twice in one sample, an empty image member, an
 * image of 4 GiB or more. Each is passed to the error callback with the offset of the header
 * concerned and the key, and the sample concerned is not passed to the sample callback.
 *
 * Pure: no I/O, no allocation but the parser's own scratch, no global state; the bytes are
 * untrusted (tests/fuzz/fuzz_tar.c). Thread-safe.
 */
#ifndef TSOCK_DATASET_TAR_H
#define TSOCK_DATASET_TAR_H

#include <stddef.h>
#include <stdint.h>

/* The longest member path accepted (longer: the member's sample is reported bad). */
#define TSOCK__TAR_MAX_PATH 4095

/* One sample found: its key (not NUL-terminated, key_len bytes, valid during the call), where
 * its image member's data starts in the shard and how long it is, and its label. `header` is
 * the offset of the sample's first member header. */
struct tsock__tar_sample {
    const char *key;
    size_t key_len;
    uint64_t header;
    uint64_t offset;
    uint32_t size;
    uint32_t label;
};

/* Why a sample or the rest of a shard was rejected. */
enum tsock__tar_problem {
    TSOCK__TAR_BAD_CHECKSUM = 1, /* a header's checksum is wrong: the scan stops */
    TSOCK__TAR_TRUNCATED,        /* a header or a member's data runs past the end: scan stops */
    TSOCK__TAR_BAD_HEADER,       /* a malformed size, PAX record or long name: scan stops */
    TSOCK__TAR_NO_IMAGE,         /* no jpg, jpeg, png or webp member */
    TSOCK__TAR_NO_LABEL,         /* no cls member (or json without the label key) */
    TSOCK__TAR_BAD_LABEL,        /* cls or the json field is not a decimal in 0..2^32-2 */
    TSOCK__TAR_DUPLICATE_KEY,    /* the key was met before in this shard */
    TSOCK__TAR_DUPLICATE_MEMBER, /* the same extension twice in one sample */
    TSOCK__TAR_EMPTY_IMAGE,      /* the image member has no bytes */
    TSOCK__TAR_TOO_LARGE,        /* the image member has 4 GiB or more, or the path is too long */
};

/* A short explanation of a problem, for log lines ("the header's checksum is wrong..."). */
const char *tsock__tar_problem_text(int problem);

struct tsock__tar_callbacks {
    /* A good sample, in archive order. Returns 0 to go on, non-zero to stop the scan (the
     * scan then returns that value). */
    int (*sample)(void *arg, const struct tsock__tar_sample *s);
    /* A problem at header offset `offset` (the key may be empty when no member was read yet;
     * key_len bytes, not NUL-terminated). */
    void (*problem)(void *arg, int problem, uint64_t offset, const char *key, size_t key_len);
    void *arg;
    /* NULL: the label is in `cls`. Otherwise the name of a top-level integer field of `json`. */
    const char *label_key;
};

/* Scans the `size` bytes of one shard. Returns the number of good samples, the sample
 * callback's non-zero value, or -ENOMEM. Problems do not make it fail: they are reported. */
int64_t tsock__tar_scan(const uint8_t *data, size_t size, const struct tsock__tar_callbacks *cb);

#endif
