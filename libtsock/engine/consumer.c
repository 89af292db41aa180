/* The consumer engine: a DEALER socket to the producer, the ring mapped read-only, the queue of
 * announced producer batches, and the cutting of that stream into this consumer's batches and
 * epochs.
 *
 * The service thread owns the socket (consumer_session.c): it introduces the consumer, queues
 * BATCH messages, sends releases and pause/resume requests, exchanges heartbeats, notices a
 * silent producer and pauses the consumer when it lingers between epochs. The caller's thread
 * (this file) builds batches from the queue: a zero-copy view when the batch lies inside one
 * producer batch, a copy into consumer-owned memory otherwise. Shared state is guarded by `mu`.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "consumer_internal.h"
#include "core/sync.h"

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
    c->wake_fd = -1;
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
    const struct tsock_msg_welcome *w = &c->welcome;
    uint32_t batch = c->batch_size ? c->batch_size : w->batch_size;
    if (c->drop_last && (w->samples == 0 || batch > w->samples)) {
        tsock__log(TSOCK_LOG_ERROR, "drop_last needs a producer sampler with at least one full "
                                    "batch per epoch");
        return -EINVAL;
    }
    return 0;
}

int
tsock_consumer_start(tsock_consumer *c, int timeout_ms)
{
    if (!c)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    c->started = 1;
    int err = tsock__session_open(c, timeout_ms);
    if (err == 0)
        err = check_welcome(c);
    if (err < 0)
        return err;
    uint32_t batch = c->batch_size ? c->batch_size : c->welcome.batch_size;
    tsock__plan_init(&c->plan, c->welcome.samples, batch, c->drop_last);
    c->ready_to_read = 1;
    return 0;
}

/* ---- producer batches held by this consumer ---------------------------------------------- */

/* Drops one reference to a slot; the last one sends its release (mu held). */
void
tsock__unref_slot(tsock_consumer *c, uint32_t slot)
{
    struct slot_hold *h = &c->holds[slot];
    if (--h->refs > 0)
        return;
    c->releases[c->release_len++] = (struct pending_release){slot, h->msg.seq};
    tsock__wake_signal(c->wake_fd);
}

/* The oldest announced producer batch, or NULL. */
static struct slot_hold *
head(tsock_consumer *c)
{
    return c->ready_len ? &c->holds[c->ready[c->ready_head]] : NULL;
}

/* Moves past the head producer batch once all of it has been taken (mu held). */
static void
pop_head(tsock_consumer *c)
{
    uint32_t slot = c->ready[c->ready_head];
    c->ready_head = (c->ready_head + 1) % c->welcome.slot_count;
    c->ready_len--;
    c->head_offset = 0;
    tsock__unref_slot(c, slot);
}

void
tsock__drop_queue(tsock_consumer *c)
{
    while (c->ready_len)
        pop_head(c);
}

/* ---- building batches -------------------------------------------------------------------- */

static tsock_batch *
new_batch(tsock_consumer *c)
{
    tsock_batch *b = c->free_batches;
    if (b) {
        c->free_batches = b->next_free;
        return b;
    }
    b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->owner = c;
    b->device = -1;
    b->gather_device = -1;
    b->next_all = c->all_batches;
    c->all_batches = b;
    return b;
}

/* Frees a batch's own buffers, wherever they are. */
static void
free_gathers(tsock_batch *b)
{
    for (int t = 0; t < TSOCK_MAX_TENSORS; t++) {
        if (b->gather_device >= 0)
            tsock__cuda_free(b->gather_device, b->gather[t]);
        else
            free(b->gather[t]);
        b->gather[t] = NULL;
        b->gather_cap[t] = 0;
    }
}

/* Room in a batch's own buffers for `samples` samples of every tensor: host memory, or memory
 * of the GPU the ring is read on. */
static int
reserve_gather(tsock_consumer *c, tsock_batch *b, uint32_t samples)
{
    int device = c->cuda ? tsock__cuda_import_device(c->cuda) : -1;
    if (b->gather_device != device) {
        free_gathers(b);
        b->gather_device = device;
    }
    for (uint32_t t = 0; t < c->welcome.tensor_count; t++) {
        size_t need = (size_t)c->welcome.tensors[t].sample_bytes * samples;
        if (b->gather_cap[t] >= need)
            continue;
        if (device >= 0) {
            int err = tsock__device_reserve(c, b, t, need);
            if (err < 0)
                return err;
            continue;
        }
        void *grown = realloc(b->gather[t], need);
        if (!grown)
            return -ENOMEM;
        b->gather[t] = grown;
        b->gather_cap[t] = need;
    }
    return 0;
}

