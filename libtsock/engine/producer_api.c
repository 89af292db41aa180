/* The producer engine's API half: options, start, the caller's slots and publishing, finish and
 * destroy. The service half (producer_service.c) talks to consumers; producer_internal.h says
 * what the two share and how. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "core/sync.h"
#include "engine/producer_internal.h"

/* ---- creation and options ---------------------------------------------------------------- */

int
tsock_producer_create(tsock_producer **out, const char *endpoint, const tsock_layout *layout,
                      uint32_t batch_size, uint32_t slots)
{
    if (!out || !layout || batch_size == 0 || slots < 2 || slots > TSOCK__RING_MAX_SLOTS)
        return -EINVAL;
    tsock_producer *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    int err = 0;
    if (endpoint) {
        if (strlen(endpoint) >= sizeof p->endpoint)
            err = -ENAMETOOLONG;
        else
            strcpy(p->endpoint, endpoint);
    } else {
        err = tsock_default_endpoint(p->endpoint, sizeof p->endpoint);
    }
    if (err >= 0)
        err = tsock__layout_place(layout, batch_size, p->offsets, &p->slot_stride);
    if (err < 0) {
        free(p);
        return err;
    }
    p->layout = *layout;
    p->device = -1;
    p->batch_size = batch_size;
    p->slot_count = slots;
    p->hb_interval_ms = 250;
    p->hb_timeout_ms = 3000;
    p->state = TSOCK__P_CREATED;
    tsock__mutex_init(&p->mu);
    tsock__cond_init(&p->cond);
    *out = p;
    return 0;
}

int
tsock_producer_set_heartbeat(tsock_producer *p, int interval_ms, int timeout_ms)
{
    if (!p || interval_ms <= 0 || timeout_ms <= interval_ms)
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    p->hb_interval_ms = interval_ms;
    p->hb_timeout_ms = timeout_ms;
    return 0;
}

int
tsock_producer_set_sampler(tsock_producer *p, uint64_t samples, uint64_t seed, uint64_t epochs)
{
    if (!p || samples == 0)
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    p->use_sampler = 1;
    p->dataset_samples = samples;
    p->sampler_samples = samples; /* a node's share's size once started with node shares */
    p->sampler_seed = seed;
    p->sampler_epochs = epochs;
    return 0;
}

int
tsock_producer_set_device(tsock_producer *p, int device)
{
    if (!p || device < -1)
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    p->device = device;
    return 0;
}

/* The tensor a conversion applies to; both setters must name the same one. */
static int
set_convert_tensor(tsock_producer *p, const char *tensor)
{
    if (!tensor)
        tensor = "image";
    if (strlen(tensor) > TSOCK_MAX_NAME || !tensor[0])
        return -EINVAL;
    if (p->convert.tensor[0] && strcmp(p->convert.tensor, tensor) != 0) {
        tsock__log(TSOCK_LOG_ERROR, "conversion already set for tensor \"%s\", not \"%s\"",
                   p->convert.tensor, tensor);
        return -EINVAL;
    }
    strcpy(p->convert.tensor, tensor);
    return 0;
}

int
tsock_producer_set_output(tsock_producer *p, const char *tensor, int dtype, int layout)
{
    if (!p || (dtype != TSOCK_UINT8 && dtype != TSOCK_FLOAT16 && dtype != TSOCK_FLOAT32) ||
        (layout != TSOCK_NHWC && layout != TSOCK_NCHW))
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    int err = set_convert_tensor(p, tensor);
    if (err < 0)
        return err;
    p->convert.dtype = dtype;
    p->convert.channels_first = layout == TSOCK_NCHW;
    return 0;
}

/* ImageNet's channel statistics on the [0, 1] scale, as torchvision's examples use them. */
static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

int
tsock_producer_set_normalize(tsock_producer *p, const char *tensor, int channels, const float *mean,
                             const float *std)
{
    if (!p || (!mean) != (!std) || (!mean && channels != 3 && channels != 0))
        return -EINVAL;
    if (mean && (channels < 1 || channels > TSOCK__CONVERT_MAX_CHANNELS))
        return -EINVAL;
    if (!mean) {
        channels = 3;
        mean = imagenet_mean;
        std = imagenet_std;
    }
    for (int c = 0; c < channels; c++)
        if (!isfinite(mean[c]) || !isfinite(std[c]) || !(std[c] > 0.0f))
            return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    int err = set_convert_tensor(p, tensor);
    if (err < 0)
        return err;
    p->convert.normalize = 1;
    p->convert.channels = channels;
    memcpy(p->convert.mean, mean, sizeof *mean * (size_t)channels);
    memcpy(p->convert.std, std, sizeof *std * (size_t)channels);
    return 0;
}

