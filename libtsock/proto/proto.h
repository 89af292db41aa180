/* Wire messages between producer and consumers: encoding and checked decoding.
 *
 * Pure code: no I/O, no allocation. Every message is one ZeroMQ frame that starts with a
 * 12-byte header (magic, version, type, body length); docs/protocol.md gives the byte layout.
 * Decoders take untrusted bytes and never read outside them, never trust a length field, and
 * reject anything that is not exactly a well-formed message of the expected shape.
 */
#ifndef TSOCK_PROTO_H
#define TSOCK_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "tsock/tsock.h"

#define TSOCK__PROTO_MAGIC 0x4B435354u /* "TSCK" read as a little-endian u32 */
/* 2: WELCOME carries the CUDA ring's IPC handles (device 1).
 * 3: HELLO's flag TSOCK__HELLO_WANT_IDS; BATCH may carry its sample ids (TSOCK__BATCH_HAS_IDS);
 *    HELLO may declare a data-parallel group (TSOCK__HELLO_HAS_GROUP); WELCOME carries the
 *    dataset size and the producer's node split; REJECT carries a sentence; GROUP_FAILED;
 *    PAUSE and RESUME carry the epochs the consumer finished; PAUSED answers PAUSE.
 *    (Version 3 is unreleased this cycle, so all of this is one version.) */
#define TSOCK__PROTO_VERSION 3
#define TSOCK__PROTO_HEADER_SIZE 12
/* No valid message is larger; anything bigger is rejected before it is parsed. */
#define TSOCK__PROTO_MAX_MESSAGE 65536
#define TSOCK__PROTO_MAX_SHM_NAME 255
/* WELCOME's class names: at most this many bytes in all (ImageNet's 1000 folder names take
 * 10 000), and this many bytes a name (a folder name). */
#define TSOCK__PROTO_MAX_CLASS_BYTES 32768
#define TSOCK__PROTO_MAX_CLASS_NAME 255
/* A CUDA ring announces one 64-byte event handle per slot; this bound keeps a WELCOME well
 * inside TSOCK__PROTO_MAX_MESSAGE. */
#define TSOCK__PROTO_MAX_DEVICE_SLOTS 256
/* The attach blob of a device ring is framed as a 16-byte device id, a 64-byte memory handle and
 * one 64-byte handle per slot (docs/protocol.md); the codec checks that framing only and
 * treats every byte as opaque: what they mean is backend/cuda's business. */
#define TSOCK__PROTO_DEVICE_ID_SIZE 16
#define TSOCK__PROTO_HANDLE_SIZE 64
/* A group's name: 1..64 bytes (docs/distributed.md). */
#define TSOCK__PROTO_MAX_GROUP_NAME 64
/* The most ranks a GROUP_FAILED names: a group's ranks on one producer
 * (dataset/groups.h's TSOCK__GROUP_MAX_LOCAL). */
#define TSOCK__PROTO_MAX_GROUP_RANKS 1024
/* REJECT's sentence: 0..255 bytes. */
#define TSOCK__PROTO_MAX_TEXT 255

enum tsock__msg_type {
    TSOCK__MSG_HELLO = 1,     /* consumer -> producer: join */
    TSOCK__MSG_WELCOME = 2,   /* producer -> consumer: accepted, here is the ring */
    TSOCK__MSG_REJECT = 3,    /* producer -> consumer: not accepted, with a code */
    TSOCK__MSG_BATCH = 4,     /* producer -> consumer: a slot is ready for you */
    TSOCK__MSG_RELEASE = 5,   /* consumer -> producer: done with a slot */
    TSOCK__MSG_HEARTBEAT = 6, /* both ways: still alive */
    TSOCK__MSG_BYE = 7,       /* consumer -> producer: leaving */
    TSOCK__MSG_SHUTDOWN = 8,  /* producer -> consumer: no more batches, with the reason */
    TSOCK__MSG_PAUSE = 9,     /* consumer -> producer: send me nothing (an epoch unfinished?) */
    TSOCK__MSG_RESUME = 10,   /* consumer -> producer: include me again from the next batch */
    TSOCK__MSG_RESUMED = 11,  /* producer -> consumer: every BATCH after this one is for you */
    TSOCK__MSG_STATS_REQUEST = 12,  /* any peer -> producer: send me your figures */
    TSOCK__MSG_STATS_REPLY = 13,    /* producer -> that peer: the figures (own codec, below) */
    TSOCK__MSG_CONSUMER_STATS = 14, /* consumer -> producer: my own figures, every heartbeat */
    TSOCK__MSG_GROUP_FAILED = 15,   /* producer -> group rank: the group is over, and why */
    TSOCK__MSG_PAUSED = 16          /* producer -> consumer: your PAUSE holds, give back now */
};
#define TSOCK__MSG_TYPE_LAST TSOCK__MSG_PAUSED

