/* The WebDataset scan (see tsock__index_scan_shards in index.h): SPEC resolved to its shards
 * (shards.c), each shard mapped and its headers parsed (tar.c) on the core/ thread pool, one
 * shard per item, then the shards' samples merged in shard order.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/array.h"
#include "core/core.h"
#include "core/file.h"
#include "core/parallel.h"
#include "core/strpool.h"
#include "dataset/index_int.h"
#include "dataset/shards.h"
#include "dataset/tar.h"

/* Rejected samples logged one by one per shard before only counting. */
#define LOG_PER_SHARD 20

struct shard_sample {
    uint64_t key; /* offset in the shard's key pool */
    uint64_t offset;
    uint32_t size, label;
};

/* One shard's scan. */
struct shard_scan {
    const char *path; /* as the index keeps it */
    struct stat st;
    int err; /* opening or mapping it failed (fails the scan), or -ENOMEM */
    struct tsock__strpool keys;
    struct shard_sample *samples;
    size_t count, cap;
    uint64_t bad;
};

struct shards_ctx {
    const char *root;
    int root_fd;
    const struct tsock__shard_options *opt;
    struct shard_scan *shards;
    const atomic_int *cancel;
};

struct cb_state {
    const struct shards_ctx *ctx;
    struct shard_scan *ss;
};

static int
on_sample(void *arg, const struct tsock__tar_sample *t)
{
    struct cb_state *cs = arg;
    struct shard_scan *ss = cs->ss;
    char key[TSOCK__TAR_MAX_PATH + 1];
    memcpy(key, t->key, t->key_len);
    key[t->key_len] = '\0';
    if (memchr(t->key, '\0', t->key_len) || t->key_len == 0) {
        ss->bad++;
        tsock__log(TSOCK_LOG_WARN,
                   "index: %s/%s offset %llu: a key with a NUL byte or empty; "
                   "the sample is left out",
                   cs->ctx->root, ss->path, (unsigned long long)t->header);
        return 0;
    }
    int64_t off = tsock__strpool_add3(&ss->keys, key, NULL, NULL);
    if (off < 0 ||
        tsock__array_grow((void **)&ss->samples, &ss->cap, ss->count, sizeof *ss->samples) != 0)
        return -ENOMEM;
    ss->samples[ss->count++] = (struct shard_sample){
        .key = (uint64_t)off, .offset = t->offset, .size = t->size, .label = t->label};
    return 0;
}

static void
on_problem(void *arg, int problem, uint64_t offset, const char *key, size_t key_len)
{
    struct cb_state *cs = arg;
    struct shard_scan *ss = cs->ss;
    if (ss->bad++ < LOG_PER_SHARD)
        tsock__log(TSOCK_LOG_WARN, "index: %s%s%s offset %llu key '%.*s': %s%s",
                   ss->path[0] == '/' ? "" : cs->ctx->root, ss->path[0] == '/' ? "" : "/", ss->path,
                   (unsigned long long)offset, (int)(key_len > 200 ? 200 : key_len), key,
                   tsock__tar_problem_text(problem),
                   /* the problems that end a shard say so themselves */
                   problem < TSOCK__TAR_NO_IMAGE ? "" : "; the sample is left out");
    else if (ss->bad == LOG_PER_SHARD + 1)
        tsock__log(TSOCK_LOG_WARN, "index: %s: more rejected samples; counting without logging",
                   ss->path);
}

static void
scan_shard(void *arg, size_t i, char *scratch)
{
    (void)scratch;
    struct shards_ctx *ctx = arg;
    struct shard_scan *ss = &ctx->shards[i];
    if (ctx->cancel && atomic_load(ctx->cancel))
        return;
    int fd = openat(ctx->root_fd, ss->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        ss->err = -errno;
        return;
    }
    if (fstat(fd, &ss->st) != 0 || !S_ISREG(ss->st.st_mode)) {
        ss->err = S_ISREG(ss->st.st_mode) ? -errno : -EINVAL;
        close(fd);
        return;
    }
    size_t size = (size_t)ss->st.st_size;
    void *map = size ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (size && map == MAP_FAILED) {
        ss->err = -errno;
        return;
    }
    struct cb_state cs = {ctx, ss};
    struct tsock__tar_callbacks cb = {.sample = on_sample,
                                      .problem = on_problem,
                                      .arg = &cs,
                                      .label_key = ctx->opt ? ctx->opt->label_key : NULL};
    int64_t r = size ? tsock__tar_scan(map, size, &cb) : 0;
    if (size)
        munmap(map, size);
    if (r < 0)
        ss->err = (int)r;
}

