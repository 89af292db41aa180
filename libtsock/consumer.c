/* The consumer engine: a DEALER socket to the producer, the ring mapped read-only, and a
 * queue of announced batches.
 *
 * The service thread owns the socket: it introduces the consumer, queues BATCH messages,
 * sends the releases the caller posts, exchanges heartbeats and notices a producer that fell
 * silent. The caller's thread takes batches from the queue (tsock_consumer_next) and posts
 * releases. Shared state is guarded by `mu`; the caller wakes the service thread through an
 * eventfd and the service thread wakes the caller through `cond`.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "backend/backend.h"
#include "core/core.h"
#include "core/sync.h"
#include "proto/proto.h"
#include "transport/transport.h"

struct tsock_batch {
    tsock_consumer *owner;
    int held;
    struct tsock_msg_batch msg;
    const uint8_t *base; /* the slot's first byte in the mapped ring */
};

/* A release posted by the caller, waiting for the service thread to send it. */
struct pending_release {
    uint32_t slot;
    uint64_t seq;
};

struct tsock_consumer {
    char endpoint[TSOCK_ENDPOINT_MAX];
    char name[TSOCK_MAX_NAME + 1];
    int hb_interval_ms, hb_timeout_ms;

    void *zctx;
    void *dealer;
    int wake_fd;
    pthread_t thread;
    int thread_started;

    /* Shared between the caller's thread and the service thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int stop_thread;
    int welcomed;
    int start_error;    /* why the handshake failed */
    int terminal_error; /* once set, next returns it after the queue drains */
    struct tsock_msg_welcome welcome;
    struct tsock_region region;
    struct tsock_batch *batches; /* one per slot: a slot is held at most once at a time */
    struct tsock_msg_batch *ready; /* announced, not yet returned by next: slot_count entries */
    uint32_t ready_head, ready_len;
    struct pending_release *releases; /* slot_count entries */
    uint32_t release_len;
    uint64_t last_heard_ns;
    uint64_t stat_batches, stat_samples, stat_released, stat_bad, stat_wait_ns;
    int held_count;

    struct tsock_frame frame; /* service thread's receive buffer */
};

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
    c->wake_fd = -1;
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
    if (c->zctx)
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
    if (c->zctx)
        return TSOCK_E_STATE;
    strcpy(c->name, name);
    return 0;
}

/* ---- the service thread ------------------------------------------------------------------ */

static void
send_msg(tsock_consumer *c, const struct tsock_msg *m)
{
    int err = tsock__send(c->dealer, NULL, 0, m);
    if (err < 0 && err != -EAGAIN)
        tsock__log(TSOCK_LOG_WARN, "sending %s failed: %s", tsock__msg_type_name(m->type),
                   tsock_strerror(err));
}

static void
send_hello(tsock_consumer *c)
{
    struct tsock_msg m = {.type = TSOCK_MSG_HELLO};
    m.u.hello.pid = (uint32_t)getpid();
    memcpy(m.u.hello.name, c->name, sizeof m.u.hello.name);
    send_msg(c, &m);
}

/* Sets the error every later call reports, once; wakes the caller. */
static void
fail(tsock_consumer *c, int code)
{
    if (!c->terminal_error)
        c->terminal_error = code;
    if (!c->welcomed && !c->start_error)
        c->start_error = code;
    pthread_cond_broadcast(&c->cond);
}

static int
allocate_queues(tsock_consumer *c, uint32_t slots)
{
    c->batches = calloc(slots, sizeof *c->batches);
    c->ready = calloc(slots, sizeof *c->ready);
    c->releases = calloc(slots, sizeof *c->releases);
    return c->batches && c->ready && c->releases ? 0 : -ENOMEM;
}

static void
on_welcome(tsock_consumer *c, const struct tsock_msg_welcome *w)
{
    if (c->welcomed)
        return; /* the answer to a repeated HELLO */
    int err = w->device == TSOCK_DEVICE_CPU ? 0 : -ENOTSUP;
    if (!err)
        err = tsock__shm_attach(&c->region, w->shm_name, w->ring_bytes);
    if (!err)
        err = allocate_queues(c, w->slot_count);
    if (err) {
        tsock__log(TSOCK_LOG_ERROR, "cannot map ring %s: %s", w->shm_name, tsock_strerror(err));
        fail(c, err);
        return;
    }
    c->welcome = *w;
    for (uint32_t i = 0; i < w->slot_count; i++) {
        c->batches[i].owner = c;
        c->batches[i].base = c->region.base + (size_t)i * w->slot_stride;
    }
    c->welcomed = 1;
    pthread_cond_broadcast(&c->cond);
}

