/* Checkpointable consumers end to end in one process, with real sockets and a real producer
 * sampler: a consumer saves its position after k batches, reads on (the batches a crash would
 * lose), goes away; a consumer restored from the state joins later at a random point of the
 * stream and must receive exactly the complement of what was received in the interrupted
 * epoch, with the epoch number and batch index continuing, then normal exact epochs. Random
 * stop points, batch sizes (views and gathers), drop_last and join times. Bad states get clear
 * errors. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ring/resume_state.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define SAMPLES 1000
#define BATCH 64
#define SLOTS 4

#include "id_producer.h"

static atomic_int stop_background;
static uint64_t rng = 0x9E3779B97F4A7C15u;

static uint64_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Keeps the stream moving, so that the restored consumer joins at an arbitrary point. */
static void *
background(void *arg)
{
    (void)arg;
    tsock_consumer *c = NULL;
    tsock_consumer_create(&c, id_endpoint);
    tsock_consumer_set_batch_size(c, 16);
    if (tsock_consumer_start(c, 5000) == 0) {
        while (!atomic_load(&stop_background)) {
            tsock_batch *b;
            if (tsock_consumer_next(c, 100, &b) == 0) {
                usleep(200);
                tsock_consumer_release(c, b);
            }
        }
    }
    tsock_consumer_destroy(c);
    return NULL;
}

static tsock_consumer *
consumer(uint32_t batch, int drop_last, const uint8_t *state, size_t len, int *start_err)
{
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    tsock_consumer_set_batch_size(c, batch);
    tsock_consumer_set_drop_last(c, drop_last);
    tsock_consumer_set_checkpointing(c, 1);
    if (state)
        CHECK_EQ(tsock_consumer_restore_state(c, state, len), 0);
    *start_err = tsock_consumer_start(c, 5000);
    return c;
}

/* Adds a batch's ids to seen[]; returns how many were there already. */
static int
mark(tsock_batch *b, unsigned char *seen)
{
    const int64_t *index = tsock_batch_tensor_data(b, 0);
    int dup = 0;
    for (uint32_t i = 0; i < tsock_batch_samples(b); i++)
        dup += seen[index[i]]++ != 0;
    return dup;
}

static uint64_t
count(const unsigned char *seen)
{
    uint64_t n = 0;
    for (int i = 0; i < SAMPLES; i++)
        n += seen[i] != 0;
    return n;
}

/* One interruption: save after `pre` batches, lose `lost` more, resume after `delay_us`. */
static void
scenario(uint32_t batch, int drop_last, int pre, int lost, int delay_us)
{
    unsigned char saved[SAMPLES] = {0}, seen[SAMPLES] = {0};
    uint64_t expect = drop_last ? SAMPLES - SAMPLES % batch : SAMPLES;
    int err;
    tsock_consumer *a = consumer(batch, drop_last, NULL, 0, &err);
    CHECK_EQ(err, 0);
    uint64_t epoch = 0, index = 0;
    for (int i = 0; i < pre && !err; i++) {
        tsock_batch *b;
        err = tsock_consumer_next(a, 5000, &b);
        if (err)
            break;
        CHECK(tsock_batch_epoch(b) == epoch);
        CHECK_EQ(mark(b, seen), 0);
        index = tsock_batch_index_in_epoch(b) + 1;
        if (tsock_batch_is_epoch_end(b)) {
            CHECK_EQ(count(seen), expect);
            memset(seen, 0, sizeof seen);
            epoch++;
            index = 0;
        }
        tsock_consumer_release(a, b);
    }
    CHECK_EQ(err, 0);
    memcpy(saved, seen, sizeof saved);
    uint8_t state[4096];
    size_t len = 0;
    CHECK_EQ(tsock_consumer_save_state(a, NULL, 0, &len), -ENOSPC);
    CHECK(len >= 53 && len <= 53 + (SAMPLES + 7) / 8);
    CHECK_EQ(tsock_consumer_save_state(a, state, sizeof state, &len), 0);
    for (int i = 0; i < lost && !err; i++) { /* seen by the crashed run after its last save */
        tsock_batch *b;
        err = tsock_consumer_next(a, 5000, &b);
        if (!err)
            tsock_consumer_release(a, b);
    }
    tsock_consumer_destroy(a);
    usleep((useconds_t)delay_us);

    tsock_consumer *r = consumer(batch, drop_last, state, len, &err);
    CHECK_EQ(err, 0);
    /* The rest of the interrupted epoch: the complement, numbering continued. */
    int dup = 0, wrong_epoch = 0, wrong_index = 0, done = 0;
    while (!done && !err) {
        tsock_batch *b;
        err = tsock_consumer_next(r, 5000, &b);
        if (err)
            break;
        wrong_epoch += tsock_batch_epoch(b) != epoch;
        wrong_index += tsock_batch_index_in_epoch(b) != index++;
        dup += mark(b, seen);
        done = tsock_batch_is_epoch_end(b);
        if (!done)
            CHECK_EQ(tsock_batch_samples(b), batch);
        tsock_consumer_release(r, b);
    }
    CHECK_EQ(err, 0);
    CHECK_EQ(dup, 0);
    CHECK_EQ(wrong_epoch, 0);
    CHECK_EQ(wrong_index, 0);
    CHECK_EQ(count(seen), expect);
    /* Then a normal exact epoch, starting at the next window. */
    memset(seen, 0, sizeof seen);
    done = 0;
    dup = 0;
    while (!done && !err) {
        tsock_batch *b;
        err = tsock_consumer_next(r, 5000, &b);
        if (err)
            break;
        wrong_epoch += tsock_batch_epoch(b) != epoch + 1;
        dup += mark(b, seen);
        done = tsock_batch_is_epoch_end(b);
        tsock_consumer_release(r, b);
    }
    CHECK_EQ(err, 0);
    CHECK_EQ(dup, 0);
    CHECK_EQ(wrong_epoch, 0);
    CHECK_EQ(count(seen), expect);
    tsock_consumer_destroy(r);
}

