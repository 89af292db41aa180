/* The consumer's state. Its files call each other in one direction only:
 *
 *   consumer_api.c      the public calls: options, start, next, release, figures, destroy
 *     -> consumer_read.c     cutting the queue of producer batches into this consumer's
 *                            batches and epochs (views and gathers)
 *     -> consumer_session.c  opening, closing and reopening the session (channel, thread)
 *          -> consumer_service.c  the channel's handlers and the service thread
 *     -> consumer_slots.c    slot references, the release queue, fenced releases, views of
 *                            rings (the lowest layer; everyone above uses it)
 *   consumer_resume.c   saving and restoring the position: the sample ids of each announced
 *                       batch, the delivered set, and the restored epoch's filter (called by
 *                       the API, the reader and the service; calls none of them)
 *   consumer_group.c    a rank of a data-parallel group: its setters, its HELLO block, its
 *                       rank plan, the end of its group (called by the API, the reader and the
 *                       service; calls none of them)
 *   consumer_group_resume.c  a rank's saved position: its group's consumed set, and the
 *                       restored epoch's plan (called by the resume path and the reader;
 *                       calls none of them; saving a rank first asks the reader to read past
 *                       the rest of its group's step)
 *   consumer_leave.c    leaving an epoch early: pausing a consumer that stopped reading,
 *                       re-arming the epoch's filter at RESUMED, tsock_consumer_pause and
 *                       _end_epoch (called by the API, the service and the resume path;
 *                       calls the slots and the group only)
 *   consumer_classes.c  the producer's class names from WELCOME (calls nothing)
 *   batch.c             the public tsock_batch accessors
 *
 * Two threads touch a consumer: the caller's (next, release) and the service thread, which
 * runs the channel. What they share is guarded by `mu`; the caller wakes the service thread
 * through the channel, the service thread wakes the caller through `cond`. */
#ifndef TSOCK_CONSUMER_INTERNAL_H
#define TSOCK_CONSUMER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/core.h"
#include "dataset/groups.h"
#include "proto/proto.h"
#include "ring/epoch_plan.h"
#include "ring/hold_table.h"
#include "ring/resume_state.h"
#include "transport/channel.h"

struct tsock_batch {
    tsock_consumer *owner;
    int held;
    int view;            /* points into a slot (else into gather[]) */
    uint32_t view_slot;  /* the slot a view references */
    uint64_t view_seq;   /* and the publication of it */
    uint64_t generation; /* the session the view's slot belongs to */
    uint32_t samples;
    uint64_t seq, epoch, index;
    int epoch_end;
    int free_end; /* its last sample ends a producer epoch (free mode) */
    const uint8_t *data[TSOCK_MAX_TENSORS];
    int device;                    /* CUDA device of the batch's data (-1: host memory) */
    struct tsock__ring_view *ring; /* a view's ring (open while the view is held) */
    /* The batch's own buffers, from `gather_ops` on `gather_device` (a gather). */
    const struct tsock__backend *gather_ops;
    int gather_device;
    uint8_t *gather[TSOCK_MAX_TENSORS];
    size_t gather_cap[TSOCK_MAX_TENSORS];
    /* A stream-ordered release: the fence, from `fence_ops` on `fence_device`. */
    const struct tsock__backend *fence_ops;
    void *fence;
    int fence_device;
    tsock_batch *next_free;     /* free list */
    tsock_batch *next_all;      /* every batch object, for validation and cleanup */
    tsock_batch *next_deferred; /* released on a stream, waiting for its fence */
};

/* Where the consumer stands with the producer's stream. */
enum tsock__consumer_phase {
    TSOCK__PHASE_ACTIVE,  /* given every batch */
    TSOCK__PHASE_PAUSED,  /* between epochs past the grace period: given nothing */
    TSOCK__PHASE_RESUMING /* asked to come back; batches before RESUMED are not ours */
};

#define TSOCK__MAX_OLD_RINGS 8
#define TSOCK__ANY_POSITION UINT64_MAX

