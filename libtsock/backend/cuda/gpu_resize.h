/* The GPU decoder's resampling (issue 20): one output pixel of the crop -> resize -> window ->
 * flip that image/image.h's tsock__decode_resize computes, with Pillow's antialiased bilinear
 * filter (a triangle whose support widens with the reduction factor), evaluated in float as one
 * two-dimensional sum. Pillow runs two passes with an 8-bit intermediate; this differs from it
 * by at most a level or so at some pixels, within the bound docs/gpu.md states for the GPU
 * decoder. Compiled as C11 (the unit test's reference run) and as CUDA C++ (gpu_resize.cu), so
 * the test checks the very arithmetic the kernel runs. Internal to backend/cuda. */
#ifndef TSOCK_CUDA_GPU_RESIZE_H
#define TSOCK_CUDA_GPU_RESIZE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TSOCK__RHD __host__ __device__
#else
#define TSOCK__RHD
#endif

/* One image: the decoded crop (src_w x src_h RGB, rows `pitch` bytes apart) and where it goes. */
struct tsock__resize_geom {
    int src_w, src_h;
    size_t pitch;
    int resize_w, resize_h, win_x, win_y, out_w, out_h, flip;
};

/* The filter's first tap and tap count along one axis for resized coordinate r, as Pillow's
 * precompute_coeffs places them. */
TSOCK__RHD static inline void
tsock__resize_taps(int r, int in, int out, float *center, float *scale, int *first, int *count)
{
    float s = (float)in / (float)out;
    float fs = s < 1.0f ? 1.0f : s; /* the filter widens only when shrinking */
    float c = ((float)r + 0.5f) * s;
    int lo = (int)(c - fs + 0.5f), hi = (int)(c + fs + 0.5f);
    if (lo < 0)
        lo = 0;
    if (hi > in)
        hi = in;
    *center = c;
    *scale = fs;
    *first = lo;
    *count = hi - lo;
}

TSOCK__RHD static inline float
tsock__resize_tri(float t)
{
    t = t < 0.0f ? -t : t;
    return t < 1.0f ? 1.0f - t : 0.0f;
}

/* Writes output pixel (ox, oy) of the window (3 bytes at out). */
TSOCK__RHD static inline void
tsock__resize_pixel(const uint8_t *src, const struct tsock__resize_geom *g, int ox, int oy,
                    uint8_t *out)
{
    int rx = g->win_x + (g->flip ? g->out_w - 1 - ox : ox), ry = g->win_y + oy;
    float cx, sx, cy, sy;
    int x0, nx, y0, ny;
    tsock__resize_taps(rx, g->src_w, g->resize_w, &cx, &sx, &x0, &nx);
    tsock__resize_taps(ry, g->src_h, g->resize_h, &cy, &sy, &y0, &ny);
    float wsx = 0.0f, wsy = 0.0f, acc[3] = {0.0f, 0.0f, 0.0f};
    for (int x = 0; x < nx; x++)
        wsx += tsock__resize_tri(((float)(x0 + x) - cx + 0.5f) / sx);
    for (int y = 0; y < ny; y++) {
        float wy = tsock__resize_tri(((float)(y0 + y) - cy + 0.5f) / sy);
        if (wy == 0.0f)
            continue;
        wsy += wy;
        const uint8_t *row = src + (size_t)(y0 + y) * g->pitch + (size_t)x0 * 3;
        float racc[3] = {0.0f, 0.0f, 0.0f};
        for (int x = 0; x < nx; x++) {
            float wx = tsock__resize_tri(((float)(x0 + x) - cx + 0.5f) / sx);
            racc[0] += wx * row[3 * x];
            racc[1] += wx * row[3 * x + 1];
            racc[2] += wx * row[3 * x + 2];
        }
        acc[0] += wy * racc[0];
        acc[1] += wy * racc[1];
        acc[2] += wy * racc[2];
    }
    float norm = wsx * wsy;
    for (int c = 0; c < 3; c++) {
        float v = norm > 0.0f ? acc[c] / norm : 0.0f;
        int q = (int)(v + 0.5f);
        out[c] = (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
    }
}

#endif
