/* Restart markers added losslessly (see restarts.h). */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "restarts.h"

/* Larger images are refused before libjpeg allocates anything for them: their coefficients and
 * the two decodes that check the transcode take about 8 bytes a pixel, and a corrupt header can
 * declare 65535 x 65535 pixels in a few bytes. 64 megapixels is several times any photograph
 * of a training set. */
#define MAX_PIXELS (64ull << 20)

/* libjpeg reports errors by calling error_exit, which must not return: it jumps back here.
 * A warning (corrupt or truncated data, which libjpeg repairs by padding) is recorded: the
 * transcode of a damaged file is refused rather than written repaired. */
struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    int warned;
};

static void
on_error(j_common_ptr c)
{
    struct jerr *e = (struct jerr *)c->err;
    c->err->format_message(c, e->message);
    longjmp(e->jump, 1);
}

static void
on_message(j_common_ptr c, int level)
{
    struct jerr *e = (struct jerr *)c->err;
    if (level < 0 && !e->warned) { /* < 0: a warning; >= 0: trace messages */
        c->err->format_message(c, e->message);
        e->warned = 1;
    }
}

static struct jpeg_error_mgr *
init_errors(struct jerr *e)
{
    memset(e, 0, sizeof *e);
    jpeg_std_error(&e->pub);
    e->pub.error_exit = on_error;
    e->pub.emit_message = on_message;
    return &e->pub;
}

static int
too_big(j_decompress_ptr d, char *err, size_t err_size)
{
    if ((unsigned long long)d->image_width * d->image_height <= MAX_PIXELS)
        return 0;
    snprintf(err, err_size, "%u x %u pixels: over the limit of %llu megapixels", d->image_width,
             d->image_height, MAX_PIXELS >> 20);
    return 1;
}

/* Decodes a whole JPEG with libjpeg's defaults (its default output colour space, fancy
 * upsampling, the ISLOW IDCT) into a malloc'ed buffer. Returns 0, or -1 with a message. */
static int
decode_pixels(const uint8_t *jpeg, size_t len, uint8_t **pixels, size_t *size, char *err,
              size_t err_size)
{
    struct jpeg_decompress_struct d;
    struct jerr e;
    uint8_t *volatile buf = NULL;

    d.err = init_errors(&e);
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&d);
        free(buf);
        snprintf(err, err_size, "%s", e.message);
        return -1;
    }
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, jpeg, (unsigned long)len);
    jpeg_read_header(&d, TRUE);
    if (too_big(&d, err, err_size)) {
        jpeg_destroy_decompress(&d);
        return -1;
    }
    jpeg_start_decompress(&d);
    size_t row = (size_t)d.output_width * (size_t)d.output_components;
    buf = malloc(row * d.output_height + 1);
    if (!buf) {
        jpeg_destroy_decompress(&d);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    while (d.output_scanline < d.output_height) {
        JSAMPROW r = buf + row * d.output_scanline;
        jpeg_read_scanlines(&d, &r, 1);
    }
    size_t total = row * d.output_height;
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    if (e.warned) {
        free(buf);
        snprintf(err, err_size, "%s", e.message);
        return -1;
    }
    *pixels = buf;
    *size = total;
    return 0;
}

/* The source's APPn and COM markers, all of them, verbatim and in their order (jpegtran -copy
 * all). The encoder writes no JFIF APP0 or Adobe APP14 of its own (see transcode), so the
 * source's own ones, which decide how a decoder infers the colour space (and hold the density
 * and a JFIF thumbnail), are the only ones and are kept as they were. */
static void
copy_markers(j_decompress_ptr src, j_compress_ptr dst)
{
    for (jpeg_saved_marker_ptr m = src->marker_list; m; m = m->next)
        jpeg_write_marker(dst, m->marker, m->data, m->data_length);
}

/* The coefficient-level transcode; *outbuf (malloc'ed by libjpeg's memory destination, freed
 * by the caller, also on failure) receives the output. */
static int
transcode(const uint8_t *in, size_t len, unsigned interval, unsigned char **outbuf,
          unsigned long *outsize, char *err, size_t err_size)
{
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    struct jerr e;
    volatile int have_dst = 0;

    src.err = init_errors(&e);
    dst.err = &e.pub;
    if (setjmp(e.jump)) {
        if (have_dst)
            jpeg_destroy_compress(&dst);
        jpeg_destroy_decompress(&src);
        snprintf(err, err_size, "%s", e.message);
        return -1;
    }
    jpeg_create_decompress(&src);
    jpeg_create_compress(&dst);
    have_dst = 1;
    jpeg_mem_src(&src, in, (unsigned long)len);
    jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
    for (int m = 0; m < 16; m++)
        jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
    jpeg_read_header(&src, TRUE);
    if (too_big(&src, err, err_size)) {
        jpeg_destroy_compress(&dst);
        jpeg_destroy_decompress(&src);
        return -1;
    }
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(&src);
    if (e.warned) {
        jpeg_destroy_compress(&dst);
        jpeg_destroy_decompress(&src);
        snprintf(err, err_size, "%s", e.message);
        return -1;
    }
    jpeg_copy_critical_parameters(&src, &dst);
    /* jpeg_copy_critical_parameters has set the JFIF or Adobe marker the colour space calls
     * for; the source's own (or their absence) are kept instead, by copy_markers. The
     * coefficients and component ids are the source's, so its markers still tell the truth. */
    dst.write_JFIF_header = FALSE;
    dst.write_Adobe_marker = FALSE;
    dst.restart_interval = interval;
    dst.restart_in_rows = 0;
    jpeg_mem_dest(&dst, outbuf, outsize);
    jpeg_write_coefficients(&dst, coefs);
    copy_markers(&src, &dst);
    jpeg_finish_compress(&dst);
    jpeg_finish_decompress(&src);
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    return 0;
}

int
jpeg_add_restarts(const uint8_t *in, size_t len, unsigned interval, struct bytes *out, char *err,
                  size_t err_size)
{
    unsigned char *buf = NULL;
    unsigned long size = 0;
    uint8_t *want = NULL, *got = NULL;
    size_t want_size = 0, got_size = 0;
    char why[JMSG_LENGTH_MAX + 64];
    int r = -1;

    if (interval < 1 || interval > RESTART_INTERVAL_MAX) {
        snprintf(err, err_size, "restart interval %u out of range 1..%u", interval,
                 RESTART_INTERVAL_MAX);
        return -1;
    }
    if (len == 0) {
        snprintf(err, err_size, "empty file");
        return -1;
    }
    if (len < 2 || in[0] != 0xFF || in[1] != 0xD8) {
        snprintf(err, err_size, "not a JPEG (it does not start with a JPEG start-of-image marker)");
        return -1;
    }
    if (transcode(in, len, interval, &buf, &size, why, sizeof why) != 0)
        snprintf(err, err_size, "cannot transcode: %s", why);
    else if (decode_pixels(in, len, &want, &want_size, why, sizeof why) != 0)
        snprintf(err, err_size, "cannot decode the source: %s", why);
    else if (decode_pixels(buf, size, &got, &got_size, why, sizeof why) != 0)
        snprintf(err, err_size, "cannot decode the transcoded file: %s", why);
    else if (want_size != got_size || memcmp(want, got, want_size) != 0)
        snprintf(err, err_size, "the transcoded file decodes to other pixels");
    else {
        out->len = 0;
        r = bytes_append(out, buf, size);
        if (r != 0)
            snprintf(err, err_size, "out of memory");
    }
    free(buf);
    free(want);
    free(got);
    return r;
}
