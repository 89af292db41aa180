/* Image decoding and augmentation (libtsock/image): probe, decode of every kind of input,
 * partial and DCT-scaled decoding against the plain path, PIL-exact resampling, flips, the
 * torchvision box rules and their statistics, and the errors.
 *
 * Every input is made here: natural-looking test pictures (several octaves of smooth noise,
 * edges and grain, so that the codecs see realistic spectra) compressed with TurboJPEG and
 * libpng in memory. References are computed independently: TurboJPEG's tjDecompress2 for the
 * pixels and a plain transcription of Pillow's resampler for the geometry. The PIL golden
 * hashes were computed with Pillow 13 on the pattern described at test_pil_golden.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>
#include <turbojpeg.h>

#include "check.h"
#include "core/core.h"
#include "image/image.h"
#include "image/image_int.h"
#include "photos.h"

/* ------------------------------------------------------------------------------------------ */
/* Test pictures                                                                              */
/* ------------------------------------------------------------------------------------------ */

static uint32_t
hash3(uint32_t a, uint32_t b, uint32_t c)
{
    return (uint32_t)(tsock__mix64(((uint64_t)a << 40) ^ ((uint64_t)b << 20) ^ c) >> 32);
}

/* Smooth value noise in [0, 1): hashed lattice values, smoothstep-interpolated. */
static double
vnoise(double x, double y, uint32_t seed)
{
    int xi = (int)floor(x), yi = (int)floor(y);
    double fx = x - xi, fy = y - yi;
    double sx = fx * fx * (3 - 2 * fx), sy = fy * fy * (3 - 2 * fy);
    double v00 = hash3((uint32_t)xi, (uint32_t)yi, seed) / 4294967296.0;
    double v10 = hash3((uint32_t)xi + 1, (uint32_t)yi, seed) / 4294967296.0;
    double v01 = hash3((uint32_t)xi, (uint32_t)yi + 1, seed) / 4294967296.0;
    double v11 = hash3((uint32_t)xi + 1, (uint32_t)yi + 1, seed) / 4294967296.0;
    return (v00 * (1 - sx) + v10 * sx) * (1 - sy) + (v01 * (1 - sx) + v11 * sx) * sy;
}

/* A w x h picture with `comps` interleaved channels (1, 3 or 4): 1/f-like noise, a few hard
 * edges and some grain. Different channels share the luminance and differ in slow tints. */
