/* The producer's state, shared by its API half (producer.c: options, start, slots, publish),
 * its service half (producer_service.c: the channel's handlers) and its figures
 * (producer_stats.c). Two threads touch a producer: the caller's, which acquires, fills and
 * publishes slots, and the service thread, which runs the channel. What they share is
 * guarded by `mu`; the caller wakes the service thread through the channel, and the service
 * thread wakes the caller (waiting for a free slot or for consumers) through `cond`. */
#ifndef TSOCK_PRODUCER_INTERNAL_H
#define TSOCK_PRODUCER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/core.h"
#include "dataset/groups.h"
#include "dataset/sampler.h"
#include "proto/proto.h"
#include "ring/ring.h"
#include "transport/channel.h"

#define TSOCK__PRODUCER_MAX_CONSUMERS TSOCK__RING_MAX_CONSUMERS
_Static_assert(TSOCK__PRODUCER_MAX_CONSUMERS <= TSOCK__STATS_MAX_CONSUMERS,
               "a STATS_REPLY lists every consumer");
_Static_assert(TSOCK__PRODUCER_MAX_CONSUMERS <= TSOCK__CHANNEL_MAX_PEERS,
               "the channel watches every consumer");

/* A consumer's window has not started: it joined or resumed and got no batch yet. */
#define TSOCK__NO_WINDOW UINT64_MAX

/* One consumer, at the index the ring and the channel know it by. */
struct tsock__consumer_rec {
    int active;
    struct tsock__peer_id peer;
    uint64_t consumer_id;
    uint64_t join_order;
    uint32_t pid;
    char name[TSOCK_MAX_NAME + 1];
    uint64_t batches, samples, released;
    int paused;            /* between epochs or mid-epoch: not given new batches */
    int want_ids;          /* its BATCHes carry their sample ids (a checkpointable consumer) */
    uint64_t window_start; /* stream position of its current window, or TSOCK__NO_WINDOW */
    /* For a finite stream's end (producer_api.c, epochs_owed): where its first window started
     * (TSOCK__NO_WINDOW before its first batch), and the epochs it finished (or gave up), as
     * its last PAUSE or RESUME said. */
    uint64_t first_window;
    uint64_t epochs_done;
    uint64_t rate_mark_ns, rate_mark_released; /* start of the current rate window */
    uint64_t rate_milli;                       /* released per second x 1000, last window */
    int reported;                              /* `own` holds a CONSUMER_STATS */
    struct tsock__msg_consumer_stats own;
    /* Dropped because a send failed, not yet counted as lost: a consumer that says BYE and
     * closes its socket can make a send fail before its BYE, already queued, is read. The
     * verdict waits for the end of the pass over the socket (producer_service.c). */
    int unreachable;
    /* A rank of a data-parallel group (producer_groups.c): group_slot is 1 + its index in
     * p->groups (0: no group); `waiting` until every rank joined (the start barrier: it gets
     * no batch); `group_failed` once its group is over (GROUP_FAILED sent: it gets no batch
     * any more, and gives back what it holds as it reads its release queue). */
    int group_slot;
    uint32_t rank;
    int waiting;
    int group_failed;
};

/* One group's record on this producer (producer_groups.c). */
struct tsock__pgroup {
    struct tsock__group g; /* dataset/groups.h: members by local rank, peer = index + 1 */
    uint32_t timeout_ms;   /* its first rank's group timeout */
    uint64_t deadline_ns;  /* when it fails if still incomplete */
    int started;           /* every rank joined: its window runs */
};

/* A published slot waiting for the service thread to announce it. */
struct tsock__outgoing {
    uint64_t holders;
    struct tsock__msg_batch batch;
};

/* The slot the caller is filling (the public tsock_slot). */
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

enum tsock__producer_state {
    TSOCK__P_CREATED,
    TSOCK__P_RUNNING,
    TSOCK__P_FINISHED,
    TSOCK__P_STOPPED
};

struct tsock_producer {
    char endpoint[TSOCK__ENDPOINT_MAX];
    tsock_layout layout; /* as the caller fills a slot */
    size_t offsets[TSOCK_MAX_TENSORS];
    size_t slot_stride;
    int device; /* CUDA device of the ring, or -1 for host shared memory */
    struct tsock__convert_request convert;
    struct tsock__ring_shape shape; /* as consumers see a slot */
    struct tsock__slot_memory *memory;
    uint32_t batch_size, slot_count;
    int hb_interval_ms, hb_timeout_ms;

    int use_sampler;
    uint64_t sampler_samples, sampler_seed, sampler_epochs;
    struct tsock__sampler sampler;
    /* The sampler's last epoch was issued inside a consumer's window: the next epoch's first
     * samples finish the windows that the stream's end (stream_end, a stream position) cut,
     * for their consumers only (producer_api.c, plan_slot). */
    int overtime;
    uint64_t stream_end;
    /* The stream's end is decided (acquire returned TSOCK_E_END; mu): a PAUSE that comes now is
     * ignored, unanswered, so that its consumer keeps the stream's last batches. */
    int end_decided;
    /* slot_count * batch_size ids the sampler drew: sample ids, or with node shares positions
     * in this node's share. BATCH carries these to checkpointing consumers (each below
     * WELCOME's samples), so their saved states are over what this producer serves. */
    uint64_t *slot_ids;
    /* Several nodes (producer_nodes.c): the sampler runs over node_share's sampler_samples
     * entries, this node's share of dataset_samples; slot_dataset_ids holds what the slots'
     * sampler ids map to, which tsock_slot_sample_ids gives the application. */
    uint32_t nodes, node_rank;
    uint64_t dataset_samples;
    uint64_t *node_share; /* NULL on one node */
    /* Shard order (producer_shards.c): NULL for plain permutations. */
    uint64_t *shard_starts;
    uint32_t shards, shard_window;
    /* tsock_producer_set_classes: the WELCOME's class block (producer_classes.c). */
    uint8_t *classes;
    uint32_t classes_len;
    uint64_t *slot_dataset_ids; /* NULL on one node; laid out as slot_ids */
    uint8_t *ids_wire;          /* one batch's ids as BATCH carries them (service thread's) */
    struct tsock_slot current;
    int filling;
    uint64_t free_position; /* free mode: samples published so far */

