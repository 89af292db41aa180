/* garbage_client: sends malformed traffic to a tsock endpoint, as a client that is not tsock
 * (or a broken one) would.
 *
 *   garbage_client ENDPOINT COUNT [SEED]
 *
 * Connects a ZeroMQ DEALER socket to ENDPOINT and sends COUNT messages drawn from a mix of:
 * random bytes of random length (0..300, sometimes multi-frame), frames that start like a tsock
 * header (right magic) but are truncated, carry a wrong version, an unknown type, or a body
 * length that disagrees with the frame, and oversized frames. Exits 0 once everything was
 * handed to ZeroMQ and flushed (bounded linger), 1 on a ZeroMQ error, 2 on bad usage.
 * The header layout assumed here (u32 magic "TSCK", u16 version, u16 type, u32 body length,
 * little-endian) only has to be close: every message sent is malformed either way.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* The protocol version the library speaks (TSOCK__PROTO_VERSION; this program deliberately does
 * not include the library's headers, so it is repeated here). */
#define WIRE_VERSION 2

static uint64_t rng_state;

static uint64_t
rng(void)
{
    /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void
put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Fills buf with one malformed message; returns its length. */
static size_t
make_message(uint8_t *buf, size_t cap)
{
    size_t len;
    int kind = (int)(rng() % 7);
    switch (kind) {
    case 0: /* plain random bytes */
    default:
        len = rng() % 301;
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)rng();
        return len;
    case 1: /* right magic, truncated header */
        len = 1 + rng() % 11;
        put_le(buf, 0x4B435354u, 4);
        put_le(buf + 4, WIRE_VERSION, 2);
        put_le(buf + 6, 1 + rng() % 8, 2);
        return len;
    case 2: /* full header, wrong version */
        put_le(buf, 0x4B435354u, 4);
        put_le(buf + 4, WIRE_VERSION + 1 + rng() % 1000, 2);
        put_le(buf + 6, 1 + rng() % 8, 2);
        put_le(buf + 8, 0, 4);
        return 12;
    case 3: /* known type, body length larger than the frame */
    case 4: /* known type, body length smaller than the frame */
        put_le(buf, 0x4B435354u, 4);
        put_le(buf + 4, WIRE_VERSION, 2);
        put_le(buf + 6, 1 + rng() % 8, 2);
        len = 12 + rng() % 120;
        for (size_t i = 12; i < len; i++)
            buf[i] = (uint8_t)rng();
        put_le(buf + 8, kind == 3 ? (len - 12) + 1 + rng() % 100000 : (len - 12) / 2, 4);
        if (kind == 3 && rng() % 4 == 0)
            put_le(buf + 8, 0xFFFFFFFFu, 4);
        return len;
    case 5: /* unknown type, consistent length */
        put_le(buf, 0x4B435354u, 4);
        put_le(buf + 4, WIRE_VERSION, 2);
        put_le(buf + 6, 9 + rng() % 60000, 2);
        len = 12 + rng() % 64;
        for (size_t i = 12; i < len; i++)
            buf[i] = (uint8_t)rng();
        put_le(buf + 8, len - 12, 4);
        return len;
    case 6: /* oversized: header claims what the frame holds, but more than any message */
        len = cap;
        put_le(buf, 0x4B435354u, 4);
        put_le(buf + 4, WIRE_VERSION, 2);
        put_le(buf + 6, 1 + rng() % 8, 2);
        put_le(buf + 8, len - 12, 4);
        memset(buf + 12, 0xA5, len - 12);
        return len;
    }
}

int
main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: garbage_client ENDPOINT COUNT [SEED]\n");
        return 2;
    }
    long count = strtol(argv[2], NULL, 10);
    rng_state = argc == 4 ? strtoull(argv[3], NULL, 10) : 1;
    if (count <= 0) {
        fprintf(stderr, "garbage_client: COUNT must be positive\n");
        return 2;
    }
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 2000, hwm = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    if (zmq_connect(s, argv[1]) != 0) {
        fprintf(stderr, "garbage_client: connect %s: %s\n", argv[1], zmq_strerror(zmq_errno()));
        return 1;
    }
    size_t cap = 70000; /* above TSOCK__PROTO_MAX_MESSAGE (65536) */
    uint8_t *buf = malloc(cap);
    if (!buf)
        return 1;
    long sent = 0;
    for (long i = 0; i < count; i++) {
        /* Now and then a multi-frame message: tsock messages are one frame. */
        int frames = rng() % 8 == 0 ? 2 + (int)(rng() % 3) : 1;
        for (int f = 0; f < frames; f++) {
            size_t len = make_message(buf, cap);
            if (zmq_send(s, buf, len, f + 1 < frames ? ZMQ_SNDMORE : 0) < 0) {
                fprintf(stderr, "garbage_client: send: %s\n", zmq_strerror(zmq_errno()));
                free(buf);
                return 1;
            }
        }
        sent++;
    }
    free(buf);
    zmq_close(s);
    zmq_ctx_term(ctx);
    printf("garbage_client: sent %ld messages to %s\n", sent, argv[1]);
    return 0;
}
