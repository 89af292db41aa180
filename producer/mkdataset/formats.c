/* File formats (see formats.h). */
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include "formats.h"

void
bytes_free(struct bytes *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

unsigned char *
read_whole_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat st;
    unsigned char *p = NULL;
    if (fstat(fileno(f), &st) == 0 && (p = malloc((size_t)st.st_size + 1)) &&
        fread(p, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        free(p);
        p = NULL;
    }
    if (p)
        *size = (size_t)st.st_size;
    fclose(f);
    return p;
}

int
bytes_append(struct bytes *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q)
            return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

/* libjpeg-turbo's rgb_to_cmyk (cmyk.h), so its cmyk_to_rgb inverts it. */
static void
rgb_to_cmyk(const uint8_t *rgb, uint8_t *cmyk)
{
    double c = 1.0 - rgb[0] / 255.0, m = 1.0 - rgb[1] / 255.0, y = 1.0 - rgb[2] / 255.0;
    double k = c < m ? (c < y ? c : y) : (m < y ? m : y);
    if (k == 1.0) {
        c = m = y = 0.0;
    } else {
        c = (c - k) / (1.0 - k);
        m = (m - k) / (1.0 - k);
        y = (y - k) / (1.0 - k);
    }
    cmyk[0] = (uint8_t)(255.0 - c * 255.0 + 0.5);
    cmyk[1] = (uint8_t)(255.0 - m * 255.0 + 0.5);
    cmyk[2] = (uint8_t)(255.0 - y * 255.0 + 0.5);
    cmyk[3] = (uint8_t)(255.0 - k * 255.0 + 0.5);
}

int
encode_jpeg(void *tj, const uint8_t *rgb, int width, int height, int quality, enum jpeg_kind kind,
            struct bytes *out, char *err, size_t err_size)
{
    unsigned char *jpeg = NULL;
    unsigned long size = 0;
    uint8_t *cmyk = NULL;
    const uint8_t *src = rgb;
    int pf = TJPF_RGB, subsamp = TJSAMP_420, flags = 0, r;

    if (kind == JPEG_PROGRESSIVE)
        flags |= TJFLAG_PROGRESSIVE;
    if (kind == JPEG_GRAY)
        subsamp = TJSAMP_GRAY;
    if (kind == JPEG_CMYK) {
        cmyk = malloc((size_t)width * height * 4);
        if (!cmyk) {
            snprintf(err, err_size, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < (size_t)width * height; i++)
            rgb_to_cmyk(rgb + 3 * i, cmyk + 4 * i);
        src = cmyk;
        pf = TJPF_CMYK;
    }
    /* A progressive encode gets a handle of its own: with libjpeg-turbo 2.1.5 (Debian 12), a
     * handle that has written a progressive JPEG writes corrupt data on its next baseline
     * encode (the progression script outlives the call). */
    tjhandle own = kind == JPEG_PROGRESSIVE ? tjInitCompress() : NULL;
    if (kind == JPEG_PROGRESSIVE && !own) {
        free(cmyk);
        snprintf(err, err_size, "cannot initialize TurboJPEG: %s", tjGetErrorStr2(NULL));
        return -1;
    }
    if (own)
        tj = own;
    r = tjCompress2(tj, src, width, 0, height, pf, &jpeg, &size, subsamp, quality, flags);
    free(cmyk);
    if (r != 0)
        snprintf(err, err_size, "JPEG encoding failed: %s", tjGetErrorStr2(tj));
    if (own)
        tjDestroy(own);
    if (r != 0) {
        tjFree(jpeg);
        return -1;
    }
    out->len = 0;
    r = bytes_append(out, jpeg, size);
    tjFree(jpeg);
    if (r != 0)
        snprintf(err, err_size, "out of memory");
    return r;
}

struct png_sink {
    struct bytes *out;
    int failed;
};

static void
png_write_cb(png_structp png, png_bytep data, png_size_t n)
{
    struct png_sink *s = png_get_io_ptr(png);
    if (bytes_append(s->out, data, n) != 0)
        s->failed = 1;
}

static void
png_flush_cb(png_structp png)
{
    (void)png;
}

int
encode_png(const uint8_t *rgb, int width, int height, struct bytes *out, char *err, size_t err_size)
{
    struct png_sink sink = {out, 0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    /* Rows are set up before setjmp, so nothing changes between setjmp and longjmp. */
    png_bytep *rows = malloc((size_t)height * sizeof *rows);

    if (!png || !info || !rows) {
        png_destroy_write_struct(&png, &info);
        free(rows);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    for (int y = 0; y < height; y++)
        rows[y] = (png_bytep)(rgb + (size_t)y * width * 3);
    out->len = 0;
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(rows);
        snprintf(err, err_size, "PNG encoding failed");
        return -1;
    }
    png_set_write_fn(png, &sink, png_write_cb, png_flush_cb);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    png_write_image(png, rows);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    free(rows);
    if (sink.failed) {
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    return 0;
}

size_t
jpeg_truncation_point(const uint8_t *jpeg, size_t len, double fraction)
{
    size_t cut = (size_t)((double)len * fraction), sos_end = 0;

    /* Walk the marker segments from SOI to the first SOS and its header. */
    for (size_t i = 2; i + 4 <= len;) {
        if (jpeg[i] != 0xFF) {
            break;
        }
        uint8_t marker = jpeg[i + 1];
        size_t seg = ((size_t)jpeg[i + 2] << 8) | jpeg[i + 3];
        if (marker == 0xDA) {
            sos_end = i + 2 + seg;
            break;
        }
        i += 2 + seg;
    }
    if (cut < sos_end + 16)
        cut = sos_end + 16;
    return cut < len ? cut : len;
}
