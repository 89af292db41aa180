/* The augmentations in C, beside the Python comparisons with torchvision
 * (tests/python/test_augment_*.py): every operation on images of every awkward size (1 x 1,
 * thin strips, odd sizes) with parameters at and beyond its ranges' ends, so the sanitizer
 * builds see every read and write; the public entry point's refusals; properties that hold
 * exactly (identity factors, involutions, erase boxes); the chain's determinism per stream. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "check.h"
#include "image/image.h"
#include "tsock/augment.h"

static uint8_t *
noise(int w, int h, uint64_t seed)
{
    struct tsock__rng rng;
    size_t n = (size_t)w * (size_t)h * 3;
    uint8_t *p = malloc(n);
    tsock__rng_seed(&rng, seed);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)tsock__rng_next(&rng);
    return p;
}

static const int sizes[][2] = {{1, 1}, {2, 1}, {1, 3}, {3, 3}, {7, 2}, {17, 31}, {64, 48}};
#define N_SIZES (int)(sizeof sizes / sizeof sizes[0])

/* Every operation, both interpolations, extreme parameters, every size: no crash, no read or
 * write outside the image (the sanitizers check), 0 returned. */
static void
test_every_op_every_size(void)
{
    static const double magnitudes[] = {-135.0, -0.99, -0.3, 0.0, 0.3, 0.99, 32.0, 135.0, 359.9};
    for (int s = 0; s < N_SIZES; s++) {
        int w = sizes[s][0], h = sizes[s][1];
        uint8_t *img = noise(w, h, (uint64_t)s);
        for (int op = TSOCK_AUGMENT_SHEAR_X; op <= TSOCK_AUGMENT_ROTATE; op++)
            for (int interp = 0; interp < 2; interp++)
                for (size_t m = 0; m < sizeof magnitudes / sizeof magnitudes[0]; m++)
                    CHECK_EQ(tsock_augment_apply(img, w, h, op, &magnitudes[m], 1, interp), 0);
        for (int op = TSOCK_AUGMENT_BRIGHTNESS; op <= TSOCK_AUGMENT_SHARPNESS; op++) {
            static const double factors[] = {0.0, 0.5, 1.0, 1.99, 40.0};
            for (int f = 0; f < 5; f++)
                CHECK_EQ(tsock_augment_apply(img, w, h, op, &factors[f], 1, 0), 0);
        }
        for (double bits = 0; bits <= 8; bits++)
            CHECK_EQ(tsock_augment_apply(img, w, h, TSOCK_AUGMENT_POSTERIZE, &bits, 1, 0), 0);
        static const double thresholds[] = {-1.0, 0.0, 128.0, 255.0};
        for (int t = 0; t < 4; t++)
            CHECK_EQ(tsock_augment_apply(img, w, h, TSOCK_AUGMENT_SOLARIZE, &thresholds[t], 1, 0),
                     0);
        static const double hues[] = {-0.5, -0.2, 0.0, 0.33, 0.5};
        for (int t = 0; t < 5; t++)
            CHECK_EQ(tsock_augment_apply(img, w, h, TSOCK_AUGMENT_HUE, &hues[t], 1, 0), 0);
        for (int op = TSOCK_AUGMENT_AUTOCONTRAST; op <= TSOCK_AUGMENT_INVERT; op++)
            CHECK_EQ(tsock_augment_apply(img, w, h, op, NULL, 0, 0), 0);
        const double erase[7] = {-3, w - 1, 5, 9, 124, 116, 104};
        CHECK_EQ(tsock_augment_apply(img, w, h, TSOCK_AUGMENT_ERASE, erase, 7, 0), 0);
        const double jitter[8] = {1.2, 0.8, 1.4, -0.1, 3, 2, 1, 0};
        CHECK_EQ(tsock_augment_apply(img, w, h, TSOCK_AUGMENT_COLOR_JITTER, jitter, 8, 0), 0);
        free(img);
    }
}

static void
test_refusals(void)
{
    uint8_t px[12] = {0};
    double one = 1.0, neg = -0.5, nine = 9.0, big = 256.0, nan = NAN, hue = 0.6;
    double jitter_bad_order[5] = {1, 1, 1, 0, 4};
    CHECK_EQ(tsock_augment_apply(NULL, 2, 2, TSOCK_AUGMENT_INVERT, NULL, 0, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 0, 2, TSOCK_AUGMENT_INVERT, NULL, 0, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, 18, NULL, 0, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, -1, NULL, 0, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_INVERT, &one, 1, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_ROTATE, &one, 1, 2), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_ROTATE, NULL, 1, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_ROTATE, &nan, 1, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_BRIGHTNESS, &neg, 1, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_POSTERIZE, &nine, 1, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_POSTERIZE, &neg, 1, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_SOLARIZE, &big, 1, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_HUE, &hue, 1, 0), -EINVAL);
    CHECK_EQ(tsock_augment_apply(px, 2, 2, TSOCK_AUGMENT_COLOR_JITTER, jitter_bad_order, 5, 0),
             -EINVAL);
    int ops[4];
    double mags[4];
    CHECK_EQ(tsock_augment_draw(4, 9, 2, 8, 8, 1, ops, mags, 4), -EINVAL);
    CHECK_EQ(tsock_augment_draw(TSOCK_AUTO_AUGMENT_RA, -1, 2, 8, 8, 1, ops, mags, 4), -EINVAL);
    CHECK_EQ(tsock_augment_draw(TSOCK_AUTO_AUGMENT_RA, 31, 2, 8, 8, 1, ops, mags, 4), -EINVAL);
    CHECK_EQ(tsock_augment_draw(TSOCK_AUTO_AUGMENT_RA, 9, 65, 8, 8, 1, ops, mags, 4), -EINVAL);
    CHECK_EQ(tsock_augment_draw(TSOCK_AUTO_AUGMENT_RA, 9, 3, 8, 8, 1, ops, mags, 2), 2);
    CHECK_EQ(tsock_augment_draw(TSOCK_AUTO_AUGMENT_NONE, 9, 3, 8, 8, 1, ops, mags, 4), 0);
}

