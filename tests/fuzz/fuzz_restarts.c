/* libFuzzer target for tsock-mkdataset's restart-marker transcode (producer/mkdataset/
 * restarts.c), which reads a user's dataset: any bytes at all.
 *
 * Any input must be transcoded or refused without touching memory outside it, without
 * crashing or leaking, and within bounded memory (a header claiming a huge image is refused
 * before libjpeg allocates for it). On top, a transcode that succeeds must be consistent:
 * the output is a JPEG with a DRI segment holding the interval asked for (the function has
 * already checked that it decodes to the input's pixels), and transcoding it again with the
 * same interval succeeds.
 *
 * Built with -fsanitize=fuzzer as fuzz_restarts, and with replay_main.c as replay_restarts,
 * which replays corpus/image (tiny JPEGs of every kind and broken ones) and corpus/restarts
 * (a JPEG with restart markers already, a header claiming 60000 x 60000 pixels) in the normal
 * test run.
 */
#include <stdint.h>
#include <stdlib.h>

#include "restarts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The interval of the DRI segment before the first SOS, 0 when there is none. */
static unsigned
dri_interval(const uint8_t *p, size_t n)
{
    for (size_t i = 2; i + 4 <= n && p[i] == 0xFF;) {
        unsigned marker = p[i + 1], len = ((unsigned)p[i + 2] << 8) | p[i + 3];
        if (marker == 0xDD && len == 4 && i + 6 <= n)
            return ((unsigned)p[i + 4] << 8) | p[i + 5];
        if (marker == 0xDA)
            break;
        i += 2 + len;
    }
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct bytes out = {0}, again = {0};
    char err[512];
    /* The interval from the last byte, so that the fuzzer explores several. */
    unsigned interval = size ? 1u + data[size - 1] % 16u : 1u;

    if (jpeg_add_restarts(data, size, interval, &out, err, sizeof err) == 0) {
        if (out.len < 4 || out.p[0] != 0xFF || out.p[1] != 0xD8 ||
            dri_interval(out.p, out.len) != interval)
            abort();
        if (jpeg_add_restarts(out.p, out.len, interval, &again, err, sizeof err) != 0)
            abort();
    }
    bytes_free(&out);
    bytes_free(&again);
    return 0;
}
