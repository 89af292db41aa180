/* The dataset index (see index.h): scanning, list files, and the cache file.
 *
 * Cache file format, version 2. All integers little-endian; no padding anywhere.
 *
 *   offset  size  field
 *        0     8  magic "TSOCKIDX"
 *        8     4  version (2)
 *       12     4  source (0 folder, 1 list)
 *       16     8  scan_time_ns (int64, CLOCK_REALTIME at the start of the scan)
 *       24     4  classes
 *       28     4  watch_count (folder: >= 1, the root first; list: 1, the list file)
 *       32     8  count (samples, <= 2^32)
 *       40     8  pool_size (>= 1; the pool's last byte is NUL)
 *       48     8  total_bytes (sum of the entries' sizes)
 *       56     8  empty       \
 *       64     8  unreadable   > files left out, by reason
 *       72     8  too_large   /
 *       80     4  source_len (1..TSOCK_INDEX_MAX_PATH; the source path, no NUL)
 *       84     4  not_image (files left out by the header check; saturates at 2^32-1)
 *       88        source path bytes
 *                 folder only: classes x u64 pool offsets of the class names (sorted, unique)
 *                 watch_count x { u64 path, u64 ino, u64 size, i64 mtime_ns }
 *                 count x { u64 path, u32 size (>= 1), u32 label (< classes) }
 *                 pool_size bytes of NUL-terminated strings
 *                 u64 checksum of every byte before it (see checksum64)
 *
 * The file must be exactly this long. Folder entries must be grouped by label in increasing
 * order, and each path must start with its class's name and a '/', with no empty, "." or ".."
 * component; list paths only need to be non-empty. Decoding copies out of the buffer, so the
 * caller may free it at once.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "dataset/index.h"

#define CACHE_MAGIC "TSOCKIDX"
#define CACHE_VERSION 2u
#define CACHE_HEADER 88u
#define CACHE_WATCH_BYTES 32u
#define CACHE_ENTRY_BYTES 16u
#define CACHE_MAX_SAMPLES ((uint64_t)1 << 32)

/* getdents64 reads many entries per call; 64 KiB holds about 2000 ImageNet names. */
#define DENTS_BUFFER (64 * 1024)

enum reason { R_EMPTY = 0, R_UNREADABLE = 1, R_TOO_LARGE = 2, R_COUNT = 3 };
static const char *const reason_text[R_COUNT] = {"empty file", "unreadable or not a regular file",
                                                 "file of 4 GiB or more"};

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

/* ---------------------------------------------------------------------------------------- */
/* Small containers                                                                          */
/* ---------------------------------------------------------------------------------------- */

/* A growable byte arena for NUL-terminated strings, addressed by offset (it may move). */
struct strbuf {
    char *p;
    size_t len, cap;
};

/* Appends the concatenation of up to three strings and a NUL; returns the offset or -1. */
static int64_t
strbuf_add3(struct strbuf *b, const char *s1, const char *s2, const char *s3)
{
    size_t n1 = s1 ? strlen(s1) : 0, n2 = s2 ? strlen(s2) : 0, n3 = s3 ? strlen(s3) : 0;
    size_t need = b->len + n1 + n2 + n3 + 1;

    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < need)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    int64_t off = (int64_t)b->len;
    char *d = b->p + b->len;
    if (n1)
        memcpy(d, s1, n1);
    if (n2)
        memcpy(d + n1, s2, n2);
    if (n3)
        memcpy(d + n1 + n2, s3, n3);
    d[n1 + n2 + n3] = '\0';
    b->len = need;
    return off;
}

/* Makes room for one more element in a growable array. Returns 0 or -1. */
static int
grow(void **items, size_t *cap, size_t count, size_t elem)
{
    if (count < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 64;
    void *p = realloc(*items, ncap * elem);
    if (!p)
        return -1;
    *items = p;
    *cap = ncap;
    return 0;
}

static int64_t
mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

static int64_t
realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int
default_threads(int threads)
{
    if (threads > 0)
        return threads > 256 ? 256 : threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 64 ? 64 : (int)n);
}

/* Runs fn(ctx, item, scratch) for item = 0..items-1 on up to `threads` threads, each with its
 * own DENTS_BUFFER scratch buffer. Items are handed out one by one, so the order of work
 * depends on timing but each item's result must not. Returns 0 or -ENOMEM. */
struct par {
    void (*fn)(void *ctx, size_t item, char *scratch);
    void *ctx;
    size_t items;
    atomic_size_t next;
};

static void *
par_thread(void *arg)
{
    struct par *p = arg;
    char *scratch = malloc(DENTS_BUFFER);
    if (!scratch)
        return (void *)1;
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->items)
            break;
        p->fn(p->ctx, i, scratch);
    }
    free(scratch);
    return NULL;
}

static int
parallel_for(int threads, size_t items, void (*fn)(void *, size_t, char *), void *ctx)
{
    struct par p = {.fn = fn, .ctx = ctx, .items = items};
    pthread_t tid[256];
    int started = 0, failed = 0;

    atomic_init(&p.next, 0);
    if ((size_t)threads > items)
        threads = items ? (int)items : 1;
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&tid[started], NULL, par_thread, &p) != 0)
            break; /* fewer threads is still correct */
        started++;
    }
    if (par_thread(&p) != NULL)
        failed = 1;
    for (int i = 0; i < started; i++) {
        void *ret;
        pthread_join(tid[i], &ret);
        if (ret != NULL)
            failed = 1;
    }
    /* A thread that could not get its scratch buffer did no work; if every thread failed,
     * items are left undone, which the caller sees as missing results: report it. */
    if (failed && atomic_load(&p.next) < items)
        return -ENOMEM;
    return 0;
}

/* Up to TSOCK_INDEX_LOG_EXAMPLES left-out paths per reason, kept so that the log names the
 * first ones in sample order whatever the thread timing. */