const char *
tsock_producer_endpoint(const tsock_producer *p)
{
    return p ? p->endpoint : NULL;
}

/* ---- start ------------------------------------------------------------------------------- */

/* The ring's bookkeeping, the sampler and the slot memory the backend makes. */
static int
allocate_ring(tsock_producer *p)
{
    int err = tsock__ring_init(&p->ring, p->slot_count);
    if (err < 0)
        return err;
    p->queue = calloc(p->slot_count, sizeof *p->queue);
    if (!p->queue)
        return -ENOMEM;
    if (p->use_sampler) {
        p->slot_ids = calloc((size_t)p->slot_count * p->batch_size, sizeof *p->slot_ids);
        /* A batch's ids as the wire carries them, for the consumers that ask (resume). */
        p->ids_wire = malloc((size_t)p->batch_size * 4);
        if (!p->slot_ids || !p->ids_wire)
            return -ENOMEM;
        err = tsock__sampler_init(&p->sampler, p->sampler_samples, p->sampler_seed,
                                  p->sampler_epochs);
        if (err == 0)
            err = tsock__producer_shards_start(p);
        if (err < 0)
            return err;
    }
    struct tsock__ring_request req = {
        .layout = &p->layout,
        .offsets = p->offsets,
        .stride = p->slot_stride,
        .batch_size = p->batch_size,
        .slots = p->slot_count,
        .device = p->device,
        .convert = &p->convert,
    };
    const struct tsock__backend *ops = tsock__backend_for_device(p->device);
    return ops->create(&p->memory, &req, &p->shape);
}

int
tsock_producer_start(tsock_producer *p)
{
    if (!p)
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED || p->channel)
        return TSOCK_E_STATE;
    /* First, so that a refused node share has allocated nothing else. */
    int err = tsock__producer_nodes_start(p);
    if (err == 0)
        err = allocate_ring(p);
    if (err < 0)
        return err;
    p->state = TSOCK__P_RUNNING;
    p->started_ns = tsock__now_ns();
    err = tsock__producer_service_start(p);
    if (err < 0) {
        p->state = TSOCK__P_CREATED;
        return err;
    }
    tsock__log(TSOCK_LOG_INFO, "producer on %s: %u slots of %zu bytes (%s)", p->endpoint,
               p->slot_count, p->shape.stride, p->memory->ops->name);
    return 0;
}

/* ---- the caller's side: consumers, slots, publishing --------------------------------------- */

void
tsock_producer_cancel(tsock_producer *p)
{
    if (!p)
        return;
    atomic_store(&p->cancel, 1);
    struct tsock__channel *ch = atomic_load(&p->cancel_channel);
    if (ch)
        tsock__channel_wake(ch);
}

/* A pending cancel, consumed: the call that reports it stops only itself. */
static int
take_cancel(tsock_producer *p)
{
    return atomic_exchange(&p->cancel, 0) != 0;
}

/* Whether a batch published now would go to consumer record c: a rank waiting at its group's
 * start barrier gets nothing (its window has not begun), nor does a rank of a failed group,
 * nor a paused consumer. A paused consumer's window restarts wherever the stream is when it
 * comes back, so nothing is lost by not publishing meanwhile; publishing for nobody would
 * decode for nothing and, on a finite stream, use up epochs nobody reads. */
static int
served(const struct tsock__consumer_rec *c)
{
    return c->active && !c->waiting && !c->group_failed && !c->paused;
}

/* The consumers a batch published now would reach (mu held): what decides whether publishing
 * is worth it, so ranks waiting for the rest of their group, or left over from a failed one,
 * never make the producer decode for nobody. */
static int
served_count(const tsock_producer *p)
{
    int n = 0;
    for (int i = 0; i < TSOCK__PRODUCER_MAX_CONSUMERS; i++)
        n += served(&p->consumers[i]);
    return n;
}

