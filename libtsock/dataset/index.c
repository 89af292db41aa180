/* The dataset index (see index.h and, for how the files divide the work, index_int.h):
 * lifetime and accessors, Python's order of file names, and the bookkeeping every source of
 * an index shares (empty classes, removal of samples). No I/O but logging.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "dataset/index_int.h"

/* ---------------------------------------------------------------------------------------- */
/* Names                                                                                     */
/* ---------------------------------------------------------------------------------------- */

static int
is_cont(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

/* Next code point of a name as Python's os.fsdecode sees it: strict UTF-8 (no overlongs, no
 * surrogates, nothing above U+10FFFF), and each byte that does not start a valid sequence
 * becomes U+DC00 + byte (surrogateescape). Escaping only the first byte and restarting at the
 * next gives the same result as Python's error ranges, because the rest of an invalid
 * sequence consists of continuation bytes, which never start a valid sequence themselves.
 * Reads no further than the terminating NUL, which is returned as 0. */
static uint32_t
next_code_point(const unsigned char **p)
{
    const unsigned char *s = *p;
    unsigned c = s[0];

    if (c < 0x80) {
        *p = s + 1;
        return c;
    }
    if (c >= 0xC2 && c <= 0xDF && is_cont(s[1])) {
        *p = s + 2;
        return ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    }
    if (c >= 0xE0 && c <= 0xEF) {
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (s[1] >= lo && s[1] <= hi && is_cont(s[2])) {
            *p = s + 3;
            return ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
        }
    }
    if (c >= 0xF0 && c <= 0xF4) {
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (s[1] >= lo && s[1] <= hi && is_cont(s[2]) && is_cont(s[3])) {
            *p = s + 4;
            return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) |
                   (s[3] & 0x3Fu);
        }
    }
    *p = s + 1;
    return 0xDC00u + c;
}

int
tsock__index_name_compare(const char *a, const char *b)
{
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;

    for (;;) {
        /* ASCII fast path: most names never leave it. */
        while (*x == *y && *x && *x < 0x80) {
            x++;
            y++;
        }
        if (*x < 0x80 && *y < 0x80)
            return (int)*x - (int)*y;
        uint32_t cx = next_code_point(&x), cy = next_code_point(&y);
        if (cx != cy)
            return cx < cy ? -1 : 1;
        if (cx == 0)
            return 0;
    }
}

int
tsock__index_has_image_extension(const char *name)
{
    /* torchvision.datasets.folder.IMG_EXTENSIONS; matched like str.lower().endswith(). No
     * non-ASCII character lowercases to any of these letters, so ASCII folding is exact. */
    static const char *const ext[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                      ".pgm", ".tif",  ".tiff", ".webp"};
    size_t n = strlen(name);

    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        size_t m = strlen(ext[i]);
        if (n < m)
            continue;
        const char *tail = name + n - m;
        size_t k = 0;
        while (k < m) {
            char c = tail[k];
            if (c >= 'A' && c <= 'Z')
                c = (char)(c - 'A' + 'a');
            if (c != ext[i][k])
                break;
            k++;
        }
        if (k == m)
            return 1;
    }
    return 0;
}

