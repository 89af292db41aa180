/* File formats tsock-mkdataset writes: baseline, progressive, grayscale and CMYK JPEG
 * (TurboJPEG), PNG (libpng), and the byte-level edge cases derived from them. All encoders
 * write into memory; the caller writes files, so a full disk is handled in one place. */
#ifndef TSOCK_MKDATASET_FORMATS_H
#define TSOCK_MKDATASET_FORMATS_H

#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer. */
struct bytes {
    uint8_t *p;
    size_t len, cap;
};

void bytes_free(struct bytes *b);

/* Appends n bytes (the buffer grows as needed). Returns 0, or -1 when out of memory. */
int bytes_append(struct bytes *b, const void *p, size_t n);

/* Reads the whole file at `path` into a malloc'ed buffer (the caller frees it; one spare byte
 * past *size, so an empty file is a valid buffer of size 0). NULL when it cannot be opened or
 * read (errno from the failing call). */
unsigned char *read_whole_file(const char *path, size_t *size);

enum jpeg_kind {
    JPEG_BASELINE = 0, /* YCbCr 4:2:0, as nearly all of ImageNet */
    JPEG_PROGRESSIVE,  /* YCbCr 4:2:0, progressive scans */
    JPEG_GRAY,         /* one component */
    JPEG_CMYK          /* Adobe YCCK, four components, as ImageNet's CMYK files */
};

/* Encodes a packed RGB image. For JPEG_CMYK the pixels are first converted to CMYK the way
 * libjpeg-turbo's own tools do (rgb_to_cmyk in its cmyk.h: inverted, Adobe style, so that
 * R = C * K / 255 decodes them back). `tj` is a TurboJPEG compressor handle owned by the
 * caller (one per thread). Returns 0 or -1 with a message in err. */
int encode_jpeg(void *tj, const uint8_t *rgb, int width, int height, int quality,
                enum jpeg_kind kind, struct bytes *out, char *err, size_t err_size);

/* Encodes a packed RGB image as an 8-bit RGB PNG. Returns 0 or -1 with a message. */
int encode_png(const uint8_t *rgb, int width, int height, struct bytes *out, char *err,
               size_t err_size);

/* Where to cut a JPEG so that its headers stay whole but the image data is cut short:
 * `fraction` of its length, but never before the end of the first start-of-scan header.
 * Returns the length to keep. */
size_t jpeg_truncation_point(const uint8_t *jpeg, size_t len, double fraction);

#endif
