/* Header probing: what an image is, without decoding it. Runs on untrusted bytes (it is fuzzed),
 * so every read is checked against the size and nothing is allocated.
 *
 * The JPEG rules follow libjpeg's marker reader, since libjpeg is what will decode the file:
 * junk between segments is skipped as libjpeg skips it, the colour space is inferred from the
 * JFIF and Adobe markers and the component ids exactly as jdapimin.c infers it, and what libjpeg
 * would refuse at jpeg_read_header (unsupported SOF types, bad precision, bad sampling factors,
 * a scan before the frame) is refused here. The probe is in places stricter than libjpeg (a
 * segment length below 2, which libjpeg tolerates, is corrupt here); the decoder probes first,
 * so the two never disagree on an image the probe accepts being a candidate.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "image/image_int.h"

static unsigned
be16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static uint32_t
be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t
le32(const uint8_t *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* The data ended inside the header: `need` bytes would let the parse go on. */
static int
short_header(struct tsock__image_info *info, size_t need)
{
    info->need = need;
    return -EPROTO;
}

/* libjpeg's colour-space inference (jdapimin.c, default_decompress_parms). */
static int
jpeg_color(int components, int saw_jfif, int adobe_transform, const int ids[3])
{
    switch (components) {
    case 1: return TSOCK__COLOR_GRAY;
    case 3:
        if (saw_jfif)
            return TSOCK__COLOR_YCBCR;
        if (adobe_transform >= 0)
            return adobe_transform == 0 ? TSOCK__COLOR_RGB : TSOCK__COLOR_YCBCR;
        if (ids[0] == 82 && ids[1] == 71 && ids[2] == 66) /* 'R', 'G', 'B' */
            return TSOCK__COLOR_RGB;
        return TSOCK__COLOR_YCBCR;
    case 4:
        if (adobe_transform >= 0)
            return adobe_transform == 0 ? TSOCK__COLOR_CMYK : TSOCK__COLOR_YCCK;
        return TSOCK__COLOR_CMYK;
    default: return TSOCK__COLOR_UNKNOWN;
    }
}

