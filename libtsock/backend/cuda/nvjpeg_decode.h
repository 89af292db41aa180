/* The real device's JPEG decoder (nvjpeg_decode.c): the device API's jpeg_* entries on nvJPEG. */
#ifndef TSOCK_CUDA_NVJPEG_DECODE_H
#define TSOCK_CUDA_NVJPEG_DECODE_H

#include "backend/cuda/devapi.h"

int tsock__nvjpeg_create(struct tsock__dev_jpeg **out, uint32_t max_batch, int *hardware,
                         const char **name, const char **why);
int tsock__nvjpeg_decode(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *jobs,
                         uint32_t n, int *status, tsock__dev_stream_t s);
void tsock__nvjpeg_destroy(struct tsock__dev_jpeg *j);

#endif
