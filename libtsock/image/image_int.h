/* Shared internals of libtsock/image: the decoder's scratch, the resampler, the codec glue. */
#ifndef TSOCK_IMAGE_INT_H
#define TSOCK_IMAGE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "image/image.h"

/* A growable scratch buffer: grows to the largest size asked for and is then only reused. */
struct tsock__buf {
    void *p;
    size_t cap;
};
/* Makes room for n bytes (contents not kept). Returns the buffer or NULL (out of memory). */
void *tsock__buf_get(struct tsock__buf *b, size_t n);
void tsock__buf_free(struct tsock__buf *b);

/* PIL's resampling coefficients for one dimension: an `in_size`-sample source of which the
 * interval [in0, in1) (source coordinates, fractional after DCT scaling) is resized to
 * out_size samples; only outputs win0 .. win0+win_n-1 are kept. Entry i has its first source
 * sample bounds[2i], its tap count bounds[2i+1], and taps k[i*ksize ..] in 22-bit fixed point. */
struct tsock__coeffs {
    /* the key the table was computed for (the decoder keeps the last one per dimension) */
    double in0, in1;
    int in_size, out_size, win0, win_n;
    int valid;
    int ksize;
    int *bounds;
    int32_t *k;
    struct tsock__buf bounds_buf, k_buf, work_buf;
};

/* Computes (or keeps, when the key is unchanged) the table. Returns 0 or -ENOMEM / -EINVAL. */
int tsock__coeffs_compute(struct tsock__coeffs *c, double in0, double in1, int in_size,
                          int out_size, int win0, int win_n);
void tsock__coeffs_free(struct tsock__coeffs *c);

/* The first source sample any kept output reads, and one past the last. */
void tsock__coeffs_span(const struct tsock__coeffs *c, int *first, int *end);

/* Horizontal pass of one row: `in` holds the source samples from the table's sample 0 on,
 * `stride` bytes per pixel of which the first `nch` are resampled; writes win_n * nch bytes. */
void tsock__resample_row(const struct tsock__coeffs *c, const uint8_t *in, int stride, int nch,
                         uint8_t *out);

/* Vertical pass, written into the caller's RGB buffer: `rows` holds the horizontally resampled
 * rows (width w pixels of nch channels, `rows_first` being the source row of rows[0]); writes
 * c->win_n rows of w RGB pixels, mirrored when flip, gray (nch 1) replicated. acc is scratch
 * of w * nch int32. */
void tsock__resample_cols(const struct tsock__coeffs *c, const uint8_t *rows, int rows_first,
                          int w, int nch, int flip, int32_t *acc, uint8_t *out);

/* PIL's CMYK-to-RGB conversion of pixels as libjpeg delivers them (Adobe polarity). */
void tsock__cmyk_to_rgb(const uint8_t *in, uint8_t *out, int n);

/* The plan both codecs follow, in the coordinates of the decoded (possibly DCT-scaled)
 * image: which rows and columns the filter reads, and the coefficient tables. */
struct tsock__plan {
    int src_w, src_h;     /* decoded image size (after DCT scaling) */
    int clamp_x, clamp_y; /* the crop's first column and row in decoded pixels */
    int need_x0, need_x1; /* decoded columns the horizontal pass reads: [need_x0, need_x1) */
    int need_y0, need_y1; /* decoded rows the vertical pass reads */
    int nch;              /* channels resampled: 1 (gray) or 3 */
    int flip;
    int out_w, out_h;
};

struct tsock_decoder {
    uint64_t max_pixels;
    int max_scans;
    int flags;
    struct tsock_decode_report report;
    struct tsock__coeffs ch, cv;         /* horizontal and vertical tables */
    struct tsock__buf rows;              /* horizontally resampled rows */
    struct tsock__buf line;              /* codec output lines */
    struct tsock__buf conv;              /* a converted line (CMYK to RGB) */
    struct tsock__buf acc;               /* vertical accumulators */
    struct tsock__buf image;             /* a whole decoded PNG */
    void *jpeg;                          /* struct tsock__jpeg (jpeg.c), created on first use */
};

/* Sets up the plan and the tables for a decoded image of src_w x src_h, into which the crop
 * maps as the box [bx0, bx1) x [by0, by1) clamped to the pixels [cx0, cx1) x [cy0, cy1).
 * Returns 0 or a negative code. */
int tsock__plan_make(struct tsock_decoder *d, struct tsock__plan *pl, int src_w, int src_h,
                     double bx0, double by0, double bx1, double by1, int cx0, int cy0, int cx1,
                     int cy1, const struct tsock_resize_spec *spec, int nch);

/* Codec back ends. `info` is the probe's result for the data; `spec` has been checked and
 * holds the resolved crop. Return 0 or a negative code. */
int tsock__jpeg_decode(struct tsock_decoder *d, const uint8_t *data, size_t size,
                       const struct tsock_image_info *info, const struct tsock_resize_spec *spec,
                       uint8_t *out);
void tsock__jpeg_free(void *jpeg);
int tsock__png_decode(struct tsock_decoder *d, const uint8_t *data, size_t size,
                      const struct tsock_image_info *info, const struct tsock_resize_spec *spec,
                      uint8_t *out);

/* Whether a JPEG holds an EOI marker after its first scan header: a cheap, crop-independent
 * test for truncation (byte stuffing keeps FF D9 out of entropy-coded data). */
int tsock__jpeg_has_eoi(const uint8_t *data, size_t size, size_t header_size);

#endif