/* A checkpointing consumer's resume state (consumer_resume.c, and for a rank
 * consumer_group_resume.c): the ids of each announced batch, the set delivered in the current
 * epoch, and a restored state being applied. */
struct tsock__consumer_resume {
    uint32_t *slot_ids;    /* per slot, the ids of the batch announced in it */
    uint32_t slot_ids_cap; /* ids per slot: the WELCOME's batch size */
    uint8_t *delivered;    /* bitmap of the ids next returned in epoch `delivered_epoch` (a
                              rank: the set U of ids its group consumed in the group epoch) */
    uint64_t delivered_n;  /* its samples (bits) */
    uint64_t delivered_epoch;
    uint32_t *taken; /* ids of the batch being built, not yet returned */
    uint32_t taken_n, taken_cap;
    int restored; /* 1: a state waits for the first WELCOME; 2: applied */
    struct tsock__resume_state restore;
    uint32_t *restore_ids; /* its delivered ids, sorted */
    int resuming;          /* in the restored epoch's window: saved ids are skipped */
    uint64_t window_left;  /* stream samples of that window not passed yet */
};

/* A rank of a data-parallel group (consumer_group.c; its saved position:
 * consumer_group_resume.c; its reading: the rank half of consumer_read.c). */
struct tsock__consumer_group {
    char name[TSOCK__GROUP_NAME_MAX + 1]; /* "": not a rank */
    uint32_t rank, world, timeout_ms;
    struct tsock__rank_plan plan; /* dataset/groups.h: the rank's batches in its window */
    uint64_t *positions;          /* the batch being built's window positions */
    uint64_t *scan_positions;     /* the service thread's (next_needed, consumer_read.c) */
    /* Views a rank may hold at once: floor((slots - 1) / local ranks), so that its node's ranks
     * together always leave the producer a slot to fill; beyond it a rank's batch is copied
     * out of the ring (a gather), which holds no slot. 0 with slots <= local ranks. */
    uint32_t view_budget;
    uint64_t pos;      /* window position of the queue's head in the current group epoch */
    int skip_rest;     /* the epoch's last batch went out: skip to the window's end */
    int pad_done;      /* the padding sample of the batch being built is copied */
    char failure[320]; /* why the group is over, logged when next() first reports it */
    int failure_logged;
    /* Its saved position: resume.delivered is the set U of ids its group consumed in the group
     * epoch; ids read ahead of the group's step wait here. */
    uint64_t consumed; /* |U| */
    uint32_t *ahead;   /* ids passed at or past the group's step */
    uint32_t ahead_n, ahead_cap;
    int save_error;                    /* a failed allocation: saving fails with it */
    uint64_t restore_fp;               /* the restored state's fingerprint (HELLO) */
    struct tsock__rank_plan full_plan; /* the normal epochs' plan */
    uint64_t index_base;               /* batches of the restored epoch before the restore */
    int filtering; /* in the restored window: ids of U are skipped (window_left counts) */
};

struct tsock_consumer {
    char endpoint[TSOCK__ENDPOINT_MAX];
    char name[TSOCK_MAX_NAME + 1];
    int hb_interval_ms, hb_timeout_ms;
    uint32_t batch_size;
    int drop_last, grace_ms, reconnect_ms;
    int device; /* tsock_consumer_set_device */
    int started;

    struct tsock__channel *channel;
    struct tsock__channel_security security; /* tsock_consumer_set_curve */
    pthread_t thread;
    int thread_started;

