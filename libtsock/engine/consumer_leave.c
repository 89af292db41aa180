/* Leaving an epoch early (docs/semantics.md, "Leaving an epoch early").
 *
 * A consumer that stops calling next in the middle of an epoch would keep the batches sent to
 * it, and the producer, which refills a slot only once every holder gave it back, would stop
 * for everybody. So it pauses as it does between epochs: it sends PAUSE (its window ends there
 * for the producer) and, once the producer answers PAUSED, gives back what was announced and
 * not taken. Not before: a producer that had already decided a finite stream's end ignores
 * the PAUSE, and what is queued is then the stream's last, for the caller to read. Coming back, it
 * must receive exactly the samples of its epoch it had not received. It cannot tell from stream
 * positions which ids those are (the producer's permutations depend on join points), so it
 * does what a restored checkpoint does (consumer_resume.c): it keeps the ids of the samples
 * delivered in the epoch, and after RESUMED takes the rest from its new window (n
 * consecutive stream samples, every id once), skipping the ids it has. The producer sends the
 * ids (4 bytes a sample) to every consumer that asks with HELLO's IDS_IF_ABLE; a consumer
 * that cannot use them (a group rank, free mode, batches too large for ids in a message)
 * never pauses mid-epoch.
 *
 * When is a consumer "stopped" rather than slow? The library cannot know; it waits for the
 * epoch grace plus twice the slowest step so far (halved at each epoch's end), so a job whose
 * training steps take 300 ms is not paused between two of them, and tsock_consumer_pause lets a
 * caller that knows (Python's loop left by break) say so at once.
 *
 * A job that connected and has not read anything of its epoch yet (a training script creates
 * its eval loader at the start and reads it only after a training epoch) holds what was sent
 * to it just the same; once it has not called next for the epoch grace it pauses as between
 * epochs: nothing of an epoch was delivered, so its next read starts a fresh, exact one. */
#include <errno.h>

#include "engine/consumer_internal.h"

int
tsock__leave_wants_ids(const tsock_consumer *c)
{
    return !c->checkpointing && !tsock__group_member(c);
}

int
tsock__leave_on_welcome(tsock_consumer *c, const struct tsock__msg_welcome *w)
{
    /* The producer's rule for IDS_IF_ABLE (producer_service.c): a sampler, and ids that fit. */
    c->leave_ids = tsock__leave_wants_ids(c) && w->samples > 0 &&
                   w->samples <= TSOCK__STATE_MAX_SAMPLES && w->batch_size <= TSOCK__BATCH_MAX_IDS;
    c->left_mid_epoch = 0; /* a new session: the epoch was cut */
    return c->leave_ids;
}

/* Inside an epoch, with something delivered of it, and nothing half built. */
static int
mid_epoch(const tsock_consumer *c)
{
    return c->ready_to_read && c->phase == TSOCK__PHASE_ACTIVE && !c->between_epochs &&
           !c->terminal_error && c->plan.done > 0 && !c->building && c->waiting_since == 0;
}

static int
can_pause_mid_epoch(const tsock_consumer *c)
{
    return tsock__ids_tracked(c) && c->resume.delivered && !tsock__group_member(c) &&
           c->plan.n > 0 && c->resume.delivered_epoch == c->plan.epoch;
}

/* When the caller counts as stopped (0: never, it is reading or cannot pause here). */
static uint64_t
stopped_at(const tsock_consumer *c)
{
    if (!mid_epoch(c) || !can_pause_mid_epoch(c) || c->leave_returned_ns == 0)
        return 0;
    return c->leave_returned_ns + (uint64_t)c->grace_ms * 1000000u + 2 * c->leave_step_max_ns;
}

/* When a consumer that read nothing of its epoch counts as idle (0: never). */
static uint64_t
unread_idle_at(const tsock_consumer *c)
{
    if (!c->ready_to_read || c->phase != TSOCK__PHASE_ACTIVE || c->between_epochs ||
        c->terminal_error || c->plan.done != 0 || c->building || c->waiting_since != 0 ||
        tsock__group_member(c))
        return 0;
    return c->idle_since_ns + (uint64_t)c->grace_ms * 1000000u;
}

int
tsock__leave_unread_due(const tsock_consumer *c, uint64_t now)
{
    uint64_t at = unread_idle_at(c);
    return at != 0 && now >= at;
}

int
tsock__leave_due(const tsock_consumer *c, uint64_t now)
{
    uint64_t at = stopped_at(c);
    return at != 0 && now >= at;
}

void
tsock__leave_paused(tsock_consumer *c)
{
    c->left_mid_epoch = 1;
}

int
tsock__leave_wait_ms(const tsock_consumer *c, uint64_t now)
{
    uint64_t at = stopped_at(c);
    if (at == 0)
        at = unread_idle_at(c);
    if (at == 0)
        return -1;
    return at <= now ? 0 : (int)((at - now) / 1000000u) + 1;
}

