/* The producer and consumer engines end to end inside one process: real ZeroMQ sockets over
 * ipc, a real shared-memory ring, consumers on their own threads. Runs under TSan too. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "check.h"
#include "proto/proto.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define SAMPLES 1000
#define BATCH 64
#define SLOTS 4
/* Bounds on waits that must end: against hangs only, so generous enough for a loaded machine
 * under TSan. Heartbeat timeouts of live peers are as long, so that no test's outcome depends
 * on a thread being scheduled within some time; only the silent peer's is short. */
#define BOUND_MS 60000
#define LIVE_TIMEOUT_MS 60000
#define SILENT_TIMEOUT_MS 600

static char endpoint[256];

static void
make_endpoint(const char *tag)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "handoff");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.sock", dir, tag);
}

static tsock_layout *
make_layout(void)
{
    tsock_layout *layout;
    int64_t shape[1] = {16};
    CHECK_EQ(tsock_layout_create(&layout), 0);
    CHECK_EQ(tsock_layout_add(layout, "data", TSOCK_UINT8, 1, shape), 0);
    CHECK_EQ(tsock_layout_add(layout, "index", TSOCK_INT64, 0, NULL), 1);
    return layout;
}

static tsock_producer *
start_producer(uint64_t epochs, int heartbeat_timeout_ms)
{
    tsock_layout *layout = make_layout();
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, SLOTS), 0);
    tsock_layout_destroy(layout);
    CHECK_EQ(tsock_producer_set_heartbeat(p, 50, heartbeat_timeout_ms), 0);
    CHECK_EQ(tsock_producer_set_sampler(p, SAMPLES, 7, epochs), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    return p;
}

/* Fills one acquired slot: data bytes are (id + position) mod 256, index holds the id. */
static int
produce_one(tsock_producer *p)
{
    tsock_slot *slot;
    int err = tsock_producer_acquire(p, BOUND_MS, &slot);
    if (err < 0)
        return err;
    uint32_t n = tsock_slot_planned(slot);
    const uint64_t *ids = tsock_slot_sample_ids(slot);
    uint8_t *data = tsock_slot_data(slot, 0);
    int64_t *index = tsock_slot_data(slot, 1);
    for (uint32_t i = 0; i < n; i++) {
        for (int j = 0; j < 16; j++)
            data[i * 16 + j] = (uint8_t)(ids[i] + (uint64_t)j);
        index[i] = (int64_t)ids[i];
    }
    return tsock_producer_publish(p, slot, n);
}

struct reader {
    tsock_consumer *c;
    int epochs_wanted;
    int epochs_done;
    int content_errors;
    int coverage_errors;
    int final_error;
    int hold_forever; /* keep every batch: a consumer that stopped working */
};

static void
check_batch(struct reader *r, tsock_batch *b, unsigned char *seen)
{
    const uint8_t *data = tsock_batch_tensor_data(b, 0);
    const int64_t *index = tsock_batch_tensor_data(b, 1);
    for (uint32_t i = 0; i < tsock_batch_samples(b); i++) {
        if (index[i] < 0 || index[i] >= SAMPLES || seen[index[i]]++)
            r->coverage_errors++;
        for (int j = 0; j < 16; j++)
            r->content_errors += data[i * 16 + j] != (uint8_t)(index[i] + j);
    }
}

static void *
read_epochs(void *arg)
{
    struct reader *r = arg;
    unsigned char seen[SAMPLES];
    memset(seen, 0, sizeof seen);
    while (r->epochs_done < r->epochs_wanted) {
        tsock_batch *b;
        int err = tsock_consumer_next(r->c, BOUND_MS, &b);
        if (err < 0) {
            r->final_error = err;
            return NULL;
        }
        check_batch(r, b, seen);
        if (tsock_batch_is_epoch_end(b)) {
            for (int i = 0; i < SAMPLES; i++)
                r->coverage_errors += seen[i] != 1;
            memset(seen, 0, sizeof seen);
            r->epochs_done++;
        }
        if (!r->hold_forever)
            CHECK_EQ(tsock_consumer_release(r->c, b), 0);
    }
    tsock_batch *b;
    r->final_error = tsock_consumer_next(r->c, BOUND_MS, &b);
    return NULL;
}

