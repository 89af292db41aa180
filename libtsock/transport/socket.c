/* Sockets, whole-message send and receive, and the service threads' wake-up fd. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "core/core.h"
#include "transport/curve.h"
#include "transport/transport.h"

static void
set_int(void *sock, int option, int value)
{
    zmq_setsockopt(sock, option, &value, sizeof value);
}

/* Options both ends share: never linger on close by default, drop frames larger than any
 * valid message before they are buffered, and a send queue deep enough that only a stuck
 * peer fills it. */
static void
set_common_options(void *sock)
{
    int64_t max_message = TSOCK__PROTO_MAX_MESSAGE + 64;
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_message, sizeof max_message);
    set_int(sock, ZMQ_LINGER, 0);
    set_int(sock, ZMQ_SNDHWM, 100000);
    set_int(sock, ZMQ_RCVHWM, 100000);
}

/* CURVE must be set before bind or connect: the mechanism is chosen per connection at its
 * start. The server's domain names the ZAP requests it makes, so its handler can tell them
 * apart should the context ever hold other sockets. */
static int
set_curve(void *sock, int server, const struct tsock__socket_curve *curve)
{
    if (!curve)
        return 0;
    int rc = zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, curve->secret, 40);
    if (rc == 0 && server) {
        int on = 1;
        rc = zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &on, sizeof on);
        if (rc == 0)
            rc = zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "tsock", 5);
    } else if (rc == 0) {
        rc = zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, curve->public_key, 40);
        if (rc == 0)
            rc = zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, curve->server_key, 40);
    }
    return rc == 0 ? 0 : -zmq_errno();
}

void *
tsock__router_open(void *ctx, const char *endpoint, const struct tsock__socket_curve *curve,
                   int zap, int *err)
{
    void *sock = zmq_socket(ctx, ZMQ_ROUTER);
    if (!sock) {
        *err = -zmq_errno();
        return NULL;
    }
    set_common_options(sock);
    /* Sending to a vanished consumer must fail loudly, not vanish silently. */
    set_int(sock, ZMQ_ROUTER_MANDATORY, 1);
    *err = set_curve(sock, 1, curve);
    /* Without CURVE, a ZAP domain makes libzmq ask the handler about NULL handshakes too. */
    if (*err == 0 && zap && !curve && zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, "tsock", 5) != 0)
        *err = -zmq_errno();
    if (*err < 0 || zmq_bind(sock, endpoint) != 0) {
        *err = *err < 0 ? *err : -zmq_errno();
        zmq_close(sock);
        return NULL;
    }
    return sock;
}

void *
tsock__dealer_open(void *ctx, const char *endpoint, const struct tsock__socket_curve *curve,
                   void **watch, int *err)
{
    void *sock = zmq_socket(ctx, ZMQ_DEALER);
    if (!sock) {
        *err = -zmq_errno();
        return NULL;
    }
    set_common_options(sock);
    /* Reconnect quickly: a producer restarted on the same endpoint is found within 100 ms. */
    set_int(sock, ZMQ_RECONNECT_IVL, 100);
    *err = set_curve(sock, 0, curve);
    *watch = *err < 0 ? NULL : tsock__handshake_watch_open(ctx, sock);
    if (*err < 0 || zmq_connect(sock, endpoint) != 0) {
        *err = *err < 0 ? *err : -zmq_errno();
        tsock__socket_close(*watch, 0);
        *watch = NULL;
        zmq_close(sock);
        return NULL;
    }
    return sock;
}

void
tsock__socket_close(void *sock, int linger_ms)
{
    if (!sock)
        return;
    set_int(sock, ZMQ_LINGER, linger_ms);
    zmq_close(sock);
}

int
tsock__send_frame(void *sock, const uint8_t *id, size_t id_len, const uint8_t *frame, size_t n)
{
    if (id && zmq_send(sock, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -zmq_errno();
    if (zmq_send(sock, frame, n, ZMQ_DONTWAIT) < 0)
        return -zmq_errno();
    return 0;
}

int
tsock__send(void *sock, const uint8_t *id, size_t id_len, const struct tsock__msg *msg)
{
    uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    int n = tsock__msg_encode(msg, buf, sizeof buf);
    if (n < 0)
        return n;
    return tsock__send_frame(sock, id, id_len, buf, (size_t)n);
}

/* Receives one frame; returns its size, or a negated errno (-EAGAIN: nothing waiting). */
static int
recv_part(void *sock, uint8_t *buf, size_t cap, size_t *size, int *more, int flags)
{
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, sock, flags) < 0) {
        int err = -zmq_errno();
        zmq_msg_close(&part);
        return err;
    }
    *size = zmq_msg_size(&part);
    if (buf && *size <= cap)
        memcpy(buf, zmq_msg_data(&part), *size);
    *more = zmq_msg_more(&part);
    zmq_msg_close(&part);
    return 0;
}

int
tsock__recv(void *sock, int routed, struct tsock__frame *f)
{
    int more = 0, err;
    f->id_len = 0;
    f->size = 0;
    f->parts = 0;
    f->oversized = 0;
    if (routed) {
        err = recv_part(sock, f->id, sizeof f->id, &f->id_len, &more, ZMQ_DONTWAIT);
        if (err < 0)
            return err == -EAGAIN ? 0 : err;
        if (f->id_len > sizeof f->id)
            f->id_len = 0; /* ZeroMQ routing ids are at most 255 bytes; cannot happen */
    } else {
        more = 1;
    }
    /* The rest of a multipart message is already here once its first part is: drain it all,
     * keeping the first payload frame. */
    for (int first = 1; more; first = 0) {
        size_t size = 0; /* set by recv_part on success; GCC -O3 cannot see it */
        err = recv_part(sock, first ? f->data : NULL, sizeof f->data, &size, &more,
                        routed ? 0 : (first ? ZMQ_DONTWAIT : 0));
        if (err < 0)
            return (err == -EAGAIN && first && !routed) ? 0 : err;
        if (first) {
            f->size = size;
            f->oversized = size > sizeof f->data;
        }
        f->parts++;
    }
    return 1;
}

int
tsock__wake_open(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

void
tsock__wake_signal(int fd)
{
    uint64_t one = 1;
    /* A full counter already means "wake up"; a failed write loses nothing. */
    (void)!write(fd, &one, sizeof one);
}

void
tsock__wake_drain(int fd)
{
    uint64_t count;
    (void)!read(fd, &count, sizeof count);
}
