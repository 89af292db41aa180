/* The file reader: reads whole files into caller-provided buffers, many at a time.
 *
 * One reader belongs to one thread (a producer's reading thread, or one worker); readers share
 * nothing, so several may run side by side. The caller owns every buffer and keeps at most
 * `depth` files' reads in flight per reader, so memory stays bounded whatever the dataset.
 *
 * Two ways to read, with the same results:
 *  - io_uring (when built with liburing): each request is a linked pair of operations, an
 *    openat into a direct descriptor (a slot of a registered file table, IORING_OP_OPENAT with
 *    file_index) and a read from that slot (IOSQE_FIXED_FILE), so a file costs two SQEs
 *    submitted together and two CQEs. No close is queued: opening the next file into the
 *    same slot closes the previous one, and io_uring_queue_exit closes the rest (so up to
 *    `depth` files stay open between calls). Up to `depth` pairs
 *    are in flight, submitted in batches. IORING_FILE_INDEX_ALLOC is not used because the
 *    linked read must name its slot before the open has run. Needs Linux 5.15 for direct
 *    opens and 5.19 for sparse file tables (Debian 12 ships 6.1), and liburing 2.2 or later
 *    (Debian 12 has 2.3). A kernel that looks a linked read's fixed file up at submission,
 *    before the open has filled the slot, fails those reads with EBADF; each such file is
 *    then read with pread (logged once), so results stay right, only slower.
 *  - pread: open, pread until the end of the file, close; one request after the other.
 *
 * TSOCK__IO_AUTO uses io_uring when it works and falls back to pread with a log line when it
 * does not (io_uring_queue_init fails with ENOSYS on old kernels or gVisor, EPERM under a
 * seccomp filter or with kernel.io_uring_disabled, or an operation is not supported).
 *
 * A range request (a member of a tar shard) reads one known byte range: one open and one read
 * at an offset, like any other request, and never the exact pread pass below.
 *
 * A request reads the whole file as it is now, which may differ from the size the index
 * recorded (`expected`): a file that grew or shrank but fits in `capacity` is read entirely
 * and its new size reported. One that no longer fits fails with -EFBIG and reports its real
 * size, so the caller may retry with a larger buffer. The first read asks for `capacity`
 * bytes; when it returns exactly `expected` bytes, fewer than asked, the end of the file has
 * been reached and the request is done. Any other outcome (a size change, a buffer filled to
 * the last byte, an unknown expected size) is settled by reading the file again with pread
 * until read returns 0, which costs one more open but is exact. So pass capacity >= expected
 * + 1 for the one-read path.
 */
#ifndef TSOCK_IO_READER_H
#define TSOCK_IO_READER_H

#include <stddef.h>
#include <stdint.h>

enum tsock__io_mode {
    TSOCK__IO_AUTO = 0,  /* io_uring if it works, else pread (logged) */
    TSOCK__IO_URING = 1, /* io_uring or fail */
    TSOCK__IO_PREAD = 2  /* pread */
};

/* The most requests in flight per reader. */
#define TSOCK__IO_MAX_DEPTH 4096

struct tsock__read_req {
    /* In. */
    const char *path;  /* relative to the reader's directory, or absolute; valid during the call */
    uint64_t expected; /* size the index recorded; 0 if unknown */
    void *buf;         /* where the file's bytes go; owned by the caller */
    size_t capacity;   /* bytes available at buf */
    int prefix;        /* non-zero: read only the first `capacity` bytes (or the whole file
                        * when shorter); result is the bytes read, file_size 0 */
    int range;         /* non-zero: read exactly `capacity` bytes at `offset` (a member of a
                        * tar shard); result is capacity, or -EPROTO when the file ends
                        * first (it was truncated since it was indexed); file_size 0 */
    uint64_t offset;   /* with range: where the bytes start */
    /* Out. */
    int64_t result;     /* bytes read (the whole file), or a negated errno: -ENOENT, -EISDIR,
                         * -EACCES, -EFBIG (larger than capacity), -EIO, ... */
    uint64_t file_size; /* the file's size as found (with -EFBIG too); 0 on other errors */
};

struct tsock__reader_stats {
    uint64_t files;     /* requests completed */
    uint64_t bytes;     /* bytes read by successful requests */
    uint64_t errors;    /* requests that ended with a negative result */
    uint64_t rechecked; /* requests settled by the exact pread pass (see above) */
};

struct tsock__reader;

/* Creates a reader for files relative to `dir` (NULL: the current directory), with up to
 * `depth` (1..TSOCK__IO_MAX_DEPTH) requests in flight. `mode` is an enum tsock__io_mode.
 * Returns 0 and sets *out (owned by the caller), or -EINVAL, -ENOMEM, a negated errno from
 * opening `dir`, or, for TSOCK__IO_URING, the reason io_uring cannot be used (-ENOSYS when
 * built without liburing). Any thread; the reader is then used by one thread at a time. */
int tsock__reader_create(struct tsock__reader **out, int mode, unsigned depth, const char *dir);

/* The way this reader reads: TSOCK__IO_URING or TSOCK__IO_PREAD. */
int tsock__reader_mode(const struct tsock__reader *r);

/* Reads each of the n requests' files into its buffer and fills in result and file_size.
 * Requests complete in any order; each fails or succeeds on its own. Returns the number of
 * requests whose result is >= 0, or -EINVAL for bad arguments (then no request was read). */
int tsock__reader_read(struct tsock__reader *r, struct tsock__read_req *reqs, size_t n);

/* Called once per request, on the calling thread, as soon as that request is settled (its
 * result and file_size are final), with the request's position in the array. */
typedef void (*tsock__read_done_fn)(void *arg, size_t i);

/* tsock__reader_read, calling `done` (when not NULL) as each request completes, so that the
 * caller can hand files on while others are still being read. */
int tsock__reader_read_each(struct tsock__reader *r, struct tsock__read_req *reqs, size_t n,
                            tsock__read_done_fn done, void *arg);

/* Totals since creation. */
void tsock__reader_stats(const struct tsock__reader *r, struct tsock__reader_stats *out);

/* Closes every file and frees the reader; NULL does nothing. */
void tsock__reader_destroy(struct tsock__reader *r);

#endif