    /* Shared between the caller's thread and the service thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int stop_thread;
    int welcomed;
    int ready_to_read;
    int start_error;                   /* why the handshake failed */
    int terminal_error;                /* once set, next returns it after the queue drains */
    uint64_t generation;               /* sessions opened so far: a reconnect starts a new one */
    struct tsock__msg_welcome welcome; /* attach points into `attach` below */
    uint8_t *attach;                   /* the session's attach blob, kept */
    const struct tsock__backend *ops;  /* the session's backend, from WELCOME */
    struct tsock__ring_view *ring;     /* the session's ring */
    const uint8_t *ring_base;          /* its first byte (host or device); NULL until attached */
    /* The session's ring was given up (closed, or retired on reconnect): a BATCH for it is
     * released at once. Not set while the caller is still attaching it. */
    int ring_closed;
    /* Rings of earlier sessions that held batches still point into: each is detached when its
     * last user (a held view, or a release whose fence has not passed) goes. */
    struct tsock__old_ring {
        struct tsock__ring_view *ring;
        int users;
    } old_rings[TSOCK__MAX_OLD_RINGS];
    int old_ring_count;
    int bye_sent;  /* the session's BYE went out (its ring was given up before destroy) */
    int gathering; /* the caller copies out of the ring without mu (consumer_read.c) */
    /* A gather gave up waiting for its copies (next's deadline, the session's end, an error):
     * they may still read the ring, so no release goes out and the ring stays mapped until
     * the service thread sees them complete (issue 20). */
    int gather_pending;
    uint64_t read_deadline; /* the deadline of the next call in progress (gathers poll to it) */
    tsock_batch *deferred;  /* released on a stream, fence not yet passed */
    int deferred_count;
    /* The producer batches announced to this session, the views into them, and the releases
     * owed (ring/hold_table.h). */
    struct tsock__hold_table holds;
    uint64_t expect_position; /* stream position the next BATCH must start at */
    enum tsock__consumer_phase phase;
    int resume_sent;
    int between_epochs; /* the caller has the last batch of an epoch */
    uint64_t epoch_ended_ns;
    struct tsock__epoch_plan plan;
    tsock_batch *building; /* the batch being gathered */
    tsock_batch *free_batches, *all_batches;
    uint64_t stat_batches, stat_samples, stat_released, stat_bad, stat_wait_ns, stat_epochs;
    uint64_t waiting_since; /* when the caller's next() began waiting, 0 when not in next */
    uint64_t stream_epochs; /* epochs the producer served, from its SHUTDOWN END */
    /* The producer's class names (consumer_classes.c), from the last WELCOME. */
    char *class_blob;
    const char **class_names;
    uint32_t class_count;
    int held_count;
    int held_views; /* of those, views: each keeps a slot of the ring */

    /* tsock_consumer_cancel, from any thread or a signal handler, so no lock: the flag, set
     * until the start or next it stops consumes it, and the channel whose eventfd wakes the
     * service thread, which then wakes the caller through `cond` (a signal handler may not
     * touch a condition variable). NULL until the channel exists. */
    atomic_int cancel;
    struct tsock__channel *_Atomic cancel_channel;
    /* Saving and restoring the position: a setting, and the state it needs (consumer_resume.c;
     * untouched by a consumer that does not checkpoint). */
    int checkpointing; /* HELLO asks for sample ids; save_state works */
    struct tsock__consumer_resume resume;
    /* A rank of a data-parallel group: its state (consumer_group.c); group.name[0] == 0: not
     * one, and the read path never looks further. */
    struct tsock__consumer_group group;

    /* Leaving an epoch early (consumer_leave.c). */
    int leave_ids;       /* ids asked for (HELLO IDS_IF_ABLE) and sent: mid-epoch pauses work */
    int pause_unsent;    /* paused by the caller: the service thread sends PAUSE */
    int left_mid_epoch;  /* paused inside an epoch: RESUMED arms the epoch's filter */
    int pause_unacked;   /* PAUSE sent, PAUSED not yet received: the queue is kept till then */
    uint64_t epoch_base; /* plan.epoch when this session began (tsock__leave_epochs_done) */
    uint64_t leave_returned_ns; /* when next last returned a batch (0: none in this epoch) */
    uint64_t leave_step_max_ns; /* the slowest step so far, halved at each epoch end */
    uint64_t idle_since_ns;     /* when next last returned (or start): for a job not reading */
};

/* ---- consumer_slots.c (mu held) ---- */

/* Takes n samples from the head of the announced queue (`view`: b points into its slot and
 * keeps a reference to it). A batch fully taken leaves the queue; a slot nobody refers to any
 * more is released, and the service thread is woken to say so. */
