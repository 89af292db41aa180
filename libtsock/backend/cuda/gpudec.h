/* The GPU decoder of a device ring (gpudec.c): created on the ring's first fill with
 * TSOCK_DECODER_GPU, bound to the staging buffer being filled, merged into the slot at publish.
 * Internal to backend/cuda; every function is called with the ring's device current, by the
 * ring's filling thread. */
#ifndef TSOCK_CUDA_GPUDEC_H
#define TSOCK_CUDA_GPUDEC_H

#include "backend/cuda/cuda_int.h"

struct tsock__cuda_gpudec;
struct tsock__device_decoder;

/* Starts the decoder for batches of up to `batch` images written into staging slots of
 * `stride` bytes (staging[0] and [1], the ring's), on the ring's `stream`. Returns 0, -ENOPKG
 * (no nvJPEG: logged with what to install), or a device error (logged). */
int tsock__cuda_gpudec_create(struct tsock__cuda_gpudec **out, int device,
                              tsock__dev_stream_t stream, uint8_t *const staging[2], size_t stride,
                              uint32_t batch);
/* The pipeline's interface, for filling staging buffer `current` (forgets what it held). */
struct tsock__device_decoder *tsock__cuda_gpudec_bind(struct tsock__cuda_gpudec *g, int current);
/* Queues on `stream` the copies of staging buffer `current`'s device-decoded images into
 * `target` (the device slot laid out as the staging slot). Returns a tsock__dev_err. */
int tsock__cuda_gpudec_merge(struct tsock__cuda_gpudec *g, int current, uint8_t *target,
                             tsock__dev_stream_t stream);
/* Frees it (its queued work waits in the device decoder's destroy). NULL does nothing. */
void tsock__cuda_gpudec_destroy(struct tsock__cuda_gpudec *g);

#endif
