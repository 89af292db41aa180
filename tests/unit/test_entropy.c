/* tsock's own Huffman decoder (libtsock/image/entropy.c) against libjpeg's: every decode is
 * run twice, by default (tsock's decoder where it applies) and with
 * TSOCK__DECODE_NO_OWN_ENTROPY (libjpeg's alone), and the two must give the same return code
 * and the same bytes.
 *
 * Covered: every chroma layout; no restart markers, a marker after every MCU, every 2 MCUs,
 * every 3 (no restart window), every MCU row, on pictures of an even and an odd number of
 * MCUs; standard and optimized Huffman tables
 * (codes longer than the decoder's lookup); crops that skip rows (jpeg_skip_scanlines hands
 * tsock's decoder MCUs to drop) and columns, DCT scaling; a decoder reused across files with
 * different tables; MCUs dropped through the skip tables (several symbols per lookup), on
 * blocks that end at their 64th coefficient, at an EOB, and after ZRLs, with standard and
 * optimized tables, against dropping them symbol by symbol. Damage: bits flipped all over the
 * entropy-coded data, markers out of
 * sequence, a byte too many before a marker, fill bytes before markers (legal: tsock's
 * decoder keeps them), and truncation.
 * Wherever tsock's decoder gives the data back, the image is decoded again by libjpeg alone
 * (report.entropy_redone), so the bytes are libjpeg's. Photographs: the train and val presets. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "check.h"
#include "core/core.h"
#include "image/image.h"
#include "image/image_int.h"
#include "photos.h"
#include "test_jpeg.h"

/* What the decodes of one test saw. */
struct tally {
    int decodes, own, redone, differ, eighth; /* eighth: decoded at 1/8 scale (DC only) */
    int jumps;   /* started at a learnt entry point (report.entry_jump) */
    int skipped; /* MCUs dropped through skip tables (report.skip_table_mcus) */
};

/* Decodes box -> ow x oh with tsock's decoder and with libjpeg's; both must agree. */
static void
both_ways(struct tsock__decoder *d, const uint8_t *jpeg, size_t n, const struct tsock__box *box,
          int ow, int oh, int flags, struct tally *t)
{
    size_t len = (size_t)ow * oh * 3;
    uint8_t *a = malloc(len), *b = malloc(len);

    tsock__decoder_set_flags(d, flags);
    int ra = tsock__decode_crop_resize(d, jpeg, n, box, ow, oh, 0, a);
    const struct tsock__decode_report *rep = tsock__decoder_report(d);
    t->decodes++;
    t->own += rep->own_entropy;
    t->redone += rep->entropy_redone;
    t->eighth += rep->scale_num == 1;
    t->jumps += rep->entry_jump;
    t->skipped += rep->skip_table_mcus;
    CHECK(!(rep->own_entropy && rep->entropy_redone));
    if (flags & TSOCK__DECODE_NO_SKIP_TABLE)
        CHECK_EQ(rep->skip_table_mcus, 0);
    tsock__decoder_set_flags(d, flags | TSOCK__DECODE_NO_OWN_ENTROPY);
    int rb = tsock__decode_crop_resize(d, jpeg, n, box, ow, oh, 0, b);
    CHECK_EQ(tsock__decoder_report(d)->own_entropy, 0);
    CHECK_EQ(ra, rb);
    if (ra == 0 && rb == 0 && memcmp(a, b, len) != 0) {
        t->differ++;
        fprintf(stderr, "box %d,%d %dx%d -> %dx%d flags %d: tsock's Huffman decoder differs\n",
                box ? box->x : 0, box ? box->y : 0, box ? box->w : 0, box ? box->h : 0, ow, oh,
                flags);
    }
    tsock__decoder_set_flags(d, 0);
    free(a);
    free(b);
}

/* Every layout and marker spacing, standard and optimized tables, on pictures of an even and
 * an odd number of MCUs, with crops that skip rows and columns, scale, or take everything. */
