/* The synthetic dataset; see synthetic.h for the formula. Both directions walk the image with
 * one 32-bit accumulator that advances by TSOCK_SYNTH_BYTE_MUL per byte, so there is no
 * per-byte multiply and the loops vectorise. */
#include "synthetic.h"

uint8_t
tsock_synth_byte(uint64_t sample, size_t pos)
{
    uint32_t v = (uint32_t)sample * TSOCK_SYNTH_SAMPLE_MUL + (uint32_t)pos * TSOCK_SYNTH_BYTE_MUL;
    return (uint8_t)(v >> 16);
}

int64_t
tsock_synth_label(uint64_t sample)
{
    return (int64_t)(sample % TSOCK_SYNTH_CLASSES);
}

void
tsock_synth_fill(uint64_t sample, uint8_t *image, size_t image_bytes, int64_t *label,
                 int64_t *index)
{
    if (image) {
        uint32_t v = (uint32_t)sample * TSOCK_SYNTH_SAMPLE_MUL;
        for (size_t p = 0; p < image_bytes; p++) {
            image[p] = (uint8_t)(v >> 16);
            v += TSOCK_SYNTH_BYTE_MUL;
        }
    }
    if (label)
        *label = tsock_synth_label(sample);
    if (index)
        *index = (int64_t)sample;
}

size_t
tsock_synth_verify(uint64_t sample, const uint8_t *image, size_t image_bytes)
{
    uint32_t v = (uint32_t)sample * TSOCK_SYNTH_SAMPLE_MUL;
    size_t wrong = 0;
    for (size_t p = 0; p < image_bytes; p++) {
        wrong += image[p] != (uint8_t)(v >> 16);
        v += TSOCK_SYNTH_BYTE_MUL;
    }
    return wrong;
}
