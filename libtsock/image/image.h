/* Image decoding and augmentation: probe, decode + crop + resize + flip, and the sampling rules
 * of the ImageNet presets. Internal to libtsock.
 *
 * Every function here is a pure function of its arguments: no global state, so any number of
 * threads may call them at once. Decoding needs a struct tsock__decoder, which holds the codec
 * handles and scratch buffers one thread reuses from image to image; give each worker thread
 * its own. After the first few images the decoder's own buffers have grown to their working
 * size and are only reused; libjpeg and libpng still allocate their small per-image state.
 *
 * Results are meant to match torchvision on PIL images (what a user would otherwise run):
 *  - decoding gives the pixels PIL gives after Image.open(f).convert("RGB"): libjpeg's default
 *    (ISLOW) IDCT and fancy upsampling; grayscale replicated; CMYK and YCCK JPEGs read with the
 *    Adobe (inverted) polarity PIL always assumes, and converted with PIL's CMYK-to-RGB formula;
 *    a PNG's alpha channel is dropped, not composited, as convert("RGB") drops it;
 *  - resizing is Pillow 13's Image.resize(..., BILINEAR) bit for bit on the same decoded
 *    pixels (triangle filter whose support widens with the reduction factor, taps per output
 *    pixel in 22-bit fixed point, two passes with an 8-bit intermediate, the vertical pass
 *    first when the height shrinks by more than twice as many pixels as the width; Pillow 12
 *    and earlier always ran the horizontal pass first, which differs by at most 1 level at
 *    some pixels in those cases);
 *  - crop boxes follow torchvision's RandomResizedCrop.get_params, Resize(int) and CenterCrop.
 * One speed-up changes pixels, within a bound the tests check: DCT-domain scaling (see
 * tsock__decode_resize). Partial decoding of a crop gives exactly the pixels of a full decode,
 * and the SIMD resampling passes exactly those of the plain C ones.
 *
 * Error codes (negative errno values, as everywhere in libtsock):
 *   -ENODATA   empty input
 *   -EILSEQ    not an image: neither JPEG nor PNG nor another recognised image format
 *   -ENOTSUP   an image tsock does not decode: GIF, BMP, WebP, TIFF; 12-bit, lossless,
 *              hierarchical or DNL-sized JPEG; JPEG with 2 or more than 4 components
 *   -EPROTO    corrupt: a header that ends early or breaks the format's rules, data libjpeg or
 *              libpng give up on, or a JPEG truncated beyond repair (see below)
 *   -EFBIG     over the decoder's limits (pixel count, progressive scan count): a guard against
 *              decompression bombs
 *   -EINVAL    bad arguments (a crop outside the image, a non-positive size)
 *   -ENOMEM    out of memory
 *
 * Truncated data. A JPEG whose data ends early is decoded as libjpeg decodes it (and as PIL does
 * with ImageFile.LOAD_TRUNCATED_IMAGES = True): the blocks with no data become mid-grey. It is
 * accepted when at least TSOCK__IMAGE_MIN_VALID of its rows (counted in 8- or 16-row MCU rows)
 * were decoded from real data, or when the data ends after the first scan of a progressive or
 * multi-scan JPEG (the whole picture is present, only coarser); otherwise it is truncated
 * beyond repair and the decode fails with -EPROTO. The verdict depends on the file only, never
 * on the crop: a JPEG without an EOI marker after its first scan header is decoded to its end
 * to measure how much of it is there, so a file gives the same verdict in every epoch. A
 * truncated PNG is always -EPROTO: libpng's simplified API cannot tell how much was read.
 * Other libjpeg warnings (corrupt Huffman data, extraneous bytes before a marker: common in
 * real datasets) are accepted as PIL accepts them.
 */
#ifndef TSOCK_IMAGE_H
#define TSOCK_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* The least fraction of MCU rows a truncated sequential JPEG must still hold to be decoded. */
#define TSOCK__IMAGE_MIN_VALID 0.5

/* Default decoder limits. The pixel limit is PIL's own decompression-bomb error threshold
 * (2 * Image.MAX_IMAGE_PIXELS), so tsock refuses nothing PIL would load; the scan limit is the
 * one TurboJPEG's TJFLAG_LIMITSCANS applies (real progressive JPEGs have about 10 scans; a
 * crafted one with thousands makes every scan a full pass over the coefficients). */
#define TSOCK__IMAGE_MAX_PIXELS 178956970u
#define TSOCK__IMAGE_MAX_SCANS 500

