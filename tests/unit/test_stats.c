/* Statistics end to end inside one process: a real producer and consumers over ipc, queried
 * with tsock_stats_query; the application status and its checks; the JSON recogniser; and the
 * stats client facing a broken or stale "producer" (a raw ROUTER socket speaking by hand).
 * Waits are for a condition, bounded, never for a duration. Runs under TSan too. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "check.h"
#include "core/json.h"
#include "proto/proto.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define BATCH 16
#define SLOTS 4
#define SAMPLES (SLOTS * BATCH) /* one epoch fills the ring exactly */

static char endpoint[256];

static void
make_endpoint(const char *tag)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "stats");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/%s.sock", dir, tag);
}

static void
nap(void)
{
    usleep(10000);
}

/* ---- the JSON recogniser ----------------------------------------------------------------- */

static int
is_object(const char *s)
{
    return tsock__json_is_object(s, strlen(s));
}

static void
test_json(void)
{
    static const char *const good[] = {
        "{}",
        " { } ",
        "{\"a\":1}",
        "{\"a\":-0.5e+10,\"b\":[1,2,{\"c\":null}],\"d\":true}",
        "{\"s\":\"x\\\"y\\\\z\\/\\b\\f\\n\\r\\t\\u00e9\"}",
        "{\"e\":1E3,\"f\":0,\"g\":false}",
        "{\"caf\xc3\xa9\":\"\xe2\x82\xac\"}",
        "{\"a\":{}}",
        "{\"a\":[]}",
        "{\"a\" : [ 1 , 2 ] }",
    };
    static const char *const bad[] = {
        "",
        " ",
        "[]",
        "1",
        "\"s\"",
        "null",
        "{",
        "}",
        "{\"a\"}",
        "{\"a\":}",
        "{\"a\":1,}",
        "{,}",
        "{'a':1}",
        "{a:1}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":-}",
        "{\"a\":1e}",
        "{\"a\":+1}",
        "{\"a\":tru}",
        "{\"a\":nul}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\u12G4\"}",
        "{\"a\":\"\\u12\"}",
        "{\"a\":\"unterminated}",
        "{}{}",
        "{} x",
        "{\"a\":[1,2}",
        "{\"a\":[1 2]}",
        "{\"a\" 1}",
        "{\"a\":\"tab\there\"}",
        "{\"a\":NaN}",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        CHECK(is_object(good[i]));
        if (!is_object(good[i]))
            fprintf(stderr, "  refused: %s\n", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(!is_object(bad[i]));
        if (is_object(bad[i]))
            fprintf(stderr, "  accepted: %s\n", bad[i]);
    }
    /* Nesting: the limit passes, one more level does not (and nothing recurses unbounded). */
    char deep[2 * TSOCK__JSON_MAX_DEPTH + 64], *p = deep;
    for (int i = 0; i < TSOCK__JSON_MAX_DEPTH; i++)
        p += sprintf(p, i ? "[" : "{\"a\":");
    for (int i = TSOCK__JSON_MAX_DEPTH - 1; i >= 0; i--)
        p += sprintf(p, i ? "]" : "}");
    CHECK(is_object(deep));
    char deeper[sizeof deep + 8];
    snprintf(deeper, sizeof deeper, "{\"b\":%s}", deep);
    CHECK(!is_object(deeper));
    static char huge[100000];
    memset(huge, '[', sizeof huge - 1);
    huge[0] = '{';
    CHECK(!is_object(huge));
}

/* ---- the status setter ------------------------------------------------------------------- */

static tsock_producer *
make_producer(void)
{
    tsock_layout *layout;
    int64_t shape[1] = {4};
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_layout_create(&layout), 0);
    CHECK_EQ(tsock_layout_add(layout, "data", TSOCK_UINT8, 1, shape), 0);
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, SLOTS), 0);
    tsock_layout_destroy(layout);
    CHECK_EQ(tsock_producer_set_heartbeat(p, 50, 2000), 0);
    return p;
}