static void
test_layouts(struct tsock__decoder *d)
{
    static const struct {
        int interval, rows;
    } spacing[] = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {0, 1}};
    static const int dims[2][2] = {{411, 333}, {256, 128}};
    static const int flags[3] = {0, TSOCK__DECODE_NO_PARTIAL, TSOCK__DECODE_NO_RESTARTS};
    struct tally t = {0};
    int skipped_opt = 0;

    for (int l = 0; l < L_COUNT; l++)
        for (size_t s = 0; s < sizeof spacing / sizeof *spacing; s++)
            for (int opt = 0; opt < 2; opt++)
                for (int z = 0; z < 2; z++) {
                    int w = dims[z][0], h = dims[z][1];
                    int comps = l == L_GRAY ? 1 : l == L_CMYK ? 4 : 3;
                    uint8_t *pix = picture(w, h, comps, (uint32_t)(l * 31 + (int)s * 7 + z));
                    size_t n;
                    uint8_t *jpeg = encode(pix, w, h, (enum layout)l, spacing[s].interval,
                                           spacing[s].rows, opt, &n);
                    const struct tsock__box boxes[4] = {
                        {w / 2, h / 2, w / 2, h / 2}, /* skips rows and columns */
                        {0, h / 3, w, h / 3},         /* skips rows */
                        {w / 5, 0, w / 3, h},         /* skips columns */
                        {0, 0, w, h}};                /* everything: 1/8 scale (1/2) */
                    static const int sizes[4][2] = {{37, 29}, {224, 224}, {50, 120}, {24, 18}};
                    int skipped = t.skipped;
                    for (int b = 0; b < 4; b++)
                        both_ways(d, jpeg, n, &boxes[b], sizes[b][0], sizes[b][1],
                                  flags[(b + (int)s) % 3], &t);
                    if (opt) /* a file's own tables: made into skip tables at its 2nd decode */
                        skipped_opt += t.skipped - skipped;
                    free(jpeg);
                    free(pix);
                }
    fprintf(stderr,
            "layouts: %d decodes (%d at 1/8 scale), %d by tsock's Huffman decoder, %d redone, "
            "%d differ, %d MCUs dropped through skip tables (%d with optimized tables)\n",
            t.decodes, t.eighth, t.own, t.redone, t.differ, t.skipped, skipped_opt);
    CHECK_EQ(t.differ, 0);
    CHECK_EQ(t.redone, 0);
    CHECK_EQ(t.own, t.decodes); /* every file here is sequential Huffman, and whole */
    CHECK(t.eighth > 0);
    CHECK(skipped_opt > 0);
}

/* A progressive JPEG is left to libjpeg; so is a truncated one (its decode must find out how
 * far it is valid, which is libjpeg's to say). */
static void
test_left_to_libjpeg(struct tsock__decoder *d)
{
    tjhandle tj = tjInitCompress();
    uint8_t *pix = picture(96, 80, 3, 5);
    unsigned char *buf = NULL;
    unsigned long len = 0;
    struct tally t = {0};
    const struct tsock__box box = {10, 20, 60, 50};

    CHECK_EQ(
        tjCompress2(tj, pix, 96, 0, 80, TJPF_RGB, &buf, &len, TJSAMP_420, 90, TJFLAG_PROGRESSIVE),
        0);
    both_ways(d, buf, len, &box, 32, 32, 0, &t);
    CHECK_EQ(t.own, 0);
    tjFree(buf);
    tjDestroy(tj);

    size_t n;
    uint8_t *jpeg = encode(pix, 96, 80, L_420, 1, 0, 0, &n);
    both_ways(d, jpeg, n - n / 4, &box, 32, 32, 0, &t);
    both_ways(d, jpeg, n - n / 4, NULL, 32, 32, TSOCK__DECODE_NO_PARTIAL, &t);
    CHECK_EQ(t.own, 0);
    CHECK_EQ(t.differ, 0);
    free(jpeg);
    free(pix);
}

