/* The list-file scan (see tsock__index_scan_list in index.h): the list is read whole and
 * parsed, then the listed files are stat'ed in chunks on the core/ thread pool.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/array.h"
#include "core/core.h"
#include "core/file.h"
#include "core/parallel.h"
#include "dataset/index_int.h"

/* The longest list file read (1.28 million ImageNet lines take about 45 MB). */
#define LIST_MAX_BYTES ((size_t)1 << 32)
/* Malformed lines logged one by one before only counting. */
#define LIST_MAX_REPORTED 10

struct list_line {
    const char *path; /* NUL-terminated in place in the list buffer */
    uint32_t label;
    int status; /* -1 usable, else an enum tsock__index_reason */
    uint64_t size;
};

struct list_ctx {
    const atomic_int *cancel;
    int dir_fd;
    struct list_line *lines;
    size_t count;
};

/* fstatat's 256 lines per item, so that thread hand-off costs nothing next to the stats. */
#define LIST_CHUNK 256

static void
stat_list_chunk(void *arg, size_t chunk, char *scratch)
{
    struct list_ctx *ctx = arg;
    if (ctx->cancel && atomic_load(ctx->cancel))
        return; /* the scan is abandoned: the lines' results no longer matter */
    size_t end = (chunk + 1) * LIST_CHUNK;
    if (end > ctx->count)
        end = ctx->count;
    for (size_t i = chunk * LIST_CHUNK; i < end; i++) {
        struct list_line *l = &ctx->lines[i];
        struct stat st;
        if (fstatat(ctx->dir_fd, l->path, &st, 0) != 0 || !S_ISREG(st.st_mode))
            l->status = TSOCK__INDEX_UNREADABLE;
        else if (st.st_size == 0)
            l->status = TSOCK__INDEX_EMPTY;
        else if ((uint64_t)st.st_size > UINT32_MAX)
            l->status = TSOCK__INDEX_TOO_LARGE;
        else
            l->status = -1;
        l->size = l->status == TSOCK__INDEX_UNREADABLE ? 0 : (uint64_t)st.st_size;
    }
}

static int
is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\v' || c == '\f';
}

/* Parses one line (NUL-terminated, no '\n'). Returns 1 for a sample, 0 for a line to skip,
 * or -1 with *why set. */
static int
parse_list_line(char *s, size_t len, const char **path, uint32_t *label, const char **why)
{
    if (len && s[len - 1] == '\r')
        s[--len] = '\0';
    if (memchr(s, '\0', len)) {
        *why = "NUL byte in the line";
        return -1;
    }
    size_t b = 0;
    while (b < len && is_blank(s[b]))
        b++;
    if (b == len || s[b] == '#')
        return 0;
    size_t e = len;
    while (e > b && is_blank(s[e - 1]))
        e--;
    size_t t = e;
    while (t > b && !is_blank(s[t - 1]))
        t--;
    if (t == b) {
        *why = "expected \"path label\", found one field";
        return -1;
    }
    uint64_t v = 0;
    if (e - t > 10) {
        *why = "label out of range 0..4294967294";
        return -1;
    }
    for (size_t i = t; i < e; i++) {
        if (s[i] < '0' || s[i] > '9') {
            *why = "label is not a non-negative decimal integer";
            return -1;
        }
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > UINT32_MAX - 1) {
        *why = "label out of range 0..4294967294";
        return -1;
    }
    size_t pe = t;
    while (pe > b && is_blank(s[pe - 1]))
        pe--;
    if (pe - b > TSOCK__INDEX_MAX_PATH) {
        *why = "path too long";
        return -1;
    }
    s[pe] = '\0';
    *path = s + b;
    *label = (uint32_t)v;
    return 1;
}

int
tsock__index_scan_list(const char *list_path, int threads, struct tsock__index **out)
{
    return tsock__index_scan_list_until(list_path, threads, NULL, out);
}

int
tsock__index_scan_list_until(const char *list_path, int threads, const atomic_int *cancel,
                             struct tsock__index **out)
{
    struct tsock__index *idx = NULL;
    struct list_line *lines = NULL;
    size_t nlines = 0, cap_lines = 0, bad = 0, size = 0;
    char *text = NULL;
    int r, fd, dir_fd = -1;
    struct stat st;
    int64_t start = tsock__realtime_ns();
    uint64_t t0 = tsock__now_ns();

    if (!list_path || !list_path[0] || !out || strlen(list_path) > TSOCK__INDEX_MAX_PATH)
        return -EINVAL;
    *out = NULL;
    fd = open(list_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == EINTR && cancel && atomic_load(cancel))
        return TSOCK_E_CANCELLED; /* the signal that cancelled us cut a hung open short */
    if (fd < 0) {
        r = -errno;
        tsock__log(TSOCK_LOG_ERROR, "index: cannot open list %s: %s", list_path, strerror(-r));
        return r;
    }
    r = fstat(fd, &st) == 0 ? tsock__read_whole(fd, LIST_MAX_BYTES, &text, &size) : -errno;
    close(fd);
    if (r != 0) {
        tsock__log(TSOCK_LOG_ERROR, "index: cannot read list %s: %s", list_path, strerror(-r));
        return r;
    }

