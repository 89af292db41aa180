/* Teardown order between a producer and its consumers (issue 12, items 5 and 9), on the real
 * shared-memory backend with real ZeroMQ sockets, everything in one process:
 *
 * - a producer stopped while a consumer still holds a batch does not free its ring until that
 *   consumer says BYE (which it does once the batch is released), within a bound;
 * - a consumer that reconnects while holding batches of earlier sessions keeps each earlier
 *   ring mapped exactly as long as a held batch points into it, and refuses a new session
 *   clearly when it cannot keep one more, instead of unmapping a ring under a held batch.
 *
 * Every wait is on an event (a call returning, a flag set) with a generous bound. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define SAMPLES 64
#define BATCH 8
#define SLOTS 4
#define SESSIONS 10 /* one more than a consumer keeps: its first ring and 8 earlier ones */

static char endpoint[256];

static void
make_endpoint(const char *tag)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "teardown");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.sock", dir, tag);
}

/* A producer whose heartbeat timeout is `timeout_ms` (its wait for goodbyes follows it). */
static tsock_producer *
start_producer(int timeout_ms)
{
    tsock_layout *layout;
    int64_t shape[1] = {16};
    CHECK_EQ(tsock_layout_create(&layout), 0);
    CHECK_EQ(tsock_layout_add(layout, "data", TSOCK_UINT8, 1, shape), 0);
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, SLOTS), 0);
    tsock_layout_destroy(layout);
    CHECK_EQ(tsock_producer_set_heartbeat(p, 50, timeout_ms), 0);
    CHECK_EQ(tsock_producer_set_sampler(p, SAMPLES, 7, 0), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    return p;
}

/* Publishes one batch whose bytes all equal `mark`. */
static void
produce_one(tsock_producer *p, uint8_t mark)
{
    tsock_slot *slot;
    CHECK_EQ(tsock_producer_acquire(p, 10000, &slot), 0);
    uint32_t n = tsock_slot_planned(slot);
    memset(tsock_slot_data(slot, 0), mark, (size_t)n * 16);
    CHECK_EQ(tsock_producer_publish(p, slot, n), 0);
}

static int
batch_is(const tsock_batch *b, uint8_t mark)
{
    const uint8_t *d = tsock_batch_tensor_data(b, 0);
    for (size_t i = 0; i < tsock_batch_tensor_bytes(b, 0); i++)
        if (d[i] != mark)
            return 0;
    return 1;
}

/* ---- a flag another thread sets, waited for with a bound ---------------------------------- */

struct flag {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int set;
};

static void
flag_set(struct flag *f)
{
    pthread_mutex_lock(&f->mu);
    f->set = 1;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
}

/* 1 when the flag is set within `ms`. */
static int
flag_wait(struct flag *f, int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&f->mu);
    while (!f->set && pthread_cond_timedwait(&f->cond, &f->mu, &until) == 0)
        ;
    int set = f->set;
    pthread_mutex_unlock(&f->mu);
    return set;
}

/* ---- item 5: the producer waits for the goodbyes of consumers still reading --------------- */

struct destroyer {
    tsock_producer *p;
    struct flag done;
};

static void *
destroy_producer(void *arg)
{
    struct destroyer *d = arg;
    tsock_producer_destroy(d->p);
    flag_set(&d->done);
    return NULL;
}

static void
test_stop_waits_for_goodbye(void)
{
    make_endpoint("goodbye");
    /* Goodbyes are awaited for the heartbeat timeout and 2 s more: 6 s here, well past the
     * 1.5 s this test allows a wrong early return to show. */
    tsock_producer *p = start_producer(4000);
    tsock_consumer *c;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_start(c, 10000), 0);
    CHECK(tsock_producer_wait_consumers(p, 1, 10000) >= 1);
    produce_one(p, 0x5a);
    tsock_batch *held = NULL;
    CHECK_EQ(tsock_consumer_next(c, 10000, &held), 0);
    CHECK(held && tsock_batch_is_view(held) && batch_is(held, 0x5a));

    struct destroyer d = {.p = p, .done = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, destroy_producer, &d), 0);
    tsock_batch *b = NULL;
    int err = tsock_consumer_next(c, 10000, &b);
    CHECK_EQ(err, TSOCK_E_PRODUCER_STOPPED);
    if (err == 0)
        CHECK_EQ(tsock_consumer_release(c, b), 0);
    /* The consumer still holds a view of the ring: the producer must not be gone yet. */
    CHECK(!flag_wait(&d.done, 1500));
    CHECK(batch_is(held, 0x5a));
    /* Released: the consumer detaches and says BYE, and the producer finishes at once. */
    CHECK_EQ(tsock_consumer_release(c, held), 0);
    CHECK(flag_wait(&d.done, 30000));
    pthread_join(t, NULL);
    tsock_consumer_destroy(c);
}

