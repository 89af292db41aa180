/* tsock-mkdataset: writes an ImageNet-shaped image tree for tests, demos and benchmarks.
 *
 *   OUT/<class>/<name>.JPEG
 *
 * Classes are named like ImageNet synsets ('n' and 8 digits); train files are named
 * <class>_<number>.JPEG and val files ILSVRC2012_val_<8 digits>.JPEG, as in ImageNet once its
 * validation set is sorted into class folders. Images have ImageNet-like dimensions and
 * natural-image statistics (see mkdataset/synth.h), or are cropped from real photographs
 * (--photos), and are JPEG-encoded 4:2:0 at the given quality. With --edge-cases every class
 * also gets one file of each kind real ImageNet contains or a loader must survive: grayscale
 * JPEG, CMYK JPEG, progressive JPEG, a PNG named .JPEG, a JPEG truncated to 30% of its bytes,
 * an empty file and a text file named .JPEG. Their names look like any other; --json lists
 * them.
 *
 * The output depends only on the options (not on --threads or timing): every file derives
 * from (seed, class, position in class).
 *
 * OUT must be a new or empty directory: files of an earlier tree left among the new ones would
 * be indexed as part of it. --force empties it first.
 *
 * --restart-interval N adds restart markers every N MCUs to every regular JPEG written (a
 * lossless transcode, mkdataset/restarts.h), and --from-folder TREE converts an existing tree
 * instead of generating one: into a copy of it (--format folder, mkdataset/copytree.h) or into
 * shards (--format webdataset).
 *
 * Exit status: 0 done, 1 cannot write (OUT not empty without --force, unwritable OUT, full
 * disk), 2 bad command line.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "cli.h"
#include "copytree.h"
#include "formats.h"
#include "jobs.h"
#include "restarts.h"
#include "shards.h"
#include "synth.h"

#define PROG "tsock-mkdataset"
#define MAX_IMAGES 100000000ull
#define MAX_CLASSES 100000ull
#define MAX_THREADS 256ull
#define MAX_PHOTOS 256
/* Photographs are decoded at most this large (TurboJPEG's DCT scaling brings them down). */
#define MAX_PHOTO_SIDE 2048

enum kind {
    K_IMAGE = 0,
    K_GRAY,
    K_CMYK,
    K_PROGRESSIVE,
    K_PNG,
    K_TRUNCATED,
    K_EMPTY,
    K_TEXT,
    K_COUNT
};
static const char *const kind_name[K_COUNT] = {"image", "grayscale", "cmyk",  "progressive",
                                               "png",   "truncated", "empty", "not_image"};
static const char *const kind_text[K_COUNT] = {
    "images",          "grayscale JPEG", "CMYK JPEG",   "progressive JPEG",
    "PNG named .JPEG", "truncated JPEG", "empty files", "non-image files"};

struct options {
    const char *out;
    uint64_t images, classes, seed, quality, threads;
    int edge_cases, json, val;
    int force; /* --force: empty a non-empty OUT first */
    const char *photos;
    int webdataset;            /* --format webdataset: OUT gets tar shards, not a tree */
    uint64_t shard_samples;    /* --shard-samples */
    const char *from_folder;   /* --from-folder TREE: convert TREE instead of generating */
    const char *shards_out;    /* with --format webdataset: where the shards go (o.out is then
                                * the temporary tree) */
    unsigned restart_interval; /* --restart-interval: MCUs per restart interval, 0 = none */
    const char *generating;    /* the first option given that only generating uses, or NULL */
};

/* One file to write, and what was written. */
struct item {
    uint32_t cls;
    uint32_t pos;    /* position in its class */
    uint32_t number; /* the number in its file name */
    uint8_t kind;
    int width, height;
    uint64_t bytes;
};

