/* tsock-bench-gpudecode: the GPU decoder against the CPU decoder on the same files and the same
 * crop parameters (issue 20), as JSON on stdout.
 *
 *   tsock-bench-gpudecode DIR [--images N] [--batch B] [--size S] [--val] [--seed X]
 *
 * Reads up to N JPEGs under DIR (recursively; photographs: tsock-mkdataset --photos trees),
 * draws each one's RandomResizedCrop + flip (or the val preset's resize and centre crop) as the
 * pipeline does, and decodes every file the device takes both ways: tsock's CPU decoder
 * (libjpeg-turbo, one thread) and the device's (nvJPEG + the resize kernel; the simulated
 * device with TSOCK_CUDA_SIM=1), in batches of B. Reports
 *  - pixels: mean absolute difference and PSNR over all the pixels, the worst image's PSNR, the
 *    largest difference, against the bounds (mean abs diff <= 1.0, PSNR >= 40 dB);
 *  - speed: images/s and CPU ms per image of each decoder (the device's: the process's CPU time
 *    while it decodes, which is parsing and driving the GPU).
 * Exits 0 when the bounds hold, 1 when they do not, 2 when it cannot run (no device, no
 * nvJPEG, no JPEG under DIR). Never part of the test run; scripts/gpu-check.sh runs it. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "backend/cuda/cuda_int.h"
#include "image/image.h"

struct file {
    uint8_t *data;
    size_t size;
    struct tsock__resize_spec spec;
    int progressive;
};

static struct file *files;
static int nfiles, max_files = 1000, batch = 64, size = 224, val = 0;
static unsigned long long seed = 1;

/* The library's warnings and errors: on stderr, and the first few in the JSON, since they say
 * what fell back (a hardware batch nvJPEG refused, a library that would not load). */
static char warnings[4][300];
static int nwarnings;

static void
on_log(void *user, int level, const char *message)
{
    fprintf(stderr, "tsock-bench-gpudecode: [%d] %s\n", level, message);
    if (level <= TSOCK_LOG_WARN && nwarnings < 4)
        snprintf(warnings[nwarnings++], sizeof warnings[0], "%s", message);
}

/* A JSON string's characters: the messages quote paths and names. */
static void
json_string(const char *s)
{
    putchar('"');
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s >= 0x20)
            putchar(*s);
    putchar('"');
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double
cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static int
is_jpeg_name(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot && (!strcasecmp(dot, ".jpeg") || !strcasecmp(dot, ".jpg"));
}

/* The crop and flip the pipeline would draw for file i. */
static int
plan(struct file *f, int i, const struct tsock__image_info *info)
{
    if (val)
        return tsock__preset_val_spec(info->width, info->height, size * 256 / 224, size, &f->spec);
    struct tsock__rng rng;
    tsock__rng_seed(&rng, tsock__mix64(seed ^ tsock__mix64((uint64_t)i)));
    struct tsock__train_params p = {size, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, 1};
    return tsock__preset_train_spec(&rng, &p, info->width, info->height, &f->spec);
}

static void
add_file(const char *path)
{
    if (nfiles >= max_files)
        return;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *d = n > 0 ? malloc((size_t)n) : NULL;
    if (!d || fread(d, 1, (size_t)n, fp) != (size_t)n) {
        free(d);
        fclose(fp);
        return;
    }
    fclose(fp);
    struct tsock__image_info info;
    struct file *f = &files[nfiles];
    /* What the pipeline would hand the device: baseline or progressive YCbCr / gray JPEGs
     * (accepts() refines this per device below). */
    if (tsock__image_probe(d, (size_t)n, &info) != 0 || info.format != TSOCK__IMAGE_JPEG ||
        (info.color != TSOCK__COLOR_YCBCR && info.color != TSOCK__COLOR_GRAY) ||
        plan(f, nfiles, &info) != 0) {
        free(d);
        return;
    }
    f->data = d;
    f->size = (size_t)n;
    f->progressive = info.progressive;
    nfiles++;
}

static void
walk(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && nfiles < max_files) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_type == DT_DIR)
            walk(path);
        else if (is_jpeg_name(e->d_name))
            add_file(path);
    }
    closedir(d);
}

