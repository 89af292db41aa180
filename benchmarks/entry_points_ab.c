/* Entry points into each file's Huffman data (libtsock/image/entropy.c), with against without,
 * on the same files, in one process; or, with --compare avx512, the AVX-512 resampling passes
 * against the AVX2 ones (libtsock/image/resize.c), both with entry points; or, with --compare
 * skip-table, tsock's Huffman decoder with its skip tables for the MCUs it drops against
 * without them (entropy.c), both with entry points; or, with --compare gather, the horizontal
 * gather pass (resize_gather.c) against the eight-row AVX-512 pass, both with entry points.
 *
 *   tsock-bench-entry-points --root DIR [--repeat 5] [--epochs 4]
 *                            [--compare entry-points|avx512|skip-table|gather]
 *
 * Every .JPEG/.jpg/.jpeg file under DIR is read into memory. Then, `repeat` rounds; in each,
 * for each preset (train: RandomResizedCrop 224 and flip, a new crop per file and epoch; val:
 * Resize 256, CenterCrop 224), `epochs` epochs over every file, each epoch decoded twice in
 * turn: "without" (no entry points; or AVX2 resampling) and "with" (one set of entry points per
 * file kept across the round's epochs, new sets every round so that every round's first epoch
 * learns; or AVX-512 resampling, or the skip tables, each side with sets of its own, so that
 * both sides' first epochs learn). CPU time of this thread per image (CLOCK_THREAD_CPUTIME_ID)
 * is summed separately for the first epoch and for the later ones, and so is the decoder's
 * resampling stage. Prints one JSON object: per preset the medians over the rounds (first
 * epoch and later epochs, with and without, and their ratios), the memory the sets held at the
 * end of a round per file, and every round. The outputs with and without are compared, every
 * epoch: any difference fails the run (exit status 1). */
#define _XOPEN_SOURCE 700
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_files.h"
#include "core/core.h"
#include "image/image.h"

#define OUT_BYTES (224 * 224 * 3)
#define MAX_EPOCHS 16

enum preset { TRAIN, VAL, PRESETS };
static const char *const preset_name[PRESETS] = {"train", "val"};

/* What the two sides differ in: --compare entry-points (the default), avx512, skip-table or
 * gather. */
enum compare { ENTRY_POINTS, AVX512, SKIP_TABLE, GATHER, COMPARES };
static const struct {
    const char *name, *without, *with;
    int without_flags; /* the decoder's flags on the "without" side */
} compares[COMPARES] = {
    {"entry-points", "no entry points", "entry points", 0},
    {"avx512", "AVX2 resampling, entry points", "AVX-512 resampling, entry points",
     TSOCK__DECODE_NO_AVX512},
    {"skip-table", "MCUs dropped symbol by symbol, entry points",
     "MCUs dropped through skip tables, entry points", TSOCK__DECODE_NO_SKIP_TABLE},
    {"gather", "eight-row AVX-512 horizontal pass, entry points",
     "gather horizontal pass, entry points", TSOCK__DECODE_NO_GATHER},
};

/* The decoder's flags and whether it gets the files' sets, for each side. */
static int
side_flags(enum compare cmp, int with)
{
    return with ? 0 : compares[cmp].without_flags;
}

static int
side_uses_sets(enum compare cmp, int with)
{
    return cmp != ENTRY_POINTS || with;
}

/* One epoch of preset p over every file, with the files' sets (NULL: without) and the
 * decoder's flags; returns CPU ms per image, adds the resampling stage's ms per image to
 * *resample_ms, and writes the outputs to out. */
static double
epoch(enum preset p, struct tsock__decoder *d, struct tsock__entry_points **sets, int flags,
      int round, int e, uint8_t *out, double *resample_ms)
{
    static const struct tsock__train_params train = {224, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 1};
    uint64_t resample_ns = 0;
    tsock__decoder_set_flags(d, flags);
    double t0 = thread_cpu_s();
    for (size_t i = 0; i < g_count; i++) {
        const struct file *f = &g_files[i];
        uint8_t *o = out + i * OUT_BYTES;
        int r;
        tsock__decoder_set_entry_points(d, sets ? sets[i] : NULL);
        if (p == TRAIN) {
            struct tsock__rng rng;
            tsock__rng_seed(&rng, tsock__mix64(((uint64_t)round << 40) ^ ((uint64_t)e << 32) ^ i));
            r = tsock__preset_train(d, f->data, f->size, &rng, &train, o, NULL, NULL);
        } else {
            r = tsock__preset_val(d, f->data, f->size, 256, 224, o);
        }
        if (r != 0)
            memset(o, 0, OUT_BYTES);
        resample_ns += tsock__decoder_report(d)->resample_ns;
    }
    double ms = (thread_cpu_s() - t0) / (double)g_count * 1e3;
    tsock__decoder_set_entry_points(d, NULL);
    tsock__decoder_set_flags(d, 0);
    *resample_ms += (double)resample_ns / 1e6 / (double)g_count;
    return ms;
}

/* Per preset and round: ms per image of the first epoch and of the later ones (mean over
 * them), without [0] and with [1] entry points; bytes of sets per file. */
struct figures {
    double first[2][MAX_REPEAT], later[2][MAX_REPEAT], bytes[MAX_REPEAT];
    double later_resample[2][MAX_REPEAT]; /* the resampling stage, later epochs */
};