static uint8_t *
make_picture(int w, int h, int comps, uint32_t seed)
{
    uint8_t *p = malloc((size_t)w * h * comps);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            double lum = 0, amp = 0;
            for (int o = 0; o < 5; o++) {
                double s = 80.0 / (1 << o);
                lum += s * vnoise(x / s, y / s, seed + (uint32_t)o);
                amp += s;
            }
            lum = lum / amp * 255.0;
            if (((x / 41) + (y / 29)) % 7 == 0)
                lum += 50;
            lum += (double)(hash3((uint32_t)x, (uint32_t)y, seed ^ 0x5555u) % 13) - 6.0;
            for (int c = 0; c < comps; c++) {
                double v =
                    lum + 90.0 * (vnoise(x / 120.0, y / 120.0, seed * 7u + (uint32_t)c) - 0.5);
                p[((size_t)y * w + x) * comps + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
    return p;
}

/* Copies a buffer into an exactly sized heap block, so that AddressSanitizer sees any read
 * past the end of an encoded image. */
static uint8_t *
exact_copy(const void *src, size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    memcpy(p, src, n);
    return p;
}

static uint8_t *
jpeg_encode(const uint8_t *pix, int w, int h, int pf, int subsamp, int quality, int flags,
            size_t *size)
{
    tjhandle t = tjInitCompress();
    unsigned char *buf = NULL;
    unsigned long n = 0;
    uint8_t *out = NULL;

    if (t && tjCompress2(t, pix, w, 0, h, pf, &buf, &n, subsamp, quality, flags) == 0)
        out = exact_copy(buf, n);
    CHECK(out != NULL);
    *size = n;
    tjFree(buf);
    tjDestroy(t);
    return out;
}

static uint8_t *
png_encode(const uint8_t *pix, int w, int h, png_uint_32 format, const uint8_t *colormap,
           int colors, size_t *size)
{
    png_image img;
    png_alloc_size_t n = 0;
    uint8_t *out;

    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = format;
    img.colormap_entries = (png_uint_32)colors;
    CHECK(png_image_write_to_memory(&img, NULL, &n, 0, pix, 0, colormap));
    out = malloc(n);
    CHECK(png_image_write_to_memory(&img, out, &n, 0, pix, 0, colormap));
    *size = n;
    return out;
}

/* PIL's CMYK-to-RGB conversion of pixels as stored in an Adobe JPEG (see resize.c). */
static void
pil_cmyk(const uint8_t *in, uint8_t *out)
{
    int nk = in[3];
    for (int c = 0; c < 3; c++) {
        int cc = 255 - in[c];
        int t = cc * nk + 128;
        int v = nk - (((t >> 8) + t) >> 8);
        out[c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

/* TurboJPEG's full decode to RGB, gray replicated, CMYK converted as PIL converts it. */
static uint8_t *
ref_decode(const uint8_t *jpeg, size_t size, int *w, int *h)
{
    tjhandle t = tjInitDecompress();
    int sub, cs, n, pf;
    uint8_t *raw, *rgb;

    CHECK(tjDecompressHeader3(t, jpeg, (unsigned long)size, w, h, &sub, &cs) == 0);
    pf = cs == TJCS_GRAY ? TJPF_GRAY : (cs == TJCS_CMYK || cs == TJCS_YCCK) ? TJPF_CMYK : TJPF_RGB;
    n = tjPixelSize[pf];
    raw = malloc((size_t)*w * *h * n);
    rgb = malloc((size_t)*w * *h * 3);
    CHECK(tjDecompress2(t, jpeg, (unsigned long)size, raw, *w, 0, *h, pf, 0) == 0);
    for (size_t i = 0; i < (size_t)*w * *h; i++) {
        if (n == 1)
            rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = raw[i];
        else if (n == 4)
            pil_cmyk(raw + 4 * i, rgb + 3 * i);
        else
            memcpy(rgb + 3 * i, raw + 3 * i, 3);
    }
    free(raw);
    tjDestroy(t);
    return rgb;
}

/* ------------------------------------------------------------------------------------------ */
/* A plain transcription of Pillow's ImagingResample (BILINEAR, 8 bpc), whole image, two passes */
/* ------------------------------------------------------------------------------------------ */

static int
ref_coeffs(int in_size, int out_size, int **bounds_out, int32_t **k_out)
{
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *kk = calloc((size_t)out_size * ksize, sizeof(double));
    int *bounds = malloc((size_t)out_size * 2 * sizeof(int));
    int32_t *k = malloc((size_t)out_size * ksize * sizeof(int32_t));

    for (int xx = 0; xx < out_size; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0)
            xmin = 0;
        if (xmax > in_size)
            xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            double t = fabs((x + xmin - center + 0.5) * ss);
            double w = t < 1.0 ? 1.0 - t : 0.0;
            kk[xx * ksize + x] = w;
            ww += w;
        }
        for (int x = 0; x < xmax; x++)
            if (ww != 0.0)
                kk[xx * ksize + x] /= ww;
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    for (int i = 0; i < out_size * ksize; i++)
        k[i] = (int32_t)(0.5 + kk[i] * (1 << 22));
    free(kk);
    *bounds_out = bounds;
    *k_out = k;
    return ksize;
}

static uint8_t
ref_clip(int32_t v)
{
    return v >= (1 << 30) ? 255 : v <= 0 ? 0 : (uint8_t)(v >> 22);
}

/* One pass over an RGB image: n_out samples along the axis from n_in, `step` bytes between
 * neighbours along it, `lines` lines of `line_len` bytes `line_step` apart across it. */
static void
ref_pass(const uint8_t *in, uint8_t *out, int n_in, int n_out, size_t in_step, size_t out_step,
         int lines, size_t in_line, size_t out_line, int line_len)
{
    int *b;
    int32_t *k;
    int ks = ref_coeffs(n_in, n_out, &b, &k);
    for (int l = 0; l < lines; l++)
        for (int o = 0; o < n_out; o++)
            for (int c = 0; c < line_len; c++) {
                int32_t s = 1 << 21;
                for (int t = 0; t < b[2 * o + 1]; t++)
                    s += in[l * in_line + (size_t)(b[2 * o] + t) * in_step + c] * k[o * ks + t];
                out[l * out_line + (size_t)o * out_step + c] = ref_clip(s);
            }
    free(b);
    free(k);
}

/* RGB w x h -> ow x oh, in Pillow 13's pass order (a pass that keeps the size is skipped). */
static uint8_t *
ref_resize(const uint8_t *in, int w, int h, int ow, int oh)
{
    int vfirst = h - oh > 0 && h - oh > (w - ow) * 2;
    uint8_t *tmp = malloc((size_t)(vfirst ? w * oh : ow * h) * 3);
    uint8_t *out = malloc((size_t)ow * oh * 3);

    if (!vfirst) {
        if (w != ow)
            ref_pass(in, tmp, w, ow, 3, 3, h, (size_t)w * 3, (size_t)ow * 3, 3);
        else
            memcpy(tmp, in, (size_t)w * h * 3);
        if (h != oh)
            ref_pass(tmp, out, h, oh, (size_t)ow * 3, (size_t)ow * 3, ow, 3, 3, 3);
        else
            memcpy(out, tmp, (size_t)ow * oh * 3);
    } else {
        ref_pass(in, tmp, h, oh, (size_t)w * 3, (size_t)w * 3, w, 3, 3, 3);
        if (w != ow)
            ref_pass(tmp, out, w, ow, 3, 3, oh, (size_t)w * 3, (size_t)ow * 3, 3);
        else
            memcpy(out, tmp, (size_t)ow * oh * 3);
    }
    free(tmp);
    return out;
}

static uint8_t *
ref_crop(const uint8_t *in, int w, struct tsock__box b)
{
    uint8_t *out = malloc((size_t)b.w * b.h * 3);
    for (int y = 0; y < b.h; y++)
        memcpy(out + (size_t)y * b.w * 3, in + ((size_t)(b.y + y) * w + b.x) * 3, (size_t)b.w * 3);
    return out;
}

static double
mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += abs((int)a[i] - (int)b[i]);
    return s / (double)n;
}

static uint64_t
fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3u;
    return h;
}

/* ------------------------------------------------------------------------------------------ */
/* Test inputs                                                                                */
/* ------------------------------------------------------------------------------------------ */

enum kind { K_420, K_422, K_444, K_GRAY, K_CMYK, K_PROG, K_PROG_GRAY, K_PROG_CMYK, K_COUNT };
static const char *const kind_name[K_COUNT] = {"420",  "422",         "444",       "gray",
                                               "cmyk", "progressive", "prog-gray", "prog-cmyk"};

static uint8_t *
make_jpeg(enum kind k, int w, int h, uint32_t seed, int quality, size_t *size)
{
    int comps = (k == K_GRAY || k == K_PROG_GRAY) ? 1 : (k == K_CMYK || k == K_PROG_CMYK) ? 4 : 3;
    int pf = comps == 1 ? TJPF_GRAY : comps == 4 ? TJPF_CMYK : TJPF_RGB;
    int sub = comps == 1   ? TJSAMP_GRAY
              : k == K_422 ? TJSAMP_422
              : k == K_444 ? TJSAMP_444
                           : TJSAMP_420;
    int flags = (k == K_PROG || k == K_PROG_GRAY || k == K_PROG_CMYK) ? TJFLAG_PROGRESSIVE : 0;
    uint8_t *pix = make_picture(w, h, comps, seed);
    uint8_t *jpeg = jpeg_encode(pix, w, h, pf, sub, quality, flags, size);
    free(pix);
    return jpeg;
}

/* ------------------------------------------------------------------------------------------ */
/* Probe                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static void
test_probe(void)
{
    static const struct {
        enum kind k;
        int components, color, progressive;
    } want[] = {
        {K_420, 3, TSOCK__COLOR_YCBCR, 0},  {K_444, 3, TSOCK__COLOR_YCBCR, 0},
        {K_GRAY, 1, TSOCK__COLOR_GRAY, 0},  {K_CMYK, 4, TSOCK__COLOR_YCCK, 0},
        {K_PROG, 3, TSOCK__COLOR_YCBCR, 1}, {K_PROG_CMYK, 4, TSOCK__COLOR_YCCK, 1},
    };
    struct tsock__image_info info;

    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        size_t n;
        uint8_t *jpeg = make_jpeg(want[i].k, 123, 77, 1, 90, &n);
        CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
        CHECK_EQ(info.format, TSOCK__IMAGE_JPEG);
        CHECK_EQ(info.width, 123);
        CHECK_EQ(info.height, 77);
        CHECK_EQ(info.components, want[i].components);
        CHECK_EQ(info.color, want[i].color);
        CHECK_EQ(info.progressive, want[i].progressive);
        CHECK_EQ(info.bit_depth, 8);
        CHECK(info.header_size > 100 && info.header_size < n);
        /* Every prefix that ends inside the header is a short header, with a hint that is
         * larger than the prefix; from the end of SOS on, the header is complete. */
        for (size_t cut = 1; cut < info.header_size; cut++) {
            struct tsock__image_info p;
            int r = tsock__image_probe(jpeg, cut, &p);
            CHECK_EQ(r, cut < 2 ? -EILSEQ : -EPROTO);
            if (r == -EPROTO)
                CHECK(p.need > cut && p.need <= info.header_size);
        }
        CHECK_EQ(tsock__image_probe(jpeg, info.header_size, &info), 0);
        free(jpeg);
    }

    /* PNG: truecolour, alpha, gray, palette. */
    {
        uint8_t *pix = make_picture(40, 30, 4, 3);
        static const struct {
            png_uint_32 fmt;
            int color, components;
        } pw[] = {{PNG_FORMAT_RGB, TSOCK__COLOR_RGB, 3},
                  {PNG_FORMAT_RGBA, TSOCK__COLOR_RGBA, 4},
                  {PNG_FORMAT_GRAY, TSOCK__COLOR_GRAY, 1},
                  {PNG_FORMAT_GA, TSOCK__COLOR_GRAY_ALPHA, 2}};
        for (size_t i = 0; i < 4; i++) {
            size_t n;
            uint8_t *png = png_encode(pix, 40, 30, pw[i].fmt, NULL, 0, &n);
            CHECK_EQ(tsock__image_probe(png, n, &info), 0);
            CHECK_EQ(info.format, TSOCK__IMAGE_PNG);
            CHECK_EQ(info.width, 40);
            CHECK_EQ(info.height, 30);
            CHECK_EQ(info.color, pw[i].color);
            CHECK_EQ(info.components, pw[i].components);
            CHECK_EQ(info.progressive, 0);
            CHECK_EQ(tsock__image_probe(png, 20, &info), -EPROTO); /* cut inside IHDR */
            CHECK_EQ(info.need, 33);
            png[20] ^= 1; /* IHDR CRC no longer matches */
            CHECK_EQ(tsock__image_probe(png, n, &info), -EPROTO);
            free(png);
        }
        free(pix);
    }

    /* Not images, empty, other formats. */
    {
        static const uint8_t text[] = "hello, this is not an image at all";
        static const uint8_t gif[] = "GIF89a\x01\x00\x01\x00";
        static const uint8_t soi_eoi[] = {0xFF, 0xD8, 0xFF, 0xD9};
        static const uint8_t sos_first[] = {0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x08,
                                            0x01, 0x01, 0x00, 0x00, 0x3F, 0x00};
        static const uint8_t lossless[] = {0xFF, 0xD8, 0xFF, 0xC3, 0x00, 0x0B, 0x08, 0x00,
                                           0x10, 0x00, 0x10, 0x01, 0x01, 0x11, 0x00};
        uint8_t zeros[64] = {0};
        CHECK_EQ(tsock__image_probe(NULL, 0, &info), -ENODATA);
        CHECK_EQ(tsock__image_probe(text, sizeof text, &info), -EILSEQ);
        CHECK_EQ(info.format, TSOCK__IMAGE_UNKNOWN);
        CHECK_EQ(tsock__image_probe(zeros, sizeof zeros, &info), -EILSEQ);
        CHECK_EQ(tsock__image_probe(gif, sizeof gif, &info), -ENOTSUP);
        CHECK_EQ(info.format, TSOCK__IMAGE_GIF);
        CHECK_EQ(tsock__image_probe(soi_eoi, sizeof soi_eoi, &info), -EPROTO);
        CHECK_EQ(tsock__image_probe(sos_first, sizeof sos_first, &info), -EPROTO);
        CHECK_EQ(tsock__image_probe(lossless, sizeof lossless, &info), -ENOTSUP);
        CHECK_EQ(info.format, TSOCK__IMAGE_JPEG);
        CHECK_EQ(info.width, 16);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Decoding each kind                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* At its own size and without a crop, the decode is the plain decode: PIL's pixels. */
static void
test_decode_kinds(struct tsock__decoder *d)
{
    for (int k = 0; k < K_COUNT; k++) {
        const int w = 203, h = 141;
        size_t n;
        int rw, rh;
        uint8_t *jpeg = make_jpeg((enum kind)k, w, h, 10u + (uint32_t)k, 95, &n);
        uint8_t *ref = ref_decode(jpeg, n, &rw, &rh);
        uint8_t *out = malloc((size_t)w * h * 3);
        int comps = (k == K_GRAY || k == K_PROG_GRAY)   ? 1
                    : (k == K_CMYK || k == K_PROG_CMYK) ? 4
                                                        : 3;
        uint8_t *src = make_picture(w, h, comps, 10u + (uint32_t)k);
        uint8_t *src_rgb = malloc((size_t)w * h * 3);

        CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, NULL, w, h, 0, out), 0);
        CHECK_EQ(tsock__decoder_report(d)->format, TSOCK__IMAGE_JPEG);
        CHECK_EQ(tsock__decoder_report(d)->scale_num, 8);
        if (memcmp(out, ref, (size_t)w * h * 3) != 0) {
            fprintf(stderr, "kind %s: decode differs from tjDecompress2\n", kind_name[k]);
            CHECK(0);
        }
        /* Close to the picture it was made from (q95). */
        for (size_t i = 0; i < (size_t)w * h; i++) {
            if (comps == 1)
                src_rgb[3 * i] = src_rgb[3 * i + 1] = src_rgb[3 * i + 2] = src[i];
            else if (comps == 4)
                pil_cmyk(src + 4 * i, src_rgb + 3 * i);
            else
                memcpy(src_rgb + 3 * i, src + 3 * i, 3);
        }
        double mad = mean_abs_diff(out, src_rgb, (size_t)w * h * 3);
        if (!(mad < 3.0))
            fprintf(stderr, "kind %s: mean abs diff to source %.2f\n", kind_name[k], mad);
        CHECK(mad < 3.0);
        free(jpeg);
        free(ref);
        free(out);
        free(src);
        free(src_rgb);
    }

    /* PNG is lossless: the output is the source, alpha dropped (even where alpha is 0), gray
     * replicated, palette expanded. */
    {
        const int w = 97, h = 61;
        uint8_t *rgba = make_picture(w, h, 4, 77);
        uint8_t *rgb = malloc((size_t)w * h * 3), *out = malloc((size_t)w * h * 3);
        uint8_t *gray = malloc((size_t)w * h), *ga = malloc((size_t)w * h * 2);
        uint8_t *idx = malloc((size_t)w * h), cmap[16 * 3];
        size_t n;
        uint8_t *png;

        for (size_t i = 0; i < (size_t)w * h; i++) {
            if (i % 5 == 0)
                rgba[4 * i + 3] = 0; /* fully transparent, colour still there */
            memcpy(rgb + 3 * i, rgba + 4 * i, 3);
            gray[i] = rgba[4 * i];
            ga[2 * i] = rgba[4 * i];
            ga[2 * i + 1] = rgba[4 * i + 3];
            idx[i] = (uint8_t)(rgba[4 * i] >> 4);
        }
        for (int c = 0; c < 16; c++) {
            cmap[3 * c] = (uint8_t)(c * 17);
            cmap[3 * c + 1] = (uint8_t)(255 - c * 13);
            cmap[3 * c + 2] = (uint8_t)(c * c);
        }

        png = png_encode(rgb, w, h, PNG_FORMAT_RGB, NULL, 0, &n);
        CHECK_EQ(tsock__decode_crop_resize(d, png, n, NULL, w, h, 0, out), 0);
        CHECK(memcmp(out, rgb, (size_t)w * h * 3) == 0);
        CHECK_EQ(tsock__decoder_report(d)->format, TSOCK__IMAGE_PNG);
        free(png);

        png = png_encode(rgba, w, h, PNG_FORMAT_RGBA, NULL, 0, &n);
        CHECK_EQ(tsock__decode_crop_resize(d, png, n, NULL, w, h, 0, out), 0);
        CHECK(memcmp(out, rgb, (size_t)w * h * 3) == 0);
        free(png);

        png = png_encode(gray, w, h, PNG_FORMAT_GRAY, NULL, 0, &n);
        CHECK_EQ(tsock__decode_crop_resize(d, png, n, NULL, w, h, 0, out), 0);
        int same = 1;
        for (size_t i = 0; i < (size_t)w * h; i++)
            same &= out[3 * i] == gray[i] && out[3 * i + 1] == gray[i] && out[3 * i + 2] == gray[i];
        CHECK(same);
        free(png);

        png = png_encode(ga, w, h, PNG_FORMAT_GA, NULL, 0, &n);
        CHECK_EQ(tsock__decode_crop_resize(d, png, n, NULL, w, h, 0, out), 0);
        same = 1;
        for (size_t i = 0; i < (size_t)w * h; i++)
            same &= out[3 * i] == gray[i] && out[3 * i + 1] == gray[i] && out[3 * i + 2] == gray[i];
        CHECK(same);
        free(png);

        png = png_encode(idx, w, h, PNG_FORMAT_RGB_COLORMAP, cmap, 16, &n);
        CHECK_EQ(tsock__image_probe(png, n, &(struct tsock__image_info){0}), 0);
        CHECK_EQ(tsock__decode_crop_resize(d, png, n, NULL, w, h, 0, out), 0);
        same = 1;
        for (size_t i = 0; i < (size_t)w * h; i++)
            same &= memcmp(out + 3 * i, cmap + 3 * idx[i], 3) == 0;
        CHECK(same);
        free(png);

        free(rgba);
        free(rgb);
        free(out);
        free(gray);
        free(ga);
        free(idx);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Geometry: partial decoding, the resampler, flips                                           */
/* ------------------------------------------------------------------------------------------ */

/* Crops of every kind of JPEG: the partial decode gives the same bytes as decoding everything,
 * and both equal crop-then-resize of TurboJPEG's full decode with a plain PIL resampler. */
/* With the bicubic filter (tsock__decoder_set_filter) the reference below, which is
 * bilinear, does not apply; partial decoding and the SIMD passes must still agree. Its
 * match with PIL's bicubic is checked in tests/python/test_augment_pipeline.py. */
static int g_bicubic;

static void
test_partial_and_resample(struct tsock__decoder *d)
{
    struct tsock__rng rng;
    tsock__rng_seed(&rng, 42);

    for (int k = 0; k < K_COUNT; k++) {
        const int w = 333, h = 250;
        size_t n;
        int rw, rh;
        uint8_t *jpeg = make_jpeg((enum kind)k, w, h, 20u + (uint32_t)k, 85, &n);
        uint8_t *full = ref_decode(jpeg, n, &rw, &rh);
        int mismatches_partial = 0, mismatches_ref = 0;

        for (int i = 0; i < 25; i++) {
            struct tsock__box b;
            int ow = 1 + (int)tsock__rng_below(&rng, 160),
                oh = 1 + (int)tsock__rng_below(&rng, 160);
            b.w = 1 + (int)tsock__rng_below(&rng, (uint64_t)w);
            b.h = 1 + (int)tsock__rng_below(&rng, (uint64_t)h);
            b.x = (int)tsock__rng_below(&rng, (uint64_t)(w - b.w + 1));
            b.y = (int)tsock__rng_below(&rng, (uint64_t)(h - b.h + 1));
            if (i == 0)
                b = (struct tsock__box){w - 5, h - 3, 5, 3}; /* the bottom-right corner */
            if (i == 1)
                b = (struct tsock__box){0, 0, 17, 250}; /* a left strip */

            uint8_t *a = malloc((size_t)ow * oh * 3), *c = malloc((size_t)ow * oh * 3);
            tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE);
            CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, ow, oh, 0, a), 0);
            CHECK(tsock__decoder_report(d)->decoded_w <= w);
            tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE | TSOCK__DECODE_NO_PARTIAL);
            CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, ow, oh, 0, c), 0);
            mismatches_partial += memcmp(a, c, (size_t)ow * oh * 3) != 0;
            /* The AVX2, SSE2 and plain passes give the same bytes as the AVX-512 one. */
            tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE | TSOCK__DECODE_NO_AVX512);
            CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, ow, oh, 0, c), 0);
            mismatches_partial += memcmp(a, c, (size_t)ow * oh * 3) != 0;
            tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE | TSOCK__DECODE_NO_AVX2);
            CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, ow, oh, 0, c), 0);
            mismatches_partial += memcmp(a, c, (size_t)ow * oh * 3) != 0;

            uint8_t *cropped = ref_crop(full, w, b);
            uint8_t *r = ref_resize(cropped, b.w, b.h, ow, oh);
            mismatches_ref += !g_bicubic && memcmp(a, r, (size_t)ow * oh * 3) != 0;
            free(cropped);
            free(r);
            free(a);
            free(c);
        }
        if (mismatches_partial || mismatches_ref)
            fprintf(stderr, "kind %s: %d partial, %d reference mismatches\n", kind_name[k],
                    mismatches_partial, mismatches_ref);
        CHECK_EQ(mismatches_partial, 0);
        CHECK_EQ(mismatches_ref, 0);
        free(jpeg);
        free(full);
    }
    tsock__decoder_set_flags(d, 0);
}

