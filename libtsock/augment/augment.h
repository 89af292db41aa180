/* Per-sample augmentations after the crop and flip: torchvision's TrivialAugmentWide,
 * RandAugment, AutoAugment(IMAGENET), ColorJitter and RandomErasing on uint8 RGB HWC images.
 * Internal to libtsock.
 *
 * Files: one operation family per file (color.c: brightness, saturation, contrast;
 * sharpness.c; hue.c; histogram.c: autocontrast, equalize; pixel.c: posterize, solarize,
 * invert; geometry.c: shear, translate, rotate; erase.c: the erase box and its draw;
 * jitter.c: ColorJitter's draw and order), apply.c is the public entry points (one operation,
 * the draws), policy.c draws TrivialAugmentWide / RandAugment / AutoAugment steps, chain.c
 * applies a policy's operations and draws and applies everything one sample gets. fp32.h
 * holds torch's float32 idioms (FMA, truncation, rounding) and the FMA-target switch.
 *
 * Each operation is a pure function of the image and its parameters, reproducing
 * torchvision.transforms.v2.functional on a uint8 tensor: the same float32 arithmetic in the
 * same order (torch's vectorised add-with-alpha is a fused multiply-add; it is emulated in
 * double, exact for these operands), the same rounding and truncation. The files are compiled
 * with -ffp-contract=off so that the compiler fuses nothing torch does not.
 *
 * Threads: no global state; any number of threads may call these at once on different images.
 */
#ifndef TSOCK_AUGMENT_INT_H
#define TSOCK_AUGMENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "image/image.h"

/* The operations; the values are the public enum tsock_augment_op's (tsock/augment.h). */
enum tsock__aug_op {
    TSOCK__AUG_IDENTITY = 0,
    TSOCK__AUG_SHEAR_X = 1,
    TSOCK__AUG_SHEAR_Y = 2,
    TSOCK__AUG_TRANSLATE_X = 3,
    TSOCK__AUG_TRANSLATE_Y = 4,
    TSOCK__AUG_ROTATE = 5,
    TSOCK__AUG_BRIGHTNESS = 6,
    TSOCK__AUG_COLOR = 7,
    TSOCK__AUG_CONTRAST = 8,
    TSOCK__AUG_SHARPNESS = 9,
    TSOCK__AUG_POSTERIZE = 10,
    TSOCK__AUG_SOLARIZE = 11,
    TSOCK__AUG_AUTOCONTRAST = 12,
    TSOCK__AUG_EQUALIZE = 13,
    TSOCK__AUG_INVERT = 14,
    TSOCK__AUG_HUE = 15,
    TSOCK__AUG_ERASE = 16,
    TSOCK__AUG_COLOR_JITTER = 17,
    TSOCK__AUG_OPS = 18
};

/* Geometric resampling (torchvision's InterpolationMode for grid_sample). */
enum tsock__aug_interp { TSOCK__AUG_NEAREST = 0, TSOCK__AUG_BILINEAR = 1 };

/* ---- operations: image is h rows of w RGB pixels, changed in place ---- */

/* The scratch the geometric operations and sharpness need: a copy of the image with a border
 * of one zero pixel (the sampler's zero padding, read without bounds checks), and 4 bytes of
 * slack for the 4-byte loads of a pixel's 3. */
#define TSOCK__AUG_TMP_BYTES(w, h) (((size_t)(w) + 2) * ((size_t)(h) + 2) * 3 + 4)

/* F.adjust_brightness / adjust_saturation / adjust_contrast with factor >= 0. */
void tsock__aug_brightness(uint8_t *img, int w, int h, double factor);
void tsock__aug_saturation(uint8_t *img, int w, int h, double factor);
void tsock__aug_contrast(uint8_t *img, int w, int h, double factor);
/* F.adjust_sharpness; tmp: TSOCK__AUG_TMP_BYTES(w, h) of scratch. */
void tsock__aug_sharpness(uint8_t *img, int w, int h, double factor, uint8_t *tmp);
/* F.adjust_hue with factor in [-0.5, 0.5]. */
void tsock__aug_hue(uint8_t *img, int w, int h, double factor);
/* F.autocontrast, F.equalize (per channel, one pass for the statistics). */
void tsock__aug_autocontrast(uint8_t *img, int w, int h);
void tsock__aug_equalize(uint8_t *img, int w, int h);
/* F.posterize(bits 0..8), F.solarize(threshold in uint8 units), F.invert. */
void tsock__aug_posterize(uint8_t *img, int w, int h, int bits);
void tsock__aug_solarize(uint8_t *img, int w, int h, double threshold);
void tsock__aug_invert(uint8_t *img, int w, int h);

