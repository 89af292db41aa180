/* Separable antialiased resampling, bit-identical to Pillow's ImagingResample with the BILINEAR
 * filter on 8-bit images (libImaging/Resample.c), which is what torchvision's Resize and
 * RandomResizedCrop run on PIL images:
 *  - the triangle filter's support is 1 source pixel when enlarging and widens with the
 *    reduction factor when reducing (antialiasing);
 *  - each output pixel has its own taps, computed in double, normalised to sum 1, then rounded
 *    to 22-bit fixed point (PRECISION_BITS = 32 - 8 - 2);
 *  - one pass rounds to 8 bits and the other works on that; the horizontal pass runs first
 *    unless the height shrinks by more than twice as many pixels as the width (Pillow 13's
 *    rule; see tsock__horizontal_first).
 * Reproducing the double arithmetic step by step (and in PIL's order) is what makes the tables
 * identical, so the code below follows precompute_coeffs() closely on purpose.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#define TSOCK__SSE2 1
#endif
/* An AVX2 horizontal pass, compiled for AVX2 whatever the build's flags and chosen at run time
 * (gcc and clang on x86-64). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TSOCK__AVX2 1
#endif

#include "core/core.h"
#include "image/image_int.h"

#define PRECISION_BITS (32 - 8 - 2)

void *
tsock__buf_get(struct tsock__buf *b, size_t n)
{
    /* Every buffer has TSOCK__BUF_SLACK bytes beyond what was asked for: the SIMD horizontal
     * pass stores whole 4-byte words for 3-byte pixels. */
    n += TSOCK__BUF_SLACK;
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

/* PIL's bicubic filter (a = -0.5), support 2. Its negative lobes give negative taps, which the
 * passes handle: the 11-bit split below is two's complement, pmaddwd multiplies signed, and
 * the sums saturate as clip8 does. */
static double
bicubic_filter(double x)
{
    const double a = -0.5;
    if (x < 0.0)
        x = -x;
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

int
tsock__coeffs_compute(struct tsock__coeffs *c, double in0, double in1, int in_size, int out_size,
                      int win0, int win_n, int reverse)
{
    double support, scale, filterscale, ss;
    double *kk;
    size_t entries;
    int ksize;

    if (c->valid && c->in0 == in0 && c->in1 == in1 && c->in_size == in_size &&
        c->out_size == out_size && c->win0 == win0 && c->win_n == win_n && c->reverse == reverse &&
        c->computed_bicubic == c->bicubic)
        return 0;
    c->valid = 0;
    c->gather_stride = 0;
    if (in_size < 1 || out_size < 1 || win_n < 1 || win0 < 0 || win0 > out_size - win_n ||
        !(in1 > in0))
        return -EINVAL;

    filterscale = scale = (in1 - in0) / out_size;
    if (filterscale < 1.0)
        filterscale = 1.0;
    /* the bilinear filter's support is 1, the bicubic's 2 */
    support = (c->bicubic ? 2.0 : 1.0) * filterscale;
    /* Bounded by the caller's sizes (at most 2^16 source pixels per output pixel). */
    ksize = (int)ceil(support) * 2 + 1;

    if (tsock__mul_size((size_t)win_n, (size_t)ksize, &entries) != 0)
        return -ENOMEM;
    kk = tsock__buf_get(&c->work_buf, entries * sizeof(double));
    c->k = tsock__buf_get(&c->k_buf, entries * sizeof(int32_t));
    c->bounds = tsock__buf_get(&c->bounds_buf, (size_t)win_n * 2 * sizeof(int));
    c->kp = tsock__buf_get(&c->kp_buf, (size_t)win_n * (size_t)(ksize + 1) * 4 * sizeof(int32_t));
    if (!kk || !c->k || !c->bounds || !c->kp)
        return -ENOMEM;

    ss = 1.0 / filterscale;
    for (int i = 0; i < win_n; i++) {
        int xx = win0 + (reverse ? win_n - 1 - i : i);
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
            double u = (x + xmin - center + 0.5) * ss;
            double w = c->bicubic ? bicubic_filter(u) : bilinear_filter(u);
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
    /* Split into 11-bit halves for pmaddwd: the low half 0..2047, the high half k >> 11 as a
     * signed 16-bit value (bilinear taps are at most 1 << 22, so at most 2048; a bicubic tap may
     * be negative, and its high half then negative too). */
    for (int i = 0; i < win_n; i++) {
        const int32_t *k = c->k + (size_t)i * ksize;
        int32_t *kp = c->kp + (size_t)i * (ksize + 1) * 4;
        for (int t = 0; t < ksize; t += 2) {
            uint32_t a = (uint32_t)k[t], b = t + 1 < ksize ? (uint32_t)k[t + 1] : 0;
            for (int lane = 0; lane < 4; lane++) { /* stored broadcast, ready to load */
                kp[4 * t + lane] = (int32_t)(((a >> 11) & 0xFFFFu) | (b >> 11) << 16);
                kp[4 * t + 4 + lane] = (int32_t)((a & 2047) | (b & 2047) << 16);
            }
        }
    }

    c->in0 = in0;
    c->in1 = in1;
    c->in_size = in_size;
    c->out_size = out_size;
    c->win0 = win0;
    c->win_n = win_n;
    c->reverse = reverse;
    c->computed_bicubic = c->bicubic;
    c->ksize = ksize;
    c->valid = 1;
    return 0;
}

void
tsock__coeffs_free(struct tsock__coeffs *c)
{
    tsock__buf_free(&c->bounds_buf);
    tsock__buf_free(&c->k_buf);
    tsock__buf_free(&c->kp_buf);
    tsock__buf_free(&c->work_buf);
    tsock__buf_free(&c->gather_buf);
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

#ifdef TSOCK__SSE2
/* (high << 11) + low + rounding, shifted: PIL's clip8 of the exact sum, four lanes at once
 * (packs/packus saturate to 0..255 as clip8 clamps). */
static inline __m128i
combine(__m128i h, __m128i l)
{
    __m128i v = _mm_add_epi32(_mm_add_epi32(_mm_slli_epi32(h, 11), l),
                              _mm_set1_epi32(1 << (PRECISION_BITS - 1)));
    return _mm_srai_epi32(v, PRECISION_BITS);
}
#endif

/* One output sample (or RGB pixel) the plain way, as PIL's loop computes it. */
static inline void
row_scalar(const int32_t *k, int n, const uint8_t *p, int stride, int nch, uint8_t *out)
{
    for (int ch = 0; ch < nch; ch++) {
        int32_t s = 1 << (PRECISION_BITS - 1);
        for (int t = 0; t < n; t++)
            s += p[t * stride + ch] * k[t];
        out[ch] = clip8(s);
    }
}

/* Output pixel i, written to o, the plain way (PIL's loop), or 0 where it has no taps. */
static void
pixel_scalar(const struct tsock__coeffs *c, int i, const uint8_t *in, int first, int stride,
             int nch, uint8_t *o)
{
    const int n = c->bounds[2 * i + 1];

    if (n <= 0) {
        memset(o, 0, (size_t)nch); /* no taps: PIL's sum is the rounding term alone */
        return;
    }
    row_scalar(c->k + (size_t)i * c->ksize, n,
               in + (size_t)(c->bounds[2 * i] - first) * (size_t)stride, stride, nch, o);
}

#ifdef TSOCK__SSE2
/* RGB output pixel i, written to o: each pair of taps is two 8-byte loads (a pixel and the next),
 * interleaved so that pmaddwd sums R0*k0 + R1*k1 and so on; the fourth lane is ignored.
 * Returns 0 (nothing written) for a pixel without taps or whose loads would pass the end of
 * the row. */
static int
pixel_rgb_sse2(const struct tsock__coeffs *c, int i, const uint8_t *in, size_t in_bytes, int first,
               int stride, uint8_t *o)
{
    const int n = c->bounds[2 * i + 1];
    size_t off = (size_t)(c->bounds[2 * i] - first) * (size_t)stride;

    if (n <= 0 || off + (size_t)(n - 1) * stride + 8 > in_bytes)
        return 0;
    const uint8_t *p = in + off;
    const __m128i *kp = (const __m128i *)(const void *)(c->kp + (size_t)i * (c->ksize + 1) * 4);
    const __m128i z = _mm_setzero_si128();
    __m128i h = z, l = z;
    int t = 0;
    for (; t + 1 < n; t += 2, p += 2 * stride, kp += 2) {
        __m128i a = _mm_loadl_epi64((const __m128i *)(const void *)p);
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(p + stride));
        __m128i x = _mm_unpacklo_epi16(_mm_unpacklo_epi8(a, z), _mm_unpacklo_epi8(b, z));
        h = _mm_add_epi32(h, _mm_madd_epi16(x, _mm_loadu_si128(kp)));
        l = _mm_add_epi32(l, _mm_madd_epi16(x, _mm_loadu_si128(kp + 1)));
    }
    if (t < n) { /* odd tail: the pair's second tap is 0 */
        __m128i a = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(const void *)p), z);
        __m128i x = _mm_unpacklo_epi16(a, a);
        h = _mm_add_epi32(h, _mm_madd_epi16(x, _mm_loadu_si128(kp)));
        l = _mm_add_epi32(l, _mm_madd_epi16(x, _mm_loadu_si128(kp + 1)));
    }
    __m128i v = combine(h, l);
    v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
    /* Four bytes written, the fourth landing on the next pixel (written after this one) or on
     * the buffer's slack (tsock__buf_get). */
    uint32_t px = (uint32_t)_mm_cvtsi128_si32(v);
    memcpy(o, &px, 4);
    return 1;
}
#endif

