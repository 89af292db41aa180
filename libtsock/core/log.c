/* The process-wide log hook. The library never prints: every diagnostic goes here, and is
 * dropped unless the application installed a callback. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#include "core/core.h"

struct log_sink {
    tsock_log_fn fn;
    void *user;
    int max_level;
};

/* Swapped whole under a pointer so service threads never see a half-written sink. */
static struct log_sink sinks[2];
static _Atomic(struct log_sink *) current_sink;
static atomic_int sink_generation;

void
tsock_set_log(tsock_log_fn fn, void *user, int max_level)
{
    int next = atomic_fetch_add(&sink_generation, 1) & 1;
    sinks[next].fn = fn;
    sinks[next].user = user;
    sinks[next].max_level = max_level;
    atomic_store(&current_sink, fn ? &sinks[next] : NULL);
}

void
tsock__log(int level, const char *fmt, ...)
{
    struct log_sink *sink = atomic_load(&current_sink);
    if (!sink || level > sink->max_level)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sink->fn(sink->user, level, line);
}
