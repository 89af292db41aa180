/* String pools (see strpool.h). */
#include <stdlib.h>
#include <string.h>

#include "core/strpool.h"

int64_t
tsock__strpool_add3(struct tsock__strpool *b, const char *s1, const char *s2, const char *s3)
{
    size_t n1 = s1 ? strlen(s1) : 0, n2 = s2 ? strlen(s2) : 0, n3 = s3 ? strlen(s3) : 0;
    size_t need = b->len + n1 + n2 + n3 + 1;

    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < need)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    int64_t off = (int64_t)b->len;
    char *d = b->p + b->len;
    if (n1)
        memcpy(d, s1, n1);
    if (n2)
        memcpy(d + n1, s2, n2);
    if (n3)
        memcpy(d + n1 + n2, s3, n3);
    d[n1 + n2 + n3] = '\0';
    b->len = need;
    return off;
}
