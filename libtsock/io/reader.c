/* The file reader (see reader.h): io_uring with linked open+read pairs, and pread.
 *
 * io_uring bookkeeping. Each request in flight owns one slot of the registered file table
 * and one entry of `slots`; its two SQEs carry user_data = slot << 1 | op, and both always
 * post a CQE (open: its result; read: its result, or -ECANCELED when the open failed). A
 * request is finished, and its slot handed on, only when both CQEs have arrived, so no late
 * CQE can be taken for the next request's. IOSQE_CQE_SKIP_SUCCESS would save the open's CQE,
 * but with it a failed open's cancelled read posts no CQE on some kernels and does on others,
 * and one spare CQE per file costs nothing next to opening the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(TSOCK_HAVE_URING) && TSOCK_HAVE_URING
#define USE_URING 1
#include <liburing.h>
#else
#define USE_URING 0
#endif

#include "core/core.h"
#include "io/reader.h"

/* Linux transfers at most this much per read call (MAX_RW_COUNT). */
#define MAX_RW 0x7FFFF000u

/* result of a request still being read */
#define PENDING INT64_MIN
/* result of a request that the exact pread pass must settle */
#define RECHECK (INT64_MIN + 1)

#if USE_URING
enum { OP_OPEN = 0, OP_READ = 1 };

struct uslot {
    size_t req;
    uint32_t len;
    int open_seen;
    int open_res;
    int read_seen;
    int read_res;
};
#endif

struct tsock__reader {
    int mode;
    int dir_fd;
    unsigned depth;
    struct tsock__reader_stats stats;
#if USE_URING
    struct io_uring ring;
    int ring_ready;
    struct uslot *slots;
    uint32_t *free_slots;
    unsigned nfree;
    int badf_logged;
#endif
    /* The completion callback of the tsock__reader_read_each call in progress. */
    tsock__read_done_fn done;
    void *done_arg;
    struct tsock__read_req *reqs;
};

/* ---------------------------------------------------------------------------------------- */
/* pread                                                                                     */
/* ---------------------------------------------------------------------------------------- */

static void
finish(struct tsock__reader *r, struct tsock__read_req *q, int64_t result, uint64_t size)
{
    q->result = result;
    q->file_size = size;
    r->stats.files++;
    if (result >= 0)
        r->stats.bytes += (uint64_t)result;
    else
        r->stats.errors++;
    if (r->done)
        r->done(r->done_arg, (size_t)(q - r->reqs));
}

/* Reads a range request with pread: exactly capacity bytes at offset. */
static void
pread_range(struct tsock__reader *r, struct tsock__read_req *q)
{
    int fd = openat(r->dir_fd, q->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        finish(r, q, -errno, 0);
        return;
    }
    uint64_t total = 0;
    int64_t result = 0;
    while (total < q->capacity) {
        size_t want = q->capacity - total > MAX_RW ? MAX_RW : (size_t)(q->capacity - total);
        ssize_t n = pread(fd, (char *)q->buf + total, want, (off_t)(q->offset + total));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            result = n < 0 ? -errno : -EPROTO;
            break;
        }
        total += (uint64_t)n;
    }
    close(fd);
    finish(r, q, result < 0 ? result : (int64_t)total, 0);
}

/* Reads one whole file with pread. With trust_expected, a first read that returns exactly
 * `expected` bytes, fewer than asked, ends the request (the end of the file was reached);
 * otherwise reading goes on until read returns 0 or the buffer is full. */