int
tsock_producer_wait_consumers(tsock_producer *p, int count, int timeout_ms)
{
    if (!p)
        return -EINVAL;
    if (take_cancel(p))
        return TSOCK_E_CANCELLED;
    uint64_t deadline = tsock__deadline(timeout_ms);
    pthread_mutex_lock(&p->mu);
    int err = 0;
    while (served_count(p) < count && err == 0 && !atomic_load(&p->cancel))
        err = tsock__cond_wait_until(&p->cond, &p->mu, deadline);
    int n = served_count(p);
    pthread_mutex_unlock(&p->mu);
    if (n < count && err == 0 && take_cancel(p))
        return TSOCK_E_CANCELLED;
    return n >= count ? n : -ETIMEDOUT;
}

/* Waits (mu held) for a free slot and takes it. */
static int
take_free_slot(tsock_producer *p, int timeout_ms)
{
    uint64_t deadline = tsock__deadline(timeout_ms);
    uint64_t started = tsock__now_ns();
    int slot;
    while ((slot = tsock__ring_acquire(&p->ring)) < 0) {
        if (p->state != TSOCK__P_RUNNING)
            return TSOCK_E_STATE;
        if (take_cancel(p))
            return TSOCK_E_CANCELLED;
        if (tsock__cond_wait_until(&p->cond, &p->mu, deadline) != 0) {
            slot = tsock__ring_acquire(&p->ring);
            break;
        }
    }
    p->stat_wait_ns += tsock__now_ns() - started;
    return slot < 0 ? -ETIMEDOUT : slot;
}

/* Before an epoch starts, tells the sampler the phase of every consumer whose window runs into
 * it, so each of them still sees every sample once (mu held). */
static void
keep_consumer_phases(tsock_producer *p)
{
    uint64_t phases[TSOCK__PRODUCER_MAX_CONSUMERS];
    size_t n = 0;
    for (int i = 0; i < TSOCK__PRODUCER_MAX_CONSUMERS; i++) {
        const struct tsock__consumer_rec *c = &p->consumers[i];
        if (c->active && !c->paused && c->window_start != TSOCK__NO_WINDOW)
            phases[n++] = c->window_start % p->sampler_samples;
    }
    tsock__sampler_keep_segments(&p->sampler, phases, n);
}

/* The epochs a finite stream ending at `end` still owes consumer record c: one for each of its
 * windows that starts before the end, counted from its first as if it had never paused (a
 * pause moves its windows along the stream: it must not cost it one), less the epochs it
 * finished or gave up (its last PAUSE or RESUME said how many). A consumer that has had no
 * batch yet is owed none. Each window from its current one's start is one epoch: after a
 * mid-epoch pause it takes the rest of that epoch from the first. */
static uint64_t
epochs_owed(const tsock_producer *p, const struct tsock__consumer_rec *c, uint64_t end)
{
    if (c->first_window == TSOCK__NO_WINDOW || end <= c->first_window)
        return 0;
    uint64_t n = p->sampler_samples, windows = (end - c->first_window + n - 1) / n;
    return windows > c->epochs_done ? windows - c->epochs_done : 0;
}

/* Where the last window that a finite stream ending at `end` owes consumer record c ends, or 0
 * when it owes none; `position` is where the stream is. Its windows are `sampler_samples`
 * consecutive samples from its window start: where it joined, resumed after a pause, or
 * restored a checkpoint (docs/semantics.md, "When a finite stream ends"); one that resumed
 * starts its window at the next batch. It is owed the window that the end cut, so that no
 * epoch ends short, and the epochs its join gave it. A paused consumer has no window
 * (owed_paused). */
static uint64_t
owed_window_end(const tsock_producer *p, const struct tsock__consumer_rec *c, uint64_t end,
                uint64_t position)
{
    if (!served(c))
        return 0;
    uint64_t n = p->sampler_samples, to = 0;
    if (c->window_start != TSOCK__NO_WINDOW && end > c->window_start) {
        uint64_t into = (end - c->window_start) % n;
        if (into)
            to = end + (n - into);
    }
    uint64_t owed = epochs_owed(p, c, end);
    uint64_t start = c->window_start == TSOCK__NO_WINDOW ? position : c->window_start;
    if (owed && start + owed * n > to)
        to = start + owed * n;
    return to;
}

