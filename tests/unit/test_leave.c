/* Leaving an epoch early (docs/semantics.md, "Leaving an epoch early"), end to end in one
 * process with real sockets and a real producer sampler: consumer A reads part of an epoch and
 * stops (tsock_consumer_pause, or simply no more next calls); consumer B must then read two
 * whole, exact epochs without A (before mid-epoch pauses, A's queued batches held every slot
 * and B's next timed out); then A goes on and its interrupted epoch holds exactly the samples
 * it lacked, its batch indices continuing, followed by a normal exact epoch. Views and
 * gathers, explicit and timed pauses, checkpointing or not. Completion decides, not timing. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tsock/tsock.h"

#define SAMPLES 600
#define BATCH 32
#define SLOTS 4

#include "id_producer.h"

/* B's next waits at most this long: far beyond any scheduling delay, and what a B stuck behind
 * A's slots runs into. */
#define B_TIMEOUT_MS 20000

struct steady {
    int epochs_done;
    int err;
};

/* Every sample of an epoch was seen exactly once. */
static void
check_whole(const unsigned char *seen)
{
    for (int i = 0; i < SAMPLES; i++)
        CHECK_EQ(seen[i], 1);
}

/* Reads one epoch of c into seen[]; returns 0 or the error, checking exactness. */
static int
read_epoch(tsock_consumer *c, unsigned char *seen, uint64_t *epoch, uint64_t *first_index,
           int timeout_ms)
{
    int first = 1;
    for (;;) {
        tsock_batch *b;
        int err = tsock_consumer_next(c, timeout_ms, &b);
        if (err < 0)
            return err;
        const int64_t *ids = tsock_batch_tensor_data(b, 0);
        for (uint32_t i = 0; i < tsock_batch_samples(b); i++) {
            CHECK(ids[i] >= 0 && ids[i] < SAMPLES);
            CHECK_EQ(seen[ids[i]]++, 0);
        }
        if (first && first_index)
            *first_index = tsock_batch_index_in_epoch(b);
        first = 0;
        if (epoch)
            *epoch = tsock_batch_epoch(b);
        int end = tsock_batch_is_epoch_end(b);
        tsock_consumer_release(c, b);
        if (end)
            return 0;
    }
}

static void *
steady_run(void *arg)
{
    struct steady *s = arg;
    tsock_consumer *b = NULL;
    CHECK_EQ(tsock_consumer_create(&b, id_endpoint), 0);
    tsock_consumer_set_epoch_grace(b, 30000); /* B itself never pauses */
    s->err = tsock_consumer_start(b, B_TIMEOUT_MS);
    for (int e = 0; e < 2 && s->err == 0; e++) {
        unsigned char seen[SAMPLES] = {0};
        s->err = read_epoch(b, seen, NULL, NULL, B_TIMEOUT_MS);
        if (s->err == 0) {
            check_whole(seen);
            s->epochs_done++;
        }
    }
    tsock_consumer_destroy(b);
    return NULL;
}

/* A reads `k` batches of batch size `batch`, stops (explicitly or not), B reads two epochs,
 * then A finishes its epoch and reads one more. */