/* ---- item 9: earlier sessions' rings live exactly as long as batches in them --------------- */

/* Mappings of shared-memory objects in this process. */
static int
shm_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, "/dev/shm/") != NULL;
    fclose(f);
    return n;
}

struct restart {
    tsock_producer *old, *p;
    uint8_t mark;
    int publish;
};

/* The old producer goes (its consumer reconnects), a new one takes the endpoint and, once the
 * consumer is back, publishes a batch. */
static void *
restart_producer(void *arg)
{
    struct restart *r = arg;
    tsock_producer_destroy(r->old);
    r->p = start_producer(400);
    if (r->publish) {
        CHECK(tsock_producer_wait_consumers(r->p, 1, 20000) >= 1);
        produce_one(r->p, r->mark);
    }
    return NULL;
}

/* Publishes on a producer that is up, once the consumer has joined it. */
static void *
publish_when_joined(void *arg)
{
    struct restart *r = arg;
    CHECK(tsock_producer_wait_consumers(r->p, 1, 20000) >= 1);
    produce_one(r->p, r->mark);
    return NULL;
}

/* The next batch, past the errors that reconnecting reports on the way. */
static int
next_across_restart(tsock_consumer *c, tsock_batch **b)
{
    int err;
    for (int tries = 0; tries < 10; tries++) {
        err = tsock_consumer_next(c, 20000, b);
        if (err != TSOCK_E_EPOCH_INTERRUPTED && err != TSOCK_E_PRODUCER_STOPPED &&
            err != TSOCK_E_PRODUCER_LOST)
            return err;
    }
    return err;
}

static void
test_old_rings(void)
{
    make_endpoint("rings");
    tsock_producer *p = start_producer(400);
    tsock_consumer *c;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_set_reconnect(c, 20000), 0);
    CHECK_EQ(tsock_consumer_start(c, 10000), 0);
    CHECK(tsock_producer_wait_consumers(p, 1, 10000) >= 1);
    produce_one(p, 0);
    tsock_batch *b[SESSIONS] = {0};
    CHECK_EQ(tsock_consumer_next(c, 10000, &b[0]), 0);
    for (int k = 1; k < SESSIONS; k++) {
        /* The last producer publishes only once the consumer could come back (below). */
        struct restart r = {.old = p, .mark = (uint8_t)k, .publish = k < SESSIONS - 1};
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, restart_producer, &r), 0);
        int err = next_across_restart(c, &b[k]);
        pthread_join(t, NULL);
        p = r.p;
        if (k < SESSIONS - 1) {
            CHECK_EQ(err, 0);
            continue;
        }
        /* Nine rings in use (the current one and eight earlier ones): a tenth session is
         * refused rather than unmapping a ring a held batch points into. */
        CHECK_EQ(err, -EBUSY);
        if (err == 0)
            CHECK_EQ(tsock_consumer_release(c, b[k]), 0);
        b[k] = NULL;
    }
    for (int k = 0; k < SESSIONS - 1; k++)
        CHECK(b[k] && batch_is(b[k], (uint8_t)k));
    /* Releasing the oldest batch unmaps its ring at once, which makes room: the refused
     * session opens on the next call. */
    int before = shm_mappings();
    CHECK_EQ(tsock_consumer_release(c, b[0]), 0);
    CHECK_EQ(shm_mappings(), before - 1);
    struct restart r = {.p = p, .mark = SESSIONS - 1};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, publish_when_joined, &r), 0);
    tsock_batch *last = NULL;
    CHECK_EQ(next_across_restart(c, &last), 0);
    pthread_join(t, NULL);
    CHECK(last && batch_is(last, SESSIONS - 1));
    for (int k = 1; k < SESSIONS - 1; k++)
        CHECK_EQ(tsock_consumer_release(c, b[k]), 0);
    /* Left mapped: the live producer's ring, in the producer and in the consumer. */
    CHECK_EQ(shm_mappings(), 2);
    CHECK_EQ(tsock_consumer_release(c, last), 0);
    tsock_consumer_destroy(c);
    tsock_producer_destroy(p);
}

int
main(void)
{
    test_stop_waits_for_goodbye();
    test_old_rings();
    return CHECK_DONE();
}
