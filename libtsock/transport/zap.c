/* The ZAP handler: libzmq's handshake asks it whether a client may connect: a CURVE client
 * by its key, a client of an ipc endpoint without CURVE by its user id. See curve.h. It runs
 * on the thread that polls the channel, so it needs no lock of its own: the policy is fixed
 * before the socket is bound and only read afterwards. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "core/core.h"
#include "transport/curve.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_FRAMES 7      /* version, request id, domain, address, identity, mechanism, key */
#define ZAP_NULL_FRAMES 6 /* a NULL request carries no credentials frame */
#define ZAP_FRAME_MAX 256 /* larger frames are not a CURVE request; their size still counts */

struct zap_request {
    uint8_t frame[ZAP_FRAMES][ZAP_FRAME_MAX];
    size_t size[ZAP_FRAMES];
    int parts;
};

void *
tsock__zap_open(void *zctx, int *err)
{
    void *zap = zmq_socket(zctx, ZMQ_REP);
    if (!zap) {
        *err = -zmq_errno();
        return NULL;
    }
    int linger = 0;
    zmq_setsockopt(zap, ZMQ_LINGER, &linger, sizeof linger);
    if (zmq_bind(zap, ZAP_ENDPOINT) != 0) {
        *err = -zmq_errno();
        zmq_close(zap);
        return NULL;
    }
    return zap;
}

/* Receives one whole request; 1 when one was read, 0 when none waits. */
static int
recv_request(void *zap, struct zap_request *r)
{
    r->parts = 0;
    int more = 1;
    while (more) {
        uint8_t buf[ZAP_FRAME_MAX];
        int n = zmq_recv(zap, buf, sizeof buf, r->parts == 0 ? ZMQ_DONTWAIT : 0);
        if (n < 0)
            return 0; /* EAGAIN before the first frame; the rest of a message never fails */
        if (r->parts < ZAP_FRAMES) {
            size_t kept = (size_t)n < sizeof buf ? (size_t)n : sizeof buf;
            memcpy(r->frame[r->parts], buf, kept);
            r->size[r->parts] = (size_t)n;
        }
        r->parts++;
        more = 0;
        size_t more_size = sizeof more;
        zmq_getsockopt(zap, ZMQ_RCVMORE, &more, &more_size);
    }
    return 1;
}

static int
frame_is(const struct zap_request *r, int i, const char *text)
{
    return r->size[i] == strlen(text) && memcmp(r->frame[i], text, r->size[i]) == 0;
}

int
tsock__zap_peer_uid(const char *address, size_t len, unsigned long *uid)
{
    /* libzmq appends ":UID:GID:PID" (SO_PEERCRED) to an ipc peer's address. */
    int colons = 0;
    size_t at = len;
    while (at > 0 && colons < 3)
        if (address[--at] == ':')
            colons++;
    if (colons < 3)
        return -ENOENT;
    unsigned long fields[3];
    const char *p = address + at + 1, *end = address + len;
    for (int i = 0; i < 3; i++) {
        if (p >= end || *p < '0' || *p > '9')
            return -ENOENT;
        unsigned long v = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            if (v > (~0ul - 9) / 10)
                return -ENOENT;
            v = v * 10 + (unsigned long)(*p - '0');
        }
        fields[i] = v;
        if (i < 2 && (p >= end || *p++ != ':'))
            return -ENOENT;
    }
    if (p != end)
        return -ENOENT;
    *uid = fields[0];
    return 0;
}

/* The verdict on one request, and the reason logged when it is refused. */
static int
authorized(const struct zap_request *r, const struct tsock__zap_policy *policy, const char **reason)
{
    *reason = "not a ZAP request this producer answers";
    if (r->parts < ZAP_NULL_FRAMES || !frame_is(r, 0, "1.0"))
        return 0;
    if (frame_is(r, 5, "CURVE")) {
        *reason = "client key not authorized";
        return policy->keys && r->parts == ZAP_FRAMES && r->size[6] == 32 &&
               tsock__key_set_has(policy->keys, r->frame[6]);
    }
    if (!frame_is(r, 5, "NULL") || r->parts != ZAP_NULL_FRAMES || !policy->check_uid)
        return 0;
    unsigned long uid;
    if (r->size[3] > ZAP_FRAME_MAX)
        return 0; /* libzmq writes a short address: this one is not libzmq's */
    if (tsock__zap_peer_uid((const char *)r->frame[3], r->size[3], &uid) < 0) {
        /* This libzmq reports no peer credentials: the socket file's mode is the only gate. */
        *reason = "";
        return 1;
    }
    *reason = "another user: an ipc endpoint admits only the producer's user and root";
    return uid == 0 || uid == (unsigned long)policy->uid;
}

/* Every refusal up to LOG_FIRST is logged, then one in LOG_EVERY: a client retrying a bad
 * key in a loop must not flood the log. Atomic: every producer in the process counts here. */
#define LOG_FIRST 20
#define LOG_EVERY 1000

static void
log_refusal(const struct zap_request *r, const char *reason)
{
    static uint64_t total;
    uint64_t refused = __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED);
    if (refused > LOG_FIRST && refused % LOG_EVERY != 0)
        return;
    char address[64] = "?";
    if (r->parts > 3) {
        size_t n = r->size[3] < sizeof address - 1 ? r->size[3] : sizeof address - 1;
        memcpy(address, r->frame[3], n);
        address[n] = '\0';
    }
    char key[TSOCK__Z85_KEY_LEN + 1] = "(none)";
    if (r->parts == ZAP_FRAMES && r->size[6] == 32)
        zmq_z85_encode(key, r->frame[6], 32);
    if (frame_is(r, 5, "CURVE"))
        tsock__log(TSOCK_LOG_WARN,
                   "refused a connection from %s: client key %s is not authorized (%llu "
                   "refused so far)",
                   address, key, (unsigned long long)refused);
    else
        tsock__log(TSOCK_LOG_WARN, "refused a connection from %s: %s (%llu refused so far)",
                   address, reason, (unsigned long long)refused);
}

static void
reply(void *zap, const struct zap_request *r, int ok, const char *reason)
{
    const char *code = ok ? "200" : "400";
    const char *text = ok ? "OK" : reason;
    size_t id_size = r->parts > 1 && r->size[1] <= ZAP_FRAME_MAX ? r->size[1] : 0;
    zmq_send(zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(zap, r->frame[1], id_size, ZMQ_SNDMORE);
    zmq_send(zap, code, 3, ZMQ_SNDMORE);
    zmq_send(zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(zap, "", 0, ZMQ_SNDMORE); /* user id */
    zmq_send(zap, "", 0, 0);           /* metadata */
}

void
tsock__zap_serve(void *zap, const struct tsock__zap_policy *policy)
{
    struct zap_request r;
    while (recv_request(zap, &r)) {
        const char *reason;
        int ok = authorized(&r, policy, &reason);
        if (!ok)
            log_refusal(&r, reason);
        reply(zap, &r, ok, reason);
    }
}
