/* A consumer facing a broken producer: a raw ROUTER socket plays the producer, welcomes the
 * consumer properly, then sends something impossible. Every case must end the consumer's
 * calls with TSOCK_E_PROTOCOL, never a crash or a hang. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "backend/shm/shm.h"
#include "check.h"
#include "proto/proto.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define SLOTS 2
#define STRIDE 4096

struct fake {
    void *ctx, *router;
    uint8_t id[256];
    size_t id_len;
    struct tsock__region region;
    char endpoint[256];
};

static void
send_to(struct fake *f, const struct tsock__msg *m)
{
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    int n = tsock__msg_encode(m, buf, sizeof buf);
    CHECK(n > 0);
    zmq_send(f->router, f->id, f->id_len, ZMQ_SNDMORE);
    zmq_send(f->router, buf, (size_t)n, 0);
}

/* Waits for the consumer's HELLO and answers with a valid WELCOME (sampler mode). Runs on its
 * own thread while the consumer's start() waits for that answer. */
static void *
welcome(void *arg)
{
    struct fake *f = arg;
    int n = zmq_recv(f->router, f->id, sizeof f->id, 0);
    CHECK(n > 0);
    f->id_len = (size_t)n;
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    CHECK(zmq_recv(f->router, buf, sizeof buf, 0) > 0); /* the HELLO itself */
    CHECK_EQ(tsock__shm_create(&f->region, (size_t)STRIDE * SLOTS), 0);
    struct tsock__msg m = {.type = TSOCK__MSG_WELCOME};
    struct tsock__msg_welcome *w = &m.u.welcome;
    w->batch_size = 4;
    w->slot_count = SLOTS;
    w->slot_stride = STRIDE;
    w->ring_bytes = (uint64_t)STRIDE * SLOTS;
    w->heartbeat_ms = 250;
    w->samples = 100;
    w->dataset = 100;
    w->nodes = 1;
    w->attach = (const uint8_t *)f->region.name;
    w->attach_len = (uint32_t)strlen(f->region.name);
    w->tensor_count = 1;
    snprintf(w->tensors[0].name, sizeof w->tensors[0].name, "index");
    w->tensors[0].dtype = TSOCK_INT64;
    w->tensors[0].sample_bytes = 8;
    send_to(f, &m);
    return NULL;
}

static tsock_consumer *
connect_to_fake(struct fake *f, uint32_t batch_size)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "broken");
    snprintf(f->endpoint, sizeof f->endpoint, "ipc://%s/p.sock", dir);
    f->ctx = zmq_ctx_new();
    f->router = zmq_socket(f->ctx, ZMQ_ROUTER);
    CHECK_EQ(zmq_bind(f->router, f->endpoint), 0);
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, f->endpoint), 0);
    CHECK_EQ(tsock_consumer_set_batch_size(c, batch_size), 0);
    int linger = 0;
    zmq_setsockopt(f->router, ZMQ_LINGER, &linger, sizeof linger);
    return c;
}

static void
close_fake(struct fake *f, tsock_consumer *c)
{
    tsock_consumer_destroy(c);
    zmq_close(f->router);
    zmq_ctx_term(f->ctx);
    tsock__shm_release(&f->region);
}

/* A solo consumer asks for ids if the producer can send them (HELLO IDS_IF_ABLE, to pause
 * mid-epoch), and a producer with a sampler and batches of 4 can: the fake sends them. */
static const uint8_t four_ids[16] = {0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0};

static struct tsock__msg
batch(uint32_t slot, uint64_t seq, uint64_t position)
{
    struct tsock__msg m = {.type = TSOCK__MSG_BATCH};
    m.u.batch = (struct tsock__msg_batch){.slot = slot,
                                          .samples = 4,
                                          .seq = seq,
                                          .position = position,
                                          .flags = TSOCK__BATCH_HAS_IDS,
                                          .ids = four_ids};
    return m;
}

enum breakage { GARBAGE, SLOT_OUT_OF_RANGE, POSITION_GAP, SLOT_STILL_HELD, NO_IDS };

static void
expect_protocol_error(enum breakage kind)
{
    struct fake f;
    memset(&f, 0, sizeof f);
    /* Batches of 8 are gathered from two of the producer's 4, so next() waits for the broken
     * message. Except for a slot still held: that takes a view of the first batch, held while
     * the second names its slot again (a gather would have given the slot back already, and
     * then reusing it is legal). */
    tsock_consumer *c = connect_to_fake(&f, kind == SLOT_STILL_HELD ? 4 : 8);
    pthread_t answer;
    pthread_create(&answer, NULL, welcome, &f);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    pthread_join(answer, NULL);
    struct tsock__msg first = batch(0, 0, 0);
    send_to(&f, &first);
    tsock_batch *held = NULL;
    if (kind == SLOT_STILL_HELD)
        CHECK_EQ(tsock_consumer_next(c, 5000, &held), 0);
    struct tsock__msg bad;
    switch (kind) {
    case GARBAGE: {
        const char junk[] = "not a tsock message";
        zmq_send(f.router, f.id, f.id_len, ZMQ_SNDMORE);
        zmq_send(f.router, junk, sizeof junk, 0);
        break;
    }
    case SLOT_OUT_OF_RANGE:
        bad = batch(SLOTS, 1, 4);
        send_to(&f, &bad);
        break;
    case POSITION_GAP:
        bad = batch(1, 1, 40);
        send_to(&f, &bad);
        break;
    case SLOT_STILL_HELD:
        bad = batch(0, 1, 4);
        send_to(&f, &bad);
        break;
    case NO_IDS: /* asked for and promised by the rule, then missing: never read */
        bad = batch(1, 1, 4);
        bad.u.batch.flags = 0;
        bad.u.batch.ids = NULL;
        send_to(&f, &bad);
        break;
    }
    tsock_batch *b;
    CHECK_EQ(tsock_consumer_next(c, 5000, &b), TSOCK_E_PROTOCOL);
    CHECK_EQ(tsock_consumer_next(c, 0, &b), TSOCK_E_PROTOCOL); /* and stays so */
    uint64_t bad_count = 0;
    CHECK_EQ(tsock_consumer_stat(c, TSOCK_STAT_BAD_MESSAGES, &bad_count), 0);
    CHECK(bad_count >= 1);
    close_fake(&f, c);
}

int
main(void)
{
    expect_protocol_error(GARBAGE);
    expect_protocol_error(SLOT_OUT_OF_RANGE);
    expect_protocol_error(POSITION_GAP);
    expect_protocol_error(SLOT_STILL_HELD);
    expect_protocol_error(NO_IDS);
    return CHECK_DONE();
}
