/* The decoder: per-thread scratch, argument checks, and the plan every codec follows (which
 * decoded rows and columns the resampler reads), then dispatch to the JPEG or PNG back end. */
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
tsock__decoder_create(struct tsock_decoder **out)
{
    struct tsock_decoder *d = calloc(1, sizeof *d);

    *out = NULL;
    if (!d)
        return -ENOMEM;
    d->max_pixels = TSOCK_IMAGE_MAX_PIXELS;
    d->max_scans = TSOCK_IMAGE_MAX_SCANS;
    *out = d;
    return 0;
}

void
tsock__decoder_destroy(struct tsock_decoder *d)
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
tsock__decoder_set_limits(struct tsock_decoder *d, uint64_t max_pixels, int max_scans)
{
    if (max_pixels)
        d->max_pixels = max_pixels;
    if (max_scans > 0)
        d->max_scans = max_scans;
}

void
tsock__decoder_set_flags(struct tsock_decoder *d, int flags)
{
    d->flags = flags;
    d->ch.no_avx2 = d->cv.no_avx2 = (flags & TSOCK_DECODE_NO_AVX2) != 0;
}

const struct tsock_decode_report *
tsock__decoder_report(const struct tsock_decoder *d)
{
    return &d->report;
}

int
tsock__plan_make(struct tsock_decoder *d, struct tsock__plan *pl, int src_w, int src_h, double bx0,
                 double by0, double bx1, double by1, int cx0, int cy0, int cx1, int cy1,
                 const struct tsock_resize_spec *spec, int nch)
{
    int first, end, r;

    /* Tables are relative to the clamp rectangle, as PIL's are relative to the cropped image:
     * computing them with an offset would change the rounding of the tap positions. The flip
     * is the horizontal table in reverse order: each output pixel is computed exactly as
     * without it, only written elsewhere. */
    r = tsock__coeffs_compute(&d->ch, bx0 - cx0, bx1 - cx0, cx1 - cx0, spec->resize_w, spec->win_x,
                              spec->out_w, spec->flip);
    if (r == 0)
        r = tsock__coeffs_compute(&d->cv, by0 - cy0, by1 - cy0, cy1 - cy0, spec->resize_h,
                                  spec->win_y, spec->out_h, 0);
    if (r != 0)
        return r;
    pl->src_w = src_w;
    pl->src_h = src_h;
    pl->clamp_x = cx0;
    pl->clamp_y = cy0;
    tsock__coeffs_span(&d->ch, &first, &end);
    pl->need_x0 = cx0 + first;
    pl->need_x1 = cx0 + end;
    tsock__coeffs_span(&d->cv, &first, &end);
    pl->need_y0 = cy0 + first;
    pl->need_y1 = cy0 + end;
    pl->nch = nch;
    pl->hfirst = tsock__horizontal_first(cx1 - cx0, cy1 - cy0, spec->resize_w, spec->resize_h);
    pl->out_w = spec->out_w;
    pl->out_h = spec->out_h;
    return 0;
}

int
tsock__finish(struct tsock_decoder *d, const struct tsock__plan *pl, const uint8_t *rows,
              size_t pitch, int rows_x0, int px, uint8_t *out)
{
    const size_t out_row = (size_t)pl->out_w * (size_t)pl->nch;
    const int rows_first = pl->need_y0 - pl->clamp_y;
    uint8_t *line = tsock__buf_get(&d->conv2, out_row);
    int32_t *acc;

    if (pl->hfirst) {
        acc = tsock__buf_get(&d->acc, out_row * sizeof(int32_t));
        if (!line || !acc)
            return -ENOMEM;
        for (int y = 0; y < pl->out_h; y++) {
            uint8_t *dst = out + (size_t)y * pl->out_w * 3;
            /* RGB rows go straight to the output (the vertical pass writes exactly len
             * bytes); gray ones through `line`, to be widened. */
            tsock__resample_col(&d->cv, y, rows, rows_first, out_row, out_row, acc,
                                pl->nch == 3 ? dst : line);
            if (pl->nch != 3)
                tsock__emit_row(line, pl->out_w, pl->nch, dst);
        }
        return 0;
    }
    /* Vertical first: each output row is a vertical pass over the decoded columns the
     * horizontal pass will read, then the horizontal pass. */
    const size_t len = (size_t)(pl->need_x1 - pl->need_x0) * (size_t)px;
    const uint8_t *base = rows + (size_t)(pl->need_x0 - rows_x0) * (size_t)px;
    uint8_t *mid = tsock__buf_get(&d->conv, len);
    acc = tsock__buf_get(&d->acc, len * sizeof(int32_t));
    if (!line || !mid || !acc)
        return -ENOMEM;
    for (int y = 0; y < pl->out_h; y++) {
        tsock__resample_col(&d->cv, y, base, rows_first, pitch, len, acc, mid);
        tsock__resample_row(&d->ch, mid, len, pl->need_x0 - pl->clamp_x, px, pl->nch, line);
        tsock__emit_row(line, pl->out_w, pl->nch, out + (size_t)y * pl->out_w * 3);
    }
    return 0;
}

int
tsock__decode_resize(struct tsock_decoder *d, const uint8_t *data, size_t size,
                     const struct tsock_resize_spec *spec, uint8_t *out)
{
    struct tsock_image_info info;
    struct tsock_resize_spec s;
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

    if (info.format == TSOCK_IMAGE_JPEG)
        return tsock__jpeg_decode(d, data, size, &info, &s, out);
    return tsock__png_decode(d, data, size, &info, &s, out);
}

int
tsock__decode_crop_resize(struct tsock_decoder *d, const uint8_t *data, size_t size,
                          const struct tsock_box *crop, int out_w, int out_h, int flip,
                          uint8_t *out)
{
    struct tsock_resize_spec s;

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
