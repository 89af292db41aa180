/* A client's view of its failed security handshakes, from a ZeroMQ socket monitor (see
 * curve.h): without it a refused key looks like a producer that never answers. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "core/core.h"
#include "transport/curve.h"

#define WATCH_EVENTS                                                                               \
    (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |                       \
     ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)

void *
tsock__handshake_watch_open(void *zctx, void *sock)
{
    /* One name per monitored socket: a reconnect monitors its new socket beside the old
     * monitor's endpoint, which lives until the context ends. */
    static unsigned counter;
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "inproc://tsock.handshake.%p.%u", sock,
             __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    if (zmq_socket_monitor(sock, endpoint, WATCH_EVENTS) != 0)
        return NULL;
    void *watch = zmq_socket(zctx, ZMQ_PAIR);
    if (watch && zmq_connect(watch, endpoint) != 0) {
        zmq_close(watch);
        watch = NULL;
    }
    return watch;
}

/* Whether an event says the peer refused our security, as opposed to a network mishap. */
static int
is_security_failure(uint16_t event, uint32_t value, int curve)
{
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
        return 1;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
        return curve || value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH;
    return curve && event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
}

int
tsock__handshake_watch_read(void *watch, int curve)
{
    int result = 0;
    uint8_t head[6];
    /* An event is two frames: u16 event and u32 value (native order), then the endpoint. */
    while (zmq_recv(watch, head, sizeof head, ZMQ_DONTWAIT) == (int)sizeof head) {
        char address[256];
        int n = zmq_recv(watch, address, sizeof address - 1, 0);
        address[n < 0 ? 0 : (n < (int)sizeof address ? n : (int)sizeof address - 1)] = '\0';
        uint16_t event;
        uint32_t value;
        memcpy(&event, head, sizeof event);
        memcpy(&value, head + 2, sizeof value);
        if (!is_security_failure(event, value, curve))
            continue;
        tsock__log(TSOCK_LOG_ERROR,
                   "%s refused the security handshake (event 0x%x, detail 0x%x): %s", address,
                   (unsigned)event, (unsigned)value,
                   curve ? "is this client's public key in the producer's authorized keys, "
                           "and is the server key the producer's?"
                         : "the producer requires CURVE keys, or it serves ipc and admits only "
                           "its own user and root");
        result = TSOCK_E_AUTH;
    }
    return result;
}
