/* WebDataset shards: the tar index parser on archives built here byte by byte (ustar with a
 * prefix, GNU long names, PAX records, global headers, directories), every bad-input case the
 * parser names (bad checksum, truncated header, data past the end, no image, no label, bad
 * label, duplicate key, duplicate member, empty image), SPEC resolution (brace patterns,
 * directories with and without a timm info file, list files), the shard index on real files
 * with its cache, and the shard-ordered sampler (exact, window by window). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "check.h"
#include "dataset/index.h"
#include "dataset/index_cache.h"
#include "dataset/sampler.h"
#include "dataset/shards.h"
#include "dataset/tar.h"
#include "scratch.h"
#include "tsock/tsock.h"

/* ---- building archives ------------------------------------------------------------------ */

struct tarbuf {
    uint8_t *p;
    size_t len, cap;
};

static void
put(struct tarbuf *t, const void *data, size_t n)
{
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2 + 4096;
        t->p = realloc(t->p, t->cap);
    }
    memcpy(t->p + t->len, data, n);
    t->len += n;
}

static void
pad(struct tarbuf *t)
{
    static const uint8_t zero[512];
    put(t, zero, (512 - t->len % 512) % 512);
}

/* v as `width - 1` octal digits and a NUL, written digit by digit (snprintf with a field that
 * GCC at -O3 cannot prove fits is a -Wformat-truncation error). */
static void
octal(uint8_t *dst, size_t width, uint64_t v)
{
    dst[width - 1] = 0;
    for (size_t i = width - 1; i-- > 0; v >>= 3)
        dst[i] = (uint8_t)('0' + (v & 7));
}

/* A header; `prefix` (ustar) may be NULL. signed_sum: the old signed-byte checksum. */
static void
header(struct tarbuf *t, const char *name, const char *prefix, uint64_t size, char type,
       int signed_sum)
{
    uint8_t h[512] = {0};
    strncpy((char *)h, name, 100);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    octal(h + 124, 12, size & 077777777777ull);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    if (prefix)
        strncpy((char *)h + 345, prefix, 155);
    if (signed_sum)
        h[300] = 0xE9; /* a byte whose signed and unsigned sums differ */
    memset(h + 148, ' ', 8);
    long sum = 0;
    for (int i = 0; i < 512; i++)
        sum += signed_sum ? (long)(int8_t)h[i] : (long)h[i];
    octal(h + 148, 7, (uint64_t)sum);
    h[155] = ' ';
    put(t, h, 512);
}

static void
member(struct tarbuf *t, const char *name, const void *data, size_t n)
{
    header(t, name, NULL, n, '0', 0);
    put(t, data, n);
    pad(t);
}

static void
smember(struct tarbuf *t, const char *name, const char *text)
{
    member(t, name, text, strlen(text));
}

static void
end(struct tarbuf *t)
{
    static const uint8_t zero[1024];
    put(t, zero, sizeof zero);
}

/* ---- collecting what the parser says ------------------------------------------------------ */

struct found {
    int n;
    char key[16][512];
    uint64_t offset[16], header[16];
    uint32_t size[16], label[16];
    int problems;
    int problem[16];
    uint64_t problem_at[16];
    char problem_key[16][256];
};

static int
on_sample(void *arg, const struct tsock__tar_sample *s)
{
    struct found *f = arg;
    if (f->n < 16) {
        snprintf(f->key[f->n], 512, "%.*s", (int)s->key_len, s->key);
        f->offset[f->n] = s->offset;
        f->header[f->n] = s->header;
        f->size[f->n] = s->size;
        f->label[f->n] = s->label;
    }
    f->n++;
    return 0;
}

static void
on_problem(void *arg, int problem, uint64_t offset, const char *key, size_t key_len)
{
    struct found *f = arg;
    if (f->problems < 16) {
        f->problem[f->problems] = problem;
        f->problem_at[f->problems] = offset;
        snprintf(f->problem_key[f->problems], 256, "%.*s", (int)key_len, key);
    }
    f->problems++;
}

