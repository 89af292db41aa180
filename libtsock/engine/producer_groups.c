/* The producer's data-parallel groups (docs/distributed.md): the checks at join, the start
 * barrier, the timeout that names the missing ranks, and the end of a group that lost a rank.
 * The arithmetic and the membership table are dataset/groups.c's; this file keeps one such
 * table per group and tells the ranks when their group is over. Every function runs on the
 * service thread with mu held and calls only the channel: the roster (producer_service.c)
 * calls in, never the other way.
 *
 * A group is one virtual consumer: its ranks get no batch until the last one joined (they are
 * `waiting`), then all of them get every batch from the next one on, so their windows start at
 * the same stream position. A group does not pause: its ranks' consumers never send PAUSE
 * (consumer_service.c), because a rank that restarted its window alone would break the
 * group's shared epoch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/producer_internal.h"

#define MAX_CONSUMERS TSOCK__PRODUCER_MAX_CONSUMERS
_Static_assert(TSOCK__GROUP_MAX_LOCAL == TSOCK__PROTO_MAX_GROUP_RANKS,
               "GROUP_FAILED can name every rank of a group");

static int
find_group(const tsock_producer *p, const char *name)
{
    for (int i = 0; i < MAX_CONSUMERS; i++)
        if (p->groups[i] && strcmp(p->groups[i]->g.name, name) == 0)
            return i;
    return -1;
}

static int
free_group_slot(const tsock_producer *p)
{
    for (int i = 0; i < MAX_CONSUMERS; i++)
        if (!p->groups[i])
            return i;
    return -1; /* cannot happen: every group has a member, and members are consumers */
}

/* The producer's node split (producer_nodes.c; 0 nodes set means one). */
static uint32_t
node_count(const tsock_producer *p)
{
    return p->nodes > 1 ? p->nodes : 1;
}

static uint32_t
node_index(const tsock_producer *p)
{
    return p->nodes > 1 ? p->node_rank : 0;
}

/* "600 s", "1.5 s": the timeout as the messages say it. */
static void
format_seconds(uint32_t ms, char *buf, size_t size)
{
    snprintf(buf, size, "%g s", (double)ms / 1000.0);
}

/* The consumer record of the member at local rank l, or NULL. */
static struct tsock__consumer_rec *
member(tsock_producer *p, const struct tsock__pgroup *pg, uint32_t l)
{
    uint64_t peer = pg->g.member[l];
    return peer ? &p->consumers[peer - 1] : NULL;
}

/* Tells every joined rank its group is over, and forgets the group. Ranks whose send fails
 * are gone already: liveness drops them. */
static void
fail_group(tsock_producer *p, int slot, int code, const uint32_t *ranks, uint32_t count)
{
    struct tsock__pgroup *pg = p->groups[slot];
    uint8_t *wire = p->group_failed_wire; /* the producer's own: its service thread only */
    for (uint32_t i = 0; i < count; i++)
        for (int k = 0; k < 4; k++)
            wire[4 * i + (uint32_t)k] = (uint8_t)(ranks[i] >> (8 * k));
    struct tsock__msg m;
    memset(&m.u.group_failed, 0, sizeof m.u.group_failed);
    m.type = TSOCK__MSG_GROUP_FAILED;
    m.u.group_failed.code = code;
    m.u.group_failed.timeout_ms = code == TSOCK_E_GROUP_INCOMPLETE ? pg->timeout_ms : 0;
    m.u.group_failed.rank_count = count;
    m.u.group_failed.ranks = wire;
    for (uint32_t l = 0; l < pg->g.local_world; l++) {
        struct tsock__consumer_rec *c = member(p, pg, l);
        if (!c)
            continue;
        c->group_slot = 0;
        c->group_failed = 1;
        if (!c->active)
            continue; /* unreachable, its verdict pending: it hears nothing more anyway */
        int err = tsock__channel_send(p->channel, (int)(pg->g.member[l] - 1), &m);
        if (err < 0)
            tsock__log(TSOCK_LOG_WARN, "telling consumer %llu its group is over failed: %s",
                       (unsigned long long)c->consumer_id, tsock_strerror(err));
    }
    free(pg);
    p->groups[slot] = NULL;
}

/* The last rank joined: from the next batch on, every rank gets every batch. */
static void
start_group(tsock_producer *p, struct tsock__pgroup *pg)
{
    pg->started = 1;
    for (uint32_t l = 0; l < pg->g.local_world; l++) {
        struct tsock__consumer_rec *c = member(p, pg, l);
        c->waiting = 0;
        c->window_start = TSOCK__NO_WINDOW;
    }
    tsock__log(TSOCK_LOG_INFO,
               "group '%s': all %u ranks joined; its epochs start at the next batch", pg->g.name,
               pg->g.local_world);
}

/* A new group's record, from its first rank's declaration. Returns its slot, or a REJECT code
 * with why[] set. */
static int
new_group(tsock_producer *p, const struct tsock__msg_hello *h, uint32_t batch, char *why,
          size_t why_size)
{
    int slot = free_group_slot(p);
    struct tsock__pgroup *pg = slot >= 0 ? calloc(1, sizeof *pg) : NULL;
    if (!pg) {
        snprintf(why, why_size, "group '%s': out of memory", h->group);
        return -ENOMEM;
    }
    const char *what = NULL;
    int err = tsock__group_init(&pg->g, h->group, h->world, node_count(p), node_index(p), batch,
                                h->drop_last, &what);
    struct tsock__rank_plan plan;
    if (err == 0 && tsock__rank_plan_init(&plan, p->dataset_samples, p->sampler_samples, h->world,
                                          pg->g.local_world, 0, batch, h->drop_last) < 0) {
        what = "with drop_last, a rank's share of an epoch holds no full batch";
        err = TSOCK_E_REJECTED;
    }
    if (err < 0) {
        snprintf(why, why_size, "group '%s': %s", h->group, what);
        free(pg);
        return err == TSOCK_E_REJECTED ? err : TSOCK_E_GROUP_MISMATCH;
    }
    pg->g.resume = h->resume;
    pg->timeout_ms = h->timeout_ms;
    pg->deadline_ns = tsock__now_ns() + (uint64_t)h->timeout_ms * 1000000u;
    p->groups[slot] = pg;
    return slot;
}

