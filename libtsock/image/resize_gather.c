/* The gather pass: the horizontal resampling pass with one 64-byte load per row for a group of
 * up to five output pixels, where the CPU has AVX-512 VBMI and VNNI (Ice Lake, Zen 4 and
 * later).
 *
 * Why: the eight-row AVX-512 pass of resize.c loads and shuffles 16 source bytes per output
 * pixel, per quad of taps, and spends a quarter of its lanes on a fourth channel that is never
 * stored. Here consecutive output pixels share one load: when reducing by less than 4, five
 * pixels' taps lie within 64 bytes of a row. vpermb spreads those bytes into the operands of
 * each pair of taps (sixteen 32-bit lanes, one per pixel and channel: 15 used), and vpdpwssd
 * adds the products with the taps' high and low halves, so a group costs per row one load, one
 * vpermb and two vpdpwssd per pair of taps, and a store of its 15 bytes. The per-group tables
 * (byte indices and per-lane taps) are built once per table and stride.
 *
 * The sums are resize.c's: the same split taps, the same 32-bit arithmetic, the same rounding
 * and clamping, so the bytes are PIL's (tests/unit/test_image.c compares every pass). */
#include <stdint.h>
#include <string.h>

#include "image/image_int.h"

#define PRECISION_BITS (32 - 8 - 2)

/* The group's header, then per pair of taps: 64 vpermb indices, 16 high-half and 16 low-half
 * tap pairs (one per lane). Records are GATHER_RECORD bytes apart. */
struct gather_group {
    int32_t i0;      /* first output pixel */
    int32_t npix;    /* output pixels, 1..GATHER_PIXELS */
    int32_t pairs;   /* pairs of taps, up to the group's largest tap count */
    int32_t base;    /* source pixel of byte 0 of the 64-byte load */
    uint8_t pad[48]; /* the pairs' 64-byte vectors start a whole vector after the record's */
};

#define GATHER_PIXELS 5 /* 15 of the 16 lanes: three channels each */
#define GATHER_BYTES 64
#define GATHER_PAIR_BYTES (3 * GATHER_BYTES)
/* Up to 10 taps: a reduction by up to 4, which is what jpeg.c's DCT scaling leaves the resize
 * of any crop under 3,584 pixels across (and a val resize of any photograph whose short side
 * is under 1,024). Wider tables take the eight-row pass. */
#define GATHER_MAX_PAIRS 5
#define GATHER_RECORD (sizeof(struct gather_group) + GATHER_MAX_PAIRS * GATHER_PAIR_BYTES)

/* How many pixels from i0 fit one group: at most GATHER_PIXELS, and the taps of all of them
 * within 64 bytes from the smallest first tap (*base). Pixels without taps fit anywhere. */
static int
group_extent(const struct tsock__coeffs *c, int i0, int stride, int *base, int *max_n)
{
    int lo = 0, hi = 0, any = 0, npix = 0, widest = 0;

    for (int i = i0; i < c->win_n && npix < GATHER_PIXELS; i++) {
        const int x = c->bounds[2 * i], n = c->bounds[2 * i + 1];
        if (n > 0) {
            const int nlo = any && lo < x ? lo : x, nhi = any && hi > x + n ? hi : x + n;
            if ((nhi - nlo) * stride > GATHER_BYTES)
                break;
            lo = nlo, hi = nhi, any = 1;
            if (n > widest)
                widest = n;
        }
        npix++;
    }
    *base = lo;
    *max_n = widest;
    return npix;
}

/* Fills one group's pairs: lane 3p + ch (pixel i0 + p, channel ch) of pair t takes bytes
 * (x - base + 2t) * stride + ch and the next pixel's, as the low bytes of two words (vpermb's
 * zero mask clears the high bytes), with the taps' split halves from c->kp. Taps past a
 * pixel's count are 0 in c->kp; their index is then 0, any byte. */
static void
fill_group(const struct tsock__coeffs *c, struct gather_group *g, int stride)
{
    uint8_t *pairs = (uint8_t *)(g + 1);

    memset(pairs, 0, (size_t)g->pairs * GATHER_PAIR_BYTES);
    for (int t = 0; t < g->pairs; t++) {
        uint8_t *idx = pairs + (size_t)t * GATHER_PAIR_BYTES;
        int32_t hi[16] = {0}, lo[16] = {0};
        for (int p = 0; p < g->npix; p++) {
            const int i = g->i0 + p, n = c->bounds[2 * i + 1];
            const int32_t *kp = c->kp + (size_t)i * (size_t)(c->ksize + 1) * 4;
            const int d = c->bounds[2 * i] - g->base;
            for (int ch = 0; ch < 3; ch++) {
                const int lane = 3 * p + ch;
                if (2 * t < n)
                    idx[4 * lane] = (uint8_t)((d + 2 * t) * stride + ch);
                if (2 * t + 1 < n)
                    idx[4 * lane + 2] = (uint8_t)((d + 2 * t + 1) * stride + ch);
                hi[lane] = kp[8 * t]; /* t < pairs <= (ksize + 1) / 2: within the pixel's kp */
                lo[lane] = kp[8 * t + 4];
            }
        }
        memcpy(idx + GATHER_BYTES, hi, sizeof hi);
        memcpy(idx + 2 * GATHER_BYTES, lo, sizeof lo);
    }
}