/* Bits flipped at positions all over the entropy-coded data, one file per position, in files
 * with and without restart markers: whatever each decoder makes of them, the two agree, and
 * tsock's decoder gives most of them back. */
static void
test_flipped_bits(struct tsock__decoder *d)
{
    struct tally t = {0};
    const struct tsock__box box = {40, 30, 120, 100};

    for (int interval = 0; interval <= 1; interval++) {
        uint8_t *pix = picture(208, 160, 3, 9);
        size_t n;
        uint8_t *jpeg = encode(pix, 208, 160, L_420, interval, 0, 0, &n);
        struct tsock__image_info info;
        CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
        uint8_t *bad = malloc(n);
        size_t data = info.header_size, span = n - 2 - data;
        for (int k = 0; k < 60; k++) {
            size_t at = data + span * (size_t)k / 60;
            memcpy(bad, jpeg, n);
            if (bad[at] == 0xFF || (at > 0 && bad[at - 1] == 0xFF))
                continue; /* leave markers and stuffing alone: that is the next test's */
            bad[at] ^= (uint8_t)(1u << (k % 8));
            both_ways(d, bad, n, &box, 48, 40, 0, &t);
            both_ways(d, bad, n, NULL, 48, 40, TSOCK__DECODE_NO_PARTIAL, &t);
        }
        free(bad);
        free(jpeg);
        free(pix);
    }
    fprintf(stderr,
            "flipped bits: %d decodes, %d by tsock's decoder, %d redone, %d differ, %d MCUs "
            "dropped through skip tables\n",
            t.decodes, t.own, t.redone, t.differ, t.skipped);
    CHECK_EQ(t.differ, 0);
    CHECK(t.redone > 0);
    CHECK(t.skipped > 0); /* corrupt data met in MCUs dropped through them, too */
}

/* Markers: out of sequence, or a marker that does not belong in a scan, make tsock's decoder
 * give the data back; fill bytes before markers are legal and it keeps them. */
static void
test_markers(struct tsock__decoder *d)
{
    uint8_t *pix = picture(208, 160, 3, 13);
    size_t n;
    uint8_t *jpeg = encode(pix, 208, 160, L_420, 1, 0, 0, &n);
    struct tsock__image_info info;
    CHECK_EQ(tsock__image_probe(jpeg, n, &info), 0);
    uint8_t *bad = malloc(n + 1);
    struct tally t = {0};

    /* RSTn out of sequence, early (before the window) and late (under it). */
    for (int k = 3; k <= 90; k += 87) {
        size_t m = marker_at(jpeg, n, info.header_size, k);
        memcpy(bad, jpeg, n);
        bad[m + 1] = (uint8_t)(0xD0 + ((bad[m + 1] - 0xD0 + 3) & 7));
        both_ways(d, bad, n, NULL, 48, 40, TSOCK__DECODE_NO_PARTIAL, &t);
        bad[m + 1] = 0xC4; /* DHT inside the scan */
        both_ways(d, bad, n, NULL, 48, 40, TSOCK__DECODE_NO_PARTIAL, &t);
    }
    /* A byte of data too many at an interval's end: libjpeg skips it with a warning. */
    for (int k = 5; k <= 90; k += 85) {
        size_t m = marker_at(jpeg, n, info.header_size, k);
        memcpy(bad, jpeg, m);
        bad[m] = 0x5A;
        memcpy(bad + m + 1, jpeg + m, n - m);
        both_ways(d, bad, n + 1, NULL, 48, 40, TSOCK__DECODE_NO_PARTIAL, &t);
    }
    CHECK_EQ(t.redone, t.decodes);
    CHECK_EQ(t.differ, 0);

    /* Three fill bytes before every fifth marker. */
    struct tally f = {0};
    size_t o;
    uint8_t *filled = with_fill_bytes(jpeg, n, info.header_size, 5, 16, &o);
    both_ways(d, filled, o, NULL, 48, 40, TSOCK__DECODE_NO_PARTIAL, &f);
    free(filled);
    CHECK_EQ(f.own, 1);
    CHECK_EQ(f.differ, 0);
    free(bad);
    free(jpeg);
    free(pix);
}

