/* Shear, translate, rotate: torchvision's tensor affine (an inverse matrix, a float32 sampling
 * grid, grid_sample with zero padding and align_corners=False), nearest or bilinear. */
#include <math.h>
#include <string.h>

#include "augment/augment.h"
#include "augment/fp32.h"

/* _get_inverse_affine_matrix with scale 1 (double precision, as Python computes it). */
static void
inverse_matrix(const double center[2], double angle, double tx, double ty, double shear_x,
               double shear_y, double m[6])
{
    const double rad = M_PI / 180.0;
    double rot = angle * rad, sx = shear_x * rad, sy = shear_y * rad;
    double cx = center[0], cy = center[1];
    double cos_sy = cos(sy), tan_sx = tan(sx);
    double a = cos(rot - sy) / cos_sy;
    double b = -(a * tan_sx + sin(rot));
    double c = sin(rot - sy) / cos_sy;
    double d = cos(rot) - c * tan_sx;
    m[0] = d;
    m[1] = -b;
    m[2] = 0.0;
    m[3] = -c;
    m[4] = a;
    m[5] = 0.0;
    m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty);
    m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty);
}

/* The grid's affine map from output pixel (x, y) to grid_sample's source coordinates, all in
 * float32 as _affine_grid and the sampler compute it. */
struct grid {
    float r[3][2]; /* theta transposed, divided by (w/2, h/2) */
    float x0, y0;  /* linspace starts: (1 - w) / 2, (1 - h) / 2 (steps of exactly 1) */
    float sw, sh;  /* the sampler's unnormalising factors w/2, h/2 */
};

static void
grid_setup(struct grid *g, const double m[6], int w, int h)
{
    float hw = (float)(0.5 * w), hh = (float)(0.5 * h);
    for (int k = 0; k < 3; k++) {
        g->r[k][0] = (float)m[k] / hw;
        g->r[k][1] = (float)m[3 + k] / hh;
    }
    g->x0 = (float)((1.0 - w) * 0.5);
    g->y0 = (float)((1.0 - h) * 0.5);
    g->sw = (float)w / 2.0f;
    g->sh = (float)h / 2.0f;
}

/* Source coordinates of output pixel (x, y). */
TSOCK__INLINE void
grid_at(const struct grid *g, int x, int y, float *ix, float *iy, int hw)
{
    float bx = g->x0 + (float)x, by = g->y0 + (float)y;
    float gx = bx * g->r[0][0] + by * g->r[1][0] + g->r[2][0];
    float gy = bx * g->r[0][1] + by * g->r[1][1] + g->r[2][1];
    /* torch's sampler unnormalises with (g + 1) * size / 2 - 0.5, fused into one FMA. */
    *ix = tsock__fma32_sel(hw, gx + 1.0f, g->sw, -0.5f);
    *iy = tsock__fma32_sel(hw, gy + 1.0f, g->sh, -0.5f);
}

/* The source with a border of one zero pixel: `pitch` bytes per padded row, pixel (x, y) of
 * the image at padded (x + 1, y + 1). */
struct padded {
    const uint8_t *p;
    size_t pitch;
    int w, h;
};

TSOCK__INLINE void
sample_nearest(const struct padded *src, float ix, float iy, uint8_t *out)
{
    float rx = tsock__rint32(ix), ry = tsock__rint32(iy);
    if (rx < 0.0f || ry < 0.0f || rx > (float)(src->w - 1) || ry > (float)(src->h - 1)) {
        out[0] = out[1] = out[2] = 0;
        return;
    }
    memcpy(out, src->p + (size_t)((int)ry + 1) * src->pitch + (size_t)((int)rx + 1) * 3, 3);
}

