/* The synthetic dataset: deterministic samples whose every byte can be checked by a consumer.
 *
 * A dataset of n samples with images of H x W x 3 uint8 (HWC order). Sample s has:
 *   image byte p (0 <= p < H*W*3, C order within the sample's image):
 *       (uint8_t)(((uint32_t)s * 2654435761u + (uint32_t)p * 40503u) >> 16)
 *     all arithmetic in uint32_t, wrapping; so the bytes of one image form an arithmetic
 *     progression (step 40503) in the upper half of a 32-bit accumulator;
 *   label: s % TSOCK_SYNTH_CLASSES (int64);
 *   index: s (int64), the sample id itself.
 * The multiplier 2654435761 (Knuth's golden-ratio hash) makes neighbouring sample ids start far
 * apart, and the odd step 40503 makes neighbouring bytes differ, so a sample delivered in the
 * wrong place, a stale slot or a torn write shows up as wrong bytes.
 *
 * Used by tsock-producer (to fill slots) and tsock-consume (to verify them).
 */
#ifndef TSOCK_SYNTHETIC_H
#define TSOCK_SYNTHETIC_H

#include <stddef.h>
#include <stdint.h>

/* Number of classes the labels cycle through. */
#define TSOCK_SYNTH_CLASSES 1000u

/* The per-sample and per-byte multipliers of the formula above. */
#define TSOCK_SYNTH_SAMPLE_MUL 2654435761u
#define TSOCK_SYNTH_BYTE_MUL 40503u

/* The image byte at position `pos` of sample `sample`. */
uint8_t tsock_synth_byte(uint64_t sample, size_t pos);

/* The label of sample `sample`. */
int64_t tsock_synth_label(uint64_t sample);

/* Writes sample `sample`: `image_bytes` (H*W*3) bytes of its image into `image`, and its label
 * and index into *label and *index. Any pointer may be NULL to skip that part. */
void tsock_synth_fill(uint64_t sample, uint8_t *image, size_t image_bytes, int64_t *label,
                      int64_t *index);

/* Compares `image_bytes` bytes at `image` with sample `sample`'s image. Returns the number of
 * bytes that differ (0: the image is right). */
size_t tsock_synth_verify(uint64_t sample, const uint8_t *image, size_t image_bytes);

#endif
