/* Growable arrays of fixed-size elements, for code that builds a table of unknown length.
 *
 * Contract: the array is three variables the caller owns (`items`, `cap`, `count`); the
 * elements are plain bytes, moved by realloc, so pointers into the array are invalid after a
 * call that grows it. Start from items = NULL, cap = 0; free(items) when done. Not thread-safe
 * (one array per thread, or a lock around it).
 */
#ifndef TSOCK_CORE_ARRAY_H
#define TSOCK_CORE_ARRAY_H

#include <stddef.h>

/* Makes room for one more element of `elem` bytes in the array `*items` of capacity `*cap`
 * holding `count` elements: when full, doubles the capacity (64 elements at first) and
 * updates *items and *cap. Returns 0, or -1 when out of memory (the array is then unchanged). */
int tsock__array_grow(void **items, size_t *cap, size_t count, size_t elem);

#endif
