/* The image pipeline on a real tree written by tsock-mkdataset --edge-cases (argv[1], made by
 * a ctest fixture): what the index keeps and leaves out, every edge case decoded to RGB, bad
 * files replaced and counted, byte-identical batches whatever the workers and read method,
 * --on-error fail, the index cache, files that vanish or grow after indexing, list files and
 * bad options, and the GPU decoder's refusals in tsock_pipeline_fill. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "image/image.h"
#include "scratch.h"
#include "tsock/pipeline.h"
#include "tsock/tsock.h"

#define SIZE 48 /* output side: small, so the test stays quick under the sanitizers */
#define IMAGE_BYTES ((size_t)SIZE * SIZE * 3)

static const char *data_dir;
static char tmp_dir[256];

/* Counts log lines that contain `needle` (set before a call, read after). */
static const char *log_needle;
static atomic_int log_hits; /* the pipeline's workers log too */

static void
on_log(void *user, int level, const char *message)
{
    (void)user;
    (void)level;
    if (log_needle && strstr(message, log_needle))
        log_hits++;
}

/* Opens a configured pipeline; NULL (a failed check) when it does not open. */
static tsock_pipeline *
opened(tsock_pipeline *pl)
{
    int r = tsock_pipeline_open(pl);
    CHECK_EQ(r, 0);
    if (r != 0) {
        tsock_pipeline_destroy(pl);
        return NULL;
    }
    return pl;
}

static tsock_pipeline *
open_pipeline(const char *path, int source, int preset, int workers, int io, uint64_t seed,
              int on_error, const char *cache)
{
    tsock_pipeline *pl = NULL;
    CHECK_EQ(tsock_pipeline_create(&pl, source, path), 0);
    if (!pl)
        return NULL;
    CHECK_EQ(tsock_pipeline_set_preset(pl, preset), 0);
    CHECK_EQ(tsock_pipeline_set_image_size(pl, SIZE), 0);
    CHECK_EQ(tsock_pipeline_set_workers(pl, workers), 0);
    CHECK_EQ(tsock_pipeline_set_io(pl, io, 8), 0);
    CHECK_EQ(tsock_pipeline_set_seed(pl, seed), 0);
    CHECK_EQ(tsock_pipeline_set_on_error(pl, on_error), 0);
    CHECK_EQ(tsock_pipeline_set_index_cache(pl, cache), 0);
    return opened(pl);
}

static uint64_t
stat_of(tsock_pipeline *pl, int key)
{
    uint64_t v = UINT64_MAX;
    CHECK_EQ(tsock_pipeline_stat(pl, key, &v), 0);
    return v;
}

/* What a sample's file is, from its header. */
enum kind { K_PLAIN, K_GRAY, K_CMYK, K_PROGRESSIVE, K_PNG, K_TRUNCATED };

static enum kind
kind_of(tsock_pipeline *pl, uint64_t id)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", data_dir, tsock_pipeline_sample_path(pl, id));
    FILE *f = fopen(path, "rb");
    static uint8_t buf[1 << 22];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    struct tsock__image_info info;
    if (tsock__image_probe(buf, n, &info) != 0)
        return K_TRUNCATED;
    if (info.format == TSOCK__IMAGE_PNG)
        return K_PNG;
    if (info.color == TSOCK__COLOR_GRAY)
        return K_GRAY;
    if (info.color == TSOCK__COLOR_CMYK || info.color == TSOCK__COLOR_YCCK)
        return K_CMYK;
    if (info.progressive)
        return K_PROGRESSIVE;
    /* A sequential JPEG without its end: mkdataset's truncated edge case. */
    return n >= 2 && buf[n - 2] == 0xFF && buf[n - 1] == 0xD9 ? K_PLAIN : K_TRUNCATED;
}

/* Whether an image is a real picture: not one flat value (a grey fill would be). */
static int
has_detail(const uint8_t *img)
{
    uint8_t lo = 255, hi = 0;
    for (size_t i = 0; i < IMAGE_BYTES; i++) {
        lo = img[i] < lo ? img[i] : lo;
        hi = img[i] > hi ? img[i] : hi;
    }
    return hi - lo > 16;
}

