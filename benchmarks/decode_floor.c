/* Decode floor: what one plain full-size JPEG decode costs, next to tsock's train pipeline on
 * the same files, in one process.
 *
 *   tsock-bench-decode --root DIR [--repeat 3] [--batch-size 64] [--image-size 224]
 *
 * Every .JPEG/.jpg/.jpeg file under DIR is read into memory first. Then, `repeat` times each:
 *  - floor: TurboJPEG decodes every file at full size to RGB (tjDecompress2, libjpeg's default
 *    settings: accurate integer DCT, fancy upsampling, the settings PIL and tsock use), one
 *    thread; CPU time of this thread per image (CLOCK_THREAD_CPUTIME_ID around each call);
 *  - pipeline: tsock_pipeline_load over every sample of the same tree, 1 worker, train preset
 *    (RandomResizedCrop + flip), epoch = repeat number, in batches; CPU per image is the
 *    process's getrusage (user + system, so the driving thread's reads count too) over the
 *    loads divided by the images.
 * Prints one JSON object: medians over the repeats, every repeat, and the files' mean byte
 * size and dimensions. The pipeline's index build (and header check) is not in its figure.
 *
 * The pipeline reads its files from the file system (page cache after the first pass); the
 * floor decodes from memory. Both decode the same files once per repeat.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>

#include "bench_files.h"
#include "tsock/pipeline.h"
#include "tsock/tsock.h"

static double
process_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static double
wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define USAGE "usage: tsock-bench-decode --root DIR [--repeat R] [--batch-size B] [--image-size N]"

int
main(int argc, char **argv)
{
    const char *root = NULL;
    int repeat = 3, batch = 64, size = 224;
    const struct bench_opt opts[] = {{"--root", &root, NULL},
                                     {"--repeat", NULL, &repeat},
                                     {"--batch-size", NULL, &batch},
                                     {"--image-size", NULL, &size}};

    int parsed = bench_parse(argc, argv, opts, sizeof opts / sizeof *opts, USAGE);
    if (parsed != 0)
        return parsed == 1 ? 0 : 2;
    if (!root || repeat < 1 || repeat > MAX_REPEAT || batch < 1 || size < 1 || size > 8192) {
        fprintf(stderr, "%s\n", USAGE);
        return 2;
    }

    if (load_jpeg_tree("tsock-bench-decode", root) == 0)
        return 1;

    /* Header pass: dimensions, and the size of the biggest output buffer. */
    tjhandle tj = tjInitDecompress();
    if (!tj) {
        fprintf(stderr, "tsock-bench-decode: tjInitDecompress: %s\n", tjGetErrorStr());
        return 1;
    }
    size_t max_px = 0, good = 0;
    double sum_bytes = 0, sum_w = 0, sum_h = 0;
    for (size_t i = 0; i < g_count; i++) {
        struct file *f = &g_files[i];
        int sub, cs;
        if (tjDecompressHeader3(tj, f->data, (unsigned long)f->size, &f->width, &f->height, &sub,
                                &cs) != 0) {
            f->width = f->height = 0; /* not decodable: left out of the floor */
            continue;
        }
        good++;
        sum_bytes += (double)f->size;
        sum_w += f->width;
        sum_h += f->height;
        if ((size_t)f->width * (size_t)f->height > max_px)
            max_px = (size_t)f->width * (size_t)f->height;
    }
    uint8_t *rgb = malloc(max_px * 3);
    if (!rgb || good == 0) {
        fprintf(stderr, "tsock-bench-decode: nothing to decode\n");
        return 1;
    }

    /* The pipeline: opened once (index and header check are not measured). */
    tsock_pipeline *pl = NULL;
    int r = tsock_pipeline_create(&pl, TSOCK_SOURCE_FOLDER, root);
    if (r == 0)
        r = tsock_pipeline_set_workers(pl, 1);
    if (r == 0)
        r = tsock_pipeline_set_preset(pl, TSOCK_PRESET_TRAIN);
    if (r == 0)
        r = tsock_pipeline_set_image_size(pl, size);
    if (r == 0)
        r = tsock_pipeline_open(pl);
    if (r != 0) {
        fprintf(stderr, "tsock-bench-decode: pipeline: %s\n", tsock_strerror(r));
        return 1;
    }
    uint64_t samples = tsock_pipeline_samples(pl);
    uint64_t *ids = malloc((size_t)batch * sizeof *ids);
    int64_t *labels = malloc((size_t)batch * sizeof *labels);
    int64_t *indices = malloc((size_t)batch * sizeof *indices);
    uint8_t *images = malloc((size_t)batch * (size_t)size * (size_t)size * 3);
    if (!ids || !labels || !indices || !images)
        return 1;

    double floor_mean[MAX_REPEAT], floor_med[MAX_REPEAT], floor_wall[MAX_REPEAT];
    double pipe_cpu[MAX_REPEAT], pipe_wall[MAX_REPEAT];
    double *per = malloc(good * sizeof *per);
    size_t failures = 0;

    for (int rep = 0; rep < repeat; rep++) {
        /* (a) the floor */
        size_t k = 0;
        double total = 0, w0 = wall_s();
        for (size_t i = 0; i < g_count; i++) {
            struct file *f = &g_files[i];
            if (!f->width)
                continue;
            double t0 = thread_cpu_s();
            int e = tjDecompress2(tj, f->data, (unsigned long)f->size, rgb, f->width, 0, f->height,
                                  TJPF_RGB, 0);
            double dt = thread_cpu_s() - t0;
            if (e != 0 && tjGetErrorCode(tj) == TJERR_FATAL)
                failures++;
            per[k++] = dt;
            total += dt;
        }
        floor_wall[rep] = (wall_s() - w0) / (double)k;
        floor_mean[rep] = total / (double)k;
        qsort(per, k, sizeof *per, cmp_double);
        floor_med[rep] = k % 2 ? per[k / 2] : (per[k / 2 - 1] + per[k / 2]) / 2;

        /* tsock's pipeline, 1 worker, over every sample, epoch = rep */
        double c0 = process_cpu_s();
        w0 = wall_s();
        for (uint64_t first = 0; first < samples; first += (uint64_t)batch) {
            uint32_t n =
                (uint32_t)(samples - first < (uint64_t)batch ? samples - first : (uint64_t)batch);
            for (uint32_t j = 0; j < n; j++)
                ids[j] = first + j;
            r = tsock_pipeline_load(pl, (uint64_t)rep, ids, n, images, labels, indices);
            if (r < 0) {
                fprintf(stderr, "tsock-bench-decode: load: %s\n", tsock_strerror(r));
                return 1;
            }
        }
        pipe_cpu[rep] = (process_cpu_s() - c0) / (double)samples;
        pipe_wall[rep] = (wall_s() - w0) / (double)samples;
    }

    uint64_t decode_ns = 0, read_ns = 0, loaded = 0;
    tsock_pipeline_stat(pl, TSOCK_PIPELINE_DECODE_NS, &decode_ns);
    tsock_pipeline_stat(pl, TSOCK_PIPELINE_READ_WAIT_NS, &read_ns);
    tsock_pipeline_stat(pl, TSOCK_PIPELINE_SAMPLES, &loaded);

    double fm = median(floor_mean, repeat), pm = median(pipe_cpu, repeat);
    printf("{\"benchmark\": \"decode_floor\", \"root\": ");
    json_string(root);
    printf(", \"files\": %zu, "
           "\"decodable\": %zu, \"pipeline_samples\": %llu, \"repeat\": %d, "
           "\"mean_bytes\": %.0f, \"mean_width\": %.1f, \"mean_height\": %.1f, "
           "\"turbojpeg_failures\": %zu,\n",
           g_count, good, (unsigned long long)samples, repeat, sum_bytes / (double)good,
           sum_w / (double)good, sum_h / (double)good, failures);
    printf(" \"floor_cpu_ms_per_image\": %.4f, \"floor_median_image_cpu_ms\": %.4f, "
           "\"floor_wall_ms_per_image\": %.4f,\n",
           fm * 1e3, median(floor_med, repeat) * 1e3, median(floor_wall, repeat) * 1e3);
    printf(" \"pipeline_cpu_ms_per_image\": %.4f, \"pipeline_wall_ms_per_image\": %.4f, "
           "\"pipeline_decode_ms_per_image\": %.4f, \"pipeline_read_ms_per_image\": %.4f, "
           "\"pipeline_over_floor\": %.4f,\n",
           pm * 1e3, median(pipe_wall, repeat) * 1e3,
           loaded ? (double)decode_ns * 1e-6 / (double)loaded : 0.0,
           loaded ? (double)read_ns * 1e-6 / (double)loaded : 0.0, pm / fm);
    printf(" \"runs\": [");
    for (int i = 0; i < repeat; i++)
        printf("%s{\"floor_cpu_ms\": %.4f, \"floor_median_ms\": %.4f, \"pipeline_cpu_ms\": "
               "%.4f, \"pipeline_wall_ms\": %.4f}",
               i ? ", " : "", floor_mean[i] * 1e3, floor_med[i] * 1e3, pipe_cpu[i] * 1e3,
               pipe_wall[i] * 1e3);
    printf("]}\n");

    tsock_pipeline_destroy(pl);
    tjDestroy(tj);
    return 0;
}