static tsock_consumer *
connect_consumer(void)
{
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_set_heartbeat(c, 50, LIVE_TIMEOUT_MS), 0);
    CHECK_EQ(tsock_consumer_start(c, BOUND_MS), 0);
    return c;
}

/* Two consumers, two epochs: each sees every sample once per epoch, bytes intact, and then the
 * end of the stream. */
static void
test_two_consumers_exact_epochs(void)
{
    make_endpoint("two");
    tsock_producer *p = start_producer(2, LIVE_TIMEOUT_MS);
    struct reader r[2] = {{.epochs_wanted = 2}, {.epochs_wanted = 2}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        r[i].c = connect_consumer();
        pthread_create(&t[i], NULL, read_epochs, &r[i]);
    }
    CHECK_EQ(tsock_producer_wait_consumers(p, 2, BOUND_MS), 2);
    int err;
    while ((err = produce_one(p)) == 0)
        ;
    CHECK_EQ(err, TSOCK_E_END);
    CHECK_EQ(tsock_producer_finish(p), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(r[i].epochs_done, 2);
        CHECK_EQ(r[i].content_errors, 0);
        CHECK_EQ(r[i].coverage_errors, 0);
        CHECK_EQ(r[i].final_error, TSOCK_E_END);
        tsock_consumer_destroy(r[i].c);
    }
    uint64_t batches = 0, lost = 1;
    CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_BATCHES, &batches), 0);
    CHECK_EQ(batches, 2 * ((SAMPLES + BATCH - 1) / BATCH));
    CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_LOST, &lost), 0);
    CHECK_EQ(lost, 0);
    tsock_producer_destroy(p);
}

/* A peer that joins and then falls silent (as a consumer killed with SIGKILL does) blocks the
 * producer only until the heartbeat timeout; then its slots are reclaimed and the stream goes
 * on. The peer is a raw DEALER speaking the protocol by hand, so nothing answers heartbeats. */
static void
test_silent_consumer_is_reclaimed(void)
{
    make_endpoint("silent");
    tsock_producer *p = start_producer(0, SILENT_TIMEOUT_MS);
    void *ctx = zmq_ctx_new();
    void *raw = zmq_socket(ctx, ZMQ_DEALER);
    CHECK_EQ(zmq_connect(raw, endpoint), 0);
    struct tsock__msg hello = {.type = TSOCK__MSG_HELLO, .u.hello = {.pid = 1, .name = "silent"}};
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    int n = tsock__msg_encode(&hello, buf, sizeof buf);
    CHECK(n > 0);
    CHECK_EQ(zmq_send(raw, buf, (size_t)n, 0), n);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, BOUND_MS), 1);
    for (int i = 0; i < SLOTS; i++)
        CHECK_EQ(produce_one(p), 0);
    tsock_slot *slot;
    CHECK_EQ(tsock_producer_acquire(p, 0, &slot), -ETIMEDOUT); /* all held: nothing dropped */
    CHECK_EQ(tsock_producer_acquire(p, BOUND_MS, &slot), 0);   /* reclaimed after 600 ms */
    CHECK_EQ(tsock_producer_publish(p, slot, tsock_slot_planned(slot)), 0);
    uint64_t held = 99, lost = 0;
    CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_HELD, &held), 0);
    CHECK_EQ(held, 0);
    CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_LOST, &lost), 0);
    CHECK_EQ(lost, 1);
    CHECK_EQ(tsock_producer_consumer_count(p), 0);
    zmq_close(raw);
    zmq_ctx_term(ctx);
    tsock_producer_destroy(p);
}

/* A consumer destroyed while holding batches says BYE: its slots come back at once. */
static void
test_destroy_while_holding(void)
{
    make_endpoint("holding");
    tsock_producer *p = start_producer(0, LIVE_TIMEOUT_MS);
    tsock_consumer *c = connect_consumer();
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, BOUND_MS), 1);
    for (int i = 0; i < SLOTS; i++)
        CHECK_EQ(produce_one(p), 0);
    tsock_batch *b;
    CHECK_EQ(tsock_consumer_next(c, BOUND_MS, &b), 0);
    tsock_slot *slot;
    CHECK_EQ(tsock_producer_acquire(p, 0, &slot), -ETIMEDOUT);
    tsock_consumer_destroy(c);
    CHECK_EQ(tsock_producer_acquire(p, BOUND_MS, &slot), 0);
    uint64_t lost = 1;
    CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_LOST, &lost), 0);
    CHECK_EQ(lost, 0); /* a goodbye, not a timeout */
    tsock_producer_destroy(p);
}

