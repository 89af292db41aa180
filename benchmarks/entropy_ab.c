/* tsock's Huffman decoder (libtsock/image/entropy.c) against libjpeg-turbo's own, on the same
 * files, in one process.
 *
 *   tsock-bench-entropy --root DIR [--repeat 5]
 *
 * Every .JPEG/.jpg/.jpeg file under DIR is read into memory. Then, `repeat` rounds, each
 * measuring every configuration with libjpeg's decoder, then with tsock's (CPU time of this
 * thread per image, CLOCK_THREAD_CPUTIME_ID):
 *  - codec: libjpeg decodes the whole image to RGB (accurate integer DCT, fancy upsampling);
 *  - entropy: libjpeg skips every row but the last 16 (jpeg_skip_scanlines: the Huffman
 *    decoding of the rows skipped, without their IDCT), then decodes those;
 *  - train: the train preset (RandomResizedCrop 224 and flip), the same crops both times;
 *  - val: the val preset (Resize 256, CenterCrop 224).
 * Prints one JSON object: per configuration the medians over the rounds for each decoder and
 * their ratio (tsock / libjpeg), the images tsock's decoder took (the others, progressive ones
 * for instance, are libjpeg's either way) and every round. The outputs of the two decoders are
 * compared too: any difference fails the run (exit status 1). */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_files.h"
#include "core/core.h"
#include "image/entropy.h"
#include "image/image.h"

enum config { CODEC, ENTROPY, TRAIN, VAL, CONFIGS };
static const char *const config_name[CONFIGS] = {"codec", "entropy", "train", "val"};

/* One decode with libjpeg's API directly, tsock's decoder attached when `own`. */
struct direct {
    struct tsock__entropy *entropy;
    jmp_buf jmp;
    uint8_t *row;
};
static struct direct g_direct;

static void
on_fail(j_decompress_ptr cinfo)
{
    (void)cinfo;
    longjmp(g_direct.jmp, 1);
}

static void
on_error(j_common_ptr cinfo)
{
    (void)cinfo;
    longjmp(g_direct.jmp, 1);
}

/* Returns 1 when tsock's decoder decoded it, 0 when libjpeg's did, -1 on an error. */
static int
decode_direct(const struct file *f, int own, int entropy_only)
{
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr err;
    volatile int took = 0; /* set between setjmp and a longjmp */

    ci.err = jpeg_std_error(&err);
    err.error_exit = on_error;
    jpeg_create_decompress(&ci);
    if (setjmp(g_direct.jmp)) {
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    jpeg_mem_src(&ci, f->data, (unsigned long)f->size);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = JCS_RGB;
    ci.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&ci);
    if (own)
        took = tsock__entropy_attach(g_direct.entropy, &ci, on_fail, NULL, 1);
    if (entropy_only && ci.output_height > 16)
        jpeg_skip_scanlines(&ci, ci.output_height - 16);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW r = g_direct.row;
        jpeg_read_scanlines(&ci, &r, 1);
    }
    jpeg_destroy_decompress(&ci);
    return took;
}

/* Runs one configuration over every file; returns CPU ms per image. out[i] (224 x 224 x 3 per
 * file, presets only) receives the outputs; *took counts the files tsock's decoder took. */
static double
run(enum config c, struct tsock__decoder *d, int own, int round, uint8_t *out, size_t *took)
{
    static const struct tsock__train_params train = {224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 1};
    double t0 = thread_cpu_s();
    *took = 0;
    tsock__decoder_set_flags(d, own ? 0 : TSOCK__DECODE_NO_OWN_ENTROPY);
    for (size_t i = 0; i < g_count; i++) {
        const struct file *f = &g_files[i];
        uint8_t *o = out + i * 224 * 224 * 3;
        int r;
        if (c == CODEC || c == ENTROPY) {
            r = decode_direct(f, own, c == ENTROPY);
            *took += r == 1;
            continue;
        }
        if (c == TRAIN) {
            struct tsock__rng rng;
            tsock__rng_seed(&rng, tsock__mix64(((uint64_t)round << 32) ^ i));
            r = tsock__preset_train(d, f->data, f->size, &rng, &train, o, NULL, NULL);
        } else {
            r = tsock__preset_val(d, f->data, f->size, 256, 224, o);
        }
        if (r != 0)
            memset(o, 0, 224 * 224 * 3);
        *took += tsock__decoder_report(d)->own_entropy;
    }
    return (thread_cpu_s() - t0) / (double)g_count * 1e3;
}

#define USAGE "usage: tsock-bench-entropy --root DIR [--repeat R]"

int
main(int argc, char **argv)
{
    const char *root = NULL;
    int repeat = 5;
    const struct bench_opt opts[] = {{"--root", &root, NULL}, {"--repeat", NULL, &repeat}};

    int parsed = bench_parse(argc, argv, opts, sizeof opts / sizeof *opts, USAGE);
    if (parsed != 0)
        return parsed == 1 ? 0 : 2;
    if (!root || repeat < 1 || repeat > MAX_REPEAT) {
        fprintf(stderr, "%s\n", USAGE);
        return 2;
    }
    if (load_jpeg_tree("tsock-bench-entropy", root) == 0)
        return 1;

    struct tsock__decoder *d;
    uint8_t *a = malloc(g_count * 224 * 224 * 3), *b = malloc(g_count * 224 * 224 * 3);
    g_direct.entropy = tsock__entropy_create();
    g_direct.row = malloc(3 * 65536);
    if (tsock__decoder_create(&d) != 0 || !a || !b || !g_direct.entropy || !g_direct.row)
        return 1;

    double ms[CONFIGS][2][MAX_REPEAT];
    size_t took[CONFIGS] = {0}, unused, differ = 0;
    for (int round = 0; round < repeat; round++)
        for (int c = 0; c < CONFIGS; c++) {
            ms[c][0][round] = run((enum config)c, d, 0, round, b, &unused);
            ms[c][1][round] = run((enum config)c, d, 1, round, a, &took[c]);
            if (c >= TRAIN)
                for (size_t i = 0; i < g_count; i++)
                    differ +=
                        memcmp(a + i * 224 * 224 * 3, b + i * 224 * 224 * 3, 224 * 224 * 3) != 0;
        }

    printf("{\"benchmark\": \"entropy_ab\", \"root\": ");
    json_string(root);
    printf(", \"files\": %zu, \"repeat\": %d, \"outputs_differing\": %zu,\n \"results\": {",
           g_count, repeat, differ);
    for (int c = 0; c < CONFIGS; c++) {
        double lj = median(ms[c][0], repeat), own = median(ms[c][1], repeat);
        printf("%s\n  \"%s\": {\"libjpeg_ms_per_image\": %.4f, \"tsock_ms_per_image\": %.4f, "
               "\"tsock_over_libjpeg\": %.4f, \"tsock_took\": %zu, \"rounds\": [",
               c ? "," : "", config_name[c], lj, own, own / lj, took[c]);
        for (int r = 0; r < repeat; r++)
            printf("%s[%.4f, %.4f]", r ? ", " : "", ms[c][0][r], ms[c][1][r]);
        printf("]}");
    }
    printf("}}\n");
    tsock__decoder_destroy(d);
    tsock__entropy_destroy(g_direct.entropy);
    return differ ? 1 : 0;
}
