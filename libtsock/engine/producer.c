/* The producer engine: owns the ring memory, the slot bookkeeping and the ROUTER socket.
 *
 * Two threads touch a producer. The caller's thread acquires, fills and publishes slots. The
 * service thread owns the socket: it welcomes consumers, sends BATCH messages, applies
 * releases, exchanges heartbeats and drops consumers that fell silent. Everything they share
 * is guarded by `mu`; the caller wakes the service thread through an eventfd, and the service
 * thread wakes the caller (waiting for a free slot or for consumers) through `cond`.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "backend/backend.h"
#include "core/core.h"
#include "core/json.h"
#include "core/layout.h"
#include "core/sync.h"
#include "dataset/sampler.h"
#include "engine/stats.h"
#include "image/convert.h"
#include "proto/proto.h"
#include "ring/ring.h"
#include "transport/transport.h"

#define MAX_CONSUMERS TSOCK_RING_MAX_CONSUMERS
_Static_assert(MAX_CONSUMERS <= TSOCK_STATS_MAX_CONSUMERS, "a STATS_REPLY lists every consumer");

/* Consumer rates are measured over windows of about this length. */
#define RATE_WINDOW_NS 1000000000u
/* STATS_REQUESTs answered per second at most: each reply costs a walk over the consumers and
 * the ring and up to 14 KB queued for a peer that may never read it, so a flood of requests
 * must not turn into a flood of work or memory. Legitimate watchers ask about once a second. */
#define STATS_REPLIES_PER_S 20

struct consumer_rec {
    int active;
    uint8_t id[TSOCK_ROUTING_ID_MAX];
    size_t id_len;
    uint64_t consumer_id;
    uint64_t join_order;
    uint32_t pid;
    char name[TSOCK_MAX_NAME + 1];
    uint64_t last_heard_ns;
    uint64_t batches, samples, released;
    int paused;            /* between epochs: not given new batches */
    uint64_t window_start; /* stream position of its current window, or NO_WINDOW */
    uint64_t rate_mark_ns, rate_mark_released; /* start of the current rate window */
    uint64_t rate_milli;                       /* released per second x 1000, last window */
    int reported;                              /* `own` holds a CONSUMER_STATS */
    struct tsock_msg_consumer_stats own;
    /* Dropped because a send failed, not yet counted as lost: a consumer that says BYE and
     * closes its socket can make a send fail before its BYE, already queued, is read. The
     * verdict waits for the next pass over the socket (settle_unreachable). */
    int unreachable;
};

#define NO_WINDOW UINT64_MAX

/* A published slot waiting for the service thread to announce it. */
struct outgoing {
    uint64_t holders;
    struct tsock_msg_batch batch;
};

struct tsock_slot {
    uint32_t index;
    uint32_t planned;
    uint64_t position; /* stream position of the slot's first sample */
    uint64_t epoch;
    uint64_t index_in_epoch;
    int epoch_end;
    uint64_t *ids;
    uint8_t *base;
    const size_t *offsets;
    int tensor_count;
};

enum producer_state { P_CREATED, P_RUNNING, P_FINISHED, P_STOPPED };

struct tsock_producer {
    char endpoint[TSOCK_ENDPOINT_MAX];
    char ipc_path[TSOCK_ENDPOINT_MAX];
    ino_t ipc_inode;
    tsock_layout layout; /* as the caller fills a slot */
    size_t offsets[TSOCK_MAX_TENSORS];
    size_t slot_stride;
    /* As consumers see a slot: the same as above, unless a conversion changes a tensor. */
    tsock_layout out_layout;
    size_t out_offsets[TSOCK_MAX_TENSORS];
    size_t out_stride;
    int device; /* CUDA device of the ring, or -1 for host shared memory */
    struct tsock_convert_request convert;
    struct tsock_cuda_ring *cuda;
    struct tsock_cuda_handles *cuda_handles;
    uint32_t batch_size, slot_count;
    int hb_interval_ms, hb_timeout_ms;

    int use_sampler;
    uint64_t sampler_samples, sampler_seed, sampler_epochs;
    struct tsock__sampler sampler;
    uint64_t *slot_ids; /* slot_count * batch_size sample ids */
    struct tsock_slot current;
    int filling;
    uint64_t free_position; /* free mode: samples published so far */

    struct tsock_region region;
    void *zctx;
    void *router;
    int wake_fd;
    pthread_t thread;
    int thread_started;