static struct found
scan(const struct tarbuf *t, const char *label_key)
{
    struct found f;
    memset(&f, 0, sizeof f);
    struct tsock__tar_callbacks cb = {
        .sample = on_sample, .problem = on_problem, .arg = &f, .label_key = label_key};
    int64_t r = tsock__tar_scan(t->p, t->len, &cb);
    CHECK_EQ(r, f.n);
    return f;
}

/* ---- the format ---------------------------------------------------------------------------- */

static void
test_good_archive(void)
{
    struct tarbuf t = {0};
    smember(&t, "a/x1.jpg", "JPEG-1");
    smember(&t, "a/x1.cls", "3\n");
    smember(&t, "a/x1.txt", "ignored");
    header(&t, "a/dir", NULL, 0, '5', 0); /* a directory member: ignored */
    /* ustar prefix + name; upper-case extension; png before the jpg it yields to */
    header(&t, "x2.PNG", "b/deep", 3, '0', 0);
    put(&t, "PNG", 3);
    pad(&t);
    header(&t, "x2.JPG", "b/deep", 4, '0', 1); /* the signed-sum checksum */
    put(&t, "JPG2", 4);
    pad(&t);
    header(&t, "x2.cls", "b/deep", 1, '0', 0);
    put(&t, "7", 1);
    pad(&t);
    /* The extension is everything after the file name's first dot: "seg.png" is no image. */
    size_t x3 = t.len;
    smember(&t, "c.d/x3.seg.png", "P");
    smember(&t, "c.d/x3.cls", "1");
    end(&t);
    struct found f = scan(&t, NULL);
    CHECK_EQ(f.n, 2);
    CHECK_EQ(f.problems, 1);
    CHECK_EQ(f.problem[0], TSOCK__TAR_NO_IMAGE);
    CHECK_EQ(f.problem_at[0], x3);
    CHECK(strcmp(f.problem_key[0], "c.d/x3") == 0); /* dots of folders are not the key's end */
    CHECK(strcmp(f.key[0], "a/x1") == 0);
    CHECK_EQ(f.label[0], 3);
    CHECK_EQ(f.size[0], 6);
    CHECK(memcmp(t.p + f.offset[0], "JPEG-1", 6) == 0);
    CHECK_EQ(f.header[0], 0);
    CHECK(strcmp(f.key[1], "b/deep/x2") == 0);
    CHECK_EQ(f.label[1], 7);
    CHECK_EQ(f.size[1], 4);
    CHECK(memcmp(t.p + f.offset[1], "JPG2", 4) == 0); /* jpg wins over png */
    free(t.p);
}

