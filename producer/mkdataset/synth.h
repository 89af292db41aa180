/* Synthetic photographs for tsock-mkdataset: ImageNet-like dimensions and natural-image
 * statistics, from a seed alone.
 *
 * Decoding cost and JPEG size depend on image content, so flat colours or white noise would
 * make a misleading benchmark. The generator builds what photographs have: a 1/f-like
 * spectrum (a pyramid of value noise, each octave's amplitude a fixed fraction of the
 * coarser one's), strongly correlated colour channels (a luminance field plus smooth chroma
 * fields at half resolution), objects with edges (ellipses and rotated rectangles, soft or
 * sharp, with their own shade, colour and texture), texture that varies over the image (a
 * smooth mask decides where fine detail lives, as grass next to sky), and a lighting
 * gradient. Everything derives from one 64-bit seed, so an image is reproducible on any
 * thread.
 */
#ifndef TSOCK_MKDATASET_SYNTH_H
#define TSOCK_MKDATASET_SYNTH_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64: the generator of every random choice here. */
struct synth_rng {
    uint64_t state;
};

uint64_t synth_mix(uint64_t x);
uint64_t synth_next(struct synth_rng *g);
/* Uniform in [0, 1). */
double synth_unit(struct synth_rng *g);

/* Draws ImageNet-like dimensions: about half the images are 500x375, 375x500 or 500x333
 * (ImageNet's Flickr-style sizes), the rest spread over 75..1400 px with mixed aspect ratios;
 * mean about 400 x 350. */
void synth_dims(struct synth_rng *g, int *width, int *height);

/* Reusable scratch memory of one thread. */
struct synth_scratch {
    float *f[6];
    size_t cap;
};

void synth_scratch_free(struct synth_scratch *s);

/* Writes a width x height RGB image (3 bytes per pixel, rows packed) generated from `seed`.
 * Returns 0, or -1 when out of memory. */
int synth_image(uint64_t seed, int width, int height, uint8_t *rgb, struct synth_scratch *s);

/* Real photographs to crop from (--photos). */
struct synth_photo {
    int width, height;
    uint8_t *rgb;
};

/* Writes a width x height RGB image cropped from one of `n` photos at a random place and
 * scale, resampled bilinearly, possibly mirrored, with faint noise so that no two outputs are
 * equal. */
void synth_from_photo(uint64_t seed, const struct synth_photo *photos, size_t n, int width,
                      int height, uint8_t *rgb);

#endif
