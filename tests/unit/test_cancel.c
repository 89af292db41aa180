/* Cancelling blocked calls: tsock_consumer_cancel stops a start that waits for a producer that
 * never comes and a next that waits for a batch that never comes; tsock_producer_cancel stops
 * wait_consumers and acquire; tsock_pipeline_cancel stops an open. Each cancel comes once from
 * another thread and once from a signal handler (SIGUSR1 sent to the waiting thread), as
 * Ctrl-C would. Every wait here is forever (-1), so a cancel that does not work hangs the test
 * until ctest's timeout fails it; no timing decides a result. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "tsock/pipeline.h"
#include "tsock/tsock.h"

#define BATCH 4
#define SLOTS 2

static char endpoint[256];

static void
make_endpoint(void)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "cancel");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/p.sock", dir);
}

static void
sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- who cancels ------------------------------------------------------------------------- */

/* What the cancelling thread or signal handler stops. */
static tsock_consumer *_Atomic g_consumer;
static tsock_producer *_Atomic g_producer;
static atomic_int g_handled; /* signals the handler took */

static void
on_sigusr1(int sig)
{
    (void)sig;
    tsock_consumer *c = atomic_load(&g_consumer);
    if (c)
        tsock_consumer_cancel(c);
    tsock_producer *p = atomic_load(&g_producer);
    if (p)
        tsock_producer_cancel(p);
    atomic_fetch_add(&g_handled, 1);
}

enum how { FROM_THREAD, FROM_SIGNAL };

struct canceller {
    enum how how;
    pthread_t target; /* the waiting thread, for FROM_SIGNAL */
    pthread_t thread;
};

/* Gives the waiting thread a moment to block (so the cancel usually meets a wait in progress;
 * one that comes first must work as well), then cancels once. */
static void *
canceller_main(void *arg)
{
    struct canceller *k = arg;
    sleep_ms(100);
    if (k->how == FROM_SIGNAL) {
        pthread_kill(k->target, SIGUSR1);
    } else {
        tsock_consumer *c = atomic_load(&g_consumer);
        if (c)
            tsock_consumer_cancel(c);
        tsock_producer *p = atomic_load(&g_producer);
        if (p)
            tsock_producer_cancel(p);
    }
    return NULL;
}

static void
cancel_soon(struct canceller *k, enum how how)
{
    k->how = how;
    k->target = pthread_self();
    CHECK_EQ(pthread_create(&k->thread, NULL, canceller_main, k), 0);
}

static void
canceller_join(struct canceller *k)
{
    pthread_join(k->thread, NULL);
}

/* ---- consumer ---------------------------------------------------------------------------- */

/* A start waiting forever for a producer that never comes. */
static void
test_start(enum how how)
{
    make_endpoint();
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    atomic_store(&g_consumer, c);
    int handled = atomic_load(&g_handled);
    struct canceller k;
    cancel_soon(&k, how);
    CHECK_EQ(tsock_consumer_start(c, -1), TSOCK_E_CANCELLED);
    canceller_join(&k);
    if (how == FROM_SIGNAL)
        CHECK_EQ(atomic_load(&g_handled), handled + 1);
    /* The cancel was consumed by the start it stopped; the consumer is not startable again. */
    CHECK_EQ(tsock_consumer_start(c, 0), TSOCK_E_STATE);
    atomic_store(&g_consumer, NULL);
    tsock_consumer_destroy(c);
}

/* A cancel before start: start returns at once and the consumer is still startable. */
static void
test_cancel_before_start(void)
{
    make_endpoint();
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    tsock_consumer_cancel(c);
    tsock_consumer_cancel(c); /* several count as one */
    CHECK_EQ(tsock_consumer_start(c, -1), TSOCK_E_CANCELLED);
    CHECK_EQ(tsock_consumer_start(c, 0), -ETIMEDOUT); /* consumed: waits again (no producer) */
    tsock_consumer_destroy(c);
    tsock_consumer_cancel(NULL); /* does nothing */
    tsock_producer_cancel(NULL);
    tsock_pipeline_cancel(NULL);
}

static tsock_producer *
start_producer(void)
{
    tsock_layout *layout;
    CHECK_EQ(tsock_layout_create(&layout), 0);
    CHECK_EQ(tsock_layout_add(layout, "index", TSOCK_INT64, 0, NULL), 0);
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, SLOTS), 0);
    tsock_layout_destroy(layout);
    CHECK_EQ(tsock_producer_set_sampler(p, 100, 1, 0), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    return p;
}

