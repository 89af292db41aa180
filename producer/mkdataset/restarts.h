/* Restart markers added to a JPEG losslessly, for tsock-mkdataset --restart-interval.
 *
 * A baseline JPEG's entropy-coded data has no entry points: to decode a crop, a decoder must
 * decode every MCU before it. A DRI segment and RSTn markers every N MCUs give it entry points
 * (tsock's decoder then decodes only the restart intervals under a crop). Adding them is a
 * transcode at the DCT-coefficient level, as `jpegtran -restart NB -copy all` does: the
 * coefficients, quantization tables, sampling factors and colour space are kept, and so is
 * every APPn and COM marker of the source (EXIF, ICC profiles, JFIF, Adobe), so the decoded
 * pixels are the same. The Huffman tables are the standard ones (as jpegtran's without
 * -optimize); a progressive or arithmetic-coded source becomes a sequential Huffman-coded
 * JPEG (same coefficients, same pixels), since only a sequential scan gives a decoder entry
 * points it can use.
 *
 * Every transcode is checked: the source and the output are both decoded (libjpeg, their
 * default output colour space) and must give the same pixels, byte for byte; otherwise it is
 * refused. */
#ifndef TSOCK_MKDATASET_RESTARTS_H
#define TSOCK_MKDATASET_RESTARTS_H

#include <stddef.h>
#include <stdint.h>

#include "formats.h"

/* The largest interval a DRI segment can hold (16 bits). */
#define RESTART_INTERVAL_MAX 65535u

/* Writes into `out` (its earlier contents replaced) the JPEG `in` with a restart marker every
 * `interval` MCUs (1..RESTART_INTERVAL_MAX). Returns 0, or -1 with the reason in err when `in`
 * is not a JPEG libjpeg reads without a warning (not a JPEG, corrupt, truncated, 12-bit, over
 * 64 megapixels, ...) or when the output does not decode to the same pixels; `out` is then
 * unspecified. Thread-safe (no shared state). */
int jpeg_add_restarts(const uint8_t *in, size_t len, unsigned interval, struct bytes *out,
                      char *err, size_t err_size);

#endif