/* A small crop deep inside a large image really is decoded partially. */
static void
test_partial_saves(struct tsock__decoder *d)
{
    size_t n;
    uint8_t *jpeg = make_jpeg(K_420, 640, 480, 5, 85, &n);
    uint8_t out[32 * 32 * 3];
    struct tsock__box b = {300, 200, 64, 48};

    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, 32, 32, 0, out), 0);
    CHECK(tsock__decoder_report(d)->decoded_w <= 64 + 2 * 16 + 4);
    CHECK(tsock__decoder_report(d)->decoded_h <= 48 + 4);
    free(jpeg);
}

/* The decode stops after the last row the resampler reads (issue 21): nothing below it is
 * decoded, for every kind of JPEG, unless the file may be truncated (no end-of-image marker),
 * which is decoded to its end so that its verdict does not depend on the crop. The pixels are
 * those of the full decode (test_partial_and_resample). */
static void
test_partial_stops(struct tsock__decoder *d)
{
    const int w = 640, h = 480;
    struct tsock__box b = {300, 40, 64, 48};
    uint8_t out[32 * 32 * 3], full[32 * 32 * 3];

    for (int k = 0; k < K_COUNT; k++) {
        size_t n;
        uint8_t *jpeg = make_jpeg((enum kind)k, w, h, 5, 85, &n);
        CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, 32, 32, 0, out), 0);
        const struct tsock__decode_report *rep = tsock__decoder_report(d);
        /* The filter reads a row or two beyond the box on either side (support 1.5). */
        if (rep->rows_read > b.y + b.h + 3)
            fprintf(stderr, "kind %s: %d rows read for a box ending at row %d\n", kind_name[k],
                    rep->rows_read, b.y + b.h);
        CHECK(rep->rows_read >= b.y + b.h && rep->rows_read <= b.y + b.h + 3);
        CHECK(rep->codec_ns > 0 && rep->resample_ns > 0);
        tsock__decoder_set_flags(d, TSOCK__DECODE_NO_PARTIAL);
        CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, 32, 32, 0, full), 0);
        CHECK(memcmp(out, full, sizeof out) == 0);
        tsock__decoder_set_flags(d, 0);

        /* No EOI marker (the last two bytes cut): decoded to the end. */
        if (k == K_420) {
            CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n - 2, &b, 32, 32, 0, out), 0);
            CHECK_EQ(tsock__decoder_report(d)->rows_read, h);
            CHECK(memcmp(out, full, sizeof out) == 0);
        }
        free(jpeg);
    }

    /* The val preset of a 500 x 375 file: Resize(256) gives 341 x 256, CenterCrop(224) keeps
     * rows 16..239; the last one's filter is centred on source row 239.5 * 375 / 256 = 350.8
     * with a support of 375 / 256 = 1.46 rows, so it reads rows up to 351 (PIL's rounding):
     * the decode stops after row 351, 23 rows before the end. */
    {
        size_t n;
        uint8_t *jpeg = make_jpeg(K_420, 500, 375, 17, 90, &n);
        uint8_t *img = malloc(224 * 224 * 3);
        CHECK_EQ(tsock__preset_val(d, jpeg, n, 256, 224, img), 0);
        CHECK_EQ(tsock__decoder_report(d)->rows_read, 352);
        /* Columns: the crop's 224 of 341 map to source columns 85..413 (plus the support), so
         * libjpeg decodes those iMCU columns only (16 pixels each, a 2-pixel margin). */
        CHECK(tsock__decoder_report(d)->decoded_w >= 413 - 85 &&
              tsock__decoder_report(d)->decoded_w <= 413 - 85 + 2 * 16 + 8);
        free(img);
        free(jpeg);
    }
}

