/* Synthetic photographs (see synth.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"

uint64_t
synth_mix(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15u;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

uint64_t
synth_next(struct synth_rng *g)
{
    uint64_t r = synth_mix(g->state);
    g->state += 0x9E3779B97F4A7C15u;
    return r;
}

double
synth_unit(struct synth_rng *g)
{
    return (double)(synth_next(g) >> 11) * (1.0 / 9007199254740992.0);
}

static double
uniform(struct synth_rng *g, double lo, double hi)
{
    return lo + (hi - lo) * synth_unit(g);
}

void
synth_dims(struct synth_rng *g, int *width, int *height)
{
    double u = synth_unit(g);
    if (u < 0.30) {
        *width = 500, *height = 375;
        return;
    }
    if (u < 0.40) {
        *width = 375, *height = 500;
        return;
    }
    if (u < 0.50) {
        *width = 500, *height = 333;
        return;
    }
    if (u < 0.53) {
        *width = 333, *height = 500;
        return;
    }
    double v = synth_unit(g), aspect;
    if (v < 0.35)
        aspect = 4.0 / 3.0;
    else if (v < 0.50)
        aspect = 3.0 / 4.0;
    else if (v < 0.65)
        aspect = 3.0 / 2.0;
    else if (v < 0.70)
        aspect = 2.0 / 3.0;
    else if (v < 0.80)
        aspect = 1.0;
    else
        aspect = exp(uniform(g, log(0.5), log(2.0)));
    double longest =
        synth_unit(g) < 0.05 ? uniform(g, 1000, 1400) : exp(uniform(g, log(75.0), log(900.0)));
    double w = aspect >= 1 ? longest : longest * aspect;
    double h = aspect >= 1 ? longest / aspect : longest;
    *width = w < 32 ? 32 : (int)lround(w);
    *height = h < 32 ? 32 : (int)lround(h);
}

void
synth_scratch_free(struct synth_scratch *s)
{
    for (int i = 0; i < 6; i++)
        free(s->f[i]);
    memset(s, 0, sizeof *s);
}

/* Symmetric noise in [-1, 1) from 32 random bits. */
static float
sym(uint32_t bits)
{
    return (float)((int32_t)bits) * (1.0f / 2147483648.0f);
}

/* Fills out[w*h] with fractal value noise: a coarse grid of random values is upsampled by
 * two, bilinearly, again and again until it covers the image; octave k (0 = coarsest) adds
 * fresh noise of amplitude amp * ratio^k, but only from octave `first` on, and none after
 * octave `last` (so a field can hold only the coarse or only the fine part of the spectrum).
 * Octave `first` gets amplitude `amp`. ratio = 0.5 gives an amplitude spectrum close to 1/f, as
 * photographs have; larger ratios rougher textures. a and b are scratch buffers of `cap` floats. */
static void
fractal(float *out, int w, int h, int first, int last, float amp, float ratio, struct synth_rng *g,
        float *a, float *b)
{
    int levels = 0, m = (w > h ? w : h) - 1;
    while ((m >> levels) > 4)
        levels++;
    int gw = ((w - 1) >> levels) + 2, gh = ((h - 1) >> levels) + 2;
    /* Octave `first` (or 0) gets amplitude amp, each finer one `ratio` times the last. */
    float level_amp = amp;
    for (int k = 0; k < first; k++)
        level_amp /= ratio;

    for (int i = 0; i < gw * gh; i++)
        a[i] = first <= 0 ? level_amp * sym((uint32_t)synth_next(g)) : 0.0f;
    for (int k = 1; k <= levels; k++) {
        int nw = 2 * gw - 1, nh = 2 * gh - 1;
        level_amp *= ratio;
        for (int y = 0; y < nh; y++) {
            const float *r0 = a + (y >> 1) * gw, *r1 = (y & 1) ? r0 + gw : r0;
            float *d = b + y * nw;
            for (int x = 0; x < gw - 1; x++) {
                float p = (r0[x] + r1[x]) * 0.5f, q = (r0[x + 1] + r1[x + 1]) * 0.5f;
                d[2 * x] = p;
                d[2 * x + 1] = (p + q) * 0.5f;
            }
            d[nw - 1] = (r0[gw - 1] + r1[gw - 1]) * 0.5f;
        }
        if (k >= first && k <= last) {
            int n = nw * nh, i = 0;
            for (; i + 1 < n; i += 2) {
                uint64_t r = synth_next(g);
                b[i] += level_amp * sym((uint32_t)r);
                b[i + 1] += level_amp * sym((uint32_t)(r >> 32));
            }
            if (i < n)
                b[i] += level_amp * sym((uint32_t)synth_next(g));
        }
        float *t = a;
        a = b;
        b = t;
        gw = nw;
        gh = nh;
    }
    for (int y = 0; y < h; y++)
        memcpy(out + (size_t)y * w, a + (size_t)y * gw, (size_t)w * sizeof *out);
}