enum tsock__image_format {
    TSOCK__IMAGE_UNKNOWN = 0,
    TSOCK__IMAGE_JPEG = 1,
    TSOCK__IMAGE_PNG = 2,
    /* Recognised by their signature only, so that they can be reported as such (-ENOTSUP). */
    TSOCK__IMAGE_GIF = 3,
    TSOCK__IMAGE_BMP = 4,
    TSOCK__IMAGE_WEBP = 5,
    TSOCK__IMAGE_TIFF = 6
};

/* How the stored samples are to be read. JPEG colour spaces are named as libjpeg infers them
 * (JFIF and Adobe markers, component ids), which is what the decoder will do. */
enum tsock__image_color {
    TSOCK__COLOR_UNKNOWN = 0,
    TSOCK__COLOR_GRAY = 1,
    TSOCK__COLOR_RGB = 2,        /* JPEG without colour transform, or PNG truecolour */
    TSOCK__COLOR_YCBCR = 3,      /* the usual JPEG */
    TSOCK__COLOR_CMYK = 4,       /* 4-component JPEG without Adobe transform 2 */
    TSOCK__COLOR_YCCK = 5,       /* 4-component JPEG with Adobe transform 2 */
    TSOCK__COLOR_GRAY_ALPHA = 6, /* PNG */
    TSOCK__COLOR_RGBA = 7,       /* PNG */
    TSOCK__COLOR_PALETTE = 8     /* PNG */
};

struct tsock__image_info {
    int format; /* enum tsock__image_format */
    int width;  /* pixels; 0 when not known */
    int height;
    int components;      /* JPEG: components in the frame (1, 3, 4); PNG: channels (palette: 1) */
    int color;           /* enum tsock__image_color */
    int progressive;     /* JPEG: progressive (SOF2, SOF10); PNG: Adam7 interlaced */
    int bit_depth;       /* bits per sample: 8 for JPEG, 1..16 for PNG */
    int adobe_transform; /* JPEG: the Adobe APP14 transform (0, 1, 2), or -1 without APP14 */
    /* Bytes of header: JPEG up to the end of the first SOS segment, PNG up to the end of IHDR.
     * Set on success. */
    size_t header_size;
    /* JPEG, what the restart index needs (restart.c): the frame header's marker (0xC0 ..), the
     * offset of its payload (height at +1, width at +3), the largest sampling factors, the
     * restart interval in force at the first scan (MCUs; 0: none) and that scan's component
     * count. Set on success. */
    int sof_marker;
    size_t sof_payload;
    int max_h_samp, max_v_samp;
    int restart_interval;
    int scan_components;
    /* When the data ends inside the header (-EPROTO), the least total size that would let the
     * parse go on, so that an index reading file prefixes knows how much more to read; else 0.
     */
    size_t need;
};

/* Reads the header of an image in memory without decoding it. Safe on any bytes: reads only
 * data[0..size-1] and never allocates. JPEG is parsed up to its first SOS segment (tolerating,
 * as libjpeg does, junk bytes between segments), PNG up to IHDR (whose CRC is checked).
 * `info` is always written; on failure it holds what was learnt (format at least).
 * Returns 0, -ENODATA, -EILSEQ, -ENOTSUP or -EPROTO (see above). */
int tsock__image_probe(const uint8_t *data, size_t size, struct tsock__image_info *info);

/* A rectangle in pixels: x is the left column, y the top row (torchvision's j and i). */
struct tsock__box {
    int x, y, w, h;
};

/* ---- decoder ---- */

struct tsock__decoder;

/* Creates a decoder with the default limits. Returns 0 and sets *out, or -ENOMEM. */
int tsock__decoder_create(struct tsock__decoder **out);
/* Frees a decoder and its buffers; NULL does nothing. */
void tsock__decoder_destroy(struct tsock__decoder *d);

/* Images with more than max_pixels pixels, or progressive JPEGs with more than max_scans scans,
 * fail with -EFBIG (0 for either keeps the current value). */
void tsock__decoder_set_limits(struct tsock__decoder *d, uint64_t max_pixels, int max_scans);

