/* Small shared utilities: logging, clocks, checked arithmetic. Internal to libtsock. */
#ifndef TSOCK_CORE_H
#define TSOCK_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "tsock/tsock.h"

#if defined(__GNUC__)
#define TSOCK__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TSOCK__PRINTF(a, b)
#endif

/* Formats a line and hands it to the user's log callback (if any, and if `level` passes). */
void tsock__log(int level, const char *fmt, ...) TSOCK__PRINTF(2, 3);

/* Monotonic clock in nanoseconds. */
uint64_t tsock__now_ns(void);

/* a * b into *out; returns 0, or -EOVERFLOW when it does not fit in size_t. */
int tsock__mul_size(size_t a, size_t b, size_t *out);

/* Rounds n up to a multiple of `align` (a power of two). */
size_t tsock__align_up(size_t n, size_t align);

/* realloc(old, bytes) for a buffer grown among several: returns the new block, or on failure
 * `old` unchanged (still valid, still the caller's) with *failed set to 1. *failed is never
 * cleared, so one flag collects the failures of a row of calls. */
void *tsock__realloc_or_keep(void *old, size_t bytes, int *failed);

/* Whether a name holds no control bytes (0x00-0x1F, 0x7F): the wire refuses them. */
int tsock__name_is_printable(const char *name);

/* splitmix64: the one mixing function every seeded decision derives from. */
uint64_t tsock__mix64(uint64_t x);

#endif