static int
reserve(struct synth_scratch *s, size_t n)
{
    if (n <= s->cap)
        return 0;
    for (int i = 0; i < 6; i++) {
        free(s->f[i]);
        s->f[i] = malloc(n * sizeof(float));
        if (!s->f[i]) {
            synth_scratch_free(s);
            return -1;
        }
    }
    s->cap = n;
    return 0;
}

/* Coverage of a shape at (u, v) in its own frame: 1 inside, 0 outside, a ramp `soft` pixels
 * wide across the edge. Ellipses use the Euclidean norm, rectangles the maximum norm. */
static inline float
coverage(float u, float v, float rx, float ry, int rect, float soft)
{
    float nu = fabsf(u) / rx, nv = fabsf(v) / ry;
    float q = rect ? (nu > nv ? nu : nv) : sqrtf(nu * nu + nv * nv);
    float c = (1.0f - q) * (rx < ry ? rx : ry) / soft + 0.5f;
    return c < 0 ? 0 : (c > 1 ? 1 : c);
}

#define MAX_SHAPES 24

struct shape {
    float cx, cy, rx, ry, cs, sn, soft;
    int rect;
    float dy, dcb, dcr, tex;
};

/* The columns [*xa, *xb) of row y that a shape may cover: the row's chord through an ellipse
 * circumscribing the shape and its soft edge (solving the ellipse's quadratic in x), so the
 * coverage is evaluated only there. Returns 0 when the row misses the shape. */
static int
row_span(const struct shape *p, float y, int width, int *xa, int *xb)
{
    float k = (p->rect ? 1.4143f : 1.0f) + p->soft / (p->rx < p->ry ? p->rx : p->ry) + 0.05f;
    float irx = 1.0f / (p->rx * k * p->rx * k), iry = 1.0f / (p->ry * k * p->ry * k);
    float dy = y - p->cy;
    float a = p->cs * p->cs * irx + p->sn * p->sn * iry;
    float b = 2.0f * p->cs * p->sn * dy * (irx - iry);
    float c = dy * dy * (p->sn * p->sn * irx + p->cs * p->cs * iry) - 1.0f;
    float disc = b * b - 4 * a * c;
    if (disc < 0)
        return 0;
    float r = sqrtf(disc);
    float lo = p->cx + (-b - r) / (2 * a), hi = p->cx + (-b + r) / (2 * a);
    *xa = lo < 0 ? 0 : (int)lo;
    *xb = hi + 2 > (float)width ? width : (int)hi + 2;
    return *xa < *xb;
}

static uint8_t
clamp8(float v)
{
    return v <= 0 ? 0 : (v >= 255 ? 255 : (uint8_t)(v + 0.5f));
}