int
tsock__gather_prepare(struct tsock__coeffs *c, int stride)
{
    if (c->gather_stride == stride)
        return c->gather_groups > 0;
    c->gather_stride = stride;
    c->gather_groups = 0;
    if ((c->ksize + 1) / 2 > GATHER_MAX_PAIRS)
        return 0;
    uint8_t *tab = tsock__buf_get(&c->gather_buf, GATHER_RECORD * (size_t)c->win_n);
    if (!tab)
        return 0; /* out of memory: the other passes need no table */
    int groups = 0;
    for (int i0 = 0; i0 < c->win_n; groups++) {
        struct gather_group *g =
            (struct gather_group *)(void *)(tab + (size_t)groups * GATHER_RECORD);
        int base, max_n;
        const int npix = group_extent(c, i0, stride, &base, &max_n);
        if (npix == 0) /* one pixel's taps span more than 64 bytes: the table cannot serve */
            return 0;
        memset(g, 0, sizeof *g);
        g->i0 = i0;
        g->npix = npix;
        g->pairs = max_n > 0 ? (max_n + 1) / 2 : 1; /* no taps at all: one pair of zeros */
        g->base = base;
        fill_group(c, g, stride);
        i0 += npix;
    }
    c->gather_groups = groups;
    return 1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define GATHER_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi"

int
tsock__gather_cpu(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vbmi");
}

/* One group over every row, with npairs pairs of taps (a constant at each call, so the tables
 * stay in registers across the rows). The rounding term starts the low sum: ((h << 11) + l +
 * round) >> 22 as resize.c's combine, then clamped to 0..255 as its packs do. */
__attribute__((target(GATHER_TARGET), always_inline)) static inline void
group_rows(const uint8_t *pairs, int npairs, const uint8_t *src, __mmask64 load, size_t in_pitch,
           uint8_t *dst, __mmask16 store, size_t out_pitch, int rows)
{
    __m512i idx[GATHER_MAX_PAIRS], hi[GATHER_MAX_PAIRS], lo[GATHER_MAX_PAIRS];
    const __m512i round = _mm512_set1_epi32(1 << (PRECISION_BITS - 1)),
                  zero = _mm512_setzero_si512();
    const __mmask64 low_bytes = 0x5555555555555555ull; /* bytes 0 and 2 of each lane */

    for (int t = 0; t < npairs; t++) {
        idx[t] = _mm512_loadu_si512(pairs + (size_t)t * GATHER_PAIR_BYTES);
        hi[t] = _mm512_loadu_si512(pairs + (size_t)t * GATHER_PAIR_BYTES + GATHER_BYTES);
        lo[t] = _mm512_loadu_si512(pairs + (size_t)t * GATHER_PAIR_BYTES + 2 * GATHER_BYTES);
    }
    for (int y = 0; y < rows; y++, src += in_pitch, dst += out_pitch) {
        const __m512i x = _mm512_maskz_loadu_epi8(load, src);
        __m512i h = zero, l = round;
        for (int t = 0; t < npairs; t++) {
            const __m512i a = _mm512_maskz_permutexvar_epi8(low_bytes, idx[t], x);
            h = _mm512_dpwssd_epi32(h, a, hi[t]);
            l = _mm512_dpwssd_epi32(l, a, lo[t]);
        }
        __m512i v =
            _mm512_srai_epi32(_mm512_add_epi32(_mm512_slli_epi32(h, 11), l), PRECISION_BITS);
        v = _mm512_max_epi32(v, zero);
        _mm_mask_storeu_epi8(dst, store, _mm512_cvtusepi32_epi8(v));
    }
}

__attribute__((target(GATHER_TARGET))) void
tsock__gather_rows(const struct tsock__coeffs *c, const uint8_t *in, size_t in_pitch,
                   size_t in_bytes, int first, int stride, uint8_t *out, size_t out_pitch, int rows)
{
    const uint8_t *tab = c->gather_buf.p;

    for (int k = 0; k < c->gather_groups; k++) {
        const struct gather_group *g =
            (const struct gather_group *)(const void *)(tab + (size_t)k * GATHER_RECORD);
        const uint8_t *pairs = (const uint8_t *)(g + 1);
        /* A group without taps has base 0, which may lie before `first`: it loads nothing. */
        const int taps = g->base >= first;
        const size_t off = taps ? (size_t)(g->base - first) * (size_t)stride : 0;
        /* only the row's bytes: the ones past in_bytes are loaded as 0 and weigh 0 */
        const size_t avail = taps && in_bytes > off ? in_bytes - off : 0;
        const __mmask64 load = avail >= GATHER_BYTES ? ~0ull : (1ull << avail) - 1;
        const __mmask16 store = (__mmask16)((1u << (3 * g->npix)) - 1);
        const uint8_t *src = in + off;
        uint8_t *dst = out + (size_t)g->i0 * 3;
        switch (g->pairs) { /* a constant count each: the unrolled loops keep their tables */
        case 1: group_rows(pairs, 1, src, load, in_pitch, dst, store, out_pitch, rows); break;
        case 2: group_rows(pairs, 2, src, load, in_pitch, dst, store, out_pitch, rows); break;
        case 3: group_rows(pairs, 3, src, load, in_pitch, dst, store, out_pitch, rows); break;
        case 4: group_rows(pairs, 4, src, load, in_pitch, dst, store, out_pitch, rows); break;
        default: group_rows(pairs, 5, src, load, in_pitch, dst, store, out_pitch, rows); break;
        }
    }
}
#else
int
tsock__gather_cpu(void)
{
    return 0;
}

void
tsock__gather_rows(const struct tsock__coeffs *c, const uint8_t *in, size_t in_pitch,
                   size_t in_bytes, int first, int stride, uint8_t *out, size_t out_pitch, int rows)
{
    (void)c, (void)in, (void)in_pitch, (void)in_bytes, (void)first, (void)stride, (void)out;
    (void)out_pitch, (void)rows;
}
#endif