/* Photographs (tests/unit/photos.h): the first MAX_PHOTOS that read. */
#define MAX_PHOTOS 6

/* On photographs, the train and val presets give exactly the bytes of decoding every row and
 * column (TSOCK__DECODE_NO_PARTIAL) with the same box, flip and DCT scale: the partial decode
 * (crop_scanline, skip_scanlines, the stop after the window's last row) costs nothing in
 * pixels. The bound docs/pipeline.md states is this test's: max and mean difference 0. */
static void
test_photos(struct tsock__decoder *d)
{
    struct test_photos ph;
    if (test_photos_collect(&ph) == 0)
        return;
    struct tsock__train_params p = {224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 1};
    uint8_t *a = malloc(224 * 224 * 3), *b = malloc(224 * 224 * 3);
    long differing = 0, compared = 0;
    int maxdiff = 0, files = 0;
    for (int i = 0; i < ph.n && files < MAX_PHOTOS; i++) {
        size_t n;
        uint8_t *jpeg = test_photos_read(ph.path[i], &n);
        struct tsock__box box;
        int flipped;
        if (!jpeg)
            continue;
        files++;
        for (uint64_t k = 0; k < 5; k++) {
            struct tsock__rng rng;
            tsock__rng_seed(&rng, tsock__mix64(k * 977 + (uint64_t)i));
            int r = k < 4 ? tsock__preset_train(d, jpeg, n, &rng, &p, a, &box, &flipped)
                          : tsock__preset_val(d, jpeg, n, 256, 224, a);
            CHECK_EQ(r, 0);
            tsock__decoder_set_flags(d, TSOCK__DECODE_NO_PARTIAL);
            r = k < 4 ? tsock__decode_crop_resize(d, jpeg, n, &box, 224, 224, flipped, b)
                      : tsock__preset_val(d, jpeg, n, 256, 224, b);
            CHECK_EQ(r, 0);
            tsock__decoder_set_flags(d, 0);
            for (size_t j = 0; j < 224 * 224 * 3; j++) {
                int diff = abs((int)a[j] - (int)b[j]);
                differing += diff != 0;
                maxdiff = diff > maxdiff ? diff : maxdiff;
            }
            compared += 224 * 224 * 3;
        }
        free(jpeg);
    }
    fprintf(stderr, "photographs: %d files, %ld samples compared, %ld differ, max %d\n", files,
            compared, differing, maxdiff);
    CHECK(files > 0);
    CHECK_EQ(differing, 0);
    test_photos_free(&ph);
    free(a);
    free(b);
}

/* The flip is an exact mirror of the unflipped output, for colour and gray. */
static void
test_flip(struct tsock__decoder *d)
{
    for (int k = 0; k < 2; k++) {
        size_t n;
        uint8_t *jpeg = make_jpeg(k ? K_GRAY : K_420, 300, 200, 9, 90, &n);
        const int ow = 57, oh = 41;
        uint8_t a[57 * 41 * 3], b[57 * 41 * 3];
        struct tsock__box box = {13, 7, 250, 180};
        int mirrored = 1;

        CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &box, ow, oh, 0, a), 0);
        CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &box, ow, oh, 1, b), 0);
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                mirrored &= memcmp(a + ((size_t)y * ow + x) * 3,
                                   b + ((size_t)y * ow + (ow - 1 - x)) * 3, 3) == 0;
        CHECK(mirrored);
        CHECK(memcmp(a, b, sizeof a) != 0);
        free(jpeg);
    }
}

/* Every RGB path of the horizontal pass reads pixels 3 or 4 bytes apart (RGB, or RGBA with
 * the alpha skipped): an RGBA PNG resizes to the bytes of the same picture as RGB, for
 * reductions and enlargements (2 to 9 taps), flipped or not, with the SIMD passes and
 * without them. */
static void
test_rgba_resize(struct tsock__decoder *d)
{
    const int w = 203, h = 61;
    uint8_t *rgba = malloc((size_t)w * h * 4), *rgb = malloc((size_t)w * h * 3);
    static const int sizes[][2] = {{57, 40}, {23, 61}, {203, 17}, {350, 90}, {101, 30}, {1, 1}};
    size_t n3, n4;

    for (int i = 0; i < w * h; i++) {
        int x = i % w, y = i / w;
        for (int c = 0; c < 3; c++)
            rgb[3 * i + c] = rgba[4 * i + c] =
                (uint8_t)((x * x * 3 + y * 7 + c * 85 + (x ^ y)) & 255);
        rgba[4 * i + 3] = (uint8_t)(x * 5); /* alpha is dropped, whatever it is */
    }
    uint8_t *png3 = png_encode(rgb, w, h, PNG_FORMAT_RGB, NULL, 0, &n3);
    uint8_t *png4 = png_encode(rgba, w, h, PNG_FORMAT_RGBA, NULL, 0, &n4);
    int mismatches = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int ow = sizes[s][0], oh = sizes[s][1];
        const size_t bytes = (size_t)ow * oh * 3;
        uint8_t *ref = malloc(bytes), *out = malloc(bytes);
        struct tsock__box box = {3, 2, w - 5, h - 4};
        for (int flip = 0; flip < 2; flip++) {
            /* The reference: plain passes (or SSE2) on RGB. */
            tsock__decoder_set_flags(d, TSOCK__DECODE_NO_AVX2);
            CHECK_EQ(tsock__decode_crop_resize(d, png3, n3, &box, ow, oh, flip, ref), 0);
            CHECK_EQ(tsock__decode_crop_resize(d, png4, n4, &box, ow, oh, flip, out), 0);
            mismatches += memcmp(ref, out, bytes) != 0;
            tsock__decoder_set_flags(d, 0);
            CHECK_EQ(tsock__decode_crop_resize(d, png3, n3, &box, ow, oh, flip, out), 0);
            mismatches += memcmp(ref, out, bytes) != 0;
            CHECK_EQ(tsock__decode_crop_resize(d, png4, n4, &box, ow, oh, flip, out), 0);
            mismatches += memcmp(ref, out, bytes) != 0;
        }
        free(ref);
        free(out);
    }
    CHECK_EQ(mismatches, 0);
    tsock__decoder_set_flags(d, 0);
    free(png3);
    free(png4);
    free(rgba);
    free(rgb);
}