int
synth_image(uint64_t seed, int w, int h, uint8_t *rgb, struct synth_scratch *s)
{
    struct synth_rng g = {synth_mix(seed)};
    int cw = (w + 1) / 2, ch = (h + 1) / 2;
    /* The largest pyramid grid is under (2w + 8) x (2h + 8). */
    size_t grid = (size_t)(2 * w + 8) * (size_t)(2 * h + 8);
    if (reserve(s, grid) != 0)
        return -1;
    float *lum = s->f[0], *detail = s->f[1], *mask = s->f[2], *cb = s->f[3];
    float *a = s->f[4], *b = s->f[5];
    float *cr = mask + (size_t)w * h; /* mask is full size; chroma planes are a quarter */

    /* Per-image character: how rough the large scale is, how much fine texture there is
     * (log-normal, like the spread of JPEG sizes in a photo collection), brightness,
     * contrast and tint. */
    float roughness = (float)uniform(&g, 0.46, 0.60);
    float texture = (float)exp(uniform(&g, log(20.0), log(130.0)));
    float texture_ratio = (float)uniform(&g, 0.75, 0.90);
    float mean = (float)uniform(&g, 60, 180), contrast = (float)uniform(&g, 25, 70);
    float tint_cb = (float)uniform(&g, -25, 25), tint_cr = (float)uniform(&g, -25, 25);
    float chroma = (float)uniform(&g, 6, 22);
    float gx = (float)uniform(&g, -40, 40) / (float)w, gy = (float)uniform(&g, -40, 40) / (float)h;

    int levels = 0, m = (w > h ? w : h) - 1;
    while ((m >> levels) > 4)
        levels++;
    fractal(lum, w, h, 0, levels, contrast, roughness, &g, a, b);
    fractal(detail, w, h, levels - 3, levels, 1.0f, texture_ratio, &g, a, b);
    fractal(mask, w, h, 0, levels - 3, 1.0f, 0.55f, &g, a, b);
    /* Where the fine texture lives: everywhere at 45% at least, fully where a smooth mask
     * (mostly 0 or 1, with soft transitions) is high. */
    float threshold = (float)uniform(&g, -1.0, 0.4);
    /* Texture with edges: a soft threshold of the detail field turns it into blobs of many
     * sizes with crisp borders (leaves, pebbles, fur), rather than sensor-like grain. */
    float sharpness = (float)exp(uniform(&g, log(2.0), log(12.0)));
    for (size_t i = 0; i < (size_t)w * h; i++) {
        float v = detail[i] * sharpness;
        detail[i] = v / (1.0f + fabsf(v)) * 1.5f;
    }
    for (size_t i = 0; i < (size_t)w * h; i++) {
        float t = (mask[i] - threshold) * 4.0f + 0.5f;
        t = t < 0 ? 0 : (t > 1 ? 1 : t);
        lum[i] += texture * (0.45f + 0.55f * t * t * (3 - 2 * t)) * detail[i];
    }
    fractal(cb, cw, ch, 0, levels, chroma, 0.5f, &g, a, b);
    fractal(cr, cw, ch, 0, levels, chroma, 0.5f, &g, a, b);
    /* Colour follows texture a little, as in foliage or fabric: the detail field (taken at
     * every other pixel) tints the chroma planes along a random hue axis. */
    float hue = (float)uniform(&g, 0, 6.2831853), tint = (float)uniform(&g, 0, 20);
    float hcb = cosf(hue) * tint, hcr = sinf(hue) * tint;
    for (int y = 0; y < ch; y++)
        for (int x = 0; x < cw; x++) {
            float d = detail[(size_t)(2 * y < h ? 2 * y : h - 1) * w + (2 * x < w ? 2 * x : w - 1)];
            cb[(size_t)y * cw + x] += hcb * d;
            cr[(size_t)y * cw + x] += hcr * d;
        }

    /* Objects: drawn back to front, each with its own shade, colour and texture. */
    struct shape sh[MAX_SHAPES];
    int shapes = 2 + (int)(synth_next(&g) % (MAX_SHAPES - 1));
    for (int k = 0; k < shapes; k++) {
        float size = (float)exp(uniform(&g, log(0.02), log(0.45))) * (float)(w < h ? w : h);
        float angle = (float)uniform(&g, 0, 3.14159265);
        sh[k] = (struct shape){
            .cx = (float)uniform(&g, -0.1, 1.1) * (float)w,
            .cy = (float)uniform(&g, -0.1, 1.1) * (float)h,
            .rx = size * (float)uniform(&g, 0.4, 1.6),
            .ry = size * (float)uniform(&g, 0.4, 1.6),
            .cs = cosf(angle),
            .sn = sinf(angle),
            .soft = (float)exp(uniform(&g, log(0.6), log(6.0))),
            .rect = synth_unit(&g) < 0.4,
            .dy = (float)uniform(&g, -80, 80),
            .dcb = (float)uniform(&g, -30, 30),
            .dcr = (float)uniform(&g, -30, 30),
            .tex = (float)uniform(&g, -0.8, 1.5) * texture,
        };
    }
    for (int k = 0; k < shapes; k++) {
        const struct shape *p = &sh[k];
        float reach = (p->rx > p->ry ? p->rx : p->ry) * 1.42f + p->soft;
        int y0 = (int)(p->cy - reach), y1 = (int)(p->cy + reach) + 1;
        y0 = y0 < 0 ? 0 : y0;
        y1 = y1 > h ? h : y1;
        /* The object's texture: the detail field seen at another place, so it is as
         * spatially coherent as the scene's but different from what it covers. */
        size_t n = (size_t)w * h, shift = ((size_t)(k + 1) * ((size_t)w * 37 + 13)) % n;
        for (int y = y0; y < y1; y++) {
            float dy = (float)y - p->cy;
            int xa, xb;
            if (!row_span(p, (float)y, w, &xa, &xb))
                continue;
            for (int x = xa; x < xb; x++) {
                float dx = (float)x - p->cx;
                float c = coverage(dx * p->cs + dy * p->sn, -dx * p->sn + dy * p->cs, p->rx, p->ry,
                                   p->rect, p->soft);
                if (c > 0) {
                    size_t i = (size_t)y * w + x;
                    /* Covering what is behind: the object's shade replaces the scene's
                     * large-scale variation partly, and its texture the scene's. */
                    size_t j = i + shift < n ? i + shift : i + shift - n;
                    lum[i] += c * (p->dy + p->tex * detail[j] - 0.25f * (lum[i] - mean));
                }
            }
        }
        for (int y = y0 / 2; y < (y1 + 1) / 2 && y < ch; y++) {
            float dy = (float)(2 * y) - p->cy;
            int xa, xb;
            if (!row_span(p, (float)(2 * y), w, &xa, &xb))
                continue;
            for (int x = xa / 2; x < (xb + 1) / 2 && x < cw; x++) {
                float dx = (float)(2 * x) - p->cx;
                float c = coverage(dx * p->cs + dy * p->sn, -dx * p->sn + dy * p->cs, p->rx, p->ry,
                                   p->rect, p->soft);
                if (c > 0) {
                    size_t i = (size_t)y * cw + x;
                    cb[i] += c * (p->dcb - 0.5f * cb[i]);
                    cr[i] += c * (p->dcr - 0.5f * cr[i]);
                }
            }
        }
    }

    /* Thin strokes (twigs, grass, wires, hair): the sharp, high-contrast detail that
     * makes up much of a photograph's JPEG size. Each is a gently curving path stamped with
     * an antialiased disc; their number varies widely from image to image. */
    int nstrokes = (int)exp(uniform(&g, 0, log(300.0)));
    for (int k = 0; k < nstrokes; k++) {
        float x = (float)uniform(&g, 0, w), y = (float)uniform(&g, 0, h);
        float angle = (float)uniform(&g, 0, 6.2831853), bend = (float)uniform(&g, -0.006, 0.006);
        float length = (float)exp(uniform(&g, log(8.0), log(0.6 * (w > h ? w : h))));
        float radius = (float)exp(uniform(&g, log(0.4), log(2.5)));
        float target = (float)uniform(&g, -100, 100) + mean;
        float opacity = (float)uniform(&g, 0.3, 0.9);
        for (float t = 0; t < length; t += 0.8f) {
            int px0 = (int)(x - radius - 1), px1 = (int)(x + radius + 2);
            int py0 = (int)(y - radius - 1), py1 = (int)(y + radius + 2);
            for (int py = py0 < 0 ? 0 : py0; py < py1 && py < h; py++)
                for (int px = px0 < 0 ? 0 : px0; px < px1 && px < w; px++) {
                    float dx = (float)px - x, dy = (float)py - y;
                    float c = radius + 0.5f - sqrtf(dx * dx + dy * dy);
                    if (c > 0) {
                        size_t i = (size_t)py * w + px;
                        c = (c > 1 ? 1 : c) * opacity * 0.6f;
                        lum[i] += c * (target - mean - lum[i]);
                    }
                }
            x += cosf(angle) * 0.8f;
            y += sinf(angle) * 0.8f;
            angle += bend;
        }
    }

    /* To RGB (JFIF's YCbCr), with the lighting gradient; chroma is shared by 2x2 pixels,
     * as in a 4:2:0 photograph. */
    for (int y = 0; y < h; y++) {
        const float *ly = lum + (size_t)y * w;
        const float *cby = cb + (size_t)(y / 2) * cw, *cry = cr + (size_t)(y / 2) * cw;
        uint8_t *o = rgb + (size_t)y * w * 3;
        float base = mean + gy * (float)(y - h / 2);
        for (int x = 0; x < w; x++) {
            float Y = base + gx * (float)(x - w / 2) + ly[x];
            float Cb = cby[x / 2] + tint_cb, Cr = cry[x / 2] + tint_cr;
            o[3 * x] = clamp8(Y + 1.402f * Cr);
            o[3 * x + 1] = clamp8(Y - 0.344136f * Cb - 0.714136f * Cr);
            o[3 * x + 2] = clamp8(Y + 1.772f * Cb);
        }
    }
    return 0;
}

