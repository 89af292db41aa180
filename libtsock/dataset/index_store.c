/* The index cache on disk (see index.h): written atomically, read back, and checked for
 * freshness against the file system. The bytes themselves are index_cache.c's business.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "core/file.h"
#include "dataset/index_cache.h"
#include "dataset/index_int.h"

static _Atomic(tsock__index_write_fn) write_hook;

void
tsock__index_set_write_hook(tsock__index_write_fn fn)
{
    atomic_store(&write_hook, fn);
}

static int
write_all(int fd, const uint8_t *p, size_t n)
{
    tsock__index_write_fn fn = atomic_load(&write_hook);
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
tsock__index_save(const struct tsock__index *idx, const char *cache_path)
{
    static atomic_uint counter;
    uint8_t *bytes = NULL;
    size_t size = 0;
    char tmp[TSOCK__INDEX_MAX_PATH + 64];
    int r, fd = -1;

    if (!idx || !cache_path || !cache_path[0] || strlen(cache_path) > TSOCK__INDEX_MAX_PATH)
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
tsock__index_check_fresh(const struct tsock__index *idx)
{
    int root_fd = open(idx->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int r = 0;

    if (root_fd < 0)
        return -ESTALE;
    for (uint32_t i = 0; i < idx->watch_count && r == 0; i++) {
        const struct tsock__index_watch *w = &idx->watch[i];
        const char *rel = idx->pool + w->path;
        struct stat st;
        if (fstatat(root_fd, rel, &st, rel[0] ? 0 : AT_EMPTY_PATH) != 0 ||
            (uint64_t)st.st_ino != w->ino || (uint64_t)st.st_size != w->size ||
            tsock__stat_mtime_ns(&st) != w->mtime_ns)
            r = -ESTALE;
        else if (w->mtime_ns > idx->scan_time_ns - TSOCK__INDEX_RACY_NS)
            r = -ESTALE; /* see TSOCK__INDEX_RACY_NS */
    }
    close(root_fd);
    return r;
}

int
tsock__index_load(const char *cache_path, int source, const char *path, struct tsock__index **out)
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
    r = tsock__read_whole(fd, (size_t)1 << 40, &bytes, &size);
    close(fd);
    if (r == -EINVAL)
        r = -EBADMSG; /* not a regular file */
    if (r != 0)
        return r;
    struct tsock__index *idx;
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