/* Switches for tests and benchmarks; 0 (the default) enables every speed-up. */
#define TSOCK__DECODE_NO_DCT_SCALE 1    /* always decode at full size */
#define TSOCK__DECODE_NO_PARTIAL 2      /* decode every column and the rows from the top */
#define TSOCK__DECODE_NO_AVX2 4         /* resample with SSE2 / plain C even where AVX2 is there */
#define TSOCK__DECODE_NO_RESTARTS 8     /* never decode a JPEG from its restart intervals */
#define TSOCK__DECODE_NO_OWN_ENTROPY 16 /* leave a JPEG's Huffman data to libjpeg's decoder */
#define TSOCK__DECODE_NO_AVX512 32      /* resample with AVX2 even where AVX-512 is there */
#define TSOCK__DECODE_NO_SKIP_TABLE 64  /* drop MCUs symbol by symbol (entropy.h) */
#define TSOCK__DECODE_NO_GATHER 128     /* the eight-row AVX-512 pass, not resize_gather.c's */
void tsock__decoder_set_flags(struct tsock__decoder *d, int flags);

/* Entry points into one file's Huffman data (entropy.c), learnt while decoding it, so that a
 * later decode of the same file starts where the MCUs it needs begin.
 *
 * A sequential JPEG's Huffman data has no entry points of its own: a block's bits start where
 * the previous block's end, and its DC coefficient is a difference to the previous block's. So
 * jpeg_skip_scanlines still decodes every MCU above a crop, and a cropped decode every MCU
 * left and right of it. What a decoder needs to start at an MCU is only where it stood there:
 * the position of the next bit it decodes and each component's last DC value. A decode
 * given entry points records that state at every 8th MCU of each row (from the row's start),
 * as far as it goes, and where its crop began in each row; a later decode of the same file
 * (another epoch's crop) restores the state at the last point before each MCU it needs, and
 * decodes nothing that libjpeg does not use. Exact: the coefficients are those of a decode
 * from the start. The val preset's crop is the same every epoch, so it starts exactly there.
 *
 * 16 bytes a point and 2 a row: a 500 x 375 4:2:0 photograph (32 x 24 MCUs) has 96 grid
 * points and 24 crop starts, 2.0 KiB. A set is kept with the scan data's length, a sample of
 * its first and last bytes and the MCU grid; a file that differs in any is decoded from its
 * start and learnt anew, and so is one whose 8 bytes around a point (a 32-bit fold of them)
 * differ at its restore. Not noticed: a file rewritten in place with all of those unchanged
 * (the same length, the same bytes at both ends and around the points used): its crop is
 * decoded from the old file's states, as if the bytes before the point were the old ones. One
 * decode at a time may use a set. */
struct tsock__entry_points;

/* An empty set, which the first decode that uses it fills. NULL when out of memory. */
struct tsock__entry_points *tsock__entry_points_create(void);
void tsock__entry_points_destroy(struct tsock__entry_points *p);
/* The memory the set holds, in bytes. */
size_t tsock__entry_points_bytes(const struct tsock__entry_points *p);

/* The entry points of the file the next decodes read, or NULL (the default) for none. A JPEG
 * decoded with tsock's Huffman decoder uses them and adds to them. The set stays the
 * caller's; set NULL (or another file's set) before the decoder reads another file. */
void tsock__decoder_set_entry_points(struct tsock__decoder *d, struct tsock__entry_points *p);

/* The resampling filter of every resize: PIL's antialiased bilinear (the default) or, with
 * `bicubic` non-zero, PIL's bicubic (Image.resize(..., BICUBIC), torchvision's
 * InterpolationMode.BICUBIC on PIL images), bit for bit as the bilinear is. */
void tsock__decoder_set_filter(struct tsock__decoder *d, int bicubic);