struct pump {
    tsock_producer *p;
    atomic_int stop;
};

/* Publishes as fast as the consumers release, until told to stop. */
static void *
pump_main(void *arg)
{
    struct pump *pm = arg;
    while (!atomic_load(&pm->stop)) {
        int err = produce_one(pm->p);
        if (err < 0 && err != -ETIMEDOUT)
            return NULL;
    }
    return NULL;
}

/* Consumers that say BYE and go while batches are being sent to them are counted as leaving,
 * never as lost: a send can fail (the connection is gone) before the BYE queued ahead of the
 * disconnection is read, and that must not count as a vanished consumer. A steady reader keeps
 * the stream flowing while 30 others join, read a little and leave. */
static void
test_goodbye_while_busy(void)
{
    make_endpoint("goodbye");
    tsock_producer *p = start_producer(0, LIVE_TIMEOUT_MS);
    struct reader steady = {.epochs_wanted = 1000000};
    steady.c = connect_consumer();
    pthread_t reader_thread, pump_thread;
    pthread_create(&reader_thread, NULL, read_epochs, &steady);
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, BOUND_MS), 1);
    struct pump pm = {.p = p};
    pthread_create(&pump_thread, NULL, pump_main, &pm);
    for (int round = 0; round < 30; round++) {
        tsock_consumer *c = connect_consumer();
        for (int i = 0; i < 3 + round % 5; i++) {
            tsock_batch *b;
            CHECK_EQ(tsock_consumer_next(c, BOUND_MS, &b), 0);
            CHECK_EQ(tsock_consumer_release(c, b), 0);
        }
        tsock_consumer_destroy(c); /* BYE, then the socket closes */
    }
    uint64_t lost = 1, joined = 0;
    CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_LOST, &lost), 0);
    CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_JOINED, &joined), 0);
    CHECK_EQ(joined, 31);
    CHECK_EQ(lost, 0);
    atomic_store(&pm.stop, 1);
    pthread_join(pump_thread, NULL);
    CHECK_EQ(tsock_producer_finish(p), 0);
    pthread_join(reader_thread, NULL);
    CHECK_EQ(steady.content_errors, 0);
    tsock_consumer_destroy(steady.c);
    tsock_producer_destroy(p);
}

/* The producer going away ends every next() with an error, never a hang. */
static void
test_producer_stop_reaches_consumer(void)
{
    make_endpoint("stop");
    tsock_producer *p = start_producer(0, LIVE_TIMEOUT_MS);
    tsock_consumer *c = connect_consumer();
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, BOUND_MS), 1);
    CHECK_EQ(produce_one(p), 0);
    tsock_producer_destroy(p);
    tsock_batch *b;
    /* A stopped producer frees its ring once its consumers said BYE: what was queued and not
     * read is dropped, never handed out (issue 12, item 5). */
    CHECK_EQ(tsock_consumer_next(c, 5000, &b), TSOCK_E_PRODUCER_STOPPED);
    CHECK_EQ(tsock_consumer_next(c, 0, &b), TSOCK_E_PRODUCER_STOPPED);
    tsock_consumer_destroy(c);
}