/* Output pixel i of a row, written to o, by the fastest path that can take it; like every
 * RGB path, it may write one byte more. */
static void
pixel_to(const struct tsock__coeffs *c, int i, const uint8_t *in, size_t in_bytes, int first,
         int stride, int nch, uint8_t *o)
{
#ifdef TSOCK__SSE2
    if (nch == 3 && pixel_rgb_sse2(c, i, in, in_bytes, first, stride, o))
        return;
#else
    (void)in_bytes;
#endif
    pixel_scalar(c, i, in, first, stride, nch, o);
}

static inline void
one_pixel(const struct tsock__coeffs *c, int i, const uint8_t *in, size_t in_bytes, int first,
          int stride, int nch, uint8_t *out)
{
    pixel_to(c, i, in, in_bytes, first, stride, nch, out + (size_t)i * nch);
}

#ifdef TSOCK__AVX2
/* vpshufb controls that turn 16 bytes of RGB (stride 3) or RGBX (stride 4) pixels into the
 * 16-bit operands of one pair of taps: R_a R_b G_a G_b B_a B_b 0 0, for the pair (0, 1) and
 * the pair (2, 3) of the first four pixels (0x80 makes a zero byte). */
static const uint8_t pair_shuffle[2][2][16] = {
    {{0, 0x80, 3, 0x80, 1, 0x80, 4, 0x80, 2, 0x80, 5, 0x80, 0x80, 0x80, 0x80, 0x80},
     {6, 0x80, 9, 0x80, 7, 0x80, 10, 0x80, 8, 0x80, 11, 0x80, 0x80, 0x80, 0x80, 0x80}},
    {{0, 0x80, 4, 0x80, 1, 0x80, 5, 0x80, 2, 0x80, 6, 0x80, 0x80, 0x80, 0x80, 0x80},
     {8, 0x80, 12, 0x80, 9, 0x80, 13, 0x80, 10, 0x80, 14, 0x80, 0x80, 0x80, 0x80, 0x80}},
};