struct leftout {
    uint64_t count[R_COUNT];
    char *example[R_COUNT][TSOCK_INDEX_LOG_EXAMPLES];
    uint32_t examples[R_COUNT];
};

static void
leftout_add(struct leftout *l, int reason, const char *a, const char *b, const char *c)
{
    l->count[reason]++;
    if (l->examples[reason] < TSOCK_INDEX_LOG_EXAMPLES) {
        struct strbuf s = {0};
        if (strbuf_add3(&s, a, b, c) >= 0)
            l->example[reason][l->examples[reason]++] = s.p;
    }
}

static void
leftout_free(struct leftout *l)
{
    for (int r = 0; r < R_COUNT; r++)
        for (uint32_t i = 0; i < l->examples[r]; i++)
            free(l->example[r][i]);
}

/* Logs the first examples across parts in order, then one count line per reason. */
static void
leftout_log(struct leftout *parts, size_t nparts, size_t stride, const char *where)
{
    for (int r = 0; r < R_COUNT; r++) {
        uint64_t total = 0;
        uint32_t logged = 0;
        for (size_t i = 0; i < nparts; i++) {
            struct leftout *l = (struct leftout *)((char *)parts + i * stride);
            total += l->count[r];
            for (uint32_t k = 0; k < l->examples[r] && logged < TSOCK_INDEX_LOG_EXAMPLES; k++) {
                tsock__log(TSOCK_LOG_WARN, "index: left out (%s): %s", reason_text[r],
                           l->example[r][k]);
                logged++;
            }
        }
        if (total)
            tsock__log(TSOCK_LOG_WARN, "index: %s: left out %llu file%s (%s)", where,
                       (unsigned long long)total, total == 1 ? "" : "s", reason_text[r]);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Folder scan                                                                               */
/* ---------------------------------------------------------------------------------------- */

struct linux_dirent64 {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Reads one batch of entries; returns bytes, 0 at the end, or -errno. */
static ssize_t
read_dents(int fd, char *buf, size_t size)
{
    long n;
    do
        n = syscall(SYS_getdents64, fd, buf, size);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

static int
is_dot(const char *name)
{
    return name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'));
}

/* A directory met while walking one class. */
struct walk_dir {
    char *rel; /* relative to the class directory; "" for the class directory itself */
    dev_t dev;
    ino_t ino;
    int parent;
    int depth;
};

/* A file met while walking one class. */
struct walk_file {
    uint32_t dir;  /* index into walk_dir */
    int status;    /* -1 usable, else an enum reason */
    uint64_t name; /* offset in the names arena */
    uint64_t size;
};

/* The result of scanning one class directory. Pool offsets are class-local until merged. */
struct class_scan {
    const char *name;
    struct strbuf pool; /* "class/..." paths of files, then of directories */
    struct {
        uint64_t path;
        uint32_t size;
    } * files;
    size_t nfiles, cap_files;
    struct tsock_index_watch *watch;
    size_t nwatch, cap_watch;
    uint64_t bytes;
    struct leftout left;
    int err;
};

struct folder_ctx {
    int root_fd;
    const char *root;
    struct class_scan *classes;
};

struct sort_ctx {
    const struct walk_dir *dirs;
    const uint32_t *rank;
    const char *names;
};

static int
cmp_dir_index(const void *a, const void *b, void *arg)
{
    const struct sort_ctx *s = arg;
    return tsock__index_name_compare(s->dirs[*(const uint32_t *)a].rel,
                                     s->dirs[*(const uint32_t *)b].rel);
}

/* os.walk's tuples sort by directory path, then each directory's names sort on their own. */
static int
cmp_walk_file(const void *a, const void *b, void *arg)
{
    const struct sort_ctx *s = arg;
    const struct walk_file *x = a, *y = b;
    if (x->dir != y->dir)
        return s->rank[x->dir] < s->rank[y->dir] ? -1 : 1;
    return tsock__index_name_compare(s->names + x->name, s->names + y->name);
}

static int
add_watch(struct class_scan *cs, const char *rel, const struct stat *st)
{
    if (grow((void **)&cs->watch, &cs->cap_watch, cs->nwatch, sizeof *cs->watch) != 0)
        return -1;
    int64_t off = strbuf_add3(&cs->pool, cs->name, rel[0] ? "/" : "", rel);
    if (off < 0)
        return -1;
    cs->watch[cs->nwatch++] = (struct tsock_index_watch){
        .path = (uint64_t)off,
        .ino = (uint64_t)st->st_ino,
        .size = (uint64_t)st->st_size,
        .mtime_ns = mtime_ns(st),
    };
    return 0;
}

/* Lists one directory of a class walk: subdirectories join `dirs`, files with an image
 * extension join `files` with their fstatat result. Returns 0 or -1 (out of memory). */
static int
list_dir(struct class_scan *cs, int fd, uint32_t di, struct walk_dir **dirs, size_t *ndirs,
         size_t *cap_dirs, struct walk_file **files, size_t *nfiles, size_t *cap_files,
         struct strbuf *names, char *buf)
{
    size_t class_len = strlen(cs->name);

    for (;;) {
        ssize_t n = read_dents(fd, buf, DENTS_BUFFER);
        if (n < 0) {
            tsock__log(TSOCK_LOG_WARN, "index: cannot list %s/%s: %s", cs->name, (*dirs)[di].rel,
                       strerror((int)-n));
            return 0;
        }
        if (n == 0)
            return 0;
        for (ssize_t pos = 0; pos < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + pos);
            pos += d->d_reclen;
            const char *name = d->d_name;
            if (is_dot(name))
                continue;

            struct stat st;
            int have_st = 0, stat_err = 0, is_dir = d->d_type == DT_DIR;
            if (d->d_type == DT_LNK || d->d_type == DT_UNKNOWN) {
                /* os.walk decides with is_dir(), which follows symlinks. */
                if (fstatat(fd, name, &st, 0) == 0) {
                    have_st = 1;
                    is_dir = S_ISDIR(st.st_mode);
                } else {
                    stat_err = errno;
                }
            }
            const char *rel = (*dirs)[di].rel;
            size_t path_len = class_len + 1 + strlen(rel) + (rel[0] ? 1 : 0) + strlen(name);
            if (path_len > TSOCK_INDEX_MAX_PATH) {
                tsock__log(TSOCK_LOG_WARN, "index: skipped (path longer than %d bytes): %s/%s/%s",
                           TSOCK_INDEX_MAX_PATH, cs->name, rel, name);
                continue;
            }
            if (is_dir) {
                if ((*dirs)[di].depth + 1 > TSOCK_INDEX_MAX_DEPTH) {
                    tsock__log(TSOCK_LOG_WARN, "index: skipped (nested deeper than %d): %s/%s/%s",
                               TSOCK_INDEX_MAX_DEPTH, cs->name, rel, name);
                    continue;
                }
                if (grow((void **)dirs, cap_dirs, *ndirs, sizeof **dirs) != 0)
                    return -1;
                struct strbuf r = {0};
                if (strbuf_add3(&r, rel, rel[0] ? "/" : "", name) < 0)
                    return -1;
                (*dirs)[*ndirs] = (struct walk_dir){
                    .rel = r.p, .parent = (int)di, .depth = (*dirs)[di].depth + 1};
                (*ndirs)++;
                continue;
            }
            if (!tsock__index_has_image_extension(name))
                continue;
            if (!have_st && !stat_err) {
                if (fstatat(fd, name, &st, d->d_type == DT_REG ? AT_SYMLINK_NOFOLLOW : 0) == 0)
                    have_st = 1;
                else
                    stat_err = errno;
            }
            if (grow((void **)files, cap_files, *nfiles, sizeof **files) != 0)
                return -1;
            int64_t off = strbuf_add3(names, name, NULL, NULL);
            if (off < 0)
                return -1;
            int status = -1;
            if (!have_st || !S_ISREG(st.st_mode))
                status = R_UNREADABLE;
            else if (st.st_size == 0)
                status = R_EMPTY;
            else if ((uint64_t)st.st_size > UINT32_MAX)
                status = R_TOO_LARGE;
            (*files)[(*nfiles)++] = (struct walk_file){
                .dir = di,
                .status = status,
                .name = (uint64_t)off,
                .size = have_st ? (uint64_t)st.st_size : 0,
            };
        }
    }
}

/* Walks one class directory (parallel_for callback). */
static void
scan_class(void *arg, size_t c, char *buf)
{
    struct folder_ctx *ctx = arg;
    struct class_scan *cs = &ctx->classes[c];
    struct walk_dir *dirs = NULL;
    struct walk_file *files = NULL;
    size_t ndirs = 0, cap_dirs = 0, nfiles = 0, cap_files = 0;
    struct strbuf names = {0};
    uint32_t *order = NULL, *rank = NULL;

    int class_fd = openat(ctx->root_fd, cs->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (class_fd < 0) {
        tsock__log(TSOCK_LOG_WARN, "index: cannot open class directory %s/%s: %s", ctx->root,
                   cs->name, strerror(errno));
        return;
    }
    if (grow((void **)&dirs, &cap_dirs, 0, sizeof *dirs) != 0 || !(dirs[0].rel = strdup("")))
        goto oom;
    dirs[0].parent = -1;
    dirs[0].depth = 0;
    ndirs = 1;

    /* Breadth-first; the order of discovery does not matter since directories are sorted
     * afterwards. Each directory is stat'ed before it is listed, so a change made during or
     * after the listing moves its mtime past the recorded one. */
    for (size_t i = 0; i < ndirs; i++) {
        int fd =
            i == 0 ? class_fd : openat(class_fd, dirs[i].rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct stat st;
        if (fd < 0) {
            tsock__log(TSOCK_LOG_WARN, "index: cannot open %s/%s: %s", cs->name, dirs[i].rel,
                       strerror(errno));
            continue;
        }
        if (fstat(fd, &st) != 0) {
            tsock__log(TSOCK_LOG_WARN, "index: cannot stat %s/%s: %s", cs->name, dirs[i].rel,
                       strerror(errno));
            if (i != 0)
                close(fd);
            continue;
        }
        dirs[i].dev = st.st_dev;
        dirs[i].ino = st.st_ino;
        int cycle = 0;
        for (int p = dirs[i].parent; p >= 0 && !cycle; p = dirs[p].parent)
            cycle = dirs[p].dev == st.st_dev && dirs[p].ino == st.st_ino;
        if (cycle) {
            tsock__log(TSOCK_LOG_WARN, "index: skipped symlink loop: %s/%s", cs->name, dirs[i].rel);
            close(fd);
            continue;
        }
        int r = add_watch(cs, dirs[i].rel, &st);
        if (r == 0)
            r = list_dir(cs, fd, (uint32_t)i, &dirs, &ndirs, &cap_dirs, &files, &nfiles, &cap_files,
                         &names, buf);
        if (i != 0)
            close(fd);
        if (r != 0)
            goto oom;
    }

    order = malloc(ndirs * sizeof *order);
    rank = malloc(ndirs * sizeof *rank);
    if (!order || !rank)
        goto oom;
    for (size_t i = 0; i < ndirs; i++)
        order[i] = (uint32_t)i;
    struct sort_ctx sc = {.dirs = dirs, .rank = rank, .names = names.p};
    qsort_r(order, ndirs, sizeof *order, cmp_dir_index, &sc);
    for (size_t i = 0; i < ndirs; i++)
        rank[order[i]] = (uint32_t)i;
    if (nfiles)
        qsort_r(files, nfiles, sizeof *files, cmp_walk_file, &sc);

    for (size_t i = 0; i < nfiles; i++) {
        const char *rel = dirs[files[i].dir].rel;
        char path[TSOCK_INDEX_MAX_PATH + 1]; /* list_dir kept only paths that fit */
        snprintf(path, sizeof path, "%s/%s%s%s", cs->name, rel, rel[0] ? "/" : "",
                 names.p + files[i].name);
        if (files[i].status >= 0) {
            leftout_add(&cs->left, files[i].status, path, NULL, NULL);
            continue;
        }
        int64_t off = strbuf_add3(&cs->pool, path, NULL, NULL);
        if (off < 0 || grow((void **)&cs->files, &cs->cap_files, cs->nfiles, sizeof *cs->files))
            goto oom;
        cs->files[cs->nfiles].path = (uint64_t)off;
        cs->files[cs->nfiles].size = (uint32_t)files[i].size;
        cs->nfiles++;
        cs->bytes += files[i].size;
    }
    goto done;
oom:
    cs->err = -ENOMEM;
done:
    close(class_fd);
    for (size_t i = 0; i < ndirs; i++)
        free(dirs[i].rel);
    free(dirs);
    free(files);
    free(names.p);
    free(order);
    free(rank);
}

static int
cmp_name_ptr(const void *a, const void *b)
{
    return tsock__index_name_compare(*(const char *const *)a, *(const char *const *)b);
}

/* Labels with no sample. Folder entries are grouped by label; list labels come in any order,
 * so a bitmap (or, for a huge label range, a sorted copy) counts the distinct ones. */
static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int
count_empty_classes(struct tsock_index *idx)
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

static void
log_empty_classes(const struct tsock_index *idx)
{
    if (!idx->empty_classes)
        return;
    if (idx->source == TSOCK_INDEX_FOLDER) {
        uint32_t logged = 0;
        uint64_t at = 0;
        for (uint32_t c = 0; c < idx->classes && logged < TSOCK_INDEX_LOG_EXAMPLES; c++) {
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
tsock__index_scan_folder(const char *root, int threads, struct tsock_index **out)
{
    struct tsock_index *idx = NULL;
    struct class_scan *cls = NULL;
    char **names = NULL;
    size_t nnames = 0, cap_names = 0;
    char *buf = NULL;
    int r = 0, root_fd;
    struct stat root_st;
    int64_t start = realtime_ns();
    uint64_t t0 = tsock__now_ns();

    if (!root || !root[0] || !out || strlen(root) > TSOCK_INDEX_MAX_PATH)
        return -EINVAL;
    *out = NULL;
    root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        r = -errno;
        tsock__log(TSOCK_LOG_ERROR, "index: cannot open dataset root %s: %s", root, strerror(-r));
        return r;
    }
    if (fstat(root_fd, &root_st) != 0) {
        r = -errno;
        goto out;
    }

    /* Classes: torchvision's find_classes, every entry that is_dir() (symlinks followed). */
    buf = malloc(DENTS_BUFFER);
    if (!buf)
        goto oom;
    for (;;) {
        ssize_t n = read_dents(root_fd, buf, DENTS_BUFFER);
        if (n < 0) {
            r = (int)n;
            tsock__log(TSOCK_LOG_ERROR, "index: cannot list %s: %s", root, strerror(-r));
            goto out;
        }
        if (n == 0)
            break;
        for (ssize_t pos = 0; pos < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + pos);
            pos += d->d_reclen;
            if (is_dot(d->d_name))
                continue;
            int dir = d->d_type == DT_DIR;
            if (d->d_type == DT_LNK || d->d_type == DT_UNKNOWN) {
                struct stat st;
                dir = fstatat(root_fd, d->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
            }
            if (!dir)
                continue;
            if (grow((void **)&names, &cap_names, nnames, sizeof *names) != 0)
                goto oom;
            if (!(names[nnames] = strdup(d->d_name)))
                goto oom;
            nnames++;
        }
    }
    if (nnames == 0) {
        tsock__log(TSOCK_LOG_ERROR, "index: no class directory in %s", root);
        r = -ENOENT;
        goto out;
    }
    if (nnames > UINT32_MAX - 1) {
        r = -EOVERFLOW;
        goto out;
    }
    qsort(names, nnames, sizeof *names, cmp_name_ptr);

    cls = calloc(nnames, sizeof *cls);
    if (!cls)
        goto oom;
    for (size_t c = 0; c < nnames; c++)
        cls[c].name = names[c];
    struct folder_ctx ctx = {.root_fd = root_fd, .root = root, .classes = cls};
    r = parallel_for(default_threads(threads), nnames, scan_class, &ctx);
    if (r != 0)
        goto out;
    for (size_t c = 0; c < nnames; c++)
        if (cls[c].err) {
            r = cls[c].err;
            goto out;
        }

    /* Merge: pool = "" (the root's watch path), the class names, then each class's pool. */
    idx = calloc(1, sizeof *idx);
    if (!idx)
        goto oom;
    idx->source = TSOCK_INDEX_FOLDER;
    idx->scan_time_ns = start;
    idx->classes = (uint32_t)nnames;
    if (!(idx->source_path = strdup(root)) || !(idx->root = strdup(root)))
        goto oom;
    uint64_t count = 0, pool = 1, nwatch = 1;
    for (size_t c = 0; c < nnames; c++) {
        count += cls[c].nfiles;
        pool += strlen(cls[c].name) + 1 + cls[c].pool.len;
        nwatch += cls[c].nwatch;
        idx->total_bytes += cls[c].bytes;
        idx->empty += cls[c].left.count[R_EMPTY];
        idx->unreadable += cls[c].left.count[R_UNREADABLE];
        idx->too_large += cls[c].left.count[R_TOO_LARGE];
    }
    if (count > CACHE_MAX_SAMPLES || nwatch > UINT32_MAX) {
        r = -EOVERFLOW;
        goto out;
    }
    idx->count = count;
    idx->pool_size = pool;
    idx->watch_count = (uint32_t)nwatch;
    idx->entries = malloc((count ? count : 1) * sizeof *idx->entries);
    idx->class_names = malloc(nnames * sizeof *idx->class_names);
    idx->pool = malloc(pool);
    idx->watch = malloc(nwatch * sizeof *idx->watch);
    if (!idx->entries || !idx->class_names || !idx->pool || !idx->watch)
        goto oom;
    idx->pool[0] = '\0';
    idx->watch[0] = (struct tsock_index_watch){.path = 0,
                                               .ino = (uint64_t)root_st.st_ino,
                                               .size = (uint64_t)root_st.st_size,
                                               .mtime_ns = mtime_ns(&root_st)};
    uint64_t at = 1, e = 0, w = 1;
    for (size_t c = 0; c < nnames; c++) {
        size_t n = strlen(cls[c].name) + 1;
        memcpy(idx->pool + at, cls[c].name, n);
        idx->class_names[c] = at;
        at += n;
    }
    for (size_t c = 0; c < nnames; c++) {
        uint64_t base = at;
        if (cls[c].pool.len)
            memcpy(idx->pool + at, cls[c].pool.p, cls[c].pool.len);
        at += cls[c].pool.len;
        for (size_t i = 0; i < cls[c].nfiles; i++)
            idx->entries[e++] = (struct tsock_index_entry){
                .path = base + cls[c].files[i].path,
                .size = cls[c].files[i].size,
                .label = (uint32_t)c,
            };
        for (size_t i = 0; i < cls[c].nwatch; i++) {
            idx->watch[w] = cls[c].watch[i];
            idx->watch[w++].path += base;
        }
    }
    if ((r = count_empty_classes(idx)) != 0)
        goto out;
    leftout_log(&cls[0].left, nnames, sizeof *cls, root);
    log_empty_classes(idx);
    if (count == 0) {
        tsock__log(TSOCK_LOG_ERROR, "index: no usable image file under %s", root);
        r = -ENOENT;
        goto out;
    }
    {
        double s = (double)(tsock__now_ns() - t0) / 1e9;
        tsock__log(TSOCK_LOG_INFO,
                   "index: %s: %llu samples, %u classes, %.1f MB, scanned in %.2f s "
                   "(%.0f files/s), %.1f bytes per sample in memory",
                   root, (unsigned long long)count, idx->classes, (double)idx->total_bytes / 1e6, s,
                   s > 0 ? (double)count / s : 0.0,
                   (double)tsock__index_memory(idx) / (double)count);
    }
    goto out;
oom:
    r = -ENOMEM;
out:
    close(root_fd);
    free(buf);
    for (size_t c = 0; cls && c < nnames; c++) {
        free(cls[c].pool.p);
        free(cls[c].files);
        free(cls[c].watch);
        leftout_free(&cls[c].left);
    }
    free(cls);
    for (size_t i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    if (r == 0)
        *out = idx;
    else
        tsock__index_destroy(idx);
    return r;
}

/* ---------------------------------------------------------------------------------------- */
/* List files                                                                                */
/* ---------------------------------------------------------------------------------------- */

/* The longest list file read (1.28 million ImageNet lines take about 45 MB). */
#define LIST_MAX_BYTES ((size_t)1 << 32)
/* Malformed lines logged one by one before only counting. */
#define LIST_MAX_REPORTED 10

struct list_line {
    const char *path; /* NUL-terminated in place in the list buffer */
    uint32_t label;
    int status; /* -1 usable, else an enum reason */
    uint64_t size;
};

struct list_ctx {
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
    size_t end = (chunk + 1) * LIST_CHUNK;
    if (end > ctx->count)
        end = ctx->count;
    for (size_t i = chunk * LIST_CHUNK; i < end; i++) {
        struct list_line *l = &ctx->lines[i];
        struct stat st;
        if (fstatat(ctx->dir_fd, l->path, &st, 0) != 0 || !S_ISREG(st.st_mode))
            l->status = R_UNREADABLE;
        else if (st.st_size == 0)
            l->status = R_EMPTY;
        else if ((uint64_t)st.st_size > UINT32_MAX)
            l->status = R_TOO_LARGE;
        else
            l->status = -1;
        l->size = l->status == R_UNREADABLE ? 0 : (uint64_t)st.st_size;
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
    if (pe - b > TSOCK_INDEX_MAX_PATH) {
        *why = "path too long";
        return -1;
    }
    s[pe] = '\0';
    *path = s + b;
    *label = (uint32_t)v;
    return 1;
}

/* Reads a whole regular file into a NUL-terminated buffer. Returns 0 or -errno. */
static int
read_whole(int fd, size_t limit, char **out, size_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    if ((uint64_t)st.st_size >= limit)
        return -EFBIG;
    size_t cap = (size_t)st.st_size + 1, len = 0;
    char *p = malloc(cap);
    if (!p)
        return -ENOMEM;
    for (;;) {
        if (len + 1 == cap) {
            /* The file grew while being read: take what is there now, up to the limit. */
            if (cap >= limit) {
                free(p);
                return -EFBIG;
            }
            char *q = realloc(p, cap * 2);
            if (!q) {
                free(p);
                return -ENOMEM;
            }
            p = q;
            cap *= 2;
        }
        ssize_t n = read(fd, p + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = -errno;
            free(p);
            return e;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    p[len] = '\0';
    *out = p;
    *size = len;
    return 0;
}

/* The directory part of a path ("." when it has none). */
static char *
dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

int
tsock__index_scan_list(const char *list_path, int threads, struct tsock_index **out)
{
    struct tsock_index *idx = NULL;
    struct list_line *lines = NULL;
    size_t nlines = 0, cap_lines = 0, bad = 0, size = 0;
    char *text = NULL;
    int r, fd, dir_fd = -1;
    struct stat st;
    int64_t start = realtime_ns();
    uint64_t t0 = tsock__now_ns();

    if (!list_path || !list_path[0] || !out || strlen(list_path) > TSOCK_INDEX_MAX_PATH)
        return -EINVAL;
    *out = NULL;
    fd = open(list_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        r = -errno;
        tsock__log(TSOCK_LOG_ERROR, "index: cannot open list %s: %s", list_path, strerror(-r));
        return r;
    }
    r = fstat(fd, &st) == 0 ? read_whole(fd, LIST_MAX_BYTES, &text, &size) : -errno;
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
        if (grow((void **)&lines, &cap_lines, nlines, sizeof *lines) != 0) {
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
    if (nlines > CACHE_MAX_SAMPLES) {
        r = -EOVERFLOW;
        goto out;
    }

    idx = calloc(1, sizeof *idx);
    if (!idx || !(idx->source_path = strdup(list_path)) || !(idx->root = dir_of(list_path))) {
        r = -ENOMEM;
        goto out;
    }
    idx->source = TSOCK_INDEX_LIST;
    idx->scan_time_ns = start;
    idx->classes = nlines ? (uint32_t)(max_label + 1) : 0;
    dir_fd = open(idx->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        r = -errno;
        goto out;
    }
    struct list_ctx ctx = {.dir_fd = dir_fd, .lines = lines, .count = nlines};
    r = parallel_for(default_threads(threads), (nlines + LIST_CHUNK - 1) / LIST_CHUNK,
                     stat_list_chunk, &ctx);
    if (r != 0)
        goto out;

    /* Pool: the list file's name (its watch path, relative to root), then the samples. */
    const char *base = strrchr(list_path, '/');
    base = base ? base + 1 : list_path;
    struct leftout left = {0};
    uint64_t pool = strlen(base) + 1, count = 0;
    for (size_t i = 0; i < nlines; i++) {
        if (lines[i].status >= 0) {
            leftout_add(&left, lines[i].status, lines[i].path, NULL, NULL);
            continue;
        }
        pool += strlen(lines[i].path) + 1;
        count++;
    }
    idx->empty = left.count[R_EMPTY];
    idx->unreadable = left.count[R_UNREADABLE];
    idx->too_large = left.count[R_TOO_LARGE];
    idx->count = count;
    idx->pool_size = pool;
    idx->watch_count = 1;
    idx->entries = malloc((count ? count : 1) * sizeof *idx->entries);
    idx->pool = malloc(pool);
    idx->watch = malloc(sizeof *idx->watch);
    if (!idx->entries || !idx->pool || !idx->watch) {
        leftout_free(&left);
        r = -ENOMEM;
        goto out;
    }
    idx->watch[0] = (struct tsock_index_watch){.path = 0,
                                               .ino = (uint64_t)st.st_ino,
                                               .size = (uint64_t)st.st_size,
                                               .mtime_ns = mtime_ns(&st)};
    uint64_t at = strlen(base) + 1, e = 0;
    memcpy(idx->pool, base, at);
    for (size_t i = 0; i < nlines; i++) {
        if (lines[i].status >= 0)
            continue;
        size_t n = strlen(lines[i].path) + 1;
        memcpy(idx->pool + at, lines[i].path, n);
        idx->entries[e++] = (struct tsock_index_entry){
            .path = at, .size = (uint32_t)lines[i].size, .label = lines[i].label};
        idx->total_bytes += lines[i].size;
        at += n;
    }
    leftout_log(&left, 1, sizeof left, list_path);
    leftout_free(&left);
    if ((r = count_empty_classes(idx)) != 0)
        goto out;
    log_empty_classes(idx);
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

/* ---------------------------------------------------------------------------------------- */
/* Cache encoding                                                                            */
/* ---------------------------------------------------------------------------------------- */

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

int
tsock__index_encode(const struct tsock_index *idx, uint8_t **out, size_t *size)
{
    uint64_t total;
    size_t src_len;

    if (!idx || !out || !size || !idx->source_path)
        return -EINVAL;
    src_len = strlen(idx->source_path);
    uint64_t names = idx->source == TSOCK_INDEX_FOLDER ? (uint64_t)idx->classes * 8 : 0;
    total = CACHE_HEADER + src_len + names + (uint64_t)idx->watch_count * CACHE_WATCH_BYTES +
            idx->count * CACHE_ENTRY_BYTES;
    if (idx->count > CACHE_MAX_SAMPLES || idx->pool_size > SIZE_MAX - total - 8)
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
    if (idx->source == TSOCK_INDEX_FOLDER)
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
tsock__index_decode(const uint8_t *data, size_t size, int verify_checksum, struct tsock_index **out)
{
    struct tsock_index *idx = NULL;
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
    if (source > TSOCK_INDEX_LIST || src_len == 0 || src_len > TSOCK_INDEX_MAX_PATH ||
        count > CACHE_MAX_SAMPLES || nwatch == 0 || (source == TSOCK_INDEX_LIST && nwatch != 1) ||
        (source == TSOCK_INDEX_FOLDER && classes == 0) || pool_size == 0 || pool_size > size)
        return -EBADMSG;
    /* Every term is bounded (2^32 x 32 at most), so the sum cannot overflow 64 bits. */
    uint64_t names = source == TSOCK_INDEX_FOLDER ? (uint64_t)classes * 8 : 0;
    uint64_t want = (uint64_t)CACHE_HEADER + src_len + names +
                    (uint64_t)nwatch * CACHE_WATCH_BYTES + count * CACHE_ENTRY_BYTES + pool_size +
                    8;
    if (want != size)
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
    if (source == TSOCK_INDEX_FOLDER)
        idx->class_names = malloc((size_t)classes * sizeof *idx->class_names);
    if (!idx->source_path || !idx->pool || !idx->entries || !idx->watch ||
        (source == TSOCK_INDEX_FOLDER && !idx->class_names))
        goto nomem;
    idx->root = source == TSOCK_INDEX_FOLDER ? strdup(idx->source_path) : dir_of(idx->source_path);
    if (!idx->root)
        goto nomem;
    memcpy(idx->pool, pool_bytes, (size_t)pool_size);
    const char *pool = idx->pool;

    p = data + CACHE_HEADER + src_len;
    for (uint32_t c = 0; c < idx->classes && source == TSOCK_INDEX_FOLDER; c++, p += 8) {
        uint64_t off = get64(p);
        if (off >= pool_size)
            goto bad;
        const char *name = pool + off;
        if (!name[0] || strchr(name, '/') || is_dot(name))
            goto bad;
        if (c > 0 && tsock__index_name_compare(pool + idx->class_names[c - 1], name) >= 0)
            goto bad;
        idx->class_names[c] = off;
    }
    for (uint32_t i = 0; i < nwatch; i++, p += CACHE_WATCH_BYTES) {
        struct tsock_index_watch *w = &idx->watch[i];
        w->path = get64(p);
        w->ino = get64(p + 8);
        w->size = get64(p + 16);
        w->mtime_ns = (int64_t)get64(p + 24);
        if (w->path >= pool_size)
            goto bad;
        const char *s = pool + w->path;
        /* The root comes first; the rest lie inside it. A list's one watch is the list file,
         * which lies in the root directory itself. */
        if (source == TSOCK_INDEX_FOLDER ? (i == 0 ? s[0] != '\0' : !is_clean_relative(s))
                                         : (!is_clean_relative(s) || strchr(s, '/')))
            goto bad;
    }
    uint64_t total = 0;
    for (uint64_t i = 0; i < count; i++, p += CACHE_ENTRY_BYTES) {
        struct tsock_index_entry *e = &idx->entries[i];
        e->path = get64(p);
        e->size = get32(p + 8);
        e->label = get32(p + 12);
        if (e->path >= pool_size || e->size == 0 || e->label >= classes)
            goto bad;
        const char *s = pool + e->path;
        if (!s[0])
            goto bad;
        if (source == TSOCK_INDEX_FOLDER) {
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
    if (count_empty_classes(idx) != 0)
        goto nomem;
    *out = idx;
    return 0;
nomem:
    r = -ENOMEM;
bad:
    tsock__index_destroy(idx);
    return r;
}

/* ---------------------------------------------------------------------------------------- */
/* Cache files                                                                               */
/* ---------------------------------------------------------------------------------------- */

static _Atomic(tsock_index_write_fn) write_hook;

void
tsock__index_set_write_hook(tsock_index_write_fn fn)
{
    atomic_store(&write_hook, fn);
}

static int
write_all(int fd, const uint8_t *p, size_t n)
{
    tsock_index_write_fn fn = atomic_load(&write_hook);
    while (n) {
        ssize_t w = fn ? fn(fd, p, n) : write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        if (w == 0)
            return -EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int
tsock__index_save(const struct tsock_index *idx, const char *cache_path)
{
    static atomic_uint counter;
    uint8_t *bytes = NULL;
    size_t size = 0;
    char tmp[TSOCK_INDEX_MAX_PATH + 64];
    int r, fd = -1;

    if (!idx || !cache_path || !cache_path[0] || strlen(cache_path) > TSOCK_INDEX_MAX_PATH)
        return -EINVAL;
    if ((r = tsock__index_encode(idx, &bytes, &size)) != 0)
        return r;
    /* A unique name in the same directory (rename is atomic only within a file system);
     * O_EXCL keeps two producers saving at once from writing into the same file. */
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", cache_path, (long)getpid(),
                 atomic_fetch_add(&counter, 1));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        r = -errno;
        goto out;
    }
    r = write_all(fd, bytes, size);
    /* fsync before rename: otherwise a crash could leave the new name on a file whose data
     * never reached the disk (the checksum would catch it, at the price of a rescan). */
    if (r == 0 && fsync(fd) != 0)
        r = -errno;
    if (close(fd) != 0 && r == 0)
        r = -errno;
    if (r == 0 && rename(tmp, cache_path) != 0)
        r = -errno;
    if (r != 0)
        unlink(tmp);
out:
    if (r != 0)
        tsock__log(TSOCK_LOG_WARN, "index: cannot write cache %s: %s", cache_path, strerror(-r));
    free(bytes);
    return r;
}

int
tsock__index_check_fresh(const struct tsock_index *idx)
{
    int root_fd = open(idx->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int r = 0;

    if (root_fd < 0)
        return -ESTALE;
    for (uint32_t i = 0; i < idx->watch_count && r == 0; i++) {
        const struct tsock_index_watch *w = &idx->watch[i];
        const char *rel = idx->pool + w->path;
        struct stat st;
        if (fstatat(root_fd, rel, &st, rel[0] ? 0 : AT_EMPTY_PATH) != 0 ||
            (uint64_t)st.st_ino != w->ino || (uint64_t)st.st_size != w->size ||
            mtime_ns(&st) != w->mtime_ns)
            r = -ESTALE;
        else if (w->mtime_ns > idx->scan_time_ns - TSOCK_INDEX_RACY_NS)
            r = -ESTALE; /* see TSOCK_INDEX_RACY_NS */
    }
    close(root_fd);
    return r;
}

int
tsock__index_load(const char *cache_path, int source, const char *path, struct tsock_index **out)
{
    char *bytes = NULL;
    size_t size = 0;
    int r, fd;

    if (!cache_path || !path || !out)
        return -EINVAL;
    *out = NULL;
    fd = open(cache_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    r = read_whole(fd, (size_t)1 << 40, &bytes, &size);
    close(fd);
    if (r == -EINVAL)
        r = -EBADMSG; /* not a regular file */
    if (r != 0)
        return r;
    struct tsock_index *idx;
    r = tsock__index_decode((const uint8_t *)bytes, size, 1, &idx);
    free(bytes);
    if (r != 0)
        return r;
    if (idx->source != source || strcmp(idx->source_path, path) != 0 ||
        tsock__index_check_fresh(idx) != 0) {
        tsock__index_destroy(idx);
        return -ESTALE;
    }
    *out = idx;
    return 0;
}

static int
is_racy(const struct tsock_index *idx)
{
    for (uint32_t i = 0; i < idx->watch_count; i++)
        if (idx->watch[i].mtime_ns > idx->scan_time_ns - TSOCK_INDEX_RACY_NS)
            return 1;
    return 0;
}

/* Whether the cache file would go into a directory the index watches: writing it there
 * changes that directory's mtime, so the cache would be stale at once, on every run. */
static int
cache_in_tree(const struct tsock_index *idx, const char *cache_path)
{
    char *dir = dir_of(cache_path);
    struct stat cache_dir, root;
    int inside = 0;

    if (dir && stat(dir, &cache_dir) == 0 && stat(idx->root, &root) == 0 &&
        cache_dir.st_dev == root.st_dev)
        for (uint32_t i = 0; i < idx->watch_count && !inside; i++)
            inside = idx->watch[i].ino == (uint64_t)cache_dir.st_ino;
    free(dir);
    return inside;
}

/* Runs the caller's check on a fresh scan and removes what it marks. An index left with no
 * sample is an error, as a scan that finds no usable file is. */
static int
apply_check(tsock_index_check_fn check, void *arg, struct tsock_index **idx)
{
    uint8_t *drop = calloc((size_t)(*idx)->count + 1, 1);
    int r = drop ? check(arg, *idx, drop) : -ENOMEM;

    if (r >= 0)
        r = tsock__index_remove(*idx, drop);
    free(drop);
    if (r >= 0 && (*idx)->count == 0) {
        tsock__log(TSOCK_LOG_ERROR, "index: %s: no file passed the image header check",
                   (*idx)->source_path);
        r = -ENOENT;
    }
    if (r < 0) {
        tsock__index_destroy(*idx);
        *idx = NULL;
        return r;
    }
    return 0;
}

int
tsock__index_remove(struct tsock_index *idx, const uint8_t *drop)
{
    uint64_t kept = 0, bytes = 0, removed;

    if (!idx || !drop)
        return -EINVAL;
    for (uint64_t i = 0; i < idx->count; i++) {
        if (drop[i])
            continue;
        idx->entries[kept++] = idx->entries[i];
        bytes += idx->entries[i].size;
    }
    removed = idx->count - kept;
    /* The dropped paths stay in the pool: compacting it would cost a copy of the whole pool
     * for a few bytes per bad file. */
    idx->count = kept;
    idx->total_bytes = bytes;
    idx->not_image += removed;
    int r = count_empty_classes(idx);
    if (r != 0)
        return r;
    if (removed)
        log_empty_classes(idx);
    return (int)(removed > INT32_MAX ? INT32_MAX : removed);
}

int
tsock__index_open(int source, const char *path, const char *cache_path, int threads,
                  struct tsock_index **out)
{
    return tsock__index_open_checked(source, path, cache_path, threads, NULL, NULL, out);
}

int
tsock__index_open_checked(int source, const char *path, const char *cache_path, int threads,
                          tsock_index_check_fn check, void *arg, struct tsock_index **out)
{
    int r;

    if (!path || !out || (source != TSOCK_INDEX_FOLDER && source != TSOCK_INDEX_LIST))
        return -EINVAL;
    if (cache_path) {
        r = tsock__index_load(cache_path, source, path, out);
        if (r == 0) {
            tsock__log(TSOCK_LOG_INFO, "index: %s: %llu samples from cache %s", path,
                       (unsigned long long)(*out)->count, cache_path);
            return 0;
        }
        tsock__log(r == -ENOENT ? TSOCK_LOG_DEBUG : TSOCK_LOG_INFO,
                   "index: cache %s not used (%s); scanning", cache_path,
                   r == -ESTALE    ? "the dataset changed since it was written"
                   : r == -EBADMSG ? "not a valid index cache"
                                   : strerror(-r));
    }
    r = source == TSOCK_INDEX_FOLDER ? tsock__index_scan_folder(path, threads, out)
                                     : tsock__index_scan_list(path, threads, out);
    if (r == 0 && check)
        r = apply_check(check, arg, out);
    if (r != 0 || !cache_path)
        return r;
    if (cache_in_tree(*out, cache_path))
        tsock__log(TSOCK_LOG_WARN,
                   "index: cache %s not written: it is inside the dataset tree, where writing "
                   "it would change the tree and so make itself stale; put it elsewhere",
                   cache_path);
    else if (is_racy(*out))
        tsock__log(TSOCK_LOG_INFO,
                   "index: cache %s not written: the dataset was modified in the last %d s, "
                   "so it may still change unnoticed; the next run will write it",
                   cache_path, (int)(TSOCK_INDEX_RACY_NS / 1000000000LL));
    else
        tsock__index_save(*out, cache_path); /* logs its own failure; the index is usable */
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Accessors                                                                                 */
/* ---------------------------------------------------------------------------------------- */

const char *
tsock__index_path(const struct tsock_index *idx, uint64_t i)
{
    return idx && i < idx->count ? idx->pool + idx->entries[i].path : NULL;
}

const char *
tsock__index_class_name(const struct tsock_index *idx, uint32_t label)
{
    if (!idx || !idx->class_names || label >= idx->classes)
        return NULL;
    return idx->pool + idx->class_names[label];
}

size_t
tsock__index_memory(const struct tsock_index *idx)
{
    if (!idx)
        return 0;
    return sizeof *idx + (size_t)idx->count * sizeof *idx->entries + (size_t)idx->pool_size +
           (idx->class_names ? (size_t)idx->classes * sizeof *idx->class_names : 0) +
           (size_t)idx->watch_count * sizeof *idx->watch +
           (idx->source_path ? strlen(idx->source_path) + 1 : 0) +
           (idx->root ? strlen(idx->root) + 1 : 0);
}

void
tsock__index_destroy(struct tsock_index *idx)
{
    if (!idx)
        return;
    free(idx->source_path);
    free(idx->root);
    free(idx->entries);
    free(idx->class_names);
    free(idx->pool);
    free(idx->watch);
    free(idx);
}