static void
pread_one(struct tsock__reader *r, struct tsock__read_req *q, int trust_expected)
{
    uint64_t total = 0;
    int64_t result = 0;
    struct stat st;
    int fd;

    /* O_NOCTTY: a path swapped for a terminal device must not become our controlling tty. */
    fd = openat(r->dir_fd, q->path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        finish(r, q, -errno, 0);
        return;
    }
    for (;;) {
        if (total == q->capacity && q->prefix)
            break;
        if (total == q->capacity) {
            /* Full: the file either ends here or does not fit. */
            char one;
            ssize_t n = pread(fd, &one, 1, (off_t)total);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                result = -errno;
            } else if (n > 0) {
                result = -EFBIG;
                /* It may still be growing: report at least what was seen. */
                total = fstat(fd, &st) == 0 && (uint64_t)st.st_size > total ? (uint64_t)st.st_size
                                                                            : total + 1;
            }
            break;
        }
        size_t want = q->capacity - total;
        if (want > MAX_RW)
            want = MAX_RW;
        ssize_t n = pread(fd, (char *)q->buf + total, want, (off_t)total);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            result = -errno;
            break;
        }
        if (n == 0)
            break;
        total += (uint64_t)n;
        if (trust_expected && total == (uint64_t)n && (size_t)n < want && q->expected &&
            total == q->expected)
            break;
    }
    close(fd);
    if (result == 0)
        result = (int64_t)total;
    finish(r, q, result, (result >= 0 && !q->prefix) || result == -EFBIG ? total : 0);
}

/* ---------------------------------------------------------------------------------------- */
/* io_uring                                                                                  */
/* ---------------------------------------------------------------------------------------- */

#if USE_URING
/* Sets the ring up; returns 0 or the reason io_uring cannot be used. */
static int
uring_setup(struct tsock__reader *r)
{
    struct io_uring_params p;
    unsigned entries = 2 * r->depth;
    int e;

    memset(&p, 0, sizeof p);
    /* COOP_TASKRUN: completions are processed when we enter the kernel anyway, so no IPI is
     * needed to interrupt us for them (5.19); retried without on older kernels. */
    p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
    e = io_uring_queue_init_params(entries, &r->ring, &p);
    if (e == -EINVAL) {
        memset(&p, 0, sizeof p);
        e = io_uring_queue_init_params(entries, &r->ring, &p);
    }
    if (e < 0)
        return e;
    r->ring_ready = 1;

    struct io_uring_probe *probe = io_uring_get_probe_ring(&r->ring);
    int ok = probe && io_uring_opcode_supported(probe, IORING_OP_OPENAT) &&
             io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe)
        io_uring_free_probe(probe);
    if (!ok)
        return -EOPNOTSUPP;
    e = io_uring_register_files_sparse(&r->ring, r->depth);
    if (e < 0)
        return e;
    r->slots = calloc(r->depth, sizeof *r->slots);
    r->free_slots = malloc(r->depth * sizeof *r->free_slots);
    if (!r->slots || !r->free_slots)
        return -ENOMEM;
    for (unsigned i = 0; i < r->depth; i++)
        r->free_slots[i] = r->depth - 1 - i;
    r->nfree = r->depth;
    return 0;
}

static void
uring_teardown(struct tsock__reader *r)
{
    if (r->ring_ready)
        io_uring_queue_exit(&r->ring);
    r->ring_ready = 0;
    free(r->slots);
    free(r->free_slots);
    r->slots = NULL;
    r->free_slots = NULL;
}

/* Settles the request of a slot whose CQEs have all arrived and frees the slot. */
static void
uring_complete(struct tsock__reader *r, struct tsock__read_req *reqs, uint32_t slot)
{
    struct uslot *s = &r->slots[slot];
    struct tsock__read_req *q = &reqs[s->req];

    if (s->open_res < 0) {
        finish(r, q, s->open_res, 0);
    } else if (s->read_res >= 0) {
        uint32_t n = (uint32_t)s->read_res;
        if (q->range && n == q->capacity)
            finish(r, q, n, 0);
        else if (q->range)
            q->result = RECHECK; /* a short read: pread_range goes on or finds the end */
        else if (q->prefix && (n == s->len || n == q->expected))
            finish(r, q, n, 0); /* what was asked for, or the whole (known-size) file */
        else if (n < s->len && q->expected && n == q->expected)
            finish(r, q, n, n);
        else
            q->result = RECHECK; /* size changed, buffer full, or size unknown */
    } else if (s->read_res == -EBADF || s->read_res == -ECANCELED || s->read_res == -EAGAIN ||
               s->read_res == -EINTR) {
        /* -EBADF after a successful open: a kernel that looks the fixed file up when the
         * link is submitted, before the open has filled the slot (older kernels). */
        if (s->read_res == -EBADF && !r->badf_logged) {
            r->badf_logged = 1;
            tsock__log(TSOCK_LOG_WARN, "reader: io_uring cannot read a file opened in the same "
                                       "link on this kernel; such files are re-read with pread");
        }
        q->result = RECHECK;
    } else {
        finish(r, q, s->read_res, 0);
    }
    r->free_slots[r->nfree++] = slot;
}

