/* The consumer engine's API half: options, start, next (with recovery from a lost producer),
 * release, figures and destroy. consumer_internal.h maps the other files. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sync.h"
#include "engine/consumer_internal.h"

/* ---- creation and options ---------------------------------------------------------------- */

int
tsock_consumer_create(tsock_consumer **out, const char *endpoint)
{
    if (!out)
        return -EINVAL;
    tsock_consumer *c = calloc(1, sizeof *c);
    if (!c)
        return -ENOMEM;
    int err = 0;
    if (endpoint && strlen(endpoint) >= sizeof c->endpoint)
        err = -ENAMETOOLONG;
    else if (endpoint)
        strcpy(c->endpoint, endpoint);
    else
        err = tsock_default_endpoint(c->endpoint, sizeof c->endpoint);
    if (err < 0) {
        free(c);
        return err;
    }
    c->hb_interval_ms = 250;
    c->hb_timeout_ms = 3000;
    c->grace_ms = 100;
    c->device = -1;
    tsock__mutex_init(&c->mu);
    tsock__cond_init(&c->cond);
    *out = c;
    return 0;
}

int
tsock_consumer_set_heartbeat(tsock_consumer *c, int interval_ms, int timeout_ms)
{
    if (!c || interval_ms <= 0 || timeout_ms <= interval_ms)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->hb_interval_ms = interval_ms;
    c->hb_timeout_ms = timeout_ms;
    return 0;
}

int
tsock_consumer_set_name(tsock_consumer *c, const char *name)
{
    if (!c || !name || strlen(name) > TSOCK_MAX_NAME || !tsock__name_is_printable(name))
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    strcpy(c->name, name);
    return 0;
}

int
tsock_consumer_set_batch_size(tsock_consumer *c, uint32_t batch_size)
{
    if (!c)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->batch_size = batch_size;
    return 0;
}

int
tsock_consumer_set_drop_last(tsock_consumer *c, int drop_last)
{
    if (!c)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->drop_last = drop_last != 0;
    return 0;
}

int
tsock_consumer_set_epoch_grace(tsock_consumer *c, int grace_ms)
{
    if (!c || grace_ms < 0)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->grace_ms = grace_ms;
    return 0;
}

int
tsock_consumer_set_reconnect(tsock_consumer *c, int timeout_ms)
{
    if (!c || timeout_ms < 0)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->reconnect_ms = timeout_ms;
    return 0;
}

int
tsock_consumer_set_device(tsock_consumer *c, int device)
{
    if (!c || device < -1)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->device = device;
    return 0;
}

/* ---- start ------------------------------------------------------------------------------- */

/* Checks what the producer announced against what this consumer asked for. */
static int
check_welcome(tsock_consumer *c)
{
    const struct tsock__msg_welcome *w = &c->welcome;
    uint32_t batch = c->batch_size ? c->batch_size : w->batch_size;
    if (c->drop_last && (w->samples == 0 || batch > w->samples)) {
        tsock__log(TSOCK_LOG_ERROR, "drop_last needs a producer sampler with at least one full "
                                    "batch per epoch");
        return -EINVAL;
    }
    return 0;
}

/* ---- cancel ------------------------------------------------------------------------------ */

void
tsock_consumer_cancel(tsock_consumer *c)
{
    if (!c)
        return;
    atomic_store(&c->cancel, 1);
    struct tsock__channel *ch = atomic_load(&c->cancel_channel);
    if (ch)
        tsock__channel_wake(ch);
}

/* The call that reports a cancel consumes it. Returns err. */
static int
consume_cancel(tsock_consumer *c, int err)
{
    if (err == TSOCK_E_CANCELLED)
        atomic_store(&c->cancel, 0);
    return err;
}

