/* The channel: a socket, its wake-up, heartbeats, watched peers' liveness, and the dispatch of
 * decoded messages to the owner's handlers. See channel.h for the contract. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "core/core.h"
#include "transport/channel.h"
#include "transport/curve.h"
#include "transport/transport.h"

struct watched_peer {
    int active;
    struct tsock__peer_id id;
    uint64_t last_heard_ns;
};

struct tsock__channel {
    char endpoint[TSOCK__ENDPOINT_MAX];
    int routed; /* ROUTER: every frame starts with the sender's routing id */
    void *zctx;
    void *sock;
    int wake_fd;
    struct tsock__channel_handlers h;
    uint64_t beat_ns, timeout_ns;
    uint64_t next_beat_ns; /* 0: at the next dispatch */
    char ipc_file[TSOCK__ENDPOINT_MAX];
    ino_t ipc_inode;
    struct watched_peer peers[TSOCK__CHANNEL_MAX_PEERS];
    /* CURVE: this end's keys (a reconnect reuses them), and on a producer the ZAP handler
     * and the client keys it accepts. */
    int curve;
    struct tsock__z85_key secret, public_key, server_key;
    void *zap;
    struct tsock__key_set authorized;
    struct tsock__zap_policy zap_policy; /* whom the ZAP handler admits */
    void *watch;               /* a DEALER's handshake watch (a socket monitor), or NULL */
    struct tsock__frame frame; /* the frame being handled */
    struct tsock__msg msg;     /* its decoding */
    uint8_t out[TSOCK__PROTO_MAX_MESSAGE]; /* the message being sent */
};

const char *
tsock__channel_ipc_file(const char *endpoint)
{
    const char *path = tsock__ipc_path(endpoint);
    return path && path[0] != '@' ? path : NULL;
}

static int
channel_new(struct tsock__channel **out, const char *endpoint,
            const struct tsock__channel_handlers *h, struct tsock__channel_timing t)
{
    *out = NULL;
    if (strlen(endpoint) >= TSOCK__ENDPOINT_MAX)
        return -ENAMETOOLONG;
    struct tsock__channel *ch = calloc(1, sizeof *ch);
    if (!ch)
        return -ENOMEM;
    strcpy(ch->endpoint, endpoint);
    ch->h = *h;
    ch->beat_ns = (uint64_t)t.beat_ms * 1000000u;
    ch->timeout_ns = (uint64_t)t.timeout_ms * 1000000u;
    ch->wake_fd = tsock__wake_open();
    ch->zctx = ch->wake_fd >= 0 ? zmq_ctx_new() : NULL;
    if (!ch->zctx) {
        int err = ch->wake_fd < 0 ? ch->wake_fd : -ENOMEM;
        tsock__channel_close(ch, 0);
        return err;
    }
    *out = ch;
    return 0;
}

/* Binds, claiming an ipc socket file first and keeping it private to this user. */
static int
bind_router(struct tsock__channel *ch)
{
    const char *path = tsock__ipc_path(ch->endpoint);
    if (path) {
        int err = tsock__ipc_claim(path);
        if (err < 0)
            return err;
    }
    int err = 0;
    struct tsock__socket_curve curve = {.secret = ch->secret.text};
    ch->sock = tsock__router_open(ch->zctx, ch->endpoint, ch->curve ? &curve : NULL,
                                  ch->zap != NULL, &err);
    if (!ch->sock)
        return err == -EADDRINUSE ? TSOCK_E_BUSY_ENDPOINT : err;
    struct stat st;
    if (path && path[0] != '@' && stat(path, &st) == 0) {
        /* Only the owner may connect: consumers of other users cannot map the ring anyway. */
        chmod(path, 0600);
        snprintf(ch->ipc_file, sizeof ch->ipc_file, "%s", path);
        ch->ipc_inode = st.st_ino;
    }
    return 0;
}

static int
has_keys(const struct tsock__channel_security *sec)
{
    return sec && sec->secret_key_file[0];
}

