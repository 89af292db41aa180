/* JPEG back end: libjpeg's API (from libjpeg-turbo), because the TurboJPEG 2.x API has no way to
 * decode part of an image; jpeg_crop_scanline, jpeg_skip_scanlines and scale_num/scale_denom
 * are libjpeg-turbo's and work on every kind of JPEG it reads (baseline, progressive,
 * arithmetic, gray, CMYK, YCCK).
 *
 * libjpeg reports errors through error_exit, which must not return: ours longjmps back into
 * tsock__jpeg_decode, which destroys the decompressor and returns an error code. Nothing is
 * ever printed: warnings are only counted.
 *
 * A fresh decompressor is created for every image. libjpeg keeps quantisation and Huffman
 * tables across the images of one decompressor (for abbreviated datastreams), so a file that
 * lacks a table would decode with whatever image the worker decoded before: different bytes
 * with a different thread assignment. Creating one costs a few small allocations, nothing next
 * to the decode.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE and size_t */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "core/core.h"
#include "image/entropy.h"
#include "image/image_int.h"

/* Columns decoded beyond each side of what the resampler reads. libjpeg-turbo's cropped decode
 * treats the crop's edges as image edges, so fancy upsampling replicates the last chroma sample
 * there instead of interpolating with its neighbour; with 4:2:x subsampling that touches the
 * outermost pixel on each side. Two pixels of margin keep every pixel the resampler reads equal
 * to the full decode's (the unit test checks it). */
#define CROP_MARGIN 2

/* Lines asked of jpeg_read_scanlines per call: libjpeg returns at most one row group (up to 16
 * lines with 4:2:0 at full scale), so more than that gains nothing. */
#define LINES_PER_CALL 16

/* The decode's time split between libjpeg (entropy decoding, IDCT, upsampling, its colour
 * conversion) and tsock's own passes (CMYK conversion, resampling), on the monotonic clock:
 * the two interleave line group by line group, and the thread CPU clock is a system call
 * (about 0.3-0.7 us) where the monotonic one is not, so the pipeline measures the decode's
 * thread CPU time once and splits it in these proportions (see struct tsock__decode_report).
 * `t` is when the current stage began. */
struct stage_clock {
    uint64_t t;
};

static void
stage_switch(struct stage_clock *c, uint64_t *acc)
{
    uint64_t now = tsock__now_ns();
    *acc += now - c->t;
    c->t = now;
}

struct tsock__jpeg {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr err;
    struct jpeg_source_mgr src;
    struct jpeg_progress_mgr progress;
    jmp_buf jmp;
    int created;   /* cinfo holds a decompressor to destroy */
    int fail_code; /* set before our own longjmps (limits) */
    int max_scans;
    const uint8_t *data;
    size_t size;
    /* libjpeg's own sample-array allocator, which alloc_zeroed wraps */
    JSAMPARRAY (*alloc_sarray)(j_common_ptr, int, JDIMENSION, JDIMENSION);
    int eof;                              /* the data ran out */
    int eof_scan;                         /* the scan being read when it did (1-based) */
    unsigned eof_row;                     /* the iMCU row being read when it did */
    struct tsock__restart_index restarts; /* the file's entry points (open_window) */
    struct tsock__buf window;             /* the JPEG of the window's intervals */
    struct tsock__entropy *entropy;       /* tsock's Huffman decoder (entropy.c) */
    int entropy_off;                      /* this decode leaves the Huffman data to libjpeg */
    int entropy_failed;                   /* tsock's decoder met data it does not decode */
};

static const JOCTET fake_eoi[2] = {0xFF, JPEG_EOI};

/* tsock's Huffman decoder met data that a valid stream cannot hold: the decode is abandoned
 * and run again with libjpeg's decoder (tsock__jpeg_decode), whose warnings and recovery then
 * apply exactly as they would have. */
static void
on_entropy_fail(j_decompress_ptr cinfo)
{
    struct tsock__jpeg *j = cinfo->client_data;
    j->entropy_failed = 1;
    longjmp(j->jmp, 1);
}

static void
on_error_exit(j_common_ptr cinfo)
{
    struct tsock__jpeg *j = cinfo->client_data;
    longjmp(j->jmp, 1);
}

static void
on_emit_message(j_common_ptr cinfo, int level)
{
    if (level < 0) /* a warning: corrupt data that libjpeg decodes anyway */
        cinfo->err->num_warnings++;
}

