/* See jobs.h. */
#include "jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void
first_error_init(struct first_error *e)
{
    pthread_mutex_init(&e->lock, NULL);
    atomic_init(&e->failed, 0);
    e->text[0] = '\0';
}

void
first_error_destroy(struct first_error *e)
{
    pthread_mutex_destroy(&e->lock);
}

void
first_error_set(struct first_error *e, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&e->lock);
    if (!atomic_load(&e->failed)) {
        va_start(ap, fmt);
        vsnprintf(e->text, sizeof e->text, fmt, ap);
        va_end(ap);
        atomic_store(&e->failed, 1);
    }
    pthread_mutex_unlock(&e->lock);
}

int
first_error_seen(struct first_error *e)
{
    return atomic_load(&e->failed);
}

int
write_whole(const char *path, const uint8_t *p, size_t n, char *err, size_t err_size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, err_size, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    int e = 0;
    while (n && !e) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            break;
        }
        p += w;
        n -= (size_t)w;
    }
    if (close(fd) != 0 && !e)
        e = errno;
    if (e) {
        unlink(path);
        snprintf(err, err_size, "cannot write %s: %s", path, strerror(e));
        return -1;
    }
    return 0;
}