/* Handles one CQE; returns 1 when it finished a request. */
static int
uring_cqe(struct tsock__reader *r, struct tsock__read_req *reqs, const struct io_uring_cqe *cqe)
{
    uint32_t slot = (uint32_t)(cqe->user_data >> 1);
    struct uslot *s;

    if (slot >= r->depth)
        return 0; /* not ours; cannot happen */
    s = &r->slots[slot];
    if ((cqe->user_data & 1) == OP_OPEN) {
        s->open_seen = 1;
        s->open_res = cqe->res < 0 ? cqe->res : 0;
    } else {
        s->read_seen = 1;
        s->read_res = cqe->res;
    }
    if (!s->read_seen || !s->open_seen)
        return 0;
    uring_complete(r, reqs, slot);
    return 1;
}

/* How long io_uring may keep refusing submissions, without completing anything, before the
 * reader gives up on it (a ring in that state is broken; submissions normally fail only for
 * a moment, with EAGAIN or EBUSY, until completions are reaped). */
#define URING_STUCK_ROUNDS 500
#define URING_STUCK_WAIT_NS 10000000

/* Reads every request through the ring. Returns 0, or a negated errno when the ring stopped
 * working; requests it did not finish are then left PENDING. */
static int
uring_read(struct tsock__reader *r, struct tsock__read_req *reqs, size_t n)
{
    size_t next = 0;
    unsigned inflight = 0;
    int stuck = 0;

    while (next < n || inflight) {
        while (next < n && r->nfree && io_uring_sq_space_left(&r->ring) >= 2) {
            struct tsock__read_req *q = &reqs[next];
            uint32_t slot = r->free_slots[--r->nfree];
            struct uslot *s = &r->slots[slot];
            struct io_uring_sqe *open_sqe = io_uring_get_sqe(&r->ring);
            struct io_uring_sqe *read_sqe = io_uring_get_sqe(&r->ring);

            *s = (struct uslot){.req = next,
                                .len = q->capacity > MAX_RW ? MAX_RW : (uint32_t)q->capacity};
            /* No O_CLOEXEC: direct descriptors are not in the fd table, and the kernel
             * rejects the flag for them. */
            io_uring_prep_openat_direct(open_sqe, r->dir_fd, q->path, O_RDONLY | O_NOCTTY, 0, slot);
            open_sqe->flags |= IOSQE_IO_LINK;
            io_uring_sqe_set_data64(open_sqe, (uint64_t)slot << 1 | OP_OPEN);
            io_uring_prep_read(read_sqe, (int)slot, q->buf, s->len, q->range ? q->offset : 0);
            read_sqe->flags |= IOSQE_FIXED_FILE;
            io_uring_sqe_set_data64(read_sqe, (uint64_t)slot << 1 | OP_READ);
            next++;
            inflight++;
        }
        /* Submits what is queued and waits for one completion, in one system call. */
        int e = io_uring_submit_and_wait(&r->ring, 1);
        if (e < 0 && e != -EINTR) {
            struct io_uring_cqe *cqe;
            struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = URING_STUCK_WAIT_NS};
            if (++stuck > URING_STUCK_ROUNDS) {
                tsock__log(TSOCK_LOG_ERROR, "reader: io_uring keeps failing: %s", strerror(-e));
                return e;
            }
            /* Let completions free up room (EBUSY, EAGAIN); bounded, since what is queued
             * may not have reached the kernel and so may never complete. */
            if (io_uring_cq_ready(&r->ring) == 0)
                io_uring_wait_cqe_timeout(&r->ring, &cqe, &ts);
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&r->ring, head, cqe)
        {
            inflight -= (unsigned)uring_cqe(r, reqs, cqe);
            seen++;
        }
        io_uring_cq_advance(&r->ring, seen);
        if (seen)
            stuck = 0;
    }
    return 0;
}
#endif

/* ---------------------------------------------------------------------------------------- */
/* Public                                                                                    */
/* ---------------------------------------------------------------------------------------- */