static int
is_gray(const uint8_t *img)
{
    for (size_t p = 0; p < IMAGE_BYTES; p += 3)
        if (img[p] != img[p + 1] || img[p] != img[p + 2])
            return 0;
    return 1;
}

struct batch {
    uint64_t *ids;
    uint8_t *images;
    int64_t *labels, *indices;
    uint32_t n;
};

static struct batch
batch_new(uint32_t n)
{
    struct batch b = {calloc(n, 8), calloc(n, IMAGE_BYTES), calloc(n, 8), calloc(n, 8), n};
    for (uint32_t i = 0; i < n; i++)
        b.ids[i] = i;
    return b;
}

static void
batch_free(struct batch *b)
{
    free(b->ids);
    free(b->images);
    free(b->labels);
    free(b->indices);
}

static int
load(tsock_pipeline *pl, uint64_t epoch, struct batch *b)
{
    return tsock_pipeline_load(pl, epoch, b->ids, b->n, b->images, b->labels, b->indices);
}

/* The index of the fixture tree: regular images and the decodable edge cases are in, the
 * empty and non-image files out; every kind decodes to RGB; truncated files are replaced by
 * the next good sample, counted once each. */
static void
test_edge_cases(void)
{
    tsock_pipeline *pl = open_pipeline(data_dir, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_VAL, 2,
                                       TSOCK_READ_AUTO, 0, TSOCK_ON_ERROR_SKIP, NULL);
    if (!pl)
        return;
    uint64_t n = tsock_pipeline_samples(pl);
    uint32_t classes = tsock_pipeline_classes(pl);
    CHECK_EQ(classes, 3);
    /* 60 images + per class: gray, CMYK, progressive, PNG, truncated (empty and text out). */
    CHECK_EQ(n, 60 + 5 * 3);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_NOT_IMAGE), 3);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_LEFT_OUT), 6);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_FROM_CACHE), 0);
    for (uint32_t c = 1; c < classes; c++)
        CHECK(strcmp(tsock_pipeline_class_name(pl, c - 1), tsock_pipeline_class_name(pl, c)) < 0);

    struct batch b = batch_new((uint32_t)n);
    CHECK_EQ(load(pl, 0, &b), (int)n);
    int seen[K_TRUNCATED + 1] = {0};
    for (uint32_t i = 0; i < b.n; i++) {
        enum kind k = kind_of(pl, i);
        const uint8_t *img = b.images + i * IMAGE_BYTES;
        seen[k]++;
        const char *path = tsock_pipeline_sample_path(pl, (uint64_t)b.indices[i]);
        /* Labels follow the class folder of the file actually delivered. */
        CHECK(b.labels[i] >= 0 && b.labels[i] < classes);
        CHECK(strncmp(path, tsock_pipeline_class_name(pl, (uint32_t)b.labels[i]),
                      strlen(tsock_pipeline_class_name(pl, (uint32_t)b.labels[i]))) == 0);
        if (k == K_TRUNCATED) {
            CHECK(b.indices[i] != (int64_t)i); /* replaced by another sample */
            CHECK(kind_of(pl, (uint64_t)b.indices[i]) != K_TRUNCATED);
        } else {
            CHECK_EQ(b.indices[i], i);
        }
        CHECK(has_detail(img));
        if (k == K_GRAY)
            CHECK(is_gray(img));
        else if (k != K_TRUNCATED)
            CHECK(!is_gray(img));
    }
    for (int k = K_GRAY; k <= K_TRUNCATED; k++)
        CHECK_EQ(seen[k], 3);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_BAD_FILES), 3);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_REPLACED), 3);
    /* A second epoch: the bad files are not read again, still replaced, still counted once. */
    uint64_t files = stat_of(pl, TSOCK_PIPELINE_FILES_READ);
    CHECK_EQ(load(pl, 1, &b), (int)n);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_BAD_FILES), 3);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_REPLACED), 6);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_FILES_READ) - files, n - 3 + 3);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_SAMPLES), 2 * n);
    batch_free(&b);
    tsock_pipeline_destroy(pl);
}