static size_t
one_round(enum compare cmp, enum preset p, struct tsock__decoder *d, int round, int epochs,
          struct figures *fig, uint8_t *a, uint8_t *b)
{
    struct tsock__entry_points **sets = calloc(2 * g_count, sizeof *sets); /* per side */
    size_t differ = 0;
    for (size_t i = 0; i < 2 * g_count; i++)
        if (!sets || !(sets[i] = tsock__entry_points_create())) {
            fprintf(stderr, "tsock-bench-entry-points: out of memory\n");
            exit(1);
        }
    fig->later[0][round] = fig->later[1][round] = 0;
    fig->later_resample[0][round] = fig->later_resample[1][round] = 0;
    for (int e = 0; e < epochs; e++) {
        int with_first = (e + round) % 2; /* the order alternates */
        double ms[2], resample[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            int with = k ^ !with_first;
            ms[with] = epoch(p, d, side_uses_sets(cmp, with) ? sets + with * g_count : NULL,
                             side_flags(cmp, with), round, e, with ? a : b, &resample[with]);
        }
        for (size_t i = 0; i < g_count; i++)
            differ += memcmp(a + i * OUT_BYTES, b + i * OUT_BYTES, OUT_BYTES) != 0;
        for (int w = 0; w < 2; w++) {
            if (e == 0) {
                fig->first[w][round] = ms[w];
            } else {
                fig->later[w][round] += ms[w] / (epochs - 1);
                fig->later_resample[w][round] += resample[w] / (epochs - 1);
            }
        }
    }
    size_t bytes = 0; /* the "with" side's */
    for (size_t i = 0; i < 2 * g_count; i++) {
        bytes += i >= g_count ? tsock__entry_points_bytes(sets[i]) : 0;
        tsock__entry_points_destroy(sets[i]);
    }
    fig->bytes[round] = (double)bytes / (double)g_count;
    free(sets);
    return differ;
}

static void
print_preset(enum preset p, const struct figures *f, int repeat)
{
    double first0 = median(f->first[0], repeat), first1 = median(f->first[1], repeat);
    double later0 = median(f->later[0], repeat), later1 = median(f->later[1], repeat);
    printf("  \"%s\": {\"first_epoch_without_ms\": %.4f, \"first_epoch_with_ms\": %.4f, "
           "\"first_with_over_without\": %.4f,\n   \"later_epochs_without_ms\": %.4f, "
           "\"later_epochs_with_ms\": %.4f, \"later_with_over_without\": %.4f, "
           "\"later_epochs_resample_without_ms\": %.4f, \"later_epochs_resample_with_ms\": %.4f, "
           "\"entry_point_bytes_per_file\": %.0f,\n   \"rounds\": [",
           preset_name[p], first0, first1, first1 / first0, later0, later1, later1 / later0,
           median(f->later_resample[0], repeat), median(f->later_resample[1], repeat),
           median(f->bytes, repeat));
    for (int r = 0; r < repeat; r++)
        printf("%s{\"first\": [%.4f, %.4f], \"later\": [%.4f, %.4f]}", r ? ", " : "",
               f->first[0][r], f->first[1][r], f->later[0][r], f->later[1][r]);
    printf("]}");
}

#define USAGE                                                                                      \
    "usage: tsock-bench-entry-points --root DIR [--repeat R] [--epochs E] "                        \
    "[--compare entry-points|avx512|skip-table|gather]"

int
main(int argc, char **argv)
{
    const char *root = NULL, *compare = "entry-points";
    int repeat = 5, epochs = 4;
    const struct bench_opt opts[] = {{"--root", &root, NULL},
                                     {"--repeat", NULL, &repeat},
                                     {"--epochs", NULL, &epochs},
                                     {"--compare", &compare, NULL}};

    int parsed = bench_parse(argc, argv, opts, sizeof opts / sizeof *opts, USAGE);
    if (parsed != 0)
        return parsed == 1 ? 0 : 2;
    enum compare cmp = ENTRY_POINTS;
    while (cmp < COMPARES && strcmp(compare, compares[cmp].name) != 0)
        cmp++;
    if (!root || repeat < 1 || repeat > MAX_REPEAT || epochs < 2 || epochs > MAX_EPOCHS ||
        cmp == COMPARES) {
        fprintf(stderr, "%s\n", USAGE);
        return 2;
    }
    if (load_jpeg_tree("tsock-bench-entry-points", root) == 0)
        return 1;

    struct tsock__decoder *d;
    uint8_t *a = malloc(g_count * OUT_BYTES), *b = malloc(g_count * OUT_BYTES);
    if (tsock__decoder_create(&d) != 0 || !a || !b)
        return 1;
    static struct figures fig[PRESETS];
    size_t differ = 0;
    for (int round = 0; round < repeat; round++)
        for (int p = 0; p < PRESETS; p++)
            differ += one_round(cmp, (enum preset)p, d, round, epochs, &fig[p], a, b);

    printf("{\"benchmark\": \"entry_points_ab\", \"compare\": \"%s\", \"without\": \"%s\", "
           "\"with\": \"%s\", \"root\": ",
           compare, compares[cmp].without, compares[cmp].with);
    json_string(root);
    printf(", \"files\": %zu, \"repeat\": %d, \"epochs\": %d, \"outputs_differing\": %zu,\n "
           "\"results\": {\n",
           g_count, repeat, epochs, differ);
    for (int p = 0; p < PRESETS; p++) {
        print_preset((enum preset)p, &fig[p], repeat);
        printf("%s\n", p + 1 < PRESETS ? "," : "");
    }
    printf("}}\n");
    tsock__decoder_destroy(d);
    free(a);
    free(b);
    return differ ? 1 : 0;
}