/* Builds the index from the shards' scans, in shard order. */
static int
merge(struct tsock__index *idx, struct shard_scan *ss, uint32_t n)
{
    uint64_t count = 0, pool = 1;
    for (uint32_t s = 0; s < n; s++) {
        count += ss[s].count;
        pool += strlen(ss[s].path) + 1 + ss[s].keys.len;
        idx->bad_members += ss[s].bad;
    }
    if (count > TSOCK__INDEX_MAX_SAMPLES)
        return -EOVERFLOW;
    idx->count = count;
    idx->pool_size = pool;
    idx->watch_count = n;
    idx->entries = malloc((count ? count : 1) * sizeof *idx->entries);
    idx->offsets = malloc((count ? count : 1) * sizeof *idx->offsets);
    idx->shard = malloc((count ? count : 1) * sizeof *idx->shard);
    idx->pool = malloc(pool);
    idx->watch = malloc(n * sizeof *idx->watch);
    if (!idx->entries || !idx->offsets || !idx->shard || !idx->pool || !idx->watch)
        return -ENOMEM;
    idx->pool[0] = '\0';
    uint64_t at = 1, e = 0, max_label = 0;
    for (uint32_t s = 0; s < n; s++) {
        size_t len = strlen(ss[s].path) + 1;
        memcpy(idx->pool + at, ss[s].path, len);
        idx->watch[s] = (struct tsock__index_watch){.path = at,
                                                    .ino = (uint64_t)ss[s].st.st_ino,
                                                    .size = (uint64_t)ss[s].st.st_size,
                                                    .mtime_ns = tsock__stat_mtime_ns(&ss[s].st)};
        at += len;
        uint64_t keys_at = at;
        if (ss[s].keys.len)
            memcpy(idx->pool + at, ss[s].keys.p, ss[s].keys.len);
        at += ss[s].keys.len;
        for (size_t k = 0; k < ss[s].count; k++, e++) {
            const struct shard_sample *t = &ss[s].samples[k];
            idx->entries[e] = (struct tsock__index_entry){
                .path = keys_at + t->key, .size = t->size, .label = t->label};
            idx->offsets[e] = t->offset;
            idx->shard[e] = s;
            idx->total_bytes += t->size;
            if (t->label > max_label)
                max_label = t->label;
        }
    }
    idx->classes = count ? (uint32_t)(max_label + 1) : 0;
    return tsock__index_count_empty_classes(idx);
}

static char *
options_string(const struct tsock__shard_options *opt)
{
    char buf[2 * TSOCK__INDEX_MAX_PATH];
    snprintf(buf, sizeof buf, "split=%s;label_key=%s", opt && opt->split ? opt->split : "",
             opt && opt->label_key ? opt->label_key : "");
    return strdup(buf);
}

