/* Loading nvJPEG at run time (libtsock/backend/cuda/nvjpeg_load.c): a named file that is missing,
 * or that is not nvJPEG, is refused with a reason that names it, never papered over by another
 * copy; with TSOCK_TEST_NVJPEG naming a real libnvjpeg (the nvidia-nvjpeg wheel's, say) it loads
 * and resolves every entry point. The loader runs once per process, so each case runs in a child
 * of its own. No GPU needed: loading is not starting. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda/nvjpeg_api.h"
#include "check.h"

/* Runs the loader in a child with TSOCK_NVJPEG_LIBRARY=value; 0 when it loaded, 1 when it
 * refused with a reason containing `expect`, 2 otherwise. */
static int
load_in_child(const char *value, const char *expect)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("TSOCK_NVJPEG_LIBRARY", value, 1);
        const char *why = NULL;
        const struct tsock__nvjpeg *nv = tsock__nvjpeg_load(&why);
        if (nv)
            _exit(nv->CreateEx && nv->DecodeBatchedEx && nv->DecodeJpeg ? 0 : 2);
        printf("refused: %s\n", why);
        fflush(stdout);
        _exit(why && strstr(why, expect) ? 1 : 2);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

int
main(void)
{
    CHECK_EQ(load_in_child("/nonexistent/libnvjpeg.so.13", "TSOCK_NVJPEG_LIBRARY=/nonexistent"), 1);
    /* A real library that is not nvJPEG: libm, found where this process has it. */
    Dl_info info;
    CHECK(dladdr((void *)&cos, &info) != 0 && info.dli_fname);
    if (info.dli_fname && info.dli_fname[0] == '/')
        CHECK_EQ(load_in_child(info.dli_fname, "lacks nvjpegCreateEx"), 1);
    const char *real = getenv("TSOCK_TEST_NVJPEG");
    if (real && *real)
        CHECK_EQ(load_in_child(real, ""), 0);
    else
        printf("TSOCK_TEST_NVJPEG not set: the load of a real libnvjpeg is not tried\n");
    return CHECK_DONE();
}
