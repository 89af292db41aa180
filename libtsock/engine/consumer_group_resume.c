/* Saving and restoring the position of a rank of a data-parallel group (docs/semantics.md,
 * "Resuming a group"; docs/distributed.md).
 *
 * A rank receives every BATCH of its group's window with its ids and releases the other ranks'
 * blocks as it reads past them, so it knows the ids of every rank's blocks. Ranks checkpoint at
 * the same step k (DDP), and after k steps the group has consumed exactly its first k group
 * batches: the window positions [0, k·L·B). A rank's state records that set U (the group's,
 * not its own block alone), so every rank that saved at step k saves the same U, and a group
 * restored with any world size can deal out the rest: its restored epoch is the window with
 * the ids of U left out (a subsequence of the stream every rank sees identically from the
 * start barrier), dealt in blocks, padded or cut as DistributedSampler does, over the R =
 * M - |U| remaining samples.
 *
 * Positions here are positions in the group epoch's sequence: the window itself, or in a
 * restored epoch the filtered window. c->resume.delivered is U's bitmap; ids the rank passed at
 * positions at or past the group's step (it may read ahead into its next block before its
 * caller saves) wait in group_ahead until the step that covers them is delivered. Called by
 * the resume and read paths; calls neither. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/consumer_internal.h"

/* The group epoch's position up to which the group has consumed everything: L·B per step of
 * the current plan. */
static uint64_t
group_step_position(const tsock_consumer *c)
{
    const struct tsock__rank_plan *rp = &c->group.plan;
    return (c->plan.index - c->group.index_base) * rp->local_world * rp->batch;
}

uint64_t
tsock__group_saved_to(const tsock_consumer *c)
{
    return group_step_position(c);
}

static void
add_to_set(tsock_consumer *c, uint32_t id)
{
    if (!tsock__bit_test(c->resume.delivered, id)) {
        tsock__bit_set(c->resume.delivered, id);
        c->group.consumed++;
    }
}

static int
keep_ahead(tsock_consumer *c, uint32_t id)
{
    if (c->group.ahead_n == c->group.ahead_cap) {
        uint32_t cap = c->group.ahead_cap ? 2 * c->group.ahead_cap : 64;
        uint32_t *grown = realloc(c->group.ahead, (size_t)cap * sizeof *grown);
        if (!grown)
            return -ENOMEM;
        c->group.ahead = grown;
        c->group.ahead_cap = cap;
    }
    c->group.ahead[c->group.ahead_n++] = id;
    return 0;
}

void
tsock__group_note_passed(tsock_consumer *c, const uint32_t *ids, uint32_t n)
{
    if (c->group.filtering)
        c->resume.window_left -= n < c->resume.window_left ? n : c->resume.window_left;
    if (!c->checkpointing || !c->resume.delivered || c->group.skip_rest)
        return; /* past the epoch's last batch: none of the next epoch's set */
    uint64_t step = group_step_position(c);
    for (uint32_t i = 0; i < n; i++) {
        if (c->group.pos + i < step)
            add_to_set(c, ids[i]);
        else if (keep_ahead(c, ids[i]) < 0)
            c->group.save_error = -ENOMEM;
    }
}

int
tsock__group_saved(const tsock_consumer *c, uint32_t id)
{
    return c->group.filtering && !c->group.skip_rest && tsock__bit_test(c->resume.delivered, id);
}

static void
clear_set(tsock_consumer *c)
{
    memset(c->resume.delivered, 0, (size_t)((c->resume.delivered_n + 7) / 8));
    c->group.consumed = 0;
    c->group.ahead_n = 0;
}

/* The restored epoch is over: the next ones are normal group epochs over the whole window. */
static void
end_restored_plan(tsock_consumer *c)
{
    c->group.plan = c->group.full_plan;
    c->plan.n = c->group.plan.per_rank;
    c->group.index_base = 0;
}

void
tsock__group_note_delivered(tsock_consumer *c, const tsock_batch *b)
{
    if (!c->checkpointing || !c->resume.delivered)
        return;
    if (b->epoch_end) {
        clear_set(c);
        if (c->group.index_base || c->group.plan.window != c->group.full_plan.window)
            end_restored_plan(c);
        return;
    }
    /* The step the caller now has covers every id read ahead: a rank reads at most to the end
     * of its own block, which lies inside the step's group batch. */
    for (uint32_t i = 0; i < c->group.ahead_n; i++)
        add_to_set(c, c->group.ahead[i]);
    c->group.ahead_n = 0;
}

void
tsock__group_window_done(tsock_consumer *c)
{
    c->group.filtering = 0;
    c->resume.window_left = 0;
}

/* ---- restoring ------------------------------------------------------------------------- */