    /* Shared between the caller's thread and the service thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    enum producer_state state;
    int stop_thread;
    int shutdown_sent;
    struct tsock_ring ring;
    struct consumer_rec consumers[MAX_CONSUMERS];
    int consumer_count;
    uint64_t next_consumer_id;
    struct outgoing *queue; /* ring buffer of slot_count entries */
    uint32_t queue_head, queue_len;
    uint64_t stat_batches, stat_samples, stat_released, stat_joined, stat_lost, stat_bad,
        stat_wait_ns, stat_epochs;
    uint64_t started_ns;
    char status[TSOCK_MAX_STATUS + 1]; /* the application's JSON object, or "" */
    uint64_t stats_window_ns;          /* STATS_REQUEST rate limit: current second */
    int stats_answered;                /* replies sent in it */
    uint64_t stats_dropped;

    struct tsock_frame frame;                     /* service thread's receive buffer */
    struct tsock_stats_reply stats_reply;         /* service thread's, for STATS_REPLY */
    uint8_t stats_frame[TSOCK_PROTO_MAX_MESSAGE]; /* its encoding */
};

/* ---- creation and options ---------------------------------------------------------------- */

int
tsock_producer_create(tsock_producer **out, const char *endpoint, const tsock_layout *layout,
                      uint32_t batch_size, uint32_t slots)
{
    if (!out || !layout || batch_size == 0 || slots < 2 || slots > TSOCK_RING_MAX_SLOTS)
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
    p->out_layout = *layout;
    memcpy(p->out_offsets, p->offsets, sizeof p->offsets);
    p->out_stride = p->slot_stride;
    p->device = -1;
    p->batch_size = batch_size;
    p->slot_count = slots;
    p->hb_interval_ms = 250;
    p->hb_timeout_ms = 3000;
    p->wake_fd = -1;
    p->state = P_CREATED;
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
    if (p->state != P_CREATED)
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
    if (p->state != P_CREATED)
        return TSOCK_E_STATE;
    p->use_sampler = 1;
    p->sampler_samples = samples;
    p->sampler_seed = seed;
    p->sampler_epochs = epochs;
    return 0;
}