/* The same seed gives the same bytes with 1 or 2 workers and with io_uring or pread; another
 * epoch gives other crops. */
static void
test_determinism(void)
{
    static const int configs[][2] = {
        {1, TSOCK_READ_PREAD}, {2, TSOCK_READ_AUTO}, {3, TSOCK_READ_PREAD}};
    struct batch ref[2], got[2];
    uint32_t n = 40;

    for (int e = 0; e < 2; e++) {
        ref[e] = batch_new(n);
        got[e] = batch_new(n);
        for (uint32_t i = 0; i < n; i++)
            ref[e].ids[i] = got[e].ids[i] = (i * 37 + 11) % 75; /* a mixed order, repeats */
    }
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        tsock_pipeline *pl =
            open_pipeline(data_dir, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_TRAIN, configs[c][0],
                          configs[c][1], 42, TSOCK_ON_ERROR_SKIP, NULL);
        if (!pl)
            continue;
        for (int e = 0; e < 2; e++) {
            struct batch *b = c == 0 ? &ref[e] : &got[e];
            CHECK_EQ(load(pl, (uint64_t)e, b), (int)n);
            if (c > 0) {
                CHECK(memcmp(b->images, ref[e].images, n * IMAGE_BYTES) == 0);
                CHECK(memcmp(b->labels, ref[e].labels, n * 8) == 0);
                CHECK(memcmp(b->indices, ref[e].indices, n * 8) == 0);
            }
        }
        tsock_pipeline_destroy(pl);
    }
    CHECK(memcmp(ref[0].images, ref[1].images, n * IMAGE_BYTES) != 0);
    for (int e = 0; e < 2; e++) {
        batch_free(&ref[e]);
        batch_free(&got[e]);
    }
}

static void
test_on_error_fail(void)
{
    tsock_pipeline *pl = open_pipeline(data_dir, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_VAL, 2,
                                       TSOCK_READ_AUTO, 0, TSOCK_ON_ERROR_FAIL, NULL);
    if (!pl)
        return;
    struct batch b = batch_new((uint32_t)tsock_pipeline_samples(pl));
    log_needle = "corrupt or truncated";
    log_hits = 0;
    CHECK_EQ(load(pl, 0, &b), TSOCK_E_BAD_SAMPLE);
    CHECK_EQ(log_hits, 3); /* each bad file named */
    log_needle = NULL;
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_REPLACED), 0);
    batch_free(&b);
    tsock_pipeline_destroy(pl);
}

/* Sets the mtime of the tree's folders an hour back: the index does not cache a tree changed
 * within the last seconds (it could still change unnoticed), and the fixture has just been
 * written. */
static void
age_tree(const char *root)
{
    struct timespec past[2] = {{time(NULL) - 3600, 0}, {time(NULL) - 3600, 0}};
    char path[1024];
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            CHECK_EQ(utimensat(AT_FDCWD, path, past, 0), 0);
    }
    if (d)
        closedir(d);
    CHECK_EQ(utimensat(AT_FDCWD, root, past, 0), 0);
}

/* The cache: written on the first open, loaded on the second (no header check, the same
 * samples and counts). */
static void
test_index_cache(void)
{
    char cache[300];
    age_tree(data_dir);
    snprintf(cache, sizeof cache, "%s/index.cache", tmp_dir);
    for (int round = 0; round < 2; round++) {
        log_needle = "header check";
        log_hits = 0;
        tsock_set_log(on_log, NULL, TSOCK_LOG_INFO);
        tsock_pipeline *pl = open_pipeline(data_dir, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_VAL, 1,
                                           TSOCK_READ_AUTO, 0, TSOCK_ON_ERROR_SKIP, cache);
        tsock_set_log(on_log, NULL, TSOCK_LOG_WARN);
        log_needle = NULL;
        if (!pl)
            continue;
        CHECK_EQ(log_hits, round == 0 ? 1 : 0);
        CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_FROM_CACHE), round);
        CHECK_EQ(tsock_pipeline_samples(pl), 75);
        CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_NOT_IMAGE), 3);
        tsock_pipeline_destroy(pl);
    }
}

