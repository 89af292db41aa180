/* Files and paths: reading a whole file, the directory part of a path, file timestamps.
 *
 * Contract: tsock__dir_of and the time helpers do no I/O (tsock__dir_of only allocates), so
 * pure decoders may use them; tsock__read_whole reads from a descriptor the caller owns and
 * leaves open. All are thread-safe.
 */
#ifndef TSOCK_CORE_FILE_H
#define TSOCK_CORE_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* Reads the whole regular file open on `fd` (from its current offset) into a malloc'ed
 * buffer with a NUL after the data: *out (owned by the caller) and *size (without the NUL).
 * A file that grows while read is read up to `limit`. Returns 0, -EINVAL (not a regular
 * file), -EFBIG (`limit` bytes or more), -ENOMEM, or a negated errno from fstat or read. */
int tsock__read_whole(int fd, size_t limit, char **out, size_t *size);

/* The directory part of a path, as a malloc'ed string: "." when it has no '/', "/" when its
 * only '/' is the first byte. Returns NULL when out of memory. */
char *tsock__dir_of(const char *path);

/* A stat result's modification time in nanoseconds since the epoch. */
int64_t tsock__stat_mtime_ns(const struct stat *st);

/* CLOCK_REALTIME in nanoseconds: the clock file timestamps are on (unlike tsock__now_ns). */
int64_t tsock__realtime_ns(void);

#endif
