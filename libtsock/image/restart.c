/* Restart intervals as entry points into a JPEG's entropy-coded data.
 *
 * A baseline JPEG's Huffman data has no entry points: to reach a block, a decoder must decode
 * every block before it, which is why jpeg_skip_scanlines still entropy-decodes the rows above
 * a crop and jpeg_crop_scanline the columns left of it. A JPEG with restart markers (a DRI
 * segment, then an RSTn marker every `interval` MCUs) is different: each interval starts
 * byte-aligned with its DC predictions reset, so it decodes without anything before it. When
 * the intervals tile the MCU grid (an interval divides a row of MCUs, or spans whole rows),
 * the intervals under a window are themselves a valid JPEG of the window's size: the same
 * headers with the frame's dimensions changed, the intervals in raster order with their
 * markers renumbered, an EOI. Its blocks are the original's blocks, so libjpeg decodes them
 * to the original's pixels (only the upsampling at its edges differs; the caller keeps a
 * margin, as for jpeg_crop_scanline).
 *
 * Cameras write restart markers; `tsock-mkdataset --restart-interval` adds them to a dataset
 * losslessly. Everything here reads untrusted bytes: offsets are checked against the data,
 * and a stream whose markers do not match its header is refused (the caller decodes it the
 * ordinary way, where libjpeg's own recovery applies). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "image/image_int.h"

/* Whether the header admits an index: sequential Huffman coding (SOF0, SOF1) in a single
 * scan of every component, a restart interval, and intervals that tile the MCU grid. Fills
 * the grid's geometry. */
int
tsock__restart_grid(const struct tsock__image_info *info, struct tsock__restart_index *ix)
{
    if (info->format != TSOCK__IMAGE_JPEG || info->restart_interval <= 0 ||
        (info->sof_marker != 0xC0 && info->sof_marker != 0xC1) ||
        info->scan_components != info->components || info->width <= 0 || info->height <= 0)
        return -ENOENT;
    /* One component: its scan is not interleaved, and an MCU is one 8 x 8 block. */
    ix->mcu_w = info->components == 1 ? 8 : 8 * info->max_h_samp;
    ix->mcu_h = info->components == 1 ? 8 : 8 * info->max_v_samp;
    ix->mcus_x = (info->width + ix->mcu_w - 1) / ix->mcu_w;
    ix->mcus_y = (info->height + ix->mcu_h - 1) / ix->mcu_h;
    ix->interval = info->restart_interval;
    if (ix->mcus_x % ix->interval == 0)
        ix->rows_per_interval = 0;
    else if (ix->interval % ix->mcus_x == 0)
        ix->rows_per_interval = ix->interval / ix->mcus_x;
    else
        return -ENOENT; /* intervals that start mid-row: no rectangle is made of whole ones */
    int64_t mcus = (int64_t)ix->mcus_x * ix->mcus_y;
    ix->count = (int)((mcus + ix->interval - 1) / ix->interval);
    return 0;
}

/* Finds the intervals' data: interval i is bounds[2i] .. bounds[2i + 1], without the marker
 * that ends it or the fill bytes before that marker. Returns 0, or -EPROTO when the markers
 * are not count RST0, RST1, ... (mod 8) then EOI. */
static int
find_intervals(const uint8_t *data, size_t size, size_t from, struct tsock__restart_index *ix)
{
    size_t pos = from;
    int k = 0;

    ix->bounds[0] = from;
    for (;;) {
        const uint8_t *ff = memchr(data + pos, 0xFF, size - pos);
        if (!ff)
            return -EPROTO; /* no EOI: the caller has checked for one, so this is corrupt */
        size_t at = (size_t)(ff - data), m = at + 1;
        while (m < size && data[m] == 0xFF) /* fill bytes before a marker */
            m++;
        if (m >= size)
            return -EPROTO;
        if (data[m] == 0x00) { /* a stuffed FF: data */
            pos = m + 1;
            continue;
        }
        if (data[m] == 0xD9 || (data[m] >= 0xD0 && data[m] <= 0xD7)) {
            int last = k == ix->count - 1;
            if (data[m] == 0xD9 ? !last : last || data[m] != 0xD0 + (k & 7))
                return -EPROTO;
            ix->bounds[2 * k + 1] = at;
            if (last)
                return 0;
            k++;
            ix->bounds[2 * k] = m + 1;
            pos = m + 1;
            continue;
        }
        return -EPROTO; /* another marker inside the scan (DNL, a second scan's tables) */
    }
}

