/* The simulated device (devapi_sim.c): its tsock__sim_settings, rule violations, and the
 * shared-memory objects that hold device memory and events, with this process's mappings of them.
 */
#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cuda/devapi_sim_int.h"

struct tsock__sim_cfg tsock__sim_cfg;
/* ---- tsock__sim_settings
 * ------------------------------------------------------------------------------ */

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
atomic_int tsock__sim_global_capture, tsock__sim_stale_error, tsock__sim_capturing_streams;
atomic_long tsock__sim_executed, tsock__sim_spin_waits;
atomic_uint tsock__sim_contexts; /* bit d: a context was created on device d */

static void
load_cfg(void)
{
    const char *v = getenv("TSOCK_CUDA_SIM_DEVICE");
    if (v && *v)
        snprintf(tsock__sim_cfg.device, sizeof tsock__sim_cfg.device, "%s", v);
    else
        snprintf(tsock__sim_cfg.device, sizeof tsock__sim_cfg.device, "u%u", (unsigned)getuid());
    for (char *c = tsock__sim_cfg.device; *c; c++)
        if (*c == '/')
            *c = '_';
    v = getenv("TSOCK_CUDA_SIM_DEVICES");
    tsock__sim_cfg.devices = v ? atoi(v) : 1;
    if (tsock__sim_cfg.devices < 1 || tsock__sim_cfg.devices > 8)
        tsock__sim_cfg.devices = 1;
    v = getenv("TSOCK_CUDA_SIM_SEED");
    tsock__sim_cfg.seed = v ? strtoul(v, NULL, 10) : 1;
    v = getenv("TSOCK_CUDA_SIM_MAX_DELAY_US");
    tsock__sim_cfg.max_delay_us = v ? strtoul(v, NULL, 10) : 500;
    v = getenv("TSOCK_CUDA_SIM_STALL_AFTER");
    tsock__sim_cfg.stall_after = v ? atol(v) : -1;
    tsock__sim_cfg.stall_file = getenv("TSOCK_CUDA_SIM_STALL_FILE");
    v = getenv("TSOCK_CUDA_SIM_STALL_MS");
    tsock__sim_cfg.stall_ms = v ? atol(v) : 0;
    v = getenv("TSOCK_CUDA_SIM_CAPTURE");
    tsock__sim_cfg.capture_env = v && strcmp(v, "1") == 0;
    static const struct {
        const char *name;
        int err;
    } fails[] = {{"no-device", TSOCK__DEV_NO_DEVICE},
                 {"old-driver", TSOCK__DEV_OLD_DRIVER},
                 {"exclusive", TSOCK__DEV_EXCLUSIVE},
                 {"fork", TSOCK__DEV_FORK},
                 {"ipc", TSOCK__DEV_IPC}};
    v = getenv("TSOCK_CUDA_SIM_FAIL");
    for (size_t i = 0; v && i < sizeof fails / sizeof fails[0]; i++)
        if (strcmp(v, fails[i].name) == 0)
            tsock__sim_cfg.fail = fails[i].err;
}

void
tsock__sim_settings(void)
{
    pthread_once(&cfg_once, load_cfg);
}

void
tsock__dev_sim_set_global_capture(int on)
{
    atomic_store(&tsock__sim_global_capture, on);
}

void
tsock__dev_sim_set_stale_error(void)
{
    atomic_store(&tsock__sim_stale_error, 1);
}

long
tsock__dev_sim_spin_waits(void)
{
    return atomic_load(&tsock__sim_spin_waits);
}

unsigned
tsock__dev_sim_contexts(void)
{
    return atomic_load(&tsock__sim_contexts);
}

/* ---- rule violations ----------------------------------------------------------------------- */

void
tsock__sim_violation(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n*** tsock simulated device (pid %d): RULE BROKEN: %s\n*** at:\n",
            (int)getpid(), msg);
    void *frames[24];
    backtrace_symbols_fd(frames, backtrace(frames, 24), 2);
    abort();
}

/* Whether `pid` still runs. A killed process that its parent has not reaped yet is a zombie:
 * dead for us (its queued work will never run), though kill(pid, 0) still finds it. */
int
tsock__sim_alive(int32_t pid)
{
    if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM))
        return 0;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 1;
    buf[n] = 0;
    const char *end = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces */
    return !(end && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X'));
}

/* ---- shared segments (device memory and events) ------------------------------------------ */

void
tsock__sim_seg_lock(struct seg *s)
{
    if (pthread_mutex_lock(&s->mu) == EOWNERDEAD)
        pthread_mutex_consistent(&s->mu); /* its holder was killed: the tables stay usable */
}

void
tsock__sim_seg_unlock(struct seg *s)
{
    pthread_mutex_unlock(&s->mu);
}

struct seg *
tsock__sim_seg_create(int kind, size_t size, const char **err)
{
    static atomic_uint counter;
    char name[48];
    unsigned number = atomic_fetch_add(&counter, 1);
    snprintf(name, sizeof name, "/tsock-sim-%.20s-%c%d-%u", tsock__sim_cfg.device,
             kind == SEG_MEM ? 'm' : 'e', (int)getpid(), number);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        *err = "shm_open";
        return NULL;
    }
    size_t total = SEG_HEADER + size;
    if (ftruncate(fd, (off_t)total) < 0) {
        close(fd);
        shm_unlink(name);
        *err = "ftruncate";
        return NULL;
    }
    struct seg *s = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED) {
        shm_unlink(name);
        *err = "mmap";
        return NULL;
    }
    s->kind = (uint32_t)kind;
    s->owner = (int32_t)getpid();
    s->size = size;
    s->id = ((uint64_t)(uint32_t)getpid() << 32) | number;
    memcpy(s->name, name, sizeof name);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&s->mu, &a);
    pthread_mutexattr_destroy(&a);
    s->magic = SEG_MAGIC;
    return s;
}

