/* The simulated device's JPEG decoder (devapi_sim_decode.c): the device API's jpeg_* entries. */
#ifndef TSOCK_CUDA_DEVAPI_SIM_DECODE_H
#define TSOCK_CUDA_DEVAPI_SIM_DECODE_H

#include "backend/cuda/devapi.h"

int tsock__sim_jpeg_create(struct tsock__dev_jpeg **out, uint32_t max_batch, int *hardware,
                           const char **name, const char **why);
int tsock__sim_jpeg_decode(struct tsock__dev_jpeg *j, const struct tsock__dev_jpeg_job *jobs,
                           uint32_t n, int *status, tsock__dev_stream_t s);
void tsock__sim_jpeg_destroy(struct tsock__dev_jpeg *j);

#endif