static void
scenario(uint32_t batch, int k, int explicit_pause, int checkpointing)
{
    pthread_t thread;
    tsock_producer *p = id_producer_start("leave", 1, &thread);
    tsock_consumer *a = NULL;
    CHECK_EQ(tsock_consumer_create(&a, id_endpoint), 0);
    tsock_consumer_set_batch_size(a, batch);
    tsock_consumer_set_epoch_grace(a, 50);
    tsock_consumer_set_checkpointing(a, checkpointing);
    CHECK_EQ(tsock_consumer_start(a, 5000), 0);

    unsigned char seen[SAMPLES] = {0};
    uint64_t index = 0;
    for (int i = 0; i < k; i++) {
        tsock_batch *b;
        CHECK_EQ(tsock_consumer_next(a, 5000, &b), 0);
        CHECK_EQ(tsock_batch_epoch(b), 0);
        CHECK_EQ(tsock_batch_index_in_epoch(b), (uint64_t)i);
        CHECK(!tsock_batch_is_epoch_end(b));
        const int64_t *ids = tsock_batch_tensor_data(b, 0);
        for (uint32_t j = 0; j < tsock_batch_samples(b); j++)
            CHECK_EQ(seen[ids[j]]++, 0);
        index = tsock_batch_index_in_epoch(b) + 1;
        tsock_consumer_release(a, b);
    }
    if (explicit_pause)
        CHECK_EQ(tsock_consumer_pause(a), 0);

    /* A reads nothing now: B must get two whole epochs all the same. */
    struct steady s = {0, 0};
    pthread_t steady;
    pthread_create(&steady, NULL, steady_run, &s);
    pthread_join(steady, NULL);
    if (s.err)
        fprintf(stderr, "B: %s after %d epochs\n", tsock_strerror(s.err), s.epochs_done);
    CHECK_EQ(s.err, 0);
    CHECK_EQ(s.epochs_done, 2);

    /* A's epoch 0 goes on with exactly what it lacked, the batch index continuing. */
    uint64_t epoch = 99, first_index = 0;
    CHECK_EQ(read_epoch(a, seen, &epoch, &first_index, 20000), 0);
    CHECK_EQ(epoch, 0);
    CHECK_EQ(first_index, index);
    check_whole(seen);
    /* Then a normal exact epoch. */
    unsigned char next_seen[SAMPLES] = {0};
    CHECK_EQ(read_epoch(a, next_seen, &epoch, &first_index, 20000), 0);
    CHECK_EQ(epoch, 1);
    CHECK_EQ(first_index, 0);
    check_whole(next_seen);
    tsock_consumer_destroy(a);
    id_producer_stop(p, &thread);
}

/* A consumer alone on its producer: its stream has ended; both go. */
static void
end_alone(tsock_consumer *a, tsock_producer *p, pthread_t *thread)
{
    tsock_batch *b;
    CHECK_EQ(tsock_consumer_next(a, 20000, &b), TSOCK_E_END);
    tsock_consumer_destroy(a);
    id_producer_stop(p, thread);
}

/* A consumer of the last producer started, with that epoch grace, started. */
static tsock_consumer *
joined(int grace_ms)
{
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    tsock_consumer_set_epoch_grace(c, grace_ms);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    return c;
}

/* A finite stream (2 epochs) and a consumer that leaves mid-epoch, alone on the producer: while
 * it is paused nothing is published (before: the producer published for nobody and used up the
 * stream), and its window restarts where it resumed, so the stream's end cuts its last epoch;
 * the producer finishes that window (docs/semantics.md, "When a finite stream ends": before,
 * that epoch ended short). It reads exactly two whole epochs, then TSOCK_E_END. */
static void
test_finite_stream(int explicit_pause)
{
    pthread_t thread;
    tsock_producer *p = id_producer_start_epochs("leave", 1, 2, &thread);
    /* Long enough that a loaded machine's stalls do not pause A again while it reads on: this
     * test is about one pause (test_finite_stream_many_pauses is about many). */
    tsock_consumer *a = joined(250);
    unsigned char seen[SAMPLES] = {0};
    for (int i = 0; i < 3; i++) {
        tsock_batch *b;
        CHECK_EQ(tsock_consumer_next(a, 5000, &b), 0);
        const int64_t *ids = tsock_batch_tensor_data(b, 0);
        for (uint32_t j = 0; j < tsock_batch_samples(b); j++)
            CHECK_EQ(seen[ids[j]]++, 0);
        tsock_consumer_release(a, b);
    }
    if (explicit_pause)
        CHECK_EQ(tsock_consumer_pause(a), 0);
    usleep(800 * 1000); /* paused either way (the timed pause after 250 ms and its steps) */
    /* That the stream has not ended shows in what A reads next (tsock_producer_stream_ended
     * belongs to the thread that fills slots, id_producer_run's, not to this one: TSan saw
     * this thread read the sampler while that one advanced it). */
    uint64_t epoch = 99;
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), 0);
    CHECK_EQ(epoch, 0);
    check_whole(seen);
    memset(seen, 0, sizeof seen);
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), 0);
    CHECK_EQ(epoch, 1);
    check_whole(seen);
    memset(seen, 0, sizeof seen);
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), TSOCK_E_END);
    tsock_consumer_destroy(a);
    id_producer_stop(p, &thread);
}