/* One decoder across files whose Huffman tables differ (standard, then optimized for each
 * picture, then standard again): the tables kept from the last file must not be reused for a
 * file whose tables differ. */
static void
test_tables_change(struct tsock__decoder *d)
{
    struct tally t = {0};
    for (int i = 0; i < 6; i++) {
        uint8_t *pix = picture(160, 120, 3, (uint32_t)(100 + i));
        size_t n;
        uint8_t *jpeg = encode(pix, 160, 120, L_420, i % 2, 0, i % 3 == 1, &n);
        both_ways(d, jpeg, n, NULL, 64, 48, TSOCK__DECODE_NO_PARTIAL, &t);
        free(jpeg);
        free(pix);
    }
    CHECK_EQ(t.own, t.decodes);
    CHECK_EQ(t.differ, 0);
}

/* Entry points (tsock__decoder_set_entry_points): one set per file, used by a run of decodes
 * of random crops as the epochs of a training run would, each compared with libjpeg's decode
 * of the same crop without them. The first decode learns from the top; later ones start at
 * learnt points (report.entry_jump) and learn further down as their crops reach there. Every
 * third decode repeats the crop before it, which then starts at that crop's own starts. */
static void
crops_with_points(struct tsock__decoder *d, const uint8_t *jpeg, size_t n, int w, int h,
                  struct tsock__entry_points *pts, uint64_t seed, struct tally *t)
{
    struct tsock__rng rng;
    struct tsock__box b = {0, 0, 0, 0};
    tsock__rng_seed(&rng, seed);
    for (int k = 0; k < 24; k++) {
        if (k % 3 == 2) { /* the last crop again, as the val preset's every epoch: it starts at
                             the crop starts the last decode kept */
            tsock__decoder_set_entry_points(d, pts);
            both_ways(d, jpeg, n, &b, 40, 40, 0, t);
            tsock__decoder_set_entry_points(d, NULL);
            continue;
        }
        b.w = 1 + (int)tsock__rng_below(&rng, (uint64_t)w);
        b.h = 1 + (int)tsock__rng_below(&rng, (uint64_t)h);
        b.x = (int)tsock__rng_below(&rng, (uint64_t)(w - b.w + 1));
        b.y = (int)tsock__rng_below(&rng, (uint64_t)(h - b.h + 1));
        if (k == 0) /* a small crop low and to the right: the first decode learns only above */
            b = (struct tsock__box){w - w / 4, h - h / 3, w / 4, h / 4};
        int ow = 8 + (int)tsock__rng_below(&rng, 120), oh = 8 + (int)tsock__rng_below(&rng, 120);
        int flags = k % 5 == 4 ? TSOCK__DECODE_NO_DCT_SCALE : 0;
        tsock__decoder_set_entry_points(d, pts);
        both_ways(d, jpeg, n, &b, ow, oh, flags, t);
        tsock__decoder_set_entry_points(d, NULL);
    }
}

static void
test_entry_points(struct tsock__decoder *d)
{
    static const int dims[3][2] = {{411, 333}, {256, 128}, {1203, 61}}; /* 1203: 76 MCUs a row */
    struct tally t = {0};
    int files = 0;
    for (int l = 0; l < L_COUNT; l++)
        for (int z = 0; z < 3; z++) {
            int w = dims[z][0], h = dims[z][1], comps = l == L_GRAY ? 1 : l == L_CMYK ? 4 : 3;
            uint8_t *pix = picture(w, h, comps, (uint32_t)(l * 13 + z));
            size_t n;
            uint8_t *jpeg = encode(pix, w, h, (enum layout)l, 0, 0, z == 1, &n);
            struct tsock__entry_points *pts = tsock__entry_points_create();
            CHECK(pts != NULL);
            crops_with_points(d, jpeg, n, w, h, pts, (uint64_t)(l * 3 + z), &t);
            CHECK(tsock__entry_points_bytes(pts) > 0);
            files++;
            tsock__entry_points_destroy(pts);
            free(jpeg);
            free(pix);
        }
    fprintf(stderr,
            "entry points: %d files, %d decodes, %d started at a learnt point, %d differ, %d "
            "MCUs dropped through skip tables\n",
            files, t.decodes, t.jumps, t.differ, t.skipped);
    CHECK(t.skipped > 0); /* the catch-up from a point to a crop's first column */
    CHECK_EQ(t.differ, 0);
    CHECK_EQ(t.redone, 0);
    CHECK_EQ(t.own, t.decodes);
    CHECK(t.jumps > t.decodes / 2);
}