void tsock__consumer_take(tsock_consumer *c, uint32_t n, int view);
/* Gives back everything announced and not yet taken. */
void tsock__consumer_drop_queue(tsock_consumer *c);
/* A released batch whose fence has passed: its slot reference goes, the object is free. */
void tsock__consumer_finish_release(tsock_consumer *c, tsock_batch *b);
/* Frees a batch's own (gather) buffers, wherever they are. */
void tsock__consumer_free_gathers(tsock_batch *b);
/* Finishes the fenced releases whose fences have passed. Returns how many still wait. */
int tsock__consumer_poll_fences(tsock_consumer *c);
/* The caller holds a batch that points into the session's ring, a release of one waits for
 * its fence, or the caller is copying out of it. */
int tsock__consumer_ring_in_use(const tsock_consumer *c);
/* Closes the ring of a session that ended (producer gone, stopped, or stream over) once
 * nothing of the caller's refers to it, so a producer's memory is not kept mapped. Returns 1
 * when it closed the ring now. */
int tsock__consumer_close_ring_if_unused(tsock_consumer *c);
/* Moves the session's ring aside on reconnect: detached now if unused, else when its last
 * user goes. Returns 0, or -EBUSY (logged) when TSOCK__MAX_OLD_RINGS rings of earlier
 * sessions are still in use: nothing changed then. */
int tsock__consumer_retire_ring(tsock_consumer *c);
/* Time blocked in next so far, including a wait in progress, so that a consumer starved right
 * now shows it before its call returns. */
uint64_t tsock__consumer_wait_ns(const tsock_consumer *c, uint64_t now);

/* Whether a cancel is pending (any thread, no lock needed). */
int tsock__consumer_cancelled(tsock_consumer *c);

/* ---- consumer_service.c ---- */

/* Starts the service thread on c->channel (connected). Returns 0 or a negative code. */
int tsock__consumer_service_start(tsock_consumer *c);
/* Stops it (BYE goes out unless the producer was lost). */
void tsock__consumer_service_stop(tsock_consumer *c);
/* The channel's handlers for a consumer. */
void tsock__consumer_handlers(tsock_consumer *c, struct tsock__channel_handlers *h);

/* ---- consumer_session.c ---- */

/* Connects, starts the service thread and waits for WELCOME. */
int tsock__session_open(tsock_consumer *c, int timeout_ms);
/* After the producer was lost: a fresh session with the producer that replaced it. */
int tsock__session_reopen(tsock_consumer *c, int timeout_ms);
/* Stops the service thread and closes the channel. */
void tsock__session_close(tsock_consumer *c);
/* A start that failed: stops the service thread and drops whatever the socket still queues (a
 * HELLO for a producer that is not there yet), so the handle joins no producer later. */
void tsock__session_abandon(tsock_consumer *c);
/* Destroy: every ring, gather buffer and fence still there (mu not needed). */
void tsock__session_free(tsock_consumer *c);

/* ---- consumer_resume.c (mu held unless said) ----
 * The hooks of a checkpointing consumer: the reader and the service thread call the ones on
 * a batch's path (on_welcome, on_batch, usable, begin, note_taken, note_delivered) only when
 * c->checkpointing is set, so a plain consumer's read path never enters this file. */

/* Service thread, at WELCOME: checks a restored state against the producer (dataset size,
 * layout, batch size, sampler) and sizes the per-slot ids. Returns 0 or a negative code,
 * having logged why. */
int tsock__resume_on_welcome(tsock_consumer *c, const struct tsock__msg_welcome *w);
/* Service thread, for a BATCH before it is announced: 0, or -1 when a consumer that keeps ids
 * got none or ids outside the dataset (a protocol error: the batch is not announced). */
int tsock__resume_check_batch(const tsock_consumer *c, const struct tsock__msg_batch *b);
/* Service thread, for an announced (checked) BATCH: keeps its sample ids. */
void tsock__resume_on_batch(tsock_consumer *c, const struct tsock__msg_batch *b);
/* Caller's thread, at start once the epoch plan exists: puts the plan where the restored
 * state left off. */