/* Without CURVE, an ipc endpoint still asks the ZAP handler about each client, which admits
 * only this user and root by the peer credentials libzmq reads (SO_PEERCRED): the socket
 * file's mode protects a path, but nothing protects an abstract name. */
static int
open_uid_check(struct tsock__channel *ch)
{
    if (!tsock__ipc_path(ch->endpoint))
        return 0;
    int err = 0;
    ch->zap = tsock__zap_open(ch->zctx, &err);
    ch->zap_policy.check_uid = ch->zap != NULL;
    ch->zap_policy.uid = (unsigned)geteuid();
    return err;
}

/* An endpoint others can reach, served without keys: refused unless the caller named the risk. */
static int
allow_exposed(const struct tsock__channel *ch, const struct tsock__channel_security *sec,
              enum tsock__exposure exposure, const char *why)
{
    int network = exposure == TSOCK__EXPOSURE_NETWORK;
    if (sec && sec->insecure_network) {
        tsock__log(TSOCK_LOG_WARN,
                   "serving %s without authentication (%s): anyone who can reach it may "
                   "join, hold slots and read the batches%s",
                   ch->endpoint, why,
                   network ? ""
                           : "; the producer admits only its own user and root where "
                             "libzmq reports the peer's credentials");
        return 0;
    }
    tsock__log(TSOCK_LOG_ERROR,
               "refusing to serve %s without authentication: %s. Give CURVE keys (see "
               "docs/security.md), %s, or accept the risk explicitly (insecure open to "
               "network)",
               ch->endpoint, why,
               network ? "bind one loopback address (tcp://127.0.0.1:PORT) or ipc://PATH"
                       : "use a socket file (ipc:///run/user/UID/NAME.sock)");
    return TSOCK_E_INSECURE;
}

/* Reads a producer's keys and opens its ZAP handler, or refuses an endpoint others can reach. */
static int
setup_server_security(struct tsock__channel *ch, const struct tsock__channel_security *sec)
{
    if (!has_keys(sec)) {
        const char *why;
        enum tsock__exposure exposure = tsock__endpoint_exposure(ch->endpoint, &why);
        int err = exposure == TSOCK__EXPOSURE_PRIVATE ? 0 : allow_exposed(ch, sec, exposure, why);
        return err == 0 ? open_uid_check(ch) : err;
    }
    int err = tsock__curve_available();
    if (err == 0)
        err = tsock__curve_read_key(sec->secret_key_file, 1, &ch->secret);
    if (err == 0)
        err = tsock__curve_load_authorized(sec->peer_keys, &ch->authorized);
    if (err == 0)
        ch->zap = tsock__zap_open(ch->zctx, &err);
    ch->zap_policy.keys = &ch->authorized;
    ch->curve = err == 0;
    return err;
}

/* Reads a client's keys; its public key follows from its secret one. */
static int
setup_client_security(struct tsock__channel *ch, const struct tsock__channel_security *sec)
{
    if (!has_keys(sec))
        return 0;
    int err = tsock__curve_available();
    if (err == 0)
        err = tsock__curve_read_key(sec->secret_key_file, 1, &ch->secret);
    if (err == 0)
        err = tsock__curve_read_key(sec->peer_keys, 0, &ch->server_key);
    if (err == 0)
        err = tsock__curve_public_of(&ch->secret, &ch->public_key);
    ch->curve = err == 0;
    return err;
}

/* Loads the keys `sec` names and throws them away: a bad file fails at the setter. */
static int
check_keys(const struct tsock__channel_security *sec, int bind)
{
    struct tsock__z85_key secret, peer;
    struct tsock__key_set authorized = {0};
    int err = tsock__curve_available();
    if (err == 0)
        err = tsock__curve_read_key(sec->secret_key_file, 1, &secret);
    if (err == 0 && bind)
        err = tsock__curve_load_authorized(sec->peer_keys, &authorized);
    else if (err == 0)
        err = tsock__curve_read_key(sec->peer_keys, 0, &peer);
    tsock__key_set_free(&authorized);
    memset(&secret, 0, sizeof secret);
    return err;
}