/* The plan of the restored epoch: the window without U, in a group of this run's world size
 * (dataset/groups.c). Returns 0, or -EINVAL when no rank gets a batch (drop_last, fewer
 * remaining samples than ranks · batch). */
static int
restored_plan(tsock_consumer *c, struct tsock__rank_plan *rp)
{
    const struct tsock__rank_plan *full = &c->group.full_plan;
    return tsock__rank_plan_init_rest(rp, full->samples, full->window, c->resume.restore.delivered,
                                      c->group.world, full->local_world, full->local, full->batch,
                                      full->drop_last);
}

void
tsock__group_resume_start(tsock_consumer *c)
{
    c->group.full_plan = c->group.plan;
    if (c->resume.restored != 1)
        return;
    c->resume.restored = 2;
    const struct tsock__resume_state *s = &c->resume.restore;
    clear_set(c);
    for (uint64_t i = 0; i < s->delivered; i++)
        add_to_set(c, c->resume.restore_ids[i]);
    c->plan.epoch = s->epoch;
    c->group.filtering = 1;
    c->resume.window_left = s->samples;
    struct tsock__rank_plan rp;
    if (s->delivered == 0) {
        c->group.filtering = 0; /* saved at an epoch boundary: a fresh group epoch */
    } else if (restored_plan(c, &rp) == 0) {
        c->group.plan = rp;
        c->group.index_base = s->index;
        c->plan.index = s->index;
        c->plan.done = s->index * s->batch;
        c->plan.n = c->plan.done + rp.per_rank;
    } else {
        /* With drop_last, more ranks than before leave less than a full batch each: the
         * restored epoch has no batch, as DistributedSampler(drop_last) would give none. The
         * window still passes (skipped), and the next epoch starts at the next window. */
        clear_set(c);
        c->plan.epoch = s->epoch + 1;
        c->group.skip_rest = 1;
        tsock__log(TSOCK_LOG_INFO,
                   "group '%s': the restored epoch %llu has no full batch for %u ranks "
                   "(%llu samples left, drop_last): going on with epoch %llu",
                   c->group.name, (unsigned long long)s->epoch, c->group.world,
                   (unsigned long long)(s->samples - s->delivered),
                   (unsigned long long)c->plan.epoch);
        return;
    }
    tsock__log(TSOCK_LOG_INFO,
               "group '%s': rank %u of %u resumes epoch %llu after %llu steps of %u ranks: "
               "%llu of %llu samples were consumed, %llu samples in %llu batches for this rank",
               c->group.name, c->group.rank, c->group.world, (unsigned long long)s->epoch,
               (unsigned long long)s->index, s->world, (unsigned long long)s->delivered,
               (unsigned long long)s->samples, (unsigned long long)c->group.plan.per_rank,
               (unsigned long long)c->group.plan.batches);
}

/* Checks a restored state against this rank and its producer (service thread, at WELCOME).
 * The world size may differ (the rest is re-dealt); the node may not: the set is of one
 * node's share. */
int
tsock__group_check_restored(const tsock_consumer *c, const struct tsock__msg_welcome *w)
{
    const struct tsock__resume_state *s = &c->resume.restore;
    int member = tsock__group_member(c);
    if (s->group != member) {
        tsock__log(TSOCK_LOG_ERROR,
                   member ? "cannot resume: the state was saved by a solo consumer, and this "
                            "consumer is a rank of a group"
                          : "cannot resume: the state was saved by a rank of a group, and this "
                            "consumer is not one (restore it into a rank)");
        return TSOCK_E_BAD_STATE;
    }
    if (member && (s->nodes != w->nodes || s->node_rank != w->node_rank)) {
        tsock__log(TSOCK_LOG_ERROR,
                   "cannot resume: the state was saved against node %u of %u, this producer is "
                   "node %u of %u (restore on each node a state saved on that node)",
                   s->node_rank, s->nodes, w->node_rank, w->nodes);
        return TSOCK_E_BAD_STATE;
    }
    return 0;
}

/* ---- saving ------------------------------------------------------------------------------ */

int
tsock__group_describe(tsock_consumer *c, struct tsock__resume_state *s)
{
    if (c->group.save_error < 0)
        return c->group.save_error;
    *s = (struct tsock__resume_state){
        .samples = c->resume.delivered_n,
        .epoch = c->plan.epoch,
        .batch = c->plan.batch,
        .drop_last = c->plan.drop_last,
        .delivered = c->group.consumed,
        .bits = c->resume.delivered,
        .group = 1,
        .world = c->group.world,
        .nodes = c->welcome.nodes,
        .node_rank = c->welcome.node_rank,
        .index = c->plan.index,
    };
    return 0;
}

void
tsock__group_resume_free(tsock_consumer *c)
{
    free(c->group.ahead);
    c->group.ahead = NULL;
}
