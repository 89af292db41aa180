/* The simulated device's controls for tests (devapi_sim.c describes the simulator). */
#ifndef TSOCK_CUDA_DEVAPI_SIM_H
#define TSOCK_CUDA_DEVAPI_SIM_H

#include "backend/cuda/devapi.h"

/* 1: queries and synchronisation from threads that did not relax their capture mode fail, as
 * while another thread captures a CUDA graph in global mode. */
void tsock__dev_sim_set_global_capture(int on);
/* Leaves a stale launch error behind, as another user of the shared runtime can. */
void tsock__dev_sim_set_stale_error(void);
/* Event waits that found work pending on an event without BlockingSync (a real one spins). */
long tsock__dev_sim_spin_waits(void);
/* Bit d set: this process made a context on simulated device d. */
unsigned tsock__dev_sim_contexts(void);

#endif