static void
test_random_interruptions(void)
{
    pthread_t pt, bt;
    tsock_producer *p = id_producer_start("resume", 1, &pt);
    atomic_store(&stop_background, 0);
    pthread_create(&bt, NULL, background, NULL);
    static const uint32_t sizes[] = {1, 7, 32, 64, 100, 333};
    for (int iter = 0; iter < 24; iter++) {
        uint32_t batch = sizes[rnd() % 6];
        int drop_last = (int)(rnd() % 3 == 0);
        int per_epoch = (int)(drop_last ? SAMPLES / batch : (SAMPLES + batch - 1) / batch);
        int pre = (int)(rnd() % (uint64_t)(2 * per_epoch + 1));
        int lost = (int)(rnd() % 4);
        int delay = (int)(rnd() % 20000);
        printf("batch %u drop_last %d: save after %d batches, %d lost, resume after %d us\n", batch,
               drop_last, pre, lost, delay);
        scenario(batch, drop_last, pre, lost, delay);
    }
    atomic_store(&stop_background, 1);
    pthread_join(bt, NULL);
    id_producer_stop(p, &pt);
}

/* A valid state of this test's producer, for the bad-state checks to break. */
static size_t
good_state(uint8_t *state, size_t cap, uint32_t batch)
{
    int err;
    tsock_consumer *a = consumer(batch, 0, NULL, 0, &err);
    CHECK_EQ(err, 0);
    for (int i = 0; i < 3; i++) {
        tsock_batch *b;
        CHECK_EQ(tsock_consumer_next(a, 5000, &b), 0);
        tsock_consumer_release(a, b);
    }
    size_t len = 0;
    CHECK_EQ(tsock_consumer_save_state(a, state, cap, &len), 0);
    tsock_consumer_destroy(a);
    return len;
}