/* Garbage from a ZeroMQ peer that is not tsock is counted and ignored. */
static void
test_garbage_is_rejected(void)
{
    make_endpoint("garbage");
    tsock_producer *p = start_producer(0, LIVE_TIMEOUT_MS);
    void *ctx = zmq_ctx_new();
    void *raw = zmq_socket(ctx, ZMQ_DEALER);
    CHECK_EQ(zmq_connect(raw, endpoint), 0);
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    uint8_t header[12] = {'T', 'S', 'C', 'K', 1, 0, 4, 0, 200, 0, 0, 0}; /* lies about length */
    CHECK(zmq_send(raw, junk, sizeof junk, 0) >= 0);
    CHECK(zmq_send(raw, header, sizeof header, 0) >= 0);
    CHECK(zmq_send(raw, "a", 1, ZMQ_SNDMORE) >= 0);
    CHECK(zmq_send(raw, "b", 1, 0) >= 0);
    tsock_consumer *c = connect_consumer(); /* still serves a real consumer */
    CHECK_EQ(produce_one(p), 0);
    tsock_batch *b;
    CHECK_EQ(tsock_consumer_next(c, BOUND_MS, &b), 0);
    CHECK_EQ(tsock_consumer_release(c, b), 0);
    uint64_t bad = 0;
    for (int i = 0; i < BOUND_MS / 10 && bad < 3; i++) {
        usleep(10000);
        CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_BAD_MESSAGES, &bad), 0);
    }
    CHECK_EQ(bad, 3);
    zmq_close(raw);
    zmq_ctx_term(ctx);
    tsock_consumer_destroy(c);
    tsock_producer_destroy(p);
}

/* Calls out of order return errors instead of misbehaving. */
static void
test_api_misuse(void)
{
    make_endpoint("misuse");
    tsock_layout *layout = make_layout();
    tsock_producer *p = NULL;
    int64_t zero[1] = {0};
    CHECK_EQ(tsock_layout_add(layout, "bad", TSOCK_UINT8, 1, zero), -EINVAL);
    CHECK_EQ(tsock_layout_add(layout, "data", TSOCK_UINT8, 0, NULL), TSOCK_E_LAYOUT);
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, 1), -EINVAL);
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, 0, SLOTS), -EINVAL);
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, SLOTS), 0);
    tsock_slot *slot;
    CHECK_EQ(tsock_producer_acquire(p, 0, &slot), TSOCK_E_STATE);
    CHECK_EQ(tsock_producer_start(p), 0);
    CHECK_EQ(tsock_producer_start(p), TSOCK_E_STATE);
    CHECK_EQ(tsock_producer_set_heartbeat(p, 10, 100), TSOCK_E_STATE);
    /* A second producer on the same endpoint is refused, the first is untouched. */
    tsock_producer *q = NULL;
    CHECK_EQ(tsock_producer_create(&q, endpoint, layout, BATCH, SLOTS), 0);
    CHECK_EQ(tsock_producer_start(q), TSOCK_E_BUSY_ENDPOINT);
    tsock_producer_destroy(q);
    CHECK_EQ(tsock_producer_acquire(p, 0, &slot), 0);
    CHECK_EQ(tsock_producer_acquire(p, 0, &slot), TSOCK_E_STATE);
    CHECK_EQ(tsock_producer_publish(p, slot, BATCH + 1), -EINVAL);
    CHECK_EQ(tsock_producer_publish(p, slot, BATCH), 0);
    CHECK_EQ(tsock_producer_publish(p, slot, BATCH), TSOCK_E_STATE);
    tsock_layout_destroy(layout);
    tsock_producer_destroy(p);
    tsock_producer_destroy(NULL);
    tsock_consumer_destroy(NULL);
    CHECK(strcmp(tsock_strerror(TSOCK_E_END), "unknown error code") != 0);
    CHECK(strcmp(tsock_strerror(-ETIMEDOUT), "unknown error code") != 0);
    for (int code = TSOCK_E_BASE; code > TSOCK_E_LAST; code--)
        CHECK(tsock_strerror(code) != NULL && strcmp(tsock_strerror(code), "unknown error code"));
    CHECK_EQ(tsock_version(), TSOCK_VERSION_NUMBER);
}

/* A consumer with no producer times out in start and is destroyed cleanly. */
static void
test_no_producer(void)
{
    make_endpoint("none");
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_start(c, 200), -ETIMEDOUT);
    tsock_batch *b;
    CHECK_EQ(tsock_consumer_next(c, 0, &b), TSOCK_E_STATE);
    tsock_consumer_destroy(c);
}

int
main(void)
{
    test_api_misuse();
    test_two_consumers_exact_epochs();
    test_silent_consumer_is_reclaimed();
    test_destroy_while_holding();
    test_goodbye_while_busy();
    test_producer_stop_reaches_consumer();
    test_garbage_is_rejected();
    test_no_producer();
    return CHECK_DONE();
}
