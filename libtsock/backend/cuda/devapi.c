/* Which device API this process uses: the real runtime, or the simulated device when
 * TSOCK_CUDA_SIM is exactly "1". Chosen once; a run on the simulator says so at WARN, so it is
 * never mistaken for a run on a GPU. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/devapi.h"
#include "core/core.h"

static const struct tsock__devapi *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void
choose(void)
{
    const char *v = getenv("TSOCK_CUDA_SIM");
    if (v && strcmp(v, "1") == 0) {
        chosen = &tsock__devapi_sim;
        tsock__log(TSOCK_LOG_WARN, "TSOCK_CUDA_SIM=1: CUDA calls go to the SIMULATED device "
                                   "(shared memory and threads), not to a GPU");
        return;
    }
    if (v && *v && strcmp(v, "0") != 0)
        tsock__log(TSOCK_LOG_WARN,
                   "TSOCK_CUDA_SIM=%s ignored: only \"1\" selects the simulated "
                   "device; using the real CUDA runtime",
                   v);
    chosen = &tsock__devapi_real;
}

const struct tsock__devapi *
tsock__dev(void)
{
    pthread_once(&once, choose);
    return chosen;
}

int
tsock__dev_simulated(void)
{
    return tsock__dev() == &tsock__devapi_sim;
}
