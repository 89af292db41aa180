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

/* 1 when a producer bound to `endpoint` can be reached only from this machine: ipc, inproc,
 * and tcp on 127.0.0.0/8, ::1, "localhost" or the "lo" interface. Everything else (any other
 * address, a wildcard, another transport) reaches the network. */
int tsock__endpoint_is_local(const char *endpoint);

#endif

/* The ZAP handler of one ZeroMQ context (RFC 27): a REP socket on inproc://zeromq.zap.01 that
 * libzmq asks, during each CURVE handshake, whether the client's public key may connect. Open
 * it before binding the CURVE socket: libzmq consults the handler of the socket's own
 * context. Returns the socket or NULL with *err set. */
void *tsock__zap_open(void *zctx, int *err);

/* Answers every waiting ZAP request without blocking: "200" for a CURVE client whose key is
 * in `keys`, "400" for any other. The handshake waits for the answer, so the thread that polls
 * the channel must call this whenever the ZAP socket is readable. */
void tsock__zap_serve(void *zap, const struct tsock__key_set *keys);

/* A DEALER's handshake watch: a ZeroMQ socket monitor on `sock` (an inproc PAIR in the same
 * context) that reports failed security handshakes. Returns the PAIR socket to poll, or NULL
 * (then nothing is reported; never an error for the caller). */
void *tsock__handshake_watch_open(void *zctx, void *sock);

/* Reads every waiting monitor event without blocking; returns TSOCK_E_AUTH when one of them is
 * a failed security handshake (with `curve`: any failed handshake, since a CURVE failure
 * often shows only as a dropped connection), else 0. */
int tsock__handshake_watch_read(void *watch, int curve);