void
tsock__leave_on_resumed(tsock_consumer *c)
{
    if (!c->left_mid_epoch)
        return;
    c->left_mid_epoch = 0;
    /* The epoch was cut meanwhile (a reconnect): the next one starts fresh, nothing to skip. */
    if (c->plan.done == 0 || c->resume.delivered_epoch != c->plan.epoch)
        return;
    /* The restored-epoch filter of consumer_resume.c, over the ids delivered so far. */
    c->resume.restore.epoch = c->plan.epoch;
    c->resume.resuming = 1;
    c->resume.window_left = c->plan.n;
    c->leave_returned_ns = 0;
}

void
tsock__leave_note_call(tsock_consumer *c, uint64_t now)
{
    /* A step is the caller's time between a batch and its next call, inside one epoch; the
     * time spent paused is not a step. */
    if (c->leave_returned_ns == 0 || c->between_epochs || c->phase != TSOCK__PHASE_ACTIVE)
        return;
    uint64_t step = now - c->leave_returned_ns;
    if (step > c->leave_step_max_ns)
        c->leave_step_max_ns = step;
}

void
tsock__leave_note_return(tsock_consumer *c, const tsock_batch *b, uint64_t now)
{
    c->idle_since_ns = now;
    if (!b)
        return;
    if (b->epoch_end) {
        c->leave_returned_ns = 0; /* between epochs: the epoch grace applies */
        /* The next epoch's steps start from half of this one's slowest, not from nothing: a
         * slow first step (warm-up) must not pause a job, while one stall long ago fades. */
        c->leave_step_max_ns /= 2;
        return;
    }
    c->leave_returned_ns = now;
}

uint64_t
tsock__leave_epochs_done(const tsock_consumer *c)
{
    return c->plan.epoch > c->epoch_base ? c->plan.epoch - c->epoch_base : 0;
}

void
tsock__leave_on_session(tsock_consumer *c)
{
    c->epoch_base = c->plan.epoch;
}

/* Pauses now, on the caller's thread (mu held): the service thread sends PAUSE on its next
 * pass (before any RESUME), and the queue goes back once the producer answers PAUSED
 * (tsock__leave_on_paused). */
static void
pause_now(tsock_consumer *c, int mid_epoch)
{
    c->left_mid_epoch = mid_epoch;
    tsock__leave_pausing(c);
    c->pause_unsent = 1;
    tsock__channel_wake(c->channel);
}

void
tsock__leave_pausing(tsock_consumer *c)
{
    c->phase = TSOCK__PHASE_PAUSED;
    c->pause_unacked = 1;
}

void
tsock__leave_on_paused(tsock_consumer *c)
{
    if (!c->pause_unacked)
        return;
    c->pause_unacked = 0;
    tsock__consumer_drop_queue(c);
    if (!c->left_mid_epoch)
        c->plan.skip = 0; /* the next epoch starts fresh wherever the stream is */
}

void
tsock__leave_on_end(tsock_consumer *c)
{
    if (!c->pause_unacked)
        return;
    /* The producer had decided the end before our PAUSE reached it: it ignored the PAUSE, and
     * what is queued is the stream's last. The pause never happened. */
    c->pause_unacked = 0;
    c->pause_unsent = 0;
    c->resume_sent = 0;
    c->left_mid_epoch = 0;
    c->phase = TSOCK__PHASE_ACTIVE;
}

/* What may be paused or ended: a started solo consumer of a producer with a sampler. */
static int
check_leavable(const tsock_consumer *c)
{
    if (!c->ready_to_read)
        return TSOCK_E_STATE;
    if (tsock__group_member(c))
        return -ENOTSUP; /* a group does not pause (producer_groups.c) */
    return 0;
}

int
tsock_consumer_pause(tsock_consumer *c)
{
    if (!c)
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    int err = check_leavable(c);
    /* After the stream's end (or an error) there is nothing to pause from, and what is queued
     * is the stream's last batches: kept for the caller to read. */
    if (err == 0 && c->phase == TSOCK__PHASE_ACTIVE && !c->terminal_error) {
        if (c->between_epochs || c->plan.done == 0)
            pause_now(c, 0); /* at an epoch's boundary: the usual pause, without the grace */
        else if (!can_pause_mid_epoch(c))
            err = -ENOTSUP;
        else if (c->building)
            err = -EBUSY;
        else
            pause_now(c, 1);
    }
    pthread_mutex_unlock(&c->mu);
    return err;
}

int
tsock_consumer_end_epoch(tsock_consumer *c)
{
    if (!c)
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    int err = check_leavable(c);
    if (err == 0 && c->plan.n == 0)
        err = -ENOTSUP; /* free mode: epochs are the producer's marks */
    else if (err == 0 && c->building)
        err = -EBUSY;
    else if (err == 0 && !c->between_epochs && c->plan.done > 0) {
        /* The new epoch needs a new window, which only a RESUMED starts (the producer keeps
         * each window's phase for the sampler): pause, if not paused already. */
        tsock__epoch_plan_cut(&c->plan);
        c->resume.resuming = 0;
        c->leave_returned_ns = 0;
        c->leave_step_max_ns = 0;
        if (c->phase == TSOCK__PHASE_ACTIVE)
            pause_now(c, 0);
        else
            c->left_mid_epoch = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return err;
}
