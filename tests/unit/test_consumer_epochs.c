/* Per-consumer epochs end to end in one process, with real sockets: consumers that join late
 * or use other batch sizes than the producer still get exact epochs, and a consumer that
 * lingers between epochs holds nothing and slows nobody. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define SAMPLES 1000
#define BATCH 64
#define SLOTS 4

static char endpoint[256];
static atomic_int stop_producer;

static void *
produce_forever(void *arg)
{
    tsock_producer *p = arg;
    while (!atomic_load(&stop_producer)) {
        if (tsock_producer_wait_consumers(p, 1, 50) < 0)
            continue;
        tsock_slot *slot;
        if (tsock_producer_acquire(p, 50, &slot) < 0)
            continue;
        uint32_t n = tsock_slot_planned(slot);
        const uint64_t *ids = tsock_slot_sample_ids(slot);
        int64_t *index = tsock_slot_data(slot, 0);
        int32_t *value = tsock_slot_data(slot, 1);
        for (uint32_t i = 0; i < n; i++) {
            index[i] = (int64_t)ids[i];
            value[i] = (int32_t)(ids[i] * 7 + 3);
        }
        tsock_producer_publish(p, slot, n);
    }
    return NULL;
}

static tsock_producer *
start_producer(pthread_t *thread)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "epochs");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/p.sock", dir);
    tsock_layout *layout;
    tsock_layout_create(&layout);
    tsock_layout_add(layout, "index", TSOCK_INT64, 0, NULL);
    tsock_layout_add(layout, "value", TSOCK_INT32, 0, NULL);
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, SLOTS), 0);
    tsock_layout_destroy(layout);
    CHECK_EQ(tsock_producer_set_sampler(p, SAMPLES, 5, 0), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    atomic_store(&stop_producer, 0);
    pthread_create(thread, NULL, produce_forever, p);
    return p;
}

static void
stop(tsock_producer *p, pthread_t thread)
{
    atomic_store(&stop_producer, 1);
    pthread_join(thread, NULL);
    tsock_producer_destroy(p);
}

struct reader {
    uint32_t batch_size;
    int drop_last;
    int epochs;
    int linger; /* after each epoch but the last, linger until told to go on */
    atomic_int lingering, go_on;
    int join_after_ms; /* connect late */
    int grace_ms;
    atomic_int batches;
    int views, gathers, bad_epochs, content_errors, size_errors, error;
};

static void
check_epoch(struct reader *r, unsigned char *seen, uint64_t expect)
{
    uint64_t total = 0;
    for (int i = 0; i < SAMPLES; i++) {
        r->bad_epochs += seen[i] > 1;
        total += seen[i];
    }
    r->bad_epochs += total != expect;
    memset(seen, 0, SAMPLES);
}

static void
read_batch(struct reader *r, tsock_batch *b, unsigned char *seen)
{
    const int64_t *index = tsock_batch_tensor_data(b, 0);
    const int32_t *value = tsock_batch_tensor_data(b, 1);
    uint32_t n = tsock_batch_samples(b);
    r->size_errors += n != r->batch_size && !tsock_batch_is_epoch_end(b);
    for (uint32_t i = 0; i < n; i++) {
        seen[index[i]]++;
        r->content_errors += value[i] != (int32_t)(index[i] * 7 + 3);
    }
    r->views += tsock_batch_is_view(b);
    r->gathers += !tsock_batch_is_view(b);
    atomic_fetch_add(&r->batches, 1);
}

static void *
run_reader(void *arg)
{
    struct reader *r = arg;
    unsigned char seen[SAMPLES] = {0};
    usleep((useconds_t)r->join_after_ms * 1000);
    tsock_consumer *c = NULL;
    tsock_consumer_create(&c, endpoint);
    tsock_consumer_set_batch_size(c, r->batch_size);
    tsock_consumer_set_drop_last(c, r->drop_last);
    tsock_consumer_set_epoch_grace(c, r->grace_ms);
    r->error = tsock_consumer_start(c, 5000);
    uint64_t expect = r->drop_last ? SAMPLES - SAMPLES % r->batch_size : SAMPLES;
    for (int e = 0; e < r->epochs && !r->error;) {
        tsock_batch *b;
        r->error = tsock_consumer_next(c, 5000, &b);
        if (r->error)
            break;
        read_batch(r, b, seen);
        int end = tsock_batch_is_epoch_end(b);
        tsock_consumer_release(c, b);
        if (end) {
            check_epoch(r, seen, expect);
            e++;
            if (r->linger && e < r->epochs) {
                atomic_store(&r->lingering, 1);
                while (!atomic_load(&r->go_on))
                    usleep(1000);
                atomic_store(&r->go_on, 0);
                atomic_store(&r->lingering, 0);
            }
        }
    }
    tsock_consumer_destroy(c);
    return NULL;
}

