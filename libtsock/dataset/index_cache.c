/* The index cache codec (see index_cache.h): the bytes of the cache file, encoded from and
 * decoded into an index. Pure: no I/O, no global state; the decoder takes untrusted bytes
 * and is fuzzed by tests/fuzz/fuzz_index.c.
 *
 * Cache file format, version 2. All integers little-endian; no padding anywhere.
 *
 *   offset  size  field
 *        0     8  magic "TSOCKIDX"
 *        8     4  version (2)
 *       12     4  source (0 folder, 1 list, 2 shards)
 *       16     8  scan_time_ns (int64, CLOCK_REALTIME at the start of the scan)
 *       24     4  classes
 *       28     4  watch_count (folder: >= 1, the root first; list: 1, the list file)
 *       32     8  count (samples, <= 2^32)
 *       40     8  pool_size (>= 1; the pool's last byte is NUL)
 *       48     8  total_bytes (sum of the entries' sizes)
 *       56     8  empty       \
 *       64     8  unreadable   > files left out, by reason
 *       72     8  too_large   /
 *       80     4  source_len (1..TSOCK__INDEX_MAX_PATH; the source path, no NUL)
 *       84     4  not_image (files left out by the header check; saturates at 2^32-1)
 *       88        source path bytes
 *                 folder only: classes x u64 pool offsets of the class names (sorted, unique)
 *                 watch_count x { u64 path, u64 ino, u64 size, i64 mtime_ns }
 *                 count x { u64 path, u32 size (>= 1), u32 label (< classes) }
 *                 shards only: u32 root_len, root bytes (1..TSOCK__INDEX_MAX_PATH, no NUL),
 *                              u32 options_len, options bytes (0..TSOCK__INDEX_MAX_PATH),
 *                              count x { u64 offset, u32 shard (< watch_count) },
 *                              u64 bad_members
 *                 pool_size bytes of NUL-terminated strings
 *                 u64 checksum of every byte before it (see checksum64)
 *
 * The file must be exactly this long. Folder entries must be grouped by label in increasing
 * order, and each path must start with its class's name and a '/', with no empty, "." or ".."
 * component; list paths only need to be non-empty. Shards: the watches are the shards (paths
non-empty), the entries' paths their keys, and a sample's shard never decreases along the ids.
Decoding copies out of the buffer, so the
 * caller may free it at once.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/file.h"
#include "dataset/index_cache.h"
#include "dataset/index_int.h"

#define CACHE_MAGIC "TSOCKIDX"
#define CACHE_VERSION 2u
#define CACHE_HEADER 88u
#define CACHE_WATCH_BYTES 32u
#define CACHE_ENTRY_BYTES 16u
#define CACHE_MEMBER_BYTES 12u

static void
put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void
put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t
get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static uint64_t
rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* A 64-bit checksum that detects corruption (not tampering) at memory speed: four
 * independent lanes of XXH64's round over little-endian 8-byte words, then the tail bytes and
 * the length, finished with splitmix64. Part of the file format. */
static uint64_t
checksum64(const uint8_t *p, size_t n)
{
    const uint64_t p1 = 0x9E3779B185EBCA87u, p2 = 0xC2B2AE3D27D4EB4Fu;
    uint64_t lane[4] = {p1 + p2, p2, 0, 0u - p1};
    size_t i = 0;

    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            lane[k] = rotl64(lane[k] + get64(p + i + 8 * k) * p2, 31) * p1;
    uint64_t h =
        rotl64(lane[0], 1) + rotl64(lane[1], 7) + rotl64(lane[2], 12) + rotl64(lane[3], 18);
    for (; i + 8 <= n; i += 8)
        h = tsock__mix64(h ^ get64(p + i));
    for (; i < n; i++)
        h = tsock__mix64(h ^ p[i]);
    return tsock__mix64(h ^ (uint64_t)n);
}

static uint8_t *
encode_shards(const struct tsock__index *idx, uint8_t *p)
{
    size_t root_len = strlen(idx->root), opt_len = strlen(idx->options);
    put32(p, (uint32_t)root_len);
    memcpy(p + 4, idx->root, root_len);
    p += 4 + root_len;
    put32(p, (uint32_t)opt_len);
    memcpy(p + 4, idx->options, opt_len);
    p += 4 + opt_len;
    for (uint64_t i = 0; i < idx->count; i++, p += CACHE_MEMBER_BYTES) {
        put64(p, idx->offsets[i]);
        put32(p + 8, idx->shard[i]);
    }
    put64(p, idx->bad_members);
    return p + 8;
}

