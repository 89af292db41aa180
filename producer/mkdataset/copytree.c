/* ImageFolder tree -> a copy of it (see copytree.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "copytree.h"
#include "formats.h"
#include "jobs.h"
#include "restarts.h"
#include "shards.h"

struct copy_job {
    const char *tree, *out;
    unsigned interval;
    const struct file_list *files;
    char **reason;      /* per file: why it was not transcoded (interval given), or NULL */
    uint64_t *size_in;  /* per file */
    uint64_t *size_out; /* per file */
    atomic_size_t next;
    struct first_error err;
};

/* Creates out/DIR for every folder DIR on the way to the file out/REL. */
static int
make_parents(const char *out, const char *rel, char *err, size_t err_size)
{
    char path[8192];
    int n = snprintf(path, sizeof path, "%s/%s", out, rel);
    for (char *slash = path + strlen(out) + 1; n > 0 && (slash = strchr(slash, '/')); slash++) {
        *slash = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, err_size, "cannot create %s: %s", path, strerror(errno));
            return -1;
        }
        *slash = '/';
    }
    return 0;
}

static void
copy_one(struct copy_job *j, size_t i, struct bytes *buf)
{
    const char *rel = j->files->paths[i];
    char src[8192], dst[8192], why[512];
    size_t size = 0;
    snprintf(src, sizeof src, "%s/%s", j->tree, rel);
    snprintf(dst, sizeof dst, "%s/%s", j->out, rel);
    uint8_t *data = read_whole_file(src, &size);
    if (!data) {
        first_error_set(&j->err, "cannot read %s: %s", src, strerror(errno));
        return;
    }
    const uint8_t *w = data;
    size_t wn = size;
    if (j->interval) {
        if (jpeg_add_restarts(data, size, j->interval, buf, why, sizeof why) == 0) {
            w = buf->p;
            wn = buf->len;
        } else if (!(j->reason[i] = strdup(why))) {
            first_error_set(&j->err, "out of memory");
        }
    }
    char msg[8400];
    if (!first_error_seen(&j->err) && write_whole(dst, w, wn, msg, sizeof msg) != 0)
        first_error_set(&j->err, "%s", msg);
    j->size_in[i] = size;
    j->size_out[i] = wn;
    free(data);
}

static void *
copy_worker(void *arg)
{
    struct copy_job *j = arg;
    struct bytes buf = {0};
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->files->n || first_error_seen(&j->err))
            break;
        copy_one(j, i, &buf);
    }
    bytes_free(&buf);
    return NULL;
}

/* Every class folder, then the folders below them that hold files. */
static int
make_folders(const char *out, const struct file_list *l, uint64_t nclasses, char *err,
             size_t err_size)
{
    for (uint64_t c = 0; c < nclasses; c++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", out, l->classes[c]);
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, err_size, "cannot create %s: %s", path, strerror(errno));
            return -1;
        }
    }
    for (size_t i = 0; i < l->n; i++)
        if (make_parents(out, l->paths[i], err, err_size) != 0)
            return -1;
    return 0;
}

/* The summary from the per-file results; the reasons move into it. */
static int
summarize(struct copy_job *j, struct copy_summary *sum)
{
    size_t n = j->files->n, skipped = 0;
    for (size_t i = 0; i < n; i++)
        skipped += j->reason[i] != NULL;
    sum->skipped = calloc(skipped ? skipped : 1, sizeof *sum->skipped);
    if (!sum->skipped)
        return -1;
    for (size_t i = 0; i < n; i++) {
        sum->files++;
        sum->bytes_in += j->size_in[i];
        sum->bytes_out += j->size_out[i];
        if (j->reason[i]) {
            struct copy_skip *s = &sum->skipped[sum->nskipped++];
            s->reason = j->reason[i];
            j->reason[i] = NULL;
            if (!(s->path = strdup(j->files->paths[i])))
                return -1;
        } else if (j->interval) {
            sum->transcoded++;
            sum->transcoded_bytes_in += j->size_in[i];
            sum->transcoded_bytes_out += j->size_out[i];
        }
    }
    return 0;
}