static int
security_path(char *dst, const char *src)
{
    if (!src)
        src = "";
    if (strlen(src) >= TSOCK__KEY_PATH_MAX)
        return -ENAMETOOLONG;
    strcpy(dst, src);
    return 0;
}

int
tsock__channel_security_set(struct tsock__channel_security *sec, int bind,
                            const char *secret_key_file, const char *peer_keys)
{
    struct tsock__channel_security next = *sec;
    int err = security_path(next.secret_key_file, secret_key_file);
    if (err == 0)
        err = security_path(next.peer_keys, peer_keys);
    if (err < 0)
        return err;
    if (!next.secret_key_file[0] != !next.peer_keys[0])
        return -EINVAL; /* half a key set would silently mean no authentication */
    if (next.secret_key_file[0]) {
        err = check_keys(&next, bind);
        if (err < 0)
            return err;
    }
    *sec = next;
    return 0;
}

int
tsock__channel_bind(struct tsock__channel **out, const char *endpoint,
                    const struct tsock__channel_handlers *h, struct tsock__channel_timing t,
                    const struct tsock__channel_security *sec)
{
    int err = channel_new(out, endpoint, h, t);
    if (err < 0)
        return err;
    (*out)->routed = 1;
    err = setup_server_security(*out, sec);
    if (err == 0)
        err = bind_router(*out);
    if (err < 0) {
        tsock__channel_close(*out, 0);
        *out = NULL;
    }
    return err;
}

/* The client keys of a DEALER for tsock__dealer_open, or NULL without CURVE. */
static const struct tsock__socket_curve *
client_curve(const struct tsock__channel *ch, struct tsock__socket_curve *c)
{
    c->secret = ch->secret.text;
    c->public_key = ch->public_key.text;
    c->server_key = ch->server_key.text;
    return ch->curve ? c : NULL;
}

int
tsock__channel_connect(struct tsock__channel **out, const char *endpoint,
                       const struct tsock__channel_handlers *h, struct tsock__channel_timing t,
                       const struct tsock__channel_security *sec)
{
    int err = channel_new(out, endpoint, h, t);
    if (err < 0)
        return err;
    struct tsock__socket_curve c;
    err = setup_client_security(*out, sec);
    if (err == 0)
        (*out)->sock = tsock__dealer_open((*out)->zctx, endpoint, client_curve(*out, &c),
                                          &(*out)->watch, &err);
    if (!(*out)->sock) {
        tsock__channel_close(*out, 0);
        *out = NULL;
    }
    return err;
}

int
tsock__channel_reconnect(struct tsock__channel *ch, int linger_ms)
{
    tsock__socket_close(ch->watch, 0);
    ch->watch = NULL;
    tsock__socket_close(ch->sock, linger_ms);
    memset(ch->peers, 0, sizeof ch->peers);
    ch->next_beat_ns = 0;
    tsock__wake_drain(ch->wake_fd);
    int err = 0;
    struct tsock__socket_curve c;
    ch->sock = tsock__dealer_open(ch->zctx, ch->endpoint, client_curve(ch, &c), &ch->watch, &err);
    return ch->sock ? 0 : err;
}

/* Removes the socket file only if it is still the one this channel bound. */
static void
remove_ipc_file(const struct tsock__channel *ch)
{
    struct stat st;
    if (ch->ipc_file[0] && stat(ch->ipc_file, &st) == 0 && st.st_ino == ch->ipc_inode)
        unlink(ch->ipc_file);
}

void
tsock__channel_close(struct tsock__channel *ch, int linger_ms)
{
    if (!ch)
        return;
    /* The monitor's PAIR first: a socket left open would keep zmq_ctx_term waiting. */
    tsock__socket_close(ch->watch, 0);
    tsock__socket_close(ch->sock, linger_ms);
    tsock__socket_close(ch->zap, 0);
    if (ch->zctx)
        zmq_ctx_term(ch->zctx);
    tsock__key_set_free(&ch->authorized);
    memset(&ch->secret, 0, sizeof ch->secret); /* no secret left behind in freed memory */
    remove_ipc_file(ch);
    if (ch->wake_fd >= 0)
        close(ch->wake_fd);
    free(ch);
}

