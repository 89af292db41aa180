/* The channel's socket-level plumbing, private to transport/: endpoints, sockets, sending and
 * receiving whole frames, and the eventfd that wakes a thread blocked in zmq_poll. The engines
 * use channel.h instead. Knows ZeroMQ and proto/, nothing about slots. */
#ifndef TSOCK_TRANSPORT_H
#define TSOCK_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/proto.h"
#include "transport/channel.h"

#define TSOCK__ROUTING_ID_MAX 255

/* One received message: the routing id (ROUTER side only) and the first payload frame. */
struct tsock__frame {
    uint8_t id[TSOCK__ROUTING_ID_MAX];
    size_t id_len;
    size_t size;
    int parts;     /* payload frames in the message (exactly 1 is valid) */
    int oversized; /* the payload was larger than data[] and was not copied */
    uint8_t data[TSOCK__PROTO_MAX_MESSAGE];
};

/* The path of an "ipc://" endpoint, or NULL for any other transport. */
const char *tsock__ipc_path(const char *endpoint);

/* Prepares an ipc path for binding: fails with TSOCK_E_BUSY_ENDPOINT when a live process
 * accepts connections there, removes a stale socket file a dead producer left. */
int tsock__ipc_claim(const char *path);

/* CURVE keys of one socket, Z85 text; NULL pointers for a socket without CURVE. A server sets
 * only `secret`; a client sets all three. */
struct tsock__socket_curve {
    const char *secret;
    const char *public_key;
    const char *server_key;
};

/* The producer's sockets. Both return a socket or NULL with *err set to a negated errno.
 * `curve` may be NULL (no CURVE). `zap` on a ROUTER without CURVE: libzmq asks the context's ZAP
 * handler about every NULL handshake too (the ipc user check, curve.h). The DEALER's handshake
 * watch (curve.h) is attached before it connects, since a refused handshake ends the connection for
 * good and its one event would otherwise be lost; *watch is the watch or NULL. */
void *tsock__router_open(void *ctx, const char *endpoint, const struct tsock__socket_curve *curve,
                         int zap, int *err);
void *tsock__dealer_open(void *ctx, const char *endpoint, const struct tsock__socket_curve *curve,
                         void **watch, int *err);

/* Closes a socket, letting queued messages go out for at most `linger_ms`. */
void tsock__socket_close(void *sock, int linger_ms);

/* Encodes and sends one message, prefixed by a routing id when id != NULL. Never blocks.
 * Returns 0, -EHOSTUNREACH (unknown or vanished peer), -EAGAIN (peer's queue full), or another
 * negated errno. */
int tsock__send(void *sock, const uint8_t *id, size_t id_len, const struct tsock__msg *msg);

/* Sends one frame already encoded (a STATS_REPLY), as tsock__send does. */
int tsock__send_frame(void *sock, const uint8_t *id, size_t id_len, const uint8_t *frame, size_t n);

/* Receives one whole message without blocking. Returns 1 when *f holds one, 0 when nothing
 * is waiting, or a negated errno. `routed`: the socket prefixes a routing id (ROUTER). */
int tsock__recv(void *sock, int routed, struct tsock__frame *f);

/* An eventfd an API thread signals to wake a service thread out of zmq_poll. */
int tsock__wake_open(void);
void tsock__wake_signal(int fd);
void tsock__wake_drain(int fd);

#endif
