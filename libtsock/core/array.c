/* Growable arrays (see array.h). */
#include <stdlib.h>

#include "core/array.h"

int
tsock__array_grow(void **items, size_t *cap, size_t count, size_t elem)
{
    if (count < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 64;
    void *p = realloc(*items, ncap * elem);
    if (!p)
        return -1;
    *items = p;
    *cap = ncap;
    return 0;
}
