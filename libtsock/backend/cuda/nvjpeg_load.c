/* Loading nvJPEG at run time (issue 20). NVIDIA's library is proprietary and large: tsock never
 * ships or links it; it takes the one the machine has (the CUDA toolkit's, or the nvidia-nvjpeg
 * wheel's, which bundles its own CUDA runtime and needs nothing else). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/nvjpeg_api.h"
#include "core/core.h"

static struct tsock__nvjpeg api;
static const struct tsock__nvjpeg *loaded;
static char why_text[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Resolves every entry point; 0 when one is missing (an nvJPEG too old: CUDA 11). */
static int
resolve(void *lib)
{
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)&api.field = dlsym(lib, name);                                                   \
        if (!api.field) {                                                                          \
            snprintf(why_text, sizeof why_text, "its library lacks %s: too old", name);            \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)
    SYM(CreateEx, "nvjpegCreateEx");
    SYM(Destroy, "nvjpegDestroy");
    SYM(JpegStateCreate, "nvjpegJpegStateCreate");
    SYM(JpegStateDestroy, "nvjpegJpegStateDestroy");
    SYM(DecodeBatchedInitialize, "nvjpegDecodeBatchedInitialize");
    SYM(DecodeBatchedEx, "nvjpegDecodeBatchedEx");
    SYM(DecodeBatchedSupportedEx, "nvjpegDecodeBatchedSupportedEx");
    SYM(JpegStreamCreate, "nvjpegJpegStreamCreate");
    SYM(JpegStreamDestroy, "nvjpegJpegStreamDestroy");
    SYM(JpegStreamParse, "nvjpegJpegStreamParse");
    SYM(JpegStreamGetFrameDimensions, "nvjpegJpegStreamGetFrameDimensions");
    SYM(DecodeParamsCreate, "nvjpegDecodeParamsCreate");
    SYM(DecodeParamsDestroy, "nvjpegDecodeParamsDestroy");
    SYM(DecodeParamsSetOutputFormat, "nvjpegDecodeParamsSetOutputFormat");
    SYM(DecodeParamsSetROI, "nvjpegDecodeParamsSetROI");
    SYM(DecoderCreate, "nvjpegDecoderCreate");
    SYM(DecoderDestroy, "nvjpegDecoderDestroy");
    SYM(DecoderStateCreate, "nvjpegDecoderStateCreate");
    SYM(BufferPinnedCreate, "nvjpegBufferPinnedCreate");
    SYM(BufferPinnedDestroy, "nvjpegBufferPinnedDestroy");
    SYM(BufferDeviceCreate, "nvjpegBufferDeviceCreate");
    SYM(BufferDeviceDestroy, "nvjpegBufferDeviceDestroy");
    SYM(StateAttachPinnedBuffer, "nvjpegStateAttachPinnedBuffer");
    SYM(StateAttachDeviceBuffer, "nvjpegStateAttachDeviceBuffer");
    SYM(DecodeJpeg, "nvjpegDecodeJpeg");
#undef SYM
    return 1;
}

static void
load(void)
{
    const char *env = getenv("TSOCK_NVJPEG_LIBRARY");
    const char *names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12",
                           "/usr/local/cuda/lib64/libnvjpeg.so.13",
                           "/usr/local/cuda/lib64/libnvjpeg.so.12"};
    void *lib = NULL;
    if (env && *env) {
        /* Named explicitly: that file or nothing, so a wrong path is never papered over. */
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            snprintf(why_text, sizeof why_text, "TSOCK_NVJPEG_LIBRARY=%s: %s", env, dlerror());
    } else {
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            snprintf(why_text, sizeof why_text,
                     "no libnvjpeg.so.13 or .12 on the loader's path or in /usr/local/cuda/lib64, "
                     "and TSOCK_NVJPEG_LIBRARY is not set");
    }
    if (!lib)
        return;
    if (!resolve(lib)) {
        dlclose(lib);
        return;
    }
    api.lib = lib;
    loaded = &api;
}

const struct tsock__nvjpeg *
tsock__nvjpeg_load(const char **why)
{
    pthread_once(&once, load);
    *why = loaded ? NULL : why_text;
    return loaded;
}

const char *
tsock__nvjpeg_status_text(int status)
{
    switch (status) {
    case 0: return "success";
    case 1: return "NVJPEG_STATUS_NOT_INITIALIZED";
    case 2: return "NVJPEG_STATUS_INVALID_PARAMETER";
    case 3: return "NVJPEG_STATUS_BAD_JPEG";
    case 4: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case 5: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case 6: return "NVJPEG_STATUS_EXECUTION_FAILED";
    case 7: return "NVJPEG_STATUS_ARCH_MISMATCH";
    case 8: return "NVJPEG_STATUS_INTERNAL_ERROR";
    case 9: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case 10: return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
    default: return "an unknown nvJPEG status";
    }
}