static void
test_status_setter(void)
{
    make_endpoint("status");
    tsock_producer *p = make_producer();
    static const char *const refused[] = {
        "[1]",
        "1",
        "\"x\"",
        "{",
        "{\"a\":1} {",
        "not json",
        "{\"a\":\t1}",
        "{\"a\":\n1}",
        "{\"a\":\"\xc3\"}",
        "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":\"\xff\"}",
        "{\"a\":\"\x7f\"}",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        CHECK_EQ(tsock_producer_set_status(p, refused[i]), -EINVAL);
    static char text[TSOCK_MAX_STATUS + 2];
    memset(text, ' ', sizeof text - 1);
    text[0] = '{';
    text[TSOCK_MAX_STATUS - 1] = '}';
    text[TSOCK_MAX_STATUS] = '\0';
    CHECK_EQ(tsock_producer_set_status(p, text), 0); /* exactly the limit */
    text[TSOCK_MAX_STATUS] = ' ';
    CHECK_EQ(tsock_producer_set_status(p, text), -EMSGSIZE);
    CHECK_EQ(tsock_producer_set_status(p, "{\"images_per_s\":1.5}"), 0);
    CHECK_EQ(tsock_producer_set_status(p, NULL), 0);
    CHECK_EQ(tsock_producer_set_status(p, ""), 0);
    CHECK_EQ(tsock_producer_set_status(NULL, "{}"), -EINVAL);
    tsock_producer_destroy(p);
}

/* ---- a live producer --------------------------------------------------------------------- */

static tsock_consumer *
connect_consumer(const char *name)
{
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, endpoint), 0);
    CHECK_EQ(tsock_consumer_set_heartbeat(c, 50, 2000), 0);
    CHECK_EQ(tsock_consumer_set_name(c, name), 0);
    /* Never paused for lingering after its epoch: the test checks it is not. */
    CHECK_EQ(tsock_consumer_set_epoch_grace(c, 600000), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    return c;
}

static uint64_t
pstat(tsock_producer *p, int consumer, int key)
{
    uint64_t v = UINT64_MAX;
    CHECK_EQ(tsock_producer_stat(p, consumer, key, &v), 0);
    return v;
}

static uint64_t
sget(const tsock_stats *s, int consumer, int key)
{
    uint64_t v = UINT64_MAX;
    CHECK_EQ(tsock_stats_get(s, consumer, key, &v), 0);
    return v;
}

/* Waits (bounded) until consumer `i`'s figure `key` at the producer reaches `want`. */
static void
await_stat(tsock_producer *p, int i, int key, uint64_t want)
{
    for (int k = 0; k < 500 && pstat(p, i, key) != want; k++)
        nap();
    CHECK_EQ(pstat(p, i, key), want);
}

static void
publish_epoch(tsock_producer *p)
{
    for (int i = 0; i < SLOTS; i++) {
        tsock_slot *slot;
        CHECK_EQ(tsock_producer_acquire(p, 5000, &slot), 0);
        memset(tsock_slot_data(slot, 0), i, (size_t)BATCH * 4);
        CHECK_EQ(tsock_producer_publish(p, slot, tsock_slot_planned(slot)), 0);
    }
}

/* alpha reads and releases the whole epoch; beta reads two batches and releases one. */
static void
consume(tsock_consumer *alpha, tsock_consumer *beta, tsock_batch **beta_held)
{
    tsock_batch *b;
    for (int i = 0; i < SLOTS; i++) {
        CHECK_EQ(tsock_consumer_next(alpha, 5000, &b), 0);
        CHECK_EQ(tsock_consumer_release(alpha, b), 0);
    }
    CHECK_EQ(tsock_consumer_next(beta, 5000, &b), 0);
    CHECK_EQ(tsock_consumer_release(beta, b), 0);
    CHECK_EQ(tsock_consumer_next(beta, 5000, beta_held), 0);
}

static void
check_producer_figures(const tsock_stats *s)
{
    CHECK_EQ(sget(s, -1, TSOCK_STAT_PID), getpid());
    CHECK_EQ(sget(s, -1, TSOCK_STAT_BATCHES), SLOTS);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_SAMPLES), SAMPLES);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_EPOCHS), 1);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_RELEASED), SLOTS + 1);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_SLOTS), SLOTS);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_HELD), SLOTS - 1); /* beta still has three */
    CHECK_EQ(sget(s, -1, TSOCK_STAT_FREE_SLOTS), 1);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_CONSUMERS), 2);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_JOINED), 2);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_LOST), 0);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_BAD_MESSAGES), 0);
    CHECK(sget(s, -1, TSOCK_STAT_UPTIME_NS) > 0);
    uint64_t v;
    CHECK_EQ(tsock_stats_get(s, -1, TSOCK_STAT_LAG, &v), -EINVAL); /* per consumer only */
    CHECK_EQ(tsock_stats_get(s, -1, 999, &v), -EINVAL);
}

