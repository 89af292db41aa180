/* The ImageFolder scan (see index.h for the order and labels it reproduces): the class
 * directories are listed, then walked one class per thread on the core/ thread pool, then
 * merged into one index in class order.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/array.h"
#include "core/core.h"
#include "core/file.h"
#include "core/parallel.h"
#include "core/strpool.h"
#include "dataset/index_int.h"

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
    int status;    /* -1 usable, else an enum tsock__index_reason */
    uint64_t name; /* offset in the names arena */
    uint64_t size;
};

/* The result of scanning one class directory. Pool offsets are class-local until merged. */
struct class_scan {
    const char *name;
    struct tsock__strpool pool; /* "class/..." paths of files, then of directories */
    struct {
        uint64_t path;
        uint32_t size;
    } * files;
    size_t nfiles, cap_files;
    struct tsock__index_watch *watch;
    size_t nwatch, cap_watch;
    uint64_t bytes;
    struct tsock__index_leftout left;
    int err;
    const atomic_int *cancel; /* the scan's (NULL: never cancelled) */
};

struct folder_ctx {
    int root_fd;
    const char *root;
    struct class_scan *classes;
};

/* Checked between directory listings, so a cancelled scan stops within one getdents call per
 * thread, however large the tree. */
static int
cancelled(const atomic_int *cancel)
{
    return cancel && atomic_load(cancel);
}

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
    if (tsock__array_grow((void **)&cs->watch, &cs->cap_watch, cs->nwatch, sizeof *cs->watch) != 0)
        return -1;
    int64_t off = tsock__strpool_add3(&cs->pool, cs->name, rel[0] ? "/" : "", rel);
    if (off < 0)
        return -1;
    cs->watch[cs->nwatch++] = (struct tsock__index_watch){
        .path = (uint64_t)off,
        .ino = (uint64_t)st->st_ino,
        .size = (uint64_t)st->st_size,
        .mtime_ns = tsock__stat_mtime_ns(st),
    };
    return 0;
}

/* Lists one directory of a class walk: subdirectories join `dirs`, files with an image
 * extension join `files` with their fstatat result. Returns 0 or -1 (out of memory). */
static int
list_dir(struct class_scan *cs, int fd, uint32_t di, struct walk_dir **dirs, size_t *ndirs,
         size_t *cap_dirs, struct walk_file **files, size_t *nfiles, size_t *cap_files,
         struct tsock__strpool *names, char *buf)
{
    size_t class_len = strlen(cs->name);

    for (;;) {
        ssize_t n = read_dents(fd, buf, TSOCK__INDEX_DENTS_BUFFER);
        if (n < 0) {
            tsock__log(TSOCK_LOG_WARN, "index: cannot list %s/%s: %s", cs->name, (*dirs)[di].rel,
                       strerror((int)-n));
            return 0;
        }
        if (n == 0 || cancelled(cs->cancel))
            return 0;
        for (ssize_t pos = 0; pos < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + pos);
            pos += d->d_reclen;
            const char *name = d->d_name;
            if (tsock__index_is_dot(name))
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
            if (path_len > TSOCK__INDEX_MAX_PATH) {
                tsock__log(TSOCK_LOG_WARN, "index: skipped (path longer than %d bytes): %s/%s/%s",
                           TSOCK__INDEX_MAX_PATH, cs->name, rel, name);
                continue;
            }
            if (is_dir) {
                if ((*dirs)[di].depth + 1 > TSOCK__INDEX_MAX_DEPTH) {
                    tsock__log(TSOCK_LOG_WARN, "index: skipped (nested deeper than %d): %s/%s/%s",
                               TSOCK__INDEX_MAX_DEPTH, cs->name, rel, name);
                    continue;
                }
                if (tsock__array_grow((void **)dirs, cap_dirs, *ndirs, sizeof **dirs) != 0)
                    return -1;
                struct tsock__strpool r = {0};
                if (tsock__strpool_add3(&r, rel, rel[0] ? "/" : "", name) < 0)
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
            if (tsock__array_grow((void **)files, cap_files, *nfiles, sizeof **files) != 0)
                return -1;
            int64_t off = tsock__strpool_add3(names, name, NULL, NULL);
            if (off < 0)
                return -1;
            int status = -1;
            if (!have_st || !S_ISREG(st.st_mode))
                status = TSOCK__INDEX_UNREADABLE;
            else if (st.st_size == 0)
                status = TSOCK__INDEX_EMPTY;
            else if ((uint64_t)st.st_size > UINT32_MAX)
                status = TSOCK__INDEX_TOO_LARGE;
            (*files)[(*nfiles)++] = (struct walk_file){
                .dir = di,
                .status = status,
                .name = (uint64_t)off,
                .size = have_st ? (uint64_t)st.st_size : 0,
            };
        }
    }
}

