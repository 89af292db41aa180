/* A small fork-join thread pool: run one function over the items 0..n-1 on several threads.
 *
 * Contract: tsock__parallel_for starts its threads, runs the work on them and on the calling
 * thread, and joins them all before it returns; nothing outlives the call. Items are handed
 * out one at a time from a shared counter, so which thread runs an item, and in what order,
 * depends on timing: each item's result must not (write it to a per-item slot). The function
 * must not fail for lack of threads: when a thread cannot be started, fewer threads do the
 * work. Callable from any thread; the pool keeps no global state.
 */
#ifndef TSOCK_CORE_PARALLEL_H
#define TSOCK_CORE_PARALLEL_H

#include <stddef.h>

/* The most threads tsock__parallel_for starts for one call. */
#define TSOCK__PARALLEL_MAX_THREADS 256

/* The thread count to use for a request of `threads`: the request itself, capped at
 * TSOCK__PARALLEL_MAX_THREADS, or when it is 0 or negative one per online CPU (at most 64). */
int tsock__parallel_threads(int threads);

/* Runs fn(ctx, item, scratch) for item = 0..items-1 on up to `threads` threads (the caller
 * among them; never more threads than items). Each thread gets its own malloc'ed scratch
 * buffer of `scratch_size` bytes (> 0), which fn may use freely during the call. Returns 0, or
 * -ENOMEM when items were left undone because no thread could get its scratch buffer. */
int tsock__parallel_for(int threads, size_t items, size_t scratch_size,
                        void (*fn)(void *ctx, size_t item, char *scratch), void *ctx);

#endif
