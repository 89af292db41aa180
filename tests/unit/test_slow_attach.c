/* A consumer whose first attach of the ring is slow (issue 12, item 8: the first CUDA
 * initialisation can take seconds) keeps heartbeating meanwhile, so the producer does not drop
 * it, and keeps the batches announced meanwhile: its window has started.
 *
 * On the shared-memory backend the attach is made slow by the library's own log callback,
 * which blocks on the attach's log line until the test has seen a batch published and given
 * the producer several heartbeat timeouts to lose the consumer. Real ZeroMQ sockets, a real
 * shared-memory ring. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "tsock/tsock.h"

#define BATCH 8
#define HB_TIMEOUT_MS 1000

static char endpoint[256];

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int in_attach, attach_may_finish;

static void
on_log(void *user, int level, const char *message)
{
    if (!strstr(message, "attached the producer's ring"))
        return;
    pthread_mutex_lock(&mu);
    in_attach = 1;
    pthread_cond_broadcast(&cond);
    while (!attach_may_finish)
        pthread_cond_wait(&cond, &mu);
    pthread_mutex_unlock(&mu);
}

static int
wait_in_attach(int ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    pthread_mutex_lock(&mu);
    while (!in_attach && pthread_cond_timedwait(&cond, &mu, &until) == 0)
        ;
    int got = in_attach;
    pthread_mutex_unlock(&mu);
    return got;
}

struct reader {
    tsock_consumer *c;
    int start_err, next_err;
    int content_ok;
};

static void *
read_first(void *arg)
{
    struct reader *r = arg;
    r->start_err = tsock_consumer_start(r->c, 20000);
    if (r->start_err < 0)
        return NULL;
    tsock_batch *b = NULL;
    r->next_err = tsock_consumer_next(r->c, 20000, &b);
    if (r->next_err < 0)
        return NULL;
    const uint8_t *d = tsock_batch_tensor_data(b, 0);
    r->content_ok = tsock_batch_samples(b) == BATCH;
    for (size_t i = 0; i < tsock_batch_tensor_bytes(b, 0); i++)
        r->content_ok &= d[i] == 0x77;
    CHECK_EQ(tsock_consumer_release(r->c, b), 0);
    return NULL;
}

int
main(void)
{
    char dir[128];
    test_scratch_dir(dir, sizeof dir, "slow-attach");
    snprintf(endpoint, sizeof endpoint, "ipc://%s/attach.sock", dir);
    tsock_set_log(on_log, NULL, TSOCK_LOG_INFO);

    tsock_layout *layout;
    int64_t shape[1] = {16};
    CHECK_EQ(tsock_layout_create(&layout), 0);
    CHECK_EQ(tsock_layout_add(layout, "data", TSOCK_UINT8, 1, shape), 0);
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_producer_create(&p, endpoint, layout, BATCH, 4), 0);
    tsock_layout_destroy(layout);
    CHECK_EQ(tsock_producer_set_heartbeat(p, 50, HB_TIMEOUT_MS), 0);
    CHECK_EQ(tsock_producer_start(p), 0);

    struct reader r = {0};
    CHECK_EQ(tsock_consumer_create(&r.c, endpoint), 0);
    CHECK_EQ(tsock_consumer_set_heartbeat(r.c, 50, 10000), 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, read_first, &r), 0);

    /* The consumer is attaching: publish a batch for it meanwhile. */
    CHECK(wait_in_attach(20000));
    CHECK_EQ(tsock_producer_wait_consumers(p, 1, 20000), 1);
    tsock_slot *slot;
    CHECK_EQ(tsock_producer_acquire(p, 20000, &slot), 0);
    memset(tsock_slot_data(slot, 0), 0x77, BATCH * 16);
    CHECK_EQ(tsock_producer_publish(p, slot, BATCH), 0);
    /* Four heartbeat timeouts: a consumer that stopped heartbeating is lost by then. */
    uint64_t lost = 0;
    for (int i = 0; i < 4 * HB_TIMEOUT_MS / 20 && lost == 0; i++) {
        usleep(20000);
        CHECK_EQ(tsock_producer_stat(p, -1, TSOCK_STAT_LOST, &lost), 0);
    }
    CHECK_EQ(lost, 0);
    pthread_mutex_lock(&mu);
    attach_may_finish = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&mu);

    pthread_join(t, NULL);
    CHECK_EQ(r.start_err, 0);
    CHECK_EQ(r.next_err, 0);
    CHECK(r.content_ok); /* the batch announced during the attach was kept, not released */
    tsock_consumer_destroy(r.c);
    tsock_producer_destroy(p);
    tsock_set_log(NULL, NULL, TSOCK_LOG_INFO);
    return CHECK_DONE();
}
