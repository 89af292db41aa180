/* CURVE keys and the network exposure rule, private to transport/: reading and checking key
 * files, the authorized-keys set a producer accepts, generating key pairs, and deciding which
 * endpoints reach beyond this machine. The cryptography is libzmq's (libsodium underneath);
 * this file only handles key text. docs/security.md documents the file formats. */
#ifndef TSOCK_CURVE_H
#define TSOCK_CURVE_H

#include <stddef.h>
#include <stdint.h>

#define TSOCK__Z85_KEY_LEN 40 /* a 32-byte key in Z85 text */

/* A key in the Z85 text libzmq's socket options take, NUL-terminated. */
struct tsock__z85_key {
    char text[TSOCK__Z85_KEY_LEN + 1];
};

/* The public keys a producer accepts, in binary (as ZAP hands them over). */
struct tsock__key_set {
    uint8_t (*keys)[32];
    size_t count;
};

/* -ENOTSUP, with a log line, when libzmq was built without CURVE; else 0. */
int tsock__curve_available(void);

/* Reads a key file: 40 Z85 characters and an optional newline, nothing else. A secret key
 * file must be a regular file that neither group nor others can read or write. Each failure
 * is logged with the path and the reason. Returns 0, -ENOENT (missing), -EACCES (wrong
 * mode), -EINVAL (wrong size or not Z85), or another negated errno. */
int tsock__curve_read_key(const char *path, int secret, struct tsock__z85_key *out);

/* This end's public key, derived from its secret key. Returns 0 or -EINVAL. */
int tsock__curve_public_of(const struct tsock__z85_key *secret, struct tsock__z85_key *out);

/* Loads the authorized client keys: a file of lines "KEY [comment]" (blank lines and lines
 * starting with '#' ignored), or a directory whose "*.key" files are public key files. Neither
 * the file nor the directory may be writable by group or others. At least one key is required.
 * Returns 0 (free *out with tsock__key_set_free) or a negative code, logged. */
int tsock__curve_load_authorized(const char *path, struct tsock__key_set *out);
void tsock__key_set_free(struct tsock__key_set *s);
int tsock__key_set_has(const struct tsock__key_set *s, const uint8_t key[32]);

/* Who can reach a producer bound to an endpoint (endpoint_scope.c). */
enum tsock__exposure {
    TSOCK__EXPOSURE_PRIVATE,     /* ipc file, inproc, tcp on exactly one loopback address */
    TSOCK__EXPOSURE_LOCAL_USERS, /* an abstract ipc name: every local user, no permissions */
    TSOCK__EXPOSURE_NETWORK,     /* anything else: other hosts may connect */
};

/* Judges a bind endpoint by libzmq's own address grammar (tcp://[SOURCE;]HOST:PORT, brackets,
 * '*', interface names, zone ids, numeric addresses; never DNS, as libzmq's bind). Only a tcp
 * endpoint of exactly one loopback address is private: a source address, a wildcard, an
 * interface with any other address, any other transport is not. When not private, *why (if
 * why is not NULL) is a static sentence saying why; else "". Thread-safe. */
enum tsock__exposure tsock__endpoint_exposure(const char *endpoint, const char **why);

/* 1 when tsock__endpoint_exposure says TSOCK__EXPOSURE_PRIVATE, else 0. */
int tsock__endpoint_is_local(const char *endpoint);

/* The parts of a tcp address (what follows "tcp://"), split as libzmq splits a bind address.
 * Every pointer points into the parsed string; absent parts are NULL with length 0. */
struct tsock__tcp_endpoint {
    const char *source; /* before the last ';' */
    size_t source_len;
    const char *host; /* brackets and zone id removed */
    size_t host_len;
    const char *zone; /* after the last '%' of the host */
    size_t zone_len;
    const char *port; /* after the last ':' */
    size_t port_len;
    int bracketed;
};

/* Splits `address` (NUL-terminated). Returns 0, or -EINVAL where libzmq's parser refuses the
 * string before resolving it (no port, an empty zone id). Resolves nothing. */
int tsock__tcp_endpoint_parse(const char *address, struct tsock__tcp_endpoint *out);

#endif

/* The ZAP handler of one ZeroMQ context (RFC 27): a REP socket on inproc://zeromq.zap.01 that
 * libzmq asks, during each CURVE handshake, whether the client's public key may connect. Open
 * it before binding the CURVE socket: libzmq consults the handler of the socket's own
 * context. Returns the socket or NULL with *err set. */
void *tsock__zap_open(void *zctx, int *err);

/* Whom a ZAP handler admits. `keys`: the CURVE clients (NULL: none). `check_uid`: answer the
 * NULL mechanism's requests, which libzmq makes for a socket with a ZAP domain, admitting only
 * peers of user `uid` or root; libzmq reads the peer's user id with SO_PEERCRED on ipc and
 * appends it to the request's address. */
struct tsock__zap_policy {
    const struct tsock__key_set *keys;
    int check_uid;
    unsigned uid;
};

/* Answers every waiting ZAP request without blocking: "200" for an admitted client, "400"
 * (logged, with the reason) for any other. A NULL request whose address carries no
 * credentials (a libzmq built without SO_PEERCRED) is admitted: the socket file's mode is then
 * the only gate. The handshake waits for the answer, so the thread that polls the channel
 * must call this whenever the ZAP socket is readable. */
void tsock__zap_serve(void *zap, const struct tsock__zap_policy *policy);

/* The user id in a ZAP request's address ("ADDRESS:UID:GID:PID", as libzmq writes an ipc
 * peer's SO_PEERCRED credentials), `len` bytes, not NUL-terminated. Returns 0 with *uid set,
 * or -ENOENT when the address carries no credentials. */
int tsock__zap_peer_uid(const char *address, size_t len, unsigned long *uid);

/* A DEALER's handshake watch: a ZeroMQ socket monitor on `sock` (an inproc PAIR in the same
 * context) that reports failed security handshakes. Returns the PAIR socket to poll, or NULL
 * (then nothing is reported; never an error for the caller). */
void *tsock__handshake_watch_open(void *zctx, void *sock);

/* Reads every waiting monitor event without blocking; returns TSOCK_E_AUTH when one of them is
 * a failed security handshake (with `curve`: any failed handshake, since a CURVE failure
 * often shows only as a dropped connection), else 0. */
int tsock__handshake_watch_read(void *watch, int curve);