int
tsock__index_scan_shards(const char *spec, const struct tsock__shard_options *opt, int threads,
                         const atomic_int *cancel, struct tsock__index **out)
{
    struct tsock__shard_list list;
    struct tsock__index *idx = NULL;
    struct shard_scan *ss = NULL;
    int64_t start = tsock__realtime_ns();
    uint64_t t0 = tsock__now_ns();
    int root_fd = -1;

    if (!spec || !out)
        return -EINVAL;
    *out = NULL;
    int r = tsock__shards_resolve(spec, opt ? opt->split : NULL, &list);
    if (r != 0)
        return r;
    idx = calloc(1, sizeof *idx);
    ss = calloc(list.count, sizeof *ss);
    if (!idx || !ss || !(idx->source_path = strdup(spec)) || !(idx->root = strdup(list.root)) ||
        !(idx->options = options_string(opt))) {
        r = -ENOMEM;
        goto out;
    }
    idx->source = TSOCK__INDEX_SHARDS;
    idx->scan_time_ns = start;
    root_fd = open(list.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        r = -errno;
        tsock__log(TSOCK_LOG_ERROR, "index: cannot open the shards' directory %s: %s", list.root,
                   strerror(-r));
        goto out;
    }
    for (uint32_t s = 0; s < list.count; s++)
        ss[s].path = list.paths[s];
    struct shards_ctx ctx = {
        .root = list.root, .root_fd = root_fd, .opt = opt, .shards = ss, .cancel = cancel};
    r = tsock__parallel_for(tsock__parallel_threads(threads), list.count, 64, scan_shard, &ctx);
    if (r == 0 && cancel && atomic_load(cancel))
        r = TSOCK_E_CANCELLED;
    for (uint32_t s = 0; r == 0 && s < list.count; s++) {
        if (ss[s].err == -ENOMEM) {
            r = -ENOMEM;
        } else if (ss[s].err) {
            r = ss[s].err;
            tsock__log(TSOCK_LOG_ERROR, "index: cannot open shard %s%s%s: %s",
                       ss[s].path[0] == '/' ? "" : list.root, ss[s].path[0] == '/' ? "" : "/",
                       ss[s].path, r == -EINVAL ? "not a regular file" : strerror(-r));
        } else if (ss[s].count == 0) {
            tsock__log(TSOCK_LOG_WARN, "index: shard %s has no usable sample", ss[s].path);
        }
    }
    if (r == 0)
        r = merge(idx, ss, list.count);
    if (r == 0 && idx->count == 0) {
        tsock__log(TSOCK_LOG_ERROR, "index: %s: no usable sample in %u shard%s", spec, list.count,
                   list.count == 1 ? "" : "s");
        r = -ENOENT;
    }
    if (r == 0) {
        tsock__index_log_empty_classes(idx);
        if (idx->bad_members)
            tsock__log(TSOCK_LOG_WARN, "index: %s: %llu sample%s rejected (see above)", spec,
                       (unsigned long long)idx->bad_members, idx->bad_members == 1 ? "" : "s");
        if (list.expected >= 0 && (uint64_t)list.expected != idx->count + idx->bad_members)
            tsock__log(TSOCK_LOG_WARN,
                       "index: %s says the split has %lld samples; the shards "
                       "hold %llu",
                       list.info, (long long)list.expected,
                       (unsigned long long)(idx->count + idx->bad_members));
        tsock__log(TSOCK_LOG_INFO, "index: %s: %llu samples in %u shards, %u classes, in %.2f s",
                   spec, (unsigned long long)idx->count, list.count, idx->classes,
                   (double)(tsock__now_ns() - t0) / 1e9);
    }
out:
    if (root_fd >= 0)
        close(root_fd);
    for (uint32_t s = 0; ss && s < list.count; s++) {
        free(ss[s].keys.p);
        free(ss[s].samples);
    }
    free(ss);
    tsock__shards_free(&list);
    if (r == 0)
        *out = idx;
    else
        tsock__index_destroy(idx);
    return r;
}

/* Whether a cache built from the same SPEC still names the shards SPEC names now. */
int
tsock__index_shards_match(const struct tsock__index *idx, const char *spec,
                          const struct tsock__shard_options *opt)
{
    struct tsock__shard_list list;
    char *want = options_string(opt);
    int same = want && idx->options && strcmp(want, idx->options) == 0;
    free(want);
    if (!same || tsock__shards_resolve(spec, opt ? opt->split : NULL, &list) != 0)
        return 0;
    same = list.count == idx->watch_count && strcmp(list.root, idx->root) == 0;
    for (uint32_t s = 0; same && s < list.count; s++)
        same = strcmp(list.paths[s], idx->pool + idx->watch[s].path) == 0;
    tsock__shards_free(&list);
    return same;
}