/* Reads the shards section at *pp, of `avail` bytes at most (the rest of the file before the
 * pool). Returns 0 and advances *pp, -EBADMSG, -ENOMEM. */
static int
decode_shards(struct tsock__index *idx, const uint8_t **pp, uint64_t avail)
{
    const uint8_t *p = *pp;
    if (avail < 4)
        return -EBADMSG;
    uint32_t root_len = get32(p);
    if (root_len == 0 || root_len > TSOCK__INDEX_MAX_PATH || avail - 4 < (uint64_t)root_len + 4 ||
        memchr(p + 4, '\0', root_len))
        return -EBADMSG;
    if (!(idx->root = strndup((const char *)p + 4, root_len)))
        return -ENOMEM;
    avail -= 4 + (uint64_t)root_len;
    p += 4 + root_len;
    uint32_t opt_len = get32(p);
    if (opt_len > TSOCK__INDEX_MAX_PATH || avail - 4 < opt_len || memchr(p + 4, '\0', opt_len))
        return -EBADMSG;
    if (!(idx->options = strndup((const char *)p + 4, opt_len)))
        return -ENOMEM;
    avail -= 4 + (uint64_t)opt_len;
    p += 4 + opt_len;
    if (avail != idx->count * CACHE_MEMBER_BYTES + 8)
        return -EBADMSG;
    idx->offsets = malloc(idx->count ? (size_t)idx->count * sizeof *idx->offsets : 1);
    idx->shard = malloc(idx->count ? (size_t)idx->count * sizeof *idx->shard : 1);
    if (!idx->offsets || !idx->shard)
        return -ENOMEM;
    for (uint64_t i = 0; i < idx->count; i++, p += CACHE_MEMBER_BYTES) {
        idx->offsets[i] = get64(p);
        idx->shard[i] = get32(p + 8);
        if (idx->shard[i] >= idx->watch_count || (i > 0 && idx->shard[i] < idx->shard[i - 1]) ||
            idx->offsets[i] > idx->watch[idx->shard[i]].size ||
            idx->entries[i].size > idx->watch[idx->shard[i]].size - idx->offsets[i])
            return -EBADMSG;
    }
    idx->bad_members = get64(p);
    *pp = p + 8;
    return 0;
}

int
tsock__index_encode(const struct tsock__index *idx, uint8_t **out, size_t *size)
{
    uint64_t total;
    size_t src_len;

    if (!idx || !out || !size || !idx->source_path)
        return -EINVAL;
    src_len = strlen(idx->source_path);
    uint64_t names = idx->source == TSOCK__INDEX_FOLDER ? (uint64_t)idx->classes * 8 : 0;
    int shards = idx->source == TSOCK__INDEX_SHARDS;
    if (shards && (!idx->root || !idx->options || !idx->offsets || !idx->shard))
        return -EINVAL;
    uint64_t shard_bytes = shards ? 4 + strlen(idx->root) + 4 + strlen(idx->options) +
                                        idx->count * CACHE_MEMBER_BYTES + 8
                                  : 0;
    total = CACHE_HEADER + src_len + names + (uint64_t)idx->watch_count * CACHE_WATCH_BYTES +
            idx->count * CACHE_ENTRY_BYTES + shard_bytes;
    if (idx->count > TSOCK__INDEX_MAX_SAMPLES || idx->pool_size > SIZE_MAX - total - 8)
        return -EOVERFLOW;
    total += idx->pool_size + 8;
    if (total > SIZE_MAX)
        return -EOVERFLOW;
    uint8_t *b = malloc((size_t)total), *p = b;
    if (!b)
        return -ENOMEM;

    memcpy(p, CACHE_MAGIC, 8);
    put32(p + 8, CACHE_VERSION);
    put32(p + 12, (uint32_t)idx->source);
    put64(p + 16, (uint64_t)idx->scan_time_ns);
    put32(p + 24, idx->classes);
    put32(p + 28, idx->watch_count);
    put64(p + 32, idx->count);
    put64(p + 40, idx->pool_size);
    put64(p + 48, idx->total_bytes);
    put64(p + 56, idx->empty);
    put64(p + 64, idx->unreadable);
    put64(p + 72, idx->too_large);
    put32(p + 80, (uint32_t)src_len);
    put32(p + 84, idx->not_image > UINT32_MAX ? UINT32_MAX : (uint32_t)idx->not_image);
    p += CACHE_HEADER;
    memcpy(p, idx->source_path, src_len);
    p += src_len;
    if (idx->source == TSOCK__INDEX_FOLDER)
        for (uint32_t c = 0; c < idx->classes; c++, p += 8)
            put64(p, idx->class_names[c]);
    for (uint32_t i = 0; i < idx->watch_count; i++, p += CACHE_WATCH_BYTES) {
        put64(p, idx->watch[i].path);
        put64(p + 8, idx->watch[i].ino);
        put64(p + 16, idx->watch[i].size);
        put64(p + 24, (uint64_t)idx->watch[i].mtime_ns);
    }
    for (uint64_t i = 0; i < idx->count; i++, p += CACHE_ENTRY_BYTES) {
        put64(p, idx->entries[i].path);
        put32(p + 8, idx->entries[i].size);
        put32(p + 12, idx->entries[i].label);
    }
    if (shards)
        p = encode_shards(idx, p);
    memcpy(p, idx->pool, idx->pool_size);
    p += idx->pool_size;
    put64(p, checksum64(b, (size_t)(p - b)));
    *out = b;
    *size = (size_t)total;
    return 0;
}

