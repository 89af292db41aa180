/* PNG back end: libpng's simplified API, which decodes the whole image into our buffer (PNG has
 * no cheap partial decoding), then the same resampler as JPEG.
 *
 * What the pixels are, against PIL's Image.open(f).convert("RGB"):
 *  - alpha (an alpha channel or a tRNS chunk) is dropped, as convert("RGB") drops it: the image
 *    is read as RGBA / gray+alpha, whose 8-bit colour values libpng leaves unpremultiplied, and
 *    the alpha byte is skipped; nothing is composited;
 *  - palette and low-bit-depth gray images are expanded; gray stays one channel until the
 *    final write replicates it;
 *  - 16-bit samples are reduced to 8 bits by libpng with rounding (PIL takes the high byte:
 *    at most 1 level apart); PNG_IMAGE_FLAG_16BIT_sRGB stops libpng from taking 16-bit data
 *    without a gAMA chunk for linear light;
 *  - a gAMA or cHRM chunk far from sRGB makes libpng convert to sRGB, where PIL ignores it.
 * Any error libpng reports (a truncated file, a bad CRC, bad zlib data) is -EPROTO: the
 * simplified API cannot say how much of the image was read, so there is no partial accept.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <png.h>

#include "core/core.h"
#include "image/image_int.h"

int
tsock__png_decode(struct tsock__decoder *d, const uint8_t *data, size_t size,
                  const struct tsock__image_info *info, const struct tsock__resize_spec *s,
                  uint8_t *out)
{
    png_image img;
    struct tsock__resize_plan pl;
    int nch, comps, r;
    size_t stride, bytes, row_bytes;
    uint8_t *pixels, *rows;

    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&img, data, size))
        return -EPROTO; /* the image is freed on failure */
    if ((int)img.width != info->width || (int)img.height != info->height) {
        png_image_free(&img);
        return -EPROTO;
    }
    img.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
    if (img.format & PNG_FORMAT_FLAG_COLOR) {
        nch = 3;
        comps = (img.format & PNG_FORMAT_FLAG_ALPHA) ? 4 : 3;
        img.format = comps == 4 ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
    } else {
        nch = 1;
        comps = (img.format & PNG_FORMAT_FLAG_ALPHA) ? 2 : 1;
        img.format = comps == 2 ? PNG_FORMAT_GA : PNG_FORMAT_GRAY;
    }

    r = tsock__resize_plan_make(d, &pl, info->width, info->height, s->crop.x, s->crop.y,
                                s->crop.x + s->crop.w, s->crop.y + s->crop.h, s->crop.x, s->crop.y,
                                s->crop.x + s->crop.w, s->crop.y + s->crop.h, s, nch);
    if (r != 0) {
        png_image_free(&img);
        return r;
    }
    /* The pixel limit was checked against the header, so these products fit. */
    stride = (size_t)info->width * (size_t)comps;
    bytes = stride * (size_t)info->height;
    if (stride > INT32_MAX) {
        png_image_free(&img);
        return -EFBIG;
    }
    row_bytes = (size_t)pl.out_w * (size_t)nch;
    pixels = tsock__buf_get(&d->image, bytes);
    rows = pl.hfirst ? tsock__buf_get(&d->rows, row_bytes * (size_t)(pl.need_y1 - pl.need_y0))
                     : pixels;
    if (!pixels || !rows) {
        png_image_free(&img);
        return -ENOMEM;
    }
    uint64_t t0 = tsock__now_ns();
    if (!png_image_finish_read(&img, NULL, pixels, (png_int_32)stride, NULL))
        return -EPROTO; /* finish_read frees the image whatever the outcome */
    uint64_t t1 = tsock__now_ns();
    d->report.codec_ns = t1 - t0;
    d->report.rows_read = info->height;
    if (img.warning_or_error & PNG_IMAGE_WARNING)
        d->report.warnings = 1;
    d->report.decoded_w = info->width;
    d->report.decoded_h = info->height;

    if (!pl.hfirst) {
        r = tsock__resize_plan_finish(d, &pl, pixels + (size_t)pl.need_y0 * stride, stride, 0,
                                      comps, out);
    } else {
        /* Every row has what remains of the image after the last one readable. */
        size_t at = (size_t)pl.need_y0 * stride + (size_t)pl.clamp_x * comps;
        size_t last = (size_t)(pl.need_y1 - 1) * stride + (size_t)pl.clamp_x * comps;
        tsock__resample_rows(&d->ch, pixels + at, stride, bytes - last, 0, comps, nch, rows,
                             row_bytes, pl.need_y1 - pl.need_y0);
        r = tsock__resize_plan_finish(d, &pl, rows, row_bytes, 0, nch, out);
    }
    d->report.resample_ns = tsock__now_ns() - t1;
    return r;
}
