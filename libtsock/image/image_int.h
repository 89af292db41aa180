/* Shared internals of libtsock/image: the decoder's scratch, the resampler, the codec glue.
 *
 * Calls between the files go one way: decoder.c (checks, dispatch) -> jpeg.c, png.c (codec
 * back ends) -> resize_plan.c (the resize plan they follow) -> resize.c (resampler, scratch
 * buffers) -> resize_gather.c (its horizontal pass with AVX-512 VBMI); probe.c is called by
 * decoder.c and jpeg.c and calls none of them; jpeg.c alone calls restart.c (entry points)
 * and entropy.c (tsock's Huffman decoder, entropy.h). */
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
/* Makes room for n bytes and TSOCK__BUF_SLACK more (contents not kept). Returns the buffer or
 * NULL (out of memory). */
#define TSOCK__BUF_SLACK 16
void *tsock__buf_get(struct tsock__buf *b, size_t n);
void tsock__buf_free(struct tsock__buf *b);

/* PIL's resampling coefficients for one dimension: an `in_size`-sample source of which the
 * interval [in0, in1) (source coordinates, fractional after DCT scaling) is resized to
 * out_size samples; only outputs win0 .. win0+win_n-1 are kept, in reverse order when
 * `reverse` (so a horizontal flip costs nothing). Entry i has its first source sample
 * bounds[2i], its tap count bounds[2i+1], and taps k[i*ksize ..] in 22-bit fixed point. */
struct tsock__coeffs {
    /* the key the table was computed for (the decoder keeps the last one per dimension) */
    double in0, in1;
    int in_size, out_size, win0, win_n, reverse;
    int valid;
    int no_avx2;   /* use the SSE2 / plain passes even where AVX2 is there (tests) */
    int no_avx512; /* use the AVX2 (or SSE2 / plain) passes even where AVX-512 is there */
    int bicubic;   /* PIL's bicubic filter instead of the bilinear (tsock__decoder_set_filter) */
    int computed_bicubic; /* the filter the table was computed for (part of the key) */
    int ksize;
    int *bounds;
    int32_t *k;
    /* The taps again for the SIMD passes: per output, (ksize + 1) / 2 pairs of taps, each as
     * two int32 holding two int16: the taps' high 11 bits, then their low 11 bits, repeated
     * 4 times so that one 128-bit load broadcasts them. Products of 8-bit samples with these
     * fit pmaddwd, and high * 2048 + low gives PIL's exact sums. */
    int32_t *kp;
    /* The gather pass's tables (resize_gather.c), built at its first use for a stride: */
    int no_gather;     /* take the eight-row AVX-512 pass even where the gather pass can (tests) */
    int gather_stride; /* the stride they were built for; 0: none since the taps changed */
    int gather_groups; /* their groups; 0: the gather pass cannot take these taps */
    struct tsock__buf bounds_buf, k_buf, kp_buf, work_buf, gather_buf;
};

/* Computes (or keeps, when the key is unchanged) the table. Returns 0 or -ENOMEM / -EINVAL. */
int tsock__coeffs_compute(struct tsock__coeffs *c, double in0, double in1, int in_size,
                          int out_size, int win0, int win_n, int reverse);
void tsock__coeffs_free(struct tsock__coeffs *c);

/* The first source sample any kept output reads, and one past the last. */
void tsock__coeffs_span(const struct tsock__coeffs *c, int *first, int *end);

/* Horizontal pass of one row: `in` holds `in_bytes` bytes of source samples from the table's
 * sample `first` on (at least up to the span's end), `stride` bytes per pixel of which the
 * first `nch` are resampled; writes win_n * nch bytes, and may write one byte of junk after
 * them (on the next row, written later, or on tsock__buf_get's slack). */
void tsock__resample_row(const struct tsock__coeffs *c, const uint8_t *in, size_t in_bytes,
                         int first, int stride, int nch, uint8_t *out);

/* The horizontal pass of `rows` rows, in_pitch bytes apart in `in` and out_pitch apart in
 * `out`, as tsock__resample_row of each (the same bytes), faster: every row must have
 * in_bytes bytes readable from its start. `c` is not const: the gather pass keeps the tables
 * it builds at its first use in it. */