int
tsock__pgroup_admit(tsock_producer *p, int index, const struct tsock__msg_hello *h, char *why,
                    size_t why_size)
{
    if (!(h->flags & TSOCK__HELLO_HAS_GROUP))
        return 0;
    if (!p->use_sampler) {
        snprintf(why, why_size,
                 "group '%s': groups need a producer with a sampler (exact epochs); this one "
                 "serves free mode",
                 h->group);
        return TSOCK_E_REJECTED;
    }
    uint32_t batch = h->batch ? h->batch : p->batch_size;
    int slot = find_group(p, h->group), created = slot < 0;
    if (created && (slot = new_group(p, h, batch, why, why_size)) < 0)
        return slot;
    struct tsock__pgroup *pg = p->groups[slot];
    const char *what = NULL;
    uint32_t local = 0;
    if (pg->started && h->world == pg->g.world &&
        tsock__groups_place(h->rank, h->world, node_count(p), node_index(p), &local, NULL) == 0 &&
        !pg->g.member[local]) {
        /* Its rank left a running group: a newcomer's window would start elsewhere. */
        snprintf(why, why_size,
                 "group '%s': rank %u: the group's epochs have started; a rank that left "
                 "cannot join it again",
                 h->group, h->rank);
        return TSOCK_E_GROUP_MISMATCH;
    }
    int joined = tsock__group_check_resume(&pg->g, h->resume, &what);
    if (joined == 0)
        joined = tsock__group_join(&pg->g, h->rank, h->world, batch, h->drop_last,
                                   (uint64_t)index + 1, &what);
    if (joined < 0) {
        snprintf(why, why_size, "group '%s': rank %u: %s", h->group, h->rank, what);
        if (created) {
            free(pg);
            p->groups[slot] = NULL;
        }
        return TSOCK_E_GROUP_MISMATCH;
    }
    struct tsock__consumer_rec *c = &p->consumers[index];
    c->group_slot = slot + 1;
    c->rank = h->rank;
    c->waiting = 1;
    tsock__log(TSOCK_LOG_INFO, "group '%s': rank %u of %u joined (%u of %u here)", h->group,
               h->rank, h->world, pg->g.joined, pg->g.local_world);
    if (joined == 1)
        start_group(p, pg);
    return 0;
}

void
tsock__pgroup_leave(tsock_producer *p, int index, int lost)
{
    struct tsock__consumer_rec *c = &p->consumers[index];
    if (!c->group_slot)
        return;
    int slot = c->group_slot - 1;
    struct tsock__pgroup *pg = p->groups[slot];
    long rank = tsock__group_leave(&pg->g, (uint64_t)index + 1);
    c->group_slot = 0;
    if (!pg->started || !lost) {
        /* Before the barrier a rank may still come back (a launcher restarting it): the
         * others go on waiting, within their timeout. After it, a rank that says BYE has
         * finished (or its process is closing in order): the others read on, their blocks
         * unchanged. */
        if (pg->g.joined == 0) {
            free(pg);
            p->groups[slot] = NULL;
        }
        return;
    }
    uint32_t gone = rank < 0 ? 0 : (uint32_t)rank;
    tsock__log(TSOCK_LOG_WARN, "group '%s': rank %u of %u was lost; the group is over", pg->g.name,
               gone, pg->g.world);
    fail_group(p, slot, TSOCK_E_GROUP_LOST, &gone, 1);
}

/* The ranks that did not join, in a log line and a GROUP_FAILED. */
static void
fail_incomplete(tsock_producer *p, int slot)
{
    struct tsock__pgroup *pg = p->groups[slot];
    uint32_t *missing = p->group_missing; /* the producer's own: its service thread only */
    uint32_t n = 0;
    for (uint32_t l = 0; l < pg->g.local_world; l++)
        if (!pg->g.member[l])
            missing[n++] = pg->g.node * pg->g.local_world + l;
    char text[256], secs[32];
    tsock__group_describe_missing(&pg->g, text, sizeof text);
    format_seconds(pg->timeout_ms, secs, sizeof secs);
    tsock__log(TSOCK_LOG_ERROR, "%s within %s", text, secs);
    fail_group(p, slot, TSOCK_E_GROUP_INCOMPLETE, missing, n);
}

int
tsock__pgroup_expire(tsock_producer *p, uint64_t now)
{
    int next_ms = -1;
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        struct tsock__pgroup *pg = p->groups[i];
        if (!pg || pg->started)
            continue;
        if (now >= pg->deadline_ns) {
            fail_incomplete(p, i);
            continue;
        }
        uint64_t left_ms = (pg->deadline_ns - now) / 1000000u + 1;
        if (next_ms < 0 || left_ms < (uint64_t)next_ms)
            next_ms = left_ms > INT32_MAX ? INT32_MAX : (int)left_ms;
    }
    return next_ms;
}

void
tsock__pgroup_free_all(tsock_producer *p)
{
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        free(p->groups[i]);
        p->groups[i] = NULL;
    }
}