static void
on_output_message(j_common_ptr cinfo)
{
    (void)cinfo; /* the library never prints */
}

static void
on_progress(j_common_ptr cinfo)
{
    struct tsock__jpeg *j = cinfo->client_data;
    j_decompress_ptr dinfo = (j_decompress_ptr)cinfo;

    /* TurboJPEG's TJFLAG_LIMITSCANS guard, called once per iMCU row. */
    if (dinfo->input_scan_number > j->max_scans) {
        j->fail_code = -EFBIG;
        longjmp(j->jmp, 1);
    }
}

/* Sample arrays (the main controller's and upsampler's row buffers) come zeroed. With some
 * corrupt data and DCT scaling, libjpeg-turbo 2.1 emits rows of its buffers it never wrote
 * (Valgrind shows them in the output); zeroed, they are at least the same bytes every time,
 * which reproducibility needs. The arrays are a few rows wide: zeroing costs microseconds. */
static JSAMPARRAY
alloc_zeroed(j_common_ptr cinfo, int pool, JDIMENSION samples, JDIMENSION rows)
{
    struct tsock__jpeg *j = cinfo->client_data;
    JSAMPARRAY a = j->alloc_sarray(cinfo, pool, samples, rows);
    size_t len = (size_t)samples * sizeof(JSAMPLE);

    /* libjpeg-turbo pads each row to a multiple of 64 bytes and lays the rows out one after
     * the other in one block; its SIMD code reads the padding, so that is zeroed as well when
     * the layout shows it (the distance between rows). */
    if (rows > 1 && a[1] > a[0] && (size_t)(a[1] - a[0]) >= len &&
        (size_t)(a[1] - a[0]) <= len + 256)
        len = (size_t)(a[1] - a[0]);
    for (JDIMENSION r = 0; r < rows; r++)
        memset(a[r], 0, len);
    return a;
}

static void
src_init(j_decompress_ptr cinfo)
{
    (void)cinfo;
}

static boolean
src_fill(j_decompress_ptr cinfo)
{
    struct tsock__jpeg *j = cinfo->client_data;

    /* Called only when the data is used up (it was all handed over at the start). Remember
     * where the decoder was, then feed it an EOI as jpeg_mem_src does: the rest of the image
     * decodes as empty (mid-grey) blocks. */
    if (!j->eof) {
        j->eof = 1;
        j->eof_scan = cinfo->input_scan_number;
        j->eof_row = cinfo->input_iMCU_row;
        WARNMS(cinfo, JWRN_JPEG_EOF);
    }
    cinfo->src->next_input_byte = fake_eoi;
    cinfo->src->bytes_in_buffer = 2;
    return TRUE;
}

static void
src_skip(j_decompress_ptr cinfo, long num_bytes)
{
    struct jpeg_source_mgr *src = cinfo->src;

    if (num_bytes <= 0)
        return;
    while ((size_t)num_bytes > src->bytes_in_buffer) {
        num_bytes -= (long)src->bytes_in_buffer;
        src_fill(cinfo);
    }
    src->next_input_byte += num_bytes;
    src->bytes_in_buffer -= (size_t)num_bytes;
}

static void
src_term(j_decompress_ptr cinfo)
{
    (void)cinfo;
}

void
tsock__jpeg_free(void *jpeg)
{
    struct tsock__jpeg *j = jpeg;

    if (!j)
        return;
    if (j->created)
        jpeg_destroy_decompress(&j->cinfo);
    tsock__restart_index_free(&j->restarts);
    tsock__buf_free(&j->window);
    tsock__entropy_destroy(j->entropy);
    free(j);
}

/* How much the resize must still reduce a DCT-scaled crop. The scaled IDCT filters like a box
 * over the dropped pixels, PIL's triangle does not: with the resize left to shrink by 2 or
 * more, its own wide triangle dominates and the result stays within about 1 level of the
 * full-size path; with less (a 1/2-scale decode resized by 1.2, say) photographs differ by 2
 * levels and more on average, beyond the tolerance tsock promises against torchvision. */
#define DCT_MIN_RESIDUAL 2

/* The DCT scale numerator (of 8): the smallest of 1/8, 1/4, 1/2 at which the scaled crop is
 * still DCT_MIN_RESIDUAL times the resized size in both dimensions, else 8/8. */
