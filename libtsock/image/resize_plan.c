/* The resize plan every codec back end follows (see struct tsock__resize_plan in
 * image_int.h): which decoded rows and columns the resampler reads, the coefficient tables,
 * and the second half of every decode once the codec has delivered its rows. jpeg.c and png.c
 * call it; it calls only resize.c. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "image/image_int.h"

/* Output rows per group in a vertical-first resize (tsock__resample_rows takes eight at once
 * with AVX-512, four with AVX2). */
#define VFIRST_ROWS 8

int
tsock__resize_plan_make(struct tsock__decoder *d, struct tsock__resize_plan *pl, int src_w,
                        int src_h, double bx0, double by0, double bx1, double by1, int cx0, int cy0,
                        int cx1, int cy1, const struct tsock__resize_spec *spec, int nch)
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
tsock__resize_plan_finish(struct tsock__decoder *d, const struct tsock__resize_plan *pl,
                          const uint8_t *rows, size_t pitch, int rows_x0, int px, uint8_t *out)
{
    const size_t out_row = (size_t)pl->out_w * (size_t)pl->nch;
    const int rows_first = pl->need_y0 - pl->clamp_y;
    int32_t *acc;

    if (pl->hfirst) {
        uint8_t *line = tsock__buf_get(&d->conv2, out_row);
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
    /* Vertical first: output rows VFIRST_ROWS at a time, each a vertical pass over the decoded
     * columns the horizontal pass will read, then the horizontal pass over the group (whose
     * SIMD code shares each output pixel's taps across the rows of a group). */
    const size_t len = (size_t)(pl->need_x1 - pl->need_x0) * (size_t)px;
    const uint8_t *base = rows + (size_t)(pl->need_x0 - rows_x0) * (size_t)px;
    uint8_t *mid = tsock__buf_get(&d->conv, len * VFIRST_ROWS);
    uint8_t *lines = tsock__buf_get(&d->conv2, out_row * VFIRST_ROWS);
    acc = tsock__buf_get(&d->acc, len * sizeof(int32_t));
    if (!mid || !lines || !acc)
        return -ENOMEM;
    for (int y = 0; y < pl->out_h; y += VFIRST_ROWS) {
        int k = pl->out_h - y < VFIRST_ROWS ? pl->out_h - y : VFIRST_ROWS;
        for (int i = 0; i < k; i++)
            tsock__resample_col(&d->cv, y + i, base, rows_first, pitch, len, acc, mid + i * len);
        /* mid's rows are followed by each other and its slack (see jpeg.c) */
        tsock__resample_rows(&d->ch, mid, len, len + TSOCK__BUF_SLACK, pl->need_x0 - pl->clamp_x,
                             px, pl->nch, lines, out_row, k);
        for (int i = 0; i < k; i++)
            tsock__emit_row(lines + i * out_row, pl->out_w, pl->nch,
                            out + (size_t)(y + i) * pl->out_w * 3);
    }
    return 0;
}