/* Reasons carried by SHUTDOWN. */
enum tsock__shutdown_reason {
    TSOCK__SHUTDOWN_END = 1,    /* the stream ended normally */
    TSOCK__SHUTDOWN_STOPPED = 2 /* the producer was stopped (signal, destroy) */
};

/* HELLO flag: send me every BATCH with its sample ids (a checkpointable consumer). */
#define TSOCK__HELLO_WANT_IDS 1u
/* HELLO flag: a group block follows the name (this consumer is a rank of a group). */
#define TSOCK__HELLO_HAS_GROUP 2u
/* HELLO flag: send me every BATCH with its sample ids if you can (a sampler, and batches of at
 * most TSOCK__BATCH_MAX_IDS samples); otherwise admit me without (a solo consumer that uses
 * them to pause mid-epoch, engine/consumer_leave.c). */
#define TSOCK__HELLO_IDS_IF_ABLE 4u

struct tsock__msg_hello {
    uint32_t pid;
    uint32_t flags; /* TSOCK__HELLO_WANT_IDS, _HAS_GROUP, _IDS_IF_ABLE; other bits reserved, 0 */
    char name[TSOCK_MAX_NAME + 1];
    /* With TSOCK__HELLO_HAS_GROUP (every field zero without): rank `rank` (< world) of group
     * `group` (1..64 bytes) of `world` ranks, taking `batch` samples per batch (0: the
     * producer's batch size), with or without drop_last (0 or 1), waiting at most `timeout_ms`
     * for the group's other ranks; `resume` is the fingerprint of the state the rank restored
     * (ring/resume_state.h), 0 for a rank that starts fresh: the group's ranks must agree. */
    char group[TSOCK__PROTO_MAX_GROUP_NAME + 1];
    uint32_t rank, world, batch;
    uint8_t drop_last;
    uint32_t timeout_ms;
    uint64_t resume;
};

struct tsock__tensor_desc {
    char name[TSOCK_MAX_NAME + 1];
    uint8_t dtype;
    uint8_t ndim; /* per-sample dims, 0..TSOCK_MAX_DIMS */
    int64_t sample_shape[TSOCK_MAX_DIMS];
    uint64_t offset;       /* byte offset of this tensor inside a slot */
    uint64_t sample_bytes; /* bytes of one sample */
};

struct tsock__msg_welcome {
    uint64_t consumer_id;
    uint32_t batch_size; /* samples per slot at most */
    uint32_t slot_count;
    uint64_t slot_stride;  /* bytes from one slot to the next in the ring */
    uint64_t ring_bytes;   /* size of the ring object */
    uint32_t heartbeat_ms; /* producer's heartbeat interval */
    uint32_t device;       /* tsock_device of the ring */
    uint64_t samples;      /* samples per epoch of the producer's sampler; 0 in free mode */
    /* The whole dataset (every node's share) and the producer's node split, from which a rank
     * computes its share (dataset/groups.h). Free mode: dataset 0. With a sampler, samples is
     * this node's share: ceil(dataset / nodes). nodes >= 1, node_rank < nodes. */
    uint64_t dataset;
    uint32_t nodes, node_rank;
    /* The ring's attach blob: what the backend that made the ring needs to open it elsewhere.
     * Opaque here, and a view, never a copy: decoded, it points into the decoded buffer (valid
     * as long as that buffer); encoded, it is read from wherever the caller keeps it. Framing:
     * a host ring's blob is its shared-memory name (2..255 name bytes, one leading '/'); a
     * device ring's is TSOCK__PROTO_DEVICE_ID_SIZE + TSOCK__PROTO_HANDLE_SIZE * (1 + slot_count)
     * bytes, no handle all zero. */
    const uint8_t *attach;
    uint32_t attach_len;
    uint32_t tensor_count; /* 1..TSOCK_MAX_TENSORS */
    struct tsock__tensor_desc tensors[TSOCK_MAX_TENSORS];
    /* The dataset's class names (label i is the i-th), each 1..TSOCK__PROTO_MAX_CLASS_NAME name
     * bytes followed by a NUL, TSOCK__PROTO_MAX_CLASS_BYTES in all; empty when the producer
     * has none. A view like attach. */
    const uint8_t *classes;
    uint32_t classes_len;
};