static int
choose_scale(const struct tsock__resize_spec *s, int flags)
{
    static const int candidates[3] = {1, 2, 4};

    if (flags & TSOCK__DECODE_NO_DCT_SCALE)
        return 8;
    for (int i = 0; i < 3; i++) {
        int n = candidates[i];
        if ((int64_t)s->crop.w * n >= (int64_t)s->resize_w * 8 * DCT_MIN_RESIDUAL &&
            (int64_t)s->crop.h * n >= (int64_t)s->resize_h * 8 * DCT_MIN_RESIDUAL)
            return n;
    }
    return 8;
}

static int
map_error(const struct tsock__jpeg *j)
{
    if (j->fail_code)
        return j->fail_code;
    switch (j->err.msg_code) {
    case JERR_OUT_OF_MEMORY: return -ENOMEM;
    case JERR_IMAGE_TOO_BIG:
    case JERR_NO_BACKING_STORE:
    case JERR_WIDTH_OVERFLOW: return -EFBIG;
    case JERR_BAD_PRECISION:
    case JERR_SOF_UNSUPPORTED:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_NOT_COMPILED: return -ENOTSUP;
    default: return -EPROTO;
    }
}

/* Ends a decode whose remaining rows nobody reads. jpeg_abort_decompress drops the rest of
 * the image (no entropy decoding of the rows below, no end-of-image check), where
 * jpeg_finish_decompress would insist on reading every row. The pixels already delivered are
 * those of a full decode: with fancy upsampling libjpeg has already decoded the row group
 * after the last row it handed out, which is all the context those rows need. What stopping
 * early gives up: a corrupt-data warning in the rows below is not counted (the report's
 * `warnings`); the truncation verdict is unaffected, since a file without an end-of-image
 * marker is always decoded to its end. */
static void
stop_early(j_decompress_ptr cinfo)
{
    jpeg_abort_decompress(cinfo);
}

/* The output settings, after each jpeg_read_header: PIL's colour conversion, IDCT and
 * upsampling (libjpeg's defaults; set anyway so a changed default shows), DCT scale n/8. */
static void
set_output(j_decompress_ptr cinfo, int n)
{
    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE: cinfo->out_color_space = JCS_GRAYSCALE; break;
    case JCS_CMYK:
    case JCS_YCCK: cinfo->out_color_space = JCS_CMYK; break;
    default: cinfo->out_color_space = JCS_RGB; break;
    }
    cinfo->dct_method = JDCT_ISLOW;
    cinfo->do_fancy_upsampling = TRUE;
    cinfo->scale_num = (unsigned)n;
    cinfo->scale_denom = 8;
    jpeg_calc_output_dimensions(cinfo);
}

static int
ceil_div(int a, int b)
{
    return (a + b - 1) / b;
}

/* Where the decoded image that cinfo reads starts in the whole image's decoded pixels:
 * (0, 0), or the window's corner once open_window has switched to the window's JPEG. */
struct origin {
    int x, y;
};

/* Switches cinfo to the JPEG of the restart intervals under the columns and rows the
 * resampler reads (restart.c), when the file has usable restart markers and the window
 * leaves something out above or beside it (stop_early already leaves out what is below).
 * CROP_MARGIN pixels around them keep the upsampling at the window's edges out of what the
 * resampler reads, as with jpeg_crop_scanline; scaled by n/8, an MCU is still whole pixels.
 * Returns 1 when switched (o set), 0 when cinfo still reads the whole file, or a negative
 * code. A file whose markers do not follow its header is decoded whole, as libjpeg decodes
 * it. */
static int
open_window(struct tsock__decoder *d, struct tsock__jpeg *j, const struct tsock__image_info *info,
            const struct tsock__resize_plan *pl, int n, struct origin *o)
{
    struct tsock__restart_index *ix = &j->restarts;

    if (tsock__restart_grid(info, ix) != 0)
        return 0;
    int mw = ix->mcu_w * n / 8, mh = ix->mcu_h * n / 8;
    int x0 = pl->need_x0 - CROP_MARGIN, x1 = pl->need_x1 + CROP_MARGIN;
    int y0 = pl->need_y0 - CROP_MARGIN, y1 = pl->need_y1 + CROP_MARGIN;
    struct tsock__mcu_window w = {x0 > 0 ? x0 / mw : 0, y0 > 0 ? y0 / mh : 0, ceil_div(x1, mw),
                                  ceil_div(y1, mh)};
    tsock__restart_window_align(ix, &w);
    if (w.x0 == 0 && w.y0 == 0 && w.x1 == ix->mcus_x)
        return 0; /* decided from the header: the data is not scanned for nothing */
    int r = tsock__restart_index_scan(j->data, j->size, info, ix);
    if (r == -ENOMEM)
        return r;
    if (r < 0)
        return 0;
    size_t len = tsock__restart_window_write(j->data, info, ix, &w, &j->window);
    if (len == 0)
        return -ENOMEM;

    j_decompress_ptr cinfo = &j->cinfo;
    jpeg_abort_decompress(cinfo);
    j->src.next_input_byte = j->window.p;
    j->src.bytes_in_buffer = len;
    if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK)
        return -EPROTO;
    set_output(cinfo, n);
    o->x = w.x0 * mw;
    o->y = w.y0 * mh;
    d->report.restart_window = 1;
    return 1;
}

