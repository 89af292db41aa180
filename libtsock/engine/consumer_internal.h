/* The consumer's state, shared by the caller-facing side (consumer.c) and the session side
 * (consumer_session.c: socket, service thread, handshake, pause, reconnect). */
#ifndef TSOCK_CONSUMER_INTERNAL_H
#define TSOCK_CONSUMER_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/core.h"
#include "proto/proto.h"
#include "ring/epoch_plan.h"
#include "transport/transport.h"

struct tsock_batch {
    tsock_consumer *owner;
    int held;
    int view;            /* points into a slot (else into gather[]) */
    uint32_t view_slot;  /* the slot a view references */
    uint64_t generation; /* the session the view's slot belongs to */
    uint32_t samples;
    uint64_t seq, epoch, index;
    int epoch_end;
    int free_end; /* its last sample ends a producer epoch (free mode) */
    const uint8_t *data[TSOCK_MAX_TENSORS];
    uint8_t *gather[TSOCK_MAX_TENSORS];
    size_t gather_cap[TSOCK_MAX_TENSORS];
    int device;                       /* CUDA device of the batch's data (-1: host memory) */
    struct tsock_cuda_import *import; /* a view of a GPU ring: that ring (open while held) */
    int gather_device;                /* CUDA device of gather[] (-1: host memory) */
    void *fence;                      /* GPU batches: the event of a stream-ordered release */
    int fence_device;
    tsock_batch *next_free;     /* free list */
    tsock_batch *next_all;      /* every batch object, for validation and cleanup */
    tsock_batch *next_deferred; /* released on a stream, waiting for its fence */
};

/* A producer batch this consumer was sent: referenced by the read queue until fully taken
 * and by every view into it; released to the producer when the last reference goes. */
struct slot_hold {
    int refs;
    struct tsock_msg_batch msg;
};

struct pending_release {
    uint32_t slot;
    uint64_t seq;
};

/* Where the consumer stands with the producer's stream. */
enum consumer_phase {
    PHASE_ACTIVE,  /* given every batch */
    PHASE_PAUSED,  /* between epochs past the grace period: given nothing */
    PHASE_RESUMING /* asked to come back; batches before RESUMED are not ours */
};

#define TSOCK_MAX_OLD_MAPPINGS 8

struct tsock_consumer {
    char endpoint[TSOCK_ENDPOINT_MAX];
    char name[TSOCK_MAX_NAME + 1];
    int hb_interval_ms, hb_timeout_ms;
    uint32_t batch_size;
    int drop_last, grace_ms, reconnect_ms;
    int started;

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
    int ready_to_read;
    int start_error;     /* why the handshake failed */
    int terminal_error;  /* once set, next returns it after the queue drains */
    uint64_t generation; /* sessions opened so far: a reconnect starts a new one */
    struct tsock_msg_welcome welcome;
    struct tsock_region region;
    struct tsock_region old_regions[TSOCK_MAX_OLD_MAPPINGS]; /* kept while views may use them */
    int old_region_count;
    int device;                     /* tsock_consumer_set_device */
    const uint8_t *ring_base;       /* the session's ring: mapped host memory or device memory */
    struct tsock_cuda_import *cuda; /* the session's GPU ring, when it is one */
    struct tsock_cuda_import *old_cuda[TSOCK_MAX_OLD_MAPPINGS];
    int old_cuda_count;
    tsock_batch *deferred; /* released on a stream, fence not yet passed */
    int deferred_count;
    struct slot_hold *holds; /* one per slot */
    uint32_t *ready;         /* slots announced, oldest first: slot_count entries */
    uint32_t ready_head, ready_len;
    uint32_t head_offset;             /* samples of the oldest announced batch already taken */
    uint64_t expect_position;         /* stream position the next BATCH must start at */
    struct pending_release *releases; /* slot_count entries */
    uint32_t release_len;
    enum consumer_phase phase;
    int resume_sent;
    int between_epochs; /* the caller has the last batch of an epoch */
    uint64_t epoch_ended_ns;
    struct tsock_epoch_plan plan;
    tsock_batch *building; /* the batch being gathered */
    tsock_batch *free_batches, *all_batches;
    uint64_t last_heard_ns;
    uint64_t stat_batches, stat_samples, stat_released, stat_bad, stat_wait_ns, stat_epochs;
    uint64_t waiting_since; /* when the caller's next() began waiting, 0 when not in next */
    int held_count;

    struct tsock_frame frame; /* service thread's receive buffer */
};

/* consumer_session.c */
int tsock__session_open(tsock_consumer *c, int timeout_ms);
int tsock__session_reopen(tsock_consumer *c, int timeout_ms);
void tsock__session_close(tsock_consumer *c);
void tsock__session_free_mappings(tsock_consumer *c);

/* consumer.c, called by the session side with mu held */
void tsock__unref_slot(tsock_consumer *c, uint32_t slot);
void tsock__drop_queue(tsock_consumer *c);
/* Time blocked in next so far, including a wait in progress, so that a consumer starved right
 * now shows it before its call returns. */
uint64_t tsock__consumer_wait_ns(const tsock_consumer *c, uint64_t now);

/* consumer_device.c: GPU rings on the consumer side (mu held unless said otherwise). */
int tsock__device_open_ring(tsock_consumer *c, const struct tsock_msg_welcome *w);
/* Service thread: finishes the stream-ordered releases whose fences have passed. Returns how
 * many are still pending. */
int tsock__device_poll_releases(tsock_consumer *c);
/* Closes the GPU ring of a session that ended (producer gone or stream over) once nothing of
 * the caller's refers to it any more, so a dead producer's memory is not kept mapped. */
void tsock__device_close_if_unused(tsock_consumer *c);
/* Moves the session's GPU ring aside on reconnect (closed now if unused, else at destroy). */
void tsock__device_retire_ring(tsock_consumer *c);
/* A gather out of a GPU ring: device buffers, and copies that are complete on return. */
int tsock__device_reserve(tsock_consumer *c, tsock_batch *b, uint32_t tensor, size_t need);
int tsock__device_gather(tsock_consumer *c, tsock_batch *b, uint32_t slot, uint32_t sample,
                         uint32_t count);
/* Release on a stream: takes the batch off the caller (held already checked). */
int tsock__device_release(tsock_consumer *c, tsock_batch *b, void *stream);
/* Destroy: device buffers, fences, and every GPU ring still open (mu not needed). */
void tsock__device_free_all(tsock_consumer *c);

#endif