static int
copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    char buf[65536];
    size_t n;
    int ok = in && out;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    if (in)
        fclose(in);
    if (out && fclose(out) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

/* A copy of three plain images of the fixture in a one-class tree; returns the source
 * pipeline's paths copied. */
static void
make_small_tree(const char *root)
{
    char path[1024], from[1024];
    tsock_pipeline *src = open_pipeline(data_dir, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_VAL, 1,
                                        TSOCK_READ_PREAD, 0, TSOCK_ON_ERROR_SKIP, NULL);
    if (!src)
        return;
    snprintf(path, sizeof path, "%s/cls", root);
    mkdir(root, 0755);
    mkdir(path, 0755);
    int copied = 0;
    for (uint64_t id = 0; id < tsock_pipeline_samples(src) && copied < 3; id++) {
        if (kind_of(src, id) != K_PLAIN)
            continue;
        snprintf(from, sizeof from, "%s/%s", data_dir, tsock_pipeline_sample_path(src, id));
        snprintf(path, sizeof path, "%s/cls/%d.jpg", root, copied);
        CHECK_EQ(copy_file(from, path), 0);
        copied++;
    }
    CHECK_EQ(copied, 3);
    tsock_pipeline_destroy(src);
}

/* After indexing, one file vanishes and another grows (junk after its end, which decoders
 * ignore): the first is replaced and counted, the second read whole and decoded as before. */
static void
test_vanished_and_grown(void)
{
    char root[300], path[400];
    snprintf(root, sizeof root, "%s/small", tmp_dir);
    make_small_tree(root);
    tsock_pipeline *pl = open_pipeline(root, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_VAL, 2,
                                       TSOCK_READ_AUTO, 0, TSOCK_ON_ERROR_SKIP, NULL);
    if (!pl)
        return;
    struct batch before = batch_new(3), after = batch_new(3);
    CHECK_EQ(load(pl, 0, &before), 3);
    snprintf(path, sizeof path, "%s/cls/0.jpg", root);
    CHECK_EQ(unlink(path), 0);
    snprintf(path, sizeof path, "%s/cls/1.jpg", root);
    FILE *f = fopen(path, "ab");
    static const char junk[300000] = {1};
    CHECK(f && fwrite(junk, 1, sizeof junk, f) == sizeof junk);
    if (f)
        fclose(f);
    CHECK_EQ(load(pl, 0, &after), 3);
    CHECK_EQ(after.indices[0], 1); /* 0 vanished: replaced by the next id */
    CHECK_EQ(after.indices[1], 1);
    CHECK(memcmp(after.images + IMAGE_BYTES, before.images + IMAGE_BYTES, 2 * IMAGE_BYTES) == 0);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_BAD_FILES), 1);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_REPLACED), 1);
    batch_free(&before);
    batch_free(&after);
    tsock_pipeline_destroy(pl);
}

/* A JPEG whose metadata (a 40 KB APP1 segment, as cameras write EXIF) runs far past the first
 * bytes the header check reads: it is read again with as much as its header needs, kept, and
 * decodes to the same pixels as the file without the segment. */