/* ---- peers ------------------------------------------------------------------------------- */

void
tsock__channel_watch(struct tsock__channel *ch, int peer, const struct tsock__peer_id *id)
{
    if (peer < 0 || peer >= TSOCK__CHANNEL_MAX_PEERS)
        return;
    struct watched_peer *w = &ch->peers[peer];
    w->active = 1;
    w->id.len = 0;
    if (id)
        w->id = *id;
    w->last_heard_ns = tsock__now_ns();
}

void
tsock__channel_unwatch(struct tsock__channel *ch, int peer)
{
    if (peer >= 0 && peer < TSOCK__CHANNEL_MAX_PEERS)
        ch->peers[peer].active = 0;
}

/* The watched index of the peer a frame came from, or -1. */
static int
find_peer(const struct tsock__channel *ch, const struct tsock__frame *f)
{
    for (int i = 0; i < TSOCK__CHANNEL_MAX_PEERS; i++) {
        const struct watched_peer *w = &ch->peers[i];
        if (w->active && w->id.len == f->id_len && memcmp(w->id.bytes, f->id, f->id_len) == 0)
            return i;
    }
    return -1;
}

/* ---- sending ----------------------------------------------------------------------------- */

static int
send_bytes(struct tsock__channel *ch, const struct tsock__peer_id *to, const uint8_t *frame,
           size_t size)
{
    int routed = ch->routed && to;
    return tsock__send_frame(ch->sock, routed ? to->bytes : NULL, routed ? to->len : 0, frame,
                             size);
}

static int
encode(struct tsock__channel *ch, const struct tsock__msg *m)
{
    return tsock__msg_encode(m, ch->out, sizeof ch->out);
}

int
tsock__channel_send(struct tsock__channel *ch, int peer, const struct tsock__msg *m)
{
    if (ch->routed && (peer < 0 || peer >= TSOCK__CHANNEL_MAX_PEERS || !ch->peers[peer].active))
        return -EHOSTUNREACH;
    int n = encode(ch, m);
    if (n < 0)
        return n;
    return send_bytes(ch, ch->routed ? &ch->peers[peer].id : NULL, ch->out, (size_t)n);
}

uint64_t
tsock__channel_send_many(struct tsock__channel *ch, uint64_t peers, const struct tsock__msg *m)
{
    int n = encode(ch, m);
    if (n < 0)
        return peers;
    uint64_t failed = 0;
    for (int i = 0; i < TSOCK__CHANNEL_MAX_PEERS; i++) {
        uint64_t bit = (uint64_t)1 << i;
        if (!(peers & bit))
            continue;
        if (!ch->peers[i].active ||
            send_bytes(ch, ch->routed ? &ch->peers[i].id : NULL, ch->out, (size_t)n) < 0)
            failed |= bit;
    }
    return failed;
}

int
tsock__channel_reply(struct tsock__channel *ch, const struct tsock__peer_id *to,
                     const struct tsock__msg *m)
{
    int n = encode(ch, m);
    return n < 0 ? n : send_bytes(ch, to, ch->out, (size_t)n);
}

int
tsock__channel_reply_frame(struct tsock__channel *ch, const struct tsock__peer_id *to,
                           const uint8_t *frame, size_t size)
{
    return send_bytes(ch, to, frame, size);
}

/* ---- the loop ---------------------------------------------------------------------------- */

