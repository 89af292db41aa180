/* The decoder seam: how the pipeline fills a slot's images (issue 20).
 *
 * The CPU decoder (image.h) writes each image into the slot's host memory. A device decoder
 * takes whole batches of JPEGs and writes them into the slot's device memory instead: nvJPEG
 * on a GPU, libjpeg-turbo on the simulated device. It lives behind the CUDA backend's device API
 * (backend/cuda/), which implements this interface; the pipeline reaches it through the slot it
 * fills (tsock__slot_device_decoder), so that it never sees a CUDA type, and the backend never
 * sees the pipeline.
 *
 * A device decoder accepts or refuses an image by its header (accepts); the pipeline decodes the
 * refused ones on the CPU as before. A batch handed to decode may still fail image by image
 * (status); the pipeline then decodes those on the CPU, with the same crop, ids and labels, and
 * with its --on-error rules when the CPU fails too. Nothing is refused silently: each image the
 * device did not take is counted (decoded_cpu) and a failed device decode is logged.
 */
#ifndef TSOCK_IMAGE_DEVICE_DECODER_H
#define TSOCK_IMAGE_DEVICE_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "image/image.h"
#include "tsock/tsock.h"

/* One image of a batch: decode `data`, crop, resize, take the window and flip exactly as
 * tsock__decode_resize would with `spec` (whose crop is never empty), and put the
 * spec.out_h x spec.out_w RGB pixels where the CPU decoder would have written them: `out`, a
 * pointer into the slot's fill memory (tsock_slot_data), which the device decoder maps to the
 * slot's device memory. */
struct tsock__image_job {
    const uint8_t *data; /* the file's bytes: valid during decode only */
    size_t size;
    struct tsock__resize_spec spec;
    uint8_t *out;
    uint64_t sample; /* the sample id: for logs, and the simulator's injected failures */
};

struct tsock__device_decoder;

struct tsock__device_decoder_ops {
    /* 1 when the device decoder takes an image with this header, 0 when the CPU must. */
    int (*accepts)(const struct tsock__device_decoder *dd, const struct tsock__image_info *info);
    /* Decodes n images into the slot. status[i] is 0 when image i is (or will be, in stream
     * order, before the slot is published) in the slot, or a negative code when the caller must
     * decode it on the CPU. Returns 0, or a negative code when the device itself failed (then
     * the slot cannot be published). Called by the filling thread only. */
    int (*decode)(struct tsock__device_decoder *dd, const struct tsock__image_job *jobs, uint32_t n,
                  int *status);
    /* What the device decodes with, for logs: "nvJPEG hardware", "nvJPEG CUDA", "simulated". */
    const char *(*name)(const struct tsock__device_decoder *dd);
};

struct tsock__device_decoder {
    const struct tsock__device_decoder_ops *ops;
};

/* The device decoder of `slot`, which the caller is filling (engine/producer_api.c): NULL with
 * *err set when the slot's memory has none (host memory: TSOCK_E_STATE) or the device decoder
 * cannot start (logged: -ENOPKG without nvJPEG, a device error code otherwise). The decoder
 * belongs to the producer's ring and is valid until the slot is published. */
struct tsock__device_decoder *tsock__slot_device_decoder(tsock_slot *slot, int *err);

#endif