/* Where the stream ended (the sampler issued its last epoch) or ends now (mu held). */
static uint64_t
stream_end_position(const tsock_producer *p, uint64_t position)
{
    return p->overtime ? p->stream_end : position;
}

/* How many more stream samples, from `position` (at or past the stream's end: the sampler
 * issued its last epoch), finish the nearest window that the stream still owes a consumer
 * (mu held); 0 when none is left. */
static uint64_t
owed_window_left(const tsock_producer *p, uint64_t position)
{
    uint64_t end = stream_end_position(p, position), nearest = 0;
    for (int i = 0; i < TSOCK__PRODUCER_MAX_CONSUMERS; i++) {
        uint64_t to = owed_window_end(p, &p->consumers[i], end, position);
        if (to > position && (!nearest || to - position < nearest))
            nearest = to - position;
    }
    return nearest;
}

/* Whether a paused consumer that the stream still owes epochs is connected (mu held): a
 * finite stream does not end without them; it reads them once it resumes. */
static int
owed_paused(const tsock_producer *p, uint64_t position)
{
    uint64_t end = stream_end_position(p, position);
    for (int i = 0; i < TSOCK__PRODUCER_MAX_CONSUMERS; i++) {
        const struct tsock__consumer_rec *c = &p->consumers[i];
        if (c->active && c->paused && epochs_owed(p, c, end) > 0)
            return 1;
    }
    return 0;
}

/* Whether the sampler issued its last epoch (or overtime runs): the end's rules apply. */
static int
at_stream_end(tsock_producer *p)
{
    return p->use_sampler && (p->overtime || tsock__sampler_exhausted(&p->sampler));
}

/* With the sampler's last epoch issued, whether the stream is over: overtime has served every
 * window the stream owes a consumer, and no paused consumer it still owes epochs waits to
 * come back (docs/semantics.md, "When a finite stream ends": the producer finishes a window
 * rather than end a consumer's epoch short, leave a group's ranks with different batch counts,
 * or let a pause cost a job an epoch). mu held. */
static int
stream_over_locked(tsock_producer *p)
{
    uint64_t position = tsock__sampler_stream_position(&p->sampler);
    if (at_stream_end(p) && owed_window_left(p, position) == 0 && !owed_paused(p, position))
        p->end_decided = 1;
    return p->end_decided;
}

static int
stream_over(tsock_producer *p)
{
    if (!at_stream_end(p))
        return 0;
    pthread_mutex_lock(&p->mu);
    int over = stream_over_locked(p);
    pthread_mutex_unlock(&p->mu);
    return over;
}

/* At the stream's end with nothing to publish: the stream is over (TSOCK_E_END), or a paused
 * consumer it still owes epochs keeps it open, and this waits, until `deadline`, for it to
 * resume or leave (-ETIMEDOUT, as a wait for a free slot would). 0: there is something to
 * publish, or the end is not reached. mu held. */
static int
wait_at_stream_end(tsock_producer *p, uint64_t deadline)
{
    for (;;) {
        uint64_t position = tsock__sampler_stream_position(&p->sampler);
        if (!at_stream_end(p) || owed_window_left(p, position))
            return 0;
        if (!owed_paused(p, position)) {
            p->end_decided = 1;
            return TSOCK_E_END;
        }
        if (p->state != TSOCK__P_RUNNING)
            return TSOCK_E_STATE;
        if (atomic_load(&p->cancel) || tsock__cond_wait_until(&p->cond, &p->mu, deadline) != 0)
            return -ETIMEDOUT;
    }
}

/* Asks the sampler what the slot must hold. Returns 0, or TSOCK_E_END after the last epoch
 * (and after the windows that the last epoch cut: overtime). */