int
tsock__reader_create(struct tsock__reader **out, int mode, unsigned depth, const char *dir)
{
    struct tsock__reader *r;

    if (!out || depth < 1 || depth > TSOCK__IO_MAX_DEPTH ||
        (mode != TSOCK__IO_AUTO && mode != TSOCK__IO_URING && mode != TSOCK__IO_PREAD))
        return -EINVAL;
    *out = NULL;
    r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->depth = depth;
    r->dir_fd = AT_FDCWD;
    if (dir) {
        /* O_PATH: the descriptor only anchors relative paths, it is never read. */
        r->dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (r->dir_fd < 0) {
            int e = -errno;
            free(r);
            return e;
        }
    }
    r->mode = TSOCK__IO_PREAD;
    if (mode != TSOCK__IO_PREAD) {
#if USE_URING
        int e = uring_setup(r);
        if (e == 0) {
            r->mode = TSOCK__IO_URING;
        } else {
            uring_teardown(r);
            if (mode == TSOCK__IO_URING) {
                tsock__log(TSOCK_LOG_ERROR, "reader: io_uring unavailable: %s", strerror(-e));
                tsock__reader_destroy(r);
                return e;
            }
            tsock__log(TSOCK_LOG_WARN, "reader: io_uring unavailable (%s); reading with pread",
                       strerror(-e));
        }
#else
        if (mode == TSOCK__IO_URING) {
            tsock__log(TSOCK_LOG_ERROR, "reader: built without io_uring (liburing not found)");
            tsock__reader_destroy(r);
            return -ENOSYS;
        }
        tsock__log(TSOCK_LOG_INFO, "reader: built without io_uring; reading with pread");
#endif
    }
    *out = r;
    return 0;
}

int
tsock__reader_mode(const struct tsock__reader *r)
{
    return r->mode;
}

int
tsock__reader_read(struct tsock__reader *r, struct tsock__read_req *reqs, size_t n)
{
    return tsock__reader_read_each(r, reqs, n, NULL, NULL);
}

int
tsock__reader_read_each(struct tsock__reader *r, struct tsock__read_req *reqs, size_t n,
                        tsock__read_done_fn done, void *arg)
{
    int ok = 0;

    if (!r || (n && !reqs))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!reqs[i].path || (!reqs[i].buf && reqs[i].capacity))
            return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        reqs[i].result = PENDING;
        reqs[i].file_size = 0;
    }
    r->done = done;
    r->done_arg = arg;
    r->reqs = reqs;
#if USE_URING
    if (r->mode == TSOCK__IO_URING) {
        int e = uring_read(r, reqs, n);
        if (e != 0) {
            /* The ring is broken. Requests it may still be working on fail with its error
             * (their buffers could still be written, so they are not re-read into them); the
             * ring stays allocated until destroy, and later calls use pread. */
            tsock__log(TSOCK_LOG_WARN, "reader: giving up on io_uring; reading with pread");
            r->mode = TSOCK__IO_PREAD;
            for (size_t i = 0; i < n; i++)
                if (reqs[i].result == PENDING)
                    finish(r, &reqs[i], e, 0);
        }
    }
#endif
    for (size_t i = 0; i < n; i++) {
        if (reqs[i].range && (reqs[i].result == RECHECK || reqs[i].result == PENDING)) {
            r->stats.rechecked += reqs[i].result == RECHECK;
            pread_range(r, &reqs[i]);
        } else if (reqs[i].result == RECHECK) {
            r->stats.rechecked++;
            pread_one(r, &reqs[i], 0);
        } else if (reqs[i].result == PENDING) {
            pread_one(r, &reqs[i], 1);
        }
        ok += reqs[i].result >= 0;
    }
    r->done = NULL;
    r->reqs = NULL;
    return ok;
}

void
tsock__reader_stats(const struct tsock__reader *r, struct tsock__reader_stats *out)
{
    *out = r->stats;
}

void
tsock__reader_destroy(struct tsock__reader *r)
{
    if (!r)
        return;
#if USE_URING
    uring_teardown(r);
#endif
    if (r->dir_fd >= 0)
        close(r->dir_fd);
    free(r);
}