/* B reads on a thread until its stream ends; the test's thread looks at its progress. */
struct to_end {
    tsock_consumer *c;
    atomic_int err;
    atomic_uint_fast64_t samples;
};

static void *
read_to_end(void *arg)
{
    struct to_end *r = arg;
    tsock_batch *b;
    int err;
    while ((err = tsock_consumer_next(r->c, 20000, &b)) == 0) {
        atomic_fetch_add(&r->samples, tsock_batch_samples(b));
        tsock_consumer_release(r->c, b);
    }
    atomic_store(&r->err, err);
    return NULL;
}

/* A finite stream (2 epochs) whose end comes while consumer A is paused, in the middle of its
 * last epoch or before it, B reading on: the producer waits for A (PAUSE says how far it read:
 * the stream still owes it an epoch) instead of ending the stream, and serves the window A
 * starts when it resumes, after the end. Before, the stream ended with B's last window and A's
 * next read returned TSOCK_E_END: its last epoch short, or missing. */
static void
test_finite_stream_paused_at_end(int mid_epoch)
{
    pthread_t thread, reader;
    tsock_producer *p = id_producer_start_epochs("leave", 1, 2, &thread);
    tsock_consumer *a = joined(30000), *b = joined(30000); /* pauses when told, not on stalls */
    CHECK_EQ(tsock_producer_wait_consumers(p, 2, 5000), 2);

    /* Both read epoch 0 (B on its thread, to the stream's end); A three batches of epoch 1. */
    struct to_end rb = {.c = b};
    pthread_create(&reader, NULL, read_to_end, &rb);
    unsigned char seen[SAMPLES] = {0};
    uint64_t epoch = 99;
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), 0);
    CHECK_EQ(epoch, 0);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < (mid_epoch ? 3 : 0); i++) {
        tsock_batch *batch;
        CHECK_EQ(tsock_consumer_next(a, 20000, &batch), 0);
        CHECK_EQ(tsock_batch_epoch(batch), 1);
        const int64_t *ids = tsock_batch_tensor_data(batch, 0);
        for (uint32_t j = 0; j < tsock_batch_samples(batch); j++)
            CHECK_EQ(seen[ids[j]]++, 0);
        tsock_consumer_release(a, batch);
    }
    CHECK_EQ(tsock_consumer_pause(a), 0);

    /* B reads the rest of the stream meanwhile; the end waits for A. */
    usleep(500 * 1000);
    CHECK_EQ(atomic_load(&rb.samples), 2 * SAMPLES);
    CHECK_EQ(atomic_load(&rb.err), 0); /* still reading: the stream is not over */

    /* A's epoch 1 goes on with exactly what it lacked, then the stream ends for both. */
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), 0);
    CHECK_EQ(epoch, 1);
    check_whole(seen);
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), TSOCK_E_END);
    pthread_join(reader, NULL);
    CHECK_EQ(atomic_load(&rb.err), TSOCK_E_END);
    CHECK_EQ(atomic_load(&rb.samples), 2 * SAMPLES);
    tsock_consumer_destroy(a);
    tsock_consumer_destroy(b);
    id_producer_stop(p, &thread);
}

