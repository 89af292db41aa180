/* The record of the files a scan left out, and its log lines (see index_int.h). */
#include <stdint.h>
#include <stdlib.h>

#include "core/core.h"
#include "core/strpool.h"
#include "dataset/index_int.h"

static const char *const reason_text[TSOCK__INDEX_REASONS] = {
    "empty file", "unreadable or not a regular file", "file of 4 GiB or more"};

void
tsock__index_leftout_add(struct tsock__index_leftout *l, int reason, const char *a, const char *b,
                         const char *c)
{
    l->count[reason]++;
    if (l->examples[reason] < TSOCK__INDEX_LOG_EXAMPLES) {
        struct tsock__strpool s = {0};
        if (tsock__strpool_add3(&s, a, b, c) >= 0)
            l->example[reason][l->examples[reason]++] = s.p;
    }
}

void
tsock__index_leftout_free(struct tsock__index_leftout *l)
{
    for (int r = 0; r < TSOCK__INDEX_REASONS; r++)
        for (uint32_t i = 0; i < l->examples[r]; i++)
            free(l->example[r][i]);
}

void
tsock__index_leftout_log(struct tsock__index_leftout *parts, size_t nparts, size_t stride,
                         const char *where)
{
    for (int r = 0; r < TSOCK__INDEX_REASONS; r++) {
        uint64_t total = 0;
        uint32_t logged = 0;
        for (size_t i = 0; i < nparts; i++) {
            struct tsock__index_leftout *l =
                (struct tsock__index_leftout *)((char *)parts + i * stride);
            total += l->count[r];
            for (uint32_t k = 0; k < l->examples[r] && logged < TSOCK__INDEX_LOG_EXAMPLES; k++) {
                tsock__log(TSOCK_LOG_WARN, "index: left out (%s): %s", reason_text[r],
                           l->example[r][k]);
                logged++;
            }
        }
        if (total)
            tsock__log(TSOCK_LOG_WARN, "index: %s: left out %llu file%s (%s)", where,
                       (unsigned long long)total, total == 1 ? "" : "s", reason_text[r]);
    }
}