/* A set learnt from one file, then used for another: a different picture of the same grid, and
 * the same file with its first bytes of data changed (same length): the set is forgotten and
 * learnt anew. Then corrupt data past the points learnt (a bit flipped below the rows an
 * earlier crop reached): decoded from the last point on as libjpeg decodes it, or given back
 * (and the set forgotten). What is not covered, by design: a file rewritten in place with the
 * same length and sampled bytes, changed before a point (see entropy.h). */
static void
test_entry_points_stale(struct tsock__decoder *d)
{
    struct tally t = {0};
    int w = 411, h = 333;
    uint8_t *pa = picture(w, h, 3, 1), *pb = picture(w, h, 3, 2);
    size_t na, nb;
    uint8_t *a = encode(pa, w, h, L_420, 0, 0, 0, &na), *b = encode(pb, w, h, L_420, 0, 0, 0, &nb);
    struct tsock__image_info info;
    CHECK_EQ(tsock__image_probe(a, na, &info), 0);
    struct tsock__box whole = {0, 0, w, h}, top = {w / 3, 0, w / 3, h / 5},
                      low = {w / 3, h / 2, w / 3, h / 3};

    struct tsock__entry_points *pts = tsock__entry_points_create();
    tsock__decoder_set_entry_points(d, pts);
    both_ways(d, a, na, &whole, 64, 64, TSOCK__DECODE_NO_DCT_SCALE, &t); /* learns every row */
    both_ways(d, b, nb, &low, 64, 64, 0, &t); /* another file: forgotten, learnt anew */
    CHECK_EQ(t.jumps, 0);
    both_ways(d, b, nb, &low, 64, 64, 0, &t);
    CHECK_EQ(t.jumps, 1);

    both_ways(d, a, na, &whole, 64, 64, TSOCK__DECODE_NO_DCT_SCALE, &t);
    uint8_t *c = malloc(na);
    memcpy(c, a, na);
    c[info.header_size + 3] ^= 0x10; /* the scan data's first bytes */
    both_ways(d, c, na, &low, 64, 64, 0, &t);
    CHECK_EQ(t.jumps, 1);
    int redone = t.redone, jumps = t.jumps;
    for (int k = 0; k < 12; k++) {
        tsock__entry_points_destroy(pts);
        pts = tsock__entry_points_create();
        tsock__decoder_set_entry_points(d, pts);
        both_ways(d, a, na, &top, 32, 32, 0, &t); /* learns the rows above h / 5 */
        memcpy(c, a, na);
        c[na / 2 + (size_t)k * (na / 40)] ^= (uint8_t)(1u << (k % 8)); /* below them */
        both_ways(d, c, na, &low, 64, 64, 0, &t);
    }
    tsock__decoder_set_entry_points(d, NULL);
    fprintf(stderr, "stale entry points: %d decodes, %d started at a point, %d redone, %d differ\n",
            t.decodes, t.jumps, t.redone, t.differ);
    CHECK_EQ(t.differ, 0);
    /* every corrupt file started at a point above its flip, or was given back (then decoded
     * by libjpeg alone, which reports no jump) */
    CHECK_EQ((t.jumps - jumps) + (t.redone - redone), 12);
    CHECK(t.redone > redone);
    tsock__entry_points_destroy(pts);
    free(c);
    free(a);
    free(b);
    free(pa);
    free(pb);
}

