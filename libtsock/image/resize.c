/* Separable antialiased resampling, bit-identical to Pillow's ImagingResample with the BILINEAR
 * filter on 8-bit images (libImaging/Resample.c), which is what torchvision's Resize and
 * RandomResizedCrop run on PIL images:
 *  - the triangle filter's support is 1 source pixel when enlarging and widens with the
 *    reduction factor when reducing (antialiasing);
 *  - each output pixel has its own taps, computed in double, normalised to sum 1, then rounded
 *    to 22-bit fixed point (PRECISION_BITS = 32 - 8 - 2);
 *  - the horizontal pass runs first and rounds to 8 bits; the vertical pass works on that.
 * Reproducing the double arithmetic step by step (and in PIL's order) is what makes the tables
 * identical, so the code below follows precompute_coeffs() closely on purpose.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "image/image_int.h"

#define PRECISION_BITS (32 - 8 - 2)

void *
tsock__buf_get(struct tsock__buf *b, size_t n)
{
    if (n == 0)
        n = 1;
    if (n > b->cap) {
        /* Grow by half again, so that a slowly rising size does not reallocate every time. */
        size_t cap = n + n / 2;
        void *p = realloc(b->p, cap);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = cap;
    }
    return b->p;
}

void
tsock__buf_free(struct tsock__buf *b)
{
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

static double
bilinear_filter(double x)
{
    if (x < 0.0)
        x = -x;
    if (x < 1.0)
        return 1.0 - x;
    return 0.0;
}

int
tsock__coeffs_compute(struct tsock__coeffs *c, double in0, double in1, int in_size,
                      int out_size, int win0, int win_n)
{
    double support, scale, filterscale, ss;
    double *kk;
    size_t entries;
    int ksize;

    if (c->valid && c->in0 == in0 && c->in1 == in1 && c->in_size == in_size &&
        c->out_size == out_size && c->win0 == win0 && c->win_n == win_n)
        return 0;
    c->valid = 0;
    if (in_size < 1 || out_size < 1 || win_n < 1 || win0 < 0 || win0 > out_size - win_n ||
        !(in1 > in0))
        return -EINVAL;

    filterscale = scale = (in1 - in0) / out_size;
    if (filterscale < 1.0)
        filterscale = 1.0;
    support = 1.0 * filterscale; /* the bilinear filter's support is 1 */
    /* Bounded by the caller's sizes (at most 2^16 source pixels per output pixel). */
    ksize = (int)ceil(support) * 2 + 1;

    if (tsock__mul_size((size_t)win_n, (size_t)ksize, &entries) != 0)
        return -ENOMEM;
    kk = tsock__buf_get(&c->work_buf, entries * sizeof(double));
    c->k = tsock__buf_get(&c->k_buf, entries * sizeof(int32_t));
    c->bounds = tsock__buf_get(&c->bounds_buf, (size_t)win_n * 2 * sizeof(int));
    if (!kk || !c->k || !c->bounds)
        return -ENOMEM;

    ss = 1.0 / filterscale;
    for (int i = 0; i < win_n; i++) {
        int xx = win0 + i;
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0;
        double *k = &kk[(size_t)i * ksize];
        int xmin, xmax, x;

        xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        xmax = (int)(center + support + 0.5);
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        if (xmax < 0) /* only with a box outside the source, which callers never pass */
            xmax = 0;
        for (x = 0; x < xmax; x++) {
            double w = bilinear_filter((x + xmin - center + 0.5) * ss);
            k[x] = w;
            ww += w;
        }
        for (x = 0; x < xmax; x++)
            if (ww != 0.0)
                k[x] /= ww;
        for (; x < ksize; x++)
            k[x] = 0;
        c->bounds[i * 2] = xmin;
        c->bounds[i * 2 + 1] = xmax;
    }
    /* normalize_coeffs_8bpc() */
    for (size_t e = 0; e < entries; e++)
        c->k[e] = kk[e] < 0 ? (int32_t)(-0.5 + kk[e] * (1 << PRECISION_BITS))
                            : (int32_t)(0.5 + kk[e] * (1 << PRECISION_BITS));

    c->in0 = in0;
    c->in1 = in1;
    c->in_size = in_size;
    c->out_size = out_size;
    c->win0 = win0;
    c->win_n = win_n;
    c->ksize = ksize;
    c->valid = 1;
    return 0;
}

void
tsock__coeffs_free(struct tsock__coeffs *c)
{
    tsock__buf_free(&c->bounds_buf);
    tsock__buf_free(&c->k_buf);
    tsock__buf_free(&c->work_buf);
    memset(c, 0, sizeof *c);
}

void
tsock__coeffs_span(const struct tsock__coeffs *c, int *first, int *end)
{
    int lo = c->in_size, hi = 0;

    for (int i = 0; i < c->win_n; i++) {
        int a = c->bounds[2 * i], b = a + c->bounds[2 * i + 1];
        if (c->bounds[2 * i + 1] == 0)
            continue;
        if (a < lo)
            lo = a;
        if (b > hi)
            hi = b;
    }
    if (hi <= lo) /* no taps at all: read one sample so that the plan stays well formed */
        lo = 0, hi = 1;
    *first = lo;
    *end = hi;
}

static inline uint8_t
clip8(int32_t v)
{
    if (v >= (1 << PRECISION_BITS << 8))
        return 255;
    if (v <= 0)
        return 0;
    return (uint8_t)(v >> PRECISION_BITS);
}

void
tsock__resample_row(const struct tsock__coeffs *c, const uint8_t *in, int stride, int nch,
                    uint8_t *out)
{
    const int ksize = c->ksize;

    if (nch == 1) {
        for (int i = 0; i < c->win_n; i++) {
            const uint8_t *p = in + (size_t)c->bounds[2 * i] * stride;
            const int32_t *k = c->k + (size_t)i * ksize;
            int32_t s = 1 << (PRECISION_BITS - 1);
            for (int t = 0, n = c->bounds[2 * i + 1]; t < n; t++)
                s += p[t * stride] * k[t];
            out[i] = clip8(s);
        }
        return;
    }
    for (int i = 0; i < c->win_n; i++) {
        const uint8_t *p = in + (size_t)c->bounds[2 * i] * stride;
        const int32_t *k = c->k + (size_t)i * ksize;
        int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
        for (int t = 0, n = c->bounds[2 * i + 1]; t < n; t++, p += stride) {
            s0 += p[0] * k[t];
            s1 += p[1] * k[t];
            s2 += p[2] * k[t];
        }
        out[3 * i] = clip8(s0);
        out[3 * i + 1] = clip8(s1);
        out[3 * i + 2] = clip8(s2);
    }
}

void
tsock__resample_cols(const struct tsock__coeffs *c, const uint8_t *rows, int rows_first, int w,
                     int nch, int flip, int32_t *acc, uint8_t *out)
{
    const size_t row_bytes = (size_t)w * nch;
    const int ksize = c->ksize;

    for (int y = 0; y < c->win_n; y++) {
        const int32_t *k = c->k + (size_t)y * ksize;
        const uint8_t *src = rows + (size_t)(c->bounds[2 * y] - rows_first) * row_bytes;
        uint8_t *dst = out + (size_t)y * w * 3;

        /* Tap by tap over whole rows: the same sums as PIL's per-pixel loop (integer addition
         * is exact), in an order the compiler can vectorise. */
        for (size_t i = 0; i < row_bytes; i++)
            acc[i] = 1 << (PRECISION_BITS - 1);
        for (int t = 0, n = c->bounds[2 * y + 1]; t < n; t++, src += row_bytes) {
            const int32_t kt = k[t];
            for (size_t i = 0; i < row_bytes; i++)
                acc[i] += src[i] * kt;
        }
        if (nch == 1) {
            for (int x = 0; x < w; x++) {
                uint8_t v = clip8(acc[x]);
                uint8_t *o = dst + 3 * (size_t)(flip ? w - 1 - x : x);
                o[0] = o[1] = o[2] = v;
            }
        } else if (!flip) {
            for (size_t i = 0; i < row_bytes; i++)
                dst[i] = clip8(acc[i]);
        } else {
            for (int x = 0; x < w; x++) {
                uint8_t *o = dst + 3 * (size_t)(w - 1 - x);
                o[0] = clip8(acc[3 * x]);
                o[1] = clip8(acc[3 * x + 1]);
                o[2] = clip8(acc[3 * x + 2]);
            }
        }
    }
}

void
tsock__cmyk_to_rgb(const uint8_t *in, uint8_t *out, int n)
{
    /* PIL reads a 4-component JPEG with rawmode "CMYK;I" (it always assumes Adobe's inverted
     * polarity), so its CMYK is 255 minus libjpeg's output; Convert.c's cmyk2rgb then computes
     * nk - nk * C / 255 with nk = 255 - K and MULDIV255's rounding. In libjpeg's terms that is
     * below, and it reproduces PIL exactly. */
    for (int i = 0; i < n; i++, in += 4, out += 3) {
        int nk = in[3];
        for (int ch = 0; ch < 3; ch++) {
            int t = (255 - in[ch]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            out[ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}
