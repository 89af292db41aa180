/* A producer for the consumer-side unit tests: one tensor "index" (int64) that holds each
 * sample's id, published by a background thread from the sampler's plan (or BATCH samples
 * 0..BATCH-1 a batch in free mode), so a test checks what its consumers received against the
 * ids alone. The including file defines SAMPLES, BATCH and SLOTS; the endpoint of the last
 * producer started is `id_endpoint`. Header-only, like check.h. */
#ifndef TSOCK_TEST_ID_PRODUCER_H
#define TSOCK_TEST_ID_PRODUCER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "tsock/tsock.h"

static char id_endpoint[256];
static atomic_int id_producer_stopping;
/* Set once acquire said the stream ended; finishing then waits id_producer_finish_delay_ms (a
 * test's window between the producer's decision and the consumers hearing of it). */
static atomic_int id_producer_end_seen;
static int id_producer_finish_delay_ms;

/* Publishes while a consumer is there, until id_producer_stop. */
static void *
id_producer_run(void *arg)
{
    tsock_producer *p = arg;
    while (!atomic_load(&id_producer_stopping)) {
        if (tsock_producer_wait_consumers(p, 1, 50) < 0)
            continue;
        tsock_slot *slot;
        int err = tsock_producer_acquire(p, 50, &slot);
        if (err == TSOCK_E_END) { /* a finite stream's end: its consumers hear of it */
            atomic_store(&id_producer_end_seen, 1);
            if (id_producer_finish_delay_ms > 0)
                usleep((useconds_t)id_producer_finish_delay_ms * 1000);
            tsock_producer_finish(p);
            break;
        }
        if (err < 0)
            continue;
        uint32_t n = tsock_slot_planned(slot);
        const uint64_t *ids = tsock_slot_sample_ids(slot);
        int64_t *index = tsock_slot_data(slot, 0);
        if (!ids) /* free mode: a batch of whatever the application chooses */
            n = BATCH;
        for (uint32_t i = 0; i < n; i++)
            index[i] = ids ? (int64_t)ids[i] : (int64_t)i;
        tsock_producer_publish(p, slot, n);
    }
    return NULL;
}

/* Starts a producer on a fresh ipc endpoint (`tag` names its folder), with a sampler of
 * SAMPLES samples (seed 11, `epochs` epochs, 0: endless) when `sampler`, and, when `thread`
 * is not NULL, the publishing thread. */
static tsock_producer *
id_producer_start_epochs(const char *tag, int sampler, uint64_t epochs, pthread_t *thread)
{
    static int count;
    char dir[128];
    test_scratch_dir(dir, sizeof dir, tag);
    snprintf(id_endpoint, sizeof id_endpoint, "ipc://%s/p%d.sock", dir, count++);
    tsock_layout *layout;
    tsock_layout_create(&layout);
    tsock_layout_add(layout, "index", TSOCK_INT64, 0, NULL);
    tsock_producer *p = NULL;
    CHECK_EQ(tsock_producer_create(&p, id_endpoint, layout, BATCH, SLOTS), 0);
    tsock_layout_destroy(layout);
    if (sampler)
        CHECK_EQ(tsock_producer_set_sampler(p, SAMPLES, 11, epochs), 0);
    CHECK_EQ(tsock_producer_start(p), 0);
    atomic_store(&id_producer_stopping, 0);
    atomic_store(&id_producer_end_seen, 0);
    if (thread)
        pthread_create(thread, NULL, id_producer_run, p);
    return p;
}

/* Publishes the sampler's next batch, its ids in the "index" tensor (a producer started
 * without the thread). Returns the batch's first id. */
static inline int64_t
id_producer_publish_one(tsock_producer *p)
{
    tsock_slot *slot = NULL;
    CHECK_EQ(tsock_producer_acquire(p, 5000, &slot), 0);
    if (!slot)
        return -1;
    uint32_t n = tsock_slot_planned(slot);
    const uint64_t *ids = tsock_slot_sample_ids(slot);
    int64_t *index = tsock_slot_data(slot, 0);
    for (uint32_t i = 0; i < n; i++)
        index[i] = (int64_t)ids[i];
    int64_t first = index[0];
    CHECK_EQ(tsock_producer_publish(p, slot, n), 0);
    return first;
}

/* id_producer_start_epochs with endless epochs. */
static tsock_producer *
id_producer_start(const char *tag, int sampler, pthread_t *thread)
{
    return id_producer_start_epochs(tag, sampler, 0, thread);
}

/* Stops the thread (when there is one), destroys the producer and removes its folder (the
 * scratch root goes at exit in any case). */
static void
id_producer_stop(tsock_producer *p, pthread_t *thread)
{
    atomic_store(&id_producer_stopping, 1);
    if (thread)
        pthread_join(*thread, NULL);
    char dir[256];
    snprintf(dir, sizeof dir, "%s", tsock_producer_endpoint(p) + strlen("ipc://"));
    tsock_producer_destroy(p);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        rmdir(dir);
    }
}

#endif