static void
reseal(uint8_t *s, size_t len)
{
    uint32_t crc = tsock__crc32(0, s, len - 4);
    for (int i = 0; i < 4; i++)
        s[len - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
}

static int
start_with(const uint8_t *state, size_t len, uint32_t batch)
{
    tsock_consumer *c = NULL;
    tsock_consumer_create(&c, id_endpoint);
    tsock_consumer_set_batch_size(c, batch);
    int err = tsock_consumer_restore_state(c, state, len);
    if (err == 0)
        err = tsock_consumer_start(c, 5000);
    tsock_consumer_destroy(c);
    return err;
}

static void
test_bad_states(void)
{
    pthread_t pt;
    tsock_producer *p = id_producer_start("resume", 1, &pt);
    uint8_t state[4096], bad[4096];
    size_t len = good_state(state, sizeof state, 32);
    CHECK_EQ(start_with(state, len, 32), 0);
    /* Corrupt, truncated, empty, another version: refused by restore itself. */
    memcpy(bad, state, len);
    bad[len / 2] ^= 0x40;
    CHECK_EQ(start_with(bad, len, 32), TSOCK_E_BAD_STATE);
    CHECK_EQ(start_with(state, len - 1, 32), TSOCK_E_BAD_STATE);
    CHECK_EQ(start_with(state, 0, 32), TSOCK_E_BAD_STATE);
    memcpy(bad, state, len);
    bad[4] = 3;
    reseal(bad, len);
    CHECK_EQ(start_with(bad, len, 32), TSOCK_E_BAD_STATE);
    /* Foreign: another dataset size, another layout, another batch size: refused at start. */
    struct tsock__resume_state s = {
        .samples = SAMPLES + 1, .batch = 32, .layout = 0, .delivered = 0};
    long n = tsock__state_encode(&s, bad, sizeof bad);
    CHECK(n > 0);
    CHECK_EQ(start_with(bad, (size_t)n, 32), TSOCK_E_BAD_STATE);
    memcpy(bad, state, len);
    bad[32] ^= 1; /* the layout fingerprint */
    reseal(bad, len);
    CHECK_EQ(start_with(bad, len, 32), TSOCK_E_BAD_STATE);
    CHECK_EQ(start_with(state, len, 16), TSOCK_E_BAD_STATE);
    /* Calls out of order. */
    tsock_consumer *c = NULL;
    tsock_consumer_create(&c, id_endpoint);
    size_t need;
    CHECK_EQ(tsock_consumer_save_state(c, bad, sizeof bad, &need), TSOCK_E_STATE);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    CHECK_EQ(tsock_consumer_save_state(c, bad, sizeof bad, &need), TSOCK_E_STATE); /* not on */
    CHECK_EQ(tsock_consumer_restore_state(c, state, len), TSOCK_E_STATE);
    CHECK_EQ(tsock_consumer_set_checkpointing(c, 1), TSOCK_E_STATE);
    tsock_consumer_destroy(c);
    id_producer_stop(p, &pt);

    /* Producer batches too large for their ids to fit in one message: refused at HELLO. */
    {
        char dir[128];
        test_scratch_dir(dir, sizeof dir, "resume");
        snprintf(id_endpoint, sizeof id_endpoint, "ipc://%s/big.sock", dir);
        tsock_layout *layout;
        tsock_layout_create(&layout);
        tsock_layout_add(layout, "index", TSOCK_INT64, 0, NULL);
        tsock_producer *big = NULL;
        CHECK_EQ(tsock_producer_create(&big, id_endpoint, layout, 16371, 2), 0);
        tsock_layout_destroy(layout);
        CHECK_EQ(tsock_producer_set_sampler(big, 100000, 1, 0), 0);
        CHECK_EQ(tsock_producer_start(big), 0);
        c = NULL;
        tsock_consumer_create(&c, id_endpoint);
        tsock_consumer_set_checkpointing(c, 1);
        CHECK_EQ(tsock_consumer_start(c, 5000), TSOCK_E_REJECTED);
        tsock_consumer_destroy(c);
        c = NULL; /* a consumer that does not checkpoint is served */
        tsock_consumer_create(&c, id_endpoint);
        CHECK_EQ(tsock_consumer_start(c, 5000), 0);
        tsock_consumer_destroy(c);
        tsock_producer_destroy(big);
    }

    /* A producer without a sampler (free mode) cannot be resumed exactly. */
    p = id_producer_start("resume", 0, NULL);
    CHECK_EQ(start_with(state, len, 32), TSOCK_E_BAD_STATE);
    c = NULL;
    tsock_consumer_create(&c, id_endpoint);
    tsock_consumer_set_checkpointing(c, 1);
    CHECK_EQ(tsock_consumer_start(c, 5000), -ENOTSUP);
    tsock_consumer_destroy(c);
    id_producer_stop(p, NULL);
}

int
main(void)
{
    test_bad_states();
    test_random_interruptions();
    return CHECK_DONE();
}
