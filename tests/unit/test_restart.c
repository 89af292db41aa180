/* Restart intervals as entry points (libtsock/image/restart.c, jpeg.c's open_window): a JPEG
 * with restart markers is decoded from the intervals under the crop only, and gives exactly
 * the bytes of the ordinary partial decode and of a full decode (TSOCK__DECODE_NO_PARTIAL)
 * for every chroma subsampling, interval layout, crop, DCT scale and flip; files whose markers
 * do not follow their header, truncated files and layouts without usable entry points are
 * decoded the ordinary way, with the same bytes.
 *
 * Inputs are encoded here with libjpeg's compressor (test_jpeg.h: restart_interval /
 * restart_in_rows), from synthetic pictures and from the photographs under
 * /usr/share/backgrounds. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <turbojpeg.h>

#include "check.h"
#include "core/core.h"
#include "image/image.h"
#include "image/image_int.h"
#include "photos.h"
#include "test_jpeg.h"

/* Decodes `box` resized to ow x oh three ways: by default (restart window where it can), the
 * ordinary partial decode, and every row and column. The three must be the same bytes.
 * Returns whether the default decode used the restart window. */
static int
same_three_ways(struct tsock__decoder *d, const uint8_t *jpeg, size_t n, struct tsock__box box,
                int ow, int oh, int flip, const char *what)
{
    size_t len = (size_t)ow * oh * 3;
    uint8_t *a = malloc(len), *b = malloc(len), *c = malloc(len);
    static const int flags[3] = {0, TSOCK__DECODE_NO_RESTARTS, TSOCK__DECODE_NO_PARTIAL};
    uint8_t *out[3] = {a, b, c};
    int windowed = 0;

    for (int i = 0; i < 3; i++) {
        tsock__decoder_set_flags(d, flags[i]);
        CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &box, ow, oh, flip, out[i]), 0);
        if (i == 0)
            windowed = tsock__decoder_report(d)->restart_window;
        else
            CHECK_EQ(tsock__decoder_report(d)->restart_window, 0);
    }
    tsock__decoder_set_flags(d, 0);
    if (memcmp(a, b, len) != 0 || memcmp(a, c, len) != 0)
        fprintf(stderr, "%s: box %d,%d %dx%d -> %dx%d flip %d: the restart window differs\n", what,
                box.x, box.y, box.w, box.h, ow, oh, flip);
    CHECK(memcmp(a, b, len) == 0);
    CHECK(memcmp(a, c, len) == 0);
    free(a);
    free(b);
    free(c);
    return windowed;
}

/* Every layout, with intervals of 1, 2 and 3 MCUs (3 divides no row here: ordinary decode),
 * of one row and of two rows; boxes at the corners, edges and middle, small and large (DCT
 * scaled), enlarged and reduced, flipped or not. */
static void
test_layouts(struct tsock__decoder *d)
{
    static const struct {
        int interval, rows;
    } spacing[] = {{1, 0}, {2, 0}, {3, 0}, {0, 1}, {0, 2}};
    static const struct tsock__box boxes[] = {
        {0, 0, 60, 40},     {200, 150, 120, 90}, {300, 0, 100, 300}, {0, 250, 410, 80},
        {37, 61, 229, 173}, {390, 290, 21, 19},  {0, 0, 411, 333},   {5, 3, 403, 327},
    };
    static const int sizes[][2] = {{41, 29}, {224, 224}, {130, 70}, {23, 23}};
    const int w = 411, h = 333;
    static const int mcus_x[L_COUNT] = {26, 26, 52, 13, 52, 52}; /* 411 / MCU width, rounded up */
    int windowed = 0, expected = 0;

    for (int l = 0; l < L_COUNT; l++)
        for (size_t s = 0; s < sizeof spacing / sizeof *spacing; s++) {
            size_t n;
            uint8_t *jpeg = encode_picture(w, h, (enum layout)l, spacing[s].interval,
                                           spacing[s].rows, (uint32_t)(l * 7 + s), &n);
            char what[64];
            snprintf(what, sizeof what, "%s, interval %d, rows %d", layout_name[l],
                     spacing[s].interval, spacing[s].rows);
            for (size_t b = 0; b < sizeof boxes / sizeof *boxes; b++) {
                const int *sz = sizes[b % 4];
                int got = same_three_ways(d, jpeg, n, boxes[b], sz[0], sz[1], (int)(b & 1), what);
                windowed += got;
                /* Box 1, away from the top-left, must use the window wherever the intervals
                 * tile the grid; an interval of 3 MCUs (52, 26 or 13 per row) never does. */
                if (spacing[s].interval == 3)
                    CHECK_EQ(got, 0);
                if (b == 1 && (spacing[s].rows > 0 || mcus_x[l] % spacing[s].interval == 0)) {
                    CHECK_EQ(got, 1);
                    expected++;
                }
            }
            free(jpeg);
        }
    fprintf(stderr, "layouts: %d decodes used the restart window (%d required)\n", windowed,
            expected);
    CHECK(windowed >= expected);
}