/* Whether this CPU has what the AVX-512 passes need (BW, VL, VNNI). */
static int
cpu_has_avx512(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

/* The resampling passes' implementations (horizontal: the AVX-512 gather pass, a group of up
 * to five pixels per 64-byte load; AVX-512, eight rows at once; AVX2, four; SSE2 and plain C,
 * one; vertical: 64, 32 and 16 samples at a time, then plain C)
 * give the same bytes, on their own, for every table shape: enlarging and
 * reducing, partial windows, flipped tables, the bicubic filter's negative taps, 3- and
 * 4-byte pixels, row counts that leave remainders of eight and four, and rows that end
 * exactly where the last tap's data does (so the last pixels take the paths that may not
 * load past the row) or have the 16 bytes of slack the decoders give them. Outputs are
 * written into rows exactly 3 * win_n bytes apart, so a store past a row's end would show. */
static void
test_resample_paths(void)
{
    static const int in_sizes[] = {1, 2, 5, 17, 120, 274, 455, 1000};
    static const int out_sizes[] = {1, 3, 7, 224, 301};
    static const int row_counts[] = {1, 7, 8, 9, 13, 16};
    const int have_avx512 = cpu_has_avx512();
    struct tsock__rng rng;
    int cases = 0, mismatches = 0, gathered = 0;

    if (!have_avx512)
        fprintf(stderr, "test_resample_paths: this CPU has no AVX-512 (BW, VL, VNNI): its "
                        "pass is not tested here, only AVX2 against the plain one\n");
    tsock__rng_seed(&rng, 7);
    for (size_t a = 0; a < sizeof in_sizes / sizeof *in_sizes; a++) {
        for (size_t b = 0; b < sizeof out_sizes / sizeof *out_sizes; b++) {
            const int in_w = in_sizes[a], out_w = out_sizes[b];
            const int kind = (int)tsock__rng_below(&rng, 4); /* whole or part, flipped or not */
            const int win0 = kind & 1 ? out_w / 4 : 0, win_n = kind & 1 ? out_w - out_w / 2 : out_w;
            const int reverse = (kind & 2) != 0, bicubic = (int)tsock__rng_below(&rng, 2);
            const double in0 = in_w > 2 ? 0.25 : 0.0, in1 = in_w > 2 ? in_w - 0.5 : in_w;
            struct tsock__coeffs c[4];
            memset(c, 0, sizeof c);
            int first = 0, end = 0;
            /* 0: plain/SSE2, 1: AVX2, 2: AVX-512 eight rows, 3: the gather pass where it can */
            for (int m = 0; m < 4; m++) {
                c[m].bicubic = bicubic;
                c[m].no_avx2 = m == 0;
                c[m].no_avx512 = m < 2;
                c[m].no_gather = m < 3;
                CHECK_EQ(tsock__coeffs_compute(&c[m], in0, in1, in_w, out_w, win0, win_n, reverse),
                         0);
            }
            tsock__coeffs_span(&c[0], &first, &end);
            if (end <= first)
                end = first + 1;
            for (int stride = 3; stride <= 4; stride++) {
                for (size_t r = 0; r < sizeof row_counts / sizeof *row_counts; r++) {
                    const int rows = row_counts[r];
                    const size_t row_bytes = (size_t)(end - first) * (size_t)stride;
                    for (int slack = 0; slack <= 16; slack += 16) {
                        const size_t pitch = row_bytes + (size_t)slack;
                        /* exactly sized: ASan sees a load past the last row's readable bytes */
                        uint8_t *in = malloc(pitch * (size_t)rows);
                        for (size_t i = 0; i < pitch * (size_t)rows; i++)
                            in[i] = (uint8_t)tsock__rng_below(&rng, 256);
                        const size_t out_pitch = (size_t)win_n * 3, out_bytes = out_pitch * rows;
                        uint8_t *out[4];
                        for (int m = 0; m < 4; m++) {
                            /* + slack: the AVX2 and SSE2 passes may write one byte past */
                            out[m] = malloc(out_bytes + TSOCK__BUF_SLACK);
                            tsock__resample_rows(&c[m], in, pitch, pitch, first, stride, 3, out[m],
                                                 out_pitch, rows);
                        }
                        mismatches += memcmp(out[0], out[1], out_bytes) != 0;
                        mismatches += memcmp(out[0], out[2], out_bytes) != 0;
                        mismatches += memcmp(out[0], out[3], out_bytes) != 0;
                        gathered += c[3].gather_groups > 0;
                        cases++;
                        for (int m = 0; m < 4; m++)
                            free(out[m]);
                        free(in);
                    }
                }
            }
            /* The vertical pass with the same table: every output row of `len` samples. */
            static const size_t lens[] = {1, 31, 64, 65, 200, 673};
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
                const size_t len = lens[l], src_rows = (size_t)(end - first);
                uint8_t *src = malloc(len * src_rows), *out[3];
                int32_t *acc = malloc(len * sizeof *acc);
                for (size_t i = 0; i < len * src_rows; i++)
                    src[i] = (uint8_t)tsock__rng_below(&rng, 256);
                for (int m = 0; m < 3; m++) {
                    out[m] = malloc(len * (size_t)win_n);
                    for (int y = 0; y < win_n; y++)
                        tsock__resample_col(&c[m], y, src, first, len, len, acc,
                                            out[m] + (size_t)y * len);
                }
                mismatches += memcmp(out[0], out[1], len * (size_t)win_n) != 0;
                mismatches += memcmp(out[0], out[2], len * (size_t)win_n) != 0;
                cases++;
                for (int m = 0; m < 3; m++)
                    free(out[m]);
                free(acc);
                free(src);
            }
            for (int m = 0; m < 4; m++)
                tsock__coeffs_free(&c[m]);
        }
    }
    if (mismatches)
        fprintf(stderr, "test_resample_paths: %d of %d cases differ\n", mismatches, cases);
    CHECK_EQ(mismatches, 0);
    CHECK(cases > 1100);
    fprintf(stderr, "test_resample_paths: the gather pass took %d of the horizontal cases\n",
            gathered);
    if (tsock__gather_cpu() && !getenv("TSOCK_NO_AVX512"))
        CHECK(gathered > 200);
    else
        CHECK_EQ(gathered, 0);
}

/* Golden outputs of Pillow 13 (Image.resize(..., BILINEAR), crop first as torchvision's
 * resized_crop does) on the 500x375 RGB pattern
 *   v(x, y, c) = (x*x*3 + y*7 + c*85 + ((x ^ y) & 31)) & 255,
 * passed through a PNG so that no lossy codec is involved (Pillow 12 and earlier always run the
 * horizontal pass first, and differ by 1 level at some pixels in the last three cases). The
 * outputs' FNV-1a 64 hashes:
 *   import numpy as np; from PIL import Image
 *   y, x = np.mgrid[0:375, 0:500]; a = np.stack([(x*x*3 + y*7 + c*85 + ((x ^ y) & 31)) & 255
 *       for c in range(3)], -1).astype(np.uint8); im = Image.fromarray(a)
 *   im.crop((j, i, j + w, i + h)).resize((ow, oh), Image.BILINEAR) -> bytes -> fnv1a64
 */
static void
test_pil_golden(struct tsock__decoder *d)
{
    static const struct {
        struct tsock__box box;
        int ow, oh;
        uint64_t hash;
    } cases[] = {
        {{0, 0, 500, 375}, 224, 224, 0x07a0f95c13c7620fu},
        {{37, 21, 301, 199}, 224, 224, 0x64605cabf26f00dbu},
        {{10, 300, 50, 40}, 224, 224, 0x60bd003d84569523u},
        {{0, 0, 500, 375}, 123, 77, 0x83332b025da7b950u},
        {{0, 0, 500, 375}, 341, 256, 0x981ca270edca5d59u},
        /* Pillow 13 runs these vertical pass first (the height shrinks more than twice as
         * much as the width): */
        {{12, 32, 214, 281}, 224, 224, 0x6467b5b8399dd517u},
        {{0, 0, 200, 300}, 224, 224, 0x306176ef2dacb087u},
        {{5, 5, 300, 200}, 400, 100, 0x5aefd25556f9217eu},
    };
    const int w = 500, h = 375;
    uint8_t *pix = malloc((size_t)w * h * 3), *out = malloc(400 * 256 * 3);
    size_t n;
    uint8_t *png;

    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                pix[((size_t)y * w + x) * 3 + c] =
                    (uint8_t)((x * x * 3 + y * 7 + c * 85 + ((x ^ y) & 31)) & 255);
    png = png_encode(pix, w, h, PNG_FORMAT_RGB, NULL, 0, &n);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_EQ(
            tsock__decode_crop_resize(d, png, n, &cases[i].box, cases[i].ow, cases[i].oh, 0, out),
            0);
        uint64_t got = fnv1a(out, (size_t)cases[i].ow * cases[i].oh * 3);
        if (got != cases[i].hash)
            fprintf(stderr, "PIL golden case %zu: hash %#018llx\n", i, (unsigned long long)got);
        CHECK(got == cases[i].hash);
    }
    free(png);
    free(pix);
    free(out);
}