/* A consumer alone on a finite stream (2 epochs) that pauses in the middle of its epochs again
 * and again, by tsock_consumer_pause and, with a short grace, by stopping: each pause restarts
 * its window where the stream is, so its epochs end later in the stream than the stream's own,
 * and the last of them would start after the end. It reads exactly two whole epochs all the
 * same, then TSOCK_E_END (before, its second epoch was missing or short). */
static void
test_finite_stream_many_pauses(int explicit_pause)
{
    pthread_t thread;
    tsock_producer *p = id_producer_start_epochs("leave", 1, 2, &thread);
    tsock_consumer *a = joined(explicit_pause ? 30000 : 20);
    for (uint64_t e = 0; e < 2; e++) {
        unsigned char seen[SAMPLES] = {0};
        int end = 0;
        for (int i = 0; !end; i++) {
            tsock_batch *b;
            int err = tsock_consumer_next(a, 20000, &b);
            CHECK_EQ(err, 0);
            if (err)
                break;
            CHECK_EQ(tsock_batch_epoch(b), e);
            CHECK_EQ(tsock_batch_index_in_epoch(b), (uint64_t)i);
            const int64_t *ids = tsock_batch_tensor_data(b, 0);
            for (uint32_t j = 0; j < tsock_batch_samples(b); j++)
                CHECK_EQ(seen[ids[j]]++, 0);
            end = tsock_batch_is_epoch_end(b);
            tsock_consumer_release(a, b);
            if (i % 5 == 2 && !end) { /* a pause in the middle of the epoch */
                if (explicit_pause)
                    CHECK_EQ(tsock_consumer_pause(a), 0);
                usleep(explicit_pause ? 10 * 1000 : 150 * 1000);
            }
        }
        check_whole(seen);
    }
    end_alone(a, p, &thread);
}

/* A consumer alone on a finite stream (2 epochs) that gives up the rest of its first epoch
 * (Python's break, then a new iterator: tsock_consumer_pause, then tsock_consumer_end_epoch):
 * its next epoch starts where the stream is, so the stream's end cuts the one after it, which
 * is finished all the same: epochs 1 and 2 whole, then TSOCK_E_END, never a short epoch. */
static void
test_finite_stream_end_epoch(void)
{
    pthread_t thread;
    tsock_producer *p = id_producer_start_epochs("leave", 1, 2, &thread);
    tsock_consumer *a = joined(30000);
    for (int i = 0; i < 3; i++) {
        tsock_batch *b;
        CHECK_EQ(tsock_consumer_next(a, 20000, &b), 0);
        tsock_consumer_release(a, b);
    }
    CHECK_EQ(tsock_consumer_pause(a), 0);
    usleep(50 * 1000);
    CHECK_EQ(tsock_consumer_end_epoch(a), 0);
    for (uint64_t e = 1; e <= 2; e++) {
        unsigned char seen[SAMPLES] = {0};
        uint64_t epoch = 99, first_index = 99;
        CHECK_EQ(read_epoch(a, seen, &epoch, &first_index, 20000), 0);
        CHECK_EQ(epoch, e);
        CHECK_EQ(first_index, 0);
        check_whole(seen);
    }
    end_alone(a, p, &thread);
}

/* A consumer that pauses mid-epoch after its producer decided the stream's end, before it
 * hears of it, with the stream's last batches in its queue: the producer leaves that PAUSE
 * unanswered, so the consumer keeps them and reads its epoch whole, then TSOCK_E_END. Before,
 * the pause gave the queue back at once and the epoch ended short. */
