/* Ranks of a data-parallel group in one process, with real sockets (the many-process runs are
 * tests/integration/groups_test.py): the setters' bad inputs, the refusals of resume, and a
 * group of three ranks on threads reading two exact group epochs, with padding and with
 * drop_last. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dataset/sampler.h"
#include "tsock/tsock.h"

#define SAMPLES 1000
#define BATCH 64
#define SLOTS 4
#define WORLD 3
#define EPOCHS 2

#include "id_producer.h"

static void
test_setters(void)
{
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, "ipc:///nonexistent/p.sock"), 0);
    char long_name[66];
    memset(long_name, 'g', 65);
    long_name[65] = '\0';
    CHECK_EQ(tsock_consumer_set_group(NULL, "g", 0, 1), -EINVAL);
    CHECK_EQ(tsock_consumer_set_group(c, NULL, 0, 1), -EINVAL);
    CHECK_EQ(tsock_consumer_set_group(c, "", 0, 1), -EINVAL);
    CHECK_EQ(tsock_consumer_set_group(c, long_name, 0, 1), -EINVAL);
    CHECK_EQ(tsock_consumer_set_group(c, "a\tb", 0, 1), -EINVAL);
    CHECK_EQ(tsock_consumer_set_group(c, "bad\xff", 0, 1), -EINVAL); /* not UTF-8 */
    CHECK_EQ(tsock_consumer_set_group(c, "g", 0, 0), -EINVAL);
    CHECK_EQ(tsock_consumer_set_group(c, "g", 4, 4), -EINVAL);
    long_name[64] = '\0';
    CHECK_EQ(tsock_consumer_set_group(c, long_name, 3, 4), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "r\xc3\xa9seau", 0, 2), 0); /* "réseau" */
    CHECK_EQ(tsock_consumer_set_group_timeout(NULL, 5), -EINVAL);
    CHECK_EQ(tsock_consumer_set_group_timeout(c, 0), 0);
    /* A rank checks a state as any consumer does. */
    CHECK_EQ(tsock_consumer_restore_state(c, "x", 1), TSOCK_E_BAD_STATE);
    tsock_consumer_destroy(c);
}

/* A solo consumer's state restored into a rank (restore_state before set_group): start
 * refuses it. */
static void
test_restore_then_group(void)
{
    pthread_t thread;
    tsock_producer *p = id_producer_start("groups", 1, &thread);
    tsock_consumer *solo = NULL;
    CHECK_EQ(tsock_consumer_create(&solo, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_checkpointing(solo, 1), 0);
    CHECK_EQ(tsock_consumer_start(solo, 5000), 0);
    tsock_batch *b = NULL;
    CHECK_EQ(tsock_consumer_next(solo, 5000, &b), 0);
    CHECK_EQ(tsock_consumer_release(solo, b), 0);
    uint8_t state[4096];
    size_t len = 0;
    CHECK_EQ(tsock_consumer_save_state(solo, state, sizeof state, &len), 0);
    tsock_consumer_destroy(solo);

    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_restore_state(c, state, len), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "g", 0, 1), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), TSOCK_E_BAD_STATE);
    tsock_consumer_destroy(c);
    id_producer_stop(p, &thread);
}

/* Refusals at start: a producer without a sampler (no exact epochs to share), and drop_last
 * with a batch larger than a rank's share (no batch at all). */
static void
test_refusals(void)
{
    pthread_t thread;
    tsock_producer *p = id_producer_start("groups", 0, &thread);
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "free", 0, 2), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), TSOCK_E_REJECTED);
    tsock_consumer_destroy(c);
    id_producer_stop(p, &thread);

    p = id_producer_start("groups", 1, &thread);
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "big", 0, WORLD), 0);
    CHECK_EQ(tsock_consumer_set_batch_size(c, SAMPLES / WORLD + 1), 0);
    CHECK_EQ(tsock_consumer_set_drop_last(c, 1), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), TSOCK_E_REJECTED);
    tsock_consumer_destroy(c);
    /* The same without drop_last is a valid group: each rank's one batch is padded. */
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "big", 0, 1), 0);
    CHECK_EQ(tsock_consumer_set_batch_size(c, SAMPLES + 1), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    CHECK_EQ(tsock_consumer_batches_per_epoch(c), 1);
    tsock_batch *b = NULL;
    CHECK_EQ(tsock_consumer_next(c, 5000, &b), 0);
    CHECK_EQ(tsock_batch_samples(b), SAMPLES);
    CHECK(tsock_batch_is_epoch_end(b));
    CHECK_EQ(tsock_consumer_release(c, b), 0);
    tsock_consumer_destroy(c);
    id_producer_stop(p, &thread);
}