/* Whether s is a relative path of non-empty components, none "." or "..". */
static int
is_clean_relative(const char *s)
{
    if (!s[0] || s[0] == '/')
        return 0;
    for (const char *c = s;;) {
        const char *slash = strchr(c, '/');
        size_t n = slash ? (size_t)(slash - c) : strlen(c);
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return 0;
        if (!slash)
            return 1;
        c = slash + 1;
    }
}

int
tsock__index_decode(const uint8_t *data, size_t size, int verify_checksum,
                    struct tsock__index **out)
{
    struct tsock__index *idx = NULL;
    const uint8_t *p;
    int r = -EBADMSG;

    if (!out)
        return -EINVAL;
    *out = NULL;
    if (!data || size < CACHE_HEADER + 8 || memcmp(data, CACHE_MAGIC, 8) != 0 ||
        get32(data + 8) != CACHE_VERSION)
        return -EBADMSG;
    uint32_t source = get32(data + 12), classes = get32(data + 24), nwatch = get32(data + 28);
    uint64_t count = get64(data + 32), pool_size = get64(data + 40);
    uint32_t src_len = get32(data + 80);
    if (source > TSOCK__INDEX_SHARDS || src_len == 0 || src_len > TSOCK__INDEX_MAX_PATH ||
        count > TSOCK__INDEX_MAX_SAMPLES || nwatch == 0 ||
        (source == TSOCK__INDEX_LIST && nwatch != 1) || nwatch > size ||
        (source == TSOCK__INDEX_FOLDER && classes == 0) || pool_size == 0 || pool_size > size)
        return -EBADMSG;
    /* Every term is bounded (2^32 x 32 at most), so the sum cannot overflow 64 bits. */
    uint64_t names = source == TSOCK__INDEX_FOLDER ? (uint64_t)classes * 8 : 0;
    uint64_t want = (uint64_t)CACHE_HEADER + src_len + names +
                    (uint64_t)nwatch * CACHE_WATCH_BYTES + count * CACHE_ENTRY_BYTES + pool_size +
                    8;
    /* Shards carry a section of variable length before the pool: at least its fixed part. */
    if (source == TSOCK__INDEX_SHARDS ? want + 16 + count * CACHE_MEMBER_BYTES > size
                                      : want != size)
        return -EBADMSG;
    if (verify_checksum && get64(data + size - 8) != checksum64(data, size - 8))
        return -EBADMSG;
    if (memchr(data + CACHE_HEADER, '\0', src_len))
        return -EBADMSG;
    const uint8_t *pool_bytes = data + size - 8 - pool_size;
    if (pool_bytes[pool_size - 1] != '\0')
        return -EBADMSG;

