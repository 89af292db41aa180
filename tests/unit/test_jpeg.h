/* JPEGs for the image tests, written with libjpeg's compressor: a synthetic picture with
 * edges, gradients and grain, in every chroma layout, with or without restart markers. */
#ifndef TSOCK_TEST_JPEG_H
#define TSOCK_TEST_JPEG_H

#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "core/core.h"

enum layout { L_420, L_422, L_444, L_411, L_GRAY, L_CMYK, L_COUNT };
static const char *const layout_name[L_COUNT] = {"420", "422", "444", "411", "gray", "cmyk"};

/* A picture with edges, gradients and grain: every block has something to code. */
static inline uint8_t *
picture(int w, int h, int comps, uint32_t seed)
{
    uint8_t *p = malloc((size_t)w * h * comps);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < comps; c++) {
                uint32_t grain = (uint32_t)(tsock__mix64(((uint64_t)seed << 40) ^
                                                         ((uint64_t)y << 20) ^ (uint64_t)x) >>
                                            58);
                int v =
                    (x * (3 + c) + y * (5 - c)) / 4 + (((x / 23) ^ (y / 17)) & 1) * 60 + (int)grain;
                p[((size_t)y * w + x) * comps + c] = (uint8_t)(v & 255);
            }
    return p;
}

/* libjpeg's compressor at `quality` with restart markers: every `interval` MCUs, or every
 * `rows` MCU rows when rows > 0; with `optimize`, Huffman tables made for the image (longer
 * codes for rare symbols) instead of the standard ones. Returns the JPEG in an exactly sized
 * block (AddressSanitizer sees overreads). */
static inline uint8_t *
encode_quality(const uint8_t *pix, int w, int h, enum layout l, int interval, int rows,
               int optimize, int quality, size_t *size)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    unsigned char *buf = NULL;
    unsigned long n = 0;
    int comps = l == L_GRAY ? 1 : l == L_CMYK ? 4 : 3;

    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, &n);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = comps;
    c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c); /* CMYK is written as YCCK, with an Adobe marker */
    jpeg_set_quality(&c, quality, TRUE);
    if (comps == 3) {
        static const int hv[4][2] = {{2, 2}, {2, 1}, {1, 1}, {4, 1}};
        c.comp_info[0].h_samp_factor = hv[l][0];
        c.comp_info[0].v_samp_factor = hv[l][1];
    }
    c.restart_interval = (unsigned)interval;
    c.restart_in_rows = rows;
    c.optimize_coding = optimize ? TRUE : FALSE;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)c.next_scanline * w * comps);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    uint8_t *out = malloc(n);
    memcpy(out, buf, n);
    free(buf);
    *size = n;
    return out;
}

/* encode_quality at quality 88. */
static inline uint8_t *
encode(const uint8_t *pix, int w, int h, enum layout l, int interval, int rows, int optimize,
       size_t *size)
{
    return encode_quality(pix, w, h, l, interval, rows, optimize, 88, size);
}

static inline uint8_t *
encode_picture(int w, int h, enum layout l, int interval, int rows, uint32_t seed, size_t *size)
{
    int comps = l == L_GRAY ? 1 : l == L_CMYK ? 4 : 3;
    uint8_t *pix = picture(w, h, comps, seed);
    uint8_t *jpeg = encode(pix, w, h, l, interval, rows, 0, size);
    free(pix);
    return jpeg;
}

/* The offset of the k-th RSTn marker (0-based) at or after `from` in a JPEG of n bytes. */
static inline size_t
marker_at(const uint8_t *jpeg, size_t n, size_t from, int k)
{
    int left = k;
    for (size_t i = from; i + 1 < n; i++)
        if (jpeg[i] == 0xFF && jpeg[i + 1] >= 0xD0 && jpeg[i + 1] <= 0xD7 && left-- == 0)
            return i;
    fprintf(stderr, "marker_at: the JPEG has no RSTn marker number %d\n", k);
    abort();
}

/* The JPEG with three fill bytes (FF, legal before any marker) before every `every`-th of its
 * first `markers` RSTn markers after `from`. Returns a new block; *size receives its size. */
static inline uint8_t *
with_fill_bytes(const uint8_t *jpeg, size_t n, size_t from, int every, int markers, size_t *size)
{
    uint8_t *out = malloc(n + 3 * (size_t)markers);
    size_t o = 0, done = 0;
    for (int k = 0; k < markers; k++) {
        size_t at = marker_at(jpeg, n, from, k * every);
        memcpy(out + o, jpeg + done, at - done);
        o += at - done;
        memset(out + o, 0xFF, 3);
        o += 3;
        done = at;
    }
    memcpy(out + o, jpeg + done, n - done);
    *size = o + n - done;
    return out;
}

#endif