/* The decode proper, between setjmp and the cleanup. Everything that must survive a longjmp
 * lives in *j or *d, never in this function's locals. */
static int
decode(struct tsock__decoder *d, struct tsock__jpeg *j, const struct tsock__image_info *info,
       const struct tsock__resize_spec *s, uint8_t *out)
{
    j_decompress_ptr cinfo = &j->cinfo;
    struct tsock__resize_plan pl;
    int n, nch, in_comps, px, r, partial, suspect, multi, col0;
    struct origin o = {0, 0};
    JDIMENSION x0 = 0, xw;
    double bx0, by0, bx1, by1;
    size_t line_bytes, keep_bytes;
    uint8_t *lines, *rows;
    JSAMPROW ptrs[LINES_PER_CALL];

    /* Everything up to the first resampling is the codec's: for a progressive JPEG,
     * jpeg_start_decompress entropy-decodes the whole file. */
    struct stage_clock clk = {tsock__now_ns()};
    partial = !(d->flags & TSOCK__DECODE_NO_PARTIAL);
    suspect = !tsock__jpeg_has_eoi(j->data, j->size, info->header_size);

    if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK)
        return -EPROTO;
    multi = jpeg_has_multiple_scans(cinfo);
    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE: nch = in_comps = 1; break;
    case JCS_CMYK:
    case JCS_YCCK: /* libjpeg turns YCCK into CMYK; tsock__cmyk_to_rgb does the rest as PIL does */
        nch = 3;
        in_comps = 4;
        break;
    case JCS_RGB:
    case JCS_YCbCr: nch = in_comps = 3; break;
    default: return -ENOTSUP;
    }
    n = choose_scale(s, d->flags);
    set_output(cinfo, n);
    d->report.scale_num = n;

    /* The crop in decoded pixels: exact at full scale; at 1/2..1/8 a fractional box inside
     * the whole pixels that cover it (decoded pixel i covers source [8i/n, 8(i+1)/n)). */
    bx0 = s->crop.x * (double)n / 8.0;
    by0 = s->crop.y * (double)n / 8.0;
    bx1 = (s->crop.x + s->crop.w) * (double)n / 8.0;
    by1 = (s->crop.y + s->crop.h) * (double)n / 8.0;
    {
        int cx0 = (int)floor(bx0), cy0 = (int)floor(by0);
        int cx1 = (int)ceil(bx1), cy1 = (int)ceil(by1);
        int sw = (int)cinfo->output_width, sh = (int)cinfo->output_height;
        if (cx1 > sw)
            cx1 = sw;
        if (cy1 > sh)
            cy1 = sh;
        stage_switch(&clk, &d->report.codec_ns);
        r = tsock__resize_plan_make(d, &pl, sw, sh, bx0, by0, bx1, by1, cx0, cy0, cx1, cy1, s, nch);
        stage_switch(&clk, &d->report.resample_ns); /* the filter's coefficients */
        if (r != 0)
            return r;
    }
    /* From here on, rows and columns are the whole image's decoded ones; cinfo's are o.y and
     * o.x less. */
    if (partial && !suspect && !(d->flags & TSOCK__DECODE_NO_RESTARTS)) {
        r = open_window(d, j, info, &pl, n, &o);
        if (r < 0)
            return r;
    }

    jpeg_start_decompress(cinfo);
    xw = cinfo->output_width;
    if (partial && (pl.need_x0 > o.x || pl.need_x1 < o.x + (int)xw)) {
        int a = pl.need_x0 - CROP_MARGIN - o.x, b = pl.need_x1 + CROP_MARGIN - o.x;
        if (a < 0)
            a = 0;
        if (b > (int)xw)
            b = (int)xw;
        x0 = (JDIMENSION)a;
        xw = (JDIMENSION)(b - a);
        jpeg_crop_scanline(cinfo, &x0, &xw); /* moves x0 left to an iMCU boundary */
    }
    col0 = o.x + (int)x0; /* the whole image's column where the codec's lines start */
    d->report.decoded_w = (int)xw;
    /* A file that may be truncated keeps libjpeg's decoder, which decides how far it is valid. */
    d->report.own_entropy = !suspect && !j->entropy_off &&
                            !(d->flags & TSOCK__DECODE_NO_OWN_ENTROPY) &&
                            tsock__entropy_attach(j->entropy, cinfo, on_entropy_fail, d->points,
                                                  !(d->flags & TSOCK__DECODE_NO_SKIP_TABLE));

    /* Where the rows go. Horizontal pass first: each needed line is resampled as it arrives
     * and only the out_w-wide result is kept. Vertical first: the needed lines themselves are
     * kept (libjpeg writes them in place) and both passes run at the end. */
    px = in_comps == 4 ? 3 : in_comps; /* bytes per pixel once CMYK is RGB */
    line_bytes = (size_t)xw * (size_t)in_comps;
    keep_bytes = pl.hfirst ? (size_t)pl.out_w * (size_t)nch : line_bytes;
    lines = tsock__buf_get(&d->line, line_bytes * LINES_PER_CALL);
    rows = tsock__buf_get(&d->rows, keep_bytes * (size_t)(pl.need_y1 - pl.need_y0));
    if (!lines || !rows)
        return -ENOMEM;

    if (partial && pl.need_y0 > o.y) {
        JDIMENSION k = (JDIMENSION)(pl.need_y0 - o.y);
        if (jpeg_skip_scanlines(cinfo, k) != k)
            return -EPROTO;
    }
    /* Every row up to need_y1 (from need_y0 when skipping). With a suspected truncation, every
     * row to the end, so that the verdict below is the same for every crop. Otherwise the
     * decode stops after the last row the resampler reads: nothing below it is entropy-decoded
     * at all (see stop_early). */
    {
        int last = suspect ? pl.src_h : pl.need_y1;
        while (o.y + (int)cinfo->output_scanline < last) {
            int y = o.y + (int)cinfo->output_scanline;
            int want = last - y;
            int got;

            if (partial && y >= pl.need_y1 && want > 1) {
                /* Past the rows we need: entropy-decode only. Skipping to the very end would
                 * not read the data at all, so the last row is still decoded. */
                JDIMENSION k = (JDIMENSION)(want - 1);
                if (jpeg_skip_scanlines(cinfo, k) != k)
                    return -EPROTO;
                continue;
            }
            if (want > LINES_PER_CALL)
                want = LINES_PER_CALL;
            for (int i = 0; i < want; i++) {
                int row = y + i;
                ptrs[i] = !pl.hfirst && row >= pl.need_y0 && row < pl.need_y1
                              ? rows + (size_t)(row - pl.need_y0) * keep_bytes
                              : lines + (size_t)i * line_bytes;
            }
            /* libjpeg hands out a row group (often 1 or 2 lines) per call: gather `want`
             * lines, so that the horizontal pass gets them four at a time. */
            for (got = 0; got < want;) {
                int lines_read =
                    (int)jpeg_read_scanlines(cinfo, ptrs + got, (JDIMENSION)(want - got));
                if (lines_read <= 0)
                    return -EPROTO;
                got += lines_read;
            }
            stage_switch(&clk, &d->report.codec_ns);
            /* The lines of this call that the passes read: [a, b). */
            int a = pl.need_y0 > y ? pl.need_y0 - y : 0;
            int b = pl.need_y1 < y + got ? pl.need_y1 - y : got;
            if (in_comps == 4) /* PIL converts before it resizes; in place, pitch unchanged */
                for (int i = a; i < b; i++)
                    tsock__cmyk_to_rgb(ptrs[i], ptrs[i], (int)xw);
            /* Each line is followed by the next or by the buffer's slack: the SIMD passes may
             * load those bytes (they weigh 0), which keeps the last pixels off the slow path. */
            if (pl.hfirst && a < b)
                tsock__resample_rows(
                    &d->ch, ptrs[a], line_bytes, line_bytes + TSOCK__BUF_SLACK, col0 - pl.clamp_x,
                    px, nch, rows + (size_t)(y + a - pl.need_y0) * keep_bytes, keep_bytes, b - a);
            stage_switch(&clk, &d->report.resample_ns);
        }
        d->report.rows_read = o.y + (int)cinfo->output_scanline;
        d->report.entry_jump = d->report.own_entropy && tsock__entropy_jumped(j->entropy);
        d->report.skip_table_mcus =
            d->report.own_entropy ? (int)tsock__entropy_skipped(j->entropy) : 0;
        if (!suspect && partial && cinfo->output_scanline < cinfo->output_height)
            stop_early(cinfo);
        stage_switch(&clk, &d->report.codec_ns);
    }
    d->report.decoded_h = pl.need_y1 - (partial ? pl.need_y0 : 0);
    d->report.warnings = (int)j->err.num_warnings;

    if (j->eof) {
        double valid = 1.0;
        if (!(multi && j->eof_scan > 1) && cinfo->total_iMCU_rows > 0)
            valid = (double)j->eof_row / (double)cinfo->total_iMCU_rows;
        if (valid > 1.0)
            valid = 1.0;
        d->report.truncated = 1;
        d->report.valid = valid;
        if (valid < TSOCK__IMAGE_MIN_VALID)
            return -EPROTO;
    }
    stage_switch(&clk, &d->report.codec_ns);
    r = pl.hfirst ? tsock__resize_plan_finish(d, &pl, rows, keep_bytes, 0, nch, out)
                  : tsock__resize_plan_finish(d, &pl, rows, keep_bytes, col0, px, out);
    stage_switch(&clk, &d->report.resample_ns);
    return r;
}