/* The 128-bit values at a and b as the low and high lane of one vector. */
__attribute__((target("avx2"))) static inline __m256i
lanes(const __m128i *a, const __m128i *b)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(a)), _mm_loadu_si128(b),
                                   1);
}

/* Two output pixels per step, one in each 128-bit lane. Each lane loads 16 source bytes once
 * per four taps, and vpshufb spreads them into the operands of a pair of taps (a pixel and
 * its right neighbour, channel by channel) for vpmaddwd with the taps' high and low halves.
 * The two pixels' tap counts may differ: the shorter one's extra taps are 0 in the table.
 * Pixels whose loads would pass the end of the row, or without taps, go to one_pixel.
 * Returns the number of pixels done (even). */
__attribute__((target("avx2"))) static int
row_rgb_avx2(const struct tsock__coeffs *c, const uint8_t *in, size_t in_bytes, int first,
             int stride, uint8_t *out)
{
    const int ksize = c->ksize;
    const size_t quad = 4 * (size_t)stride; /* bytes of four source pixels */
    const __m256i round = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    const __m256i shuf01 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)pair_shuffle[stride == 4][0]));
    const __m256i shuf23 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)pair_shuffle[stride == 4][1]));
    int i = 0;

    for (; i + 1 < c->win_n; i += 2) {
        const int *b = c->bounds + 2 * i;
        const int n = b[1] > b[3] ? b[1] : b[3], quads = (n + 3) / 4;
        size_t o0 = (size_t)(b[0] - first) * (size_t)stride;
        size_t o1 = (size_t)(b[2] - first) * (size_t)stride;
        size_t reach = (size_t)(quads - 1) * quad + 16;
        if (b[1] <= 0 || b[3] <= 0 || o0 + reach > in_bytes || o1 + reach > in_bytes) {
            one_pixel(c, i, in, in_bytes, first, stride, 3, out);
            one_pixel(c, i + 1, in, in_bytes, first, stride, 3, out);
            continue;
        }
        const uint8_t *p0 = in + o0, *p1 = in + o1;
        const __m128i *k0 = (const __m128i *)(const void *)(c->kp + (size_t)i * (ksize + 1) * 4);
        const __m128i *k1 =
            (const __m128i *)(const void *)(c->kp + (size_t)(i + 1) * (ksize + 1) * 4);
        __m256i h = _mm256_setzero_si256(), l = h;
        for (int q = 0; q < quads; q++, p0 += quad, p1 += quad, k0 += 4, k1 += 4) {
            __m256i x = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p0)),
                _mm_loadu_si128((const __m128i *)(const void *)p1), 1);
            __m256i a = _mm256_shuffle_epi8(x, shuf01);
            h = _mm256_add_epi32(h, _mm256_madd_epi16(a, lanes(k0, k1)));
            l = _mm256_add_epi32(l, _mm256_madd_epi16(a, lanes(k0 + 1, k1 + 1)));
            if (4 * q + 2 < n) { /* taps 2 and 3 of the quad */
                __m256i e = _mm256_shuffle_epi8(x, shuf23);
                h = _mm256_add_epi32(h, _mm256_madd_epi16(e, lanes(k0 + 2, k1 + 2)));
                l = _mm256_add_epi32(l, _mm256_madd_epi16(e, lanes(k0 + 3, k1 + 3)));
            }
        }
        __m256i v = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), round);
        v = _mm256_srai_epi32(v, PRECISION_BITS);
        v = _mm256_packs_epi32(v, v);
        v = _mm256_packus_epi16(v, v);
        uint32_t q0 = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(v));
        uint32_t q1 = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(v, 1));
        /* 4-byte stores for 3-byte pixels: the stray byte lands on the next pixel, written
         * later, or on the buffer's slack. */
        memcpy(out + (size_t)i * 3, &q0, 4);
        memcpy(out + (size_t)i * 3 + 3, &q1, 4);
    }
    return i;
}
#endif

#ifdef TSOCK__AVX2
/* combine() on eight lanes: (high << 11) + low + rounding, shifted. */
__attribute__((target("avx2"), always_inline)) static inline __m256i
combine256(__m256i h, __m256i l, __m256i round)
{
    return _mm256_srai_epi32(_mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(h, 11), l), round),
                             PRECISION_BITS);
}

/* Output pixel i's taps for the passes that load 16 source bytes per quad of taps: its first
 * source byte's offset, its tap count and its table; NULL (nothing to do here) for a pixel
 * without taps or whose loads would pass in_bytes. */
static inline const __m128i *
quad_taps(const struct tsock__coeffs *c, int i, size_t in_bytes, int first, int stride, size_t *off,
          int *n)
{
    *n = c->bounds[2 * i + 1];
    *off = (size_t)(c->bounds[2 * i] - first) * (size_t)stride;
    if (*n <= 0 || *off + (size_t)((*n + 3) / 4 - 1) * 4 * (size_t)stride + 16 > in_bytes)
        return NULL;
    return (const __m128i *)(const void *)(c->kp + (size_t)i * (size_t)(c->ksize + 1) * 4);
}

/* One pair of taps of one output pixel in four rows: x01 and x23 hold 16 source bytes of
 * rows 0 and 1, 2 and 3; shuf picks the pair's pixels; kp points at the pair's high and low
 * halves. */
