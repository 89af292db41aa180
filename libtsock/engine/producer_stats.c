/* The producer's figures: snapshots shared by tsock_producer_stat and the STATS_REPLY the
 * service thread sends, and the application's status text. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "engine/producer_internal.h"
#include "engine/stats.h"

/* ---- statistics -------------------------------------------------------------------------- */

int
tsock_producer_consumer_count(tsock_producer *p)
{
    if (!p)
        return -EINVAL;
    pthread_mutex_lock(&p->mu);
    int n = p->consumer_count;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Snapshots of the figures, shared by tsock_producer_stat and STATS_REPLY (mu held). */
void
tsock__producer_snapshot(const tsock_producer *p, struct tsock__stats_producer *s)
{
    /* Before start the ring is not set up: every slot is free, none held. */
    int held = tsock__ring_held_count(&p->ring);
    int free_slots = tsock__ring_free_count(&p->ring);
    *s = (struct tsock__stats_producer){
        .pid = (uint32_t)getpid(),
        .slots = p->slot_count,
        .free_slots = free_slots < 0 ? p->slot_count : (uint32_t)free_slots,
        .held = held < 0 ? 0 : (uint32_t)held,
        .batches = p->stat_batches,
        .samples = p->stat_samples,
        .epochs = p->stat_epochs,
        .released = p->stat_released,
        .joined = p->stat_joined,
        .lost = p->stat_lost,
        .bad_messages = p->stat_bad,
        .wait_ns = p->stat_wait_ns,
        .uptime_ns = p->started_ns ? tsock__now_ns() - p->started_ns : 0,
    };
}

/* Batches between the oldest publication consumer `index` still holds and the newest one. */
static uint64_t
consumer_lag(const tsock_producer *p, int index)
{
    uint64_t lag = 0;
    return tsock__ring_lag(&p->ring, (uint32_t)index, &lag) < 0 ? 0 : lag;
}

void
tsock__producer_snapshot_consumer(const tsock_producer *p, int index,
                                  struct tsock__stats_consumer *s)
{
    const struct tsock__consumer_rec *c = &p->consumers[index];
    int held = tsock__ring_held_by(&p->ring, (uint32_t)index);
    *s = (struct tsock__stats_consumer){
        .id = c->consumer_id,
        .pid = c->pid,
        .flags =
            (c->paused ? TSOCK__STATS_PAUSED : 0u) | (c->reported ? TSOCK__STATS_REPORTED : 0u),
        .batches = c->batches,
        .samples = c->samples,
        .released = c->released,
        .held = held < 0 ? 0 : (uint32_t)held,
        .lag = consumer_lag(p, index),
        .rate_milli = c->rate_milli,
        .own = c->own,
    };
    memcpy(s->name, c->name, sizeof s->name);
}

/* Indices of the active consumers in join order; returns how many. */
int
tsock__producer_join_order(const tsock_producer *p, int order[TSOCK__PRODUCER_MAX_CONSUMERS])
{
    int n = 0;
    for (int i = 0; i < TSOCK__PRODUCER_MAX_CONSUMERS; i++) {
        if (!p->consumers[i].active)
            continue;
        int k = n++;
        for (; k > 0 && p->consumers[order[k - 1]].join_order > p->consumers[i].join_order; k--)
            order[k] = order[k - 1];
        order[k] = i;
    }
    return n;
}

int
tsock_producer_stat(tsock_producer *p, int consumer, int key, uint64_t *value)
{
    if (!p || !value || consumer < -1)
        return -EINVAL;
    int order[TSOCK__PRODUCER_MAX_CONSUMERS], err;
    pthread_mutex_lock(&p->mu);
    if (consumer < 0) {
        struct tsock__stats_producer s;
        tsock__producer_snapshot(p, &s);
        err = tsock__stats_producer_value(&s, (uint32_t)p->consumer_count, key, value);
    } else if (consumer >= tsock__producer_join_order(p, order)) {
        err = -ENOENT;
    } else {
        struct tsock__stats_consumer s;
        tsock__producer_snapshot_consumer(p, order[consumer], &s);
        err = tsock__stats_consumer_value(&s, key, value);
    }
    pthread_mutex_unlock(&p->mu);
    return err;
}

int
tsock_producer_set_status(tsock_producer *p, const char *json_object)
{
    if (!p)
        return -EINVAL;
    const char *text = json_object ? json_object : "";
    size_t len = strnlen(text, TSOCK_MAX_STATUS + 1);
    if (len > TSOCK_MAX_STATUS)
        return -EMSGSIZE;
    /* The rules a STATS_REPLY decoder applies, plus JSON: clients embed the text as is. */
    if (len > 0 && (!tsock__proto_text_ok(text, len) || !tsock__json_is_object(text, len)))
        return -EINVAL;
    pthread_mutex_lock(&p->mu);
    memcpy(p->status, text, len);
    p->status[len] = '\0';
    pthread_mutex_unlock(&p->mu);
    return 0;
}