static const uint8_t *
sample_at(const tsock_consumer *c, const struct slot_hold *h, uint32_t tensor, uint32_t sample)
{
    const struct tsock_tensor_desc *d = &c->welcome.tensors[tensor];
    return c->ring_base + (size_t)h->msg.slot * c->welcome.slot_stride + d->offset +
           (size_t)d->sample_bytes * sample;
}

/* Samples of the head producer batch this consumer may still take for the current epoch. */
static uint32_t
head_available(const tsock_consumer *c, const struct slot_hold *h)
{
    return h->msg.samples - c->head_offset;
}

/* Takes up to `want` samples from the head producer batch into b (copying from `filled` on
 * when b is a gather). Returns how many were taken, or a negative code when a copy on the GPU
 * failed. */
static int
take_from_head(tsock_consumer *c, tsock_batch *b, uint32_t want)
{
    struct slot_hold *h = head(c);
    uint32_t n = head_available(c, h);
    n = n < want - b->samples ? n : want - b->samples;
    if (b->view) {
        for (uint32_t t = 0; t < c->welcome.tensor_count; t++)
            b->data[t] = sample_at(c, h, t, c->head_offset);
        b->view_slot = h->msg.slot;
        b->generation = c->generation;
        h->refs++;
    } else if (c->cuda) {
        int err = tsock__device_gather(c, b, h->msg.slot, c->head_offset, n);
        if (err < 0)
            return err;
    } else {
        for (uint32_t t = 0; t < c->welcome.tensor_count; t++) {
            size_t bytes = (size_t)c->welcome.tensors[t].sample_bytes;
            memcpy(b->gather[t] + bytes * b->samples, sample_at(c, h, t, c->head_offset),
                   bytes * n);
        }
    }
    if (b->samples == 0)
        b->seq = h->msg.seq;
    b->samples += n;
    /* In free mode the producer's epoch marks end the consumer's epochs; with a sampler only
     * the consumer's own window does. */
    b->free_end =
        c->plan.n == 0 && (h->msg.flags & TSOCK_BATCH_EPOCH_END) && n == head_available(c, h);
    c->head_offset += n;
    if (c->head_offset == h->msg.samples)
        pop_head(c);
    return (int)n;
}

/* Discards the tail drop_last leaves out of the previous epoch. Returns 1 when done. */
static int
skip_tail(tsock_consumer *c)
{
    while (c->plan.skip > 0 && c->ready_len) {
        struct slot_hold *h = head(c);
        uint32_t n = head_available(c, h);
        n = n < c->plan.skip ? n : (uint32_t)c->plan.skip;
        c->plan.skip -= n;
        c->head_offset += n;
        if (c->head_offset == h->msg.samples)
            pop_head(c);
    }
    return c->plan.skip == 0;
}

/* Starts the batch under construction: a view when the head producer batch holds all of it. */
static int
begin_batch(tsock_consumer *c, uint32_t want)
{
    tsock_batch *b = new_batch(c);
    if (!b)
        return -ENOMEM;
    struct slot_hold *h = head(c);
    b->samples = 0;
    b->free_end = 0;
    b->view_slot = UINT32_MAX;
    b->view =
        head_available(c, h) >= want || (c->plan.n == 0 && (h->msg.flags & TSOCK_BATCH_EPOCH_END));
    if (!b->view) {
        int err = reserve_gather(c, b, want);
        if (err < 0) {
            b->next_free = c->free_batches;
            c->free_batches = b;
            return err;
        }
        for (uint32_t t = 0; t < c->welcome.tensor_count; t++)
            b->data[t] = b->gather[t];
    }
    c->building = b;
    return 0;
}

/* Hands the finished batch to the caller and moves the epoch plan on. */
static tsock_batch *
finish_batch(tsock_consumer *c)
{
    tsock_batch *b = c->building;
    c->building = NULL;
    b->epoch = c->plan.epoch;
    b->index = c->plan.index;
    b->epoch_end = tsock__plan_advance(&c->plan, b->samples, b->free_end);
    b->device = c->cuda ? tsock__cuda_import_device(c->cuda) : -1;
    b->import = b->view ? c->cuda : NULL;
    b->held = 1;
    c->held_count++;
    c->stat_batches++;
    c->stat_samples += b->samples;
    c->stat_epochs += b->epoch_end != 0;
    if (b->epoch_end) {
        c->between_epochs = 1;
        c->epoch_ended_ns = tsock__now_ns();
        tsock__wake_signal(c->wake_fd); /* the service thread times the grace period */
    }
    return b;
}

/* Builds as much of the next batch as the queue allows (mu held). Returns 1 when a batch is
 * ready in c->building, 0 when more producer batches are needed, or a negative code. */