/* The skip tables on the blocks they must get right: grain at quality 100, where many blocks
 * end at their 64th coefficient with no EOB (a skip-table entry must not run on into the next
 * block's DC code), and a picture of flat patches with sparse detail at quality 30, where
 * blocks end at an early EOB or hold runs of 16 zeros (ZRL); standard and optimized tables (the
 * latter with codes longer than the lookup). Each file is decoded six times in a row with crops
 * that drop rows and columns, so that its tables get skip tables from the second decode on;
 * each decode also without them (TSOCK__DECODE_NO_SKIP_TABLE) and by libjpeg: same bytes. */
static uint8_t *
sparse_picture(int w, int h, uint32_t seed)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint64_t r = tsock__mix64(((uint64_t)seed << 40) ^ ((uint64_t)y << 20) ^ (uint64_t)x);
            int v = ((x / 40) * 37 + (y / 24) * 53) & 255;
            if ((r & 63) == 0) /* a speck now and then: a few high frequencies after zeros */
                v ^= 0x40;
            for (int c = 0; c < 3; c++)
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v + c * 20);
        }
    return p;
}

static void
test_skip_tables(struct tsock__decoder *d)
{
    static const int quality[2] = {100, 30};
    struct tally t = {0}, plain = {0};
    int w = 331, h = 250;
    for (int kind = 0; kind < 2; kind++)
        for (int opt = 0; opt < 2; opt++)
            for (int l = 0; l < L_CMYK; l++) {
                int comps = l == L_GRAY ? 1 : 3;
                uint8_t *pix = kind == 0 || comps == 1 ? picture(w, h, comps, (uint32_t)(l + 7))
                                                       : sparse_picture(w, h, (uint32_t)l);
                size_t n;
                uint8_t *jpeg =
                    encode_quality(pix, w, h, (enum layout)l, 0, 0, opt, quality[kind], &n);
                for (int k = 0; k < 6; k++) {
                    const struct tsock__box box = {w / 3 + k * 9, h / 4 + k * 11, w / 3, h / 3};
                    both_ways(d, jpeg, n, &box, 48, 40, 0, &t);
                    both_ways(d, jpeg, n, &box, 48, 40, TSOCK__DECODE_NO_SKIP_TABLE, &plain);
                }
                free(jpeg);
                free(pix);
            }
    fprintf(stderr,
            "skip tables: %d decodes, %d MCUs dropped through them, %d redone, %d differ; "
            "without: %d redone, %d differ\n",
            t.decodes, t.skipped, t.redone, t.differ, plain.redone, plain.differ);
    CHECK_EQ(t.differ, 0);
    CHECK_EQ(t.redone, 0);
    CHECK_EQ(t.own, t.decodes);
    CHECK_EQ(plain.differ, 0);
    CHECK_EQ(plain.redone, 0);
    CHECK(t.skipped > 0);
    CHECK_EQ(plain.skipped, 0);
}

/* Skip tables are made for the tables a second image uses, and kept by content: a file with
 * tables of its own (optimized) decoded once gets none, and the standard tables' skip tables
 * outlive three such files in between. */
static void
test_skip_cache(struct tsock__decoder *d)
{
    struct tally t = {0};
    const int w = 200, h = 160;
    const struct tsock__box box = {w / 2, h / 2, w / 3, h / 3};
    uint8_t *pix = picture(w, h, 3, 77);
    size_t ns;
    uint8_t *standard = encode(pix, w, h, L_420, 0, 0, 0, &ns);
    both_ways(d, standard, ns, &box, 32, 32, 0, &t);
    both_ways(d, standard, ns, &box, 32, 32, 0, &t); /* made by now */
    int before = t.skipped;
    CHECK(before > 0);
    for (int k = 0; k < 3; k++) {
        uint8_t *other = picture(w, h, 3, (uint32_t)(200 + k));
        size_t no;
        uint8_t *own = encode(other, w, h, L_420, 0, 0, 1, &no);
        both_ways(d, own, no, &box, 32, 32, 0, &t);
        free(own);
        free(other);
    }
    CHECK_EQ(t.skipped, before); /* once each: none made */
    both_ways(d, standard, ns, &box, 32, 32, 0, &t);
    CHECK(t.skipped > before); /* kept across them */
    CHECK_EQ(t.differ, 0);
    CHECK_EQ(t.redone, 0);
    free(standard);
    free(pix);
}