/* Runs one decode under setjmp. Its parameters are never modified, so they survive a longjmp
 * intact (locals set after setjmp would not be guaranteed to). */
static int
run(struct tsock__decoder *d, struct tsock__jpeg *j, const uint8_t *data, size_t size,
    const struct tsock__image_info *info, const struct tsock__resize_spec *spec, uint8_t *out)
{
    int r;

    j->fail_code = 0;
    j->max_scans = d->max_scans;
    j->data = data;
    j->size = size;
    j->eof = 0;
    j->eof_scan = 0;
    j->eof_row = 0;
    j->entropy_failed = 0;

    if (setjmp(j->jmp)) {
        r = j->entropy_failed ? -EAGAIN : map_error(j);
        if (j->created)
            jpeg_destroy_decompress(&j->cinfo);
        j->created = 0;
        return r;
    }
    j->cinfo.err = jpeg_std_error(&j->err);
    j->err.error_exit = on_error_exit;
    j->err.emit_message = on_emit_message;
    j->err.output_message = on_output_message;
    j->cinfo.client_data = j; /* kept by jpeg_create_decompress, as err is */
    j->created = 1;           /* destroying a half-created decompressor is safe */
    jpeg_create_decompress(&j->cinfo);
    j->alloc_sarray = j->cinfo.mem->alloc_sarray;
    j->cinfo.mem->alloc_sarray = alloc_zeroed;

    j->src.init_source = src_init;
    j->src.fill_input_buffer = src_fill;
    j->src.skip_input_data = src_skip;
    j->src.resync_to_restart = jpeg_resync_to_restart;
    j->src.term_source = src_term;
    j->src.next_input_byte = data;
    j->src.bytes_in_buffer = size;
    j->cinfo.src = &j->src;
    j->progress.progress_monitor = on_progress;
    j->cinfo.progress = &j->progress;

    r = decode(d, j, info, spec, out);

    jpeg_destroy_decompress(&j->cinfo);
    j->created = 0;
    return r;
}

int
tsock__jpeg_decode(struct tsock__decoder *d, const uint8_t *data, size_t size,
                   const struct tsock__image_info *info, const struct tsock__resize_spec *spec,
                   uint8_t *out)
{
    struct tsock__jpeg *j = d->jpeg;
    int r;

    if (!j && !(j = d->jpeg = calloc(1, sizeof(struct tsock__jpeg))))
        return -ENOMEM;
    if (!j->entropy && !(j->entropy = tsock__entropy_create()))
        return -ENOMEM;
    j->entropy_off = 0;
    r = run(d, j, data, size, info, spec, out);
    if (r == -EAGAIN) { /* tsock's Huffman decoder gave the data back: libjpeg decodes it all */
        d->report.entropy_redone = 1;
        d->report.own_entropy = 0; /* whatever the second run reaches */
        j->entropy_off = 1;
        r = run(d, j, data, size, info, spec, out);
    }
    return r;
}
