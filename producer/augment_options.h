/* tsock-producer's recipe options: crop and resize sizes, interpolation, and the per-sample
 * augmentations (auto-augment policy, colour jitter, random erasing). */
#ifndef TSOCK_PRODUCER_AUGMENT_OPTIONS_H
#define TSOCK_PRODUCER_AUGMENT_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "tsock/pipeline.h"

/* The long options' codes, above producer_options.c's. */
enum {
    OPT_TRAIN_CROP_SIZE = 512,
    OPT_VAL_RESIZE_SIZE,
    OPT_VAL_CROP_SIZE,
    OPT_INTERPOLATION,
    OPT_AUTO_AUGMENT,
    OPT_RA_MAGNITUDE,
    OPT_RA_OPS,
    OPT_AUGMENT_INTERPOLATION,
    OPT_RANDOM_ERASE,
    OPT_COLOR_JITTER
};

/* getopt_long entries of these options, spliced into producer_options.c's table. */
#define AUGMENT_LONGOPTS                                                                           \
    {"train-crop-size", required_argument, NULL, OPT_TRAIN_CROP_SIZE},                             \
        {"val-resize-size", required_argument, NULL, OPT_VAL_RESIZE_SIZE},                         \
        {"val-crop-size", required_argument, NULL, OPT_VAL_CROP_SIZE},                             \
        {"interpolation", required_argument, NULL, OPT_INTERPOLATION},                             \
        {"auto-augment", required_argument, NULL, OPT_AUTO_AUGMENT},                               \
        {"ra-magnitude", required_argument, NULL, OPT_RA_MAGNITUDE},                               \
        {"ra-ops", required_argument, NULL, OPT_RA_OPS},                                           \
        {"augment-interpolation", required_argument, NULL, OPT_AUGMENT_INTERPOLATION},             \
        {"random-erase", required_argument, NULL, OPT_RANDOM_ERASE},                               \
    {                                                                                              \
        "color-jitter", required_argument, NULL, OPT_COLOR_JITTER                                  \
    }

struct augment_options {
    uint64_t train_crop_size, val_resize_size, val_crop_size; /* 0: not given */
    int auto_augment;                                         /* tsock_auto_augment */
    int ra_magnitude, ra_ops, augment_interp;
    int bicubic; /* --interpolation bicubic */
    double random_erase;
    double jitter[4];
    const char *first; /* the first of these options given, for error messages */
    int ra_given;      /* --ra-magnitude or --ra-ops */
    int train_only;    /* an augmentation was asked for */
};

/* Defaults: no augmentation, RandAugment's 9 and 2, nearest. */
void augment_options_init(struct augment_options *a);

/* Parses option `c` when it is one of these (returns 1), else returns 0. Bad values end the
 * program through cli_bad_usage. */
int augment_options_parse(int c, const char *arg, struct augment_options *a);

/* The checks between options once all are read; sets *image_size from the split's crop size
 * (image_size_given: --image-size was given too, which must then agree). */
void augment_options_check(struct augment_options *a, int val, uint64_t *image_size,
                           int image_size_given);

/* Hands the options to the pipeline. Returns 0 or the library's error. */
int augment_options_apply(const struct augment_options *a, tsock_pipeline *pl);

/* Writes what each training sample gets after its crop and flip ("TrivialAugmentWide
 * (bilinear), RandomErasing(0.1)") to buf; returns 0 when nothing (buf then empty). */
int augment_options_describe(const struct augment_options *a, char *buf, size_t size);

/* The first option given that only the CPU decoder applies (an augmentation, bicubic
 * resizing, a val resize other than the default), or NULL: the GPU decoder resizes with the
 * bilinear filter into the slot and augments nothing (docs/gpu.md, "The GPU decoder"). */
const char *augment_options_cpu_only(const struct augment_options *a);

/* The usage text of these options. */
extern const char augment_options_usage[];

#endif