static void
test_gnu_and_pax(void)
{
    char long_name[400];
    memset(long_name, 'n', 300);
    strcpy(long_name + 300, "/key.jpeg");
    struct tarbuf t = {0};
    /* GNU: a 'L' member holds the next header's name. */
    header(&t, "././@LongLink", NULL, strlen(long_name) + 1, 'L', 0);
    put(&t, long_name, strlen(long_name) + 1);
    pad(&t);
    header(&t, "truncated-name", NULL, 5, '0', 0);
    put(&t, "GNU-1", 5);
    pad(&t);
    /* The same key's cls, with a PAX path. */
    char rec[600], cls_name[400];
    memcpy(cls_name, long_name, 300);
    strcpy(cls_name + 300, "/key.cls");
    int n = (int)strlen(" path=\n") + (int)strlen(cls_name);
    int len = n + 3; /* three digits of length */
    snprintf(rec, sizeof rec, "%d path=%s\n", len, cls_name);
    CHECK_EQ((int)strlen(rec), len);
    /* A global header first (skipped), then the member's own. */
    header(&t, "pax_global_header", NULL, 19, 'g', 0);
    put(&t, "19 comment=global\n", 18);
    put(&t, "\n", 1);
    pad(&t);
    header(&t, "PaxHeaders/x", NULL, strlen(rec), 'x', 0);
    put(&t, rec, strlen(rec));
    pad(&t);
    header(&t, "short", NULL, 2, '0', 0);
    put(&t, "12", 2);
    pad(&t);
    /* PAX size overriding the header's (a large member in Python's format). */
    const char *size_rec = "11 size=10\n";
    header(&t, "PaxHeaders/y", NULL, strlen(size_rec), 'x', 0);
    put(&t, size_rec, strlen(size_rec));
    pad(&t);
    header(&t, "p/y.jpg", NULL, 0, '0', 0);
    put(&t, "0123456789", 10);
    pad(&t);
    smember(&t, "p/y.cls", "0");
    end(&t);
    struct found f = scan(&t, NULL);
    CHECK_EQ(f.problems, 0);
    CHECK_EQ(f.n, 2);
    char want[400];
    memcpy(want, long_name, 300);
    strcpy(want + 300, "/key");
    CHECK(strcmp(f.key[0], want) == 0); /* the key stops at the file name's first dot */
    CHECK_EQ(f.label[0], 12);
    CHECK(memcmp(t.p + f.offset[0], "GNU-1", 5) == 0);
    CHECK(strcmp(f.key[1], "p/y") == 0);
    CHECK_EQ(f.size[1], 10);
    CHECK(memcmp(t.p + f.offset[1], "0123456789", 10) == 0);
    free(t.p);
}

static void
test_json_label(void)
{
    struct tarbuf t = {0};
    smember(&t, "s1.jpg", "A");
    smember(&t, "s1.json", "{\"meta\": {\"label\": 9}, \"name\": \"label\", \"label\": 42}");
    smember(&t, "s2.jpg", "B");
    smember(&t, "s2.json", "{\"other\": 1}");
    smember(&t, "s3.jpg", "C");
    smember(&t, "s3.json", "{\"label\": \"x\"}");
    end(&t);
    struct found f = scan(&t, "label");
    CHECK_EQ(f.n, 1);
    CHECK_EQ(f.label[0], 42); /* the top-level field, not the nested one */
    CHECK_EQ(f.problems, 2);
    CHECK_EQ(f.problem[0], TSOCK__TAR_NO_LABEL);
    CHECK(strcmp(f.problem_key[0], "s2") == 0);
    CHECK_EQ(f.problem[1], TSOCK__TAR_BAD_LABEL);
    free(t.p);
}

/* ---- bad input: each case named with its offset and key ----------------------------------- */

static void
test_bad_samples(void)
{
    struct tarbuf t = {0};
    smember(&t, "ok1.jpg", "1");
    smember(&t, "ok1.cls", "1");
    size_t no_image_at = t.len;
    smember(&t, "noimg.cls", "1");
    size_t no_label_at = t.len;
    smember(&t, "nolabel.jpg", "2");
    size_t bad_label_at = t.len;
    smember(&t, "badlabel.jpg", "3");
    smember(&t, "badlabel.cls", "-4");
    size_t huge_label_at = t.len;
    smember(&t, "huge.jpg", "3");
    smember(&t, "huge.cls", "4294967295");
    size_t dup_member_at = t.len;
    smember(&t, "twice.jpg", "5");
    smember(&t, "twice.jpg", "6");
    smember(&t, "twice.cls", "0");
    size_t empty_at = t.len;
    member(&t, "empty.jpg", "", 0);
    smember(&t, "empty.cls", "0");
    size_t dup_key_at = t.len;
    smember(&t, "ok1.jpg", "7"); /* the key of the first sample, again */
    smember(&t, "ok1.cls", "1");
    smember(&t, "ok2.jpg", "8");
    smember(&t, "ok2.cls", "2");
    end(&t);
    struct found f = scan(&t, NULL);
    CHECK_EQ(f.n, 2);
    CHECK(strcmp(f.key[0], "ok1") == 0 && strcmp(f.key[1], "ok2") == 0);
    CHECK(memcmp(t.p + f.offset[0], "1", 1) == 0); /* the first ok1 is kept */
    const struct {
        int problem;
        size_t at;
        const char *key;
    } want[] = {{TSOCK__TAR_NO_IMAGE, no_image_at, "noimg"},
                {TSOCK__TAR_NO_LABEL, no_label_at, "nolabel"},
                {TSOCK__TAR_BAD_LABEL, bad_label_at, "badlabel"},
                {TSOCK__TAR_BAD_LABEL, huge_label_at, "huge"},
                {TSOCK__TAR_DUPLICATE_MEMBER, dup_member_at, "twice"},
                {TSOCK__TAR_EMPTY_IMAGE, empty_at, "empty"},
                {TSOCK__TAR_DUPLICATE_KEY, dup_key_at, "ok1"}};
    CHECK_EQ(f.problems, (int)(sizeof want / sizeof want[0]));
    for (size_t i = 0; i < sizeof want / sizeof want[0] && i < 16; i++) {
        CHECK_EQ(f.problem[i], want[i].problem);
        CHECK_EQ(f.problem_at[i], want[i].at);
        CHECK(strcmp(f.problem_key[i], want[i].key) == 0);
        CHECK(strlen(tsock__tar_problem_text(f.problem[i])) > 10);
    }
    free(t.p);
}

