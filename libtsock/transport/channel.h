/* The channel: everything about talking to peers, so that the engines only handle messages.
 *
 * A channel owns one ZeroMQ context and socket (a ROUTER bound by a producer, or a DEALER
 * connected by a consumer or a stats client), the eventfd that wakes its loop, a heartbeat
 * timer and the liveness of the peers it watches. Its owner runs the loop on one service
 * thread:
 *
 *     for (;;) { unlock; tsock__channel_wait(ch, ms); lock; tsock__channel_dispatch(ch); ... }
 *
 * dispatch decodes every waiting frame and calls the handler registered for its type, then,
 * once per heartbeat interval, sends HEARTBEAT to each watched peer, reports the watched peers
 * that fell silent for longer than the timeout, and calls on_beat. Handlers run on the thread
 * that calls dispatch, under whatever lock it holds. Nothing outside transport/ sees ZeroMQ.
 *
 * Peers are named by their routing id (struct tsock__peer_id; empty on a DEALER, whose only
 * peer is the one it connected to). A watched peer also has a small index chosen by the owner
 * (0..TSOCK__CHANNEL_MAX_PEERS-1), which the handlers receive and the sends take.
 */
#ifndef TSOCK_CHANNEL_H
#define TSOCK_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

#define TSOCK__CHANNEL_MAX_PEERS 64
#define TSOCK__PEER_ID_MAX 255
#define TSOCK__ENDPOINT_MAX 512

struct tsock__peer_id {
    uint8_t bytes[TSOCK__PEER_ID_MAX];
    size_t len;
};

struct tsock__channel;

/* A decoded message from `from`; `peer` is its watched index, or -1 when it is not watched. */
typedef void (*tsock__channel_msg_fn)(void *ctx, const struct tsock__peer_id *from, int peer,
                                      const struct tsock__msg *m);

struct tsock__channel_handlers {
    void *ctx; /* passed to every handler */
    /* One per message type; a type without a handler goes to on_unexpected. */
    tsock__channel_msg_fn on[TSOCK__MSG_TYPE_LAST + 1];
    tsock__channel_msg_fn on_unexpected;
    /* A frame that is no valid message (err: TSOCK_E_PROTOCOL or TSOCK_E_VERSION). */
    void (*on_malformed)(void *ctx, const struct tsock__peer_id *from, int peer, size_t size,
                         int parts, int err);
    /* A well-framed STATS_REPLY, which has its own decoder: the raw frame. */
    void (*on_stats_reply)(void *ctx, const uint8_t *frame, size_t size);
    /* Once per heartbeat interval (the first at the first dispatch), after the heartbeats. */
    void (*on_beat)(void *ctx, uint64_t now_ns);
    /* A watched peer was silent for longer than the timeout; it is no longer watched. */
    void (*on_peer_lost)(void *ctx, int peer);
    /* A send the channel made itself (a heartbeat) failed: the peer is gone or stuck. */
    void (*on_send_failed)(void *ctx, int peer, int err);
    /* A DEALER's security handshake failed: the producer refused its CURVE key, expected keys
     * it did not give (or the reverse), or has another server key. err is TSOCK_E_AUTH.
     * ZeroMQ keeps retrying; the owner decides whether that is final. */
    void (*on_handshake_failed)(void *ctx, int err);
};

/* Timing of the heartbeats and of the liveness check, in milliseconds; timeout 0 watches no
 * silence. */
struct tsock__channel_timing {
    int beat_ms;
    int timeout_ms;
};

/* Who may talk to the channel (docs/security.md). Paths to key files, empty when unused; a
 * zeroed struct (or NULL) means no authentication. The channel reads the files when it binds
 * or connects, so a bad file is a start error that the log explains.
 *   bind:    secret_key_file is the producer's secret key; peer_keys the authorized client
 *            keys (a file of keys or a directory of *.key files). Both or neither.
 *   connect: secret_key_file is the client's secret key; peer_keys the producer's public key
 *            file. Both or neither. */
#define TSOCK__KEY_PATH_MAX 1024
struct tsock__channel_security {
    char secret_key_file[TSOCK__KEY_PATH_MAX];
    char peer_keys[TSOCK__KEY_PATH_MAX];
    /* bind without keys: also serve an endpoint that others can reach (any tcp endpoint but
     * exactly one loopback address, an abstract ipc name), otherwise TSOCK_E_INSECURE. */
    int insecure_network;
};