/* The CPU decoder on every file: out[i] gets file i's pixels; returns the CPU seconds. */
static double
decode_cpu(uint8_t *out, size_t image_bytes, int *ok)
{
    struct tsock__decoder *dec;
    tsock__decoder_create(&dec);
    double c0 = cpu_s();
    for (int i = 0; i < nfiles; i++)
        ok[i] = tsock__decode_resize(dec, files[i].data, files[i].size, &files[i].spec,
                                     out + (size_t)i * image_bytes) == 0;
    double c = cpu_s() - c0;
    tsock__decoder_destroy(dec);
    return c;
}

struct gpu_run {
    const char *name;
    int hardware, failed;
    double wall_s, cpu_s;
};

/* The device's decoder on every file, in batches, each batch copied back into out. */
static int
decode_gpu(uint8_t *out, size_t image_bytes, int *ok, struct gpu_run *g)
{
    const struct tsock__devapi *d = tsock__dev();
    struct tsock__cuda_guard guard;
    if (tsock__cuda_device_count() < 1 || tsock__cuda_enter(0, &guard) < 0)
        return -1;
    struct tsock__dev_jpeg *j = NULL;
    const char *why = NULL;
    tsock__dev_stream_t s = NULL;
    uint8_t *dev = NULL, *host = NULL;
    int e = d->jpeg_create(&j, (uint32_t)batch, &g->hardware, &g->name, &why);
    if (e != TSOCK__DEV_OK) {
        fprintf(stderr, "tsock-bench-gpudecode: no GPU decoder: %s\n",
                e == TSOCK__DEV_NO_LIBRARY ? why : d->error_text(d->last_raw()));
        tsock__cuda_leave(&guard);
        return -1;
    }
    struct tsock__dev_jpeg_job *jobs = calloc((size_t)batch, sizeof *jobs);
    int *status = calloc((size_t)batch, sizeof *status);
    if (d->stream_create(&s) != TSOCK__DEV_OK ||
        d->malloc((void **)&dev, image_bytes * (size_t)batch) != TSOCK__DEV_OK ||
        !(host = malloc(image_bytes * (size_t)batch))) { /* pageable: no memlock needed */
        fprintf(stderr, "tsock-bench-gpudecode: device memory\n");
        return -1;
    }
    double t0 = now_s(), c0 = cpu_s(), copy_s = 0;
    for (int b = 0; b < nfiles; b += batch) {
        int n = nfiles - b < batch ? nfiles - b : batch, m = 0, at[256];
        for (int i = 0; i < n; i++) {
            const struct file *f = &files[b + i];
            if (f->progressive && g->hardware)
                continue; /* the pipeline hands those to the CPU (image/device_decoder.h) */
            const struct tsock__resize_spec *sp = &f->spec;
            jobs[m] = (struct tsock__dev_jpeg_job){f->data,          f->size,
                                                   sp->crop.x,       sp->crop.y,
                                                   sp->crop.w,       sp->crop.h,
                                                   sp->resize_w,     sp->resize_h,
                                                   sp->win_x,        sp->win_y,
                                                   sp->out_w,        sp->out_h,
                                                   sp->flip,         dev + (size_t)m * image_bytes,
                                                   (uint64_t)(b + i)};
            at[m++] = b + i;
        }
        e = d->jpeg_decode(j, jobs, (uint32_t)m, status, s);
        if (e == TSOCK__DEV_OK)
            e = d->stream_sync(s);
        if (e != TSOCK__DEV_OK) {
            fprintf(stderr, "tsock-bench-gpudecode: decode: %s\n", d->error_text(d->last_raw()));
            return -1;
        }
        /* The copy back is for the comparison only: timed apart and taken out. */
        double c = now_s();
        e = d->memcpy_async(host, dev, image_bytes * (size_t)m, TSOCK__DEV_D2H, s);
        if (e == TSOCK__DEV_OK)
            e = d->stream_sync(s);
        copy_s += now_s() - c;
        for (int k = 0; k < m; k++) {
            ok[at[k]] = status[k] == 0;
            g->failed += status[k] != 0;
            if (status[k] == 0)
                memcpy(out + (size_t)at[k] * image_bytes, host + (size_t)k * image_bytes,
                       image_bytes);
        }
    }
    g->wall_s = now_s() - t0 - copy_s;
    g->cpu_s = cpu_s() - c0;
    d->jpeg_destroy(j);
    free(host);
    d->free(dev);
    d->stream_destroy(s);
    tsock__cuda_leave(&guard);
    free(jobs);
    free(status);
    return 0;
}