    idx = calloc(1, sizeof *idx);
    if (!idx)
        return -ENOMEM;
    idx->source = (int)source;
    idx->scan_time_ns = (int64_t)get64(data + 16);
    idx->classes = classes;
    idx->watch_count = nwatch;
    idx->count = count;
    idx->pool_size = pool_size;
    idx->total_bytes = get64(data + 48);
    idx->empty = get64(data + 56);
    idx->unreadable = get64(data + 64);
    idx->too_large = get64(data + 72);
    idx->not_image = get32(data + 84);
    idx->source_path = strndup((const char *)data + CACHE_HEADER, src_len);
    idx->pool = malloc((size_t)pool_size);
    idx->entries = malloc(count ? (size_t)count * sizeof *idx->entries : 1);
    idx->watch = malloc((size_t)nwatch * sizeof *idx->watch);
    if (source == TSOCK__INDEX_FOLDER)
        idx->class_names = malloc((size_t)classes * sizeof *idx->class_names);
    if (!idx->source_path || !idx->pool || !idx->entries || !idx->watch ||
        (source == TSOCK__INDEX_FOLDER && !idx->class_names))
        goto nomem;
    if (source != TSOCK__INDEX_SHARDS) {
        idx->root = source == TSOCK__INDEX_FOLDER ? strdup(idx->source_path)
                                                  : tsock__dir_of(idx->source_path);
        if (!idx->root)
            goto nomem;
    }
    memcpy(idx->pool, pool_bytes, (size_t)pool_size);
    const char *pool = idx->pool;

    p = data + CACHE_HEADER + src_len;
    for (uint32_t c = 0; c < idx->classes && source == TSOCK__INDEX_FOLDER; c++, p += 8) {
        uint64_t off = get64(p);
        if (off >= pool_size)
            goto bad;
        const char *name = pool + off;
        if (!name[0] || strchr(name, '/') || tsock__index_is_dot(name))
            goto bad;
        if (c > 0 && tsock__index_name_compare(pool + idx->class_names[c - 1], name) >= 0)
            goto bad;
        idx->class_names[c] = off;
    }
    for (uint32_t i = 0; i < nwatch; i++, p += CACHE_WATCH_BYTES) {
        struct tsock__index_watch *w = &idx->watch[i];
        w->path = get64(p);
        w->ino = get64(p + 8);
        w->size = get64(p + 16);
        w->mtime_ns = (int64_t)get64(p + 24);
        if (w->path >= pool_size)
            goto bad;
        const char *s = pool + w->path;
        /* The root comes first; the rest lie inside it. A list's one watch is the list file,
         * which lies in the root directory itself. */
        if (source == TSOCK__INDEX_SHARDS   ? s[0] == '\0'
            : source == TSOCK__INDEX_FOLDER ? (i == 0 ? s[0] != '\0' : !is_clean_relative(s))
                                            : (!is_clean_relative(s) || strchr(s, '/')))
            goto bad;
    }
    uint64_t total = 0;
    for (uint64_t i = 0; i < count; i++, p += CACHE_ENTRY_BYTES) {
        struct tsock__index_entry *e = &idx->entries[i];
        e->path = get64(p);
        e->size = get32(p + 8);
        e->label = get32(p + 12);
        if (e->path >= pool_size || e->size == 0 || e->label >= classes)
            goto bad;
        const char *s = pool + e->path;
        if (!s[0])
            goto bad;
        if (source == TSOCK__INDEX_FOLDER) {
            const char *cn = pool + idx->class_names[e->label];
            size_t n = strlen(cn);
            if ((i > 0 && e->label < idx->entries[i - 1].label) || strncmp(s, cn, n) != 0 ||
                s[n] != '/' || !is_clean_relative(s))
                goto bad;
        }
        total += e->size;
    }
    if (total != idx->total_bytes)
        goto bad;
    if (source == TSOCK__INDEX_SHARDS) {
        int e = decode_shards(idx, &p, (uint64_t)(pool_bytes - p));
        if (e == -ENOMEM)
            goto nomem;
        if (e != 0)
            goto bad;
    }
    if (tsock__index_count_empty_classes(idx) != 0)
        goto nomem;
    *out = idx;
    return 0;
nomem:
    r = -ENOMEM;
bad:
    tsock__index_destroy(idx);
    return r;
}