/* Properties that hold exactly whatever torch's arithmetic. */
static void
test_exact_properties(void)
{
    const int w = 33, h = 21;
    size_t n = (size_t)w * h * 3;
    uint8_t *a = noise(w, h, 9), *b = malloc(n);
    double one = 1.0, zero = 0.0, full = 360.0;
    for (int op = TSOCK_AUGMENT_BRIGHTNESS; op <= TSOCK_AUGMENT_SHARPNESS; op++) {
        memcpy(b, a, n);
        CHECK_EQ(tsock_augment_apply(b, w, h, op, &one, 1, 0), 0);
        CHECK(memcmp(a, b, n) == 0); /* factor 1 changes nothing */
    }
    for (int op = TSOCK_AUGMENT_SHEAR_X; op <= TSOCK_AUGMENT_ROTATE; op++)
        for (int interp = 0; interp < 2; interp++) {
            memcpy(b, a, n);
            CHECK_EQ(tsock_augment_apply(b, w, h, op, op == TSOCK_AUGMENT_ROTATE ? &full : &zero, 1,
                                         interp),
                     0);
            CHECK(memcmp(a, b, n) == 0); /* no movement changes nothing */
        }
    memcpy(b, a, n);
    CHECK_EQ(tsock_augment_apply(b, w, h, TSOCK_AUGMENT_INVERT, NULL, 0, 0), 0);
    CHECK_EQ(tsock_augment_apply(b, w, h, TSOCK_AUGMENT_INVERT, NULL, 0, 0), 0);
    CHECK(memcmp(a, b, n) == 0);
    /* Rotating a square image by 90 degrees four times gives it back (the rot90 path). */
    uint8_t *sq = noise(16, 16, 4), *sq2 = malloc(16 * 16 * 3);
    double quarter = 90.0;
    memcpy(sq2, sq, 16 * 16 * 3);
    for (int k = 0; k < 4; k++)
        CHECK_EQ(tsock_augment_apply(sq2, 16, 16, TSOCK_AUGMENT_ROTATE, &quarter, 1, 0), 0);
    CHECK(memcmp(sq, sq2, 16 * 16 * 3) == 0);
    /* An erase box clipped to the image. */
    const double erase[7] = {30, 19, 10, 10, 1, 2, 3};
    memcpy(b, a, n);
    CHECK_EQ(tsock_augment_apply(b, w, h, TSOCK_AUGMENT_ERASE, erase, 7, 0), 0);
    int erased = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const uint8_t *p = b + ((size_t)y * w + x) * 3;
            int in = x >= 30 && y >= 19;
            erased += in;
            CHECK(in ? p[0] == 1 && p[1] == 2 && p[2] == 3
                     : memcmp(p, a + ((size_t)y * w + x) * 3, 3) == 0);
        }
    CHECK_EQ(erased, 3 * 2);
    free(a);
    free(b);
    free(sq);
    free(sq2);
}

/* The chain depends on its stream only: the same seed gives the same bytes, and it draws the
 * erase box within the image. */
static void
test_chain(void)
{
    const int w = 40, h = 30;
    size_t n = (size_t)w * h * 3;
    struct tsock__aug_config c = {.policy = TSOCK__POLICY_RA,
                                  .ra_magnitude = 20,
                                  .ra_ops = 4,
                                  .interp = TSOCK__AUG_BILINEAR,
                                  .jitter = {0.4, 0.4, 0.4, 0.2},
                                  .erase_p = 1.0,
                                  .erase_fill = {124, 116, 104}};
    uint8_t *tmp = malloc(TSOCK__AUG_TMP_BYTES(w, h));
    int differ = 0;
    for (uint64_t seed = 0; seed < 50; seed++) {
        uint8_t *a = noise(w, h, 77), *b = noise(w, h, 77);
        struct tsock__rng r1, r2;
        tsock__rng_seed(&r1, seed);
        tsock__rng_seed(&r2, seed);
        tsock__aug_sample(&r1, &c, a, w, h, tmp);
        tsock__aug_sample(&r2, &c, b, w, h, tmp);
        CHECK(memcmp(a, b, n) == 0);
        CHECK_EQ(r1.state, r2.state);
        uint8_t *orig = noise(w, h, 77);
        differ += memcmp(a, orig, n) != 0;
        free(orig);
        free(a);
        free(b);
        struct tsock__box box;
        tsock__rng_seed(&r1, seed);
        if (tsock__aug_erase_draw(&r1, 1.0, w, h, &box)) {
            CHECK(box.x >= 0 && box.y >= 0 && box.w >= 1 && box.h >= 1);
            CHECK(box.x + box.w <= w && box.y + box.h <= h && box.w < w && box.h < h);
        }
    }
    CHECK_EQ(differ, 50);
    free(tmp);
}

int
main(void)
{
    test_every_op_every_size();
    test_refusals();
    test_exact_properties();
    test_chain();
    return CHECK_DONE();
}
