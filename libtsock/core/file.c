/* Files and paths (see file.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/file.h"

int
tsock__read_whole(int fd, size_t limit, char **out, size_t *size)
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

char *
tsock__dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup(".");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

int64_t
tsock__stat_mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

int64_t
tsock__realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
