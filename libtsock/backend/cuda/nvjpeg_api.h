/* The part of NVIDIA's nvJPEG API that tsock uses, declared here because nvJPEG is loaded at run
 * time (nvjpeg_load.c): a build needs neither its header nor its library, and a machine without
 * it runs everything but the GPU decoder. The values are nvjpeg.h's (CUDA 12 and 13), which
 * NVIDIA keeps stable across releases. Internal to backend/cuda. */
#ifndef TSOCK_CUDA_NVJPEG_API_H
#define TSOCK_CUDA_NVJPEG_API_H

#include <stddef.h>

#define TSOCK__NVJPEG_MAX_COMPONENT 4

enum {
    TSOCK__NVJPEG_SUCCESS = 0,
    TSOCK__NVJPEG_BAD_JPEG = 3,
    TSOCK__NVJPEG_NOT_SUPPORTED = 4,
    TSOCK__NVJPEG_ALLOCATOR_FAILURE = 5,
    TSOCK__NVJPEG_ARCH_MISMATCH = 7,
    TSOCK__NVJPEG_IMPLEMENTATION_NOT_SUPPORTED = 9,
    TSOCK__NVJPEG_INCOMPLETE_BITSTREAM = 10
};
enum { TSOCK__NVJPEG_OUTPUT_RGBI = 5 };
enum {
    TSOCK__NVJPEG_BACKEND_DEFAULT = 0,
    TSOCK__NVJPEG_BACKEND_HYBRID = 1,
    TSOCK__NVJPEG_BACKEND_GPU_HYBRID = 2,
    TSOCK__NVJPEG_BACKEND_HARDWARE = 3
};

typedef struct {
    unsigned char *channel[TSOCK__NVJPEG_MAX_COMPONENT];
    size_t pitch[TSOCK__NVJPEG_MAX_COMPONENT];
} tsock__nvjpeg_image;

typedef void *tsock__nvjpeg_handle;
typedef void *tsock__nvjpeg_state;
typedef void *tsock__nvjpeg_stream;
typedef void *tsock__nvjpeg_params;
typedef void *tsock__nvjpeg_decoder;
typedef void *tsock__nvjpeg_buffer;
typedef void *tsock__nvjpeg_cuda_stream; /* cudaStream_t */

/* The entry points, resolved by name from the library. Each returns an nvjpegStatus_t. */
struct tsock__nvjpeg {
    void *lib;
    int (*CreateEx)(int backend, void *dev_alloc, void *pinned_alloc, unsigned flags,
                    tsock__nvjpeg_handle *h);
    int (*Destroy)(tsock__nvjpeg_handle h);
    int (*JpegStateCreate)(tsock__nvjpeg_handle h, tsock__nvjpeg_state *s);
    int (*JpegStateDestroy)(tsock__nvjpeg_state s);
    int (*DecodeBatchedInitialize)(tsock__nvjpeg_handle h, tsock__nvjpeg_state s, int batch,
                                   int max_cpu_threads, int output_format);
    int (*DecodeBatchedEx)(tsock__nvjpeg_handle h, tsock__nvjpeg_state s,
                           const unsigned char *const *data, const size_t *lengths,
                           tsock__nvjpeg_image *dest, tsock__nvjpeg_params *params,
                           tsock__nvjpeg_cuda_stream stream);
    int (*DecodeBatchedSupportedEx)(tsock__nvjpeg_handle h, tsock__nvjpeg_stream js,
                                    tsock__nvjpeg_params p, int *is_supported);
    int (*JpegStreamCreate)(tsock__nvjpeg_handle h, tsock__nvjpeg_stream *js);
    int (*JpegStreamDestroy)(tsock__nvjpeg_stream js);
    int (*JpegStreamGetFrameDimensions)(tsock__nvjpeg_stream js, unsigned *w, unsigned *h);
    int (*JpegStreamParse)(tsock__nvjpeg_handle h, const unsigned char *data, size_t length,
                           int save_metadata, int save_stream, tsock__nvjpeg_stream js);
    int (*DecodeParamsCreate)(tsock__nvjpeg_handle h, tsock__nvjpeg_params *p);
    int (*DecodeParamsDestroy)(tsock__nvjpeg_params p);
    int (*DecodeParamsSetOutputFormat)(tsock__nvjpeg_params p, int format);
    int (*DecodeParamsSetROI)(tsock__nvjpeg_params p, int x, int y, int w, int h);
    int (*DecoderCreate)(tsock__nvjpeg_handle h, int backend, tsock__nvjpeg_decoder *d);
    int (*DecoderDestroy)(tsock__nvjpeg_decoder d);
    int (*DecoderStateCreate)(tsock__nvjpeg_handle h, tsock__nvjpeg_decoder d,
                              tsock__nvjpeg_state *s);
    int (*BufferPinnedCreate)(tsock__nvjpeg_handle h, void *alloc, tsock__nvjpeg_buffer *b);
    int (*BufferPinnedDestroy)(tsock__nvjpeg_buffer b);
    int (*BufferDeviceCreate)(tsock__nvjpeg_handle h, void *alloc, tsock__nvjpeg_buffer *b);
    int (*BufferDeviceDestroy)(tsock__nvjpeg_buffer b);
    int (*StateAttachPinnedBuffer)(tsock__nvjpeg_state s, tsock__nvjpeg_buffer b);
    int (*StateAttachDeviceBuffer)(tsock__nvjpeg_state s, tsock__nvjpeg_buffer b);
    int (*DecodeJpeg)(tsock__nvjpeg_handle h, tsock__nvjpeg_decoder d, tsock__nvjpeg_state s,
                      tsock__nvjpeg_stream js, tsock__nvjpeg_image *dest, tsock__nvjpeg_params p,
                      tsock__nvjpeg_cuda_stream stream);
};

/* Loads nvJPEG once per process: the file TSOCK_NVJPEG_LIBRARY names, else libnvjpeg.so.13 or
 * .so.12 on the loader's path, else the CUDA toolkit's (/usr/local/cuda/lib64). Returns the
 * entry points, or NULL with *why saying what was tried (static text). Any thread. */
const struct tsock__nvjpeg *tsock__nvjpeg_load(const char **why);

/* A status's name, for logs. */
const char *tsock__nvjpeg_status_text(int status);

#endif
