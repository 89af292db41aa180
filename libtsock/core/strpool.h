/* A string pool: a growable byte arena of NUL-terminated strings addressed by offset.
 *
 * Contract: strings are referred to by their offset from the start, never by pointer, because
 * the arena moves when it grows. Start from a zeroed struct; the arena (`p`, `len` bytes used
 * of `cap`) belongs to the pool's owner, who frees it with free(p), or takes `p` over as a
 * plain malloc'ed string buffer. Not thread-safe (one pool per thread).
 */
#ifndef TSOCK_CORE_STRPOOL_H
#define TSOCK_CORE_STRPOOL_H

#include <stddef.h>
#include <stdint.h>

struct tsock__strpool {
    char *p;
    size_t len, cap;
};

/* Appends the concatenation of up to three strings (NULL counts as "") and one NUL. Returns
 * the new string's offset, or -1 when out of memory (the pool is then unchanged). */
int64_t tsock__strpool_add3(struct tsock__strpool *b, const char *s1, const char *s2,
                            const char *s3);

#endif