static void
test_long_header(void)
{
    char root[300], a[400], b[400];
    snprintf(root, sizeof root, "%s/long", tmp_dir);
    make_small_tree(root);
    snprintf(a, sizeof a, "%s/cls/0.jpg", root);
    snprintf(b, sizeof b, "%s/cls/1.jpg", root);
    FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
    static uint8_t data[1 << 21];
    size_t n = in ? fread(data, 1, sizeof data, in) : 0;
    if (in)
        fclose(in);
    static uint8_t app1[4 + 40000];
    app1[0] = 0xFF;
    app1[1] = 0xE1;
    app1[2] = (uint8_t)((sizeof app1 - 2) >> 8);
    app1[3] = (uint8_t)((sizeof app1 - 2) & 0xFF);
    CHECK(out && n > 2 && fwrite(data, 1, 2, out) == 2 && /* SOI */
          fwrite(app1, 1, sizeof app1, out) == sizeof app1 &&
          fwrite(data + 2, 1, n - 2, out) == n - 2);
    if (out)
        fclose(out);
    tsock_pipeline *pl = open_pipeline(root, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_VAL, 1,
                                       TSOCK_READ_AUTO, 0, TSOCK_ON_ERROR_SKIP, NULL);
    if (!pl)
        return;
    CHECK_EQ(tsock_pipeline_samples(pl), 3);
    CHECK_EQ(stat_of(pl, TSOCK_PIPELINE_NOT_IMAGE), 0);
    struct batch bt = batch_new(2);
    CHECK_EQ(load(pl, 0, &bt), 2);
    CHECK_EQ(bt.indices[1], 1);
    CHECK(memcmp(bt.images, bt.images + IMAGE_BYTES, IMAGE_BYTES) == 0);
    batch_free(&bt);
    tsock_pipeline_destroy(pl);
}

/* A pipeline of 2 workers on `root` with `budget` bytes of entry points. */
static tsock_pipeline *
open_with_points(const char *root, int preset, uint64_t budget)
{
    tsock_pipeline *pl = NULL;
    CHECK_EQ(tsock_pipeline_create(&pl, TSOCK_SOURCE_FOLDER, root), 0);
    if (!pl)
        return NULL;
    CHECK_EQ(tsock_pipeline_set_preset(pl, preset), 0);
    CHECK_EQ(tsock_pipeline_set_image_size(pl, SIZE), 0);
    CHECK_EQ(tsock_pipeline_set_workers(pl, 2), 0);
    CHECK_EQ(tsock_pipeline_set_seed(pl, 7), 0);
    CHECK_EQ(tsock_pipeline_set_entry_points(pl, budget), 0);
    return opened(pl);
}

/* Entry points (tsock_pipeline_set_entry_points): three epochs of each preset give the same
 * bytes with them (the default budget) as without (0) and with a budget of one byte, which
 * keeps the sets of the first files only (at most one per worker, see entry_points.c); from
 * the second epoch on most decodes start at learnt points. */