struct job {
    const struct options *opt;
    char **class_names;
    struct item *items;
    size_t count;
    struct synth_photo *photos;
    size_t nphotos;
    atomic_size_t next;
    struct first_error err;
};

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " OUT [options]\n"
            "\n"
            "Writes an ImageNet-shaped tree OUT/<class>/<name>.JPEG of synthetic photographs.\n"
            "\n"
            "  --images N         regular images in all, spread evenly over the classes\n"
            "                     (default 1000)\n"
            "  --classes K        class directories (default 10)\n"
            "  --edge-cases       add to every class one grayscale, one CMYK and one progressive\n"
            "                     JPEG, a PNG named .JPEG, a truncated JPEG, an empty file and a\n"
            "                     text file named .JPEG\n"
            "  --seed S           everything derives from it (default 0)\n"
            "  --quality Q        JPEG quality 1..100 (default 90)\n"
            "  --split train|val  file names as in ImageNet's train or val set (default train)\n"
            "  --photos DIR       crop the images from the JPEG photographs found under DIR\n"
            "                     (e.g. /usr/share/backgrounds) instead of synthesizing them\n"
            "  --threads N        worker threads (default: one per CPU); does not change the "
            "output\n"
            "  --json             print the summary as JSON, edge-case files listed\n"
            "  --force            OUT may hold files: delete everything in it first (without\n"
            "                     it, a non-empty OUT is refused)\n"
            "  --format folder|webdataset\n"
            "                     folder (default): the tree above; webdataset: the same\n"
            "                     images as WebDataset tar shards OUT/<split>-000000.tar ...\n"
            "                     (KEY.jpeg + KEY.cls per sample, labels in torchvision's class\n"
            "                     numbering) and OUT/_info.json listing them (timm's layout)\n"
            "  --shard-samples N  samples per shard (default 1000)\n"
            "  --from-folder TREE convert the ImageFolder tree TREE instead of generating\n"
            "                     images: into shards in OUT (--format webdataset) or into a\n"
            "                     copy of it in OUT (--format folder: its image files at the\n"
            "                     same paths; unchanged unless --restart-interval is given)\n"
            "  --restart-interval N\n"
            "                     add a restart marker every N MCUs (1..65535; 0, the default:\n"
            "                     none) to every regular JPEG written, by a lossless transcode\n"
            "                     (the same pixels, checked), so that a decoder can decode a crop\n"
            "                     without decoding the whole image first. With --from-folder, a\n"
            "                     file that cannot be transcoded (not a JPEG, corrupt) is copied\n"
            "                     unchanged and listed; --edge-cases files are left as they are\n"
            "  --help             show this help\n"
            "\n"
            "OUT must be a new or empty directory (see --force).\n"
            "Exit status: 0 done, 1 cannot write or OUT not empty, 2 bad usage.\n");
}

static void
parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longs[] = {{"images", required_argument, NULL, 'i'},
                                          {"classes", required_argument, NULL, 'c'},
                                          {"edge-cases", no_argument, NULL, 'e'},
                                          {"seed", required_argument, NULL, 's'},
                                          {"quality", required_argument, NULL, 'q'},
                                          {"split", required_argument, NULL, 'p'},
                                          {"photos", required_argument, NULL, 'P'},
                                          {"threads", required_argument, NULL, 't'},
                                          {"json", no_argument, NULL, 'j'},
                                          {"force", no_argument, NULL, 'f'},
                                          {"format", required_argument, NULL, 'F'},
                                          {"shard-samples", required_argument, NULL, 'S'},
                                          {"from-folder", required_argument, NULL, 'T'},
                                          {"restart-interval", required_argument, NULL, 'R'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    *o = (struct options){.images = 1000,
                          .classes = 10,
                          .quality = 90,
                          .threads = cpus < 1 ? 1 : (uint64_t)cpus,
                          .shard_samples = 1000};
    if (o->threads > MAX_THREADS)
        o->threads = MAX_THREADS;
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":", longs, NULL);
        if (c == -1)
            break;
        for (const struct option *l = longs; !o->generating && l->name && strchr("icesqP", c); l++)
            if (l->val == c)
                o->generating = l->name;
        switch (c) {
        case 'i': o->images = cli_parse_u64("images", optarg, 0, MAX_IMAGES); break;
        case 'c': o->classes = cli_parse_u64("classes", optarg, 1, MAX_CLASSES); break;
        case 'e': o->edge_cases = 1; break;
        case 's': o->seed = cli_parse_u64("seed", optarg, 0, UINT64_MAX); break;
        case 'q': o->quality = cli_parse_u64("quality", optarg, 1, 100); break;
        case 'p':
            if (strcmp(optarg, "train") == 0)
                o->val = 0;
            else if (strcmp(optarg, "val") == 0)
                o->val = 1;
            else
                cli_bad_usage("--split: '%s' is not a valid value (expected train or val)", optarg);
            break;
        case 'P': o->photos = optarg; break;
        case 't': o->threads = cli_parse_u64("threads", optarg, 1, MAX_THREADS); break;
        case 'j': o->json = 1; break;
        case 'f': o->force = 1; break;
        case 'F':
            if (strcmp(optarg, "folder") == 0)
                o->webdataset = 0;
            else if (strcmp(optarg, "webdataset") == 0)
                o->webdataset = 1;
            else
                cli_bad_usage("--format: '%s' is not a valid value (expected folder or "
                              "webdataset)",
                              optarg);
            break;
        case 'S': o->shard_samples = cli_parse_u64("shard-samples", optarg, 1, 100000000); break;
        case 'T': o->from_folder = optarg; break;
        case 'R':
            o->restart_interval =
                (unsigned)cli_parse_u64("restart-interval", optarg, 0, RESTART_INTERVAL_MAX);
            break;
        case 'h': usage(stdout); exit(0);
        case ':': cli_bad_usage("option '%s' needs a value", argv[optind - 1]); break;
        default:
            /* getopt_long has moved past the option; OUT may have been permuted before it. */
            cli_bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        cli_bad_usage("missing the output directory OUT");
    if (optind + 1 < argc)
        cli_bad_usage("unexpected argument '%s' (only one OUT directory)", argv[optind + 1]);
    o->out = argv[optind];
    if (!o->out[0])
        cli_bad_usage("OUT must not be empty");
    if (o->images == 0 && !o->edge_cases && !o->from_folder)
        cli_bad_usage("--images: 0 images and no --edge-cases: nothing to write");
    if (o->from_folder && !o->from_folder[0])
        cli_bad_usage("--from-folder: the value must not be empty");
    if (o->from_folder && o->generating)
        cli_bad_usage("--%s does not apply with --from-folder, which converts TREE's images "
                      "(--images, --classes, --edge-cases, --seed, --quality and --photos "
                      "shape generated images only)",
                      o->generating);
    struct stat st;
    if (o->from_folder && (stat(o->from_folder, &st) != 0 || !S_ISDIR(st.st_mode)))
        cli_bad_usage("--from-folder: '%s' is not a directory (expected an ImageFolder tree "
                      "TREE/<class>/<image>)",
                      o->from_folder);
}

/* ---- shards -------------------------------------------------------------------------------- */

static int
remove_tree_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    return (type == FTW_DP ? rmdir(path) : unlink(path)) != 0;
}