/* Walks one class directory (tsock__parallel_for callback). */
static void
scan_class(void *arg, size_t c, char *buf)
{
    struct folder_ctx *ctx = arg;
    struct class_scan *cs = &ctx->classes[c];
    struct walk_dir *dirs = NULL;
    struct walk_file *files = NULL;
    size_t ndirs = 0, cap_dirs = 0, nfiles = 0, cap_files = 0;
    struct tsock__strpool names = {0};
    uint32_t *order = NULL, *rank = NULL;

    int class_fd = openat(ctx->root_fd, cs->name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (class_fd < 0) {
        tsock__log(TSOCK_LOG_WARN, "index: cannot open class directory %s/%s: %s", ctx->root,
                   cs->name, strerror(errno));
        return;
    }
    if (tsock__array_grow((void **)&dirs, &cap_dirs, 0, sizeof *dirs) != 0 ||
        !(dirs[0].rel = strdup("")))
        goto oom;
    dirs[0].parent = -1;
    dirs[0].depth = 0;
    ndirs = 1;

    /* Breadth-first; the order of discovery does not matter since directories are sorted
     * afterwards. Each directory is stat'ed before it is listed, so a change made during or
     * after the listing moves its mtime past the recorded one. */
    for (size_t i = 0; i < ndirs && !cancelled(cs->cancel); i++) {
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
        char path[TSOCK__INDEX_MAX_PATH + 1]; /* list_dir kept only paths that fit */
        snprintf(path, sizeof path, "%s/%s%s%s", cs->name, rel, rel[0] ? "/" : "",
                 names.p + files[i].name);
        if (files[i].status >= 0) {
            tsock__index_leftout_add(&cs->left, files[i].status, path, NULL, NULL);
            continue;
        }
        int64_t off = tsock__strpool_add3(&cs->pool, path, NULL, NULL);
        if (off < 0 ||
            tsock__array_grow((void **)&cs->files, &cs->cap_files, cs->nfiles, sizeof *cs->files))
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

int
tsock__index_scan_folder(const char *root, int threads, struct tsock__index **out)
{
    return tsock__index_scan_folder_until(root, threads, NULL, out);
}

int
tsock__index_scan_folder_until(const char *root, int threads, const atomic_int *cancel,
                               struct tsock__index **out)
{
    struct tsock__index *idx = NULL;
    struct class_scan *cls = NULL;
    char **names = NULL;
    size_t nnames = 0, cap_names = 0;
    char *buf = NULL;
    int r = 0, root_fd;
    struct stat root_st;
    int64_t start = tsock__realtime_ns();
    uint64_t t0 = tsock__now_ns();

    if (!root || !root[0] || !out || strlen(root) > TSOCK__INDEX_MAX_PATH)
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
    buf = malloc(TSOCK__INDEX_DENTS_BUFFER);
    if (!buf)
        goto oom;
    for (;;) {
        ssize_t n = read_dents(root_fd, buf, TSOCK__INDEX_DENTS_BUFFER);
        if (n < 0) {
            r = (int)n;
            tsock__log(TSOCK_LOG_ERROR, "index: cannot list %s: %s", root, strerror(-r));
            goto out;
        }
        if (n == 0)
            break;
        if (cancelled(cancel)) {
            r = TSOCK_E_CANCELLED;
            goto out;
        }
        for (ssize_t pos = 0; pos < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + pos);
            pos += d->d_reclen;
            if (tsock__index_is_dot(d->d_name))
                continue;
            int dir = d->d_type == DT_DIR;
            if (d->d_type == DT_LNK || d->d_type == DT_UNKNOWN) {
                struct stat st;
                dir = fstatat(root_fd, d->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
            }
            if (!dir)
                continue;
            if (tsock__array_grow((void **)&names, &cap_names, nnames, sizeof *names) != 0)
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
    for (size_t c = 0; c < nnames; c++) {
        cls[c].name = names[c];
        cls[c].cancel = cancel;
    }
    struct folder_ctx ctx = {.root_fd = root_fd, .root = root, .classes = cls};
    r = tsock__parallel_for(tsock__parallel_threads(threads), nnames, TSOCK__INDEX_DENTS_BUFFER,
                            scan_class, &ctx);
    if (r == 0 && cancelled(cancel))
        r = TSOCK_E_CANCELLED; /* the classes' results are partial: none of them is used */
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
    idx->source = TSOCK__INDEX_FOLDER;
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
        idx->empty += cls[c].left.count[TSOCK__INDEX_EMPTY];
        idx->unreadable += cls[c].left.count[TSOCK__INDEX_UNREADABLE];
        idx->too_large += cls[c].left.count[TSOCK__INDEX_TOO_LARGE];
    }
    if (count > TSOCK__INDEX_MAX_SAMPLES || nwatch > UINT32_MAX) {
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
    idx->watch[0] = (struct tsock__index_watch){.path = 0,
                                                .ino = (uint64_t)root_st.st_ino,
                                                .size = (uint64_t)root_st.st_size,
                                                .mtime_ns = tsock__stat_mtime_ns(&root_st)};
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
            idx->entries[e++] = (struct tsock__index_entry){
                .path = base + cls[c].files[i].path,
                .size = cls[c].files[i].size,
                .label = (uint32_t)c,
            };
        for (size_t i = 0; i < cls[c].nwatch; i++) {
            idx->watch[w] = cls[c].watch[i];
            idx->watch[w++].path += base;
        }
    }
    if ((r = tsock__index_count_empty_classes(idx)) != 0)
        goto out;
    tsock__index_leftout_log(&cls[0].left, nnames, sizeof *cls, root);
    tsock__index_log_empty_classes(idx);
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
        tsock__index_leftout_free(&cls[c].left);
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