/* ------------------------------------------------------------------------------------------ */
/* DCT-domain scaling                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* A crop at least four times the output (twice after a 1/2-scale decode) is decoded at
 * reduced scale; the result stays within the resampling tolerance of the full-size path. */
static void
test_dct_scaling(struct tsock__decoder *d)
{
    static const struct {
        enum kind k;
        struct tsock__box box;
        int ow, oh, scale;
    } cases[] = {
        {K_420, {0, 0, 1600, 1200}, 224, 224, 4},      {K_420, {0, 0, 1600, 1200}, 150, 150, 2},
        {K_420, {0, 0, 1600, 1200}, 64, 64, 1},        {K_420, {100, 50, 900, 700}, 224, 224, 8},
        {K_420, {3, 5, 950, 900}, 224, 224, 4},        {K_444, {0, 0, 1600, 1200}, 341, 256, 4},
        {K_GRAY, {40, 40, 1000, 1000}, 224, 224, 4},   {K_CMYK, {0, 0, 1600, 1200}, 224, 224, 4},
        {K_PROG, {51, 77, 1111, 999}, 224, 224, 4},    {K_420, {0, 0, 447, 600}, 224, 224, 8},
        {K_PROG_GRAY, {8, 8, 900, 1000}, 112, 112, 2},
    };
    size_t n[K_COUNT] = {0};
    uint8_t *jpeg[K_COUNT] = {0};
    uint8_t *a = malloc(341 * 256 * 3), *b = malloc(341 * 256 * 3);

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum kind k = cases[i].k;
        size_t bytes = (size_t)cases[i].ow * cases[i].oh * 3;
        if (!jpeg[k])
            jpeg[k] = make_jpeg(k, 1600, 1200, 31, 90, &n[k]);
        tsock__decoder_set_flags(d, 0);
        CHECK_EQ(tsock__decode_crop_resize(d, jpeg[k], n[k], &cases[i].box, cases[i].ow,
                                           cases[i].oh, 0, a),
                 0);
        CHECK_EQ(tsock__decoder_report(d)->scale_num, cases[i].scale);
        tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE);
        CHECK_EQ(tsock__decode_crop_resize(d, jpeg[k], n[k], &cases[i].box, cases[i].ow,
                                           cases[i].oh, 0, b),
                 0);
        double mad = mean_abs_diff(a, b, bytes);
        printf("dct scale %d/8 %s crop %dx%d -> %dx%d: mean abs diff %.3f\n", cases[i].scale,
               kind_name[k], cases[i].box.w, cases[i].box.h, cases[i].ow, cases[i].oh, mad);
        CHECK(mad <= 1.0);
    }
    for (int k = 0; k < K_COUNT; k++)
        free(jpeg[k]);
    free(a);
    free(b);
    tsock__decoder_set_flags(d, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Truncation, corruption, errors                                                             */
/* ------------------------------------------------------------------------------------------ */

static void
test_truncated(struct tsock__decoder *d)
{
    const int w = 320, h = 240;
    uint8_t *out = malloc((size_t)w * h * 3);
    struct tsock__image_info info;
    size_t n;
    uint8_t *jpeg = make_jpeg(K_420, w, h, 8, 90, &n);

    CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, NULL, w, h, 0, out), 0);
    CHECK_EQ(tsock__decoder_report(d)->truncated, 0);

    /* Cut at 85% of the scan data: accepted, missing rows mid-grey, the same verdict for a
     * crop at the top (which needs none of the missing rows) as for the whole image. */
    {
        size_t cut = info.header_size + (n - info.header_size) * 85 / 100;
        uint8_t *t = exact_copy(jpeg, cut);
        struct tsock__box top = {0, 0, 64, 32};
        uint8_t small[16 * 16 * 3];
        CHECK_EQ(tsock__decode_crop_resize(d, t, cut, NULL, w, h, 0, out), 0);
        CHECK_EQ(tsock__decoder_report(d)->truncated, 1);
        CHECK(tsock__decoder_report(d)->valid >= 0.5 && tsock__decoder_report(d)->valid < 1.0);
        int grey = 1;
        for (int x = 0; x < w * 3; x++)
            grey &= out[(size_t)(h - 1) * w * 3 + x] == 128;
        CHECK(grey);
        CHECK_EQ(tsock__decode_crop_resize(d, t, cut, &top, 16, 16, 0, small), 0);
        CHECK_EQ(tsock__decoder_report(d)->truncated, 1);
        free(t);
    }
    /* Header plus a sliver of scan data: beyond repair, for every crop. */
    {
        size_t cut = info.header_size + (n - info.header_size) * 10 / 100;
        uint8_t *t = exact_copy(jpeg, cut);
        struct tsock__box top = {0, 0, 64, 16};
        uint8_t small[16 * 16 * 3];
        CHECK_EQ(tsock__decode_crop_resize(d, t, cut, NULL, w, h, 0, out), -EPROTO);
        CHECK_EQ(tsock__decode_crop_resize(d, t, cut, &top, 16, 16, 0, small), -EPROTO);
        CHECK(tsock__decoder_report(d)->valid < 0.5);
        free(t);
        t = exact_copy(jpeg, info.header_size + 20);
        CHECK_EQ(tsock__decode_crop_resize(d, t, info.header_size + 20, NULL, w, h, 0, out),
                 -EPROTO);
        free(t);
        /* The header alone */
        CHECK_EQ(tsock__decode_crop_resize(d, jpeg, info.header_size, NULL, w, h, 0, out), -EPROTO);
    }
    free(jpeg);

    /* Progressive: cut in a late scan, the whole picture is there (coarser): accepted; cut in
     * the first (DC) scan: beyond repair. */
    {
        jpeg = make_jpeg(K_PROG, w, h, 8, 90, &n);
        CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
        size_t cut = n * 90 / 100;
        uint8_t *t = exact_copy(jpeg, cut);
        CHECK_EQ(tsock__decode_crop_resize(d, t, cut, NULL, w, h, 0, out), 0);
        CHECK_EQ(tsock__decoder_report(d)->truncated, 1);
        CHECK(tsock__decoder_report(d)->valid == 1.0);
        free(t);
        cut = info.header_size + 40;
        t = exact_copy(jpeg, cut);
        CHECK_EQ(tsock__decode_crop_resize(d, t, cut, NULL, w, h, 0, out), -EPROTO);
        free(t);
        free(jpeg);
    }

    /* Garbage in the middle of the scan data: libjpeg warns and decodes; so does PIL. */
    {
        jpeg = make_jpeg(K_420, w, h, 8, 90, &n);
        CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
        for (size_t i = info.header_size + 2000; i < info.header_size + 2100; i++)
            jpeg[i] = (uint8_t)(i * 37);
        CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, NULL, 64, 48, 0, out), 0);
        free(jpeg);
    }

    /* A PNG cut inside its image data is an error. */
    {
        uint8_t *pix = make_picture(100, 80, 3, 4);
        uint8_t *png = png_encode(pix, 100, 80, PNG_FORMAT_RGB, NULL, 0, &n);
        CHECK_EQ(tsock__decode_crop_resize(d, png, n * 3 / 4, NULL, 50, 40, 0, out), -EPROTO);
        CHECK_EQ(tsock__decode_crop_resize(d, png, n, NULL, 50, 40, 0, out), 0);
        /* Only IEND missing: the image data is complete, and PIL reads it as well. */
        CHECK_EQ(tsock__decode_crop_resize(d, png, n - 12, NULL, 50, 40, 0, out), 0);
        free(png);
        free(pix);
    }
    free(out);
}