/* Writes the tree at `tree` as shards into o->shards_out and prints a summary (with `conv`,
 * that of the conversion the tree came from). Returns the exit status. */
static int
make_shards(const struct options *o, const char *tree, const struct copy_summary *conv)
{
    struct shard_summary sum;
    char err[1024];
    const char *prefix = o->val ? "val" : "train";
    double t0 = now_s();
    if (write_shards(tree, o->shards_out, prefix, o->val ? "validation" : "train", o->shard_samples,
                     &sum, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    if (o->json)
        printf("{\"format\": \"webdataset\", \"shards\": %" PRIu64 ", \"samples\": %" PRIu64
               ", \"classes\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"pattern\": ",
               sum.shards, sum.samples, sum.classes, sum.bytes);
    else
        printf(PROG ": wrote %" PRIu64 " samples of %" PRIu64 " classes as %" PRIu64
                    " shards in %.2f s: ",
               sum.samples, sum.classes, sum.shards, now_s() - t0);
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s/%s-{000000..%06" PRIu64 "}.tar", o->shards_out, prefix,
             sum.shards - 1);
    if (o->json) {
        cli_json_string(stdout, pattern);
        printf(", \"restart_interval\": %u", o->restart_interval);
        if (conv)
            copy_summary_print(stdout, conv, o->restart_interval, 1);
        printf("}\n");
    } else {
        printf("%s\n", pattern);
        if (conv)
            copy_summary_print(stdout, conv, o->restart_interval, 0);
        else if (o->restart_interval)
            printf("  restart markers every %u MCUs in the regular images\n", o->restart_interval);
    }
    return 0;
}

static long count_entries(const char *dir, char *first, size_t first_size);

/* The absolute path `p` names (its last component need not exist yet). Returns 0 or -1. */
static int
absolute_path(const char *p, char *buf, size_t size)
{
    char real[PATH_MAX], parent[PATH_MAX];
    if (realpath(p, real))
        return snprintf(buf, size, "%s", real) < (int)size ? 0 : -1;
    const char *slash = strrchr(p, '/');
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - p) : 1, slash ? p : ".");
    if (!realpath(parent[0] ? parent : "/", real))
        return -1;
    return snprintf(buf, size, "%s/%s", real, slash ? slash + 1 : p) < (int)size ? 0 : -1;
}

/* Whether `inner` is `outer` or below it (absolute paths). */
static int
path_within(const char *inner, const char *outer)
{
    size_t n = strlen(outer);
    return strncmp(inner, outer, n) == 0 && (inner[n] == '\0' || inner[n] == '/' || n == 1);
}

/* --from-folder TREE and OUT must not overlap: OUT inside TREE would become one of its class
 * folders, and --force would delete a TREE inside OUT. Bad usage -> exit 2. */