struct seg *
tsock__sim_seg_open(const char *name, int kind)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) < 0 || (size_t)st.st_size < SEG_HEADER) {
        close(fd);
        return NULL;
    }
    struct seg *s = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s == MAP_FAILED)
        return NULL;
    if (s->magic != SEG_MAGIC || s->kind != (uint32_t)kind) {
        munmap(s, (size_t)st.st_size);
        return NULL;
    }
    return s;
}

/* Adds `delta` to this process's opens or pending count of s. */
void
tsock__sim_seg_user(struct seg *s, int pending, int delta)
{
    int32_t me = (int32_t)getpid();
    tsock__sim_seg_lock(s);
    int free_at = -1;
    for (int i = 0; i < SEG_USERS; i++) {
        if (s->users[i].pid == me) {
            free_at = i;
            break;
        }
        if (free_at < 0 && (s->users[i].pid == 0 || !tsock__sim_alive(s->users[i].pid)))
            free_at = i;
    }
    if (free_at < 0) {
        tsock__sim_seg_unlock(s);
        /* A dropped entry would hide a rule broken later: say so instead. */
        tsock__sim_violation("the simulator's table of processes using %s is full (%d entries): "
                             "raise SEG_USERS",
                             s->name, SEG_USERS);
    }
    {
        if (s->users[free_at].pid != me)
            s->users[free_at].pid = me, s->users[free_at].opens = 0, s->users[free_at].pending = 0;
        if (pending)
            s->users[free_at].pending += delta;
        else
            s->users[free_at].opens += delta;
    }
    tsock__sim_seg_unlock(s);
}

/* Whether a live process other than this one has the segment open (opens) or queued work on
 * it (pending); the pid, or 0. */
int32_t
tsock__sim_seg_other_user(struct seg *s, int pending)
{
    int32_t me = (int32_t)getpid(), found = 0;
    tsock__sim_seg_lock(s);
    for (int i = 0; i < SEG_USERS && !found; i++)
        if (s->users[i].pid && s->users[i].pid != me &&
            (pending ? s->users[i].pending : s->users[i].opens) > 0 &&
            tsock__sim_alive(s->users[i].pid))
            found = s->users[i].pid;
    for (int i = 0; pending && i < SEG_READS && !found; i++)
        if (s->reads[i].used && s->reads[i].pid != me && tsock__sim_alive(s->reads[i].pid))
            found = s->reads[i].pid;
    tsock__sim_seg_unlock(s);
    return found;
}

/* ---- this process's device memory --------------------------------------------------------- */

static pthread_mutex_t maps_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mapping *maps;

struct mapping *
tsock__sim_find_mapping(const void *p, int exact)
{
    const uint8_t *q = p;
    pthread_mutex_lock(&maps_mu);
    struct mapping *m = maps;
    for (; m; m = m->next)
        if (exact ? q == m->base : q >= m->base && q < m->base + m->seg->size)
            break;
    pthread_mutex_unlock(&maps_mu);
    return m;
}

void
tsock__sim_add_mapping(struct seg *s, int imported)
{
    struct mapping *m = calloc(1, sizeof *m);
    if (!m)
        abort();
    m->seg = s;
    m->base = (uint8_t *)s + SEG_HEADER;
    m->imported = imported;
    pthread_mutex_lock(&maps_mu);
    m->next = maps;
    maps = m;
    pthread_mutex_unlock(&maps_mu);
}

void
tsock__sim_remove_mapping(struct mapping *gone)
{
    pthread_mutex_lock(&maps_mu);
    for (struct mapping **pp = &maps; *pp; pp = &(*pp)->next)
        if (*pp == gone) {
            *pp = gone->next;
            break;
        }
    pthread_mutex_unlock(&maps_mu);
    size_t total = SEG_HEADER + gone->seg->size;
    munmap(gone->seg, total);
    free(gone);
}

/* Walks this simulated device's objects: removes those whose owner died and that no live
 * process has open (the driver frees a dead process's memory once nobody maps it), and returns
 * the bytes of the device memory that remains. */
size_t
tsock__sim_sweep(void)
{
    tsock__sim_settings();
    size_t used = 0;
    char prefix[48];
    int plen = snprintf(prefix, sizeof prefix, "tsock-sim-%.20s-", tsock__sim_cfg.device);
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        int kind = e->d_name[plen] == 'm' ? SEG_MEM : SEG_EVENT;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        struct seg *s = tsock__sim_seg_open(name, kind);
        if (!s)
            continue;
        size_t size = s->size;
        int gone = (!tsock__sim_alive(s->owner) || (kind == SEG_MEM && atomic_load(&s->freed))) &&
                   s->owner != (int32_t)getpid() && !tsock__sim_seg_other_user(s, 0);
        if (gone)
            shm_unlink(name);
        else if (kind == SEG_MEM)
            used += size;
        munmap(s, SEG_HEADER + size);
    }
    if (d)
        closedir(d);
    return used;
}