int
copy_tree(const char *tree, const char *out, unsigned interval, unsigned threads,
          struct copy_summary *sum, char *err, size_t err_size)
{
    struct file_list l;
    uint64_t nclasses = 0;
    struct copy_job j = {.tree = tree, .out = out, .interval = interval, .files = &l};

    *sum = (struct copy_summary){0};
    int r = list_tree_files(tree, &l, &nclasses, err, err_size);
    sum->classes = nclasses;
    if (r == 0)
        r = make_folders(out, &l, nclasses, err, err_size);
    if (r == 0) {
        j.reason = calloc(l.n, sizeof *j.reason);
        j.size_in = calloc(l.n, sizeof *j.size_in);
        j.size_out = calloc(l.n, sizeof *j.size_out);
        if (!j.reason || !j.size_in || !j.size_out) {
            snprintf(err, err_size, "out of memory");
            r = -1;
        }
    }
    if (r == 0) {
        first_error_init(&j.err);
        unsigned want = threads < l.n ? threads : (unsigned)l.n;
        pthread_t *tid = calloc(want ? want : 1, sizeof *tid);
        unsigned started = 0;
        for (; tid && started + 1 < want; started++)
            if (pthread_create(&tid[started], NULL, copy_worker, &j) != 0)
                break;
        copy_worker(&j);
        for (unsigned t = 0; t < started; t++)
            pthread_join(tid[t], NULL);
        free(tid);
        first_error_destroy(&j.err);
        if (first_error_seen(&j.err)) {
            snprintf(err, err_size, "%s", j.err.text);
            r = -1;
        } else if (summarize(&j, sum) != 0) {
            snprintf(err, err_size, "out of memory");
            r = -1;
        }
    }
    for (size_t i = 0; j.reason && i < l.n; i++)
        free(j.reason[i]);
    free(j.reason);
    free(j.size_in);
    free(j.size_out);
    file_list_free(&l, nclasses);
    return r;
}

void
copy_summary_free(struct copy_summary *sum)
{
    for (size_t i = 0; i < sum->nskipped; i++) {
        free(sum->skipped[i].path);
        free(sum->skipped[i].reason);
    }
    free(sum->skipped);
    *sum = (struct copy_summary){0};
}

/* The transcoded files' growth: bytes out / bytes in (1 when none was transcoded). */
static double
size_ratio(const struct copy_summary *sum)
{
    return sum->transcoded_bytes_in
               ? (double)sum->transcoded_bytes_out / (double)sum->transcoded_bytes_in
               : 1.0;
}

void
copy_summary_print(FILE *f, const struct copy_summary *sum, unsigned interval, int json)
{
    enum { SHOWN = 20 };
    if (json) {
        fprintf(f,
                ", \"transcoded\": %" PRIu64 ", \"transcoded_size_ratio\": %.6f"
                ", \"copied_unchanged\": %" PRIu64 ", \"not_transcoded\": [",
                sum->transcoded, size_ratio(sum), sum->files - sum->transcoded);
        for (size_t i = 0; i < sum->nskipped; i++) {
            fprintf(f, "%s{\"path\": ", i ? ", " : "");
            cli_json_string(f, sum->skipped[i].path);
            fprintf(f, ", \"reason\": ");
            cli_json_string(f, sum->skipped[i].reason);
            fprintf(f, "}");
        }
        fprintf(f, "]");
        return;
    }
    if (!interval) {
        fprintf(f, "  the files' bytes copied unchanged (no --restart-interval)\n");
        return;
    }
    fprintf(f,
            "  restart markers every %u MCUs: %" PRIu64 " of %" PRIu64 " files transcoded "
            "(%+.2f%% bytes)\n",
            interval, sum->transcoded, sum->files, 100.0 * (size_ratio(sum) - 1.0));
    if (sum->nskipped)
        fprintf(f, "  %zu files could not be transcoded and were copied unchanged:\n",
                sum->nskipped);
    for (size_t i = 0; i < sum->nskipped && i < SHOWN; i++)
        fprintf(f, "    %s: %s\n", sum->skipped[i].path, sum->skipped[i].reason);
    if (sum->nskipped > SHOWN)
        fprintf(f, "    ... and %zu more (--json lists them all)\n", sum->nskipped - SHOWN);
}