__attribute__((target("avx2"), always_inline)) static inline void
tap_pair(__m256i x01, __m256i x23, __m256i shuf, const __m128i *kp, __m256i *h01, __m256i *l01,
         __m256i *h23, __m256i *l23)
{
    __m256i kh = _mm256_broadcastsi128_si256(kp[0]), kl = _mm256_broadcastsi128_si256(kp[1]);
    __m256i a01 = _mm256_shuffle_epi8(x01, shuf), a23 = _mm256_shuffle_epi8(x23, shuf);
    *h01 = _mm256_add_epi32(*h01, _mm256_madd_epi16(a01, kh));
    *l01 = _mm256_add_epi32(*l01, _mm256_madd_epi16(a01, kl));
    *h23 = _mm256_add_epi32(*h23, _mm256_madd_epi16(a23, kh));
    *l23 = _mm256_add_epi32(*l23, _mm256_madd_epi16(a23, kl));
}

/* Output pixel i of four rows at once, two rows per vector, one in each 128-bit lane. The
 * same output pixel of every row has the same taps, so each half of a pair of taps is one
 * broadcast load used four times, and the bookkeeping per pixel is shared: well under half
 * the instructions per pixel of row_rgb_avx2, which pairs two pixels of one row. Loads,
 * shuffles and sums are row_rgb_avx2's. Returns 0 (nothing written) where a load would pass
 * the end of a row. */
__attribute__((target("avx2"), always_inline)) static inline int
pixel4_rgb_avx2(const struct tsock__coeffs *c, int i, const uint8_t *const in[4], size_t in_bytes,
                int first, int stride, __m256i shuf01, __m256i shuf23, __m128i *px)
{
    const size_t quad = 4 * (size_t)stride; /* bytes of four source pixels */
    size_t off;
    int n;
    const __m128i *kp = quad_taps(c, i, in_bytes, first, stride, &off, &n);

    if (!kp)
        return 0;
    __m256i h01 = _mm256_setzero_si256(), l01 = h01, h23 = h01, l23 = h01;
    for (int q = 0; q < (n + 3) / 4; q++, off += quad, kp += 4) {
        __m256i x01 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(in[0] + off))),
            _mm_loadu_si128((const __m128i *)(const void *)(in[1] + off)), 1);
        __m256i x23 = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(in[2] + off))),
            _mm_loadu_si128((const __m128i *)(const void *)(in[3] + off)), 1);
        tap_pair(x01, x23, shuf01, kp, &h01, &l01, &h23, &l23);
        if (4 * q + 2 < n) /* taps 2 and 3 of the quad */
            tap_pair(x01, x23, shuf23, kp + 2, &h01, &l01, &h23, &l23);
    }
    const __m256i round = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    /* int32 lanes [r0 | r1] and [r2 | r3] -> bytes, lane 0: r0 r2, lane 1: r1 r3 */
    __m256i v = _mm256_packs_epi32(combine256(h01, l01, round), combine256(h23, l23, round));
    v = _mm256_packus_epi16(v, v);
    /* rows 0 2 | 1 3 in the low dwords of the lanes: interleaved into rows 0 1 2 3 */
    *px = _mm_unpacklo_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    return 1;
}

/* Stores row r's pixel (dword r of px, 4 bytes of which the last is junk) at o. The lane is
 * stored straight from the register: going through an array of four made every pixel wait
 * on a store-to-load round trip. */
__attribute__((target("avx2"), always_inline)) static inline void
store_lane(uint8_t *o, __m128i px, int r)
{
    uint32_t v;
    switch (r) {
    case 0: v = (uint32_t)_mm_cvtsi128_si32(px); break;
    case 1: v = (uint32_t)_mm_extract_epi32(px, 1); break;
    case 2: v = (uint32_t)_mm_extract_epi32(px, 2); break;
    default: v = (uint32_t)_mm_extract_epi32(px, 3); break;
    }
    memcpy(o, &v, 4);
}

/* The horizontal pass of four rows. Pixels are written with 4-byte stores whose stray byte
 * lands on the next pixel, written later, except at the end of a row: there the next row's
 * first pixel is already written, so the last pixel of each row is stored exactly. */
__attribute__((target("avx2"))) static void
rows4_rgb_avx2(const struct tsock__coeffs *c, const uint8_t *const in[4], size_t in_bytes,
               int first, int stride, uint8_t *out, size_t out_pitch)
{
    const __m256i shuf01 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)pair_shuffle[stride == 4][0]));
    const __m256i shuf23 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(const void *)pair_shuffle[stride == 4][1]));
    const int last = c->win_n - 1;
    __m128i px;

    /* One output pointer and the pitch, not four pointers: fewer registers held across the
     * loop (four were spilled to the stack and reloaded for every pixel). */
    for (int i = 0; i < last; i++) {
        uint8_t *o = out + (size_t)i * 3;
        if (pixel4_rgb_avx2(c, i, in, in_bytes, first, stride, shuf01, shuf23, &px)) {
            store_lane(o, px, 0);
            store_lane(o + out_pitch, px, 1);
            store_lane(o + 2 * out_pitch, px, 2);
            store_lane(o + 3 * out_pitch, px, 3);
        } else {
            for (int r = 0; r < 4; r++)
                one_pixel(c, i, in[r], in_bytes, first, stride, 3, out + r * out_pitch);
        }
    }
    if (last < 0)
        return;
    uint8_t exact[4][4];
    if (pixel4_rgb_avx2(c, last, in, in_bytes, first, stride, shuf01, shuf23, &px))
        _mm_storeu_si128((__m128i *)(void *)exact, px);
    else
        for (int r = 0; r < 4; r++)
            pixel_to(c, last, in[r], in_bytes, first, stride, 3, exact[r]);
    for (int r = 0; r < 4; r++)
        memcpy(out + r * out_pitch + (size_t)last * 3, exact[r], 3);
}
#endif

#ifdef TSOCK__AVX2
/* The AVX-512 horizontal pass: eight rows at once, four in each 512-bit vector (one per
 * 128-bit lane), so each broadcast of a pair of taps serves eight rows, and vpdpwssd (VNNI)
 * multiplies and adds in one instruction. Same loads, shuffles and sums as pixel4_rgb_avx2,
 * so the same bytes; 0.84 x its time in a microbenchmark of the pass (docs/benchmarks.md). */