static void
publish_one(tsock_producer *p)
{
    tsock_slot *slot;
    CHECK_EQ(tsock_producer_acquire(p, -1, &slot), 0);
    uint32_t n = tsock_slot_planned(slot);
    const uint64_t *ids = tsock_slot_sample_ids(slot);
    int64_t *index = tsock_slot_data(slot, 0);
    for (uint32_t i = 0; i < n; i++)
        index[i] = (int64_t)ids[i];
    CHECK_EQ(tsock_producer_publish(p, slot, n), 0);
}

/* A next waiting forever on a producer that publishes nothing; then the consumer goes on. */
static void
test_next(enum how how)
{
    make_endpoint();
    tsock_producer *p = start_producer();
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_start(c, 10000), 0);
    atomic_store(&g_consumer, c);
    tsock_batch *b = NULL;
    struct canceller k;
    cancel_soon(&k, how);
    CHECK_EQ(tsock_consumer_next(c, -1, &b), TSOCK_E_CANCELLED);
    canceller_join(&k);
    atomic_store(&g_consumer, NULL);

    /* Not cancelled for good: the next batch arrives as usual. */
    publish_one(p);
    CHECK_EQ(tsock_consumer_next(c, 10000, &b), 0);
    CHECK_EQ(tsock_batch_samples(b), BATCH);
    /* A pending cancel wins over a batch that may be ready, once. */
    publish_one(p);
    tsock_consumer_cancel(c);
    tsock_batch *b2 = NULL;
    CHECK_EQ(tsock_consumer_next(c, 0, &b2), TSOCK_E_CANCELLED);
    CHECK_EQ(tsock_consumer_next(c, 10000, &b2), 0);
    CHECK_EQ(tsock_consumer_release(c, b), 0);
    CHECK_EQ(tsock_consumer_release(c, b2), 0);
    tsock_consumer_destroy(c);
    tsock_producer_destroy(p);
}

/* ---- producer ---------------------------------------------------------------------------- */

static void
test_producer(enum how how)
{
    make_endpoint();
    tsock_producer *p = start_producer();
    atomic_store(&g_producer, p);
    struct canceller k;
    cancel_soon(&k, how);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, -1), TSOCK_E_CANCELLED);
    canceller_join(&k);

    /* acquire blocked on a full ring: one consumer holds both slots' batches (within its
     * epoch grace: a consumer that reads nothing for longer is paused and gives them back). */
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_set_epoch_grace(c, 600000), 0);
    CHECK_EQ(tsock_consumer_start(c, 10000), 0);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, 10000), 1);
    for (int i = 0; i < SLOTS; i++)
        publish_one(p);
    tsock_slot *slot = NULL;
    cancel_soon(&k, how);
    CHECK_EQ(tsock_producer_acquire(p, -1, &slot), TSOCK_E_CANCELLED);
    canceller_join(&k);
    atomic_store(&g_producer, NULL);

    /* A later call: the cancel is pending until the call it stops. */
    tsock_producer_cancel(p);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, -1), TSOCK_E_CANCELLED);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, 10000), 1);
    tsock_consumer_destroy(c);
    tsock_producer_destroy(p);
}

/* ---- pipeline ---------------------------------------------------------------------------- */

/* An empty folder fails with -ENOENT; a cancelled pipeline says it was cancelled instead. */
static void
test_pipeline(void)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "cancel");
    tsock_pipeline *pl = NULL;
    CHECK_EQ(tsock_pipeline_create(&pl, TSOCK_SOURCE_FOLDER, dir), 0);
    tsock_pipeline_cancel(pl);
    CHECK_EQ(tsock_pipeline_open(pl), TSOCK_E_CANCELLED);
    CHECK_EQ(tsock_pipeline_open(pl), TSOCK_E_CANCELLED); /* for good */
    tsock_pipeline_destroy(pl);
    CHECK_EQ(tsock_pipeline_create(&pl, TSOCK_SOURCE_FOLDER, dir), 0);
    CHECK_EQ(tsock_pipeline_open(pl), -ENOENT);
    tsock_pipeline_destroy(pl);
}

int
main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    tsock_set_log(NULL, NULL, TSOCK_LOG_ERROR);

    CHECK(strcmp(tsock_strerror(TSOCK_E_CANCELLED), "unknown error code") != 0);
    test_cancel_before_start();
    test_start(FROM_THREAD);
    test_start(FROM_SIGNAL);
    test_next(FROM_THREAD);
    test_next(FROM_SIGNAL);
    test_producer(FROM_THREAD);
    test_producer(FROM_SIGNAL);
    test_pipeline();
    return CHECK_DONE();
}