TSOCK__INLINE void
sample_bilinear(const struct padded *src, float ix, float iy, uint8_t *out, int hw)
{
    float xw = tsock__floor32(ix), yn = tsock__floor32(iy);
    if (xw < -1.0f || yn < -1.0f || xw > (float)(src->w - 1) || yn > (float)(src->h - 1)) {
        out[0] = out[1] = out[2] = 0; /* all four corners outside: zero padding */
        return;
    }
    float we = ix - xw, e = 1.0f - we, n = iy - yn, s = 1.0f - n;
    float nw = s * e, ne = s * we, sw = n * e, se = n * we;
    /* Corners outside the image read the zero border (padding_mode="zeros"). */
    const uint8_t *p0 = src->p + (size_t)((int)yn + 1) * src->pitch + (size_t)((int)xw + 1) * 3;
    const uint8_t *p1 = p0 + src->pitch;
    for (int c = 0; c < 3; c++) {
        /* nw + ne + sw + se, each further term fused into an FMA as torch's kernel is. */
        float v = (float)p0[c] * nw;
        v = tsock__fma32_sel(hw, (float)p0[c + 3], ne, v);
        v = tsock__fma32_sel(hw, (float)p1[c], sw, v);
        v = tsock__fma32_sel(hw, (float)p1[c + 3], se, v);
        /* A convex combination of bytes: 0 <= v < 255.5, no clamp needed. */
        out[c] = (uint8_t)(int)tsock__rint32(v);
    }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_FMA_TARGET 1

/* A pixel's 3 bytes (and the next byte, unused) as 4 floats. */
__attribute__((target("fma"))) static inline __m128
load_px(const uint8_t *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    const __m128i z = _mm_setzero_si128();
    __m128i b = _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128((int)u), z), z);
    return _mm_cvtepi32_ps(b);
}

/* sample_bilinear with the three channels in one vector: the same operations lane by lane. */
__attribute__((target("fma"))) static inline void
sample_bilinear_fma(const struct padded *src, float ix, float iy, uint8_t *out)
{
    float xw = tsock__floor32(ix), yn = tsock__floor32(iy);
    if (xw < -1.0f || yn < -1.0f || xw > (float)(src->w - 1) || yn > (float)(src->h - 1)) {
        out[0] = out[1] = out[2] = 0;
        return;
    }
    float we = ix - xw, e = 1.0f - we, n = iy - yn, s = 1.0f - n;
    const uint8_t *p0 = src->p + (size_t)((int)yn + 1) * src->pitch + (size_t)((int)xw + 1) * 3;
    const uint8_t *p1 = p0 + src->pitch;
    __m128 v = _mm_mul_ps(load_px(p0), _mm_set1_ps(s * e));
    v = _mm_fmadd_ps(load_px(p0 + 3), _mm_set1_ps(s * we), v);
    v = _mm_fmadd_ps(load_px(p1), _mm_set1_ps(n * e), v);
    v = _mm_fmadd_ps(load_px(p1 + 3), _mm_set1_ps(n * we), v);
    const __m128 magic = _mm_set1_ps(12582912.0f); /* tsock__rint32's rounding, 0 <= v < 256 */
    __m128i q = _mm_cvttps_epi32(_mm_sub_ps(_mm_add_ps(v, magic), magic));
    q = _mm_packus_epi16(_mm_packs_epi32(q, q), q);
    uint32_t word = (uint32_t)_mm_cvtsi128_si32(q);
    memcpy(out, &word, 3);
}
#endif

/* Every output pixel from its grid position; hw: use the FMA instruction. */
TSOCK__INLINE void
warp_pixels(uint8_t *img, const struct padded *src, const struct grid *g, int interp, int hw)
{
    const int w = src->w, h = src->h;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float ix, iy;
            grid_at(g, x, y, &ix, &iy, hw);
            uint8_t *out = img + ((size_t)y * (size_t)w + (size_t)x) * 3;
            if (interp != TSOCK__AUG_BILINEAR)
                sample_nearest(src, ix, iy, out);
#ifdef HAVE_FMA_TARGET
            else if (hw)
                sample_bilinear_fma(src, ix, iy, out);
#endif
            else
                sample_bilinear(src, ix, iy, out, hw);
        }
}