static void
check_consumer_figures(const tsock_stats *s)
{
    CHECK_EQ(tsock_stats_consumer_count(s), 2);
    CHECK(strcmp(tsock_stats_consumer_name(s, 0), "alpha") == 0); /* join order */
    CHECK(strcmp(tsock_stats_consumer_name(s, 1), "beta") == 0);
    CHECK(tsock_stats_consumer_name(s, 2) == NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sget(s, i, TSOCK_STAT_PID), getpid());
        CHECK_EQ(sget(s, i, TSOCK_STAT_BATCHES), SLOTS);
        CHECK_EQ(sget(s, i, TSOCK_STAT_SAMPLES), SAMPLES);
        CHECK_EQ(sget(s, i, TSOCK_STAT_PAUSED), 0);
    }
    CHECK(sget(s, 0, TSOCK_STAT_ID) != sget(s, 1, TSOCK_STAT_ID));
    CHECK_EQ(sget(s, 0, TSOCK_STAT_RELEASED), SLOTS);
    CHECK_EQ(sget(s, 0, TSOCK_STAT_HELD), 0);
    CHECK_EQ(sget(s, 0, TSOCK_STAT_LAG), 0);
    CHECK_EQ(sget(s, 1, TSOCK_STAT_RELEASED), 1);
    CHECK_EQ(sget(s, 1, TSOCK_STAT_HELD), SLOTS - 1);
    CHECK_EQ(sget(s, 1, TSOCK_STAT_LAG), SLOTS - 2); /* holds seq 1..3, newest is 3 */
    /* What each consumer reported about itself. */
    CHECK_EQ(sget(s, 0, TSOCK_STAT_CONSUMED_BATCHES), SLOTS);
    CHECK_EQ(sget(s, 0, TSOCK_STAT_CONSUMED_SAMPLES), SAMPLES);
    CHECK_EQ(sget(s, 0, TSOCK_STAT_EPOCHS), 1);
    CHECK_EQ(sget(s, 1, TSOCK_STAT_CONSUMED_BATCHES), 2);
    CHECK_EQ(sget(s, 1, TSOCK_STAT_CONSUMED_SAMPLES), 2 * BATCH);
    CHECK_EQ(sget(s, 1, TSOCK_STAT_EPOCHS), 0);
    uint64_t v;
    CHECK_EQ(tsock_stats_get(s, 2, TSOCK_STAT_BATCHES, &v), -ENOENT);
    CHECK_EQ(tsock_stats_get(s, 0, TSOCK_STAT_SLOTS, &v), -EINVAL); /* producer-wide only */
    CHECK_EQ(tsock_stats_get(s, -2, TSOCK_STAT_BATCHES, &v), -EINVAL);
}

static void
check_json(const tsock_stats *s)
{
    const char *json = tsock_stats_json(s);
    CHECK(json != NULL && is_object(json));
    CHECK(strchr(json, '\n') == NULL);
    CHECK(strstr(json, "\"status\":{\"images_per_s\":2410.5,\"stage\":\"d\xc3\xa9"
                       "code\"}"));
    CHECK(strstr(json, "\"name\":\"alpha\""));
    CHECK(strstr(json, "\"name\":\"beta\",\"paused\":false,\"batches\":4,"));
    CHECK(strstr(json, "\"slots\":4,\"slots_in_use\":3,\"slots_free\":1,\"slots_held\":3,"));
    CHECK(strstr(json, "\"consumed_batches\":2,\"consumed_samples\":32,\"epochs\":0,"));
}