    uint64_t max_label = 0;
    size_t lineno = 0;
    for (char *s = text; s < text + size;) {
        char *nl = memchr(s, '\n', (size_t)(text + size - s));
        size_t len = nl ? (size_t)(nl - s) : (size_t)(text + size - s);
        const char *why = NULL, *path;
        uint32_t label;
        lineno++;
        s[len] = '\0'; /* the '\n', or the buffer's own terminating NUL */
        int k = parse_list_line(s, len, &path, &label, &why);
        s += len + 1;
        if (k < 0) {
            if (bad++ < LIST_MAX_REPORTED)
                tsock__log(TSOCK_LOG_ERROR, "index: %s:%zu: %s", list_path, lineno, why);
            continue;
        }
        if (k == 0 || bad)
            continue;
        if (tsock__array_grow((void **)&lines, &cap_lines, nlines, sizeof *lines) != 0) {
            r = -ENOMEM;
            goto out;
        }
        lines[nlines++] = (struct list_line){.path = path, .label = label};
        if (label > max_label)
            max_label = label;
    }
    if (bad) {
        tsock__log(TSOCK_LOG_ERROR, "index: %s: %zu malformed line%s; the list is rejected",
                   list_path, bad, bad == 1 ? "" : "s");
        r = -EINVAL;
        goto out;
    }
    if (nlines > TSOCK__INDEX_MAX_SAMPLES) {
        r = -EOVERFLOW;
        goto out;
    }

    idx = calloc(1, sizeof *idx);
    if (!idx || !(idx->source_path = strdup(list_path)) ||
        !(idx->root = tsock__dir_of(list_path))) {
        r = -ENOMEM;
        goto out;
    }
    idx->source = TSOCK__INDEX_LIST;
    idx->scan_time_ns = start;
    idx->classes = nlines ? (uint32_t)(max_label + 1) : 0;
    dir_fd = open(idx->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        r = -errno;
        goto out;
    }
    struct list_ctx ctx = {.cancel = cancel, .dir_fd = dir_fd, .lines = lines, .count = nlines};
    r = tsock__parallel_for(tsock__parallel_threads(threads),
                            (nlines + LIST_CHUNK - 1) / LIST_CHUNK, TSOCK__INDEX_DENTS_BUFFER,
                            stat_list_chunk, &ctx);
    if (r == 0 && cancel && atomic_load(cancel))
        r = TSOCK_E_CANCELLED;
    if (r != 0)
        goto out;

    /* Pool: the list file's name (its watch path, relative to root), then the samples. */
    const char *base = strrchr(list_path, '/');
    base = base ? base + 1 : list_path;
    struct tsock__index_leftout left = {0};
    uint64_t pool = strlen(base) + 1, count = 0;
    for (size_t i = 0; i < nlines; i++) {
        if (lines[i].status >= 0) {
            tsock__index_leftout_add(&left, lines[i].status, lines[i].path, NULL, NULL);
            continue;
        }
        pool += strlen(lines[i].path) + 1;
        count++;
    }
    idx->empty = left.count[TSOCK__INDEX_EMPTY];
    idx->unreadable = left.count[TSOCK__INDEX_UNREADABLE];
    idx->too_large = left.count[TSOCK__INDEX_TOO_LARGE];
    idx->count = count;
    idx->pool_size = pool;
    idx->watch_count = 1;
    idx->entries = malloc((count ? count : 1) * sizeof *idx->entries);
    idx->pool = malloc(pool);
    idx->watch = malloc(sizeof *idx->watch);
    if (!idx->entries || !idx->pool || !idx->watch) {
        tsock__index_leftout_free(&left);
        r = -ENOMEM;
        goto out;
    }
    idx->watch[0] = (struct tsock__index_watch){.path = 0,
                                                .ino = (uint64_t)st.st_ino,
                                                .size = (uint64_t)st.st_size,
                                                .mtime_ns = tsock__stat_mtime_ns(&st)};
    uint64_t at = strlen(base) + 1, e = 0;
    memcpy(idx->pool, base, at);
    for (size_t i = 0; i < nlines; i++) {
        if (lines[i].status >= 0)
            continue;
        size_t n = strlen(lines[i].path) + 1;
        memcpy(idx->pool + at, lines[i].path, n);
        idx->entries[e++] = (struct tsock__index_entry){
            .path = at, .size = (uint32_t)lines[i].size, .label = lines[i].label};
        idx->total_bytes += lines[i].size;
        at += n;
    }
    tsock__index_leftout_log(&left, 1, sizeof left, list_path);
    tsock__index_leftout_free(&left);
    if ((r = tsock__index_count_empty_classes(idx)) != 0)
        goto out;
    tsock__index_log_empty_classes(idx);
    if (count == 0) {
        tsock__log(TSOCK_LOG_ERROR, "index: no usable file in list %s", list_path);
        r = -ENOENT;
        goto out;
    }
    {
        double s = (double)(tsock__now_ns() - t0) / 1e9;
        tsock__log(TSOCK_LOG_INFO, "index: %s: %llu samples, %u classes, read in %.2f s", list_path,
                   (unsigned long long)count, idx->classes, s);
    }
out:
    if (dir_fd >= 0)
        close(dir_fd);
    free(lines);
    free(text);
    if (r == 0)
        *out = idx;
    else
        tsock__index_destroy(idx);
    return r;
}