#define TSOCK__AVX512_TARGET "avx512f,avx512bw,avx512vl,avx512vnni"

static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;
static int avx512_on;

/* Whether the AVX-512 passes run: the CPU has AVX-512 BW, VL and VNNI, and TSOCK_NO_AVX512 is
 * not "1". Intel's Skylake-SP and Cascade Lake lower a core's clock while it runs 512-bit
 * multiplies, which may cost the rest of a decode more than the passes save (not measured: no
 * such machine here); the variable is the way out there. Decided once per process. */
static void
choose_avx512(void)
{
    const char *v = getenv("TSOCK_NO_AVX512");
    int cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    if (v && strcmp(v, "1") == 0) {
        if (cpu)
            tsock__log(TSOCK_LOG_INFO, "TSOCK_NO_AVX512=1: resampling with AVX2, not AVX-512");
        return;
    }
    if (v && *v && strcmp(v, "0") != 0)
        tsock__log(TSOCK_LOG_WARN,
                   "TSOCK_NO_AVX512=%s ignored: only \"1\" turns the AVX-512 passes off", v);
    avx512_on = cpu;
}

static int
has_avx512(void)
{
    pthread_once(&avx512_once, choose_avx512);
    return avx512_on;
}

/* combine256 on sixteen lanes. */
__attribute__((target(TSOCK__AVX512_TARGET), always_inline)) static inline __m512i
combine512(__m512i h, __m512i l, __m512i round)
{
    return _mm512_srai_epi32(_mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(h, 11), l), round),
                             PRECISION_BITS);
}

/* 16 bytes at off of four rows, one row per 128-bit lane. */
__attribute__((target(TSOCK__AVX512_TARGET), always_inline)) static inline __m512i
lanes4(const uint8_t *const in[4], size_t off)
{
    __m512i x =
        _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(const void *)(in[0] + off)));
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(in[1] + off)), 1);
    x = _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(in[2] + off)), 2);
    return _mm512_inserti32x4(x, _mm_loadu_si128((const __m128i *)(const void *)(in[3] + off)), 3);
}

/* tap_pair for eight rows: xa holds rows 0-3, xb rows 4-7. */
__attribute__((target(TSOCK__AVX512_TARGET), always_inline)) static inline void
tap_pair8(__m512i xa, __m512i xb, __m512i shuf, const __m128i *kp, __m512i *ha, __m512i *la,
          __m512i *hb, __m512i *lb)
{
    __m512i kh = _mm512_broadcast_i32x4(_mm_loadu_si128(kp)),
            kl = _mm512_broadcast_i32x4(_mm_loadu_si128(kp + 1));
    __m512i a = _mm512_shuffle_epi8(xa, shuf), b = _mm512_shuffle_epi8(xb, shuf);
    *ha = _mm512_dpwssd_epi32(*ha, a, kh);
    *la = _mm512_dpwssd_epi32(*la, a, kl);
    *hb = _mm512_dpwssd_epi32(*hb, b, kh);
    *lb = _mm512_dpwssd_epi32(*lb, b, kl);
}

/* Output pixel i of eight rows: px gets row r's pixel (3 bytes and one of junk) in dword r.
 * Returns 0 (nothing computed) where a load would pass the end of a row or the pixel has no
 * taps, as pixel4_rgb_avx2. */
__attribute__((target(TSOCK__AVX512_TARGET), always_inline)) static inline int
pixel8_rgb_avx512(const struct tsock__coeffs *c, int i, const uint8_t *const in[8], size_t in_bytes,
                  int first, int stride, __m512i shuf01, __m512i shuf23, __m256i *px)
{
    const size_t quad = 4 * (size_t)stride;
    size_t off;
    int n;
    const __m128i *kp = quad_taps(c, i, in_bytes, first, stride, &off, &n);

    if (!kp)
        return 0;
    __m512i ha = _mm512_setzero_si512(), la = ha, hb = ha, lb = ha;
    for (int q = 0; q < (n + 3) / 4; q++, off += quad, kp += 4) {
        __m512i xa = lanes4(in, off), xb = lanes4(in + 4, off);
        tap_pair8(xa, xb, shuf01, kp, &ha, &la, &hb, &lb);
        if (4 * q + 2 < n) /* taps 2 and 3 of the quad */
            tap_pair8(xa, xb, shuf23, kp + 2, &ha, &la, &hb, &lb);
    }
    const __m512i round = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
    /* lane L: row L's channels, then row L + 4's, as words, then bytes: dword 4L is row L's
     * pixel and dword 4L + 1 row L + 4's */
    __m512i v = _mm512_packs_epi32(combine512(ha, la, round), combine512(hb, lb, round));
    v = _mm512_packus_epi16(v, v);
    const __m512i rows = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    *px = _mm512_castsi512_si256(_mm512_permutexvar_epi32(rows, v));
    return 1;
}

/* Output pixel i of eight rows, by pixel8_rgb_avx512 or else row by row the plain way. */
__attribute__((target(TSOCK__AVX512_TARGET), always_inline)) static inline __m256i
pixel8_any(const struct tsock__coeffs *c, int i, const uint8_t *const in[8], size_t in_bytes,
           int first, int stride, __m512i shuf01, __m512i shuf23)
{
    __m256i px;
    if (pixel8_rgb_avx512(c, i, in, in_bytes, first, stride, shuf01, shuf23, &px))
        return px;
    uint8_t o[8][4] = {{0}};
    for (int r = 0; r < 8; r++)
        pixel_to(c, i, in[r], in_bytes, first, stride, 3, o[r]);
    return _mm256_loadu_si256((const __m256i *)(const void *)o);
}

