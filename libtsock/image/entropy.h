/* tsock's own Huffman decoder for sequential JPEG scans, in libjpeg-turbo's place (entropy.c).
 *
 * libjpeg-turbo decodes every MCU through one method, cinfo->entropy->decode_mcu (declared in
 * its internal jpegint.h; entropy.c repeats the three-member struct): the coefficient
 * controller calls it for each MCU it decodes, and jpeg_skip_scanlines for each MCU it skips.
 * Replacing that method after jpeg_start_decompress leaves everything else as it was (IDCT,
 * upsampling, colour, cropping, skipping) and changes only how the Huffman data becomes
 * coefficients. Two reasons to:
 *  - libjpeg-turbo's fast Huffman path is off for any file with restart markers (jdhuff.c
 *    turns it off whenever there is a restart interval), so a decode from restart intervals
 *    (restart.c) runs its general bit-at-a-time path for every symbol;
 *  - its fast path looks up 8 bits at a time and reads a coefficient's extra bits separately,
 *    where one lookup of 10 bits here gives run, length and value together for most of them,
 *    and the register is refilled once for two such symbols.
 *
 * Valid data decodes to libjpeg's coefficients exactly (the Huffman code is a bijection); the
 * rest of the decode is libjpeg's, so the pixels are libjpeg's. Corrupt data is not decoded
 * here at all: at the first thing a valid stream cannot contain (a code no table holds, a
 * run past the block's end, a restart marker out of place, data that ends or reaches a marker
 * early) the decoder calls `fail`, which must not return; the caller then decodes the image
 * again with libjpeg's own decoder, so every warning and every recovery is libjpeg's. */
#ifndef TSOCK_IMAGE_ENTROPY_H
#define TSOCK_IMAGE_ENTROPY_H

#include <stdio.h> /* jpeglib.h needs FILE and size_t */

#include <jpeglib.h>

struct tsock__entropy;

/* The decoder's tables and state, kept across images so that the tables of the last image
 * are rebuilt only when a file's differ. NULL on failure to allocate. */
struct tsock__entropy *tsock__entropy_create(void);
void tsock__entropy_destroy(struct tsock__entropy *e);

/* Entry points (struct tsock__entry_points, declared in image.h) are defined here: where the
 * decoder stood at every ENTRY_STRIDE-th MCU of each row, and where the last crop began in it. */
struct tsock__entry_points;
/* Takes over decode_mcu of `cinfo`, which jpeg_start_decompress has set up and which has not
 * decoded any MCU yet, when its scan is one this decoder reads: sequential Huffman coding of
 * 8-bit samples in a single scan of every component. Reads the data from cinfo->src, which
 * must hold all of it. `fail` is called, with cinfo, on data that is not valid. `points` (may
 * be NULL) are the file's entry points, used and extended by this decode; a scan with restart
 * markers does not use them (restart.c gives it better ones). `skip_table`: MCUs decoded and
 * dropped (jpeg_skip_scanlines, entry points' catch-up) go through the skip table of each AC
 * table that has one (made once a second image uses the table); 0 decodes them
 * symbol by symbol, as the MCUs kept are (for tests and benchmarks: the same bits either way).
 * Call after jpeg_crop_scanline. Returns 1 when attached, 0 when the scan is left to libjpeg. */
int tsock__entropy_attach(struct tsock__entropy *e, j_decompress_ptr cinfo,
                          void (*fail)(j_decompress_ptr cinfo), struct tsock__entry_points *points,
                          int skip_table);

/* Whether the decode since the last attach started at a learnt entry point. */
int tsock__entropy_jumped(const struct tsock__entropy *e);

/* MCUs the decode since the last attach decoded and dropped through skip tables. */
unsigned tsock__entropy_skipped(const struct tsock__entropy *e);

#endif