void
synth_from_photo(uint64_t seed, const struct synth_photo *photos, size_t n, int w, int h,
                 uint8_t *rgb)
{
    struct synth_rng g = {synth_mix(seed ^ 0x5A17)};
    const struct synth_photo *p = &photos[synth_next(&g) % n];
    double aspect = (double)w / h;

    /* The largest box of the output's aspect inside the photo, scaled down by a random
     * factor (area 10%..100%), at a random place. */
    double bw = p->width, bh = bw / aspect;
    if (bh > p->height) {
        bh = p->height;
        bw = bh * aspect;
    }
    double scale = sqrt(uniform(&g, 0.10, 1.0));
    bw *= scale;
    bh *= scale;
    double ox = uniform(&g, 0, p->width - bw), oy = uniform(&g, 0, p->height - bh);
    int mirror = synth_unit(&g) < 0.5;
    double sx = bw / w, sy = bh / h;

    for (int y = 0; y < h; y++) {
        double fy = oy + (y + 0.5) * sy - 0.5;
        int y0 = fy < 0 ? 0 : (int)fy;
        int y1 = y0 + 1 < p->height ? y0 + 1 : y0;
        float ty = (float)(fy - y0);
        ty = ty < 0 ? 0 : ty;
        for (int x = 0; x < w; x++) {
            double fx = ox + ((mirror ? w - 1 - x : x) + 0.5) * sx - 0.5;
            int x0 = fx < 0 ? 0 : (int)fx;
            int x1 = x0 + 1 < p->width ? x0 + 1 : x0;
            float tx = (float)(fx - x0);
            tx = tx < 0 ? 0 : tx;
            const uint8_t *a = p->rgb + ((size_t)y0 * p->width + x0) * 3;
            const uint8_t *b = p->rgb + ((size_t)y0 * p->width + x1) * 3;
            const uint8_t *c = p->rgb + ((size_t)y1 * p->width + x0) * 3;
            const uint8_t *d = p->rgb + ((size_t)y1 * p->width + x1) * 3;
            uint64_t r = synth_next(&g);
            for (int k = 0; k < 3; k++) {
                float top = a[k] + (b[k] - a[k]) * tx, bottom = c[k] + (d[k] - c[k]) * tx;
                float noise = (float)((r >> (8 * k)) & 7) - 3.5f;
                rgb[((size_t)y * w + x) * 3 + k] = clamp8(top + (bottom - top) * ty + noise * 0.5f);
            }
        }
    }
}
