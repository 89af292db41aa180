/* A consumer's saved position (docs/semantics.md, "Resume"): the codec of the opaque bytes
 * tsock_consumer_save_state writes and tsock_consumer_restore_state reads, and the bitmap of
 * sample ids delivered in the current epoch that it describes.
 *
 * Pure code: no I/O, no locks, allocation only in decode. The decoder takes untrusted bytes
 * (a file a user points at): it never reads outside them, never trusts a length or count, and
 * accepts only what the encoder can produce for a valid state, so decode(encode(s)) == s and
 * encode(decode(b)) == b for every accepted b (the fuzz target checks both).
 *
 * Layout, little-endian (docs/semantics.md has the table):
 *   0  u32 magic "TSRS"      4  u16 version (1 or 2)  6  u16 flags (bit 0: drop_last)
 *   8  u64 dataset size n    16 u64 epoch             24 u32 batch size
 *   28 u32 group bytes G: 0 (a solo consumer), or 20 in version 2 (a rank of a group)
 *   32 u64 layout fingerprint 40 u64 delivered count d 48 u8 encoding
 *   49 the group block (G bytes): u32 world, u32 nodes, u32 node_rank, u64 index
 *   49 + G  the delivered set: nothing (encoding 0, d == 0), a bitmap of n bits, bit i of byte
 *          i/8 for id i (encoding 1), or d LEB128 varints, the first id then each gap minus
 *          one (encoding 2)
 *   end u32 CRC-32 (IEEE) of every byte before it
 * The encoder picks the smaller of the two set encodings (the bitmap on a tie).
 *
 * Version 1 is version 2 without groups: it still decodes (a solo consumer's state saved by
 * the previous library), and decode keeps the version so that re-encoding gives the same bytes.
 * For a rank, the set is its GROUP's: every sample of the group epoch's batches that the
 * group's ranks consumed up to the rank's step (docs/semantics.md, "Resuming a group").
 */
#ifndef TSOCK_RESUME_STATE_H
#define TSOCK_RESUME_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "tsock/tsock.h" /* TSOCK_E_BAD_STATE */

#define TSOCK__STATE_MAGIC 0x53525354u /* "TSRS" read as a little-endian u32 */
#define TSOCK__STATE_VERSION 2
#define TSOCK__STATE_HEADER_SIZE 49
#define TSOCK__STATE_GROUP_SIZE 20
#define TSOCK__STATE_MAX_SAMPLES ((uint64_t)1 << 32) /* the sampler's bound: ids fit a u32 */
#define TSOCK__STATE_DROP_LAST 1u

enum tsock__state_encoding {
    TSOCK__STATE_SET_NONE = 0,
    TSOCK__STATE_SET_BITMAP = 1,
    TSOCK__STATE_SET_DELTAS = 2
};

/* What a state says. For encode, `bits` is the delivered bitmap (n bits, (n + 7) / 8 bytes,
 * bits past n zero) holding exactly `delivered` set bits. Decode fills `ids` instead. */
struct tsock__resume_state {
    int version;      /* encode: 0 writes TSOCK__STATE_VERSION; decode: the state's (1 or 2) */
    uint64_t samples; /* n, 1..TSOCK__STATE_MAX_SAMPLES */
    uint64_t epoch;   /* the epoch in progress (the next one at an epoch boundary) */
    uint32_t batch;   /* the consumer's batch size, >= 1 */
    int drop_last;
    uint64_t layout;    /* tsock__state_fingerprint of the producer's tensors */
    uint64_t delivered; /* samples of `epoch` returned by next (a rank: its group consumed):
                           a multiple of batch, < n */
    const uint8_t *bits;
    /* A rank of a group (version 2 only; all zero for a solo consumer): the group's world size
     * when saved (>= 1), the producer's node count (>= 1) and node rank (< nodes), and the
     * batches the rank had delivered in `epoch` (0 exactly when delivered is 0, and at most
     * delivered / batch: each step of the group consumes at least one block). */
    int group;
    uint32_t world, nodes, node_rank;
    uint64_t index;
};

/* Bytes the encoding of s takes. */
size_t tsock__state_size(const struct tsock__resume_state *s);

/* Encodes s into buf. Returns the byte count, -EMSGSIZE when cap is too small (nothing
 * written then; tsock__state_size says how much is needed), -EINVAL when s is not a valid
 * state (the rules decode enforces). */
long tsock__state_encode(const struct tsock__resume_state *s, uint8_t *buf, size_t cap);

/* Decodes untrusted bytes. On success returns 0, fills *s (bits NULL) and sets *ids to a
 * malloc'ed, sorted array of the s->delivered ids (NULL when there are none), which the caller
 * frees. Returns TSOCK_E_BAD_STATE and points *why at a static sentence naming the first
 * problem (truncated, not a state, other version, checksum, a field out of range, a set that
 * disagrees with its count), or -ENOMEM. */
int tsock__state_decode(const uint8_t *buf, size_t len, struct tsock__resume_state *s,
                        uint32_t **ids, const char **why);

/* CRC-32 (IEEE 802.3, the zlib one) of p[0, n), continued from `crc` (0 to start). */
uint32_t tsock__crc32(uint32_t crc, const void *p, size_t n);

/* A rank's restored position as its group's ranks compare it (HELLO, docs/protocol.md): a
 * non-zero hash of the group block, the epoch and the delivered ids (sorted), equal for every
 * rank that saved at the same step of the same group epoch. 0 is reserved for "not restored". */
uint64_t tsock__state_group_fingerprint(const struct tsock__resume_state *s, const uint32_t *ids);

/* A 64-bit FNV-1a hash of p[0, n), continued from `h` (TSOCK__FP_START to start): the engine
 * folds the producer's tensor names, dtypes and shapes into the layout fingerprint. */
#define TSOCK__FP_START 0xcbf29ce484222325ull
uint64_t tsock__state_fingerprint(uint64_t h, const void *p, size_t n);

/* The delivered bitmap. */
static inline int
tsock__bit_test(const uint8_t *bits, uint64_t i)
{
    return (bits[i >> 3] >> (i & 7)) & 1;
}

static inline void
tsock__bit_set(uint8_t *bits, uint64_t i)
{
    bits[i >> 3] |= (uint8_t)(1u << (i & 7));
}

#endif