/* The scan stops at a header it cannot follow; what came before is kept. */
static void
test_stops(void)
{
    /* A bad checksum. */
    struct tarbuf t = {0};
    smember(&t, "a.jpg", "1");
    smember(&t, "a.cls", "1");
    size_t at = t.len;
    smember(&t, "b.jpg", "2");
    t.p[at + 148] ^= 1;
    smember(&t, "b.cls", "2");
    end(&t);
    struct found f = scan(&t, NULL);
    CHECK_EQ(f.n, 1);
    CHECK_EQ(f.problems, 1);
    CHECK_EQ(f.problem[0], TSOCK__TAR_BAD_CHECKSUM);
    CHECK_EQ(f.problem_at[0], at);
    free(t.p);

    /* A member whose data runs past the end: named with its key. */
    t = (struct tarbuf){0};
    smember(&t, "a.jpg", "1");
    smember(&t, "a.cls", "1");
    at = t.len;
    smember(&t, "cut.jpg", "0123456789");
    t.len = at + 512 + 4;
    f = scan(&t, NULL);
    CHECK_EQ(f.n, 1);
    CHECK_EQ(f.problems, 1);
    CHECK_EQ(f.problem[0], TSOCK__TAR_TRUNCATED);
    CHECK_EQ(f.problem_at[0], at);
    CHECK(strcmp(f.problem_key[0], "cut") == 0);

    /* A header cut short. */
    t.len = at + 100;
    f = scan(&t, NULL);
    CHECK_EQ(f.n, 1);
    CHECK_EQ(f.problems, 1);
    CHECK_EQ(f.problem[0], TSOCK__TAR_TRUNCATED);
    CHECK_EQ(f.problem_at[0], at);

    /* Cut right after the last member's data (its padding and the end blocks lost): whole. */
    t.len = at;
    smember(&t, "c.jpg", "12");
    smember(&t, "c.cls", "5");
    t.len -= 511;
    f = scan(&t, NULL);
    CHECK_EQ(f.n, 2);
    CHECK_EQ(f.problems, 0);
    free(t.p);

    /* A size field that is not octal. */
    t = (struct tarbuf){0};
    smember(&t, "a.jpg", "1");
    memcpy(t.p + 124, "zzzz", 4);
    f = scan(&t, NULL);
    CHECK_EQ(f.n, 0);
    CHECK_EQ(f.problems, 1);
    CHECK(f.problem[0] == TSOCK__TAR_BAD_CHECKSUM || f.problem[0] == TSOCK__TAR_BAD_HEADER);
    free(t.p);

    /* Not a tar at all. */
    t = (struct tarbuf){0};
    for (int i = 0; i < 700; i++)
        put(&t, "x", 1);
    f = scan(&t, NULL);
    CHECK_EQ(f.n, 0);
    CHECK_EQ(f.problems, 1);
    CHECK_EQ(f.problem[0], TSOCK__TAR_BAD_CHECKSUM);
    free(t.p);
}

