/* Host shared-memory slots: the ring is one POSIX shared-memory object. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "backend/shm/shm.h"
#include "core/core.h"

static atomic_uint region_counter;

#define MIB (1024.0 * 1024.0)
/* Descriptors a producer should have to spare once its ring exists: one per consumer
 * connection, the ZeroMQ context's own, and one per read in flight in the image pipeline. */
#define FD_HEADROOM 64

/* The folder glibc keeps POSIX shared-memory objects in (what docker --shm-size sizes). */
#define SHM_DIR "/dev/shm"

/* The number of descriptors this process has open, or -1 when /proc cannot say. */
static long
open_descriptors(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(dir);
    return n - 1; /* the directory's own descriptor */
}

/* Says clearly when the descriptor limit (RLIMIT_NOFILE) leaves little room: a producer that
 * runs out later cannot accept consumers or read files, far from the cause. */
static void
check_descriptor_room(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    long used = open_descriptors();
    if (used < 0 || (rlim_t)used + FD_HEADROOM <= rl.rlim_cur)
        return;
    tsock__log(TSOCK_LOG_WARN,
               "file descriptors: %ld of the %llu this process may open (RLIMIT_NOFILE) are in "
               "use; each consumer connection and each read in flight needs one. Raise the "
               "limit: ulimit -n 4096, docker run --ulimit nofile=4096:4096, or LimitNOFILE= in "
               "a systemd unit",
               used, (unsigned long long)rl.rlim_cur);
}

static void
log_no_descriptor(void)
{
    struct rlimit rl;
    unsigned long long limit = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        limit = (unsigned long long)rl.rlim_cur;
    tsock__log(TSOCK_LOG_ERROR,
               "shared memory: cannot open the ring's object: no file descriptor left (this "
               "process may open %llu: RLIMIT_NOFILE). Raise the limit: ulimit -n 4096, docker "
               "run --ulimit nofile=4096:4096, or LimitNOFILE= in a systemd unit",
               limit);
}

/* The one message for a ring that does not fit in shared memory: the numbers and the fixes. */
static void
log_does_not_fit(size_t bytes)
{
    struct statvfs sv;
    unsigned long long avail = 0, total = 0;
    if (statvfs(SHM_DIR, &sv) == 0) {
        avail = (unsigned long long)sv.f_bavail * sv.f_frsize;
        total = (unsigned long long)sv.f_blocks * sv.f_frsize;
    }
    /* What --shm-size would have to be: what others use now plus the ring, rounded up to
     * 64 MiB so the suggestion leaves a little room. */
    unsigned long long used = total > avail ? total - avail : 0;
    unsigned long long suggest = ((used + bytes) / (64ull << 20) + 1) * 64;
    tsock__log(TSOCK_LOG_ERROR,
               "shared memory does not fit: the ring needs %zu bytes (%.1f MiB), " SHM_DIR
               " has %llu bytes (%.1f MiB) available of %llu. Fixes: fewer slots (--slots) or "
               "a smaller batch (--batch-size); in Docker, docker run --shm-size=%llum or "
               "--ipc=host; in Kubernetes, a memory-backed emptyDir (medium: Memory) mounted "
               "at " SHM_DIR,
               bytes, (double)bytes / MIB, avail, (double)avail / MIB, total, suggest);
}

/* Reserves every page of the object now. ftruncate alone only sets the size: on a tmpfs too
 * small for it (Docker's /dev/shm is 64 MiB) the first write to a missing page would raise
 * SIGBUS in the middle of a run. posix_fallocate returns the error instead of setting errno.
 * Returns 0 or a negated errno; -ENOSPC (logged with the numbers) when the ring does not
 * fit. */
static int
reserve_pages(int fd, size_t bytes)
{
    int rc;
    do
        rc = posix_fallocate(fd, 0, (off_t)bytes);
    while (rc == EINTR);
    if (rc == 0)
        return 0;
    if (rc == ENOSPC || rc == ENOMEM || rc == EFBIG) {
        log_does_not_fit(bytes);
        return -ENOSPC;
    }
    tsock__log(TSOCK_LOG_ERROR, "shared memory: cannot reserve %zu bytes for the ring: %s", bytes,
               strerror(rc));
    return -rc;
}

int
tsock__shm_create(struct tsock__region *r, size_t bytes)
{
    memset(r, 0, sizeof *r);
    if (bytes == 0 || bytes > (size_t)INT64_MAX)
        return -EINVAL;
    snprintf(r->name, sizeof r->name, "/tsock-%u-%d-%u", (unsigned)getuid(), (int)getpid(),
             atomic_fetch_add(&region_counter, 1));
    int fd = shm_open(r->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        int err = errno;
        if (err == EMFILE)
            log_no_descriptor();
        else if (err == ENFILE)
            tsock__log(TSOCK_LOG_ERROR, "shared memory: cannot open the ring's object: the "
                                        "system's file table is full (ENFILE)");
        return -err;
    }
    /* fchmod too: shm_open's mode is filtered by the umask, and 0600 must hold regardless. */
    int err = 0;
    if (fchmod(fd, 0600) < 0)
        err = -errno;
    if (!err)
        err = reserve_pages(fd, bytes);
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
    check_descriptor_room();
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
