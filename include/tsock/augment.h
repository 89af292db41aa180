/*
 * tsock augmentations: the per-sample operations tsock-producer applies after the crop and
 * flip (tsock_pipeline_set_auto_augment, _set_color_jitter, _set_random_erase), each as a
 * function of an image and its parameters.
 *
 * Every operation works in place on one uint8 RGB image, `height` rows of `width` pixels of
 * 3 bytes (HWC, no padding), and reproduces torchvision.transforms.v2.functional on the same
 * image as a uint8 tensor (CHW): colour and histogram operations byte for byte; shear,
 * translate and rotate with grid_sample's zero padding (torchvision's fill=None), nearest or
 * bilinear. docs/pipeline.md lists what is and is not identical.
 *
 * These entry points serve tests (the binding reaches them through ctypes) and programs that
 * want one operation with chosen parameters; the pipeline draws its parameters itself.
 * Threads: no global state; any thread, any number at once on different images.
 */
#ifndef TSOCK_AUGMENT_H
#define TSOCK_AUGMENT_H

#include <stdint.h>

#include "tsock/tsock.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The operations, with their parameters (`params`, `nparams` exactly as listed):
 *   IDENTITY, AUTOCONTRAST, EQUALIZE, INVERT: none
 *   SHEAR_X, SHEAR_Y: the shear factor m, as the auto-augment policies apply it:
 *       F.affine(angle 0, translate 0, scale 1, shear degrees(atan(m)) on x (y), center [0, 0])
 *   TRANSLATE_X, TRANSLATE_Y: pixels t: F.affine(translate [int(t), 0] ([0, int(t)]))
 *   ROTATE: degrees, counter-clockwise: F.rotate(angle), same size, image centre
 *   BRIGHTNESS, COLOR (saturation), CONTRAST, SHARPNESS: the factor (>= 0):
 *       F.adjust_brightness / adjust_saturation / adjust_contrast / adjust_sharpness
 *   POSTERIZE: bits, an integer 0..8; SOLARIZE: threshold 0..255 (F.solarize)
 *   HUE: hue factor in [-0.5, 0.5] (F.adjust_hue)
 *   ERASE: x, y, w, h, r, g, b: the box's pixels become (r, g, b) (F.erase; the box is
 *       clipped to the image)
 *   COLOR_JITTER: brightness, contrast, saturation factors, hue factor, then the order as
 *       0..3 indices (0 brightness, 1 contrast, 2 saturation, 3 hue) of the operations to
 *       apply: what v2.ColorJitter does once it has drawn its order and factors. */
typedef enum tsock_augment_op {
    TSOCK_AUGMENT_IDENTITY = 0,
    TSOCK_AUGMENT_SHEAR_X = 1,
    TSOCK_AUGMENT_SHEAR_Y = 2,
    TSOCK_AUGMENT_TRANSLATE_X = 3,
    TSOCK_AUGMENT_TRANSLATE_Y = 4,
    TSOCK_AUGMENT_ROTATE = 5,
    TSOCK_AUGMENT_BRIGHTNESS = 6,
    TSOCK_AUGMENT_COLOR = 7,
    TSOCK_AUGMENT_CONTRAST = 8,
    TSOCK_AUGMENT_SHARPNESS = 9,
    TSOCK_AUGMENT_POSTERIZE = 10,
    TSOCK_AUGMENT_SOLARIZE = 11,
    TSOCK_AUGMENT_AUTOCONTRAST = 12,
    TSOCK_AUGMENT_EQUALIZE = 13,
    TSOCK_AUGMENT_INVERT = 14,
    TSOCK_AUGMENT_HUE = 15,
    TSOCK_AUGMENT_ERASE = 16,
    TSOCK_AUGMENT_COLOR_JITTER = 17
} tsock_augment_op;

/* Resampling of the geometric operations (torchvision's InterpolationMode). */
typedef enum tsock_augment_interpolation {
    TSOCK_AUGMENT_NEAREST = 0, /* torchvision's default for the auto-augment policies */
    TSOCK_AUGMENT_BILINEAR = 1 /* what torchvision's reference recipes pass */
} tsock_augment_interpolation;

/* The auto-augment policies. */
typedef enum tsock_auto_augment {
    TSOCK_AUTO_AUGMENT_NONE = 0,
    TSOCK_AUTO_AUGMENT_TA_WIDE = 1, /* TrivialAugmentWide() */
    TSOCK_AUTO_AUGMENT_RA = 2,      /* RandAugment(num_ops, magnitude) */
    TSOCK_AUTO_AUGMENT_IMAGENET = 3 /* AutoAugment(AutoAugmentPolicy.IMAGENET) */
} tsock_auto_augment;

/* RandAugment's magnitude bins (torchvision's num_magnitude_bins): magnitudes 0..30. */
#define TSOCK_AUGMENT_RA_BINS 31
/* The most RandAugment operations per sample. */
#define TSOCK_AUGMENT_MAX_OPS 64

/* Applies operation `op` (a tsock_augment_op) with its parameters to `image` (width x height
 * x 3 bytes, changed in place; the caller owns it). `interpolation` (a
 * tsock_augment_interpolation) matters for the geometric operations only. Returns 0, -EINVAL
 * (a NULL image, a size below 1, an unknown op or interpolation, a wrong parameter count, a
 * parameter out of its range) or -ENOMEM (the scratch copy of the geometric operations and
 * sharpness). */
TSOCK_API int tsock_augment_apply(uint8_t *image, int width, int height, int op,
                                  const double *params, int nparams, int interpolation);

/* Draws the operations `policy` (a tsock_auto_augment) chooses for one width x height image,
 * from the random stream the pipeline would use for `seed`, exactly as tsock-producer draws
 * them: up to `capacity` operations go to ops[] (tsock_augment_op values) and their signed
 * magnitudes (in torchvision's _AUGMENTATION_SPACE units, the value before the "1 +" or the
 * "255 *" of the operation) to magnitudes[]. `magnitude` and `num_ops` are RandAugment's
 * (ignored by the other policies). For checking the policies' distributions against
 * torchvision's definitions. Returns the number of operations written, or -EINVAL. */
TSOCK_API int tsock_augment_draw(int policy, int magnitude, int num_ops, int width, int height,
                                 uint64_t seed, int *ops, double *magnitudes, int capacity);

/* RandomErasing's draw for a width x height image from the stream of `seed` (probability p in
 * [0, 1], scale 0.02..0.33, ratio 0.3..3.3, as the pipeline draws it): returns 1 and the box
 * (x, y, w, h) in box[0..3] when the image is erased, 0 when not, -EINVAL for bad arguments. */
TSOCK_API int tsock_augment_draw_erase(double p, int width, int height, uint64_t seed, int box[4]);

/* ColorJitter's draw from the stream of `seed` for jitter = {brightness, contrast, saturation,
 * hue} (as tsock_pipeline_set_color_jitter takes them): order[0..3] receives the permutation
 * (0 brightness, 1 contrast, 2 saturation, 3 hue) and factors[0..3] each property's factor
 * (1, or 0 for hue, where that property is off). Returns 0 or -EINVAL. */
TSOCK_API int tsock_augment_draw_jitter(const double jitter[4], uint64_t seed, int order[4],
                                        double factors[4]);

#ifdef __cplusplus
}
#endif

#endif
