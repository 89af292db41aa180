/* Clocks, checked arithmetic and the seeded mixing function. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "core/core.h"

uint64_t
tsock__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int
tsock__mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return -EOVERFLOW;
    *out = a * b;
    return 0;
}

void *
tsock__realloc_or_keep(void *old, size_t bytes, int *failed)
{
    void *grown = realloc(old, bytes);
    if (grown)
        return grown;
    *failed = 1;
    return old;
}

size_t
tsock__align_up(size_t n, size_t align)
{
    return (n + align - 1) & ~(align - 1);
}

uint64_t
tsock__mix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15u;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

int
tsock__name_is_printable(const char *name)
{
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (*c < 0x20 || *c == 0x7F)
            return 0;
    return 1;
}