static int
plan_slot(tsock_producer *p, struct tsock_slot *s)
{
    s->planned = 0;
    s->epoch = 0;
    s->index_in_epoch = 0;
    s->epoch_end = 0;
    s->ids = NULL;
    s->position = p->free_position;
    if (!p->use_sampler)
        return 0;
    if (p->sampler.position == 0 && p->sampler.epoch > 0) {
        pthread_mutex_lock(&p->mu);
        keep_consumer_phases(p);
        pthread_mutex_unlock(&p->mu);
    }
    s->position = tsock__sampler_stream_position(&p->sampler);
    s->ids = p->slot_ids + (size_t)s->index * p->batch_size;
    uint32_t max = p->batch_size;
    if (p->overtime || tsock__sampler_exhausted(&p->sampler)) {
        /* Overtime: the next epochs' first samples, up to the nearest owed window's end, for
         * the consumers whose windows they finish (take_holders). The sampler's segments kept
         * the set each of them missed at its window's start (keep_consumer_phases). */
        pthread_mutex_lock(&p->mu);
        uint64_t left = owed_window_left(p, s->position);
        if (left && !p->overtime) {
            p->overtime = 1;
            p->stream_end = s->position;
        }
        /* One more epoch of the sampler's, again when a window owed to a consumer that came
         * back after the end runs past the first one. */
        if (left && tsock__sampler_exhausted(&p->sampler))
            p->sampler.epochs++;
        int over = left == 0 && !owed_paused(p, s->position);
        if (over)
            p->end_decided = 1;
        pthread_mutex_unlock(&p->mu);
        if (left == 0) /* what kept the stream open changed since acquire looked */
            return over ? TSOCK_E_END : -ETIMEDOUT;
        if (left < max)
            max = (uint32_t)left;
    }
    s->planned =
        tsock__sampler_next(&p->sampler, max, s->ids, &s->epoch, &s->index_in_epoch, &s->epoch_end);
    tsock__producer_nodes_map(p, s);
    return s->planned ? 0 : TSOCK_E_END;
}

int
tsock_producer_stream_ended(const tsock_producer *p)
{
    return p && stream_over((tsock_producer *)p);
}

int
tsock_producer_acquire(tsock_producer *p, int timeout_ms, tsock_slot **slot)
{
    if (!p || !slot)
        return -EINVAL;
    if (p->filling)
        return TSOCK_E_STATE;
    if (take_cancel(p))
        return TSOCK_E_CANCELLED; /* a pending cancel wins over a free slot */
    uint64_t deadline = tsock__deadline(timeout_ms);
    pthread_mutex_lock(&p->mu);
    /* The end is known before any slot is free: say so at once rather than after waiting for
     * consumers that may already have left. */
    int index = wait_at_stream_end(p, deadline);
    if (index == 0)
        index = p->state == TSOCK__P_RUNNING ? take_free_slot(p, timeout_ms) : TSOCK_E_STATE;
    pthread_mutex_unlock(&p->mu);
    if (index == -ETIMEDOUT && take_cancel(p))
        return TSOCK_E_CANCELLED;
    if (index < 0)
        return index;
    struct tsock_slot *s = &p->current;
    s->index = (uint32_t)index;
    s->offsets = p->offsets;
    s->tensor_count = p->layout.count;
    /* The slot itself, or (on a GPU) pinned staging memory that publish copies to the slot. */
    int err = p->memory->ops->fill_pointer(p->memory, s->index, &s->base);
    if (err == 0)
        err = plan_slot(p, s);
    if (err < 0) {
        pthread_mutex_lock(&p->mu);
        tsock__ring_abandon(&p->ring, s->index);
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->mu);
        return err;
    }
    p->filling = 1;
    *slot = s;
    return 0;
}

void *
tsock_slot_data(tsock_slot *slot, int tensor)
{
    if (!slot || tensor < 0 || tensor >= slot->tensor_count)
        return NULL;
    return slot->base + slot->offsets[tensor];
}

/* The pipeline's way to the device decoder of the slot it fills (image/device_decoder.h, which
 * the engine does not include: the decoder is opaque here, the backend's to make). */
struct tsock__device_decoder;
struct tsock__device_decoder *tsock__slot_device_decoder(tsock_slot *slot, int *err);

struct tsock__device_decoder *
tsock__slot_device_decoder(tsock_slot *slot, int *err)
{
    tsock_producer *p = (tsock_producer *)((char *)slot - offsetof(struct tsock_producer, current));
    *err = TSOCK_E_STATE;
    if (!p->filling || !p->memory->ops->device_decoder)
        return NULL;
    return p->memory->ops->device_decoder(p->memory, slot->index, err);
}

uint32_t
tsock_slot_planned(const tsock_slot *slot)
{
    return slot ? slot->planned : 0;
}

const uint64_t *
tsock_slot_sample_ids(const tsock_slot *slot)
{
    return slot ? slot->ids : NULL;
}

uint64_t
tsock_slot_epoch(const tsock_slot *slot)
{
    return slot ? slot->epoch : 0;
}