/* ---- SPEC resolution and the index on files ------------------------------------------------ */

static char tmp[256];

static void
write_file(const char *rel, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, rel);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fwrite(p, 1, n, f);
    fclose(f);
}

/* Sets a file's mtime 10 s back, so that a fresh cache is not "racy". */
static void
age(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, rel);
    struct timeval tv[2];
    gettimeofday(&tv[0], NULL);
    tv[0].tv_sec -= 10;
    tv[1] = tv[0];
    utimes(path, tv);
}

static void
make_shard(const char *rel, int first, int count)
{
    struct tarbuf t = {0};
    for (int i = first; i < first + count; i++) {
        char name[64], label[16], data[32];
        snprintf(name, sizeof name, "k%03d.jpg", i);
        snprintf(data, sizeof data, "image-%03d", i);
        member(&t, name, data, strlen(data));
        snprintf(name, sizeof name, "k%03d.cls", i);
        snprintf(label, sizeof label, "%d", i % 5);
        smember(&t, name, label);
    }
    end(&t);
    write_file(rel, t.p, t.len);
    age(rel);
    free(t.p);
}

static void
test_resolve(void)
{
    char spec[512];
    struct tsock__shard_list l;
    make_shard("d-000.tar", 0, 3);
    make_shard("d-001.tar", 3, 4);
    make_shard("d-002.tar", 7, 2);

    snprintf(spec, sizeof spec, "%s/d-{000..002}.tar", tmp);
    CHECK_EQ(tsock__shards_resolve(spec, NULL, &l), 0);
    CHECK_EQ(l.count, 3);
    CHECK(strcmp(l.root, tmp) == 0);
    CHECK(l.count == 3 && strcmp(l.paths[0], "d-000.tar") == 0 &&
          strcmp(l.paths[2], "d-002.tar") == 0);
    tsock__shards_free(&l);

    snprintf(spec, sizeof spec, "%s/d-00{2,0}.tar", tmp);
    CHECK_EQ(tsock__shards_resolve(spec, NULL, &l), 0);
    CHECK(l.count == 2 && strcmp(l.paths[0], "d-002.tar") == 0);
    tsock__shards_free(&l);

    snprintf(spec, sizeof spec, "%s/d-{2..0}.tar", tmp);
    CHECK_EQ(tsock__shards_resolve(spec, NULL, &l), -EINVAL);
    snprintf(spec, sizeof spec, "%s/d-{0..2.tar", tmp);
    CHECK_EQ(tsock__shards_resolve(spec, NULL, &l), -EINVAL);

    /* A directory: its *.tar by name. */
    CHECK_EQ(tsock__shards_resolve(tmp, "train", &l), 0);
    CHECK_EQ(l.count, 3);
    CHECK(l.count == 3 && strcmp(l.paths[1], "d-001.tar") == 0);
    tsock__shards_free(&l);

    /* A list file, with a comment and a blank line. */
    const char *list = "# shards\nd-002.tar\n\n  d-000.tar  \n";
    write_file("shards.txt", list, strlen(list));
    snprintf(spec, sizeof spec, "%s/shards.txt", tmp);
    CHECK_EQ(tsock__shards_resolve(spec, NULL, &l), 0);
    CHECK(l.count == 2 && strcmp(l.paths[0], "d-002.tar") == 0 &&
          strcmp(l.paths[1], "d-000.tar") == 0);
    tsock__shards_free(&l);
}