static void
test_pause_after_end_decided(void)
{
    pthread_t thread;
    id_producer_finish_delay_ms = 400; /* the decision, and SHUTDOWN 400 ms later */
    tsock_producer *p = id_producer_start_epochs("leave", 1, 2, &thread);
    tsock_consumer *a = joined(30000);
    unsigned char seen[SAMPLES] = {0};
    uint64_t epoch = 99;
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), 0);
    memset(seen, 0, sizeof seen);
    /* Epoch 1 up to its last SLOTS batches, which the producer then publishes: the last one
     * ends the stream, and the decision comes at its next acquire. */
    uint64_t batches = (SAMPLES + BATCH - 1) / BATCH;
    for (uint64_t i = 0; i + SLOTS < batches; i++) {
        tsock_batch *b;
        CHECK_EQ(tsock_consumer_next(a, 20000, &b), 0);
        const int64_t *ids = tsock_batch_tensor_data(b, 0);
        for (uint32_t j = 0; j < tsock_batch_samples(b); j++)
            CHECK_EQ(seen[ids[j]]++, 0);
        tsock_consumer_release(a, b);
    }
    for (int k = 0; k < 500 && !atomic_load(&id_producer_end_seen); k++)
        usleep(10 * 1000);
    CHECK(atomic_load(&id_producer_end_seen));
    CHECK_EQ(tsock_consumer_pause(a), 0);
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), 0);
    CHECK_EQ(epoch, 1);
    check_whole(seen);
    id_producer_finish_delay_ms = 0;
    end_alone(a, p, &thread);
}

/* One consumer's first read, on its own thread. */
struct first_read {
    tsock_consumer *c;
    int err;
    int64_t first_id;
    uint64_t index;
};

static void *
first_read_run(void *arg)
{
    struct first_read *r = arg;
    tsock_batch *b;
    r->err = tsock_consumer_next(r->c, 20000, &b);
    if (r->err == 0) {
        r->first_id = ((const int64_t *)tsock_batch_tensor_data(b, 0))[0];
        r->index = tsock_batch_index_in_epoch(b);
        tsock_consumer_release(r->c, b);
    }
    return NULL;
}

/* A paused consumer receives nothing, so tsock_producer_wait_consumers does not count it
 * (docs/semantics.md, "While every consumer is paused"; before, it did, and a producer whose
 * consumers had all paused published for nobody): two consumers that joined and have not read
 * for their epoch grace count once each reads, and then start their windows together. */
static void
test_paused_not_counted(void)
{
    tsock_producer *p = id_producer_start("leave", 1, NULL);
    tsock_consumer *c[2];
    struct first_read r[2] = {{0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(tsock_consumer_create(&c[i], id_endpoint), 0);
        tsock_consumer_set_epoch_grace(c[i], 50);
        CHECK_EQ(tsock_consumer_start(c[i], 5000), 0);
        r[i].c = c[i];
    }
    /* Neither reads: after the grace both are paused as jobs that never read (bounded). */
    int counted = 2;
    for (int k = 0; k < 1000 && counted != -ETIMEDOUT; k++) {
        counted = tsock_producer_wait_consumers(p, 1, 0);
        if (counted != -ETIMEDOUT)
            usleep(10000);
    }
    CHECK_EQ(counted, -ETIMEDOUT);
    pthread_create(&t[0], NULL, first_read_run, &r[0]);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, 10000), 1);
    CHECK_EQ(tsock_producer_wait_consumers(p, 2, 0), -ETIMEDOUT);
    pthread_create(&t[1], NULL, first_read_run, &r[1]);
    CHECK_EQ(tsock_producer_wait_consumers(p, 2, 10000), 2);
    int64_t first_id = id_producer_publish_one(p);
    for (int i = 0; i < 2; i++) { /* the same first batch: their windows start together */
        pthread_join(t[i], NULL);
        CHECK_EQ(r[i].err, 0);
        CHECK_EQ(r[i].index, 0);
        CHECK_EQ(r[i].first_id, first_id);
        tsock_consumer_destroy(c[i]);
    }
    id_producer_stop(p, NULL);
}

/* tsock_consumer_end_epoch mid-epoch: B reads on without A, and A's next batch starts a
 * fresh, exact epoch 1 (what torch does for a new iterator after break). */