static int
build(tsock_consumer *c)
{
    if (!skip_tail(c))
        return 0;
    uint32_t want = tsock__plan_want(&c->plan);
    while (c->ready_len) {
        if (!c->building) {
            int err = begin_batch(c, want);
            if (err < 0)
                return err;
        }
        int taken = take_from_head(c, c->building, want);
        if (taken < 0)
            return taken;
        if (c->building->samples == want || c->building->free_end || c->building->view)
            return 1;
    }
    return 0;
}

/* Leaving the pause or the grace period: the caller wants its next epoch (mu held). */
static void
start_next_epoch(tsock_consumer *c)
{
    c->between_epochs = 0;
    if (c->phase == PHASE_PAUSED) {
        c->phase = PHASE_RESUMING;
        tsock__wake_signal(c->wake_fd); /* the service thread sends RESUME */
    }
}

/* Waits for the next batch (mu held). */
static int
wait_batch(tsock_consumer *c, uint64_t deadline, tsock_batch **batch)
{
    for (;;) {
        int got = c->phase == PHASE_ACTIVE ? build(c) : 0;
        if (got < 0)
            return got;
        if (got) {
            *batch = finish_batch(c);
            return 0;
        }
        if (c->terminal_error == TSOCK_E_END && c->building && c->building->samples > 0) {
            /* The stream ended inside this batch: hand over what there is, ending the epoch. */
            *batch = finish_batch(c);
            c->stat_epochs += !(*batch)->epoch_end;
            (*batch)->epoch_end = 1;
            return 0;
        }
        if (c->terminal_error)
            return c->terminal_error;
        int err = tsock__cond_wait_until(&c->cond, &c->mu, deadline);
        if (err < 0)
            return err;
    }
}

/* After the producer is gone: ends the epoch in progress with TSOCK_E_EPOCH_INTERRUPTED,
 * then connects to the producer that replaced it (mu held on entry and exit). */
static int
recover(tsock_consumer *c, int err)
{
    int reconnectable = err == TSOCK_E_PRODUCER_LOST || err == TSOCK_E_PRODUCER_STOPPED;
    if (!c->reconnect_ms || !reconnectable)
        return err;
    if (c->plan.done > 0 || c->building) {
        tsock__plan_cut(&c->plan);
        if (c->building) {
            c->building->next_free = c->free_batches;
            c->free_batches = c->building;
            c->building = NULL;
        }
        return TSOCK_E_EPOCH_INTERRUPTED;
    }
    pthread_mutex_unlock(&c->mu);
    int rc = tsock__session_reopen(c, c->reconnect_ms);
    pthread_mutex_lock(&c->mu);
    tsock__plan_cut(&c->plan);
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
    c->waiting_since = started;
    int err = c->ready_to_read ? 0 : TSOCK_E_STATE;
    while (err == 0) {
        if (c->between_epochs || c->phase == PHASE_PAUSED)
            start_next_epoch(c);
        err = wait_batch(c, deadline, batch);
        if (err == 0 || err == -ETIMEDOUT)
            break;
        err = recover(c, err);
        if (err == 1)
            err = 0; /* reconnected: try again on the new producer */
        else
            break;
    }
    c->stat_wait_ns += tsock__now_ns() - started;
    c->waiting_since = 0;
    pthread_mutex_unlock(&c->mu);
    return err;
}

/* Releases a batch: a GPU batch once the work on `stream` is done, any other at once. */
static int
release(tsock_consumer *c, tsock_batch *b, void *stream)
{
    if (!c || !b)
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    tsock_batch *known = c->all_batches;
    while (known && known != b)
        known = known->next_all;
    if (!known || !b->held) {
        pthread_mutex_unlock(&c->mu);
        return TSOCK_E_NOT_HELD;
    }
    if (b->device >= 0) {
        int err = tsock__device_release(c, b, stream);
        pthread_mutex_unlock(&c->mu);
        return err;
    }
    b->held = 0;
    c->held_count--;
    c->stat_released++;
    if (b->view && b->view_slot != UINT32_MAX && b->generation == c->generation)
        tsock__unref_slot(c, b->view_slot);
    b->next_free = c->free_batches;
    c->free_batches = b;
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

uint64_t
tsock__consumer_wait_ns(const tsock_consumer *c, uint64_t now)
{
    uint64_t since = c->waiting_since;
    return c->stat_wait_ns + (since && now > since ? now - since : 0);
}

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

uint64_t
tsock_consumer_batches_per_epoch(const tsock_consumer *c)
{
    return c && c->ready_to_read ? tsock__plan_batches_per_epoch(&c->plan) : 0;
}

void
tsock_consumer_destroy(tsock_consumer *c)
{
    if (!c)
        return;
    tsock__session_close(c);
    tsock__device_free_all(c);
    tsock__session_free_mappings(c);
    for (tsock_batch *b = c->all_batches, *next; b; b = next) {
        next = b->next_all;
        free_gathers(b);
        free(b);
    }
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
