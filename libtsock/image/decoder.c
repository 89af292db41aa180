/* The decoder: per-thread scratch and argument checks, then dispatch to the JPEG or PNG back
 * end. The resize plan the back ends follow is resize_plan.c's, so that the back ends never
 * call back into this file. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "image/image_int.h"

/* The largest resize and window side accepted: far above any training size, and small enough
 * that no size product below can overflow. */
#define MAX_OUT_SIDE 32768

int
tsock__decoder_create(struct tsock__decoder **out)
{
    struct tsock__decoder *d = calloc(1, sizeof *d);

    *out = NULL;
    if (!d)
        return -ENOMEM;
    d->max_pixels = TSOCK__IMAGE_MAX_PIXELS;
    d->max_scans = TSOCK__IMAGE_MAX_SCANS;
    *out = d;
    return 0;
}

void
tsock__decoder_destroy(struct tsock__decoder *d)
{
    if (!d)
        return;
    tsock__coeffs_free(&d->ch);
    tsock__coeffs_free(&d->cv);
    tsock__buf_free(&d->rows);
    tsock__buf_free(&d->line);
    tsock__buf_free(&d->conv);
    tsock__buf_free(&d->conv2);
    tsock__buf_free(&d->acc);
    tsock__buf_free(&d->image);
    tsock__jpeg_free(d->jpeg);
    free(d);
}

void
tsock__decoder_set_limits(struct tsock__decoder *d, uint64_t max_pixels, int max_scans)
{
    if (max_pixels)
        d->max_pixels = max_pixels;
    if (max_scans > 0)
        d->max_scans = max_scans;
}

void
tsock__decoder_set_flags(struct tsock__decoder *d, int flags)
{
    d->flags = flags;
    d->ch.no_avx2 = d->cv.no_avx2 = (flags & TSOCK__DECODE_NO_AVX2) != 0;
    /* without AVX2, without AVX-512 too: the tests' "plain passes" are what they say */
    d->ch.no_avx512 = d->cv.no_avx512 =
        (flags & (TSOCK__DECODE_NO_AVX2 | TSOCK__DECODE_NO_AVX512)) != 0;
    d->ch.no_gather = (flags & TSOCK__DECODE_NO_GATHER) != 0;
}

void
tsock__decoder_set_filter(struct tsock__decoder *d, int bicubic)
{
    d->ch.bicubic = d->cv.bicubic = bicubic != 0;
}

void
tsock__decoder_set_entry_points(struct tsock__decoder *d, struct tsock__entry_points *p)
{
    d->points = p;
}

const struct tsock__decode_report *
tsock__decoder_report(const struct tsock__decoder *d)
{
    return &d->report;
}

int
tsock__decode_resize(struct tsock__decoder *d, const uint8_t *data, size_t size,
                     const struct tsock__resize_spec *spec, uint8_t *out)
{
    struct tsock__image_info info;
    struct tsock__resize_spec s;
    int r;

    if (!d || !spec || !out || (!data && size))
        return -EINVAL;
    memset(&d->report, 0, sizeof d->report);
    d->report.scale_num = 8;
    d->report.valid = 1.0;

    r = tsock__image_probe(data, size, &info);
    d->report.format = info.format;
    if (r != 0)
        return r;
    if ((uint64_t)info.width * (uint64_t)info.height > d->max_pixels)
        return -EFBIG;

    s = *spec;
    if (s.crop.w == 0 && s.crop.h == 0 && s.crop.x == 0 && s.crop.y == 0) {
        s.crop.w = info.width;
        s.crop.h = info.height;
    }
    if (s.crop.x < 0 || s.crop.y < 0 || s.crop.w < 1 || s.crop.h < 1 ||
        s.crop.w > info.width - s.crop.x || s.crop.h > info.height - s.crop.y)
        return -EINVAL;
    if (s.resize_w < 1 || s.resize_h < 1 || s.resize_w > MAX_OUT_SIDE ||
        s.resize_h > MAX_OUT_SIDE || s.out_w < 1 || s.out_h < 1 || s.win_x < 0 || s.win_y < 0 ||
        s.out_w > s.resize_w - s.win_x || s.out_h > s.resize_h - s.win_y)
        return -EINVAL;

    if (info.format == TSOCK__IMAGE_JPEG)
        return tsock__jpeg_decode(d, data, size, &info, &s, out);
    return tsock__png_decode(d, data, size, &info, &s, out);
}

int
tsock__decode_crop_resize(struct tsock__decoder *d, const uint8_t *data, size_t size,
                          const struct tsock__box *crop, int out_w, int out_h, int flip,
                          uint8_t *out)
{
    struct tsock__resize_spec s;

    memset(&s, 0, sizeof s);
    if (crop) {
        s.crop = *crop;
        if (crop->w == 0 && crop->h == 0)
            return -EINVAL; /* an empty box is an error here, not "the whole image" */
    }
    s.resize_w = s.out_w = out_w;
    s.resize_h = s.out_h = out_h;
    s.flip = flip;
    return tsock__decode_resize(d, data, size, &s, out);
}