static void
on_batch(tsock_consumer *c, const struct tsock_msg_batch *b)
{
    const struct tsock_msg_welcome *w = &c->welcome;
    if (!c->welcomed || b->slot >= w->slot_count || b->samples > w->batch_size ||
        c->batches[b->slot].held || c->ready_len == w->slot_count) {
        /* Only the producer can send to this socket: it is broken, and nothing it sends can be
         * trusted any more. */
        c->stat_bad++;
        tsock__log(TSOCK_LOG_ERROR, "impossible BATCH from the producer (slot %u, %u samples)",
                   b->slot, b->samples);
        fail(c, TSOCK_E_PROTOCOL);
        return;
    }
    c->ready[(c->ready_head + c->ready_len++) % w->slot_count] = *b;
    c->stat_batches++;
    c->stat_samples += b->samples;
    pthread_cond_signal(&c->cond);
}

static void
on_message(tsock_consumer *c, const struct tsock_msg *m)
{
    switch (m->type) {
    case TSOCK_MSG_WELCOME: on_welcome(c, &m->u.welcome); return;
    case TSOCK_MSG_BATCH: on_batch(c, &m->u.batch); return;
    case TSOCK_MSG_HEARTBEAT: return;
    case TSOCK_MSG_REJECT: fail(c, m->u.reject.code); return;
    case TSOCK_MSG_SHUTDOWN:
        fail(c, m->u.shutdown.reason == TSOCK_SHUTDOWN_END ? TSOCK_E_END
                                                           : TSOCK_E_PRODUCER_STOPPED);
        return;
    default:
        c->stat_bad++;
        tsock__log(TSOCK_LOG_ERROR, "unexpected %s from the producer",
                   tsock__msg_type_name(m->type));
        fail(c, TSOCK_E_PROTOCOL);
        return;
    }
}

static void
receive_all(tsock_consumer *c)
{
    struct tsock_msg m;
    while (tsock__recv(c->dealer, 0, &c->frame) > 0) {
        int err = (c->frame.parts != 1 || c->frame.oversized)
                      ? TSOCK_E_PROTOCOL
                      : tsock__msg_decode(c->frame.data, c->frame.size, &m);
        if (err < 0) {
            c->stat_bad++;
            tsock__log(TSOCK_LOG_ERROR, "malformed message from the producer: %s",
                       tsock_strerror(err));
            fail(c, err);
            continue;
        }
        c->last_heard_ns = tsock__now_ns();
        on_message(c, &m);
    }
}

static void
send_releases(tsock_consumer *c)
{
    for (uint32_t i = 0; i < c->release_len; i++) {
        struct tsock_msg m = {.type = TSOCK_MSG_RELEASE};
        m.u.release.slot = c->releases[i].slot;
        m.u.release.seq = c->releases[i].seq;
        send_msg(c, &m);
    }
    c->release_len = 0;
}

/* The producer is silent: declare it lost and remove its ring's name if it died, since a
 * process killed with SIGKILL could not. */
static void
check_producer(tsock_consumer *c, uint64_t now)
{
    if (c->terminal_error || now - c->last_heard_ns <= (uint64_t)c->hb_timeout_ms * 1000000u)
        return;
    tsock__log(TSOCK_LOG_ERROR, "no word from the producer for %d ms", c->hb_timeout_ms);
    fail(c, c->welcomed ? TSOCK_E_PRODUCER_LOST : -ETIMEDOUT);
    if (c->welcomed)
        tsock__shm_remove_if_orphaned(c->welcome.shm_name);
}