/* The probe reads what the index needs; the index refuses what it cannot use. */
static void
test_index(void)
{
    struct tsock__restart_index ix = {0};
    struct tsock__image_info info;
    size_t n;
    /* 7 x 4 MCUs: an interval of 14 is two whole rows. */
    uint8_t *jpeg = encode_picture(100, 50, L_420, 14, 0, 1, &n);

    CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
    CHECK_EQ(info.restart_interval, 14);
    CHECK_EQ(info.sof_marker, 0xC0);
    CHECK_EQ(info.max_h_samp, 2);
    CHECK_EQ(info.max_v_samp, 2);
    CHECK_EQ(info.scan_components, 3);
    CHECK_EQ(tsock__restart_index_build(jpeg, n, &info, &ix), 0);
    CHECK_EQ(ix.count, 2);
    CHECK_EQ(ix.rows_per_interval, 2);
    CHECK_EQ(ix.mcus_x, 7);

    free(jpeg);

    /* A file with an interval of 1 claiming 8000 x 8000 pixels: 250,000 intervals, which its
     * 2 kB cannot hold, are refused before any room is made for them. */
    jpeg = encode_picture(100, 50, L_420, 1, 0, 1, &n);
    CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
    jpeg[info.sof_payload + 1] = 8000 >> 8;
    jpeg[info.sof_payload + 2] = 8000 & 255;
    jpeg[info.sof_payload + 3] = 8000 >> 8;
    jpeg[info.sof_payload + 4] = 8000 & 255;
    CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
    size_t cap = ix.buf.cap;
    CHECK_EQ(tsock__restart_index_build(jpeg, n, &info, &ix), -EPROTO);
    CHECK_EQ(ix.buf.cap, cap);
    free(jpeg);

    jpeg = encode_picture(100, 50, L_420, 0, 0, 1, &n); /* no restart markers */
    CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
    CHECK_EQ(info.restart_interval, 0);
    CHECK_EQ(tsock__restart_index_build(jpeg, n, &info, &ix), -ENOENT);
    free(jpeg);

    jpeg = encode_picture(100, 50, L_420, 5, 0, 1, &n); /* 5 neither divides nor spans 7 */
    CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
    CHECK_EQ(tsock__restart_index_build(jpeg, n, &info, &ix), -ENOENT);
    free(jpeg);

    /* Progressive, with restart markers: not indexed. */
    tjhandle t = tjInitCompress();
    uint8_t *pix = picture(64, 64, 3, 3);
    unsigned char *buf = NULL;
    unsigned long len = 0;
    CHECK_EQ(
        tjCompress2(t, pix, 64, 0, 64, TJPF_RGB, &buf, &len, TJSAMP_420, 90, TJFLAG_PROGRESSIVE),
        0);
    CHECK_EQ(tsock__image_probe(buf, len, &info), 0);
    CHECK_EQ(tsock__restart_index_build(buf, len, &info, &ix), -ENOENT);
    tjFree(buf);
    tjDestroy(t);
    free(pix);
    tsock__restart_index_free(&ix);
}

/* Damaged markers and data: the decode falls back to the ordinary path (or, with fill bytes,
 * which are legal, keeps the window) and still gives the bytes of a full decode. */
static void
test_damage(struct tsock__decoder *d)
{
    const struct tsock__box box = {150, 120, 100, 90};
    struct tsock__image_info info;
    size_t n;
    uint8_t *jpeg = encode_picture(300, 240, L_420, 1, 0, 11, &n);
    CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
    size_t m = marker_at(jpeg, n, info.header_size, 40);

    /* A marker out of sequence (RST0 where RST1 belongs, or the like). */
    uint8_t *bad = malloc(n);
    memcpy(bad, jpeg, n);
    bad[m + 1] = (uint8_t)(0xD0 + ((bad[m + 1] - 0xD0 + 3) & 7));
    CHECK_EQ(same_three_ways(d, bad, n, box, 64, 64, 0, "marker out of sequence"), 0);

    /* A marker libjpeg does not expect inside a scan (DHT). */
    memcpy(bad, jpeg, n);
    bad[m + 1] = 0xC4;
    uint8_t out[64 * 64 * 3];
    tsock__decoder_set_flags(d, 0);
    int r = tsock__decode_crop_resize(d, bad, n, &box, 64, 64, 0, out);
    CHECK_EQ(tsock__decoder_report(d)->restart_window, 0);
    tsock__decoder_set_flags(d, TSOCK__DECODE_NO_RESTARTS);
    CHECK_EQ(tsock__decode_crop_resize(d, bad, n, &box, 64, 64, 0, out), r);
    tsock__decoder_set_flags(d, 0);

    /* Corrupt entropy-coded data inside an interval under the window, markers intact. */
    memcpy(bad, jpeg, n);
    size_t m2 = marker_at(jpeg, n, info.header_size, 180);
    for (size_t i = m2 - 6; i < m2 - 2; i++)
        bad[i] = bad[i] == 0xFF ? 0xFF : (uint8_t)(bad[i] ^ 0x5A);
    same_three_ways(d, bad, n, box, 64, 64, 0, "corrupt interval");

    /* Truncated: no EOI, so the decode goes to the end for the verdict and uses no window. */
    size_t cut = n - n / 10;
    CHECK_EQ(same_three_ways(d, jpeg, cut, box, 64, 64, 0, "truncated"), 0);

    /* Fill bytes (FF FF ..) before markers are legal: the window is still used. */
    size_t o;
    uint8_t *filled = with_fill_bytes(jpeg, n, info.header_size, 5, 40, &o);
    CHECK_EQ(same_three_ways(d, filled, o, box, 64, 64, 1, "fill bytes"), 1);

    free(filled);
    free(bad);
    free(jpeg);
}

