/* libFuzzer target for the wire-message decoder (libtsock/proto).
 *
 * Any input must decode without touching memory outside it. An accepted input must be the
 * canonical encoding of what it decodes to: re-encoding gives back the same bytes, and decoding
 * those gives back the same message. A mismatch means the encoder and the decoder disagree on
 * a rule, and aborts so the fuzzer reports it. Built with -fsanitize=fuzzer as fuzz_proto, and
 * with replay_main.c as replay_proto, which replays the corpus in the normal test run.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* STATS_REPLY has a decoder of its own; the same promises hold for it. */
static int
test_stats_reply(const uint8_t *data, size_t size)
{
    static uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    static struct tsock__stats_reply first, again;
    int r = tsock__stats_reply_decode(data, size, &first);
    int n;

    if (r != 0) {
        if (r != TSOCK_E_PROTOCOL && r != TSOCK_E_VERSION)
            abort();
        return 0;
    }
    n = tsock__stats_reply_encode(&first, buf, sizeof buf);
    if (n < 0 || (size_t)n != size || memcmp(buf, data, size) != 0)
        abort();
    if (tsock__stats_reply_decode(buf, (size_t)n, &again) != 0 ||
        memcmp(&first, &again, sizeof again) != 0)
        abort();
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t buf[TSOCK__PROTO_MAX_MESSAGE];
    static struct tsock__msg first, again;
    /* The decoder writes only the decoded type's part of the message: start both from zero so
     * that they compare whole. */
    memset(&first, 0, sizeof first);
    memset(&again, 0, sizeof again);
    int r = tsock__msg_decode(data, size, &first);
    int n;

    if (tsock__msg_peek_type(data, size) == TSOCK__MSG_STATS_REPLY) {
        if (r != TSOCK_E_PROTOCOL) /* the generic decoder never takes one */
            abort();
        return test_stats_reply(data, size);
    }

    if (r != 0) {
        if (r != TSOCK_E_PROTOCOL && r != TSOCK_E_VERSION)
            abort(); /* the decoder promises one of these two */
        return 0;
    }
    n = tsock__msg_encode(&first, buf, sizeof buf);
    if (n < 0 || (size_t)n != size || memcmp(buf, data, size) != 0)
        abort();
    /* The decoder zeroes the decoded type's part before filling it in, so two decodings of the
     * same frame are equal byte for byte, names' tails and unused dims included. */
    if (tsock__msg_decode(buf, (size_t)n, &again) != 0)
        abort();
    /* A WELCOME's attach blob and class names are views of the bytes decoded: equal content,
     * other buffer. */
    if (first.type == TSOCK__MSG_WELCOME) {
        const struct tsock__msg_welcome *a = &first.u.welcome, *b = &again.u.welcome;
        if (a->attach_len != b->attach_len ||
            (a->attach_len && memcmp(a->attach, b->attach, a->attach_len) != 0))
            abort();
        again.u.welcome.attach = first.u.welcome.attach;
        if (a->classes_len != b->classes_len ||
            (a->classes_len && memcmp(a->classes, b->classes, a->classes_len) != 0))
            abort();
        again.u.welcome.classes = first.u.welcome.classes;
    }
    /* So are a BATCH's sample ids. */
    if (first.type == TSOCK__MSG_BATCH) {
        const struct tsock__msg_batch *a = &first.u.batch, *b = &again.u.batch;
        if (!a->ids != !b->ids || (a->ids && memcmp(a->ids, b->ids, (size_t)a->samples * 4) != 0))
            abort();
        again.u.batch.ids = first.u.batch.ids;
    }
    /* And a GROUP_FAILED's ranks. */
    if (first.type == TSOCK__MSG_GROUP_FAILED) {
        const struct tsock__msg_group_failed *a = &first.u.group_failed, *b = &again.u.group_failed;
        if (memcmp(a->ranks, b->ranks, (size_t)a->rank_count * 4) != 0)
            abort();
        again.u.group_failed.ranks = first.u.group_failed.ranks;
    }
    if (memcmp(&first, &again, sizeof again) != 0)
        abort();
    return 0;
}