/* What the last decode did; for tests, statistics and benchmarks. */
struct tsock__decode_report {
    int format;    /* enum tsock__image_format */
    int scale_num; /* DCT scaling used: scale_num/8 (8: none) */
    int decoded_w; /* columns and rows the codec produced (after scaling and cropping) */
    int decoded_h;
    int truncated; /* the data ended before the image did */
    double valid;  /* fraction of MCU rows decoded from real data (1 when complete) */
    int warnings;  /* libjpeg warnings (corrupt data that was decoded anyway); a decode that
                      stops after the window's last row does not see those below it */
    /* Scanlines (decoded image rows, after scaling) the codec went through, skipped ones
     * included: a JPEG decode stops after the last row the resampler reads, unless the file
     * may be truncated (then every row, for the verdict) or TSOCK__DECODE_NO_PARTIAL. */
    int rows_read;
    /* 1 when the JPEG was decoded from the restart intervals under the window only, which
     * leaves out the entropy decoding of what lies above and beside it (see Partial decoding
     * below); rows_read still counts from the image's top row. */
    int restart_window;
    /* 1 when tsock's own Huffman decoder (entropy.c) turned the JPEG's entropy-coded data into
     * coefficients, 0 when libjpeg's did. entropy_redone: tsock's decoder met data a valid
     * stream cannot hold, and the image was decoded again, all of it by libjpeg. */
    int own_entropy;
    int entropy_redone;
    /* 1 when tsock's decoder started at an entry point learnt by an earlier decode of the file
     * (tsock__decoder_set_entry_points), skipping MCUs it would otherwise have decoded. */
    int entry_jump;
    /* MCUs tsock's decoder decoded only to drop them (above and beside the crop) through its
     * skip tables, several symbols per lookup (entropy.h); not those it dropped without. */
    int skip_table_mcus;
    /* Monotonic time of this decode inside the codec (libjpeg: entropy decoding, IDCT,
     * upsampling, YCbCr-to-RGB; libpng) and inside tsock's own passes (CMYK conversion,
     * resampling, the window's rows), in ns. Only their ratio is meant to be used: the
     * pipeline splits a decode's thread CPU time in this proportion, because the two
     * interleave and the thread CPU clock is too dear to read at every switch. */
    uint64_t codec_ns;
    uint64_t resample_ns;
};
const struct tsock__decode_report *tsock__decoder_report(const struct tsock__decoder *d);

/* The general form of every decode: crop, resize, take a window of the result, flip.
 *
 * The `crop` rectangle of the source image (in source pixels; w == 0 means the whole image) is
 * resized to resize_w x resize_h exactly as PIL resizes an image that holds only the crop, so
 * the filter never reads pixels outside it. Of that resized image, the out_w x out_h window at
 * (win_x, win_y) is written to `out`: out_h rows of out_w pixels of 3 bytes (RGB, HWC, uint8,
 * no padding), mirrored left-right when `flip` is non-zero. Pixels outside the window are
 * never computed, so a centre crop costs less than the resize it is part of.
 *
 * DCT-domain scaling: when the crop is at least four times the resized size in both
 * dimensions, a JPEG is decoded at 1/2, 1/4 or 1/8 scale (the smallest that keeps the scaled
 * crop at least twice the resized size, so PIL's triangle filter still does most of the
 * reduction) and the resize works from the scaled pixels. This changes the result slightly
 * (the DCT scaling filters differently from PIL's triangle): the tests bound the mean absolute
 * difference (within 1 level of the full-size path, within 2 of torchvision on photographs). Only
 * the scales libjpeg-turbo has SIMD code for are used; the 3/8, 5/8, 6/8, 7/8 IDCTs are plain C and
 * slower than a full-size decode.
 *
 * Partial decoding: a JPEG is decoded only in the MCU columns and rows the filter reads, plus
 * a margin that keeps libjpeg's fancy upsampling at the cut identical to a full decode: rows
 * above are skipped (entropy decoding only), and the decode stops after the last row the
 * filter reads (nothing below is decoded at all), except for a file without an end-of-image
 * marker, decoded to its end so that its truncation verdict does not depend on the crop.
 * A JPEG with restart markers whose intervals tile its MCU grid (restart.c) is decoded from
 * the intervals under those rows and columns only: nothing above or beside them is entropy
 * decoded either. Both give exactly the pixels of a full decode.
 *
 * Returns 0 or a negative code (see above); `out` is unspecified after a failure. */
struct tsock__resize_spec {
    struct tsock__box crop;
    int resize_w, resize_h;
    int win_x, win_y, out_w, out_h;
    int flip;
};
int tsock__decode_resize(struct tsock__decoder *d, const uint8_t *data, size_t size,
                         const struct tsock__resize_spec *spec, uint8_t *out);

/* Decodes `crop` of the image (NULL: the whole image), resizes it to out_w x out_h and writes
 * it, mirrored when `flip`, to out (out_h * out_w * 3 bytes, RGB). torchvision's
 * F.resized_crop(img, crop.y, crop.x, crop.h, crop.w, (out_h, out_w)), then hflip.
 * Returns as tsock__decode_resize. */
int tsock__decode_crop_resize(struct tsock__decoder *d, const uint8_t *data, size_t size,
                              const struct tsock__box *crop, int out_w, int out_h, int flip,
                              uint8_t *out);