/* Photographs (tests/unit/photos.h), re-encoded with a restart marker every MCU: the train and
 * val presets give the bytes of a full decode, and use the window. */
#define MAX_PHOTOS 4

/* A photograph's pixels, scaled by 1/4 so that the test stays quick (and the train crops
 * still reach DCT scaling on the larger ones). */
static uint8_t *
photo_pixels(const char *path, int *w, int *h)
{
    size_t n = 0;
    uint8_t *data = test_photos_read(path, &n), *pix = NULL;
    tjhandle t = tjInitDecompress();
    int sub, cs;
    tjscalingfactor quarter = {1, 4};
    if (data && tjDecompressHeader3(t, data, (unsigned long)n, w, h, &sub, &cs) == 0) {
        *w = TJSCALED(*w, quarter);
        *h = TJSCALED(*h, quarter);
        pix = malloc((size_t)*w * *h * 3);
        if (tjDecompress2(t, data, (unsigned long)n, pix, *w, 0, *h, TJPF_RGB, 0) != 0) {
            free(pix);
            pix = NULL;
        }
    }
    tjDestroy(t);
    free(data);
    return pix;
}

static void
test_photos(struct tsock__decoder *d)
{
    struct test_photos ph;
    if (test_photos_collect(&ph) == 0)
        return;
    struct tsock__train_params p = {224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 1};
    uint8_t *a = malloc(224 * 224 * 3), *b = malloc(224 * 224 * 3);
    int files = 0, windowed = 0, decodes = 0;
    long differing = 0;
    for (int i = 0; i < ph.n && files < MAX_PHOTOS; i++) {
        int w, h;
        size_t n;
        uint8_t *pix = photo_pixels(ph.path[i], &w, &h);
        if (!pix)
            continue;
        uint8_t *jpeg = encode(pix, w, h, L_420, 1, 0, 0, &n);
        free(pix);
        files++;
        for (uint64_t k = 0; k < 12; k++, decodes++) {
            struct tsock__rng rng;
            struct tsock__box box;
            int flipped;
            tsock__rng_seed(&rng, tsock__mix64(k * 131 + (uint64_t)i));
            int r = k < 11 ? tsock__preset_train(d, jpeg, n, &rng, &p, a, &box, &flipped)
                           : tsock__preset_val(d, jpeg, n, 256, 224, a);
            CHECK_EQ(r, 0);
            windowed += tsock__decoder_report(d)->restart_window;
            tsock__decoder_set_flags(d, TSOCK__DECODE_NO_PARTIAL);
            r = k < 11 ? tsock__decode_crop_resize(d, jpeg, n, &box, 224, 224, flipped, b)
                       : tsock__preset_val(d, jpeg, n, 256, 224, b);
            CHECK_EQ(r, 0);
            tsock__decoder_set_flags(d, 0);
            for (size_t j = 0; j < 224 * 224 * 3; j++)
                differing += a[j] != b[j];
        }
        free(jpeg);
    }
    fprintf(stderr, "photographs: %d files, %d decodes, %d from the restart window, %ld differ\n",
            files, decodes, windowed, differing);
    CHECK(files > 0);
    CHECK(windowed > decodes / 2);
    CHECK_EQ(differing, 0);
    test_photos_free(&ph);
    free(a);
    free(b);
}

int
main(void)
{
    struct tsock__decoder *d;

    CHECK_EQ(tsock__decoder_create(&d), 0);
    test_index();
    test_layouts(d);
    test_damage(d);
    test_photos(d);
    tsock__decoder_destroy(d);
    return CHECK_DONE();
}