/* Waits until *v reaches `at_least`; 0 after `bound_s` seconds (a bound against hangs only). */
static int
wait_for(atomic_int *v, int at_least, int bound_s)
{
    for (long i = 0; i < bound_s * 1000L; i++) {
        if (atomic_load(v) >= at_least)
            return 1;
        usleep(1000);
    }
    return atomic_load(v) >= at_least;
}

/* Four batch sizes, one consumer joining while the others are mid-epoch: every epoch exact. */
static void
test_batch_sizes_and_late_join(void)
{
    pthread_t pt, t[4];
    tsock_producer *p = start_producer(&pt);
    struct reader r[4] = {
        {.batch_size = 1, .epochs = 2, .grace_ms = 100},
        {.batch_size = 48, .epochs = 3, .grace_ms = 100},
        {.batch_size = 100, .epochs = 3, .join_after_ms = 30, .grace_ms = 100},
        {.batch_size = 64, .epochs = 3, .drop_last = 1, .join_after_ms = 60, .grace_ms = 100},
    };
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, run_reader, &r[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        printf("consumer with batch size %u: %d views, %d gathers\n", r[i].batch_size, r[i].views,
               r[i].gathers);
        CHECK_EQ(r[i].error, 0);
        CHECK_EQ(r[i].bad_epochs, 0);
        CHECK_EQ(r[i].content_errors, 0);
        CHECK_EQ(r[i].size_errors, 0);
    }
    CHECK(r[1].views > 0);   /* 48 fits inside a 64-sample producer batch most of the time */
    CHECK(r[2].gathers > 0); /* 100 never does */
    stop(p, pt);
}

/* A consumer lingering between epochs (until the test tells it to go on, not for a time): the
 * other keeps receiving far more batches than the ring has slots meanwhile, so the lingering one
 * holds nothing; its next epoch is exact. Were the slots held, the running consumer would stall
 * after at most 4 x SLOTS batches and the wait below would fail at its bound, however fast or
 * slow the machine. */
static void
test_pause_does_not_stall_others(void)
{
    pthread_t pt, ta, tb;
    tsock_producer *p = start_producer(&pt);
    struct reader running = {.batch_size = 16, .epochs = 1000000, .grace_ms = 100};
    struct reader pausing = {.batch_size = 64, .epochs = 2, .linger = 1, .grace_ms = 0};
    pthread_create(&ta, NULL, run_reader, &running);
    pthread_create(&tb, NULL, run_reader, &pausing);
    /* Wait until the pausing consumer finished its first epoch and is lingering. */
    CHECK(wait_for(&pausing.lingering, 1, 60));
    /* 4 consumer batches per producer batch: 4x the ring, and then some. */
    int before = atomic_load(&running.batches);
    CHECK(wait_for(&running.batches, before + 16 * SLOTS + 1, 60));
    printf("running consumer got %d batches while its peer lingered\n",
           atomic_load(&running.batches) - before);
    CHECK_EQ(atomic_load(&pausing.lingering), 1);
    atomic_store(&pausing.go_on, 1);
    pthread_join(tb, NULL);
    CHECK_EQ(pausing.error, 0);
    CHECK_EQ(pausing.bad_epochs, 0);
    CHECK_EQ(pausing.content_errors, 0);
    stop(p, pt);
    pthread_join(ta, NULL);
    CHECK_EQ(running.bad_epochs, 0);
}

int
main(void)
{
    test_batch_sizes_and_late_join();
    test_pause_does_not_stall_others();
    return CHECK_DONE();
}