static void
test_live_producer(void)
{
    make_endpoint("live");
    tsock_producer *p = make_producer();
    CHECK_EQ(tsock_producer_set_sampler(p, SAMPLES, 1, 0), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    CHECK_EQ(tsock_producer_set_status(p, "{\"images_per_s\":2410.5,\"stage\":\"d\xc3\xa9"
                                          "code\"}"),
             0);
    tsock_consumer *alpha = connect_consumer("alpha"), *beta = connect_consumer("beta");
    CHECK_EQ(tsock_producer_wait_consumers(p, 2, 5000), 2);
    publish_epoch(p);
    tsock_batch *held;
    consume(alpha, beta, &held);
    /* Releases and the consumers' own reports travel on their service threads. */
    await_stat(p, 0, TSOCK_STAT_RELEASED, SLOTS);
    await_stat(p, 1, TSOCK_STAT_RELEASED, 1);
    await_stat(p, 0, TSOCK_STAT_CONSUMED_BATCHES, SLOTS);
    await_stat(p, 1, TSOCK_STAT_CONSUMED_BATCHES, 2);
    uint64_t v;
    CHECK_EQ(tsock_consumer_stat(alpha, TSOCK_STAT_EPOCHS, &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(tsock_consumer_stat(beta, TSOCK_STAT_CONSUMED_SAMPLES, &v), 0);
    CHECK_EQ(v, 2 * BATCH);

    tsock_stats *s = NULL;
    CHECK_EQ(tsock_stats_query(&s, endpoint, 5000), 0);
    check_producer_figures(s);
    check_consumer_figures(s);
    check_json(s);
    CHECK(strcmp(tsock_stats_status(s), "{\"images_per_s\":2410.5,\"stage\":\"d\xc3\xa9"
                                        "code\"}") == 0);
    tsock_stats_destroy(s);
    /* Asking did not make the client a consumer, in the library's own figures either. */
    CHECK_EQ(tsock_producer_consumer_count(p), 2);
    CHECK_EQ(pstat(p, -1, TSOCK_STAT_JOINED), 2);
    CHECK_EQ(pstat(p, 1, TSOCK_STAT_LAG), SLOTS - 2);
    CHECK_EQ(pstat(p, -1, TSOCK_STAT_FREE_SLOTS), 1);

    /* A cleared status is null in the JSON. */
    CHECK_EQ(tsock_producer_set_status(p, NULL), 0);
    CHECK_EQ(tsock_stats_query(&s, endpoint, 5000), 0);
    CHECK(strcmp(tsock_stats_status(s), "") == 0);
    CHECK(strstr(tsock_stats_json(s), "\"status\":null"));
    tsock_stats_destroy(s);

    CHECK_EQ(tsock_consumer_release(beta, held), 0);
    tsock_consumer_destroy(alpha);
    tsock_consumer_destroy(beta);
    tsock_producer_destroy(p);
}

/* ---- raw peers --------------------------------------------------------------------------- */

static int
send_msg(void *sock, const struct tsock__msg *m)
{
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    int n = tsock__msg_encode(m, buf, sizeof buf);
    CHECK(n > 0);
    return zmq_send(sock, buf, (size_t)n, 0);
}

/* Collects the replies to a flood of requests numbered below `marker_id`, with the producer's
 * uptime at each. Replies come back in request order on one connection, so once a marker
 * request (sent after the flood, repeated because the rate limit may drop it) is answered,
 * every flood reply is in: no quiet period decides when to stop, however slow the machine.
 * Returns how many flood replies came, or -1 if no marker was answered within a minute. */
static int
collect_flood_replies(void *sock, uint64_t marker_id, uint64_t *uptime_ns, int max)
{
    static uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    static struct tsock__stats_reply r;
    struct tsock__msg m = {.type = TSOCK__MSG_STATS_REQUEST};
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    int n = 0;
    for (int round = 0; round < 300; round++) {
        m.u.stats_request.request_id = marker_id + (uint64_t)round;
        CHECK(send_msg(sock, &m) > 0);
        while (zmq_poll(&item, 1, 200) > 0) {
            int got = zmq_recv(sock, buf, sizeof buf, 0);
            if (got <= 0 || tsock__stats_reply_decode(buf, (size_t)got, &r) != 0)
                continue;
            if (r.request_id >= marker_id)
                return n;
            if (n < max)
                uptime_ns[n++] = r.producer.uptime_ns;
        }
    }
    return -1;
}

/* A flood of requests is answered at most 20 a second; malformed ones are counted and
 * unanswered; a peer that asks never counts as a consumer. */
static void
test_flood_and_malformed(void)
{
    make_endpoint("flood");
    tsock_producer *p = make_producer();
    CHECK_EQ(tsock_producer_start(p), 0);
    void *ctx = zmq_ctx_new();
    void *raw = zmq_socket(ctx, ZMQ_DEALER);
    int bound = 60000; /* a missing answer fails the test instead of hanging it */
    zmq_setsockopt(raw, ZMQ_RCVTIMEO, &bound, sizeof bound);
    CHECK_EQ(zmq_connect(raw, endpoint), 0);
    struct tsock__msg m = {.type = TSOCK__MSG_STATS_REQUEST};
    for (int i = 0; i < 200; i++) {
        m.u.stats_request.request_id = (uint64_t)i;
        CHECK(send_msg(raw, &m) > 0);
    }
    static uint64_t up[200];
    int answered = collect_flood_replies(raw, 1000, up, 200);
    printf("%d of 200 flooded requests answered\n", answered);
    /* The first 20 of a window are always answered. No second of the producer's clock holds
     * more than two windows' worth (a one-second span meets at most two windows), and all 200
     * could only be answered if handling them took ten windows. These hold at any speed. */
    CHECK(answered >= 20);
    for (int i = 0; i < answered; i++) {
        int in_second = 0;
        for (int j = 0; j < answered; j++)
            in_second += up[j] >= up[i] && up[j] - up[i] < 1000000000u;
        CHECK(in_second <= 40);
    }
    CHECK(answered < 200 || up[answered - 1] - up[0] >= 9000000000u);
    /* A STATS_REQUEST with a 4-byte body, and CONSUMER_STATS from a peer that never joined. */
    uint8_t bad[16] = {'T', 'S', 'C', 'K', TSOCK__PROTO_VERSION, 0, TSOCK__MSG_STATS_REQUEST, 0,
                       4,   0,   0,   0};
    CHECK_EQ(zmq_send(raw, bad, sizeof bad, 0), (int)sizeof bad);
    for (int k = 0; k < 6000 && pstat(p, -1, TSOCK_STAT_BAD_MESSAGES) < 1; k++)
        nap();
    CHECK_EQ(pstat(p, -1, TSOCK_STAT_BAD_MESSAGES), 1);
    struct tsock__msg own = {.type = TSOCK__MSG_CONSUMER_STATS};
    CHECK(send_msg(raw, &own) > 0);
    uint8_t buf[64];
    struct tsock__msg d;
    int got = zmq_recv(raw, buf, sizeof buf, 0);
    CHECK(got > 0 && tsock__msg_decode(buf, (size_t)got, &d) == 0);
    CHECK(d.type == TSOCK__MSG_REJECT && d.u.reject.code == TSOCK_E_REJECTED);
    CHECK_EQ(tsock_producer_consumer_count(p), 0);
    CHECK_EQ(pstat(p, -1, TSOCK_STAT_JOINED), 0);
    /* The client repeats its request until the window has passed and it is answered. */
    tsock_stats *s = NULL;
    CHECK_EQ(tsock_stats_query(&s, endpoint, 60000), 0);
    CHECK_EQ(tsock_stats_consumer_count(s), 0);
    tsock_stats_destroy(s);
    zmq_close(raw);
    zmq_ctx_term(ctx);
    tsock_producer_destroy(p);
}

/* A fake producer: answers the first STATS_REQUEST with the frames a test chose. */
struct fake {
    void *router;
    int mode;
};

enum { FAKE_GARBAGE, FAKE_VERSION, FAKE_STALE_THEN_RIGHT, FAKE_BAD_REPLY };

static void
fake_answer(struct fake *f, const uint8_t *id, size_t id_len, const uint8_t *frame, size_t n)
{
    zmq_send(f->router, id, id_len, ZMQ_SNDMORE);
    zmq_send(f->router, frame, n, 0);
}

/* Makes a reply frame break a rule: 3 slots held of the 2 it has. */
static void
store_le_held(uint8_t *frame)
{
    frame[12 + 20] = 3;
}

static void
fake_reply(struct fake *f, const uint8_t *id, size_t id_len, uint64_t request_id, int broken)
{
    static struct tsock__stats_reply r;
    static uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    memset(&r, 0, sizeof r);
    r.request_id = request_id;
    r.producer.slots = 2;
    r.producer.free_slots = 2;
    r.producer.batches = 77;
    strcpy(r.status, "not json, \"quoted\"");
    int n = tsock__stats_reply_encode(&r, buf, sizeof buf);
    if (broken)
        store_le_held(buf);
    fake_answer(f, id, id_len, buf, (size_t)n);
}

static void *
fake_main(void *arg)
{
    struct fake *f = arg;
    uint8_t id[256], buf[256];
    int id_len = zmq_recv(f->router, id, sizeof id, 0);
    int n = zmq_recv(f->router, buf, sizeof buf, 0);
    struct tsock__msg m;
    if (id_len <= 0 || n <= 0 || tsock__msg_decode(buf, (size_t)n, &m) != 0)
        return NULL;
    uint64_t rid = m.u.stats_request.request_id;
    if (f->mode == FAKE_GARBAGE) {
        fake_answer(f, id, (size_t)id_len, (const uint8_t *)"HTTP/1.0 200 OK", 15);
    } else if (f->mode == FAKE_VERSION) {
        struct tsock__msg rej = {.type = TSOCK__MSG_REJECT, .u.reject.code = TSOCK_E_VERSION};
        int len = tsock__msg_encode(&rej, buf, sizeof buf);
        fake_answer(f, id, (size_t)id_len, buf, (size_t)len);
    } else {
        if (f->mode == FAKE_STALE_THEN_RIGHT)
            fake_reply(f, id, (size_t)id_len, rid + 1, 0);
        fake_reply(f, id, (size_t)id_len, rid, f->mode == FAKE_BAD_REPLY);
    }
    return NULL;
}

static int
query_fake(int mode, tsock_stats **s)
{
    make_endpoint("fake");
    void *ctx = zmq_ctx_new();
    struct fake f = {zmq_socket(ctx, ZMQ_ROUTER), mode};
    CHECK_EQ(zmq_bind(f.router, endpoint), 0);
    pthread_t t;
    pthread_create(&t, NULL, fake_main, &f);
    int rc = tsock_stats_query(s, endpoint, 5000);
    pthread_join(t, NULL);
    zmq_close(f.router);
    zmq_ctx_term(ctx);
    return rc;
}

static void
test_client_against_fakes(void)
{
    tsock_stats *s = NULL;
    CHECK_EQ(query_fake(FAKE_GARBAGE, &s), TSOCK_E_PROTOCOL);
    CHECK(s == NULL);
    CHECK_EQ(query_fake(FAKE_VERSION, &s), TSOCK_E_VERSION);
    CHECK_EQ(query_fake(FAKE_BAD_REPLY, &s), TSOCK_E_PROTOCOL);
    /* A late answer to an earlier request is skipped; a status that is not JSON goes out as a
     * JSON string. */
    CHECK_EQ(query_fake(FAKE_STALE_THEN_RIGHT, &s), 0);
    CHECK_EQ(sget(s, -1, TSOCK_STAT_BATCHES), 77);
    CHECK(strstr(tsock_stats_json(s), "\"status\":\"not json, \\\"quoted\\\"\""));
    CHECK(is_object(tsock_stats_json(s)));
    tsock_stats_destroy(s);
}

static void
test_client_errors(void)
{
    tsock_stats *s = (tsock_stats *)1;
    make_endpoint("nobody");
    CHECK_EQ(tsock_stats_query(&s, endpoint, 200), -ENOENT); /* no socket file */
    CHECK(s == NULL);
    /* A socket file nobody listens on: a producer killed with SIGKILL leaves one. */
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    CHECK_EQ(zmq_bind(router, endpoint), 0);
    CHECK_EQ(tsock_stats_query(&s, endpoint, 200), -ETIMEDOUT);
    zmq_close(router);
    zmq_ctx_term(ctx);
    CHECK_EQ(tsock_stats_query(NULL, endpoint, 200), -EINVAL);
    CHECK_EQ(tsock_stats_query(&s, endpoint, -2), -EINVAL);
    CHECK_EQ(tsock_stats_consumer_count(NULL), -EINVAL);
    CHECK(tsock_stats_json(NULL) == NULL);
    CHECK(tsock_stats_status(NULL) == NULL);
    CHECK(tsock_stats_consumer_name(NULL, 0) == NULL);
    uint64_t v;
    CHECK_EQ(tsock_stats_get(NULL, -1, TSOCK_STAT_BATCHES, &v), -EINVAL);
    tsock_stats_destroy(NULL);
}

int
main(void)
{
    test_json();
    test_status_setter();
    test_live_producer();
    test_flood_and_malformed();
    test_client_against_fakes();
    test_client_errors();
    return CHECK_DONE();
}