/* Stores two paths into `sec` after checking them: both empty (no CURVE) or both set, each
 * shorter than TSOCK__KEY_PATH_MAX. Then loads the keys once so that a bad file fails now,
 * with its reason logged. `bind`: the producer's side. Returns 0, -EINVAL, -ENAMETOOLONG, or
 * the key file's error (see curve.h). */
int tsock__channel_security_set(struct tsock__channel_security *sec, int bind,
                                const char *secret_key_file, const char *peer_keys);

/* Binds a ROUTER (a producer). An ipc endpoint's stale socket file is replaced, a live one is
 * TSOCK_E_BUSY_ENDPOINT; the file gets mode 0600 and is removed by close if it is still ours.
 * With CURVE keys in `sec`, only clients with an authorized key complete the handshake; the
 * ZAP handler that decides runs inside tsock__channel_dispatch. Without keys, an endpoint that
 * others can reach (tsock__endpoint_exposure) is TSOCK_E_INSECURE unless
 * sec->insecure_network, and an ipc endpoint admits only this user and root (by the peer's
 * SO_PEERCRED user id, through the same ZAP handler). Returns 0 or a negative code. */
int tsock__channel_bind(struct tsock__channel **out, const char *endpoint,
                        const struct tsock__channel_handlers *h, struct tsock__channel_timing t,
                        const struct tsock__channel_security *sec);

/* Connects a DEALER (a consumer, a stats client). ZeroMQ connects in the background and
 * reconnects on its own; nothing waits here. With CURVE keys in `sec`, the connection is
 * authenticated and encrypted; a producer that refuses the key is never heard from. Returns 0
 * or a negative code. */
int tsock__channel_connect(struct tsock__channel **out, const char *endpoint,
                           const struct tsock__channel_handlers *h, struct tsock__channel_timing t,
                           const struct tsock__channel_security *sec);

/* A DEALER's fresh connection to the same endpoint: the old socket is closed (queued messages
 * get `linger_ms` to leave), nothing stays watched, the wake-up and handlers stay. Call it
 * while no thread is in wait or dispatch. Returns 0 or a negative code. */
int tsock__channel_reconnect(struct tsock__channel *ch, int linger_ms);

/* Closes the socket (queued messages get `linger_ms` to leave) and frees the channel. NULL
 * does nothing. */
void tsock__channel_close(struct tsock__channel *ch, int linger_ms);

/* Starts watching a peer under index `peer`: it gets heartbeats and is reported lost when
 * silent. On a DEALER `id` may be NULL (the connected peer). */
void tsock__channel_watch(struct tsock__channel *ch, int peer, const struct tsock__peer_id *id);
void tsock__channel_unwatch(struct tsock__channel *ch, int peer);

/* Sends to a watched peer (on a DEALER, `peer` is ignored: its one peer). Never blocks.
 * Returns 0, -EHOSTUNREACH (the peer's connection is gone), -EAGAIN (its queue is full) or
 * another negative code. */
int tsock__channel_send(struct tsock__channel *ch, int peer, const struct tsock__msg *m);

/* Encodes `m` once and sends it to every watched peer in `peers` (bit i: peer i). Returns the
 * peers whose send failed. */
uint64_t tsock__channel_send_many(struct tsock__channel *ch, uint64_t peers,
                                  const struct tsock__msg *m);

/* Answers any peer, watched or not, best effort (REJECT, WELCOME, STATS_REPLY frames). */
int tsock__channel_reply(struct tsock__channel *ch, const struct tsock__peer_id *to,
                         const struct tsock__msg *m);
int tsock__channel_reply_frame(struct tsock__channel *ch, const struct tsock__peer_id *to,
                               const uint8_t *frame, size_t size);

/* Blocks until a frame arrives, the channel is woken, the next heartbeat is due or `max_ms`
 * passes (-1: no limit but the heartbeat). Call it without holding the lock the handlers
 * need. */
void tsock__channel_wait(struct tsock__channel *ch, int max_ms);

/* Receives and handles every waiting frame, then beats when the interval is over. */
void tsock__channel_dispatch(struct tsock__channel *ch);

/* Wakes a thread in tsock__channel_wait. Any thread; async-signal-safe. */
void tsock__channel_wake(struct tsock__channel *ch);

/* An ipc endpoint's socket file, or NULL for another transport or an abstract socket. */
const char *tsock__channel_ipc_file(const char *endpoint);

#endif