int
tsock_slot_set_epoch(tsock_slot *slot, uint64_t epoch, uint64_t index_in_epoch, int epoch_end)
{
    if (!slot)
        return -EINVAL;
    if (slot->ids)
        return TSOCK_E_STATE;
    slot->epoch = epoch;
    slot->index_in_epoch = index_in_epoch;
    slot->epoch_end = epoch_end != 0;
    return 0;
}

/* The consumers a batch published now goes to; a consumer's first batch after joining or
 * resuming starts its window (mu held). */
static uint64_t
take_holders(tsock_producer *p, uint64_t position)
{
    uint64_t mask = 0;
    for (int i = 0; i < TSOCK__PRODUCER_MAX_CONSUMERS; i++) {
        struct tsock__consumer_rec *c = &p->consumers[i];
        /* A group's ranks wait for the last of them (the start barrier); a failed group's get
         * nothing more; a paused consumer nothing until it resumes. */
        if (!served(c))
            continue;
        /* Overtime goes only to the consumers whose window it finishes. */
        if (p->overtime && owed_window_end(p, c, p->stream_end, position) <= position)
            continue;
        mask |= (uint64_t)1 << i;
        if (c->window_start == TSOCK__NO_WINDOW)
            c->window_start = position;
        if (c->first_window == TSOCK__NO_WINDOW)
            c->first_window = position;
    }
    return mask;
}

int
tsock_producer_publish(tsock_producer *p, tsock_slot *slot, uint32_t samples)
{
    if (!p || slot != &p->current || !p->filling)
        return p ? TSOCK_E_STATE : -EINVAL;
    if (samples == 0 || samples > p->batch_size || (p->use_sampler && samples != slot->planned))
        return -EINVAL;
    /* The slot is made readable (on a GPU: its copy and event queued) before any consumer
     * hears of the batch, so what a consumer waits on is always this batch; the service thread
     * announces it once the copy has completed (publish_done). */
    int err = p->memory->ops->publish(p->memory, slot->index, samples);
    if (err < 0) {
        pthread_mutex_lock(&p->mu);
        tsock__ring_abandon(&p->ring, slot->index);
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->mu);
        p->filling = 0;
        return err;
    }
    pthread_mutex_lock(&p->mu);
    uint64_t holders = take_holders(p, slot->position), seq;
    tsock__ring_publish(&p->ring, slot->index, holders, &seq);
    p->stat_batches++;
    p->stat_samples += samples;
    p->stat_epochs += slot->epoch_end != 0;
    if (holders) {
        struct tsock__outgoing *o = &p->queue[(p->queue_head + p->queue_len++) % p->slot_count];
        o->holders = holders;
        o->batch = (struct tsock__msg_batch){
            .slot = slot->index,
            .samples = samples,
            .seq = seq,
            .epoch = slot->epoch,
            .index_in_epoch = slot->index_in_epoch,
            .position = slot->position,
            .flags = slot->epoch_end ? TSOCK__BATCH_EPOCH_END : 0,
        };
    } else {
        pthread_cond_broadcast(&p->cond); /* the slot is free again */
    }
    pthread_mutex_unlock(&p->mu);
    p->filling = 0;
    p->free_position = slot->position + samples;
    if (holders)
        tsock__channel_wake(p->channel);
    return 0;
}

/* ---- finish and destroy ------------------------------------------------------------------ */

int
tsock_producer_finish(tsock_producer *p)
{
    if (!p)
        return -EINVAL;
    pthread_mutex_lock(&p->mu);
    if (p->state == TSOCK__P_RUNNING)
        p->state = TSOCK__P_FINISHED;
    if (p->filling)
        tsock__ring_abandon(&p->ring, p->current.index);
    p->filling = 0;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    if (p->channel)
        tsock__channel_wake(p->channel);
    return 0;
}

void
tsock_producer_destroy(tsock_producer *p)
{
    if (!p)
        return;
    tsock__producer_service_stop(p);
    if (p->memory)
        p->memory->ops->close(p->memory);
    if (p->use_sampler)
        tsock__sampler_free(&p->sampler);
    tsock__pgroup_free_all(p);
    tsock__producer_nodes_free(p);
    free(p->shard_starts);
    free(p->classes);
    free(p->slot_ids);
    free(p->ids_wire);
    free(p->queue);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