static void
test_info_file(void)
{
    char dir[512], sub[512];
    snprintf(sub, sizeof sub, "%s/timm", tmp);
    mkdir(sub, 0755);
    const char *info =
        "{\"name\": \"x\", \"splits\": {\"train\": {\"name\": \"train\", \"num_samples\": 7, "
        "\"filenames\": [\"../d-001.tar\", \"../d-000.tar\"], \"shard_lengths\": [4, 3]}, "
        "\"validation\": {\"num_samples\": 2, \"filenames\": [\"../d-002.tar\"]}}}";
    write_file("timm/_info.json", info, strlen(info));
    snprintf(dir, sizeof dir, "%s/timm", tmp);
    struct tsock__shard_list l;
    CHECK_EQ(tsock__shards_resolve(dir, "train", &l), 0);
    CHECK(l.count == 2 && strcmp(l.paths[0], "../d-001.tar") == 0);
    CHECK_EQ(l.expected, 7);
    tsock__shards_free(&l);
    CHECK_EQ(tsock__shards_resolve(dir, "val", &l), 0); /* "val" finds "validation" */
    CHECK(l.count == 1 && strcmp(l.paths[0], "../d-002.tar") == 0);
    tsock__shards_free(&l);
    CHECK_EQ(tsock__shards_resolve(dir, "test", &l), -EINVAL);
}

static void
test_index_and_cache(void)
{
    char spec[512], cache[512];
    snprintf(spec, sizeof spec, "%s/d-{000..002}.tar", tmp);
    snprintf(cache, sizeof cache, "%s/cache.idx", tmp);
    struct tsock__shard_options opt = {.split = "train"};
    struct tsock__index *idx = NULL;
    CHECK_EQ(tsock__index_open_shards(spec, &opt, cache, 2, NULL, NULL, NULL, &idx), 0);
    if (!idx)
        return;
    CHECK_EQ(idx->count, 9);
    CHECK_EQ(idx->classes, 5);
    CHECK_EQ(idx->watch_count, 3);
    for (uint64_t i = 0; i < idx->count; i++) {
        char want[32];
        snprintf(want, sizeof want, "k%03d", (int)i);
        CHECK(strcmp(tsock__index_path(idx, i), want) == 0); /* ids: shard order, tar order */
        CHECK_EQ(idx->entries[i].label, i % 5);
        CHECK_EQ(idx->shard[i], i < 3 ? 0 : i < 7 ? 1 : 2);
    }
    char name[512];
    tsock__index_describe(idx, 4, name, sizeof name);
    CHECK(strstr(name, "d-001.tar offset ") && strstr(name, " key k004"));
    /* The bytes at the offset are the member's. */
    char path[512], got[16] = {0};
    snprintf(path, sizeof path, "%s/%s", idx->root, tsock__index_shard_path(idx, 4));
    int fd = open(path, O_RDONLY);
    CHECK(pread(fd, got, idx->entries[4].size, (off_t)tsock__index_offset(idx, 4)) == 9);
    close(fd);
    CHECK(strcmp(got, "image-004") == 0);

    /* Round trip through the codec, then the cache on disk is used. */
    uint8_t *bytes = NULL;
    size_t size = 0;
    CHECK_EQ(tsock__index_encode(idx, &bytes, &size), 0);
    struct tsock__index *back = NULL;
    CHECK_EQ(tsock__index_decode(bytes, size, 1, &back), 0);
    CHECK(back && back->count == 9 && back->offsets[4] == idx->offsets[4] && back->shard[8] == 2 &&
          strcmp(back->root, idx->root) == 0);
    /* Every truncation is refused. */
    for (size_t cut = 0; cut < size; cut += 7) {
        struct tsock__index *bad = NULL;
        CHECK(tsock__index_decode(bytes, cut, 0, &bad) == -EBADMSG);
    }
    tsock__index_destroy(back);
    free(bytes);
    tsock__index_destroy(idx);
    idx = NULL;
    CHECK_EQ(access(cache, F_OK), 0);
    CHECK_EQ(tsock__index_load(cache, TSOCK__INDEX_SHARDS, spec, &idx), 0);
    tsock__index_destroy(idx);
    idx = NULL;

    /* Other options (a label key) do not take the cache: a rescan, which finds no json. */
    struct tsock__shard_options json = {.split = "train", .label_key = "label"};
    CHECK_EQ(tsock__index_open_shards(spec, &json, cache, 2, NULL, NULL, NULL, &idx), -ENOENT);

    /* A changed shard makes the cache stale: the new sample is found. */
    make_shard("d-002.tar", 7, 3);
    CHECK_EQ(tsock__index_open_shards(spec, &opt, cache, 2, NULL, NULL, NULL, &idx), 0);
    CHECK(idx && idx->count == 10);
    tsock__index_destroy(idx);

    /* A shard that cannot be opened fails the scan. */
    snprintf(spec, sizeof spec, "%s/d-{000..003}.tar", tmp);
    idx = NULL;
    CHECK_EQ(tsock__index_open_shards(spec, &opt, NULL, 2, NULL, NULL, NULL, &idx), -ENOENT);
    CHECK(idx == NULL);
}