static void *
service_main(void *arg)
{
    tsock_consumer *c = arg;
    uint64_t interval_ns = (uint64_t)c->hb_interval_ms * 1000000u;
    uint64_t next_beat = 0;
    pthread_mutex_lock(&c->mu);
    c->last_heard_ns = tsock__now_ns();
    while (!c->stop_thread) {
        uint64_t now = tsock__now_ns();
        if (now >= next_beat) {
            /* Until welcomed, the heartbeat is a repeated HELLO: a producer that starts late
             * or lost the first one still hears from us. */
            struct tsock_msg hb = {.type = TSOCK_MSG_HEARTBEAT};
            if (c->welcomed)
                send_msg(c, &hb);
            else if (!c->start_error)
                send_hello(c);
            next_beat = now + interval_ns;
            if (c->welcomed)
                check_producer(c, now);
        }
        int wait_ms = (int)((next_beat - now) / 1000000u) + 1;
        pthread_mutex_unlock(&c->mu);
        zmq_pollitem_t items[2] = {{c->dealer, 0, ZMQ_POLLIN, 0}, {NULL, c->wake_fd, ZMQ_POLLIN, 0}};
        zmq_poll(items, 2, wait_ms);
        if (items[1].revents)
            tsock__wake_drain(c->wake_fd);
        pthread_mutex_lock(&c->mu);
        receive_all(c);
        send_releases(c);
    }
    struct tsock_msg bye = {.type = TSOCK_MSG_BYE};
    if (c->welcomed && c->terminal_error != TSOCK_E_PRODUCER_LOST)
        send_msg(c, &bye);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- start ------------------------------------------------------------------------------- */

static int
wait_for_welcome(tsock_consumer *c, int timeout_ms)
{
    uint64_t deadline = tsock__deadline(timeout_ms);
    pthread_mutex_lock(&c->mu);
    int err = 0;
    while (!c->welcomed && !c->start_error && err == 0)
        err = tsock__cond_wait_until(&c->cond, &c->mu, deadline);
    if (c->welcomed)
        err = 0;
    else if (c->start_error)
        err = c->start_error;
    else
        c->start_error = err; /* timed out: the service thread stops saying HELLO */
    pthread_mutex_unlock(&c->mu);
    return err;
}

int
tsock_consumer_start(tsock_consumer *c, int timeout_ms)
{
    if (!c)
        return -EINVAL;
    if (c->zctx)
        return TSOCK_E_STATE;
    c->wake_fd = tsock__wake_open();
    if (c->wake_fd < 0)
        return c->wake_fd;
    c->zctx = zmq_ctx_new();
    if (!c->zctx)
        return -ENOMEM;
    int err = 0;
    c->dealer = tsock__dealer_open(c->zctx, c->endpoint, &err);
    if (!c->dealer)
        return err;
    err = pthread_create(&c->thread, NULL, service_main, c);
    if (err)
        return -err;
    c->thread_started = 1;
    err = wait_for_welcome(c, timeout_ms);
    if (err == 0)
        tsock__log(TSOCK_LOG_INFO, "consumer %llu connected to %s",
                   (unsigned long long)c->welcome.consumer_id, c->endpoint);
    return err;
}

/* ---- next and release -------------------------------------------------------------------- */

static tsock_batch *
pop_ready(tsock_consumer *c)
{
    struct tsock_msg_batch *m = &c->ready[c->ready_head];
    c->ready_head = (c->ready_head + 1) % c->welcome.slot_count;
    c->ready_len--;
    tsock_batch *b = &c->batches[m->slot];
    b->msg = *m;
    b->held = 1;
    c->held_count++;
    return b;
}

int
tsock_consumer_next(tsock_consumer *c, int timeout_ms, tsock_batch **batch)
{
    if (!c || !batch)
        return -EINVAL;
    uint64_t started = tsock__now_ns();
    uint64_t deadline = tsock__deadline(timeout_ms);
    pthread_mutex_lock(&c->mu);
    int err = c->welcomed ? 0 : TSOCK_E_STATE;
    while (err == 0 && c->ready_len == 0) {
        if (c->terminal_error)
            err = c->terminal_error;
        else
            err = tsock__cond_wait_until(&c->cond, &c->mu, deadline);
    }
    if (c->ready_len > 0) {
        *batch = pop_ready(c);
        err = 0;
    }
    c->stat_wait_ns += tsock__now_ns() - started;
    pthread_mutex_unlock(&c->mu);
    return err;
}

int
tsock_consumer_release(tsock_consumer *c, tsock_batch *b)
{
    if (!c || !b)
        return -EINVAL;
    pthread_mutex_lock(&c->mu);
    int held = c->batches && b >= c->batches && b < c->batches + c->welcome.slot_count && b->held;
    if (!held) {
        pthread_mutex_unlock(&c->mu);
        return TSOCK_E_NOT_HELD;
    }
    b->held = 0;
    c->held_count--;
    c->stat_released++;
    c->releases[c->release_len++] = (struct pending_release){b->msg.slot, b->msg.seq};
    pthread_mutex_unlock(&c->mu);
    tsock__wake_signal(c->wake_fd);
    return 0;
}

int
tsock_consumer_stat(tsock_consumer *c, int key, uint64_t *value)
{
    if (!c || !value)
        return -EINVAL;
    int err = 0;
    pthread_mutex_lock(&c->mu);
    switch (key) {
    case TSOCK_STAT_BATCHES: *value = c->stat_batches; break;
    case TSOCK_STAT_SAMPLES: *value = c->stat_samples; break;
    case TSOCK_STAT_RELEASED: *value = c->stat_released; break;
    case TSOCK_STAT_HELD: *value = (uint64_t)c->held_count; break;
    case TSOCK_STAT_BAD_MESSAGES: *value = c->stat_bad; break;
    case TSOCK_STAT_WAIT_NS: *value = c->stat_wait_ns; break;
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

void
tsock_consumer_destroy(tsock_consumer *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stop_thread = 1;
        pthread_mutex_unlock(&c->mu);
        tsock__wake_signal(c->wake_fd);
        pthread_join(c->thread, NULL);
    }
    /* The producer reclaims every slot on BYE; let that message get out. */
    tsock__socket_close(c->dealer, 100);
    if (c->zctx)
        zmq_ctx_term(c->zctx);
    tsock__shm_release(&c->region);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    free(c->batches);
    free(c->ready);
    free(c->releases);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- reading a batch --------------------------------------------------------------------- */

uint32_t
tsock_batch_samples(const tsock_batch *b)
{
    return b ? b->msg.samples : 0;
}

uint64_t
tsock_batch_seq(const tsock_batch *b)
{
    return b ? b->msg.seq : 0;
}

uint64_t
tsock_batch_epoch(const tsock_batch *b)
{
    return b ? b->msg.epoch : 0;
}

uint64_t
tsock_batch_index_in_epoch(const tsock_batch *b)
{
    return b ? b->msg.index_in_epoch : 0;
}

int
tsock_batch_is_epoch_end(const tsock_batch *b)
{
    return b ? (b->msg.flags & TSOCK_BATCH_EPOCH_END) != 0 : 0;
}

static const struct tsock_tensor_desc *
tensor_desc(const tsock_batch *b, int tensor)
{
    if (!b || tensor < 0 || (uint32_t)tensor >= b->owner->welcome.tensor_count)
        return NULL;
    return &b->owner->welcome.tensors[tensor];
}

int
tsock_batch_tensor_count(const tsock_batch *b)
{
    return b ? (int)b->owner->welcome.tensor_count : 0;
}

int
tsock_batch_find(const tsock_batch *b, const char *name)
{
    for (int t = 0; name && t < tsock_batch_tensor_count(b); t++)
        if (strcmp(b->owner->welcome.tensors[t].name, name) == 0)
            return t;
    return -ENOENT;
}

const char *
tsock_batch_tensor_name(const tsock_batch *b, int tensor)
{
    const struct tsock_tensor_desc *d = tensor_desc(b, tensor);
    return d ? d->name : NULL;
}

int
tsock_batch_tensor_dtype(const tsock_batch *b, int tensor)
{
    const struct tsock_tensor_desc *d = tensor_desc(b, tensor);
    return d ? d->dtype : -EINVAL;
}

int
tsock_batch_tensor_ndim(const tsock_batch *b, int tensor)
{
    const struct tsock_tensor_desc *d = tensor_desc(b, tensor);
    return d ? d->ndim + 1 : -EINVAL;
}

int64_t
tsock_batch_tensor_dim(const tsock_batch *b, int tensor, int dim)
{
    const struct tsock_tensor_desc *d = tensor_desc(b, tensor);
    if (!d || dim < 0 || dim > d->ndim)
        return -1;
    return dim == 0 ? (int64_t)b->msg.samples : d->sample_shape[dim - 1];
}

size_t
tsock_batch_tensor_bytes(const tsock_batch *b, int tensor)
{
    const struct tsock_tensor_desc *d = tensor_desc(b, tensor);
    return d ? (size_t)d->sample_bytes * b->msg.samples : 0;
}

const void *
tsock_batch_tensor_data(const tsock_batch *b, int tensor)
{
    const struct tsock_tensor_desc *d = tensor_desc(b, tensor);
    return d ? b->base + d->offset : NULL;
}

int
tsock_batch_tensor_device(const tsock_batch *b, int tensor)
{
    return tensor_desc(b, tensor) ? (int)b->owner->welcome.device : -EINVAL;
}
