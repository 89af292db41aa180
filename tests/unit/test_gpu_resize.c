/* The GPU decoder's resampling arithmetic (libtsock/backend/cuda/gpu_resize.h), run on the CPU:
 * the very function the resize kernel runs, applied to a crop decoded by tsock's CPU decoder,
 * against the CPU decoder's own crop + resize (Pillow's two-pass bilinear, DCT scaling off so
 * that only the resampling differs). On a GPU the IDCT and chroma upsampling differ as well;
 * scripts/gpu-check.sh measures the whole (tsock-bench-gpudecode). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "backend/cuda/gpu_resize.h"
#include "check.h"
#include "image/image.h"

#define W 640
#define H 480

/* A JPEG with smooth gradients, edges and some noise: something like a photograph. */
static unsigned char *
make_jpeg(unsigned long *size)
{
    unsigned char *pix = malloc((size_t)W * H * 3);
    unsigned seed = 7;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            seed = seed * 1103515245u + 12345u;
            int noise = (int)((seed >> 16) % 17) - 8;
            int edge = ((x / 37 + y / 29) % 2) * 60;
            int v[3] = {x * 255 / W + noise, y * 255 / H + edge, (x + y) % 256 - noise};
            for (int c = 0; c < 3; c++)
                pix[((size_t)y * W + x) * 3 + c] = (unsigned char)(v[c] < 0     ? 0
                                                                   : v[c] > 255 ? 255
                                                                                : v[c]);
        }
    tjhandle t = tjInitCompress();
    unsigned char *buf = NULL;
    CHECK(tjCompress2(t, pix, W, 0, H, TJPF_RGB, &buf, size, TJSAMP_420, 90, 0) == 0);
    tjDestroy(t);
    free(pix);
    return buf;
}

/* The kernel's arithmetic on the decoded crop, against the CPU decoder's resize. */
static void
compare(struct tsock__decoder *d, const unsigned char *jpeg, unsigned long size,
        const struct tsock__resize_spec *s, double *mae_out, int *max_out)
{
    struct tsock__resize_spec ident = {.crop = s->crop,
                                       .resize_w = s->crop.w,
                                       .resize_h = s->crop.h,
                                       .out_w = s->crop.w,
                                       .out_h = s->crop.h};
    uint8_t *crop = malloc((size_t)s->crop.w * s->crop.h * 3);
    uint8_t *want = malloc((size_t)s->out_w * s->out_h * 3);
    uint8_t *got = malloc((size_t)s->out_w * s->out_h * 3);
    CHECK(tsock__decode_resize(d, jpeg, size, &ident, crop) == 0);
    CHECK(tsock__decode_resize(d, jpeg, size, s, want) == 0);
    struct tsock__resize_geom g = {.src_w = s->crop.w,
                                   .src_h = s->crop.h,
                                   .pitch = (size_t)s->crop.w * 3,
                                   .resize_w = s->resize_w,
                                   .resize_h = s->resize_h,
                                   .win_x = s->win_x,
                                   .win_y = s->win_y,
                                   .out_w = s->out_w,
                                   .out_h = s->out_h,
                                   .flip = s->flip};
    for (int y = 0; y < s->out_h; y++)
        for (int x = 0; x < s->out_w; x++)
            tsock__resize_pixel(crop, &g, x, y, got + ((size_t)y * s->out_w + x) * 3);
    double sum = 0;
    int mx = 0;
    size_t n = (size_t)s->out_w * s->out_h * 3;
    for (size_t k = 0; k < n; k++) {
        int dd = abs((int)want[k] - (int)got[k]);
        sum += dd;
        mx = dd > mx ? dd : mx;
    }
    *mae_out = sum / (double)n;
    *max_out = mx;
    free(crop);
    free(want);
    free(got);
}

int
main(void)
{
    unsigned long size = 0;
    unsigned char *jpeg = make_jpeg(&size);
    struct tsock__decoder *d;
    CHECK(tsock__decoder_create(&d) == 0);
    tsock__decoder_set_flags(d, TSOCK__DECODE_NO_DCT_SCALE);
    struct tsock__train_params p = {224, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, 1};
    double worst_mae = 0;
    int worst_max = 0;
    for (int i = 0; i < 40; i++) {
        struct tsock__rng rng;
        struct tsock__resize_spec s;
        tsock__rng_seed(&rng, (uint64_t)i * 7919u + 1);
        CHECK(tsock__preset_train_spec(&rng, &p, W, H, &s) == 0);
        double mae;
        int mx;
        compare(d, jpeg, size, &s, &mae, &mx);
        worst_mae = mae > worst_mae ? mae : worst_mae;
        worst_max = mx > worst_max ? mx : worst_max;
    }
    /* The val preset: a resize of the whole image, then a centre window. */
    struct tsock__resize_spec s;
    CHECK(tsock__preset_val_spec(W, H, 256, 224, &s) == 0);
    double mae;
    int mx;
    compare(d, jpeg, size, &s, &mae, &mx);
    worst_mae = mae > worst_mae ? mae : worst_mae;
    worst_max = mx > worst_max ? mx : worst_max;
    /* An enlargement: a small crop to 224. */
    s = (struct tsock__resize_spec){.crop = {100, 80, 50, 70},
                                    .resize_w = 224,
                                    .resize_h = 224,
                                    .out_w = 224,
                                    .out_h = 224,
                                    .flip = 1};
    compare(d, jpeg, size, &s, &mae, &mx);
    worst_mae = mae > worst_mae ? mae : worst_mae;
    worst_max = mx > worst_max ? mx : worst_max;
    printf("resize kernel vs Pillow's two passes: worst image mean abs diff %.4f, max %d\n",
           worst_mae, worst_max);
    /* One rounding of a float sum against two 8-bit passes: a level here and there. */
    CHECK(worst_mae <= 0.5);
    CHECK(worst_max <= 2);
    tsock__decoder_destroy(d);
    tjFree(jpeg);
    return CHECK_DONE();
}