struct tsock__msg_reject {
    int32_t code;                         /* a TSOCK_E_* code */
    char text[TSOCK__PROTO_MAX_TEXT + 1]; /* why, for the consumer's log ("" when the code says it
                                             all), 0..255 name bytes */
};

#define TSOCK__BATCH_EPOCH_END 1u /* flag: last batch of its epoch */
#define TSOCK__BATCH_HAS_IDS 2u   /* flag: the batch's sample ids follow its fields */
/* The most samples a BATCH with ids can have: 4 bytes each, the whole frame inside
 * TSOCK__PROTO_MAX_MESSAGE (12-byte header, 44-byte body). A producer whose batches are larger
 * refuses a consumer that asks for ids. */
#define TSOCK__BATCH_MAX_IDS ((TSOCK__PROTO_MAX_MESSAGE - TSOCK__PROTO_HEADER_SIZE - 44) / 4)

struct tsock__msg_batch {
    uint32_t slot;
    uint32_t samples;
    uint64_t seq;
    uint64_t epoch;
    uint64_t index_in_epoch;
    uint64_t position; /* stream position of the batch's first sample (samples published
                          before it, counted from the start of the stream) */
    uint32_t flags;
    /* With TSOCK__BATCH_HAS_IDS: the sample ids, `samples` little-endian u32s (4 * samples
     * bytes). A view, never a copy, like WELCOME's attach blob: decoded, it points into the
     * decoded frame; encoded, it is read from wherever the caller keeps it. NULL without the
     * flag. */
    const uint8_t *ids;
};

struct tsock__msg_release {
    uint32_t slot;
    uint64_t seq;
};

/* PAUSE and RESUME: the epochs the consumer finished, or gave up (tsock_consumer_end_epoch),
 * since it joined: a finite stream owes it the rest of the windows its join gave it
 * (engine/producer_api.c, epochs_owed). */
struct tsock__msg_pause {
    uint64_t epochs;
};

struct tsock__msg_shutdown {
    uint32_t reason;
    uint64_t epochs; /* epochs the producer published (whole ones), for the consumer's message */
};

struct tsock__msg_stats_request {
    uint64_t request_id; /* echoed by the reply, so a client can tell a late answer */
};

/* What a consumer knows about itself and the producer cannot see: its own batches (at its own
 * batch size) and samples returned by next, the epochs it completed, and the time it spent
 * blocked in next. */
struct tsock__msg_consumer_stats {
    uint64_t batches;
    uint64_t samples;
    uint64_t epochs;
    uint64_t wait_ns;
};

/* The group of the receiving rank is over: GROUP_LOST (ranks: the lost rank) or
 * GROUP_INCOMPLETE (ranks: those that did not join within `timeout_ms`, the group timeout that
 * ran out; 0 with GROUP_LOST). The ranks are global ranks, 1..TSOCK__PROTO_MAX_GROUP_RANKS of
 * them, strictly ascending, as little-endian u32s: a view like BATCH's ids (decoded, it points
 * into the frame; encoded, it is read from the caller's memory). */
struct tsock__msg_group_failed {
    int32_t code;
    uint32_t timeout_ms;
    uint32_t rank_count;
    const uint8_t *ranks;
};

/* A decoded message of any type. */
struct tsock__msg {
    uint16_t type;
    union {
        struct tsock__msg_hello hello;
        struct tsock__msg_welcome welcome;
        struct tsock__msg_reject reject;
        struct tsock__msg_batch batch;
        struct tsock__msg_release release;
        struct tsock__msg_pause pause; /* PAUSE and RESUME */
        struct tsock__msg_shutdown shutdown;
        struct tsock__msg_stats_request stats_request;
        struct tsock__msg_consumer_stats consumer_stats;
        struct tsock__msg_group_failed group_failed;
    } u;
};

