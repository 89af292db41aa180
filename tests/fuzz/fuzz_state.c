/* libFuzzer target for the consumer-state decoder (libtsock/ring/resume_state.c), which reads
 * files a user points tsock_consumer_restore_state or tsock-consume --resume at.
 *
 * Any input must decode without touching memory outside it, and fail only with
 * TSOCK_E_BAD_STATE (with a reason) or -ENOMEM. An accepted input must be the canonical
 * encoding of what it decodes to: the ids sorted, unique and below the dataset size, and
 * re-encoding them gives back the same bytes. Built with -fsanitize=fuzzer as fuzz_state, and
 * with replay_main.c as replay_state, which replays the corpus in the normal test run.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ring/resume_state.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tsock__resume_state s;
    uint32_t *ids = NULL;
    const char *why = NULL;
    int r = tsock__state_decode(data, size, &s, &ids, &why);
    if (r != 0) {
        if ((r != TSOCK_E_BAD_STATE || !why) && r != -ENOMEM)
            abort();
        if (ids)
            abort();
        return 0;
    }
    /* The bitmap is bounded by the input: a delivered id needs at least one input bit. */
    uint8_t *bits = calloc((size_t)((s.samples + 7) / 8), 1);
    uint8_t *again = malloc(size ? size : 1);
    if (!bits || !again)
        abort();
    for (uint64_t i = 0; i < s.delivered; i++) {
        if (ids[i] >= s.samples || (i > 0 && ids[i] <= ids[i - 1]))
            abort();
        tsock__bit_set(bits, ids[i]);
    }
    s.bits = bits;
    if (tsock__state_size(&s) != size || tsock__state_encode(&s, again, size) != (long)size ||
        memcmp(again, data, size) != 0)
        abort();
    free(again);
    free(bits);
    free(ids);
    return 0;
}