static void
test_entry_points(void)
{
    const uint32_t n = 40;
    for (int preset = TSOCK_PRESET_TRAIN; preset <= TSOCK_PRESET_VAL; preset++) {
        tsock_pipeline *on = open_with_points(data_dir, preset,
                                              TSOCK_PIPELINE_DEFAULT_ENTRY_POINT_BYTES),
                       *off = open_with_points(data_dir, preset, 0),
                       *tiny = open_with_points(data_dir, preset, 1);
        if (!on || !off || !tiny)
            return;
        struct batch a = batch_new(n), b = batch_new(n), c = batch_new(n);
        int full_said[3] = {0, 0, 0}; /* the budget's warning: on, off, tiny */
        log_needle = "entry points fill their budget";
        for (uint64_t e = 0; e < 3; e++) {
            log_hits = 0;
            CHECK_EQ(load(on, e, &a), (int)n);
            full_said[0] += log_hits;
            log_hits = 0;
            CHECK_EQ(load(off, e, &b), (int)n);
            full_said[1] += log_hits;
            log_hits = 0;
            CHECK_EQ(load(tiny, e, &c), (int)n);
            full_said[2] += log_hits;
            CHECK(memcmp(a.images, b.images, n * IMAGE_BYTES) == 0);
            CHECK(memcmp(c.images, b.images, n * IMAGE_BYTES) == 0);
        }
        log_needle = NULL;
        /* said once, by the pipeline whose budget was reached */
        CHECK_EQ(full_said[0], 0);
        CHECK_EQ(full_said[1], 0);
        CHECK_EQ(full_said[2], 1);
        uint64_t own = stat_of(on, TSOCK_PIPELINE_OWN_ENTROPY);
        fprintf(stderr,
                "entry points, %s: %llu of %llu decodes by tsock's Huffman decoder "
                "started at learnt points; %llu bytes of them (budget 1: %llu jumps, "
                "%llu bytes)\n",
                preset == TSOCK_PRESET_TRAIN ? "train" : "val",
                (unsigned long long)stat_of(on, TSOCK_PIPELINE_ENTRY_JUMPS),
                (unsigned long long)own,
                (unsigned long long)stat_of(on, TSOCK_PIPELINE_ENTRY_POINT_BYTES),
                (unsigned long long)stat_of(tiny, TSOCK_PIPELINE_ENTRY_JUMPS),
                (unsigned long long)stat_of(tiny, TSOCK_PIPELINE_ENTRY_POINT_BYTES));
        CHECK(stat_of(on, TSOCK_PIPELINE_ENTRY_JUMPS) > own / 3); /* 2 of 3 epochs, most crops */
        CHECK(stat_of(on, TSOCK_PIPELINE_ENTRY_POINT_BYTES) > 0);
        CHECK_EQ(stat_of(off, TSOCK_PIPELINE_ENTRY_JUMPS), 0);
        CHECK_EQ(stat_of(off, TSOCK_PIPELINE_ENTRY_POINT_BYTES), 0);
        CHECK(stat_of(tiny, TSOCK_PIPELINE_ENTRY_JUMPS) <= 2 * 2); /* 2 epochs, 2 files */
        CHECK(stat_of(tiny, TSOCK_PIPELINE_ENTRY_POINT_BYTES) <
              stat_of(on, TSOCK_PIPELINE_ENTRY_POINT_BYTES));
        batch_free(&a);
        batch_free(&b);
        batch_free(&c);
        tsock_pipeline_destroy(on);
        tsock_pipeline_destroy(off);
        tsock_pipeline_destroy(tiny);
    }
}

/* A file rewritten in place between epochs with another picture (another length) after its
 * entry points were learnt and used: the next epoch decodes the new picture, as a pipeline
 * without entry points does. */
static void
test_entry_points_rewritten(void)
{
    char root[300], a[400], b[400];
    snprintf(root, sizeof root, "%s/rewritten", tmp_dir);
    make_small_tree(root);
    tsock_pipeline *pl = open_with_points(root, TSOCK_PRESET_VAL, 1u << 20);
    if (!pl)
        return;
    struct batch first = batch_new(2), again = batch_new(2);
    for (uint64_t e = 0; e < 2; e++)
        CHECK_EQ(load(pl, e, &first), 2);
    CHECK(stat_of(pl, TSOCK_PIPELINE_ENTRY_JUMPS) >= 1);
    snprintf(a, sizeof a, "%s/cls/1.jpg", root);
    snprintf(b, sizeof b, "%s/cls/0.jpg", root);
    CHECK_EQ(copy_file(a, b), 0); /* 0.jpg now holds 1.jpg's picture */
    CHECK_EQ(load(pl, 2, &again), 2);
    CHECK(memcmp(again.images, first.images + IMAGE_BYTES, IMAGE_BYTES) == 0);
    CHECK(memcmp(again.images + IMAGE_BYTES, first.images + IMAGE_BYTES, IMAGE_BYTES) == 0);
    batch_free(&first);
    batch_free(&again);
    tsock_pipeline_destroy(pl);
}