/* STATS_REPLY is kept out of struct tsock__msg: at up to 14 KB it would make every message
 * (each BATCH, RELEASE and HEARTBEAT, zeroed on decode) that much larger, and only a stats
 * client ever receives one. It has its own encoder and decoder below. */
#define TSOCK__STATS_MAX_CONSUMERS 64 /* entries in one reply: a producer's consumer limit */
#define TSOCK__STATS_PAUSED 1u        /* consumer flag: paused between epochs */
#define TSOCK__STATS_REPORTED 2u      /* consumer flag: `own` holds figures it reported */

struct tsock__stats_producer {
    uint32_t pid;
    uint32_t slots;      /* 1..1024 */
    uint32_t free_slots; /* neither held by consumers nor being filled; <= slots */
    uint32_t held;       /* held by consumers; held + free_slots <= slots */
    uint64_t batches, samples, epochs, released;
    uint64_t joined, lost, bad_messages;
    uint64_t wait_ns;   /* time blocked in acquire waiting for a free slot */
    uint64_t uptime_ns; /* since start */
};

struct tsock__stats_consumer {
    uint64_t id; /* unique within a reply */
    uint32_t pid;
    uint32_t flags; /* TSOCK__STATS_PAUSED, TSOCK__STATS_REPORTED */
    char name[TSOCK_MAX_NAME + 1];
    uint64_t batches, samples, released; /* producer batches sent to it, and released */
    uint32_t held;                       /* slots it holds; <= the producer's slots */
    uint64_t lag;        /* newest published seq minus the oldest seq it holds (0: none) */
    uint64_t rate_milli; /* batches released per second x 1000, over the last interval */
    struct tsock__msg_consumer_stats own; /* as it last reported them */
};

struct tsock__stats_reply {
    uint64_t request_id;
    struct tsock__stats_producer producer;
    char status[TSOCK_MAX_STATUS + 1]; /* the application's text, NUL-terminated */
    uint32_t consumer_count;           /* 0..TSOCK__STATS_MAX_CONSUMERS */
    struct tsock__stats_consumer consumers[TSOCK__STATS_MAX_CONSUMERS];
};

/* Encodes `msg` into buf. Returns the byte count, -ENOBUFS when buf is too small, or -EINVAL
 * when msg itself is invalid (unknown type, name too long, too many tensors/dims). */
int tsock__msg_encode(const struct tsock__msg *msg, uint8_t *buf, size_t size);

/* Decodes one message from untrusted bytes into *msg. Returns 0, TSOCK_E_VERSION when the magic
 * is right but the version is not, or TSOCK_E_PROTOCOL for anything malformed: wrong magic,
 * length mismatch, truncated or trailing bytes, unknown type, out-of-range fields, names that
 * are not NUL-free printable strings. Never reads outside [buf, buf+size). On success `type`
 * and the union member of that type are fully written (unused bytes zeroed); the rest of the
 * union is left as it was. */
int tsock__msg_decode(const uint8_t *buf, size_t size, struct tsock__msg *msg);

/* Encodes a STATS_REPLY, a whole frame with its header. Returns the byte count, -ENOBUFS, or
 * -EINVAL when the reply breaks a rule the decoder checks. */
int tsock__stats_reply_encode(const struct tsock__stats_reply *r, uint8_t *buf, size_t size);

/* Decodes a STATS_REPLY frame from untrusted bytes, with the same guarantees and return codes
 * as tsock__msg_decode (which itself refuses STATS_REPLY frames: only a stats client, using
 * this function, ever expects one). */
int tsock__stats_reply_decode(const uint8_t *buf, size_t size, struct tsock__stats_reply *r);

/* The message type of a frame whose header is well formed (size, magic, version, length), or
 * TSOCK_E_PROTOCOL / TSOCK_E_VERSION as the decoders would report it. */
int tsock__msg_peek_type(const uint8_t *buf, size_t size);

/* Whether `len` bytes are status text as STATS_REPLY carries it: valid UTF-8 (no overlong
 * forms, no surrogates, nothing above U+10FFFF) with no control character (U+0000..U+001F,
 * U+007F). The length bound is checked separately. */
int tsock__proto_text_ok(const char *s, size_t len);

/* A short name for a message type, for logs ("BATCH"), or "?". */
const char *tsock__msg_type_name(int type);

/* The number of class names in a WELCOME's class block, or -1 when it is malformed. */
long tsock__proto_class_count(const uint8_t *blob, uint32_t len);

#endif
