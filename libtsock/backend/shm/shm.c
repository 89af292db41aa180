/* Host shared-memory slots: the ring is one POSIX shared-memory object. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/shm/shm.h"
#include "core/core.h"

static atomic_uint region_counter;

int
tsock__shm_create(struct tsock__region *r, size_t bytes)
{
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "/tsock-%u-%d-%u", (unsigned)getuid(), (int)getpid(),
             atomic_fetch_add(&region_counter, 1));
    int fd = shm_open(r->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    /* fchmod too: shm_open's mode is filtered by the umask, and 0600 must hold regardless. */
    int err = 0;
    if (fchmod(fd, 0600) < 0 || ftruncate(fd, (off_t)bytes) < 0)
        err = -errno;
    void *base = err ? MAP_FAILED : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!err && base == MAP_FAILED)
        err = -errno;
    close(fd);
    if (err) {
        shm_unlink(r->name);
        return err;
    }
    r->base = base;
    r->bytes = bytes;
    r->owner = 1;
    return 0;
}

int
tsock__shm_attach(struct tsock__region *r, const char *name, size_t bytes)
{
    memset(r, 0, sizeof *r);
    if (strlen(name) >= sizeof r->name || name[0] != '/' || strchr(name + 1, '/'))
        return -EINVAL;
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct stat st;
    int err = fstat(fd, &st) < 0 ? -errno : 0;
    if (!err && (st.st_size < 0 || (size_t)st.st_size != bytes))
        err = -EPROTO;
    void *base = err ? MAP_FAILED : mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
    if (!err && base == MAP_FAILED)
        err = -errno;
    close(fd);
    if (err)
        return err;
    snprintf(r->name, sizeof r->name, "%s", name);
    r->base = base;
    r->bytes = bytes;
    return 0;
}

void
tsock__shm_release(struct tsock__region *r)
{
    if (r->base)
        munmap(r->base, r->bytes);
    if (r->owner)
        shm_unlink(r->name);
    r->base = NULL;
    r->owner = 0;
}

/* Parses "/tsock-<uid>-<pid>-<n>" (leading slash optional). Returns the pid, or -1. */
static int
region_creator(const char *name, unsigned *uid)
{
    int pid = -1, used = 0;
    unsigned n;
    if (name[0] == '/')
        name++;
    if (sscanf(name, "tsock-%u-%d-%u%n", uid, &pid, &n, &used) != 3 || name[used] != '\0')
        return -1;
    return pid > 0 ? pid : -1;
}

int
tsock__shm_remove_if_orphaned(const char *name)
{
    unsigned uid;
    int pid = region_creator(name, &uid);
    if (pid < 0 || uid != (unsigned)getuid())
        return 0;
    if (kill(pid, 0) == 0 || errno != ESRCH)
        return 0;
    char path[TSOCK__REGION_NAME_MAX + 1];
    snprintf(path, sizeof path, "/%s", name[0] == '/' ? name + 1 : name);
    if (shm_unlink(path) == 0) {
        tsock__log(TSOCK_LOG_INFO, "removed shared memory %s left by dead process %d", path, pid);
        return 1;
    }
    return 0;
}

int
tsock__shm_sweep_orphans(void)
{
    DIR *dir = opendir("/dev/shm");
    if (!dir)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (strncmp(e->d_name, "tsock-", 6) == 0)
            removed += tsock__shm_remove_if_orphaned(e->d_name);
    closedir(dir);
    return removed;
}
