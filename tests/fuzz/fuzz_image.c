/* libFuzzer target for the image decoders (libtsock/image): header probe, then decode, crop,
 * resize and flip of whatever the probe accepts.
 *
 * Any input must be probed and decoded without touching memory outside it, without crashing,
 * and with one of the documented error codes. Two properties are checked on top, each aborting
 * so that the fuzzer reports it:
 *  - the probe's answer is consistent (positive sizes, a header inside the data);
 *  - partial decoding is exact: the same crop decoded with and without partial decoding gives
 *    the same return code and, on success, the same bytes;
 *  - so are the AVX2 resampling passes: without them (SSE2 and plain C) the bytes are the same;
 *  - so is tsock's own Huffman decoder (entropy.c): with libjpeg's alone
 *    (TSOCK__DECODE_NO_OWN_ENTROPY), partial and whole, the return code and bytes are the same
 *    (tsock's decoder must decode valid data exactly and give anything else back to libjpeg);
 *  - so are its skip tables (several symbols per lookup in the MCUs it drops, made once a
 *    file's tables are used a second time): without them (TSOCK__DECODE_NO_SKIP_TABLE) the
 *    return code and bytes are the same;
 *  - and so are its entry points: learnt by a decode of the whole image, then used twice by
 *    the crop's (the second time from the crop starts the first kept).
 * Decompression bombs: the decoder refuses images over 4096 x 4096 pixels (-EFBIG) before
 * libjpeg or libpng allocate anything for them; the default limit in the library is PIL's.
 *
 * Built with -fsanitize=fuzzer as fuzz_image, and with replay_main.c as replay_image, which
 * replays corpus/image in the normal test run. The seed corpus holds tiny JPEGs (4:2:0, 4:2:2,
 * 4:4:4, gray, CMYK, progressive) and PNGs (RGB, RGBA, gray, palette) written with TurboJPEG
 * and libpng, plus broken ones: truncated at several points, header only, bad CRC, empty,
 * garbage, other formats.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OUT_W 24
#define OUT_H 16

static int
allowed(int r)
{
    return r == 0 || r == -ENODATA || r == -EILSEQ || r == -ENOTSUP || r == -EPROTO ||
           r == -EFBIG || r == -ENOMEM;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* One decoder for the whole run, as a worker thread keeps one: reuse is part of what is
     * tested (state must not leak from one image into the next). */
    static struct tsock__decoder *d;
    static uint8_t a[OUT_W * OUT_H * 3], b[OUT_W * OUT_H * 3];
    struct tsock__image_info info;
    struct tsock__box crop;
    int r, r2;

    if (!d) {
        if (tsock__decoder_create(&d) != 0)
            abort();
        tsock__decoder_set_limits(d, 4096u * 4096u, 0);
    }
    r = tsock__image_probe(data, size, &info);
    if (r != 0) {
        if (r != -ENODATA && r != -EILSEQ && r != -ENOTSUP && r != -EPROTO)
            abort();
        return 0;
    }
    if (info.width < 1 || info.height < 1 || info.header_size > size ||
        (info.format != TSOCK__IMAGE_JPEG && info.format != TSOCK__IMAGE_PNG))
        abort();

    /* A crop in the lower right part, so that partial decoding skips rows and columns. */
    crop.x = info.width / 3;
    crop.y = info.height / 3;
    crop.w = info.width - crop.x;
    crop.h = info.height - crop.y;
    tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE);
    r = tsock__decode_crop_resize(d, data, size, &crop, OUT_W, OUT_H, 1, a);
    if (!allowed(r))
        abort();
    if (r == -EFBIG)
        return 0;
    /* The same crop another way must give the same return code and bytes: every row and column
     * (no partial decode); libjpeg's Huffman decoder instead of tsock's, partial and whole;
     * tsock's without its skip tables; the plain resampling passes instead of the SIMD ones. */
    static const int other_ways[] = {
        TSOCK__DECODE_NO_PARTIAL,
        TSOCK__DECODE_NO_OWN_ENTROPY,
        TSOCK__DECODE_NO_PARTIAL | TSOCK__DECODE_NO_OWN_ENTROPY,
        TSOCK__DECODE_NO_SKIP_TABLE,
        TSOCK__DECODE_NO_AVX2,
    };
    for (size_t i = 0; i < sizeof other_ways / sizeof *other_ways; i++) {
        tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE | other_ways[i]);
        r2 = tsock__decode_crop_resize(d, data, size, &crop, OUT_W, OUT_H, 1, b);
        if (r2 != r || (r == 0 && memcmp(a, b, sizeof a) != 0))
            abort();
    }

    /* Entry points learnt by a decode of the whole image, then used by the crop's, twice. */
    struct tsock__entry_points *pts = tsock__entry_points_create();
    if (!pts)
        abort();
    tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE);
    tsock__decoder_set_entry_points(d, pts);
    if (!allowed(tsock__decode_crop_resize(d, data, size, NULL, OUT_W, OUT_H, 0, b)))
        abort();
    for (int k = 0; k < 2; k++) {
        r2 = tsock__decode_crop_resize(d, data, size, &crop, OUT_W, OUT_H, 1, b);
        if (r2 != r || (r == 0 && memcmp(a, b, sizeof a) != 0))
            abort();
    }
    tsock__decoder_set_entry_points(d, NULL);
    tsock__entry_points_destroy(pts);

    /* The fast path as the presets use it (DCT scaling where the crop allows). */
    tsock__decoder_set_flags(d, 0);
    if (!allowed(tsock__decode_crop_resize(d, data, size, NULL, OUT_W, OUT_H, 0, a)))
        abort();
    return 0;
}