/* A list file: the listed order and labels; a malformed line rejects the list. */
static void
test_list(void)
{
    char list[300], line[1100];
    snprintf(list, sizeof list, "%s/list.txt", tmp_dir);
    tsock_pipeline *src = open_pipeline(data_dir, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_VAL, 1,
                                        TSOCK_READ_PREAD, 0, TSOCK_ON_ERROR_SKIP, NULL);
    if (!src)
        return;
    FILE *f = fopen(list, "w");
    for (uint64_t id = 0; f && id < 4; id++) {
        snprintf(line, sizeof line, "%s/%s %d\n", data_dir, tsock_pipeline_sample_path(src, 3 - id),
                 (int)(7 + id));
        fputs(line, f);
    }
    if (f)
        fclose(f);
    tsock_pipeline_destroy(src);
    tsock_pipeline *pl = open_pipeline(list, TSOCK_SOURCE_LIST, TSOCK_PRESET_VAL, 1,
                                       TSOCK_READ_AUTO, 0, TSOCK_ON_ERROR_SKIP, NULL);
    if (pl) {
        CHECK_EQ(tsock_pipeline_samples(pl), 4);
        CHECK_EQ(tsock_pipeline_classes(pl), 11);
        struct batch b = batch_new(4);
        CHECK_EQ(load(pl, 0, &b), 4);
        for (int i = 0; i < 4; i++)
            CHECK_EQ(b.labels[i], 7 + i);
        batch_free(&b);
        tsock_pipeline_destroy(pl);
    }
    f = fopen(list, "a");
    if (f) {
        fputs("no-label-here\n", f);
        fclose(f);
    }
    tsock_pipeline *bad = NULL;
    CHECK_EQ(tsock_pipeline_create(&bad, TSOCK_SOURCE_LIST, list), 0);
    CHECK_EQ(tsock_pipeline_open(bad), -EINVAL);
    tsock_pipeline_destroy(bad);
}

static void
test_bad_use(void)
{
    tsock_pipeline *pl = NULL;
    uint64_t id = 0, v;
    uint8_t img[IMAGE_BYTES];
    int64_t label, index;

    CHECK_EQ(tsock_pipeline_create(&pl, 7, data_dir), -EINVAL);
    CHECK_EQ(tsock_pipeline_create(&pl, TSOCK_SOURCE_FOLDER, ""), -EINVAL);
    CHECK_EQ(tsock_pipeline_create(NULL, TSOCK_SOURCE_FOLDER, data_dir), -EINVAL);
    CHECK_EQ(tsock_pipeline_create(&pl, TSOCK_SOURCE_FOLDER, "/nonexistent/tsock"), 0);
    CHECK_EQ(tsock_pipeline_set_preset(pl, 5), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_image_size(pl, 0), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_image_size(pl, 9000), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_crop_scale(pl, 0.0, 1.0), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_crop_scale(pl, 0.5, 0.4), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_crop_scale(pl, 0.5, 1.5), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_workers(pl, -1), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_io(pl, 3, 8), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_io(pl, TSOCK_READ_PREAD, 0), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_on_error(pl, 2), -EINVAL);
    CHECK_EQ(tsock_pipeline_set_index_cache(pl, ""), -EINVAL);
    CHECK_EQ(tsock_pipeline_load(pl, 0, &id, 1, img, &label, &index), TSOCK_E_STATE);
    CHECK_EQ(tsock_pipeline_stat(pl, 999, &v), -EINVAL);
    CHECK_EQ(tsock_pipeline_samples(pl), 0);
    CHECK(tsock_pipeline_open(pl) < 0); /* no such folder */
    tsock_pipeline_destroy(pl);

    pl = open_pipeline(data_dir, TSOCK_SOURCE_FOLDER, TSOCK_PRESET_VAL, 1, TSOCK_READ_PREAD, 0,
                       TSOCK_ON_ERROR_SKIP, NULL);
    if (!pl)
        return;
    CHECK_EQ(tsock_pipeline_set_workers(pl, 2), TSOCK_E_STATE);
    CHECK_EQ(tsock_pipeline_open(pl), TSOCK_E_STATE);
    id = tsock_pipeline_samples(pl);
    CHECK_EQ(tsock_pipeline_load(pl, 0, &id, 1, img, &label, &index), -EINVAL);
    id = 0;
    CHECK_EQ(tsock_pipeline_load(pl, 0, &id, 1, NULL, &label, &index), -EINVAL);
    CHECK_EQ(tsock_pipeline_load(pl, 0, &id, 0, NULL, NULL, NULL), 0);
    CHECK_EQ(tsock_pipeline_fill(pl, NULL), -EINVAL);
    tsock_pipeline_destroy(pl);
    tsock_pipeline_destroy(NULL);
}