struct rank {
    int rank, drop_last;
    uint32_t batch;
    uint64_t per_epoch; /* batches_per_epoch after start */
    int batches[EPOCHS], samples[EPOCHS];
    int64_t *ids[EPOCHS]; /* SAMPLES entries each */
    int errors;
};

static void *
read_rank(void *arg)
{
    struct rank *r = arg;
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_batch_size(c, r->batch), 0);
    CHECK_EQ(tsock_consumer_set_drop_last(c, r->drop_last), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "threads", (uint32_t)r->rank, WORLD), 0);
    CHECK_EQ(tsock_consumer_set_group_timeout(c, 30000), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "g", 0, 1), TSOCK_E_STATE);
    CHECK_EQ(tsock_consumer_set_group_timeout(c, 1), TSOCK_E_STATE);
    r->per_epoch = tsock_consumer_batches_per_epoch(c);
    for (int done = 0; done < EPOCHS;) {
        tsock_batch *b = NULL;
        int rc = tsock_consumer_next(c, 20000, &b);
        CHECK_EQ(rc, 0);
        if (rc < 0) {
            r->errors++;
            break;
        }
        uint64_t e = tsock_batch_epoch(b);
        CHECK((int)e == done);
        const int64_t *index = tsock_batch_tensor_data(b, 0);
        for (uint32_t i = 0; i < tsock_batch_samples(b) && e < EPOCHS; i++)
            r->ids[e][r->samples[e]++] = index[i];
        r->batches[e]++;
        done += tsock_batch_is_epoch_end(b);
        size_t len = 0;
        if (r->rank == 0 && r->batches[0] == 1)
            CHECK_EQ(tsock_consumer_save_state(c, NULL, 0, &len), TSOCK_E_STATE); /* no ids */
        CHECK_EQ(tsock_consumer_release(c, b), 0);
    }
    tsock_consumer_destroy(c);
    return NULL;
}

static void
check_epochs(struct rank *ranks, int drop_last, uint32_t batch)
{
    uint64_t share = drop_last ? SAMPLES / WORLD : (SAMPLES + WORLD - 1) / WORLD;
    if (drop_last)
        share -= share % batch;
    uint64_t batches = (share + batch - 1) / batch;
    for (int e = 0; e < EPOCHS; e++) {
        int seen[SAMPLES] = {0};
        int total = 0;
        for (int r = 0; r < WORLD; r++) {
            CHECK_EQ(ranks[r].per_epoch, batches);
            CHECK_EQ(ranks[r].batches[e], (int)batches);
            CHECK_EQ(ranks[r].samples[e], (int)share);
            for (int i = 0; i < ranks[r].samples[e]; i++) {
                int64_t id = ranks[r].ids[e][i];
                CHECK(id >= 0 && id < SAMPLES);
                if (id >= 0 && id < SAMPLES)
                    seen[id]++;
            }
            total += ranks[r].samples[e];
        }
        int distinct = 0, repeated = 0;
        for (int i = 0; i < SAMPLES; i++) {
            distinct += seen[i] > 0;
            repeated += seen[i] > 1 ? seen[i] - 1 : 0;
        }
        if (drop_last) {
            CHECK_EQ(repeated, 0);
            CHECK(SAMPLES - distinct < WORLD * (int)batch);
        } else {
            CHECK_EQ(distinct, SAMPLES);         /* every sample */
            CHECK_EQ(repeated, total - SAMPLES); /* and only padding twice */
            CHECK(repeated < WORLD);
        }
    }
}

static void
run_group(uint32_t batch, int drop_last)
{
    pthread_t thread, readers[WORLD];
    tsock_producer *p = id_producer_start("groups", 1, &thread);
    struct rank ranks[WORLD];
    memset(ranks, 0, sizeof ranks);
    for (int r = 0; r < WORLD; r++) {
        ranks[r].rank = r;
        ranks[r].batch = batch;
        ranks[r].drop_last = drop_last;
        for (int e = 0; e < EPOCHS; e++)
            ranks[r].ids[e] = calloc(SAMPLES, sizeof(int64_t));
        pthread_create(&readers[r], NULL, read_rank, &ranks[r]);
    }
    for (int r = 0; r < WORLD; r++)
        pthread_join(readers[r], NULL);
    check_epochs(ranks, drop_last, batch);
    for (int r = 0; r < WORLD; r++)
        for (int e = 0; e < EPOCHS; e++)
            free(ranks[r].ids[e]);
    id_producer_stop(p, &thread);
}

/* Issue 18, item 8: two producers in one process fail incomplete groups at the same time,
 * each on its own service thread. The rank lists of their GROUP_FAILED messages were built in
 * static buffers the two threads shared (a data race TSan reports); each producer now has its
 * own. Rank 0 of a world of 2 on one producer and of a world of 3 on the other: each rank
 * must hear that its group is incomplete. */
