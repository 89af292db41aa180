/* tsock-consume's checks of batches in GPU memory and of converted images (--output float16 or
 * float32, --layout nchw, --normalize on the producer): the bytes are copied back to the host
 * through the public API, and each element is compared with what the producer's documented
 * conversion makes of the synthetic dataset's byte (docs/gpu.md, "Output conversion"). */
#ifndef TSOCK_CONSUME_DEVICE_H
#define TSOCK_CONSUME_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "tsock/tsock.h"

/* A host copy of one tensor of a device batch, grown as needed. */
struct host_copy {
    void *bytes;
    size_t cap;
};

/* The tensor's bytes as the host can read them: the batch's own pointer for host memory; for
 * device memory, a copy in *hc (after waiting for the batch to be ready). Returns 0 with *out
 * set, or a negative tsock code. */
int consume_tensor_bytes(tsock_batch *b, int tensor, struct host_copy *hc, const void **out);

/* How the producer converted the image tensor. */
struct image_form {
    int dtype;             /* TSOCK_UINT8, TSOCK_FLOAT16, TSOCK_FLOAT32 */
    int nchw;              /* [3,H,W] per sample instead of [H,W,3] */
    int64_t height, width; /* of one image */
    float mean[3], std[3]; /* the normalisation (0 and 1: none, floats are x / 255) */
};

/* The number of elements of sample `id`'s converted image at `image` that differ from the
 * expected conversion of its synthetic bytes. */
size_t consume_verify_converted(uint64_t id, const void *image, const struct image_form *f);

#endif