static void
check_from_folder_paths(const struct options *o)
{
    char tree[PATH_MAX + 256], out[PATH_MAX + 256];
    if (absolute_path(o->from_folder, tree, sizeof tree) != 0 ||
        absolute_path(o->out, out, sizeof out) != 0)
        return; /* the copy reports what cannot be read or created */
    if (path_within(out, tree))
        cli_bad_usage("OUT %s is inside --from-folder %s: the copy would become part of the "
                      "tree it copies; give an OUT outside it",
                      o->out, o->from_folder);
    if (path_within(tree, out))
        cli_bad_usage("--from-folder %s is inside OUT %s, which must be new or empty (and "
                      "--force would delete it); give an OUT outside it",
                      o->from_folder, o->out);
}

/* --from-folder: TREE copied into OUT (--format folder), or packed into shards in OUT
 * (--format webdataset); with --restart-interval, packed from a transcoded copy in a hidden
 * folder of OUT, removed afterwards. Returns the exit status. */
static int
convert_folder(const struct options *o)
{
    struct copy_summary sum;
    char err[1024], tree[4200];
    const char *dst = o->out;
    int status = 0;

    if (o->webdataset && !o->restart_interval)
        return make_shards(o, o->from_folder, NULL);
    if (o->webdataset) {
        snprintf(tree, sizeof tree, "%s/.tsock-mkdataset-tree", o->out);
        if (mkdir(tree, 0755) != 0) {
            fprintf(stderr, PROG ": cannot create %s: %s\n", tree, strerror(errno));
            return 1;
        }
        dst = tree;
    }
    double t0 = now_s();
    if (copy_tree(o->from_folder, dst, o->restart_interval, (unsigned)o->threads, &sum, err,
                  sizeof err) != 0) {
        char first[256];
        fprintf(stderr, PROG ": %s%s\n", err,
                !o->webdataset && count_entries(o->out, first, sizeof first) > 0
                    ? " (OUT holds a partial copy: rerun with --force)"
                    : "");
        status = 1;
    } else if (o->webdataset) {
        status = make_shards(o, dst, &sum);
    } else if (o->json) {
        printf("{\"format\": \"folder\", \"out\": ");
        cli_json_string(stdout, o->out);
        printf(", \"from_folder\": ");
        cli_json_string(stdout, o->from_folder);
        printf(", \"classes\": %" PRIu64 ", \"files\": %" PRIu64 ", \"bytes\": %" PRIu64
               ", \"source_bytes\": %" PRIu64 ", \"seconds\": %.3f, \"restart_interval\": %u",
               sum.classes, sum.files, sum.bytes_out, sum.bytes_in, now_s() - t0,
               o->restart_interval);
        copy_summary_print(stdout, &sum, o->restart_interval, 1);
        printf("}\n");
    } else {
        printf(PROG ": copied %" PRIu64 " files (%.1f MB) of %" PRIu64 " classes from %s to %s "
                    "in %.2f s\n",
               sum.files, (double)sum.bytes_out / 1e6, sum.classes, o->from_folder, o->out,
               now_s() - t0);
        copy_summary_print(stdout, &sum, o->restart_interval, 0);
    }
    if (o->webdataset)
        nftw(tree, remove_tree_entry, 32, FTW_DEPTH | FTW_PHYS);
    copy_summary_free(&sum);
    return status;
}

/* ---- the output directory ------------------------------------------------------------------ */

static int
remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    if (ftw->level == 0)
        return 0; /* OUT itself stays */
    if ((type == FTW_DP ? rmdir(path) : unlink(path)) != 0) {
        fprintf(stderr, PROG ": --force: cannot remove %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* The number of entries in directory `dir` (0 when empty), -1 when it cannot be read; the
 * first one's name goes to `first`. */
static long
count_entries(const char *dir, char *first, size_t first_size)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (n++ == 0)
            snprintf(first, first_size, "%s", e->d_name);
    }
    closedir(d);
    return n;
}

/* OUT must be new or an empty directory: files of an earlier tree (other classes, other
 * images) left among the new ones would be indexed as part of it. With --force its contents
 * are deleted first (symbolic links inside are removed, never followed). Returns 0, or 1
 * after saying why. */