/* Writes four output pixels of eight rows (p0..p3, each as pixel8_rgb_avx512 gives it) to
 * out, row r at out + r * pitch: transposed to four pixels per row and packed to 12 bytes,
 * of which the masked store writes the first 3 * m, so nothing else is touched. */
__attribute__((target(TSOCK__AVX512_TARGET), always_inline)) static inline void
store4x8(__m256i p0, __m256i p1, __m256i p2, __m256i p3, uint8_t *out, size_t pitch, int m)
{
    const __m256i pack = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0,
                                          1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    const __mmask16 mask = (__mmask16)((1u << (3 * m)) - 1);
    __m256i t0 = _mm256_unpacklo_epi32(p0, p1), t1 = _mm256_unpackhi_epi32(p0, p1);
    __m256i t2 = _mm256_unpacklo_epi32(p2, p3), t3 = _mm256_unpackhi_epi32(p2, p3);
    /* u_r: row r's four pixels in the low lane, row r + 4's in the high lane */
    __m256i u[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                    _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
    for (int r = 0; r < 4; r++) {
        __m256i v = _mm256_shuffle_epi8(u[r], pack);
        _mm_mask_storeu_epi8(out + (size_t)r * pitch, mask, _mm256_castsi256_si128(v));
        _mm_mask_storeu_epi8(out + (size_t)(r + 4) * pitch, mask, _mm256_extracti128_si256(v, 1));
    }
}

/* The horizontal pass of eight rows, four output pixels at a time. */
__attribute__((target(TSOCK__AVX512_TARGET))) static void
rows8_rgb_avx512(const struct tsock__coeffs *c, const uint8_t *const in[8], size_t in_bytes,
                 int first, int stride, uint8_t *out, size_t out_pitch)
{
    const __m512i shuf01 = _mm512_broadcast_i32x4(
        _mm_loadu_si128((const __m128i *)(const void *)pair_shuffle[stride == 4][0]));
    const __m512i shuf23 = _mm512_broadcast_i32x4(
        _mm_loadu_si128((const __m128i *)(const void *)pair_shuffle[stride == 4][1]));
    const __m256i z = _mm256_setzero_si256();

    for (int i = 0; i < c->win_n; i += 4) {
        const int m = c->win_n - i < 4 ? c->win_n - i : 4;
        __m256i p0 = pixel8_any(c, i, in, in_bytes, first, stride, shuf01, shuf23);
        __m256i p1 = m > 1 ? pixel8_any(c, i + 1, in, in_bytes, first, stride, shuf01, shuf23) : z;
        __m256i p2 = m > 2 ? pixel8_any(c, i + 2, in, in_bytes, first, stride, shuf01, shuf23) : z;
        __m256i p3 = m > 3 ? pixel8_any(c, i + 3, in, in_bytes, first, stride, shuf01, shuf23) : z;
        store4x8(p0, p1, p2, p3, out + (size_t)i * 3, out_pitch, m);
    }
}
#endif

void
tsock__resample_rows(struct tsock__coeffs *c, const uint8_t *in, size_t in_pitch, size_t in_bytes,
                     int first, int stride, int nch, uint8_t *out, size_t out_pitch, int rows)
{
    int y = 0;

#ifdef TSOCK__AVX2
    if (nch == 3 && (stride == 3 || stride == 4) && !c->no_avx512 && has_avx512()) {
        /* the gather pass where the CPU also has VBMI and the taps fit it */
        if (!c->no_gather && tsock__gather_cpu() && tsock__gather_prepare(c, stride)) {
            tsock__gather_rows(c, in, in_pitch, in_bytes, first, stride, out, out_pitch, rows);
            return;
        }
        for (; y + 7 < rows; y += 8) {
            const uint8_t *const src[8] = {
                in + (size_t)y * in_pitch,       in + (size_t)(y + 1) * in_pitch,
                in + (size_t)(y + 2) * in_pitch, in + (size_t)(y + 3) * in_pitch,
                in + (size_t)(y + 4) * in_pitch, in + (size_t)(y + 5) * in_pitch,
                in + (size_t)(y + 6) * in_pitch, in + (size_t)(y + 7) * in_pitch};
            rows8_rgb_avx512(c, src, in_bytes, first, stride, out + (size_t)y * out_pitch,
                             out_pitch);
        }
    }
    if (nch == 3 && (stride == 3 || stride == 4) && !c->no_avx2 && __builtin_cpu_supports("avx2")) {
        for (; y + 3 < rows; y += 4) {
            const uint8_t *const src[4] = {
                in + (size_t)y * in_pitch, in + (size_t)(y + 1) * in_pitch,
                in + (size_t)(y + 2) * in_pitch, in + (size_t)(y + 3) * in_pitch};
            rows4_rgb_avx2(c, src, in_bytes, first, stride, out + (size_t)y * out_pitch, out_pitch);
        }
    }
#endif
    for (; y < rows; y++)
        tsock__resample_row(c, in + (size_t)y * in_pitch, in_bytes, first, stride, nch,
                            out + (size_t)y * out_pitch);
}

void
tsock__resample_row(const struct tsock__coeffs *c, const uint8_t *in, size_t in_bytes, int first,
                    int stride, int nch, uint8_t *out)
{
    int i = 0;

#ifdef TSOCK__AVX2
    if (nch == 3 && (stride == 3 || stride == 4) && !c->no_avx2 && __builtin_cpu_supports("avx2"))
        i = row_rgb_avx2(c, in, in_bytes, first, stride, out);
#endif
    for (; i < c->win_n; i++)
        one_pixel(c, i, in, in_bytes, first, stride, nch, out);
}

const char *
tsock__resample_simd(void)
{
#ifdef TSOCK__AVX2
    if (has_avx512())
        return "avx512";
    if (__builtin_cpu_supports("avx2"))
        return "avx2";
#endif
#ifdef TSOCK__SSE2
    return "sse2";
#else
    return "plain";
#endif
}

int
tsock__horizontal_first(int in_w, int in_h, int out_w, int out_h)
{
    /* Pillow 13's ImagingResampleInner: "If height is being scaled down more than twice the
     * amount the width is, run the vertical pass first". Earlier Pillow always ran the
     * horizontal pass first; the two orders differ by at most 1 level at some pixels. */
    int64_t dh = (int64_t)in_h - out_h, dw = (int64_t)in_w - out_w;
    return !(dh > 0 && dh > dw * 2);
}

#ifdef TSOCK__AVX2
/* The SSE2 vertical loop of tsock__resample_col at twice the width, 32 samples at a time.
 * Unpacking and packing both work within 128-bit lanes and each undoes the other, so the
 * samples come out in order. Returns the number of samples done. */
__attribute__((target("avx2"))) static size_t
col_avx2(const int32_t *kp, int n, const uint8_t *src, size_t pitch, size_t len, uint8_t *out)
{
    const __m256i z = _mm256_setzero_si256();
    const __m256i round = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    size_t i = 0;

    /* Eight named accumulators, not arrays: at -O2 arrays indexed in inner loops were kept on
     * the stack, and the loads and stores cost more than the arithmetic. */
    for (; i + 32 <= len; i += 32) {
        __m256i h0 = z, h1 = z, h2 = z, h3 = z, l0 = z, l1 = z, l2 = z, l3 = z;
        const uint8_t *r = src + i;
        for (int t = 0; t < n; t += 2, r += 2 * pitch) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)r);
            __m256i b = t + 1 < n ? _mm256_loadu_si256((const __m256i *)(const void *)(r + pitch))
                                  : a; /* odd tail: its tap is 0 */
            __m256i alo = _mm256_unpacklo_epi8(a, z), ahi = _mm256_unpackhi_epi8(a, z);
            __m256i blo = _mm256_unpacklo_epi8(b, z), bhi = _mm256_unpackhi_epi8(b, z);
            __m256i kh = _mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)(const void *)(kp + 4 * t)));
            __m256i kl = _mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)(const void *)(kp + 4 * t + 4)));
            __m256i x = _mm256_unpacklo_epi16(alo, blo);
            h0 = _mm256_add_epi32(h0, _mm256_madd_epi16(x, kh));
            l0 = _mm256_add_epi32(l0, _mm256_madd_epi16(x, kl));
            x = _mm256_unpackhi_epi16(alo, blo);
            h1 = _mm256_add_epi32(h1, _mm256_madd_epi16(x, kh));
            l1 = _mm256_add_epi32(l1, _mm256_madd_epi16(x, kl));
            x = _mm256_unpacklo_epi16(ahi, bhi);
            h2 = _mm256_add_epi32(h2, _mm256_madd_epi16(x, kh));
            l2 = _mm256_add_epi32(l2, _mm256_madd_epi16(x, kl));
            x = _mm256_unpackhi_epi16(ahi, bhi);
            h3 = _mm256_add_epi32(h3, _mm256_madd_epi16(x, kh));
            l3 = _mm256_add_epi32(l3, _mm256_madd_epi16(x, kl));
        }
        __m256i lo = _mm256_packs_epi32(combine256(h0, l0, round), combine256(h1, l1, round));
        __m256i hi = _mm256_packs_epi32(combine256(h2, l2, round), combine256(h3, l3, round));
        _mm256_storeu_si256((__m256i *)(void *)(out + i), _mm256_packus_epi16(lo, hi));
    }
    return i;
}
#endif