void
tsock__channel_wait(struct tsock__channel *ch, int max_ms)
{
    uint64_t now = tsock__now_ns();
    long wait_ms = max_ms < 0 ? -1 : max_ms;
    if (ch->beat_ns) {
        long until_beat =
            ch->next_beat_ns <= now ? 0 : (long)((ch->next_beat_ns - now) / 1000000u) + 1;
        if (wait_ms < 0 || until_beat < wait_ms)
            wait_ms = until_beat;
    }
    zmq_pollitem_t items[3] = {{ch->sock, 0, ZMQ_POLLIN, 0},
                               {NULL, ch->wake_fd, ZMQ_POLLIN, 0},
                               {ch->zap ? ch->zap : ch->watch, 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, items[2].socket ? 3 : 2, wait_ms);
    if (items[1].revents)
        tsock__wake_drain(ch->wake_fd);
}

void
tsock__channel_wake(struct tsock__channel *ch)
{
    tsock__wake_signal(ch->wake_fd);
}

static void
handle_frame(struct tsock__channel *ch)
{
    const struct tsock__frame *f = &ch->frame;
    struct tsock__peer_id from = {.len = f->id_len};
    memcpy(from.bytes, f->id, f->id_len);
    int peer = find_peer(ch, f);
    int err =
        f->parts != 1 || f->oversized || (ch->routed && f->id_len == 0) ? TSOCK_E_PROTOCOL : 0;
    int type = err ? err : tsock__msg_peek_type(f->data, f->size);
    if (type == TSOCK__MSG_STATS_REPLY && ch->h.on_stats_reply) {
        ch->h.on_stats_reply(ch->h.ctx, f->data, f->size);
        return;
    }
    err = type < 0 ? type : tsock__msg_decode(f->data, f->size, &ch->msg);
    if (err < 0) {
        if (ch->h.on_malformed)
            ch->h.on_malformed(ch->h.ctx, &from, peer, f->size, f->parts, err);
        return;
    }
    if (peer >= 0)
        ch->peers[peer].last_heard_ns = tsock__now_ns();
    tsock__channel_msg_fn fn =
        ch->h.on[ch->msg.type] ? ch->h.on[ch->msg.type] : ch->h.on_unexpected;
    if (fn)
        fn(ch->h.ctx, &from, peer, &ch->msg);
}

/* HEARTBEAT to every watched peer still heard from; the silent ones are reported lost. */
static void
beat(struct tsock__channel *ch, uint64_t now)
{
    struct tsock__msg hb;
    hb.type = TSOCK__MSG_HEARTBEAT;
    int n = encode(ch, &hb);
    for (int i = 0; i < TSOCK__CHANNEL_MAX_PEERS; i++) {
        struct watched_peer *w = &ch->peers[i];
        if (!w->active)
            continue;
        if (ch->timeout_ns && now - w->last_heard_ns > ch->timeout_ns) {
            w->active = 0;
            if (ch->h.on_peer_lost)
                ch->h.on_peer_lost(ch->h.ctx, i);
            /* The handler may have sent (a producer telling a lost rank's group), which
             * encodes into ch->out: the HEARTBEAT is encoded again for the peers after it. */
            n = encode(ch, &hb);
            continue;
        }
        int err = n < 0 ? n : send_bytes(ch, &w->id, ch->out, (size_t)n);
        if (err < 0 && ch->h.on_send_failed) {
            ch->h.on_send_failed(ch->h.ctx, i, err);
            n = encode(ch, &hb);
        }
    }
    if (ch->h.on_beat)
        ch->h.on_beat(ch->h.ctx, now);
}

void
tsock__channel_dispatch(struct tsock__channel *ch)
{
    /* Handshakes first: a client waiting for its key's verdict gets it without delay. */
    if (ch->zap)
        tsock__zap_serve(ch->zap, &ch->zap_policy);
    int refused = ch->watch ? tsock__handshake_watch_read(ch->watch, ch->curve) : 0;
    if (refused && ch->h.on_handshake_failed)
        ch->h.on_handshake_failed(ch->h.ctx, refused);
    while (tsock__recv(ch->sock, ch->routed, &ch->frame) > 0)
        handle_frame(ch);
    uint64_t now = tsock__now_ns();
    if (ch->beat_ns && now >= ch->next_beat_ns) {
        ch->next_beat_ns = now + ch->beat_ns;
        beat(ch, now);
    }
}