int
tsock_producer_set_device(tsock_producer *p, int device)
{
    if (!p || device < -1)
        return -EINVAL;
    if (p->state != P_CREATED)
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
    if (p->state != P_CREATED)
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
    if (mean && (channels < 1 || channels > TSOCK_CONVERT_MAX_CHANNELS))
        return -EINVAL;
    if (!mean) {
        channels = 3;
        mean = imagenet_mean;
        std = imagenet_std;
    }
    for (int c = 0; c < channels; c++)
        if (!isfinite(mean[c]) || !isfinite(std[c]) || !(std[c] > 0.0f))
            return -EINVAL;
    if (p->state != P_CREATED)
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

static void *service_main(void *arg);

static int
bind_endpoint(tsock_producer *p)
{
    const char *path = tsock__ipc_path(p->endpoint);
    if (path) {
        int err = tsock__ipc_claim(path);
        if (err < 0)
            return err;
    }
    int err = 0;
    p->router = tsock__router_open(p->zctx, p->endpoint, &err);
    if (!p->router)
        return err == -EADDRINUSE ? TSOCK_E_BUSY_ENDPOINT : err;
    struct stat st;
    if (path && path[0] != '@' && stat(path, &st) == 0) {
        /* Only the owner may connect: consumers of other users cannot map the ring anyway. */
        chmod(path, 0600);
        snprintf(p->ipc_path, sizeof p->ipc_path, "%s", path);
        p->ipc_inode = st.st_ino;
    }
    return 0;
}

/* The ring in device memory: the published layout (after any conversion), the ring itself and
 * the handles every WELCOME carries. */
static int
allocate_device_ring(tsock_producer *p)
{
    if (p->slot_count > TSOCK_PROTO_MAX_CUDA_SLOTS) {
        tsock__log(TSOCK_LOG_ERROR, "a CUDA ring has at most %d slots, not %u",
                   TSOCK_PROTO_MAX_CUDA_SLOTS, p->slot_count);
        return -EINVAL;
    }
    struct tsock_convert cv;
    int err = tsock__convert_plan(&p->convert, &p->layout, p->batch_size, &p->out_layout,
                                  p->out_offsets, &p->out_stride, &cv);
    if (err < 0)
        return err;
    size_t bytes;
    if (tsock__mul_size(p->out_stride, p->slot_count, &bytes) < 0)
        return TSOCK_E_LAYOUT;
    p->cuda_handles = calloc(1, sizeof *p->cuda_handles);
    if (!p->cuda_handles)
        return -ENOMEM;
    err = tsock__cuda_ring_create(&p->cuda, p->device, p->slot_stride, p->out_stride, p->slot_count,
                                  &cv);
    if (err < 0)
        return err;
    tsock__cuda_ring_export(p->cuda, p->cuda_handles);
    p->region.bytes = bytes;
    snprintf(p->region.name, sizeof p->region.name, "cuda:%d", p->device);
    return 0;
}

static int
allocate_ring(tsock_producer *p)
{
    size_t bytes;
    if (tsock__mul_size(p->slot_stride, p->slot_count, &bytes) < 0)
        return TSOCK_E_LAYOUT;
    int err = tsock__ring_init(&p->ring, p->slot_count);
    if (err < 0)
        return err;
    p->queue = calloc(p->slot_count, sizeof *p->queue);
    if (!p->queue)
        return -ENOMEM;
    if (p->use_sampler) {
        p->slot_ids = calloc((size_t)p->slot_count * p->batch_size, sizeof *p->slot_ids);
        if (!p->slot_ids)
            return -ENOMEM;
        err = tsock__sampler_init(&p->sampler, p->sampler_samples, p->sampler_seed,
                                  p->sampler_epochs);
        if (err < 0)
            return err;
    }
    if (p->device >= 0)
        return allocate_device_ring(p);
    if (p->convert.tensor[0]) {
        tsock__log(TSOCK_LOG_ERROR, "output conversion runs on the GPU: set a CUDA device "
                                    "(tsock_producer_set_device) to use it");
        return -ENOTSUP;
    }
    tsock__shm_sweep_orphans();
    return tsock__shm_create(&p->region, bytes);
}

int
tsock_producer_start(tsock_producer *p)
{
    if (!p)
        return -EINVAL;
    if (p->state != P_CREATED || p->zctx)
        return TSOCK_E_STATE;
    int err = allocate_ring(p);
    if (err < 0)
        return err;
    p->wake_fd = tsock__wake_open();
    if (p->wake_fd < 0)
        return p->wake_fd;
    p->zctx = zmq_ctx_new();
    if (!p->zctx)
        return -ENOMEM;
    err = bind_endpoint(p);
    if (err < 0)
        return err;
    p->state = P_RUNNING;
    p->started_ns = tsock__now_ns();
    err = pthread_create(&p->thread, NULL, service_main, p);
    if (err) {
        p->state = P_CREATED;
        return -err;
    }
    p->thread_started = 1;
    tsock__log(TSOCK_LOG_INFO, "producer on %s: %u slots of %zu bytes, ring %s", p->endpoint,
               p->slot_count, p->out_stride, p->region.name);
    return 0;
}

/* ---- the caller's side: consumers, slots, publishing --------------------------------------- */

int
tsock_producer_wait_consumers(tsock_producer *p, int count, int timeout_ms)
{
    if (!p)
        return -EINVAL;
    uint64_t deadline = tsock__deadline(timeout_ms);
    pthread_mutex_lock(&p->mu);
    int err = 0;
    while (p->consumer_count < count && err == 0)
        err = tsock__cond_wait_until(&p->cond, &p->mu, deadline);
    int n = p->consumer_count;
    pthread_mutex_unlock(&p->mu);
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
        if (p->state != P_RUNNING)
            return TSOCK_E_STATE;
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
    uint64_t phases[MAX_CONSUMERS];
    size_t n = 0;
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        const struct consumer_rec *c = &p->consumers[i];
        if (c->active && !c->paused && c->window_start != NO_WINDOW)
            phases[n++] = c->window_start % p->sampler_samples;
    }
    tsock__sampler_keep_segments(&p->sampler, phases, n);
}

/* Asks the sampler what the slot must hold. Returns 0, or TSOCK_E_END after the last epoch. */
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
    s->planned = tsock__sampler_next(&p->sampler, p->batch_size, s->ids, &s->epoch,
                                     &s->index_in_epoch, &s->epoch_end);
    return s->planned ? 0 : TSOCK_E_END;
}

int
tsock_producer_stream_ended(const tsock_producer *p)
{
    return p && p->use_sampler && tsock__sampler_exhausted(&p->sampler);
}