#ifdef TSOCK__AVX2
/* col_avx2 at twice the width again, 64 samples at a time, with vpdpwssd's multiply-add. */
__attribute__((target(TSOCK__AVX512_TARGET))) static size_t
col_avx512(const int32_t *kp, int n, const uint8_t *src, size_t pitch, size_t len, uint8_t *out)
{
    const __m512i z = _mm512_setzero_si512();
    const __m512i round = _mm512_set1_epi32(1 << (PRECISION_BITS - 1));
    size_t i = 0;

    for (; i + 64 <= len; i += 64) {
        __m512i h0 = z, h1 = z, h2 = z, h3 = z, l0 = z, l1 = z, l2 = z, l3 = z;
        const uint8_t *r = src + i;
        for (int t = 0; t < n; t += 2, r += 2 * pitch) {
            __m512i a = _mm512_loadu_si512((const void *)r);
            __m512i b = t + 1 < n ? _mm512_loadu_si512((const void *)(r + pitch))
                                  : a; /* odd tail: its tap is 0 */
            __m512i alo = _mm512_unpacklo_epi8(a, z), ahi = _mm512_unpackhi_epi8(a, z);
            __m512i blo = _mm512_unpacklo_epi8(b, z), bhi = _mm512_unpackhi_epi8(b, z);
            __m512i kh = _mm512_broadcast_i32x4(
                _mm_loadu_si128((const __m128i *)(const void *)(kp + 4 * t)));
            __m512i kl = _mm512_broadcast_i32x4(
                _mm_loadu_si128((const __m128i *)(const void *)(kp + 4 * t + 4)));
            __m512i x = _mm512_unpacklo_epi16(alo, blo);
            h0 = _mm512_dpwssd_epi32(h0, x, kh);
            l0 = _mm512_dpwssd_epi32(l0, x, kl);
            x = _mm512_unpackhi_epi16(alo, blo);
            h1 = _mm512_dpwssd_epi32(h1, x, kh);
            l1 = _mm512_dpwssd_epi32(l1, x, kl);
            x = _mm512_unpacklo_epi16(ahi, bhi);
            h2 = _mm512_dpwssd_epi32(h2, x, kh);
            l2 = _mm512_dpwssd_epi32(l2, x, kl);
            x = _mm512_unpackhi_epi16(ahi, bhi);
            h3 = _mm512_dpwssd_epi32(h3, x, kh);
            l3 = _mm512_dpwssd_epi32(l3, x, kl);
        }
        __m512i lo = _mm512_packs_epi32(combine512(h0, l0, round), combine512(h1, l1, round));
        __m512i hi = _mm512_packs_epi32(combine512(h2, l2, round), combine512(h3, l3, round));
        _mm512_storeu_si512((void *)(out + i), _mm512_packus_epi16(lo, hi));
    }
    return i;
}
#endif

