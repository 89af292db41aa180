/* tsock-consume's checkpoint files (see consume_state.h). */
#include "consume_state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int
state_file_read(const char *path, uint8_t **buf, size_t *len, char *why, size_t why_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_size, "--resume %s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *grown = cap < ((size_t)1 << 30) ? realloc(b, cap * 2) : NULL;
        if (!grown) {
            free(b);
            b = NULL;
            break;
        }
        b = grown;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b || bad) {
        snprintf(why, why_size, "--resume %s: cannot read the file", path);
        free(b);
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}

static int
write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The directory entry of the rename is durable only once the directory itself is synced. */
static void
sync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(copy);
}

int
state_file_write(const char *path, const void *buf, size_t len)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int err = write_all(fd, buf, len);
    if (err == 0 && fsync(fd) != 0)
        err = -errno;
    if (close(fd) != 0 && err == 0)
        err = -errno;
    if (err == 0 && rename(tmp, path) != 0)
        err = -errno;
    if (err < 0) {
        unlink(tmp);
        return err;
    }
    sync_dir_of(path);
    return 0;
}

void
ids_out_write(FILE *f, uint64_t epoch, const int64_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        fprintf(f, "%" PRIu64 " %" PRId64 "\n", epoch, ids[i]);
}

int
ids_out_sync(FILE *f)
{
    if (fflush(f) != 0 || fsync(fileno(f)) != 0)
        return -errno;
    return 0;
}