void tsock__resample_rows(struct tsock__coeffs *c, const uint8_t *in, size_t in_pitch,
                          size_t in_bytes, int first, int stride, int nch, uint8_t *out,
                          size_t out_pitch, int rows);

/* The gather pass (resize_gather.c), which tsock__resample_rows picks for 3-channel rows
 * where the CPU has AVX-512 with VBMI and VNNI (tsock__gather_cpu) and the AVX-512 passes are
 * on. tsock__gather_prepare builds its tables for `stride` (kept until the taps change) and
 * returns 1 when the pass can take them: every output's taps within 64 bytes, at most 10. */
int tsock__gather_cpu(void);
int tsock__gather_prepare(struct tsock__coeffs *c, int stride);
void tsock__gather_rows(const struct tsock__coeffs *c, const uint8_t *in, size_t in_pitch,
                        size_t in_bytes, int first, int stride, uint8_t *out, size_t out_pitch,
                        int rows);

/* The widest SIMD the passes use in this process: "avx512" (AVX-512 BW, VL and VNNI, unless
 * the environment's TSOCK_NO_AVX512 is "1"), "avx2", "sse2" or "plain". */
const char *tsock__resample_simd(void);

/* Whether PIL resizes in_w x in_h to out_w x out_h horizontal pass first (else vertical). */
int tsock__horizontal_first(int in_w, int in_h, int out_w, int out_h);

/* Vertical pass for the table's output y: `rows` holds source rows `pitch` bytes apart, the
 * first being the table's sample rows_first; the first `len` bytes of each take part (every
 * byte is a channel of its own). Writes len bytes to out; acc is scratch of len int32. */
void tsock__resample_col(const struct tsock__coeffs *c, int y, const uint8_t *rows, int rows_first,
                         size_t pitch, size_t len, int32_t *acc, uint8_t *out);

/* Writes a row of w pixels of nch (1 or 3) channels as RGB. */
void tsock__emit_row(const uint8_t *row, int w, int nch, uint8_t *dst);

/* PIL's CMYK-to-RGB conversion of pixels as libjpeg delivers them (Adobe polarity). In place
 * (out == in) is allowed. */
void tsock__cmyk_to_rgb(const uint8_t *in, uint8_t *out, int n);

/* The resize plan both codecs follow (resize_plan.c), in the coordinates of the decoded
 * (possibly DCT-scaled) image: which rows and columns the filter reads; the coefficient
 * tables it goes with are the decoder's `ch` and `cv`. Not the GPU conversion plan
 * (convert.h) nor a consumer's epoch plan (ring/epoch_plan.h). */
struct tsock__resize_plan {
    int src_w, src_h;     /* decoded image size (after DCT scaling) */
    int clamp_x, clamp_y; /* the crop's first column and row in decoded pixels */
    int need_x0, need_x1; /* decoded columns the horizontal pass reads: [need_x0, need_x1) */
    int need_y0, need_y1; /* decoded rows the vertical pass reads */
    int nch;              /* channels resampled: 1 (gray) or 3 */
    int hfirst;           /* horizontal pass first (PIL's order for these sizes) */
    int out_w, out_h;
};

struct tsock__decoder {
    uint64_t max_pixels;
    int max_scans;
    int flags;
    struct tsock__decode_report report;
    struct tsock__coeffs ch, cv;        /* horizontal and vertical tables */
    struct tsock__buf rows;             /* rows kept for the second pass */
    struct tsock__buf line;             /* codec output lines not kept */
    struct tsock__buf conv;             /* one row between passes */
    struct tsock__buf conv2;            /* one output row before it is written */
    struct tsock__buf acc;              /* vertical accumulators */
    struct tsock__buf image;            /* a whole decoded PNG */
    void *jpeg;                         /* struct tsock__jpeg (jpeg.c), created on first use */
    struct tsock__entry_points *points; /* the file's (tsock__decoder_set_entry_points) */
};

/* Sets up the resize plan and the tables for a decoded image of src_w x src_h, into which the crop
 * maps as the box [bx0, bx1) x [by0, by1) clamped to the pixels [cx0, cx1) x [cy0, cy1).
 * The pass order is PIL's for the clamp rectangle's size. Returns 0 or a negative code. */
int tsock__resize_plan_make(struct tsock__decoder *d, struct tsock__resize_plan *pl, int src_w,
                            int src_h, double bx0, double by0, double bx1, double by1, int cx0,
                            int cy0, int cx1, int cy1, const struct tsock__resize_spec *spec,
                            int nch);