void
tsock__resample_col(const struct tsock__coeffs *c, int y, const uint8_t *rows, int rows_first,
                    size_t pitch, size_t len, int32_t *acc, uint8_t *out)
{
    const int32_t *k = c->k + (size_t)y * c->ksize;
    const int n = c->bounds[2 * y + 1];
    const uint8_t *src = n > 0 ? rows + (size_t)(c->bounds[2 * y] - rows_first) * pitch : rows;
    const int32_t *kp = c->kp + (size_t)y * (c->ksize + 1) * 4;
    size_t i = 0;

#ifdef TSOCK__AVX2
    if (!c->no_avx512 && has_avx512())
        i = col_avx512(kp, n, src, pitch, len, out);
    if (!c->no_avx2 && __builtin_cpu_supports("avx2"))
        i += col_avx2(kp, n, src + i, pitch, len - i, out + i);
#endif
#ifdef TSOCK__SSE2
    /* 16 samples at a time: two rows (a pair of taps) interleaved into pmaddwd, with the
     * high and low halves of the taps summed apart and combined at the end (exact). */
    const __m128i z = _mm_setzero_si128();
    for (; i + 16 <= len; i += 16) {
        __m128i h0 = z, h1 = z, h2 = z, h3 = z, l0 = z, l1 = z, l2 = z, l3 = z;
        const uint8_t *r = src + i;
        for (int t = 0; t < n; t += 2, r += 2 * pitch) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)r);
            __m128i b = t + 1 < n ? _mm_loadu_si128((const __m128i *)(const void *)(r + pitch))
                                  : a; /* odd tail: its tap is 0 */
            __m128i alo = _mm_unpacklo_epi8(a, z), ahi = _mm_unpackhi_epi8(a, z);
            __m128i blo = _mm_unpacklo_epi8(b, z), bhi = _mm_unpackhi_epi8(b, z);
            __m128i x0 = _mm_unpacklo_epi16(alo, blo), x1 = _mm_unpackhi_epi16(alo, blo);
            __m128i x2 = _mm_unpacklo_epi16(ahi, bhi), x3 = _mm_unpackhi_epi16(ahi, bhi);
            __m128i kh = _mm_loadu_si128((const __m128i *)(const void *)(kp + 4 * t));
            __m128i kl = _mm_loadu_si128((const __m128i *)(const void *)(kp + 4 * t + 4));
            h0 = _mm_add_epi32(h0, _mm_madd_epi16(x0, kh));
            h1 = _mm_add_epi32(h1, _mm_madd_epi16(x1, kh));
            h2 = _mm_add_epi32(h2, _mm_madd_epi16(x2, kh));
            h3 = _mm_add_epi32(h3, _mm_madd_epi16(x3, kh));
            l0 = _mm_add_epi32(l0, _mm_madd_epi16(x0, kl));
            l1 = _mm_add_epi32(l1, _mm_madd_epi16(x1, kl));
            l2 = _mm_add_epi32(l2, _mm_madd_epi16(x2, kl));
            l3 = _mm_add_epi32(l3, _mm_madd_epi16(x3, kl));
        }
        __m128i lo = _mm_packs_epi32(combine(h0, l0), combine(h1, l1));
        __m128i hi = _mm_packs_epi32(combine(h2, l2), combine(h3, l3));
        _mm_storeu_si128((__m128i *)(void *)(out + i), _mm_packus_epi16(lo, hi));
    }
#endif
    /* The rest (or everything without SSE2): tap by tap over the row, the same sums as PIL's
     * per-pixel loop (integer addition is exact) in an order a compiler can vectorise. */
    if (i < len) {
        const uint8_t *r = src + i;
        size_t m = len - i;
        for (size_t j = 0; j < m; j++)
            acc[j] = 1 << (PRECISION_BITS - 1);
        for (int t = 0; t < n; t++, r += pitch) {
            const int32_t kt = k[t];
            for (size_t j = 0; j < m; j++)
                acc[j] += r[j] * kt;
        }
        for (size_t j = 0; j < m; j++)
            out[i + j] = clip8(acc[j]);
    }
}

void
tsock__emit_row(const uint8_t *row, int w, int nch, uint8_t *dst)
{
    if (nch == 3) {
        memcpy(dst, row, (size_t)w * 3);
        return;
    }
    for (int x = 0; x < w; x++)
        dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = row[x];
}

void
tsock__cmyk_to_rgb(const uint8_t *in, uint8_t *out, int n)
{
    /* PIL reads a 4-component JPEG with rawmode "CMYK;I" (it always assumes Adobe's inverted
     * polarity), so its CMYK is 255 minus libjpeg's output; Convert.c's cmyk2rgb then computes
     * nk - nk * C / 255 with nk = 255 - K and MULDIV255's rounding. In libjpeg's terms that is
     * below, and it reproduces PIL exactly. */
    for (int i = 0; i < n; i++, in += 4, out += 3) {
        /* All four read before any write: callers convert in place (out == in). */
        const int c[3] = {in[0], in[1], in[2]}, nk = in[3];
        for (int ch = 0; ch < 3; ch++) {
            int t = (255 - c[ch]) * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            out[ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}