/* ---- seeded randomness ---- */

/* splitmix64: the state advances by a fixed odd constant and each output is tsock__mix64 of it.
 * A generator seeded with tsock__mix64 of (seed, epoch, sample id) gives every sample its own
 * stream, independent of the thread that uses it. */
struct tsock__rng {
    uint64_t state;
};
void tsock__rng_seed(struct tsock__rng *rng, uint64_t seed);
uint64_t tsock__rng_next(struct tsock__rng *rng);
/* Uniform in [0, 1), 53 random bits. */
double tsock__rng_double(struct tsock__rng *rng);
/* Uniform in [lo, hi). */
double tsock__rng_uniform(struct tsock__rng *rng, double lo, double hi);
/* Uniform integer in [0, n) without modulo bias; n >= 1 (n == 0 returns 0). */
uint64_t tsock__rng_below(struct tsock__rng *rng, uint64_t n);

/* ---- sampling rules of torchvision's transforms ---- */

/* RandomResizedCrop.get_params for a w x h image: up to 10 attempts of area = w*h*U(scale),
 * aspect = exp(U(log ratio_min, log ratio_max)), cw = round(sqrt(area*aspect)),
 * ch = round(sqrt(area/aspect)), accepted when 0 < cw <= w and 0 < ch <= h, placed at
 * y = randint(0, h-ch), x = randint(0, w-cw); after 10 failures, the central crop with the
 * image's aspect ratio clamped to [ratio_min, ratio_max]. Python's round (halves to even) is
 * reproduced. Returns 1 when a random attempt was accepted, 0 for the fallback, -EINVAL for
 * bad arguments (w or h < 1, scale_min > scale_max, scale_min < 0, ratio_min <= 0,
 * ratio_min > ratio_max). */
int tsock__rrc_box(struct tsock__rng *rng, int w, int h, double scale_min, double scale_max,
                   double ratio_min, double ratio_max, struct tsock__box *box);

/* Resize(short_side) of a w x h image: the short side becomes short_side and the long side
 * int(short_side * long / short), truncated as torchvision truncates. Returns 0 or -EINVAL. */
int tsock__val_resize_dims(int w, int h, int short_side, int *nw, int *nh);

/* CenterCrop's offset along one dimension: int(round((size - crop) / 2.0)) with Python's
 * round (halves to even), so 117 / 2 = 58.5 gives 58. Requires crop <= size. */
int tsock__center_offset(int size, int crop);

/* ---- presets ---- */

struct tsock__train_params {
    int size;                    /* output side: 224 */
    double scale_min, scale_max; /* 0.08, 1.0 */
    double ratio_min, ratio_max; /* 3/4, 4/3 */
    int flip;                    /* non-zero: horizontal flip with probability 0.5 */
};

/* The ImageNet training preset: RandomResizedCrop(size, scale, ratio) then
 * RandomHorizontalFlip(0.5), drawing from `rng` in torchvision's order (the crop's four
 * numbers per attempt, then one uniform for the flip, drawn even when flips are disabled so
 * that the crop stream does not depend on the option). Writes size*size*3 bytes to out.
 * `box` (may be NULL) receives the crop chosen and `flipped` (may be NULL) whether it was
 * mirrored. Returns as tsock__decode_resize. */
int tsock__preset_train(struct tsock__decoder *d, const uint8_t *data, size_t size,
                        struct tsock__rng *rng, const struct tsock__train_params *p, uint8_t *out,
                        struct tsock__box *box, int *flipped);

/* The ImageNet validation preset: Resize(resize) (shorter side to `resize`, antialiased) then
 * CenterCrop(crop), as torchvision computes both. Writes crop*crop*3 bytes to out. Returns as
 * tsock__decode_resize; -EINVAL when crop > resize. */
int tsock__preset_val(struct tsock__decoder *d, const uint8_t *data, size_t size, int resize,
                      int crop, uint8_t *out);

/* The presets' decisions without the decode, for a device decoder (device_decoder.h): the spec
 * that tsock__preset_train (drawing from rng in the same order) and tsock__preset_val would
 * decode a w x h image with. The val spec's crop is the whole image. Return 0 or -EINVAL. */
int tsock__preset_train_spec(struct tsock__rng *rng, const struct tsock__train_params *p, int w,
                             int h, struct tsock__resize_spec *s);
int tsock__preset_val_spec(int w, int h, int resize, int crop, struct tsock__resize_spec *s);

#endif