static int
prepare_out(const struct options *o)
{
    struct stat st;
    if (stat(o->out, &st) != 0) {
        if (errno == ENOENT)
            return 0; /* created below */
        fprintf(stderr, PROG ": cannot use %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, PROG ": cannot create %s: exists and is not a directory\n", o->out);
        return 1;
    }
    char first[256] = "";
    long n = count_entries(o->out, first, sizeof first);
    if (n < 0) {
        fprintf(stderr, PROG ": cannot read %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    if (n == 0)
        return 0;
    if (!o->force) {
        fprintf(stderr,
                PROG ": %s is not empty (%ld entries, such as '%s'): the new tree would be mixed "
                     "with what is there. Give a new or empty directory, or add --force to delete "
                     "its contents first\n",
                o->out, n, first);
        return 1;
    }
    char real[PATH_MAX];
    if (!realpath(o->out, real)) {
        fprintf(stderr, PROG ": cannot resolve %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    if (strcmp(real, "/") == 0) {
        fprintf(stderr, PROG ": --force: refusing to empty the root directory\n");
        return 1;
    }
    if (nftw(real, remove_entry, 32, FTW_DEPTH | FTW_PHYS) != 0)
        return 1;
    if (count_entries(real, first, sizeof first) != 0) {
        fprintf(stderr, PROG ": --force: %s could not be emptied\n", o->out);
        return 1;
    }
    return 0;
}

/* ---- photographs -------------------------------------------------------------------------- */

static struct synth_photo *g_photos;
static size_t g_nphotos;
static char **g_photo_paths;
static size_t g_nphoto_paths;

static int
collect_photo(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)ftw;
    size_t n = strlen(path);
    if (type != FTW_F || !S_ISREG(st->st_mode) || g_nphoto_paths >= 4 * MAX_PHOTOS)
        return 0;
    if ((n > 4 && strcasecmp(path + n - 4, ".jpg") == 0) ||
        (n > 5 && strcasecmp(path + n - 5, ".jpeg") == 0)) {
        char **p = realloc(g_photo_paths, (g_nphoto_paths + 1) * sizeof *p);
        if (!p)
            return 1;
        g_photo_paths = p;
        g_photo_paths[g_nphoto_paths++] = strdup(path);
    }
    return 0;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Decodes the photographs under dir (sorted by path, so the choice of photo per image does
 * not depend on the file system's order). Bad option -> exit 2. */
static void
load_photos(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        cli_bad_usage("--photos: '%s' is not a directory", dir);
    nftw(dir, collect_photo, 32, FTW_PHYS);
    qsort(g_photo_paths, g_nphoto_paths, sizeof *g_photo_paths, cmp_str);
    tjhandle tj = tjInitDecompress();
    int nsf = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&nsf);
    for (size_t i = 0; i < g_nphoto_paths && g_nphotos < MAX_PHOTOS; i++) {
        size_t size;
        uint8_t *jpeg = read_whole_file(g_photo_paths[i], &size);
        int w, h, subsamp, cs;
        if (!jpeg)
            continue;
        if (tjDecompressHeader3(tj, jpeg, size, &w, &h, &subsamp, &cs) == 0 && cs != TJCS_CMYK &&
            cs != TJCS_YCCK && w >= 64 && h >= 64) {
            /* Decoded at the largest DCT scaling (1/8..1, never up) that fits the limit. */
            int sw = 0, sh = 0;
            for (int k = 0; k < nsf; k++) {
                int tw = TJSCALED(w, sf[k]), th = TJSCALED(h, sf[k]);
                if (sf[k].num <= sf[k].denom && tw <= MAX_PHOTO_SIDE && th <= MAX_PHOTO_SIDE &&
                    tw > sw) {
                    sw = tw;
                    sh = th;
                }
            }
            if (sw > 0) {
                uint8_t *rgb = malloc((size_t)sw * sh * 3);
                if (rgb && tjDecompress2(tj, jpeg, size, rgb, sw, 0, sh, TJPF_RGB, 0) == 0) {
                    struct synth_photo *p = realloc(g_photos, (g_nphotos + 1) * sizeof *p);
                    if (p) {
                        g_photos = p;
                        g_photos[g_nphotos++] = (struct synth_photo){sw, sh, rgb};
                        rgb = NULL;
                    }
                }
                free(rgb);
            }
        }
        free(jpeg);
    }
    tjDestroy(tj);
    if (g_nphotos == 0)
        cli_bad_usage("--photos: no decodable RGB or grayscale JPEG photograph under '%s'", dir);
}

/* ---- writing ------------------------------------------------------------------------------ */

static void
file_name(const struct job *j, const struct item *it, char *buf, size_t size)
{
    if (j->opt->val)
        snprintf(buf, size, "%s/%s/ILSVRC2012_val_%08u.JPEG", j->opt->out, j->class_names[it->cls],
                 it->number);
    else
        snprintf(buf, size, "%s/%s/%s_%u.JPEG", j->opt->out, j->class_names[it->cls],
                 j->class_names[it->cls], it->number);
}

/* Writes a file whole (a full disk leaves no partial file); the pool's first error says why. */
static int
write_file(struct job *j, const char *path, const uint8_t *p, size_t n)
{
    char msg[8400];
    if (write_whole(path, p, n, msg, sizeof msg) == 0)
        return 0;
    first_error_set(&j->err, "%s", msg);
    return -1;
}

static const char not_an_image[] =
    "This file is not an image. tsock-mkdataset wrote it, named like a JPEG, so that data\n"
    "loaders can show they report such files instead of failing.\n";

static void *
worker(void *arg)
{
    struct job *j = arg;
    tjhandle tj = tjInitCompress();
    struct synth_scratch scratch = {0};
    struct bytes buf = {0}, marked = {0};
    uint8_t *rgb = NULL;
    size_t rgb_cap = 0;
    char err[256], path[4096];

    if (!tj) {
        first_error_set(&j->err, "cannot initialize TurboJPEG: %s", tjGetErrorStr2(NULL));
        return NULL;
    }
    while (!first_error_seen(&j->err)) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->count)
            break;
        struct item *it = &j->items[i];
        uint64_t seed = synth_mix(j->opt->seed ^ synth_mix(((uint64_t)it->cls << 32) | it->pos));
        struct synth_rng g = {seed};
        const uint8_t *data = NULL;
        size_t len = 0;

        file_name(j, it, path, sizeof path);
        if (it->kind != K_EMPTY && it->kind != K_TEXT) {
            synth_dims(&g, &it->width, &it->height);
            size_t need = (size_t)it->width * it->height * 3;
            if (need > rgb_cap) {
                free(rgb);
                rgb = malloc(need);
                rgb_cap = rgb ? need : 0;
            }
            if (!rgb) {
                first_error_set(&j->err, "out of memory");
                break;
            }
            if (j->nphotos)
                synth_from_photo(synth_next(&g), j->photos, j->nphotos, it->width, it->height, rgb);
            else if (synth_image(synth_next(&g), it->width, it->height, rgb, &scratch) != 0) {
                first_error_set(&j->err, "out of memory");
                break;
            }
            int r;
            if (it->kind == K_PNG)
                r = encode_png(rgb, it->width, it->height, &buf, err, sizeof err);
            else
                r = encode_jpeg(tj, rgb, it->width, it->height, (int)j->opt->quality,
                                it->kind == K_GRAY          ? JPEG_GRAY
                                : it->kind == K_CMYK        ? JPEG_CMYK
                                : it->kind == K_PROGRESSIVE ? JPEG_PROGRESSIVE
                                                            : JPEG_BASELINE,
                                &buf, err, sizeof err);
            if (r != 0) {
                first_error_set(&j->err, "%s: %s", path, err);
                break;
            }
            data = buf.p;
            len = it->kind == K_TRUNCATED ? jpeg_truncation_point(buf.p, buf.len, 0.30) : buf.len;
            /* Only the regular images: the edge cases exist to be odd. */
            if (it->kind == K_IMAGE && j->opt->restart_interval) {
                if (jpeg_add_restarts(buf.p, buf.len, j->opt->restart_interval, &marked, err,
                                      sizeof err) != 0) {
                    first_error_set(&j->err, "%s: %s", path, err);
                    break;
                }
                data = marked.p;
                len = marked.len;
            }
        } else if (it->kind == K_TEXT) {
            data = (const uint8_t *)not_an_image;
            len = sizeof not_an_image - 1;
        }
        if (write_file(j, path, data, len) != 0)
            break;
        it->bytes = len;
    }
    free(rgb);
    bytes_free(&buf);
    bytes_free(&marked);
    synth_scratch_free(&scratch);
    tjDestroy(tj);
    return NULL;
}

/* ---- plan and summary --------------------------------------------------------------------- */

/* Class names like ImageNet's synset ids: 'n' and 8 digits, increasing, spaced irregularly. */
static char **
make_class_names(const struct options *o)
{
    char **names = calloc(o->classes, sizeof *names);
    uint64_t id = 1440764;
    for (uint64_t c = 0; names && c < o->classes; c++) {
        names[c] = malloc(16);
        if (!names[c])
            return NULL;
        snprintf(names[c], 16, "n%08u", (unsigned)(id % 100000000u));
        id += 1 + synth_mix(o->seed ^ (c + 0xC1A55)) % 9000;
    }
    return names;
}

/* Creates OUT; an existing directory is fine. Returns 0, or 1 after saying why. */
static int
make_out_dir(const char *out)
{
    struct stat st;
    if (mkdir(out, 0755) == 0 || (errno == EEXIST && stat(out, &st) == 0 && S_ISDIR(st.st_mode)))
        return 0;
    fprintf(stderr, PROG ": cannot create %s: %s\n", out, strerror(errno));
    return 1;
}

int
main(int argc, char **argv)
{
    cli_init(PROG);
    struct options o;
    struct job j;
    uint64_t per_kind[K_COUNT] = {0};

    parse_options(argc, argv, &o);
    if (o.from_folder)
        check_from_folder_paths(&o);
    if (prepare_out(&o) != 0)
        return 1;
    if (o.from_folder) {
        o.shards_out = o.out;
        if (make_out_dir(o.out) != 0)
            return 1;
        return convert_folder(&o);
    }
    if (o.webdataset) {
        /* The images are written as a tree in a hidden folder of OUT, then packed. */
        static char tree[4200];
        o.shards_out = o.out;
        if (make_out_dir(o.out) != 0)
            return 1;
        snprintf(tree, sizeof tree, "%s/.tsock-mkdataset-tree", o.out);
        o.out = tree;
        o.json = 0; /* the summary is the shards' */
    }
    if (o.photos)
        load_photos(o.photos);

    memset(&j, 0, sizeof j);
    j.opt = &o;
    j.photos = g_photos;
    j.nphotos = g_nphotos;
    first_error_init(&j.err);
    j.class_names = make_class_names(&o);
    uint64_t edge = o.edge_cases ? K_COUNT - 1 : 0;
    j.count = (size_t)(o.images + edge * o.classes);
    j.items = calloc(j.count ? j.count : 1, sizeof *j.items);
    if (!j.class_names || !j.items) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }

    /* Plan: class c holds images/classes regular images (the first images % classes one
     * more), then its edge cases. */
    size_t at = 0;
    for (uint64_t c = 0; c < o.classes; c++) {
        uint64_t n = o.images / o.classes + (c < o.images % o.classes);
        uint32_t number = 1000 + (uint32_t)(synth_mix(o.seed ^ (c << 20)) % 9000);
        for (uint64_t k = 0; k < n + edge; k++) {
            struct item *it = &j.items[at++];
            it->cls = (uint32_t)c;
            it->pos = (uint32_t)k;
            it->kind = (uint8_t)(k < n ? K_IMAGE : K_GRAY + (k - n));
            /* Increasing, with gaps, as ImageNet's numbers are. */
            number += 1 + (uint32_t)(synth_mix(o.seed ^ (c << 32) ^ k) % 4);
            it->number = number;
        }
    }
    if (o.val) {
        /* Val files are numbered 1..count across classes in a seeded random order. */
        uint32_t *perm = malloc(j.count * sizeof *perm);
        if (!perm) {
            fprintf(stderr, PROG ": out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < j.count; i++)
            perm[i] = (uint32_t)i;
        struct synth_rng g = {synth_mix(o.seed ^ 0x7A1)};
        for (size_t i = j.count; i > 1; i--) {
            size_t k = (size_t)(synth_next(&g) % i);
            uint32_t t = perm[i - 1];
            perm[i - 1] = perm[k];
            perm[k] = t;
        }
        for (size_t i = 0; i < j.count; i++)
            j.items[i].number = perm[i] + 1;
        free(perm);
    }

    /* Directories. */
    struct stat st;
    if (mkdir(o.out, 0755) != 0 &&
        !(errno == EEXIST && stat(o.out, &st) == 0 && S_ISDIR(st.st_mode))) {
        fprintf(stderr, PROG ": cannot create %s: %s\n", o.out,
                errno == EEXIST ? "exists and is not a directory" : strerror(errno));
        return 1;
    }
    for (uint64_t c = 0; c < o.classes; c++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", o.out, j.class_names[c]);
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, PROG ": cannot create %s: %s\n", path, strerror(errno));
            return 1;
        }
    }

    double t0 = now_s();
    uint64_t threads = o.threads < j.count ? o.threads : (j.count ? j.count : 1);
    pthread_t *tid = calloc(threads, sizeof *tid);
    uint64_t started = 0;
    for (; tid && started + 1 < threads; started++)
        if (pthread_create(&tid[started], NULL, worker, &j) != 0)
            break;
    worker(&j);
    for (uint64_t i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    free(tid);
    first_error_destroy(&j.err);
    double seconds = now_s() - t0;
    if (first_error_seen(&j.err)) {
        char first[256];
        /* a failed file is removed (write_whole); the ones written before it stay */
        fprintf(stderr, PROG ": %s%s\n", j.err.text,
                !o.webdataset && count_entries(o.out, first, sizeof first) > 0
                    ? " (OUT holds a partial tree: rerun with --force)"
                    : "");
        if (o.webdataset)
            nftw(o.out, remove_tree_entry, 32, FTW_DEPTH | FTW_PHYS);
        return 1;
    }

    uint64_t total_bytes = 0, img_bytes = 0, sum_w = 0, sum_h = 0;
    for (size_t i = 0; i < j.count; i++) {
        const struct item *it = &j.items[i];
        per_kind[it->kind]++;
        total_bytes += it->bytes;
        if (it->kind == K_IMAGE) {
            img_bytes += it->bytes;
            sum_w += (uint64_t)it->width;
            sum_h += (uint64_t)it->height;
        }
    }
    uint64_t n = per_kind[K_IMAGE] ? per_kind[K_IMAGE] : 1;
    double mean_w = (double)sum_w / n, mean_h = (double)sum_h / n;
    double mean_bytes = (double)img_bytes / n;
    double rate = seconds > 0 ? (double)j.count / seconds : 0;

    if (o.json) {
        printf("{\"out\": ");
        cli_json_string(stdout, o.out);
        printf(", \"split\": \"%s\", \"seed\": %" PRIu64 ", \"quality\": %" PRIu64
               ", \"classes\": %" PRIu64 ", \"images\": %" PRIu64 ", \"files\": %zu"
               ", \"total_bytes\": %" PRIu64 ", \"mean_width\": %.1f, \"mean_height\": %.1f"
               ", \"mean_bytes\": %.0f, \"source\": \"%s\", \"threads\": %" PRIu64
               ", \"seconds\": %.3f, \"files_per_second\": %.1f, \"restart_interval\": %u",
               o.val ? "val" : "train", o.seed, o.quality, o.classes, per_kind[K_IMAGE], j.count,
               total_bytes, mean_w, mean_h, mean_bytes, j.nphotos ? "photos" : "synthetic", threads,
               seconds, rate, o.restart_interval);
        printf(", \"edge_cases\": {");
        for (int k = K_GRAY; k < K_COUNT; k++) {
            printf("%s\"%s\": [", k == K_GRAY ? "" : ", ", kind_name[k]);
            int first = 1;
            for (size_t i = 0; i < j.count; i++) {
                if (j.items[i].kind != k)
                    continue;
                char path[4096];
                file_name(&j, &j.items[i], path, sizeof path);
                /* Relative to OUT, as a loader's index reports them. */
                printf("%s", first ? "" : ", ");
                cli_json_string(stdout, path + strlen(o.out) + 1);
                first = 0;
            }
            printf("]");
        }
        printf("}}\n");
    } else if (!o.webdataset) {
        printf(PROG ": wrote %zu files (%.1f MB) in %" PRIu64 " classes to %s in %.2f s "
                    "(%.0f files/s, %" PRIu64 " threads)\n",
               j.count, (double)total_bytes / 1e6, o.classes, o.out, seconds, rate, threads);
        printf("  %" PRIu64 " %s images, %s split, seed %" PRIu64 ", quality %" PRIu64
               ": mean %.0f x %.0f px, mean %.1f KB\n",
               per_kind[K_IMAGE], j.nphotos ? "photo-cropped" : "synthetic",
               o.val ? "val" : "train", o.seed, o.quality, mean_w, mean_h, mean_bytes / 1e3);
        if (o.edge_cases) {
            printf("  edge cases:");
            for (int k = K_GRAY; k < K_COUNT; k++)
                printf("%s %" PRIu64 " %s", k == K_GRAY ? "" : ",", per_kind[k], kind_text[k]);
            printf("\n");
        }
        if (o.restart_interval)
            printf("  restart markers every %u MCUs in the %" PRIu64 " images\n",
                   o.restart_interval, per_kind[K_IMAGE]);
    }
    int status = 0;
    if (o.webdataset) {
        status = make_shards(&o, o.out, NULL);
        nftw(o.out, remove_tree_entry, 32, FTW_DEPTH | FTW_PHYS);
    }
    for (uint64_t c = 0; c < o.classes; c++)
        free(j.class_names[c]);
    free(j.class_names);
    free(j.items);
    for (size_t i = 0; i < g_nphotos; i++)
        free(g_photos[i].rgb);
    free(g_photos);
    for (size_t i = 0; i < g_nphoto_paths; i++)
        free(g_photo_paths[i]);
    free(g_photo_paths);
    return status;
}