/* ---- the shard-ordered sampler -------------------------------------------------------------- */

static void
test_shard_order(void)
{
    /* 10 shards of uneven sizes (one empty), window 3. */
    uint64_t starts[11] = {0, 5, 9, 9, 20, 21, 30, 38, 40, 47, 50};
    uint64_t n = 50, perm[50], order[10];
    for (uint64_t e = 0; e < 5; e++) {
        tsock__sampler_shard_permutation(n, 7, e, starts, 10, 3, order, perm);
        uint8_t seen[50] = {0};
        for (uint64_t i = 0; i < n; i++) {
            CHECK(perm[i] < n && !seen[perm[i]]);
            if (perm[i] < n)
                seen[perm[i]] = 1;
        }
        /* Each window of 3 shards of the order is one contiguous run of positions. */
        uint64_t at = 0;
        for (int k = 0; k < 10; k += 3) {
            uint64_t len = 0;
            for (int w = k; w < 10 && w < k + 3; w++)
                len += starts[order[w] + 1] - starts[order[w]];
            for (uint64_t i = at; i < at + len; i++) {
                int in = 0;
                for (int w = k; w < 10 && w < k + 3; w++)
                    in |= perm[i] >= starts[order[w]] && perm[i] < starts[order[w] + 1];
                CHECK(in);
            }
            at += len;
        }
    }
    /* Through the sampler, with a joiner's phase kept: every epoch is still exact. */
    struct tsock__sampler s;
    CHECK_EQ(tsock__sampler_init(&s, n, 7, 4), 0);
    CHECK_EQ(tsock__sampler_set_shards(&s, starts, 10, 3), 0);
    uint64_t ids[64], epoch;
    uint8_t seen[4][50] = {{0}};
    for (;;) {
        if (s.position == 0 && s.epoch == 2) {
            uint64_t phase = 17;
            tsock__sampler_keep_segments(&s, &phase, 1);
        }
        uint32_t k = tsock__sampler_next(&s, 8, ids, &epoch, NULL, NULL);
        if (k == 0)
            break;
        for (uint32_t i = 0; i < k; i++) {
            CHECK(!seen[epoch][ids[i]]);
            seen[epoch][ids[i]] = 1;
        }
    }
    for (int e = 0; e < 4; e++)
        for (uint64_t i = 0; i < n; i++)
            CHECK(seen[e][i]);
    tsock__sampler_free(&s);
    uint64_t bad[3] = {0, 5, 4};
    CHECK_EQ(tsock__sampler_init(&s, 4, 0, 1), 0);
    CHECK_EQ(tsock__sampler_set_shards(&s, bad, 2, 1), -EINVAL);
    tsock__sampler_free(&s);
}

int
main(void)
{
    test_good_archive();
    test_gnu_and_pax();
    test_json_label();
    test_bad_samples();
    test_stops();
    test_scratch_dir(tmp, sizeof tmp, "tar");
    test_resolve();
    test_info_file();
    test_index_and_cache();
    test_shard_order();
    return CHECK_DONE(); /* the scratch folder goes at exit */
}