static void
test_errors(struct tsock__decoder *d)
{
    uint8_t out[64 * 64 * 3];
    uint8_t garbage[4096];
    size_t n;
    uint8_t *jpeg = make_jpeg(K_420, 100, 80, 2, 90, &n);
    struct tsock__box b;

    for (size_t i = 0; i < sizeof garbage; i++)
        garbage[i] = (uint8_t)(hash3((uint32_t)i, 1, 2));
    garbage[0] = 0x42; /* not FF D8 */
    CHECK_EQ(tsock__decode_crop_resize(d, NULL, 0, NULL, 8, 8, 0, out), -ENODATA);
    CHECK_EQ(tsock__decode_crop_resize(d, garbage, sizeof garbage, NULL, 8, 8, 0, out), -EILSEQ);
    /* A valid header followed by noise: libjpeg decodes noise without a marker in it... */
    {
        struct tsock__image_info info;
        CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
        uint8_t *t = malloc(info.header_size + sizeof garbage);
        memcpy(t, jpeg, info.header_size);
        memcpy(t + info.header_size, garbage, sizeof garbage);
        int r =
            tsock__decode_crop_resize(d, t, info.header_size + sizeof garbage, NULL, 8, 8, 0, out);
        CHECK(r == 0 || r == -EPROTO);
        free(t);
    }
    /* Crops outside the image, bad sizes. */
    b = (struct tsock__box){90, 0, 11, 10};
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, 8, 8, 0, out), -EINVAL);
    b = (struct tsock__box){-1, 0, 10, 10};
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, 8, 8, 0, out), -EINVAL);
    b = (struct tsock__box){0, 0, 0, 0};
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &b, 8, 8, 0, out), -EINVAL);
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, NULL, 0, 8, 0, out), -EINVAL);
    {
        struct tsock__resize_spec s = {{0, 0, 0, 0}, 100, 100, 50, 50, 51, 10, 0};
        CHECK_EQ(tsock__decode_resize(d, jpeg, n, &s, out), -EINVAL); /* window past the edge */
    }
    /* The pixel limit. */
    tsock__decoder_set_limits(d, 100 * 80 - 1, 0);
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, NULL, 8, 8, 0, out), -EFBIG);
    tsock__decoder_set_limits(d, 100 * 80, 0);
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, NULL, 8, 8, 0, out), 0);
    tsock__decoder_set_limits(d, TSOCK__IMAGE_MAX_PIXELS, 0);
    free(jpeg);

    /* The scan limit: TurboJPEG's progressive files have 10 scans (gray: 6). */
    jpeg = make_jpeg(K_PROG, 100, 80, 2, 90, &n);
    tsock__decoder_set_limits(d, 0, 5);
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, NULL, 8, 8, 0, out), -EFBIG);
    tsock__decoder_set_limits(d, 0, TSOCK__IMAGE_MAX_SCANS);
    CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, NULL, 8, 8, 0, out), 0);
    free(jpeg);
}

/* ------------------------------------------------------------------------------------------ */
/* Box rules and their statistics                                                             */
/* ------------------------------------------------------------------------------------------ */

static void
test_rng(void)
{
    struct tsock__rng r;
    int counts[3] = {0, 0, 0};
    double sum = 0;

    /* The splitmix64 reference sequence for seed 0. */
    tsock__rng_seed(&r, 0);
    CHECK(tsock__rng_next(&r) == 0xe220a8397b1dcdafu);
    CHECK(tsock__rng_next(&r) == 0x6e789e6aa1b965f4u);
    tsock__rng_seed(&r, 7);
    for (int i = 0; i < 30000; i++) {
        double u = tsock__rng_double(&r);
        CHECK(u >= 0.0 && u < 1.0);
        sum += u;
        counts[tsock__rng_below(&r, 3)]++;
    }
    CHECK(fabs(sum / 30000 - 0.5) < 5 * sqrt(1.0 / 12 / 30000));
    for (int i = 0; i < 3; i++)
        CHECK(fabs(counts[i] - 10000.0) < 5 * sqrt(30000 * (1.0 / 3) * (2.0 / 3)));
    CHECK_EQ(tsock__rng_below(&r, 1), 0);
}

static void
test_box_rules(void)
{
    struct tsock__rng r;
    struct tsock__box b;
    int nw, nh;

    /* Resize(256): torchvision's int(size * long / short). */
    CHECK_EQ(tsock__val_resize_dims(500, 375, 256, &nw, &nh), 0);
    CHECK_EQ(nw, 341);
    CHECK_EQ(nh, 256);
    CHECK_EQ(tsock__val_resize_dims(375, 500, 256, &nw, &nh), 0);
    CHECK_EQ(nw, 256);
    CHECK_EQ(nh, 341);
    CHECK_EQ(tsock__val_resize_dims(256, 256, 256, &nw, &nh), 0);
    CHECK_EQ(nw, 256);
    CHECK_EQ(nh, 256);
    CHECK_EQ(tsock__val_resize_dims(100, 300, 256, &nw, &nh), 0); /* 768: exact */
    CHECK_EQ(nh, 768);
    CHECK_EQ(tsock__val_resize_dims(333, 500, 256, &nw, &nh), 0); /* 384.38 -> 384 */
    CHECK_EQ(nh, 384);
    CHECK_EQ(tsock__val_resize_dims(0, 5, 256, &nw, &nh), -EINVAL);
    /* CenterCrop: int(round((size - crop) / 2.0)), halves to even. */
    CHECK_EQ(tsock__center_offset(341, 224), 58); /* 58.5 */
    CHECK_EQ(tsock__center_offset(257, 224), 16); /* 16.5 */
    CHECK_EQ(tsock__center_offset(259, 224), 18); /* 17.5 */
    CHECK_EQ(tsock__center_offset(256, 224), 16);
    CHECK_EQ(tsock__center_offset(224, 224), 0);

    /* Boxes are always inside the image, for any size, tiny and extreme ones included. */
    tsock__rng_seed(&r, 11);
    int inside = 1;
    for (int i = 0; i < 20000; i++) {
        int w = 1 + (int)tsock__rng_below(&r, i % 3 == 0 ? 8 : 3000);
        int h = 1 + (int)tsock__rng_below(&r, i % 5 == 0 ? 8 : 3000);
        int res = tsock__rrc_box(&r, w, h, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &b);
        inside &= (res == 0 || res == 1) && b.w >= 1 && b.h >= 1 && b.x >= 0 && b.y >= 0 &&
                  b.x + b.w <= w && b.y + b.h <= h;
    }
    CHECK(inside);

    /* The fallback: a 1000x10 strip never fits a crop of 90% or more of its area with a ratio
     * of at most 4/3, so the central crop of ratio 4/3 is taken: 13x10 at x = 493. */
    tsock__rng_seed(&r, 12);
    CHECK_EQ(tsock__rrc_box(&r, 1000, 10, 0.9, 1.0, 3.0 / 4, 4.0 / 3, &b), 0);
    CHECK_EQ(b.w, 13);
    CHECK_EQ(b.h, 10);
    CHECK_EQ(b.x, 493);
    CHECK_EQ(b.y, 0);
    CHECK_EQ(tsock__rrc_box(&r, 10, 1000, 0.9, 1.0, 3.0 / 4, 4.0 / 3, &b), 0);
    CHECK_EQ(b.w, 10);
    CHECK_EQ(b.h, 13);
    CHECK_EQ(b.x, 0);
    CHECK_EQ(b.y, 493);
    /* In-range ratio: the whole image. */
    CHECK_EQ(tsock__rrc_box(&r, 100, 90, 2.0, 3.0, 3.0 / 4, 4.0 / 3, &b), 0);
    CHECK(b.x == 0 && b.y == 0 && b.w == 100 && b.h == 90);
    CHECK_EQ(tsock__rrc_box(&r, 0, 90, 0.08, 1.0, 0.75, 1.33, &b), -EINVAL);
    CHECK_EQ(tsock__rrc_box(&r, 10, 90, 0.5, 0.1, 0.75, 1.33, &b), -EINVAL);
    CHECK_EQ(tsock__rrc_box(&r, 10, 90, 0.08, 1.0, 0.0, 1.33, &b), -EINVAL);
}

/* xorshift64*: an RNG unrelated to splitmix64, for the independent simulation. */
static uint64_t
xs_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Du;
}

static double
xs_double(uint64_t *s)
{
    return (double)(xs_next(s) >> 11) * 0x1.0p-53;
}

struct rrc_stats {
    double n, fallback, area, area2, logr, logr2;
};

static void
stats_add(struct rrc_stats *st, int fallback, int w, int h, int bw, int bh)
{
    double a = (double)bw * bh / ((double)w * h), lr = log((double)bw / bh);
    st->n += 1;
    st->fallback += fallback;
    st->area += a;
    st->area2 += a * a;
    st->logr += lr;
    st->logr2 += lr * lr;
}

/* torchvision's get_params written out again from its source, on xorshift64*. */
static void
sim_rrc(uint64_t *s, int w, int h, struct rrc_stats *st)
{
    const double lo = log(3.0 / 4), hi = log(4.0 / 3), area = (double)w * h;
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (0.08 + 0.92 * xs_double(s));
        double aspect = exp(lo + (hi - lo) * xs_double(s));
        int cw = (int)nearbyint(sqrt(target * aspect));
        int ch = (int)nearbyint(sqrt(target / aspect));
        if (0 < cw && cw <= w && 0 < ch && ch <= h) {
            (void)xs_next(s);
            (void)xs_next(s);
            stats_add(st, 0, w, h, cw, ch);
            return;
        }
    }
    double in_ratio = (double)w / h;
    int cw = w, ch = h;
    if (in_ratio < 3.0 / 4)
        ch = (int)nearbyint(w / (3.0 / 4));
    else if (in_ratio > 4.0 / 3)
        cw = (int)nearbyint(h * (4.0 / 3));
    stats_add(st, 1, w, h, cw, ch);
}