/* A pipeline set to decode on the GPU, opened on the edge-case tree; `jitter` adds colour
 * jitter, an augmentation the GPU decoder does not apply. */
static tsock_pipeline *
open_gpu_pipeline(int jitter)
{
    tsock_pipeline *pl = NULL;
    CHECK_EQ(tsock_pipeline_create(&pl, TSOCK_SOURCE_FOLDER, data_dir), 0);
    CHECK_EQ(tsock_pipeline_set_image_size(pl, SIZE), 0);
    CHECK_EQ(tsock_pipeline_set_decoder(pl, TSOCK_DECODER_GPU), 0);
    if (jitter)
        CHECK_EQ(tsock_pipeline_set_color_jitter(pl, 0.4, 0.4, 0.4, 0.0), 0);
    CHECK_EQ(tsock_pipeline_open(pl), 0);
    return pl;
}

/* tsock_pipeline_fill's refusals with TSOCK_DECODER_GPU (the CLI's are in
 * gpusim.decoder_bad_options): an augmentation it cannot apply (-ENOTSUP, before anything is
 * decoded), and a producer whose ring is host memory (TSOCK_E_STATE); each says why in the
 * log. The slot is then published with nothing in it. */
static void
test_gpu_decoder_refusals(void)
{
    char endpoint[300];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/gpu-refusals.sock", tmp_dir);
    for (int jitter = 1; jitter >= 0; jitter--) {
        tsock_pipeline *pl = open_gpu_pipeline(jitter);
        tsock_layout *layout;
        tsock_layout_create(&layout);
        CHECK_EQ(tsock_pipeline_add_tensors(pl, layout), 0);
        tsock_producer *p = NULL;
        CHECK_EQ(tsock_producer_create(&p, endpoint, layout, 4, 2), 0);
        tsock_layout_destroy(layout);
        CHECK_EQ(tsock_producer_set_sampler(p, tsock_pipeline_samples(pl), 1, 0), 0);
        CHECK_EQ(tsock_producer_start(p), 0);
        tsock_slot *slot = NULL;
        CHECK_EQ(tsock_producer_acquire(p, 5000, &slot), 0);
        log_needle = jitter ? "applies no augmentation" : "ring is on a CUDA device";
        log_hits = 0;
        CHECK_EQ(tsock_pipeline_fill(pl, slot), jitter ? -ENOTSUP : TSOCK_E_STATE);
        CHECK_EQ(log_hits, 1);
        log_needle = NULL;
        CHECK_EQ(tsock_producer_publish(p, slot, tsock_slot_planned(slot)), 0);
        tsock_producer_destroy(p);
        tsock_pipeline_destroy(pl);
    }
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_pipeline DATASET_DIR (a tsock-mkdataset --edge-cases tree)\n");
        return 2;
    }
    /* Absolute: the list test writes the tree's paths into a list file elsewhere. */
    static char abs_dir[PATH_MAX];
    if (!realpath(argv[1], abs_dir)) {
        perror(argv[1]);
        return 1;
    }
    data_dir = abs_dir;
    test_scratch_dir(tmp_dir, sizeof tmp_dir, "pipeline");
    tsock_set_log(on_log, NULL, TSOCK_LOG_WARN);
    test_bad_use();
    test_edge_cases();
    test_determinism();
    test_on_error_fail();
    test_index_cache();
    test_vanished_and_grown();
    test_long_header();
    test_entry_points();
    test_entry_points_rewritten();
    test_list();
    test_gpu_decoder_refusals();
    return CHECK_DONE(); /* the scratch folder goes at exit */
}