void tsock__resume_start(tsock_consumer *c);
/* How many samples, up to max, the next batch may take from the head of the queue in one
 * piece: in the restored epoch's window, saved ids at the head are discarded first and the run
 * stops at the next saved id. 0 when the queue ran out. */
uint32_t tsock__resume_usable(tsock_consumer *c, uint32_t max);
/* A batch begins; n samples of head batch h from `offset` go into it. */
void tsock__resume_begin(tsock_consumer *c);
void tsock__resume_note_taken(tsock_consumer *c, const struct tsock__hold_batch *h, uint32_t offset,
                              uint32_t n);
/* Batch b was handed to the caller (the plan has advanced). */
void tsock__resume_note_delivered(tsock_consumer *c, const tsock_batch *b);
/* tsock_consumer_save_state's work, mu held (a rank has settled its group's step first). */
int tsock__resume_save(tsock_consumer *c, void *buf, size_t cap, size_t *len);
/* Destroy: what the above allocated. */
void tsock__resume_free(tsock_consumer *c);

/* ---- consumer_group.c ---- */

/* Whether the consumer is a rank of a group: the one test the read path and the service make
 * before anything of a rank's (inline: it is on every batch's path). */
static inline int
tsock__group_member(const tsock_consumer *c)
{
    return c->group.name[0] != '\0';
}
/* Service thread: the group block of the HELLO. */
void tsock__group_fill_hello(const tsock_consumer *c, struct tsock__msg_hello *h);
/* Caller's thread, at start, once welcomed: the rank's plan and its epochs (c->plan). Returns
 * 0 or a negative code, logged. */
int tsock__group_start(tsock_consumer *c);
/* A fresh window (start, or a new session after a reconnect): the next batch is the first of
 * a group epoch. */
void tsock__group_reset(tsock_consumer *c);
/* Service thread, at GROUP_FAILED: keeps the sentence saying what happened. Returns the code
 * next() reports. */
int tsock__group_on_failed(tsock_consumer *c, const struct tsock__msg_group_failed *g);
/* Caller's thread (mu held): next() returns `err`; the first time it is the group's end, the
 * sentence is logged (not before: a rank that finished its epochs and never calls next again
 * has nothing to report when the group's other ranks leave). */
void tsock__group_report(tsock_consumer *c, int err);
/* Destroy. */
void tsock__group_free(tsock_consumer *c);

/* ---- consumer_group_resume.c (mu held unless said) ---- */

/* Reader: n samples with these ids are passed (taken or discarded) at the group epoch's
 * positions group_pos .. group_pos + n - 1; they join the group's consumed set. */
void tsock__group_note_passed(tsock_consumer *c, const uint32_t *ids, uint32_t n);
/* Reader, in a restored window: whether `id` was consumed before the restore (skip it). */
int tsock__group_saved(const tsock_consumer *c, uint32_t id);
/* The position the rank must have read past before its state is complete. */
uint64_t tsock__group_saved_to(const tsock_consumer *c);
/* Batch b was handed to the caller. */
void tsock__group_note_delivered(tsock_consumer *c, const tsock_batch *b);
/* The restored window has passed entirely (reader): normal windows from now on. */
void tsock__group_window_done(tsock_consumer *c);
/* Caller's thread at start, after tsock__group_start: applies a restored state. */
void tsock__group_resume_start(tsock_consumer *c);
/* Service thread at WELCOME: a restored state fits this rank and its producer's node. Returns
 * 0 or TSOCK_E_BAD_STATE, logged. */
int tsock__group_check_restored(const tsock_consumer *c, const struct tsock__msg_welcome *w);
/* The state to save (every field but the layout). Returns 0 or a negative code. */
int tsock__group_describe(tsock_consumer *c, struct tsock__resume_state *s);
/* Destroy. */
void tsock__group_resume_free(tsock_consumer *c);

/* ---- consumer_classes.c (mu held) ---- */

/* Service thread, at WELCOME: keeps its class names. Returns 0 or -ENOMEM. */
int tsock__classes_keep(tsock_consumer *c, const struct tsock__msg_welcome *w);
/* Destroy (or a new WELCOME): frees them. */
void tsock__classes_free(tsock_consumer *c);