int
tsock__index_is_dot(const char *name)
{
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

/* ---------------------------------------------------------------------------------------- */
/* Classes and removal                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* Labels with no sample. Folder entries are grouped by label; list labels come in any order,
 * so a bitmap (or, for a huge label range, a sorted copy) counts the distinct ones. */
static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

int
tsock__index_count_empty_classes(struct tsock__index *idx)
{
    uint64_t distinct = 0;

    if (idx->count == 0) {
        idx->empty_classes = idx->classes;
        return 0;
    }
    if (idx->classes <= ((uint32_t)1 << 26)) {
        uint64_t *bits = calloc(((size_t)idx->classes + 63) / 64, sizeof *bits);
        if (!bits)
            return -ENOMEM;
        for (uint64_t i = 0; i < idx->count; i++) {
            uint32_t l = idx->entries[i].label;
            uint64_t m = (uint64_t)1 << (l % 64);
            if (!(bits[l / 64] & m)) {
                bits[l / 64] |= m;
                distinct++;
            }
        }
        free(bits);
    } else {
        uint32_t *labels = malloc(idx->count * sizeof *labels);
        if (!labels)
            return -ENOMEM;
        for (uint64_t i = 0; i < idx->count; i++)
            labels[i] = idx->entries[i].label;
        qsort(labels, idx->count, sizeof *labels, cmp_u32);
        for (uint64_t i = 0; i < idx->count; i++)
            distinct += i == 0 || labels[i] != labels[i - 1];
        free(labels);
    }
    idx->empty_classes = (uint32_t)(idx->classes - distinct);
    return 0;
}

void
tsock__index_log_empty_classes(const struct tsock__index *idx)
{
    if (!idx->empty_classes)
        return;
    if (idx->source == TSOCK__INDEX_FOLDER) {
        uint32_t logged = 0;
        uint64_t at = 0;
        for (uint32_t c = 0; c < idx->classes && logged < TSOCK__INDEX_LOG_EXAMPLES; c++) {
            while (at < idx->count && idx->entries[at].label < c)
                at++;
            if (at == idx->count || idx->entries[at].label != c) {
                tsock__log(TSOCK_LOG_WARN, "index: class %u (%s) has no usable file", c,
                           idx->pool + idx->class_names[c]);
                logged++;
            }
        }
    }
    tsock__log(TSOCK_LOG_WARN,
               "index: %u of %u classes have no usable file (their labels stay reserved)",
               idx->empty_classes, idx->classes);
}
int
tsock__index_remove(struct tsock__index *idx, const uint8_t *drop)
{
    uint64_t kept = 0, bytes = 0, removed;

    if (!idx || !drop)
        return -EINVAL;
    for (uint64_t i = 0; i < idx->count; i++) {
        if (drop[i])
            continue;
        if (idx->offsets) {
            idx->offsets[kept] = idx->offsets[i];
            idx->shard[kept] = idx->shard[i];
        }
        idx->entries[kept++] = idx->entries[i];
        bytes += idx->entries[i].size;
    }
    removed = idx->count - kept;
    /* The dropped paths stay in the pool: compacting it would cost a copy of the whole pool
     * for a few bytes per bad file. */
    idx->count = kept;
    idx->total_bytes = bytes;
    idx->not_image += removed;
    int r = tsock__index_count_empty_classes(idx);
    if (r != 0)
        return r;
    if (removed)
        tsock__index_log_empty_classes(idx);
    return (int)(removed > INT32_MAX ? INT32_MAX : removed);
}

/* ---------------------------------------------------------------------------------------- */
/* Accessors                                                                                 */
/* ---------------------------------------------------------------------------------------- */

const char *
tsock__index_path(const struct tsock__index *idx, uint64_t i)
{
    return idx && i < idx->count ? idx->pool + idx->entries[i].path : NULL;
}

const char *
tsock__index_shard_path(const struct tsock__index *idx, uint64_t i)
{
    if (!idx || i >= idx->count || !idx->shard)
        return NULL;
    return idx->pool + idx->watch[idx->shard[i]].path;
}

uint64_t
tsock__index_offset(const struct tsock__index *idx, uint64_t i)
{
    return idx && idx->offsets && i < idx->count ? idx->offsets[i] : 0;
}

const char *
tsock__index_describe(const struct tsock__index *idx, uint64_t i, char *buf, size_t size)
{
    const char *shard = tsock__index_shard_path(idx, i);
    const char *path = tsock__index_path(idx, i);
    const char *root = idx ? idx->root : "";
    const char *sep = path && path[0] != '/' ? "/" : "";
    if (shard)
        snprintf(buf, size, "%s%s%s offset %llu key %s", shard[0] == '/' ? "" : root,
                 shard[0] == '/' ? "" : "/", shard, (unsigned long long)idx->offsets[i], path);
    else
        snprintf(buf, size, "%s%s%s", path && path[0] == '/' ? "" : root,
                 path && path[0] == '/' ? "" : sep, path ? path : "?");
    return buf;
}

const char *
tsock__index_class_name(const struct tsock__index *idx, uint32_t label)
{
    if (!idx || !idx->class_names || label >= idx->classes)
        return NULL;
    return idx->pool + idx->class_names[label];
}

size_t
tsock__index_memory(const struct tsock__index *idx)
{
    if (!idx)
        return 0;
    return sizeof *idx + (size_t)idx->count * sizeof *idx->entries + (size_t)idx->pool_size +
           (idx->class_names ? (size_t)idx->classes * sizeof *idx->class_names : 0) +
           (size_t)idx->watch_count * sizeof *idx->watch +
           (idx->source_path ? strlen(idx->source_path) + 1 : 0) +
           (idx->root ? strlen(idx->root) + 1 : 0) +
           (idx->offsets ? (size_t)idx->count * (sizeof *idx->offsets + sizeof *idx->shard) : 0) +
           (idx->options ? strlen(idx->options) + 1 : 0);
}

void
tsock__index_destroy(struct tsock__index *idx)
{
    if (!idx)
        return;
    free(idx->source_path);
    free(idx->root);
    free(idx->entries);
    free(idx->class_names);
    free(idx->pool);
    free(idx->watch);
    free(idx->offsets);
    free(idx->shard);
    free(idx->options);
    free(idx);
}