static int
probe_jpeg(const uint8_t *p, size_t n, struct tsock__image_info *info)
{
    size_t pos = 2; /* after SOI */
    int saw_sof = 0, saw_jfif = 0, unsupported = 0;
    int ids[3] = {0, 0, 0};

    info->format = TSOCK__IMAGE_JPEG;
    info->bit_depth = 8;
    for (;;) {
        unsigned m, len;

        /* next_marker(): skip junk up to an FF, swallow fill FFs, and treat FF 00 as junk. */
        for (;;) {
            while (pos < n && p[pos] != 0xFF)
                pos++;
            while (pos < n && p[pos] == 0xFF)
                pos++;
            if (pos >= n)
                return short_header(info, n + 1);
            if (p[pos] != 0x00)
                break;
            pos++;
        }
        m = p[pos++];

        /* Markers without a length. */
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) /* TEM, RSTn: libjpeg ignores them here */
            continue;
        if (m == 0xD8) /* a second SOI */
            return -EPROTO;
        if (m == 0xD9) /* EOI before any scan: no image */
            return -EPROTO;

        if (pos + 2 > n)
            return short_header(info, pos + 2);
        len = be16(p + pos);
        if (len < 2)
            return -EPROTO;
        if (pos + len > n)
            return short_header(info, pos + len);

        const uint8_t *s = p + pos + 2; /* segment payload */
        size_t slen = len - 2;

        switch (m) {
        case 0xC0: /* baseline */
        case 0xC1: /* extended sequential, Huffman */
        case 0xC2: /* progressive, Huffman */
        case 0xC9: /* extended sequential, arithmetic */
        case 0xCA: /* progressive, arithmetic */
            if (saw_sof)
                return -EPROTO;
            saw_sof = 1;
            if (slen < 6)
                return -EPROTO;
            info->bit_depth = s[0];
            info->height = (int)be16(s + 1);
            info->width = (int)be16(s + 3);
            info->components = s[5];
            info->progressive = m == 0xC2 || m == 0xCA;
            info->sof_marker = (int)m;
            info->sof_payload = pos + 2;
            if (slen != 6 + 3 * (size_t)s[5] || s[5] == 0 || info->width == 0)
                return -EPROTO;
            for (int c = 0; c < s[5]; c++) {
                unsigned hv = s[6 + 3 * c + 1];
                /* libjpeg's MAX_SAMP_FACTOR is 4 */
                if ((hv >> 4) < 1 || (hv >> 4) > 4 || (hv & 15) < 1 || (hv & 15) > 4)
                    return -EPROTO;
                if ((int)(hv >> 4) > info->max_h_samp)
                    info->max_h_samp = (int)(hv >> 4);
                if ((int)(hv & 15) > info->max_v_samp)
                    info->max_v_samp = (int)(hv & 15);
                if (c < 3)
                    ids[c] = s[6 + 3 * c];
            }
            /* DNL-defined height, other than 8-bit samples, components libjpeg cannot turn
             * into RGB: valid JPEG, not decoded (libjpeg-turbo 2.1 refuses the first two). */
            if (info->height == 0 || info->bit_depth != 8 || (s[5] != 1 && s[5] != 3 && s[5] != 4))
                unsupported = 1;
            break;
        case 0xC3: /* lossless */
        case 0xC5: /* hierarchical */
        case 0xC6:
        case 0xC7:
        case 0xCB:
        case 0xCD:
        case 0xCE:
        case 0xCF:
            info->progressive = m == 0xC6 || m == 0xCE;
            if (slen >= 6) {
                info->bit_depth = s[0];
                info->height = (int)be16(s + 1);
                info->width = (int)be16(s + 3);
                info->components = s[5];
            }
            return -ENOTSUP;
        case 0xDA: /* SOS */
            if (!saw_sof)
                return -EPROTO;
            if (slen < 1 || s[0] < 1 || s[0] > 4 || slen != 4 + 2 * (size_t)s[0])
                return -EPROTO;
            info->scan_components = s[0];
            info->color = jpeg_color(info->components, saw_jfif, info->adobe_transform, ids);
            if (unsupported)
                return -ENOTSUP;
            info->header_size = pos + len;
            return 0;
        case 0xE0: /* APP0: JFIF as libjpeg recognises it (14 bytes read, "JFIF\0") */
            if (slen >= 14 && memcmp(s, "JFIF", 5) == 0)
                saw_jfif = 1;
            break;
        case 0xEE: /* APP14: Adobe, transform at byte 11 (the last one seen wins) */
            if (slen >= 12 && memcmp(s, "Adobe", 5) == 0)
                info->adobe_transform = s[11];
            break;
        case 0xDD: /* DRI: libjpeg refuses any other length */
            if (slen != 2)
                return -EPROTO;
            info->restart_interval = (int)be16(s);
            break;
        case 0xC4: /* DHT */
        case 0xCC: /* DAC */
        case 0xDB: /* DQT */
        case 0xDC: /* DNL */
        case 0xFE: /* COM */ break;
        default:
            if (m >= 0xE0 && m <= 0xEF) /* other APPn */
                break;
            return -EPROTO; /* libjpeg: "Unsupported marker type" */
        }
        pos += len;
    }
}

/* CRC-32 as PNG defines it (ISO 3309), bit by bit: it runs over 17 bytes per probe. */
static uint32_t
png_crc(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return c ^ 0xFFFFFFFFu;
}