struct lonely_rank {
    char endpoint[256];
    uint32_t world;
    int rc;
};

static void *
lonely_rank_run(void *arg)
{
    struct lonely_rank *r = arg;
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, r->endpoint), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "lonely", 0, r->world), 0);
    CHECK_EQ(tsock_consumer_set_group_timeout(c, 300), 0);
    r->rc = tsock_consumer_start(c, 5000);
    tsock_batch *b = NULL;
    if (r->rc == 0)
        r->rc = tsock_consumer_next(c, 20000, &b);
    tsock_consumer_destroy(c);
    return NULL;
}

static void
test_two_producers_fail_groups(void)
{
    tsock_producer *p[2];
    struct lonely_rank ranks[2];
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        p[i] = id_producer_start("groups", 1, NULL);
        snprintf(ranks[i].endpoint, sizeof ranks[i].endpoint, "%s", id_endpoint);
        ranks[i].world = 2 + (uint32_t)i;
        ranks[i].rc = 0;
    }
    for (int i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, lonely_rank_run, &ranks[i]);
    for (int i = 0; i < 2; i++) {
        pthread_join(threads[i], NULL);
        CHECK_EQ(ranks[i].rc, TSOCK_E_GROUP_INCOMPLETE);
    }
    for (int i = 0; i < 2; i++)
        id_producer_stop(p[i], NULL);
}

/* Issue 18, item 1: a group that starts with its producer gets epoch 0 = the permutation of
 * (seed, 0). Rank 1 joins after rank 0 is connected; the producer, whose only consumer is a
 * rank waiting at its start barrier, must publish nothing meanwhile (it used to publish to
 * nobody, so the group's window started somewhere in the stream). The pause only gives a
 * wrong producer time to publish; the verdict does not depend on it. Rank l's batch i is the
 * window's block 2i + l (docs/distributed.md): interleaved, the full group batches must be the
 * permutation's start. */
struct order_rank {
    int rank;
    int64_t ids[SAMPLES];
    int n;
};

static void *
read_order_rank(void *arg)
{
    struct order_rank *r = arg;
    tsock_consumer *c = NULL;
    CHECK_EQ(tsock_consumer_create(&c, id_endpoint), 0);
    CHECK_EQ(tsock_consumer_set_group(c, "order", (uint32_t)r->rank, 2), 0);
    CHECK_EQ(tsock_consumer_start(c, 5000), 0);
    for (int i = 0; i < 7; i++) { /* the 7 full group batches of 2 x 64 in 1000 samples */
        tsock_batch *b = NULL;
        int rc = tsock_consumer_next(c, 20000, &b);
        CHECK_EQ(rc, 0);
        if (rc < 0)
            break;
        const int64_t *index = tsock_batch_tensor_data(b, 0);
        for (uint32_t k = 0; k < tsock_batch_samples(b); k++)
            r->ids[r->n++] = index[k];
        CHECK_EQ(tsock_consumer_release(c, b), 0);
    }
    tsock_consumer_destroy(c);
    return NULL;
}

static void
test_group_starts_with_producer(void)
{
    pthread_t thread, readers[2];
    tsock_producer *p = id_producer_start("groups", 1, &thread);
    static struct order_rank ranks[2];
    memset(ranks, 0, sizeof ranks);
    ranks[0].rank = 0;
    ranks[1].rank = 1;
    pthread_create(&readers[0], NULL, read_order_rank, &ranks[0]);
    for (int i = 0; i < 500 && tsock_producer_consumer_count(p) < 1; i++)
        usleep(10000);
    CHECK_EQ(tsock_producer_consumer_count(p), 1);
    usleep(300000);
    pthread_create(&readers[1], NULL, read_order_rank, &ranks[1]);
    for (int r = 0; r < 2; r++)
        pthread_join(readers[r], NULL);
    static uint64_t perm[SAMPLES];
    tsock__sampler_permutation(SAMPLES, 11, 0, perm);
    int mismatches = 0;
    for (int i = 0; i < 7 * 2 * BATCH; i++) {
        int block = i / BATCH, rank = block % 2, at = (block / 2) * BATCH + i % BATCH;
        mismatches += at >= ranks[rank].n || (uint64_t)ranks[rank].ids[at] != perm[i];
    }
    CHECK_EQ(mismatches, 0);
    id_producer_stop(p, &thread);
}

int
main(void)
{
    test_group_starts_with_producer();
    test_two_producers_fail_groups();
    test_setters();
    test_restore_then_group();
    test_refusals();
    run_group(BATCH, 0); /* blocks are producer batches: views, the tail padded */
    run_group(50, 0);    /* blocks across producer batches: gathers */
    run_group(50, 1);    /* drop_last */
    return CHECK_DONE();
}
