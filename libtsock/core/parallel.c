/* Fork-join thread pool (see parallel.h). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/parallel.h"

struct par {
    void (*fn)(void *ctx, size_t item, char *scratch);
    void *ctx;
    size_t items;
    size_t scratch_size;
    atomic_size_t next;
};

int
tsock__parallel_threads(int threads)
{
    if (threads > 0)
        return threads > TSOCK__PARALLEL_MAX_THREADS ? TSOCK__PARALLEL_MAX_THREADS : threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > 64 ? 64 : (int)n);
}

static void *
par_thread(void *arg)
{
    struct par *p = arg;
    char *scratch = malloc(p->scratch_size);
    if (!scratch)
        return (void *)1;
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->items)
            break;
        p->fn(p->ctx, i, scratch);
    }
    free(scratch);
    return NULL;
}

int
tsock__parallel_for(int threads, size_t items, size_t scratch_size,
                    void (*fn)(void *, size_t, char *), void *ctx)
{
    struct par p = {.fn = fn, .ctx = ctx, .items = items, .scratch_size = scratch_size};
    pthread_t tid[TSOCK__PARALLEL_MAX_THREADS];
    int started = 0, failed = 0;

    atomic_init(&p.next, 0);
    if (threads > TSOCK__PARALLEL_MAX_THREADS)
        threads = TSOCK__PARALLEL_MAX_THREADS;
    if ((size_t)threads > items)
        threads = items ? (int)items : 1;
    /* The helpers take no signals: those are for the application's threads (the caller's
     * handler may cancel the work, see tsock_pipeline_cancel). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int i = 1; i < threads; i++) {
        if (pthread_create(&tid[started], NULL, par_thread, &p) != 0)
            break; /* fewer threads is still correct */
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (par_thread(&p) != NULL)
        failed = 1;
    for (int i = 0; i < started; i++) {
        void *ret;
        pthread_join(tid[i], &ret);
        if (ret != NULL)
            failed = 1;
    }
    /* A thread that could not get its scratch buffer did no work; if every thread failed,
     * items are left undone, which the caller sees as missing results: report it. */
    if (failed && atomic_load(&p.next) < items)
        return -ENOMEM;
    return 0;
}