int
tsock_consumer_start(tsock_consumer *c, int timeout_ms)
{
    if (!c)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    if (tsock__consumer_cancelled(c))
        return consume_cancel(c, TSOCK_E_CANCELLED); /* before anything: still startable */
    c->started = 1;
    int err = tsock__session_open(c, timeout_ms);
    if (err == 0)
        err = check_welcome(c);
    if (err < 0) {
        tsock__session_abandon(c);
        return consume_cancel(c, err);
    }
    if (tsock__group_member(c)) {
        err = tsock__group_start(c);
        if (err < 0)
            return err;
    } else {
        uint32_t batch = c->batch_size ? c->batch_size : c->welcome.batch_size;
        tsock__epoch_plan_init(&c->plan, c->welcome.samples, batch, c->drop_last);
    }
    pthread_mutex_lock(&c->mu);
    tsock__resume_start(c);
    tsock__leave_on_session(c);
    /* Under mu: the service thread reads both to pause a job that never reads
     * (consumer_leave.c). */
    c->ready_to_read = 1;
    c->idle_since_ns = tsock__now_ns();
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* A rank's state is its group's consumed set up to the step its caller has, which includes
 * the other ranks' blocks of that step: the reader passes them first, waiting for them if the
 * producer has not sent them yet (consumer_group_resume.c). */
int
tsock_consumer_save_state(tsock_consumer *c, void *buf, size_t cap, size_t *len)
{
    if (!c || !len || (!buf && cap))
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    int err = 0;
    if (tsock__group_member(c) && c->checkpointing && c->ready_to_read)
        err = tsock__consumer_group_settle(c);
    if (err == 0)
        err = tsock__resume_save(c, buf, cap, len);
    pthread_mutex_unlock(&c->mu);
    return consume_cancel(c, err); /* one cancel stops one call: this one */
}

/* ---- next and release -------------------------------------------------------------------- */

/* After the producer is gone: ends the epoch in progress with TSOCK_E_EPOCH_INTERRUPTED,
 * then connects to the producer that replaced it (mu held on entry and exit). */
/* Ends the epoch in progress, if one is: returns 1 when there was one (mu held). */
static int
cut_epoch(tsock_consumer *c)
{
    if (c->plan.done == 0 && !c->building)
        return 0;
    tsock__epoch_plan_cut(&c->plan);
    if (c->building) {
        tsock__consumer_recycle(c, c->building);
        c->building = NULL;
    }
    return 1;
}

static int
recover(tsock_consumer *c, int err)
{
    /* A group that lost a rank cuts the rank's epoch, as the loss of the producer does. */
    if (err == TSOCK_E_GROUP_LOST && cut_epoch(c))
        return TSOCK_E_EPOCH_INTERRUPTED;
    int reconnectable = err == TSOCK_E_PRODUCER_LOST || err == TSOCK_E_PRODUCER_STOPPED;
    if (!c->reconnect_ms || !reconnectable)
        return err;
    if (cut_epoch(c))
        return TSOCK_E_EPOCH_INTERRUPTED;
    /* A rank does not reconnect on its own: its group's window, its rank plan and, when it
     * checkpoints, its group's consumed set all belong to the lost producer's stream, and the
     * other ranks would rejoin at other positions. The job restarts as a whole (from its
     * checkpoints), as it does when it loses a rank. */
    if (tsock__group_member(c)) {
        tsock__log(TSOCK_LOG_ERROR,
                   "group '%s': rank %u: the producer is gone (%s); a group's ranks do not "
                   "reconnect one by one: restart the job (from its checkpoints)",
                   c->group.name, c->group.rank, tsock_strerror(err));
        return err;
    }
    pthread_mutex_unlock(&c->mu);
    int rc = tsock__session_reopen(c, c->reconnect_ms);
    pthread_mutex_lock(&c->mu);
    tsock__epoch_plan_cut(&c->plan);
    tsock__leave_on_session(c); /* the new producer record counts from here */
    tsock__group_reset(c);      /* a new session: a new group, whose window starts afresh */
    return rc < 0 ? rc : 1;
}

int
tsock_consumer_next(tsock_consumer *c, int timeout_ms, tsock_batch **batch)
{
    if (!c || !batch)
        return -EINVAL;
    uint64_t started = tsock__now_ns();
    uint64_t deadline = tsock__deadline(timeout_ms);
    pthread_mutex_lock(&c->mu);
    tsock__leave_note_call(c, started);
    c->waiting_since = started;
    int err = c->ready_to_read ? 0 : TSOCK_E_STATE;
    if (err == 0 && tsock__consumer_cancelled(c))
        err = TSOCK_E_CANCELLED; /* a pending cancel wins over a batch that is ready */
    while (err == 0) {
        if (c->between_epochs || c->phase == TSOCK__PHASE_PAUSED)
            tsock__consumer_start_next_epoch(c);
        err = tsock__consumer_wait_batch(c, deadline, batch);
        if (err == 0 || err == -ETIMEDOUT)
            break;
        err = recover(c, err);
        if (err == 1)
            err = 0; /* reconnected: try again on the new producer */
        else
            break;
    }
    tsock__group_report(c, err);
    tsock__leave_note_return(c, err == 0 ? *batch : NULL, tsock__now_ns());
    c->stat_wait_ns += tsock__now_ns() - started;
    c->waiting_since = 0;
    pthread_mutex_unlock(&c->mu);
    return consume_cancel(c, err);
}

/* Whether b is a batch of this consumer that the caller holds. */
static int
held_here(const tsock_consumer *c, const tsock_batch *b)
{
    const tsock_batch *known = c->all_batches;
    while (known && known != b)
        known = known->next_all;
    return known && b->held;
}

/* Arms the batch's release fence on `stream` in the memory its data is in. Returns 1 when the
 * release must wait for the fence, 0 when it takes effect now, or a negative code. */
static int
arm_fence(tsock_consumer *c, tsock_batch *b, void *stream)
{
    const struct tsock__backend *ops = b->ring ? b->ring->ops : b->gather_ops;
    if (!ops)
        return 0; /* nothing was read */
    if (b->fence && (b->fence_ops != ops || b->fence_device != b->device)) {
        b->fence_ops->fence_destroy(b->fence);
        b->fence = NULL;
    }
    b->fence_ops = ops;
    b->fence_device = b->device;
    return ops->fence_arm(b->device, &b->fence, stream);
}

/* Releases a batch: at once, or once the work queued on `stream` so far is done. */
static int
release(tsock_consumer *c, tsock_batch *b, void *stream)
{
    if (!c || !b)
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    if (!held_here(c, b)) {
        pthread_mutex_unlock(&c->mu);
        return TSOCK_E_NOT_HELD;
    }
    int wait = arm_fence(c, b, stream);
    if (wait < 0) {
        pthread_mutex_unlock(&c->mu);
        return wait;
    }
    b->held = 0;
    c->held_count--;
    c->held_views -= b->view;
    c->stat_released++;
    if (wait) {
        b->next_deferred = c->deferred;
        c->deferred = b;
        c->deferred_count++;
        tsock__channel_wake(c->channel); /* the service thread starts polling */
    } else {
        tsock__consumer_finish_release(c, b);
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

int
tsock_consumer_release(tsock_consumer *c, tsock_batch *b)
{
    return release(c, b, NULL);
}

int
tsock_consumer_release_on_stream(tsock_consumer *c, tsock_batch *b, void *cuda_stream)
{
    return release(c, b, cuda_stream);
}

/* ---- figures ----------------------------------------------------------------------------- */

int
tsock_consumer_stat(tsock_consumer *c, int key, uint64_t *value)
{
    if (!c || !value)
        return -EINVAL;
    int err = 0;
    pthread_mutex_lock(&c->mu);
    switch (key) {
    case TSOCK_STAT_BATCHES:
    case TSOCK_STAT_CONSUMED_BATCHES: *value = c->stat_batches; break;
    case TSOCK_STAT_SAMPLES:
    case TSOCK_STAT_CONSUMED_SAMPLES: *value = c->stat_samples; break;
    case TSOCK_STAT_EPOCHS: *value = c->stat_epochs; break;
    case TSOCK_STAT_RELEASED: *value = c->stat_released; break;
    case TSOCK_STAT_HELD: *value = (uint64_t)c->held_count; break;
    case TSOCK_STAT_BAD_MESSAGES: *value = c->stat_bad; break;
    case TSOCK_STAT_WAIT_NS: *value = tsock__consumer_wait_ns(c, tsock__now_ns()); break;
    case TSOCK_STAT_ID: *value = c->welcome.consumer_id; break;
    case TSOCK_STAT_PID: *value = (uint64_t)getpid(); break;
    default: err = -EINVAL;
    }
    pthread_mutex_unlock(&c->mu);
    return err;
}

uint32_t
tsock_consumer_batch_capacity(const tsock_consumer *c)
{
    return c ? c->welcome.batch_size : 0;
}

uint32_t
tsock_consumer_slot_count(const tsock_consumer *c)
{
    return c ? c->welcome.slot_count : 0;
}

uint64_t
tsock_consumer_dataset_size(const tsock_consumer *c)
{
    return c ? c->welcome.samples : 0;
}

int
tsock_consumer_node_split(const tsock_consumer *c, uint32_t *nodes, uint32_t *node_rank,
                          uint64_t *dataset)
{
    if (!c)
        return -EINVAL;
    if (!c->ready_to_read)
        return TSOCK_E_STATE;
    /* The WELCOME stays as it is once the consumer is started: read without mu. */
    if (nodes)
        *nodes = c->welcome.nodes;
    if (node_rank)
        *node_rank = c->welcome.node_rank;
    if (dataset)
        *dataset = c->welcome.dataset;
    return 0;
}

uint64_t
tsock_consumer_stream_epochs(const tsock_consumer *c)
{
    if (!c)
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&c->mu);
    uint64_t epochs = c->stream_epochs;
    pthread_mutex_unlock((pthread_mutex_t *)&c->mu);
    return epochs;
}

uint64_t
tsock_consumer_batches_per_epoch(const tsock_consumer *c)
{
    if (!c || !c->ready_to_read)
        return 0;
    /* A rank's normal epochs: a restored epoch of another world size has its own count. */
    if (tsock__group_member(c))
        return c->group.full_plan.batches;
    return tsock__epoch_plan_batches_per_epoch(&c->plan);
}

/* Batches the caller never released may still be read by work queued on its streams: wait
 * for their devices before BYE lets the producer refill the slots and before anything is
 * unmapped. The devices are listed under mu (the service thread finishes fenced releases
 * meanwhile) and waited for without it: the wait blocks on the GPU. */
#define MAX_SYNCS 16
static void
finish_work_on_held(tsock_consumer *c)
{
    struct {
        const struct tsock__backend *ops;
        int device;
    } sync[MAX_SYNCS];
    int n = 0;
    pthread_mutex_lock(&c->mu);
    for (tsock_batch *b = c->all_batches; b && n < MAX_SYNCS; b = b->next_all) {
        const struct tsock__backend *ops = b->ring ? b->ring->ops : b->gather_ops;
        if (!b->held || b->device < 0 || !ops)
            continue;
        int known = 0;
        for (int i = 0; i < n; i++)
            known |= sync[i].ops == ops && sync[i].device == b->device;
        if (!known) {
            sync[n].ops = ops;
            sync[n++].device = b->device;
        }
    }
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < n; i++)
        (void)sync[i].ops->device_sync(sync[i].device);
}

void
tsock_consumer_destroy(tsock_consumer *c)
{
    if (!c)
        return;
    finish_work_on_held(c);
    tsock__session_close(c);
    tsock__session_free(c);
    tsock__resume_free(c);
    tsock__group_free(c);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