int
main(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--images") && i + 1 < argc)
            max_files = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--val"))
            val = 1;
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else {
            fprintf(stderr, "usage: tsock-bench-gpudecode DIR [--images N] [--batch B] "
                            "[--size S] [--val] [--seed X]\n");
            return 2;
        }
    }
    if (!dir || max_files < 1 || batch < 1 || batch > 256 || size < 8) {
        fprintf(stderr, "usage: tsock-bench-gpudecode DIR [--images N] [--batch 1..256] "
                        "[--size S] [--val] [--seed X]\n");
        return 2;
    }
    tsock_set_log(on_log, NULL, TSOCK_LOG_INFO);
    files = calloc((size_t)max_files, sizeof *files);
    walk(dir);
    if (nfiles == 0) {
        fprintf(stderr, "tsock-bench-gpudecode: no YCbCr or grayscale JPEG under %s\n", dir);
        return 2;
    }
    size_t image_bytes = (size_t)size * (size_t)size * 3;
    uint8_t *cpu = malloc(image_bytes * (size_t)nfiles), *gpu = malloc(image_bytes * nfiles);
    int *cpu_ok = calloc((size_t)nfiles, sizeof *cpu_ok), *gpu_ok = calloc(nfiles, sizeof(int));
    double t0 = now_s();
    double cpu_cpu_s = decode_cpu(cpu, image_bytes, cpu_ok);
    double cpu_wall = now_s() - t0;
    struct gpu_run g = {0};
    if (decode_gpu(gpu, image_bytes, gpu_ok, &g) < 0)
        return 2;
    /* Pixels: over every image both decoders produced. */
    double abs_sum = 0, sq_sum = 0, worst_psnr = INFINITY;
    long long count = 0, compared = 0;
    int max_diff = 0;
    for (int i = 0; i < nfiles; i++) {
        if (!cpu_ok[i] || !gpu_ok[i])
            continue;
        const uint8_t *a = cpu + (size_t)i * image_bytes, *b = gpu + (size_t)i * image_bytes;
        double sq = 0;
        for (size_t k = 0; k < image_bytes; k++) {
            int dd = abs((int)a[k] - (int)b[k]);
            abs_sum += dd;
            sq += (double)dd * dd;
            if (dd > max_diff)
                max_diff = dd;
        }
        sq_sum += sq;
        double mse = sq / (double)image_bytes;
        double psnr = mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : INFINITY;
        if (psnr < worst_psnr)
            worst_psnr = psnr;
        count += (long long)image_bytes;
        compared++;
    }
    double mae = count ? abs_sum / (double)count : 0;
    double mse = count ? sq_sum / (double)count : 0;
    double psnr = mse > 0 ? 10 * log10(255.0 * 255.0 / mse) : 99.0;
    if (!isfinite(worst_psnr))
        worst_psnr = 99.0;
    int pass = compared > 0 && mae <= 1.0 && psnr >= 40.0;
    printf("{\"benchmark\": \"gpu_decode_pixels\", \"decoder\": \"%s\", \"hardware_engine\": %s, "
           "\"simulated_device\": %s, \"preset\": \"%s\", \"size\": %d, \"batch\": %d, "
           "\"files\": %d, \"compared\": %lld, \"gpu_failed\": %d, "
           "\"pixels\": {\"mean_abs_diff\": %.4f, \"psnr_db\": %.2f, \"worst_image_psnr_db\": "
           "%.2f, \"max_abs_diff\": %d, \"bounds\": \"mean_abs_diff <= 1.0, psnr_db >= 40\", "
           "\"pass\": %s}, "
           "\"cpu_decoder\": {\"threads\": 1, \"images_per_s\": %.1f, \"cpu_ms_per_image\": %.3f}, "
           "\"gpu_decoder\": {\"images_per_s\": %.1f, \"cpu_ms_per_image\": %.3f}, "
           "\"warnings\": [",
           g.name, g.hardware ? "true" : "false", tsock__dev_simulated() ? "true" : "false",
           val ? "val" : "train", size, batch, nfiles, compared, g.failed, mae, psnr, worst_psnr,
           max_diff, pass ? "true" : "false", nfiles / cpu_wall, 1e3 * cpu_cpu_s / nfiles,
           nfiles / g.wall_s, 1e3 * g.cpu_s / nfiles);
    for (int i = 0; i < nwarnings; i++) {
        if (i)
            fputs(", ", stdout);
        json_string(warnings[i]);
    }
    puts("]}");
    return pass ? 0 : 1;
}