/* Photographs, as they are and with a marker after every MCU: the presets' bytes. */
static void
test_photos(struct tsock__decoder *d)
{
    struct test_photos ph;
    CHECK(test_photos_collect(&ph) > 0);
    struct tsock__train_params p = {224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 1};
    uint8_t *a = malloc(224 * 224 * 3), *b = malloc(224 * 224 * 3);
    int decodes = 0, own = 0, expect_own = 0, differ = 0;
    for (int i = 0; i < ph.n && i < 3; i++) {
        size_t n = 0;
        uint8_t *orig = test_photos_read(ph.path[i], &n);
        if (!orig)
            continue;
        for (int marked = 0; marked < 2; marked++) {
            struct tsock__image_info info;
            CHECK_EQ(tsock__image_probe(orig, n, &info), 0);
            int sequential = info.sof_marker == 0xC0 || info.sof_marker == 0xC1;
            for (uint64_t k = 0; k < 4; k++) {
                for (int way = 0; way < 2; way++) {
                    struct tsock__rng rng;
                    tsock__rng_seed(&rng, tsock__mix64(k * 977 + (uint64_t)i));
                    tsock__decoder_set_flags(d, way ? TSOCK__DECODE_NO_OWN_ENTROPY : 0);
                    int r = k < 3
                                ? tsock__preset_train(d, orig, n, &rng, &p, way ? b : a, NULL, NULL)
                                : tsock__preset_val(d, orig, n, 256, 224, way ? b : a);
                    CHECK_EQ(r, 0);
                    if (!way)
                        own += tsock__decoder_report(d)->own_entropy;
                }
                decodes++;
                expect_own += sequential; /* progressive photographs are libjpeg's */
                differ += memcmp(a, b, 224 * 224 * 3) != 0;
            }
            if (marked)
                break;
            /* The pixels at 1/4 scale (quicker), re-encoded with a marker after every MCU. */
            int w, h, sub, cs;
            tjhandle tj = tjInitDecompress();
            tjscalingfactor quarter = {1, 4};
            CHECK_EQ(tjDecompressHeader3(tj, orig, (unsigned long)n, &w, &h, &sub, &cs), 0);
            w = TJSCALED(w, quarter);
            h = TJSCALED(h, quarter);
            uint8_t *pix = malloc((size_t)w * h * 3);
            CHECK_EQ(tjDecompress2(tj, orig, (unsigned long)n, pix, w, 0, h, TJPF_RGB, 0), 0);
            tjDestroy(tj);
            free(orig);
            orig = encode(pix, w, h, L_420, 1, 0, 0, &n);
            free(pix);
        }
        free(orig);
    }
    fprintf(stderr, "photographs: %d decodes, %d by tsock's decoder (%d sequential), %d differ\n",
            decodes, own, expect_own, differ);
    CHECK(decodes > 0);
    CHECK_EQ(own, expect_own);
    CHECK_EQ(differ, 0);
    test_photos_free(&ph);
    free(a);
    free(b);
}

int
main(void)
{
    struct tsock__decoder *d;

    CHECK_EQ(tsock__decoder_create(&d), 0);
    test_layouts(d);
    test_left_to_libjpeg(d);
    test_flipped_bits(d);
    test_markers(d);
    test_tables_change(d);
    test_skip_tables(d);
    test_skip_cache(d);
    test_entry_points(d);
    test_entry_points_stale(d);
    test_photos(d);
    tsock__decoder_destroy(d);
    return CHECK_DONE();
}