static int
probe_png(const uint8_t *p, size_t n, struct tsock__image_info *info)
{
    uint32_t w, h;
    int depth, type;

    info->format = TSOCK__IMAGE_PNG;
    if (n < 33)
        return short_header(info, 33);
    if (be32(p + 8) != 13 || memcmp(p + 12, "IHDR", 4) != 0)
        return -EPROTO;
    if (png_crc(p + 12, 17) != be32(p + 29))
        return -EPROTO;
    w = be32(p + 16);
    h = be32(p + 20);
    depth = p[24];
    type = p[25];
    if (w == 0 || h == 0 || w > 0x7FFFFFFFu || h > 0x7FFFFFFFu)
        return -EPROTO;
    info->width = (int)w;
    info->height = (int)h;
    info->bit_depth = depth;
    info->progressive = p[28] == 1;
    switch (type) {
    case 0:
        info->color = TSOCK__COLOR_GRAY;
        info->components = 1;
        if (depth != 1 && depth != 2 && depth != 4 && depth != 8 && depth != 16)
            return -EPROTO;
        break;
    case 2:
        info->color = TSOCK__COLOR_RGB;
        info->components = 3;
        if (depth != 8 && depth != 16)
            return -EPROTO;
        break;
    case 3:
        info->color = TSOCK__COLOR_PALETTE;
        info->components = 1;
        if (depth != 1 && depth != 2 && depth != 4 && depth != 8)
            return -EPROTO;
        break;
    case 4:
        info->color = TSOCK__COLOR_GRAY_ALPHA;
        info->components = 2;
        if (depth != 8 && depth != 16)
            return -EPROTO;
        break;
    case 6:
        info->color = TSOCK__COLOR_RGBA;
        info->components = 4;
        if (depth != 8 && depth != 16)
            return -EPROTO;
        break;
    default: return -EPROTO;
    }
    if (p[26] != 0 || p[27] != 0 || p[28] > 1) /* compression, filter, interlace methods */
        return -EPROTO;
    info->header_size = 33;
    return 0;
}

static const uint8_t png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};

int
tsock__image_probe(const uint8_t *data, size_t size, struct tsock__image_info *info)
{
    memset(info, 0, sizeof *info);
    info->adobe_transform = -1;
    if (size == 0)
        return -ENODATA;
    if (size >= 2 && data[0] == 0xFF && data[1] == 0xD8)
        return probe_jpeg(data, size, info);
    if (size >= 8 && memcmp(data, png_signature, 8) == 0)
        return probe_png(data, size, info);
    /* A prefix of the PNG signature long enough to be one: a header cut short. */
    if (size >= 4 && size < 8 && memcmp(data, png_signature, size) == 0) {
        info->format = TSOCK__IMAGE_PNG;
        return short_header(info, 33);
    }
    if (size >= 6 && (memcmp(data, "GIF87a", 6) == 0 || memcmp(data, "GIF89a", 6) == 0)) {
        info->format = TSOCK__IMAGE_GIF;
        return -ENOTSUP;
    }
    if (size >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0) {
        info->format = TSOCK__IMAGE_WEBP;
        return -ENOTSUP;
    }
    if (size >= 4 && (memcmp(data, "II*\0", 4) == 0 || memcmp(data, "MM\0*", 4) == 0)) {
        info->format = TSOCK__IMAGE_TIFF;
        return -ENOTSUP;
    }
    /* "BM" alone is too common a pair of bytes; ask for a known DIB header size as well. */
    if (size >= 18 && data[0] == 'B' && data[1] == 'M') {
        uint32_t dib = le32(data + 14);
        if (dib == 12 || dib == 40 || dib == 52 || dib == 56 || dib == 64 || dib == 108 ||
            dib == 124) {
            info->format = TSOCK__IMAGE_BMP;
            return -ENOTSUP;
        }
    }
    return -EILSEQ;
}

int
tsock__jpeg_has_eoi(const uint8_t *data, size_t size, size_t header_size)
{
    /* Scans back from the end: a complete file finds its EOI in the last bytes, trailing junk
     * after it included; only a truncated one scans all the way back to the header. */
    size_t end = size;

    while (end > header_size + 1) {
        const uint8_t *q = memrchr(data + header_size + 1, 0xD9, end - (header_size + 1));
        if (!q)
            return 0;
        if (q[-1] == 0xFF)
            return 1;
        end = (size_t)(q - data);
    }
    return 0;
}