/* Over 20000 draws, the fallback rate, the mean area fraction and the mean log aspect ratio of
 * tsock's boxes agree with an independent simulation of torchvision's rule (400000 draws on
 * another generator) within 5 standard errors. Seeds are fixed: the test cannot flake. */
static void
test_rrc_distribution(void)
{
    static const int sizes[][2] = {{500, 375}, {64, 512}, {2000, 300}, {333, 500}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int w = sizes[i][0], h = sizes[i][1];
        struct rrc_stats a = {0}, b = {0};
        struct tsock__rng r;
        uint64_t xs = 0x1234567u + i;

        tsock__rng_seed(&r, tsock__mix64(1000 + i));
        for (int k = 0; k < 20000; k++) {
            struct tsock__box box;
            int res = tsock__rrc_box(&r, w, h, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &box);
            stats_add(&a, res == 0, w, h, box.w, box.h);
        }
        for (int k = 0; k < 400000; k++)
            sim_rrc(&xs, w, h, &b);

        double pf = b.fallback / b.n;
        double va = b.area2 / b.n - (b.area / b.n) * (b.area / b.n);
        double vl = b.logr2 / b.n - (b.logr / b.n) * (b.logr / b.n);
        double se_f = sqrt(pf * (1 - pf) * (1 / a.n + 1 / b.n)) + 1e-4;
        double se_a = sqrt(va * (1 / a.n + 1 / b.n)), se_l = sqrt(vl * (1 / a.n + 1 / b.n));
        printf("rrc %dx%d: fallback %.4f vs %.4f, area %.4f vs %.4f, log ratio %.4f vs %.4f\n", w,
               h, a.fallback / a.n, pf, a.area / a.n, b.area / b.n, a.logr / a.n, b.logr / b.n);
        CHECK(fabs(a.fallback / a.n - pf) < 5 * se_f);
        CHECK(fabs(a.area / a.n - b.area / b.n) < 5 * se_a);
        CHECK(fabs(a.logr / a.n - b.logr / b.n) < 5 * se_l);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Presets                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static void
test_presets(struct tsock__decoder *d)
{
    const int w = 500, h = 375;
    size_t n;
    uint8_t *jpeg = make_jpeg(K_420, w, h, 17, 90, &n);
    int rw, rh;
    uint8_t *full = ref_decode(jpeg, n, &rw, &rh);
    uint8_t *out = malloc(224 * 224 * 3), *again = malloc(224 * 224 * 3);

    /* Val: Resize(256) then CenterCrop(224), from the full decode with the plain resampler. */
    {
        uint8_t *resized = ref_resize(full, w, h, 341, 256);
        struct tsock__box c = {58, 16, 224, 224};
        uint8_t *want = ref_crop(resized, 341, c);
        CHECK_EQ(tsock__preset_val(d, jpeg, n, 256, 224, out), 0);
        CHECK(memcmp(out, want, 224 * 224 * 3) == 0);
        CHECK(tsock__decoder_report(d)->decoded_h < h); /* rows outside the crop were skipped */
        CHECK_EQ(tsock__preset_val(d, jpeg, n, 200, 224, out), -EINVAL);
        free(resized);
        free(want);
    }
    /* Train: the box is tsock__rrc_box's with the same stream, the flip the next draw, and the
     * pixels those of decode_crop_resize; the same seed gives the same bytes. */
    {
        struct tsock__train_params p = {224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 1};
        int flips = 0;
        for (uint64_t id = 0; id < 40; id++) {
            struct tsock__rng r1, r2;
            struct tsock__box box, want;
            int flipped;
            tsock__rng_seed(&r1, tsock__mix64(id));
            tsock__rng_seed(&r2, tsock__mix64(id));
            CHECK_EQ(tsock__preset_train(d, jpeg, n, &r1, &p, out, &box, &flipped), 0);
            CHECK(tsock__rrc_box(&r2, w, h, 0.08, 1.0, 3.0 / 4, 4.0 / 3, &want) >= 0);
            CHECK(memcmp(&box, &want, sizeof box) == 0);
            CHECK_EQ(flipped, tsock__rng_double(&r2) < 0.5);
            CHECK_EQ(tsock__decode_crop_resize(d, jpeg, n, &box, 224, 224, flipped, again), 0);
            CHECK(memcmp(out, again, 224 * 224 * 3) == 0);
            flips += flipped;
        }
        CHECK(flips > 5 && flips < 35);
        p.flip = 0;
        struct tsock__rng r3;
        int flipped = 1;
        tsock__rng_seed(&r3, 5);
        CHECK_EQ(tsock__preset_train(d, jpeg, n, &r3, &p, out, NULL, &flipped), 0);
        CHECK_EQ(flipped, 0);
        CHECK_EQ(tsock__preset_train(d, (const uint8_t *)"nope", 4, &r3, &p, out, NULL, NULL),
                 -EILSEQ);
    }
    free(jpeg);
    free(full);
    free(out);
    free(again);
}

/* `test_image no-avx512`, run by ctest with TSOCK_NO_AVX512=1: the passes leave AVX-512 out,
 * and give the same bytes as every other path (test_resample_paths, whose AVX-512 side is
 * then AVX2 too). A skip (77) on a CPU without AVX-512, where there is nothing to turn off. */
static int
no_avx512_part(void)
{
    const char *simd = tsock__resample_simd();
    const int cpu = cpu_has_avx512();
    const char *v = getenv("TSOCK_NO_AVX512");
    fprintf(stderr, "TSOCK_NO_AVX512=%s: the passes use %s\n", v ? v : "(unset)", simd);
    if (!cpu) {
        printf("SKIP: this CPU has no AVX-512 (BW, VL, VNNI): nothing to turn off\n");
        return 77;
    }
    CHECK(v && strcmp(v, "1") == 0); /* ctest sets it */
    CHECK(strcmp(simd, "avx512") != 0);
    test_resample_paths();
    return CHECK_DONE();
}

static int ignored_said;

static void
on_log(void *user, int level, const char *message)
{
    (void)user;
    if (level == TSOCK_LOG_WARN && strstr(message, "TSOCK_NO_AVX512=yes ignored"))
        ignored_said++;
}

/* `test_image bad-no-avx512`, run by ctest with TSOCK_NO_AVX512=yes: a value other than "1"
 * or "0" is said to be ignored, once, and changes nothing. */
static int
bad_no_avx512_part(void)
{
    tsock_set_log(on_log, NULL, TSOCK_LOG_WARN);
    const char *simd = tsock__resample_simd();
    tsock__resample_simd(); /* decided once: said once */
    tsock_set_log(NULL, NULL, TSOCK_LOG_WARN);
    fprintf(stderr, "TSOCK_NO_AVX512=%s: the passes use %s\n", getenv("TSOCK_NO_AVX512"), simd);
    CHECK_EQ(ignored_said, 1);
    if (cpu_has_avx512())
        CHECK(strcmp(simd, "avx512") == 0);
    return CHECK_DONE();
}

int
main(int argc, char **argv)
{
    struct tsock__decoder *d;

    if (argc > 1 && strcmp(argv[1], "no-avx512") == 0)
        return no_avx512_part();
    if (argc > 1 && strcmp(argv[1], "bad-no-avx512") == 0)
        return bad_no_avx512_part();
    if (argc > 1) {
        fprintf(stderr, "usage: test_image [no-avx512 | bad-no-avx512]\n");
        return 2;
    }
    /* without TSOCK_NO_AVX512, a CPU that has AVX-512 uses it */
    if (!getenv("TSOCK_NO_AVX512")) {
        fprintf(stderr, "the passes use %s\n", tsock__resample_simd());
        if (cpu_has_avx512())
            CHECK(strcmp(tsock__resample_simd(), "avx512") == 0);
    }
    CHECK_EQ(tsock__decoder_create(&d), 0);
    test_probe();
    test_decode_kinds(d);
    test_partial_and_resample(d);
    g_bicubic = 1;
    tsock__decoder_set_filter(d, 1);
    test_partial_and_resample(d);
    tsock__decoder_set_filter(d, 0);
    g_bicubic = 0;
    test_partial_saves(d);
    test_partial_stops(d);
    test_photos(d);
    test_flip(d);
    test_rgba_resize(d);
    test_resample_paths();
    test_pil_golden(d);
    test_dct_scaling(d);
    test_truncated(d);
    test_errors(d);
    test_rng();
    test_box_rules();
    test_rrc_distribution();
    test_presets(d);
    tsock__decoder_destroy(d);
    tsock__decoder_destroy(NULL);
    return CHECK_DONE();
}