/* F.affine(img, angle, translate, scale 1, shear (degrees), interpolation, fill=None,
 * center) with center NULL meaning the image centre, and F.rotate(img, angle) (no expand):
 * grid_sample with zero padding, as torchvision does for fill=None. tmp: TSOCK__AUG_TMP_BYTES(w,
 * h). */
void tsock__aug_affine(uint8_t *img, int w, int h, double angle, double tx, double ty,
                       double shear_x, double shear_y, const double *center, int interp,
                       uint8_t *tmp);
void tsock__aug_rotate(uint8_t *img, int w, int h, double angle, int interp, uint8_t *tmp);

/* F.erase: the box x, y, bw, bh (clipped to the image) becomes `fill` (3 bytes). */
void tsock__aug_erase(uint8_t *img, int w, int h, int x, int y, int bw, int bh,
                      const uint8_t fill[3]);

/* One operation as the auto-augment policies apply it (torchvision's
 * _apply_image_or_video_transform): ShearX/Y take the shear factor (degrees(atan(m))),
 * TranslateX/Y pixels (int(m)), Rotate degrees, Brightness/Color/Contrast/Sharpness
 * 1 + m, Posterize int(m) bits, Solarize 255 * m. */
void tsock__aug_policy_op(uint8_t *img, int w, int h, int op, double magnitude, int interp,
                          uint8_t *tmp);

/* ---- the configuration one producer applies to every training sample ---- */

enum tsock__aug_policy {
    TSOCK__POLICY_NONE = 0,
    TSOCK__POLICY_TA_WIDE = 1,
    TSOCK__POLICY_RA = 2,
    TSOCK__POLICY_IMAGENET = 3
};

struct tsock__aug_config {
    int policy;       /* enum tsock__aug_policy */
    int ra_magnitude; /* RandAugment's magnitude bin, 0..30 */
    int ra_ops;       /* RandAugment's number of operations */
    int interp;       /* enum tsock__aug_interp, for the policies' geometric operations */
    double jitter[4]; /* ColorJitter brightness, contrast, saturation (>= 0), hue (0..0.5) */
    double erase_p;   /* RandomErasing's probability */
    uint8_t erase_fill[3];
};

/* Whether the configuration changes anything (a policy, jitter or erasing). */
int tsock__aug_enabled(const struct tsock__aug_config *c);

/* One drawn policy step: an operation and its signed magnitude. */
struct tsock__aug_step {
    int op;
    double magnitude;
};
#define TSOCK__AUG_MAX_STEPS 64

/* Draws the steps of `policy` for a w x h image from rng in torchvision's order (see
 * policy.c); writes at most `cap` steps and returns how many were drawn (a RandAugment with
 * more ops than cap still consumes their draws). */
int tsock__aug_policy_draw(struct tsock__rng *rng, const struct tsock__aug_config *c, int w, int h,
                           struct tsock__aug_step *steps, int cap);

/* The whole chain one training sample gets after its crop and flip: the policy's steps, then
 * ColorJitter, then RandomErasing, all drawn from rng. tmp: TSOCK__AUG_TMP_BYTES(w, h). */
void tsock__aug_sample(struct tsock__rng *rng, const struct tsock__aug_config *c, uint8_t *img,
                       int w, int h, uint8_t *tmp);

/* ColorJitter: the order (a permutation of 0..3: brightness, contrast, saturation, hue) and
 * the factors of the enabled ones, then applying them. */
struct tsock__jitter_draw {
    int order[4]; /* -1: no operation in this slot */
    double factor[4];
    int enabled[4];
};
void tsock__aug_jitter_draw(struct tsock__rng *rng, const double jitter[4],
                            struct tsock__jitter_draw *d);
void tsock__aug_jitter_apply(uint8_t *img, int w, int h, const struct tsock__jitter_draw *d);

/* RandomErasing.get_params (scale 0.02..0.33, ratio 0.3..3.3) after its probability draw:
 * returns 1 and the box when the sample is erased, 0 when not (probability, or 10 failed
 * attempts). */
int tsock__aug_erase_draw(struct tsock__rng *rng, double p, int w, int h, struct tsock__box *box);

#endif