    struct tsock__channel *channel;
    /* tsock_producer_cancel, from any thread or a signal handler, so no lock: the flag, set
     * until the wait it stops consumes it, and the channel to wake (NULL before start); the
     * service thread passes the wake-up on to the caller through `cond`. */
    atomic_int cancel;
    struct tsock__channel *_Atomic cancel_channel;
    struct tsock__channel_security security; /* tsock_producer_set_curve, _set_insecure */
    pthread_t thread;
    int thread_started;

    /* Shared between the caller's thread and the service thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    enum tsock__producer_state state;
    int stop_thread;
    int shutdown_sent;
    struct tsock__ring ring;
    struct tsock__consumer_rec consumers[TSOCK__PRODUCER_MAX_CONSUMERS];
    /* Groups, each with at least one member (so at most one per consumer); NULL: unused. */
    struct tsock__pgroup *groups[TSOCK__PRODUCER_MAX_CONSUMERS];
    int consumer_count;
    /* The service thread's room for a GROUP_FAILED's rank list (producer_groups.c): each
     * producer's own, as two producers in one process fail their groups concurrently. */
    uint8_t group_failed_wire[4 * TSOCK__PROTO_MAX_GROUP_RANKS];
    uint32_t group_missing[TSOCK__GROUP_MAX_LOCAL];
    uint64_t next_consumer_id;
    struct tsock__outgoing *queue; /* ring buffer of slot_count entries */
    uint32_t queue_head, queue_len;
    int copy_error_told; /* a failed copy was logged (service thread) */
    uint64_t stat_batches, stat_samples, stat_released, stat_joined, stat_lost, stat_bad,
        stat_wait_ns, stat_epochs;
    uint64_t started_ns;
    char status[TSOCK_MAX_STATUS + 1]; /* the application's JSON object, or "" */
    uint64_t stats_window_ns;          /* STATS_REQUEST rate limit: current second */
    int stats_answered;                /* replies sent in it */
    uint64_t stats_dropped;
    struct tsock__stats_reply stats_reply;         /* service thread's, for STATS_REPLY */
    uint8_t stats_frame[TSOCK__PROTO_MAX_MESSAGE]; /* its encoding */
};

/* producer_service.c: the service thread (start: the channel is bound; stop: joined). */
int tsock__producer_service_start(tsock_producer *p);
void tsock__producer_service_stop(tsock_producer *p);

/* producer_groups.c (mu held; service thread). */
/* A HELLO with a group block from the consumer about to take record `index`: checks it and
 * joins the rank (the record's group fields are set; a join that completes the group starts
 * it, its ranks' windows at the next batch). Returns 0 (also for a HELLO without a group), or
 * the REJECT code (TSOCK_E_GROUP_MISMATCH, TSOCK_E_REJECTED, -ENOMEM) with the sentence in
 * why[], the record untouched. */
int tsock__pgroup_admit(tsock_producer *p, int index, const struct tsock__msg_hello *h, char *why,
                        size_t why_size);
/* Consumer `index` left (BYE, lost == 0) or was lost (no heartbeat, unreachable: lost != 0).
 * A rank lost from a running group ends that group: its other ranks get GROUP_FAILED
 * (TSOCK_E_GROUP_LOST) and the group is forgotten. A rank that left, or one of a group still
 * waiting, only leaves it (a group is forgotten with its last rank): ranks finish their last
 * epoch at different times, and the first to leave must not fail the others. */
void tsock__pgroup_leave(tsock_producer *p, int index, int lost);
/* Fails the groups whose timeout passed with ranks missing (GROUP_FAILED,
 * TSOCK_E_GROUP_INCOMPLETE, to each joined rank). Returns the milliseconds until the next
 * deadline, or -1 when no group waits. */
int tsock__pgroup_expire(tsock_producer *p, uint64_t now);
/* Destroy: every group record. */
void tsock__pgroup_free_all(tsock_producer *p);
/* producer_nodes.c: at start, before the ring, this node's share (nothing on one node; -EINVAL
 * and a log line without a sampler or with more nodes than samples); per planned slot, the
 * dataset's ids of its sampler ids (s->ids then points at them); at destroy, the share's memory.
 */
int tsock__producer_nodes_start(tsock_producer *p);
void tsock__producer_nodes_map(tsock_producer *p, struct tsock_slot *s);
void tsock__producer_nodes_free(tsock_producer *p);
/* Hands the shard order to the sampler, in share positions with node shares (after the
 * sampler and the share exist). Returns 0, -EINVAL (logged), -ENOMEM. */
int tsock__producer_shards_start(tsock_producer *p);

/* producer_stats.c (mu held) */
void tsock__producer_snapshot(const tsock_producer *p, struct tsock__stats_producer *s);
void tsock__producer_snapshot_consumer(const tsock_producer *p, int index,
                                       struct tsock__stats_consumer *s);
/* Indices of the active consumers in join order; returns how many. */
int tsock__producer_join_order(const tsock_producer *p, int order[TSOCK__PRODUCER_MAX_CONSUMERS]);

#endif
