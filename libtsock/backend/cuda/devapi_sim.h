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
/* Starts (on 1) or ends a graph capture on stream s, in global mode: records on s become graph
 * nodes (the event records nothing), copies on s are captured and never run, a sync of s fails,
 * and queries and syncs of threads that did not relax their capture mode fail. */
void tsock__dev_sim_capture_stream(tsock__dev_stream_t s, int on);
/* Removes the objects of exited processes on this simulated device that nobody maps (the
 * driver frees a dead process's memory); returns the bytes of device memory left. */
size_t tsock__dev_sim_sweep(void);
/* 1: stream s runs none of its queued work until called again with 0 (a gate, so that tests
 * order work across streams without timing). */
void tsock__dev_sim_hold_stream(tsock__dev_stream_t s, int on);
/* The same for every stream of this process (those made later too). */
void tsock__dev_sim_hold_all(int on);

#endif