int
tsock_producer_acquire(tsock_producer *p, int timeout_ms, tsock_slot **slot)
{
    if (!p || !slot)
        return -EINVAL;
    if (p->filling)
        return TSOCK_E_STATE;
    /* The end is known before any slot is free: say so at once rather than after waiting for
     * consumers that may already have left. */
    if (p->use_sampler && tsock__sampler_exhausted(&p->sampler))
        return TSOCK_E_END;
    pthread_mutex_lock(&p->mu);
    int index = p->state == P_RUNNING ? take_free_slot(p, timeout_ms) : TSOCK_E_STATE;
    pthread_mutex_unlock(&p->mu);
    if (index < 0)
        return index;
    struct tsock_slot *s = &p->current;
    s->index = (uint32_t)index;
    s->base = p->region.base + (size_t)index * p->slot_stride;
    s->offsets = p->offsets;
    s->tensor_count = p->layout.count;
    /* On the GPU the caller fills pinned staging memory; publish copies it to the slot. */
    int err = p->cuda ? tsock__cuda_ring_staging(p->cuda, &s->base) : 0;
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
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        struct consumer_rec *c = &p->consumers[i];
        if (!c->active || c->paused)
            continue;
        mask |= (uint64_t)1 << i;
        if (c->window_start == NO_WINDOW)
            c->window_start = position;
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
    /* The copy and the slot's event are queued before any consumer hears of the batch, so the
     * event a consumer waits on is always this batch's. */
    int err = p->cuda ? tsock__cuda_ring_publish(p->cuda, slot->index, samples) : 0;
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
        struct outgoing *o = &p->queue[(p->queue_head + p->queue_len++) % p->slot_count];
        o->holders = holders;
        o->batch = (struct tsock_msg_batch){
            .slot = slot->index,
            .samples = samples,
            .seq = seq,
            .epoch = slot->epoch,
            .index_in_epoch = slot->index_in_epoch,
            .position = slot->position,
            .flags = slot->epoch_end ? TSOCK_BATCH_EPOCH_END : 0,
        };
    } else {
        pthread_cond_broadcast(&p->cond); /* the slot is free again */
    }
    pthread_mutex_unlock(&p->mu);
    p->filling = 0;
    p->free_position = slot->position + samples;
    if (holders)
        tsock__wake_signal(p->wake_fd);
    return 0;
}

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
static void
snapshot_producer(const tsock_producer *p, struct tsock_stats_producer *s)
{
    uint32_t held = 0;
    for (uint32_t i = 0; i < p->ring.count; i++)
        held += p->ring.slots[i].state == TSOCK_SLOT_HELD;
    *s = (struct tsock_stats_producer){
        .pid = (uint32_t)getpid(),
        .slots = p->slot_count,
        .free_slots = p->ring.count ? p->ring.free_count : p->slot_count, /* before start */
        .held = held,
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
    uint64_t bit = (uint64_t)1 << index, oldest = UINT64_MAX;
    for (uint32_t i = 0; i < p->ring.count; i++) {
        const struct tsock_ring_slot *rs = &p->ring.slots[i];
        if (rs->state == TSOCK_SLOT_HELD && (rs->holders & bit) && rs->seq < oldest)
            oldest = rs->seq;
    }
    /* A held publication was issued, so next_seq > oldest. */
    return oldest == UINT64_MAX ? 0 : p->ring.next_seq - 1 - oldest;
}

static void
snapshot_consumer(const tsock_producer *p, int index, struct tsock_stats_consumer *s)
{
    const struct consumer_rec *c = &p->consumers[index];
    int held = tsock__ring_held_by(&p->ring, (uint32_t)index);
    *s = (struct tsock_stats_consumer){
        .id = c->consumer_id,
        .pid = c->pid,
        .flags = (c->paused ? TSOCK_STATS_PAUSED : 0u) | (c->reported ? TSOCK_STATS_REPORTED : 0u),
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
static int
consumers_in_join_order(const tsock_producer *p, int order[MAX_CONSUMERS])
{
    int n = 0;
    for (int i = 0; i < MAX_CONSUMERS; i++) {
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
    int order[MAX_CONSUMERS], err;
    pthread_mutex_lock(&p->mu);
    if (consumer < 0) {
        struct tsock_stats_producer s;
        snapshot_producer(p, &s);
        err = tsock__stats_producer_value(&s, (uint32_t)p->consumer_count, key, value);
    } else if (consumer >= consumers_in_join_order(p, order)) {
        err = -ENOENT;
    } else {
        struct tsock_stats_consumer s;
        snapshot_consumer(p, order[consumer], &s);
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

/* ---- the service thread ------------------------------------------------------------------ */

/* Forgets a consumer and frees its slots. `lost`: it vanished without saying BYE. */
static void
drop_consumer(tsock_producer *p, int index, const char *why, int lost)
{
    struct consumer_rec *c = &p->consumers[index];
    if (!c->active)
        return;
    p->stat_lost += lost != 0;
    int freed = tsock__ring_drop_consumer(&p->ring, (uint32_t)index);
    tsock__log(TSOCK_LOG_INFO, "consumer %llu (pid %u) %s; %d slots reclaimed",
               (unsigned long long)c->consumer_id, c->pid, why, freed < 0 ? 0 : freed);
    c->active = 0;
    p->consumer_count--;
    pthread_cond_broadcast(&p->cond);
}

static void
send_to(tsock_producer *p, int index, const struct tsock_msg *msg)
{
    struct consumer_rec *c = &p->consumers[index];
    int err = tsock__send(p->router, c->id, c->id_len, msg);
    if (err < 0) {
        /* EHOSTUNREACH: its connection is gone. EAGAIN: it stopped reading a queue deep
         * enough for thousands of messages. Either way it cannot be served any more. */
        tsock__log(TSOCK_LOG_WARN, "sending %s to consumer %llu failed: %s",
                   tsock__msg_type_name(msg->type), (unsigned long long)c->consumer_id,
                   tsock_strerror(err));
        drop_consumer(p, index, "is unreachable", 0);
        c->unreachable = 1;
    }
}

/* A BYE from a consumer dropped as unreachable: it left after all. Returns 1 if it was one. */
static int
bye_after_unreachable(tsock_producer *p, const struct tsock_frame *f)
{
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        struct consumer_rec *c = &p->consumers[i];
        if (!c->active && c->unreachable && c->id_len == f->id_len &&
            memcmp(c->id, f->id, f->id_len) == 0) {
            c->unreachable = 0;
            tsock__log(TSOCK_LOG_INFO, "consumer %llu had said BYE: it left",
                       (unsigned long long)c->consumer_id);
            return 1;
        }
    }
    return 0;
}

/* After a whole pass over the socket: the consumers dropped as unreachable whose BYE did not
 * come are lost. */
static void
settle_unreachable(tsock_producer *p)
{
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        struct consumer_rec *c = &p->consumers[i];
        if (!c->active && c->unreachable) {
            c->unreachable = 0;
            p->stat_lost++;
            tsock__log(TSOCK_LOG_INFO, "consumer %llu was lost (no BYE)",
                       (unsigned long long)c->consumer_id);
        }
    }
}

static void
reply_raw(tsock_producer *p, const struct tsock_frame *f, const struct tsock_msg *msg)
{
    (void)tsock__send(p->router, f->id, f->id_len, msg); /* best effort to an unknown peer */
}

static int
find_consumer(const tsock_producer *p, const struct tsock_frame *f)
{
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        const struct consumer_rec *c = &p->consumers[i];
        if (c->active && c->id_len == f->id_len && memcmp(c->id, f->id, f->id_len) == 0)
            return i;
    }
    return -1;
}

static void
fill_welcome(const tsock_producer *p, const struct consumer_rec *c, struct tsock_msg *m)
{
    struct tsock_msg_welcome *w = &m->u.welcome;
    memset(m, 0, sizeof *m);
    m->type = TSOCK_MSG_WELCOME;
    w->consumer_id = c->consumer_id;
    w->batch_size = p->batch_size;
    w->slot_count = p->slot_count;
    w->slot_stride = p->out_stride;
    w->ring_bytes = p->region.bytes;
    w->heartbeat_ms = (uint32_t)p->hb_interval_ms;
    w->device = p->cuda ? TSOCK_DEVICE_CUDA : TSOCK_DEVICE_CPU;
    w->samples = p->use_sampler ? p->sampler_samples : 0;
    if (p->cuda)
        w->cuda = *p->cuda_handles;
    else
        snprintf(w->shm_name, sizeof w->shm_name, "%s", p->region.name);
    w->tensor_count = (uint32_t)p->out_layout.count;
    for (int t = 0; t < p->out_layout.count; t++) {
        const struct tsock_layout_tensor *lt = &p->out_layout.tensors[t];
        struct tsock_tensor_desc *d = &w->tensors[t];
        memcpy(d->name, lt->name, sizeof d->name);
        d->dtype = (uint8_t)lt->dtype;
        d->ndim = (uint8_t)lt->ndim;
        memcpy(d->sample_shape, lt->sample_shape, sizeof d->sample_shape);
        d->offset = p->out_offsets[t];
        d->sample_bytes = lt->sample_bytes;
    }
}

static void
reject(tsock_producer *p, const struct tsock_frame *f, int code)
{
    struct tsock_msg m = {.type = TSOCK_MSG_REJECT, .u.reject.code = code};
    reply_raw(p, f, &m);
}

static void
on_hello(tsock_producer *p, const struct tsock_frame *f, const struct tsock_msg_hello *h)
{
    int index = find_consumer(p, f);
    if (index < 0) {
        if (p->state != P_RUNNING) {
            reject(p, f, p->state == P_FINISHED ? TSOCK_E_END : TSOCK_E_PRODUCER_STOPPED);
            return;
        }
        for (index = 0; index < MAX_CONSUMERS && p->consumers[index].active; index++)
            ;
        if (index == MAX_CONSUMERS) {
            reject(p, f, TSOCK_E_FULL);
            return;
        }
        struct consumer_rec *c = &p->consumers[index];
        p->stat_lost += c->unreachable != 0; /* its record is reused before the verdict */
        memset(c, 0, sizeof *c);
        c->active = 1;
        memcpy(c->id, f->id, f->id_len);
        c->id_len = f->id_len;
        c->consumer_id = p->next_consumer_id++;
        c->join_order = p->stat_joined++;
        c->pid = h->pid;
        memcpy(c->name, h->name, sizeof c->name);
        c->last_heard_ns = tsock__now_ns();
        c->rate_mark_ns = c->last_heard_ns;
        c->window_start = NO_WINDOW;
        p->consumer_count++;
        pthread_cond_broadcast(&p->cond);
        tsock__log(TSOCK_LOG_INFO, "consumer %llu joined (pid %u, \"%s\")",
                   (unsigned long long)c->consumer_id, c->pid, c->name);
    }
    /* A repeated HELLO (its first WELCOME was lost) gets the same answer again. */
    struct tsock_msg m;
    fill_welcome(p, &p->consumers[index], &m);
    send_to(p, index, &m);
}

static void
on_release(tsock_producer *p, int index, const struct tsock_msg_release *r)
{
    int freed = tsock__ring_release(&p->ring, r->slot, (uint32_t)index, r->seq);
    if (freed < 0) {
        p->stat_bad++;
        tsock__log(TSOCK_LOG_WARN, "consumer %llu released slot %u seq %llu it does not hold",
                   (unsigned long long)p->consumers[index].consumer_id, r->slot,
                   (unsigned long long)r->seq);
        return;
    }
    p->consumers[index].released++;
    p->stat_released++;
    if (freed)
        pthread_cond_broadcast(&p->cond);
}

/* PAUSE: the consumer finished an epoch and is busy elsewhere; its window and phase end here.
 * RESUME: it comes back; its next batch starts a new window. */
static void
on_pause_resume(tsock_producer *p, int index, int type)
{
    struct consumer_rec *c = &p->consumers[index];
    c->window_start = NO_WINDOW;
    c->paused = type == TSOCK_MSG_PAUSE;
    if (type == TSOCK_MSG_RESUME) {
        struct tsock_msg m = {.type = TSOCK_MSG_RESUMED};
        send_to(p, index, &m);
    }
}

/* Answers a STATS_REQUEST from any peer, consumer or not, within the rate limit. */
static void
on_stats_request(tsock_producer *p, const struct tsock_frame *f, uint64_t request_id)
{
    uint64_t now = tsock__now_ns();
    if (now - p->stats_window_ns >= 1000000000u) {
        p->stats_window_ns = now;
        p->stats_answered = 0;
    }
    if (p->stats_answered >= STATS_REPLIES_PER_S) {
        if (p->stats_dropped++ % 1000 == 0)
            tsock__log(TSOCK_LOG_WARN,
                       "more than %d statistics requests per second; the "
                       "excess goes unanswered (%llu so far)",
                       STATS_REPLIES_PER_S, (unsigned long long)p->stats_dropped);
        return;
    }
    p->stats_answered++;
    struct tsock_stats_reply *r = &p->stats_reply;
    int order[MAX_CONSUMERS];
    r->request_id = request_id;
    snapshot_producer(p, &r->producer);
    memcpy(r->status, p->status, sizeof r->status);
    r->consumer_count = (uint32_t)consumers_in_join_order(p, order);
    for (uint32_t i = 0; i < r->consumer_count; i++)
        snapshot_consumer(p, order[i], &r->consumers[i]);
    int n = tsock__stats_reply_encode(r, p->stats_frame, sizeof p->stats_frame);
    if (n < 0) {
        tsock__log(TSOCK_LOG_ERROR, "cannot encode a statistics reply: %s", tsock_strerror(n));
        return;
    }
    /* Best effort, like any answer to a peer that may not be a consumer. */
    (void)tsock__send_frame(p->router, f->id, f->id_len, p->stats_frame, (size_t)n);
}

/* Starts a new rate window for every consumer whose current one is over. */
static void
update_rates(tsock_producer *p, uint64_t now)
{
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        struct consumer_rec *c = &p->consumers[i];
        uint64_t elapsed = now - c->rate_mark_ns;
        if (!c->active || elapsed < RATE_WINDOW_NS)
            continue;
        double per_s = (double)(c->released - c->rate_mark_released) * 1e9 / (double)elapsed;
        c->rate_milli = (uint64_t)(per_s * 1000.0 + 0.5);
        c->rate_mark_ns = now;
        c->rate_mark_released = c->released;
    }
}

static void
note_bad_message(tsock_producer *p, const struct tsock_frame *f, int err)
{
    p->stat_bad++;
    /* A flood of garbage must not turn into a flood of log lines. */
    if (p->stat_bad <= 10 || p->stat_bad % 1000 == 0)
        tsock__log(TSOCK_LOG_WARN, "rejected a malformed message (%zu bytes, %d frames): %s",
                   f->size, f->parts, tsock_strerror(err));
}

static void
handle_frame(tsock_producer *p, const struct tsock_frame *f)
{
    struct tsock_msg m;
    int err = (f->parts != 1 || f->oversized || f->id_len == 0)
                  ? TSOCK_E_PROTOCOL
                  : tsock__msg_decode(f->data, f->size, &m);
    if (err < 0) {
        note_bad_message(p, f, err);
        if (err == TSOCK_E_VERSION)
            reject(p, f, TSOCK_E_VERSION);
        return;
    }
    int index = find_consumer(p, f);
    if (index >= 0)
        p->consumers[index].last_heard_ns = tsock__now_ns();
    switch (m.type) {
    case TSOCK_MSG_HELLO: on_hello(p, f, &m.u.hello); return;
    case TSOCK_MSG_STATS_REQUEST: on_stats_request(p, f, m.u.stats_request.request_id); return;
    case TSOCK_MSG_RELEASE:
    case TSOCK_MSG_HEARTBEAT:
    case TSOCK_MSG_BYE:
    case TSOCK_MSG_PAUSE:
    case TSOCK_MSG_RESUME:
    case TSOCK_MSG_CONSUMER_STATS:
        if (index < 0) {
            /* A consumer we dropped (it was silent too long) or never knew: tell it. */
            if (!(m.type == TSOCK_MSG_BYE && bye_after_unreachable(p, f)))
                reject(p, f, TSOCK_E_REJECTED);
        } else if (m.type == TSOCK_MSG_RELEASE) {
            on_release(p, index, &m.u.release);
        } else if (m.type == TSOCK_MSG_BYE) {
            drop_consumer(p, index, "left", 0);
        } else if (m.type == TSOCK_MSG_CONSUMER_STATS) {
            p->consumers[index].own = m.u.consumer_stats;
            p->consumers[index].reported = 1;
        } else if (m.type != TSOCK_MSG_HEARTBEAT) {
            on_pause_resume(p, index, m.type);
        }
        return;
    default: note_bad_message(p, f, TSOCK_E_PROTOCOL); return;
    }
}

static void
receive_all(tsock_producer *p)
{
    int got;
    while ((got = tsock__recv(p->router, 1, &p->frame)) > 0)
        handle_frame(p, &p->frame);
}

/* Announces every published slot to the consumers still holding it. */
static void
flush_outgoing(tsock_producer *p)
{
    while (p->queue_len > 0) {
        struct outgoing *o = &p->queue[p->queue_head];
        p->queue_head = (p->queue_head + 1) % p->slot_count;
        p->queue_len--;
        const struct tsock_ring_slot *rs = &p->ring.slots[o->batch.slot];
        struct tsock_msg m = {.type = TSOCK_MSG_BATCH, .u.batch = o->batch};
        for (int i = 0; i < MAX_CONSUMERS; i++) {
            uint64_t bit = (uint64_t)1 << i;
            /* A holder dropped since publish has had its bit cleared by the ring. */
            if (!(o->holders & bit) || rs->state != TSOCK_SLOT_HELD || rs->seq != o->batch.seq ||
                !(rs->holders & bit))
                continue;
            p->consumers[i].batches++;
            p->consumers[i].samples += o->batch.samples;
            send_to(p, i, &m);
        }
    }
}

static void
heartbeat_and_expire(tsock_producer *p, uint64_t now)
{
    struct tsock_msg hb = {.type = TSOCK_MSG_HEARTBEAT};
    uint64_t timeout_ns = (uint64_t)p->hb_timeout_ms * 1000000u;
    for (int i = 0; i < MAX_CONSUMERS; i++) {
        if (!p->consumers[i].active)
            continue;
        if (now - p->consumers[i].last_heard_ns > timeout_ns) {
            drop_consumer(p, i, "timed out (no heartbeat)", 1);
            continue;
        }
        send_to(p, i, &hb);
    }
}

static void
send_shutdown(tsock_producer *p, uint32_t reason)
{
    struct tsock_msg m = {.type = TSOCK_MSG_SHUTDOWN, .u.shutdown.reason = reason};
    for (int i = 0; i < MAX_CONSUMERS; i++)
        if (p->consumers[i].active)
            send_to(p, i, &m);
    p->shutdown_sent = 1;
}

static void *
service_main(void *arg)
{
    tsock_producer *p = arg;
    uint64_t interval_ns = (uint64_t)p->hb_interval_ms * 1000000u;
    uint64_t next_beat = tsock__now_ns() + interval_ns;
    pthread_mutex_lock(&p->mu);
    while (!p->stop_thread) {
        uint64_t now = tsock__now_ns();
        int wait_ms = now >= next_beat ? 0 : (int)((next_beat - now) / 1000000u) + 1;
        pthread_mutex_unlock(&p->mu);
        zmq_pollitem_t items[2] = {{p->router, 0, ZMQ_POLLIN, 0},
                                   {NULL, p->wake_fd, ZMQ_POLLIN, 0}};
        zmq_poll(items, 2, wait_ms);
        if (items[1].revents)
            tsock__wake_drain(p->wake_fd);
        pthread_mutex_lock(&p->mu);
        receive_all(p);
        settle_unreachable(p);
        flush_outgoing(p);
        if (p->state == P_FINISHED && !p->shutdown_sent)
            send_shutdown(p, TSOCK_SHUTDOWN_END);
        now = tsock__now_ns();
        if (now >= next_beat) {
            heartbeat_and_expire(p, now);
            update_rates(p, now);
            next_beat = now + interval_ns;
        }
    }
    flush_outgoing(p);
    if (!p->shutdown_sent)
        send_shutdown(p, p->state == P_FINISHED ? TSOCK_SHUTDOWN_END : TSOCK_SHUTDOWN_STOPPED);
    receive_all(p);
    settle_unreachable(p);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- finish and destroy ------------------------------------------------------------------ */

int
tsock_producer_finish(tsock_producer *p)
{
    if (!p)
        return -EINVAL;
    pthread_mutex_lock(&p->mu);
    if (p->state == P_RUNNING)
        p->state = P_FINISHED;
    if (p->filling)
        tsock__ring_abandon(&p->ring, p->current.index);
    p->filling = 0;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    if (p->wake_fd >= 0)
        tsock__wake_signal(p->wake_fd);
    return 0;
}

static void
stop_service(tsock_producer *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop_thread = 1;
    if (p->state == P_RUNNING)
        p->state = P_STOPPED;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    tsock__wake_signal(p->wake_fd);
    pthread_join(p->thread, NULL);
}

/* Removes the socket file only if it is still the one this producer bound. */
static void
remove_socket_file(tsock_producer *p)
{
    struct stat st;
    if (p->ipc_path[0] && stat(p->ipc_path, &st) == 0 && st.st_ino == p->ipc_inode)
        unlink(p->ipc_path);
}

void
tsock_producer_destroy(tsock_producer *p)
{
    if (!p)
        return;
    if (p->thread_started)
        stop_service(p);
    /* Linger a little so the SHUTDOWN messages reach the consumers. */
    tsock__socket_close(p->router, 200);
    if (p->zctx)
        zmq_ctx_term(p->zctx);
    remove_socket_file(p);
    if (p->cuda)
        tsock__cuda_ring_destroy(p->cuda);
    else
        tsock__shm_release(&p->region);
    free(p->cuda_handles);
    if (p->wake_fd >= 0)
        close(p->wake_fd);
    if (p->use_sampler)
        tsock__sampler_free(&p->sampler);
    free(p->slot_ids);
    free(p->queue);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