/* Two builds of the loop, the same results: on x86-64 the FMA instruction where the CPU has
 * it (the baseline build has none), elsewhere the emulation. */
#ifdef HAVE_FMA_TARGET
__attribute__((target("fma"))) static void
warp_fma(uint8_t *img, const struct padded *src, const struct grid *g, int interp)
{
    warp_pixels(img, src, g, interp, 1);
}
#endif

static void
warp_plain(uint8_t *img, const struct padded *src, const struct grid *g, int interp)
{
    warp_pixels(img, src, g, interp, 0);
}

/* Copies the image into tmp with its zero border. */
static struct padded
pad(const uint8_t *img, int w, int h, uint8_t *tmp)
{
    struct padded p = {tmp, ((size_t)w + 2) * 3, w, h};
    memset(tmp, 0, p.pitch);
    for (int y = 0; y < h; y++) {
        uint8_t *row = tmp + (size_t)(y + 1) * p.pitch;
        memset(row, 0, 3);
        memcpy(row + 3, img + (size_t)y * (size_t)w * 3, (size_t)w * 3);
        memset(row + 3 + (size_t)w * 3, 0, 3);
    }
    memset(tmp + (size_t)(h + 1) * p.pitch, 0, p.pitch);
    return p;
}

static void
warp(uint8_t *img, int w, int h, const double m[6], int interp, uint8_t *tmp)
{
    struct grid g;
    grid_setup(&g, m, w, h);
    struct padded src = pad(img, w, h, tmp);
#ifdef HAVE_FMA_TARGET
    if (__builtin_cpu_supports("fma")) {
        warp_fma(img, &src, &g, interp);
        return;
    }
#endif
    warp_plain(img, &src, &g, interp);
}

void
tsock__aug_affine(uint8_t *img, int w, int h, double angle, double tx, double ty, double shear_x,
                  double shear_y, const double *center, int interp, uint8_t *tmp)
{
    /* Centre in pixels, moved so that (0, 0) is the image centre. */
    double c[2] = {0.0, 0.0};
    if (center) {
        c[0] = center[0] - w * 0.5;
        c[1] = center[1] - h * 0.5;
    }
    double m[6];
    inverse_matrix(c, angle, tx, ty, shear_x, shear_y, m);
    warp(img, w, h, m, interp, tmp);
}

/* torch.rot90 of an HWC image by k quarter turns (1: counter-clockwise); k = 1, 3 need a
 * square image. */
static void
rot90(uint8_t *img, int w, int h, int k, uint8_t *tmp)
{
    size_t n = (size_t)w * (size_t)h;
    memcpy(tmp, img, n * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sx, sy;
            if (k == 2) {
                sx = w - 1 - x;
                sy = h - 1 - y;
            } else if (k == 1) {
                sx = w - 1 - y;
                sy = x;
            } else {
                sx = y;
                sy = h - 1 - x;
            }
            memcpy(img + ((size_t)y * (size_t)w + (size_t)x) * 3,
                   tmp + ((size_t)sy * (size_t)w + (size_t)sx) * 3, 3);
        }
}

void
tsock__aug_rotate(uint8_t *img, int w, int h, double angle, int interp, uint8_t *tmp)
{
    /* Python's angle % 360, then torchvision's fast paths. */
    angle = fmod(angle, 360.0);
    if (angle < 0)
        angle += 360.0;
    if (angle == 0.0)
        return;
    if (angle == 180.0 || (w == h && (angle == 90.0 || angle == 270.0))) {
        rot90(img, w, h, angle == 180.0 ? 2 : angle == 90.0 ? 1 : 3, tmp);
        return;
    }
    double c[2] = {0.0, 0.0}, m[6];
    inverse_matrix(c, -angle, 0.0, 0.0, 0.0, 0.0, m);
    warp(img, w, h, m, interp, tmp);
}
