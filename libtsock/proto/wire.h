/* Wire primitives shared by the message codec (proto.c) and the STATS_REPLY codec
 * (stats_reply.c). Internal to proto/: nothing outside this folder includes it.
 *
 * Contract:
 * - Every integer is stored and loaded one byte at a time, least significant byte first, so the
 *   codecs depend neither on the host's byte order nor on alignment. `n` is 1..8 bytes; a value
 *   wider than n bytes is truncated to its low n bytes (the codecs check ranges beforehand).
 * - A writer appends to buf[0, size). Once something does not fit, `overflow` is set, nothing
 *   more is written and tsock__wire_finish reports -ENOBUFS; no byte at or past buf + size is
 *   ever touched.
 * - A reader reads from buf[0, size). A read past the end sets `bad` and yields zeros (or NULL
 *   for a view); once bad, nothing more is read, so the parsers built on it need no bounds
 *   checks of their own. Callers set `bad` themselves for any other malformation.
 * - A frame is the 12-byte header (magic, version, type, body length; docs/protocol.md) and the
 *   body. tsock__wire_put_header writes it with a zero length and tsock__wire_finish fills the
 *   length in; tsock__wire_get_header checks it against the frame's size.
 * - Names are NUL-free strings of name bytes (no control characters), carried as a u8 length
 *   and the bytes; the encoder's and the decoder's checks accept exactly the same names.
 */
#ifndef TSOCK_PROTO_WIRE_H
#define TSOCK_PROTO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* The most slots a ring may have. Slot numbers in BATCH and RELEASE are below it, and a
 * STATS_REPLY's producer has at most this many. */
#define TSOCK__WIRE_MAX_SLOTS 1024u

struct tsock__wire_writer {
    uint8_t *buf;
    size_t size;
    size_t pos;
    int overflow;
};

struct tsock__wire_reader {
    const uint8_t *buf;
    size_t size;
    size_t pos;
    int bad;
};

/* Whether s[0, len) are name bytes: no control character (NUL included), no 0x7F. Bytes
 * 0x80..0xFF pass, so UTF-8 names work; they are not validated as UTF-8. Returns 1 or 0. */
int tsock__wire_name_bytes_ok(const char *s, size_t len);

/* A string field of a struct: NUL-terminated inside its array of `cap` bytes, at least `min`
 * bytes long, made of name bytes. Sets *len. Returns 0 or -1. */
int tsock__wire_check_str(const char *s, size_t cap, size_t min, size_t *len);

/* Appends the low n bytes of v, little-endian. */
void tsock__wire_put_le(struct tsock__wire_writer *w, uint64_t v, unsigned n);

/* Appends n bytes from p (p may be NULL when n is 0). */
void tsock__wire_put_bytes(struct tsock__wire_writer *w, const uint8_t *p, size_t n);

/* Appends the NUL-terminated string in s[cap] as a u8 length and its bytes; the caller has
 * already checked it (tsock__wire_check_str), which bounds the length. */
void tsock__wire_put_str(struct tsock__wire_writer *w, const char *s, size_t cap);

/* Appends a frame header of the given type, with a body length that tsock__wire_finish fills
 * in. The writer must be empty. */
void tsock__wire_put_header(struct tsock__wire_writer *w, int type);

/* Fills in the body length. Returns the frame's size, or -ENOBUFS when anything overflowed. */
int tsock__wire_finish(struct tsock__wire_writer *w);

/* Reads n bytes (1..8) as a little-endian integer; 0 once the reader is bad. */
uint64_t tsock__wire_get_le(struct tsock__wire_reader *r, unsigned n);

/* A view of the next n bytes of the frame (pointing into it, no copy), or NULL, in which case
 * the reader is bad. */
const uint8_t *tsock__wire_get_view(struct tsock__wire_reader *r, size_t n);

/* A u8 length and that many name bytes into dst[cap], NUL-terminated. A length that does not
 * fit dst, runs past the frame, or bytes that are not name bytes make the reader bad. */
void tsock__wire_get_str(struct tsock__wire_reader *r, char *dst, size_t cap);

/* Reads and checks the header of the frame r covers, leaving r at the body. Returns the type,
 * or TSOCK_E_PROTOCOL (size outside 12..TSOCK__PROTO_MAX_MESSAGE, wrong magic, body length not
 * the rest of the frame) / TSOCK_E_VERSION (right magic, other version). */
int tsock__wire_get_header(struct tsock__wire_reader *r);

/* The CONSUMER_STATS body, which a STATS_REPLY also carries in each of its consumer entries. */
void tsock__wire_put_own_stats(struct tsock__wire_writer *w,
                               const struct tsock__msg_consumer_stats *c);
void tsock__wire_get_own_stats(struct tsock__wire_reader *r, struct tsock__msg_consumer_stats *c);

#endif