/* ---- consumer_leave.c (mu held) ---- */

/* Service thread, for the HELLO: ask the producer for sample ids if it can send them. */
int tsock__leave_wants_ids(const tsock_consumer *c);
/* Service thread, at WELCOME: whether this producer sends ids (c->leave_ids). */
int tsock__leave_on_welcome(tsock_consumer *c, const struct tsock__msg_welcome *w);
/* The consumer keeps the sample ids of its batches (checkpointing, or for leaving early);
 * inline: it is on every batch's path, and a consumer that does neither goes no further. */
static inline int
tsock__ids_tracked(const tsock_consumer *c)
{
    return c->checkpointing || c->leave_ids;
}
/* Service thread: whether the caller stopped reading mid-epoch and the consumer should pause
 * now; tsock__leave_paused then records the pause. (tsock_consumer_pause and
 * tsock_consumer_end_epoch pause on the caller's thread and set pause_unsent.) */
int tsock__leave_due(const tsock_consumer *c, uint64_t now);
void tsock__leave_paused(tsock_consumer *c);
/* Service thread: whether a consumer that has read nothing of its epoch yet (after start, or
 * after a pause) has not called next for the epoch grace: it pauses as between epochs. */
int tsock__leave_unread_due(const tsock_consumer *c, uint64_t now);
/* Service thread: milliseconds until tsock__leave_due or _unread_due may hold (-1: not while
 * things stay). */
int tsock__leave_wait_ms(const tsock_consumer *c, uint64_t now);
/* The epochs the consumer finished, or gave up (tsock_consumer_end_epoch), in this session:
 * PAUSE and RESUME carry it, so that a finite stream owes it the rest of the epochs its join
 * gave it (a pause must not cost one). mu held, or the service thread. */
uint64_t tsock__leave_epochs_done(const tsock_consumer *c);
/* Where this session's count starts: after start (and a restored position), and after a
 * reconnect has cut the epoch. mu held. */
void tsock__leave_on_session(tsock_consumer *c);
/* mu held: the consumer pauses (phase PAUSED); its queue stays until the producer answers
 * PAUSED. */
void tsock__leave_pausing(tsock_consumer *c);
/* Service thread, at PAUSED: the pause holds; what is queued goes back. */
void tsock__leave_on_paused(tsock_consumer *c);
/* Service thread, at SHUTDOWN END: a pause the producer did not answer never happened (it had
 * decided the end first); the queue, the stream's last batches, is read as before. */
void tsock__leave_on_end(tsock_consumer *c);
/* Service thread, at RESUMED: a consumer paused mid-epoch takes the rest of that epoch. */
void tsock__leave_on_resumed(tsock_consumer *c);
/* Caller's thread, in next: its call, and the batch it returns (NULL: none). */
void tsock__leave_note_call(tsock_consumer *c, uint64_t now);
void tsock__leave_note_return(tsock_consumer *c, const tsock_batch *b, uint64_t now);

/* ---- consumer_read.c (mu held) ---- */

/* A rank about to save: reads past the rest of its group's step (other ranks' blocks of the
 * group batch its caller has, whose ids complete the group's consumed set), waiting for them
 * as needed. Returns 0, the consumer's terminal error, or TSOCK_E_CANCELLED. */
int tsock__consumer_group_settle(tsock_consumer *c);

/* Service thread, a rank's BATCH queued: the other ranks' blocks at the head of the queue,
 * up to the next position this rank needs, are passed now, so their slots go back on receipt
 * rather than when the rank next reads (docs/distributed.md, "Ranks and the ring"). */
void tsock__consumer_group_pass_others(tsock_consumer *c);

/* Waits for the consumer's next batch until `deadline`. */
int tsock__consumer_wait_batch(tsock_consumer *c, uint64_t deadline, tsock_batch **batch);
/* Leaving the pause or the grace period: the caller wants its next epoch. */
void tsock__consumer_start_next_epoch(tsock_consumer *c);
/* Returns a batch object to the free list. */
void tsock__consumer_recycle(tsock_consumer *c, tsock_batch *b);

#endif