/* The second half of every decode, once the codec has delivered its rows. With the horizontal
 * pass first, `rows` holds the horizontally resampled rows need_y0 .. need_y1-1 (out_w * nch
 * bytes each). Otherwise it holds the decoded rows need_y0 .. need_y1-1, `pitch` bytes apart,
 * each starting at decoded column `rows_x0` with `px` bytes per pixel of which the first nch
 * are used. Writes the output. Returns 0 or -ENOMEM. */
int tsock__resize_plan_finish(struct tsock__decoder *d, const struct tsock__resize_plan *pl,
                              const uint8_t *rows, size_t pitch, int rows_x0, int px, uint8_t *out);

/* Codec back ends. `info` is the probe's result for the data; `spec` has been checked and
 * holds the resolved crop. Return 0 or a negative code. */
int tsock__jpeg_decode(struct tsock__decoder *d, const uint8_t *data, size_t size,
                       const struct tsock__image_info *info, const struct tsock__resize_spec *spec,
                       uint8_t *out);
void tsock__jpeg_free(void *jpeg);
int tsock__png_decode(struct tsock__decoder *d, const uint8_t *data, size_t size,
                      const struct tsock__image_info *info, const struct tsock__resize_spec *spec,
                      uint8_t *out);

/* Restart intervals as entry points (restart.c). The MCU grid of a JPEG whose restart
 * intervals tile it, and where each interval's entropy-coded data lies. */
struct tsock__restart_index {
    int mcu_w, mcu_h;      /* source pixels per MCU */
    int mcus_x, mcus_y;    /* MCUs per row, rows of MCUs */
    int interval;          /* MCUs per restart interval */
    int rows_per_interval; /* intervals of whole rows: rows each; 0: intervals divide a row */
    int count;             /* intervals in the scan */
    size_t *bounds;        /* interval i is data[bounds[2i] .. bounds[2i + 1]), marker excluded */
    struct tsock__buf buf; /* holds bounds */
};
/* A rectangle of MCUs: columns [x0, x1), rows [y0, y1). */
struct tsock__mcu_window {
    int x0, y0, x1, y1;
};
/* The MCU grid and interval layout from the header alone (cheap: no data is read). Returns 0,
 * or -ENOENT when the file has no usable entry points (no restart interval, not sequential
 * Huffman, several scans, or intervals that start mid-row). */
int tsock__restart_grid(const struct tsock__image_info *info, struct tsock__restart_index *ix);
/* After tsock__restart_grid: finds every interval in the scan of `data` (probed into `info`;
 * the caller has checked it ends with an EOI). Returns 0; -EPROTO when its markers do not
 * follow its header (corrupt: decode it the ordinary way); -ENOMEM. */
int tsock__restart_index_scan(const uint8_t *data, size_t size,
                              const struct tsock__image_info *info,
                              struct tsock__restart_index *ix);
/* Both: tsock__restart_grid's -ENOENT, or tsock__restart_index_scan's result. */
int tsock__restart_index_build(const uint8_t *data, size_t size,
                               const struct tsock__image_info *info,
                               struct tsock__restart_index *ix);
/* Widens `w` (inside the grid) to whole intervals: columns to multiples of the interval, or,
 * with intervals of whole rows, to full rows and row counts in steps of an interval. */
void tsock__restart_window_align(const struct tsock__restart_index *ix,
                                 struct tsock__mcu_window *w);
/* Writes to `out` the JPEG that holds only the aligned window `w` of the indexed file: its
 * pixels are those of the window of the whole image, except that the window's edges are
 * upsampled as image edges. Returns its size in bytes (at out->p), or 0 when out of memory. */
size_t tsock__restart_window_write(const uint8_t *data, const struct tsock__image_info *info,
                                   const struct tsock__restart_index *ix,
                                   const struct tsock__mcu_window *w, struct tsock__buf *out);
void tsock__restart_index_free(struct tsock__restart_index *ix);

/* Whether a JPEG holds an EOI marker after its first scan header: a cheap, crop-independent
 * test for truncation (byte stuffing keeps FF D9 out of entropy-coded data). */
int tsock__jpeg_has_eoi(const uint8_t *data, size_t size, size_t header_size);

#endif