int
tsock__restart_index_scan(const uint8_t *data, size_t size, const struct tsock__image_info *info,
                          struct tsock__restart_index *ix)
{
    /* Every interval but the last ends with a 2-byte marker: a header that promises more
     * intervals than the data can hold is refused before anything is allocated for them (a
     * small file claiming a huge image must not grow the worker's buffers). */
    if (info->header_size >= size || (size_t)ix->count - 1 > (size - info->header_size) / 2)
        return -EPROTO;
    size_t *b = tsock__buf_get(&ix->buf, 2 * sizeof(size_t) * (size_t)ix->count);
    if (!b)
        return -ENOMEM;
    ix->bounds = b;
    return find_intervals(data, size, info->header_size, ix);
}

int
tsock__restart_index_build(const uint8_t *data, size_t size, const struct tsock__image_info *info,
                           struct tsock__restart_index *ix)
{
    int r = tsock__restart_grid(info, ix);
    return r != 0 ? r : tsock__restart_index_scan(data, size, info, ix);
}

void
tsock__restart_window_align(const struct tsock__restart_index *ix, struct tsock__mcu_window *w)
{
    if (ix->rows_per_interval == 0) { /* columns in steps of an interval */
        w->x0 -= w->x0 % ix->interval;
        w->x1 += (ix->interval - w->x1 % ix->interval) % ix->interval;
    } else { /* whole rows, in steps of an interval's rows */
        int r = ix->rows_per_interval;
        w->x0 = 0;
        w->x1 = ix->mcus_x;
        w->y0 -= w->y0 % r;
        w->y1 += (r - w->y1 % r) % r;
    }
    if (w->x1 > ix->mcus_x)
        w->x1 = ix->mcus_x;
    if (w->y1 > ix->mcus_y)
        w->y1 = ix->mcus_y;
}

/* Appends one interval, then the marker that ends it (RSTn, or EOI after the last). */
static uint8_t *
put_interval(uint8_t *o, const uint8_t *data, const size_t *bounds, int i, int k, int last)
{
    size_t len = bounds[2 * i + 1] - bounds[2 * i];
    memcpy(o, data + bounds[2 * i], len);
    o += len;
    *o++ = 0xFF;
    *o++ = last ? 0xD9 : (uint8_t)(0xD0 + (k & 7));
    return o;
}

size_t
tsock__restart_window_write(const uint8_t *data, const struct tsock__image_info *info,
                            const struct tsock__restart_index *ix,
                            const struct tsock__mcu_window *w, struct tsock__buf *out)
{
    int per_row = ix->rows_per_interval ? 0 : ix->mcus_x / ix->interval;
    int first, n, run, skip;

    /* The intervals in raster order: `run` consecutive ones, then `skip` left out, and so on. */
    if (per_row) {
        run = (w->x1 - w->x0) / ix->interval;
        skip = per_row - run;
        first = w->y0 * per_row + w->x0 / ix->interval;
        n = run * (w->y1 - w->y0);
    } else {
        first = w->y0 / ix->rows_per_interval;
        n = (w->y1 - w->y0 + ix->rows_per_interval - 1) / ix->rows_per_interval;
        run = n;
        skip = 0;
    }
    /* Room for the header and, at most, every interval between the first and the last taken,
     * each with its marker: one pass over the intervals, not a second to size them. */
    int last = per_row ? first + (w->y1 - w->y0 - 1) * per_row + run - 1 : first + n - 1;
    size_t total =
        info->header_size + (ix->bounds[2 * last + 1] - ix->bounds[2 * first]) + 2 * (size_t)n;
    uint8_t *o = tsock__buf_get(out, total), *start = o;
    if (!o)
        return 0;
    memcpy(o, data, info->header_size);
    /* The window's size in pixels: whole MCUs, except where it reaches the image's right or
     * bottom edge, where the image's own remainder is kept. */
    int wpx = w->x1 == ix->mcus_x ? info->width - w->x0 * ix->mcu_w : (w->x1 - w->x0) * ix->mcu_w;
    int hpx = w->y1 == ix->mcus_y ? info->height - w->y0 * ix->mcu_h : (w->y1 - w->y0) * ix->mcu_h;
    uint8_t *sof = o + info->sof_payload;
    sof[1] = (uint8_t)(hpx >> 8);
    sof[2] = (uint8_t)hpx;
    sof[3] = (uint8_t)(wpx >> 8);
    sof[4] = (uint8_t)wpx;
    o += info->header_size;
    for (int k = 0, i = first; k < n; k++, i++) {
        o = put_interval(o, data, ix->bounds, i, k, k == n - 1);
        if ((k + 1) % run == 0)
            i += skip;
    }
    return (size_t)(o - start);
}

void
tsock__restart_index_free(struct tsock__restart_index *ix)
{
    tsock__buf_free(&ix->buf);
}