static void
test_end_epoch(void)
{
    pthread_t thread;
    tsock_producer *p = id_producer_start("leave", 1, &thread);
    tsock_consumer *a = NULL;
    CHECK_EQ(tsock_consumer_create(&a, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_start(a, 5000), 0);
    for (int i = 0; i < 3; i++) {
        tsock_batch *b;
        CHECK_EQ(tsock_consumer_next(a, 5000, &b), 0);
        tsock_consumer_release(a, b);
    }
    CHECK_EQ(tsock_consumer_end_epoch(a), 0);
    CHECK_EQ(tsock_consumer_end_epoch(a), 0); /* at a boundary now: nothing to give up */
    struct steady s = {0, 0};
    pthread_t steady;
    pthread_create(&steady, NULL, steady_run, &s);
    pthread_join(steady, NULL);
    CHECK_EQ(s.err, 0);
    CHECK_EQ(s.epochs_done, 2);
    unsigned char seen[SAMPLES] = {0};
    uint64_t epoch = 99, first_index = 99;
    CHECK_EQ(read_epoch(a, seen, &epoch, &first_index, 20000), 0);
    CHECK_EQ(epoch, 1);
    CHECK_EQ(first_index, 0);
    check_whole(seen);
    tsock_consumer_destroy(a);
    id_producer_stop(p, &thread);

    /* Free mode: epochs are the producer's marks, nothing to end or to pause mid-epoch. */
    p = id_producer_start("leave", 0, &thread);
    CHECK_EQ(tsock_consumer_create(&a, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_batch_size(a, BATCH / 2), 0);
    CHECK_EQ(tsock_consumer_start(a, 5000), 0);
    tsock_batch *b;
    CHECK_EQ(tsock_consumer_next(a, 5000, &b), 0);
    CHECK_EQ(tsock_consumer_end_epoch(a), -ENOTSUP);
    CHECK_EQ(tsock_consumer_pause(a), -ENOTSUP);
    tsock_consumer_release(a, b);
    tsock_consumer_destroy(a);
    id_producer_stop(p, &thread);
}

/* tsock_consumer_pause's refusals and boundaries. */
static void
test_pause_calls(void)
{
    CHECK_EQ(tsock_consumer_pause(NULL), -EINVAL);
    CHECK_EQ(tsock_consumer_end_epoch(NULL), -EINVAL);
    pthread_t thread;
    tsock_producer *p = id_producer_start("leave", 1, &thread);
    tsock_consumer *a = NULL;
    CHECK_EQ(tsock_consumer_create(&a, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_pause(a), TSOCK_E_STATE); /* not started */
    CHECK_EQ(tsock_consumer_start(a, 5000), 0);
    CHECK_EQ(tsock_consumer_pause(a), 0); /* nothing read yet: a boundary */
    unsigned char seen[SAMPLES] = {0};
    uint64_t epoch = 99;
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), 0);
    CHECK_EQ(epoch, 0);
    CHECK_EQ(tsock_consumer_pause(a), 0); /* between epochs */
    memset(seen, 0, sizeof seen);
    CHECK_EQ(read_epoch(a, seen, &epoch, NULL, 20000), 0);
    CHECK_EQ(epoch, 1);
    tsock_consumer_destroy(a);
    id_producer_stop(p, &thread);
}

int
main(void)
{
    scenario(BATCH, 3, 1, 0); /* views, tsock_consumer_pause */
    scenario(BATCH, 3, 0, 0); /* views, stopped calling next */
    scenario(20, 7, 1, 0);    /* gathers across producer batches */
    scenario(20, 5, 0, 1);    /* a checkpointing consumer, stopped */
    scenario(BATCH / 2, 11, 1, 0);
    test_pause_calls();
    test_end_epoch();
    test_finite_stream(1);
    test_finite_stream(0);
    test_finite_stream_paused_at_end(1);
    test_finite_stream_paused_at_end(0);
    test_finite_stream_many_pauses(1);
    test_finite_stream_many_pauses(0);
    test_finite_stream_end_epoch();
    test_pause_after_end_decided();
    test_paused_not_counted();
    return CHECK_DONE();
}
