/* The file reader on real files, through io_uring (when this kernel and build allow it) and
 * pread: whole files byte for byte, per-request errors (missing file, directory, empty file,
 * file larger than the buffer), files whose size changed since indexing, 1000 small files at
 * depths 1, 8 and 64, and the automatic fallback to pread when io_uring_setup is refused (a
 * seccomp filter in a child process plays gVisor or a locked-down container). */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/core.h"
#include "io/reader.h"

#define SMALL_FILES 1000

static char dir[256];

static char log_text[8192];

static void
capture_log(void *user, int level, const char *message)
{
    size_t n = strlen(log_text);
    snprintf(log_text + n, sizeof log_text - n, "%s\n", message);
}

/* The deterministic content of file `id`. */
static void
fill(uint8_t *p, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = tsock__mix64(id * 1000003u + i);
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

static void
write_file(const char *name, size_t size, uint64_t id)
{
    char path[512];
    uint8_t *p = malloc(size ? size : 1);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    fill(p, size, id);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(write(fd, p, size), (ssize_t)size);
    close(fd);
    free(p);
}

static int
matches(const void *buf, size_t n, uint64_t id)
{
    uint8_t *want = malloc(n ? n : 1);
    fill(want, n, id);
    int same = memcmp(buf, want, n) == 0;
    free(want);
    return same;
}

static const char *
mode_name(int mode)
{
    return mode == TSOCK__IO_URING ? "io_uring" : "pread";
}

/* Real files of assorted sizes, read whole and compared byte for byte. */
static void
test_whole_files(int mode)
{
    static const size_t sizes[] = {1, 7, 4095, 4096, 4097, 65536, 110000, 1 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    struct tsock__reader *r;
    struct tsock__read_req q[N];
    struct tsock__reader_stats st;
    char names[N][32];

    CHECK_EQ(tsock__reader_create(&r, mode, 4, dir), 0);
    CHECK_EQ(tsock__reader_mode(r), mode);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "whole-%d.bin", i);
        write_file(names[i], sizes[i], 100 + (uint64_t)i);
        q[i] = (struct tsock__read_req){.path = names[i],
                                        .expected = sizes[i],
                                        .buf = malloc(sizes[i] + 1),
                                        .capacity = sizes[i] + 1};
    }
    CHECK_EQ(tsock__reader_read(r, q, N), N);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(q[i].result, (int64_t)sizes[i]);
        CHECK_EQ(q[i].file_size, sizes[i]);
        CHECK(matches(q[i].buf, sizes[i], 100 + (uint64_t)i));
    }
    tsock__reader_stats(r, &st);
    CHECK_EQ(st.files, N);
    CHECK_EQ(st.errors, 0);
    CHECK_EQ(st.rechecked, 0); /* every size was as expected: one read each */

    /* The same files again through the same reader: slots are reused. */
    for (int i = 0; i < N; i++)
        memset(q[i].buf, 0, sizes[i] + 1);
    CHECK_EQ(tsock__reader_read(r, q, N), N);
    for (int i = 0; i < N; i++)
        CHECK(q[i].result == (int64_t)sizes[i] && matches(q[i].buf, sizes[i], 100 + (uint64_t)i));
    for (int i = 0; i < N; i++)
        free(q[i].buf);
    tsock__reader_destroy(r);
}

/* Each request fails or succeeds on its own, whatever its neighbours do. */
static void
test_errors(int mode)
{
    struct tsock__reader *r;
    char abs_path[512], sub[512];
    uint8_t b[8][256];

    write_file("ok.bin", 100, 1);
    write_file("empty.bin", 0, 2);
    write_file("big.bin", 1000, 3);
    snprintf(sub, sizeof sub, "%s/subdir", dir);
    mkdir(sub, 0755);
    snprintf(abs_path, sizeof abs_path, "%s/ok.bin", dir);

    CHECK_EQ(tsock__reader_create(&r, mode, 8, dir), 0);
    struct tsock__read_req q[] = {
        {.path = "missing.bin", .expected = 10, .buf = b[0], .capacity = 256},
        {.path = "ok.bin", .expected = 100, .buf = b[1], .capacity = 256},
        {.path = "subdir", .expected = 10, .buf = b[2], .capacity = 256},
        {.path = "empty.bin", .expected = 0, .buf = b[3], .capacity = 256},
        {.path = "big.bin", .expected = 1000, .buf = b[4], .capacity = 256},
        {.path = abs_path, .expected = 100, .buf = b[5], .capacity = 256},
        {.path = "ok.bin", .expected = 100, .buf = b[6], .capacity = 100}, /* exactly full */
        {.path = "nodir/ok.bin", .expected = 100, .buf = b[7], .capacity = 256},
    };
    CHECK_EQ(tsock__reader_read(r, q, 8), 4);
    CHECK_EQ(q[0].result, -ENOENT);
    CHECK_EQ(q[0].file_size, 0);
    CHECK_EQ(q[1].result, 100);
    CHECK(matches(b[1], 100, 1));
    CHECK_EQ(q[2].result, -EISDIR);
    CHECK_EQ(q[3].result, 0);
    CHECK_EQ(q[3].file_size, 0);
    CHECK_EQ(q[4].result, -EFBIG);
    CHECK_EQ(q[4].file_size, 1000);
    CHECK(matches(b[4], 256, 3)); /* what fitted was read */
    CHECK_EQ(q[5].result, 100);
    CHECK(matches(b[5], 100, 1));
    CHECK_EQ(q[6].result, 100);
    CHECK(matches(b[6], 100, 1));
    CHECK_EQ(q[7].result, -ENOENT);

    /* Bad arguments fail the call before anything is read. */
    struct tsock__read_req bad = {.path = NULL, .buf = b[0], .capacity = 1};
    CHECK_EQ(tsock__reader_read(r, &bad, 1), -EINVAL);
    bad = (struct tsock__read_req){.path = "ok.bin", .buf = NULL, .capacity = 10};
    CHECK_EQ(tsock__reader_read(r, &bad, 1), -EINVAL);
    CHECK_EQ(tsock__reader_read(r, NULL, 0), 0);
    tsock__reader_destroy(r);
}

/* Files that grew or shrank since the index recorded their size. */
static void
test_size_changes(int mode)
{
    struct tsock__reader *r;
    struct tsock__reader_stats st;
    uint8_t *b[5];

    for (int i = 0; i < 5; i++)
        b[i] = malloc(4096);
    write_file("grown.bin", 3000, 11);  /* indexed at 2000 */
    write_file("shrunk.bin", 500, 12);  /* indexed at 2000 */
    write_file("unknown.bin", 777, 13); /* no size known */
    write_file("toobig.bin", 5000, 14); /* indexed at 2000, now beyond the buffer */
    CHECK_EQ(tsock__reader_create(&r, mode, 2, dir), 0);
    struct tsock__read_req q[] = {
        {.path = "grown.bin", .expected = 2000, .buf = b[0], .capacity = 4096},
        {.path = "shrunk.bin", .expected = 2000, .buf = b[1], .capacity = 4096},
        {.path = "unknown.bin", .expected = 0, .buf = b[2], .capacity = 4096},
        {.path = "toobig.bin", .expected = 2000, .buf = b[3], .capacity = 4096},
        {.path = "grown.bin", .expected = 3000, .buf = b[4], .capacity = 4096},
    };
    CHECK_EQ(tsock__reader_read(r, q, 5), 4);
    CHECK_EQ(q[0].result, 3000);
    CHECK_EQ(q[0].file_size, 3000);
    CHECK(matches(b[0], 3000, 11));
    CHECK_EQ(q[1].result, 500);
    CHECK_EQ(q[1].file_size, 500);
    CHECK(matches(b[1], 500, 12));
    CHECK_EQ(q[2].result, 777);
    CHECK(matches(b[2], 777, 13));
    CHECK_EQ(q[3].result, -EFBIG);
    CHECK_EQ(q[3].file_size, 5000);
    CHECK_EQ(q[4].result, 3000);
    tsock__reader_stats(r, &st);
    if (mode == TSOCK__IO_URING)
        CHECK_EQ(st.rechecked, 4); /* all but the one whose size was as expected */
    CHECK_EQ(st.errors, 1);
    for (int i = 0; i < 5; i++)
        free(b[i]);
    tsock__reader_destroy(r);
}

/* Many small files, more than the depth, in one call. */
static void
test_many(int mode, unsigned depth)
{
    struct tsock__reader *r;
    struct tsock__read_req *q = calloc(SMALL_FILES, sizeof *q);
    char(*names)[32] = calloc(SMALL_FILES, 32);
    uint8_t *bufs = malloc((size_t)SMALL_FILES * 2048);
    struct tsock__reader_stats st;

    CHECK_EQ(tsock__reader_create(&r, mode, depth, dir), 0);
    for (int i = 0; i < SMALL_FILES; i++) {
        size_t size = 1 + (size_t)(tsock__mix64((uint64_t)i) % 2000);
        snprintf(names[i], 32, "many/%04d.JPEG", i);
        q[i] = (struct tsock__read_req){
            .path = names[i], .expected = size, .buf = bufs + (size_t)i * 2048, .capacity = 2048};
    }
    CHECK_EQ(tsock__reader_read(r, q, SMALL_FILES), SMALL_FILES);
    int bad = 0;
    for (int i = 0; i < SMALL_FILES; i++)
        bad += q[i].result != (int64_t)q[i].expected ||
               !matches(q[i].buf, q[i].expected, 5000 + (uint64_t)i);
    CHECK_EQ(bad, 0);
    tsock__reader_stats(r, &st);
    CHECK_EQ(st.files, SMALL_FILES);
    CHECK_EQ(st.rechecked, 0);
    printf("%s depth %u: %d files read\n", mode_name(mode), depth, SMALL_FILES - bad);
    tsock__reader_destroy(r);
    free(q);
    free(names);
    free(bufs);
}

static void
make_small_files(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/many", dir);
    CHECK_EQ(mkdir(path, 0755), 0);
    for (int i = 0; i < SMALL_FILES; i++) {
        char name[32];
        snprintf(name, sizeof name, "many/%04d.JPEG", i);
        write_file(name, 1 + (size_t)(tsock__mix64((uint64_t)i) % 2000), 5000 + (uint64_t)i);
    }
}

/* In a child: a seccomp filter makes io_uring_setup fail with `err`, as gVisor (ENOSYS) or a
 * container's profile (EPERM) does. AUTO must fall back to pread with a log line and read
 * correctly; URING must fail. Returns the child's failure count, or 77 where no seccomp filter
 * can be installed. */
static int
run_refused(int err)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
        struct tsock__reader *r;
        uint8_t b[256];
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
            _exit(3);
        log_text[0] = '\0';
        CHECK_EQ(tsock__reader_create(&r, TSOCK__IO_AUTO, 8, dir), 0);
        CHECK_EQ(tsock__reader_mode(r), TSOCK__IO_PREAD);
        CHECK(strstr(log_text, "io_uring unavailable") || strstr(log_text, "without io_uring"));
        struct tsock__read_req q = {.path = "ok.bin", .expected = 100, .buf = b, .capacity = 256};
        CHECK_EQ(tsock__reader_read(r, &q, 1), 1);
        CHECK(q.result == 100 && matches(b, 100, 1));
        tsock__reader_destroy(r);
        CHECK(tsock__reader_create(&r, TSOCK__IO_URING, 8, dir) < 0);
        _exit(atomic_load(&check_failures) ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
        printf("SKIP: seccomp filters unavailable here: the pread fallback is not tested\n");
        return 77;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static void
cleanup(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", path);
}

/* Range requests (tar shard members): exactly `capacity` bytes at `offset`, many at once,
 * including the file's last byte; a range past the end (a shard cut since it was indexed)
 * is -EPROTO, a missing file its errno. */
static void
test_ranges(int mode)
{
    struct tsock__reader *r;
    enum { SIZE = 100000, N = 40 };
    uint8_t *whole = malloc(SIZE), *bufs = malloc((size_t)N * 4096);
    struct tsock__read_req q[N + 3];
    write_file("shard.bin", SIZE, 77);
    fill(whole, SIZE, 77);
    CHECK_EQ(tsock__reader_create(&r, mode, 8, dir), 0);
    for (int i = 0; i < N; i++) {
        uint64_t off = (uint64_t)i * 2477 % (SIZE - 4096);
        q[i] = (struct tsock__read_req){.path = "shard.bin",
                                        .buf = bufs + i * 4096,
                                        .capacity = 1 + (size_t)i * 97 % 4095,
                                        .range = 1,
                                        .offset = off};
    }
    q[N - 1].offset = SIZE - q[N - 1].capacity; /* up to the last byte */
    uint8_t tail[64], past[64], none[8];
    q[N] = (struct tsock__read_req){
        .path = "shard.bin", .buf = tail, .capacity = 64, .range = 1, .offset = SIZE - 64};
    q[N + 1] = (struct tsock__read_req){
        .path = "shard.bin", .buf = past, .capacity = 64, .range = 1, .offset = SIZE - 10};
    q[N + 2] = (struct tsock__read_req){
        .path = "gone.bin", .buf = none, .capacity = 8, .range = 1, .offset = 0};
    CHECK_EQ(tsock__reader_read(r, q, N + 3), N + 1);
    for (int i = 0; i <= N; i++) {
        CHECK_EQ(q[i].result, (int64_t)q[i].capacity);
        CHECK_EQ(q[i].file_size, 0);
        CHECK(memcmp(q[i].buf, whole + q[i].offset, q[i].capacity) == 0);
    }
    CHECK_EQ(q[N + 1].result, -EPROTO);
    CHECK_EQ(q[N + 2].result, -ENOENT);
    tsock__reader_destroy(r);
    free(whole);
    free(bufs);
}

/* Every test of one reading mode on the small files. */
static void
test_mode(int mode)
{
    test_whole_files(mode);
    test_errors(mode);
    test_ranges(mode);
    test_size_changes(mode);
    test_many(mode, 1);
    test_many(mode, 8);
    test_many(mode, 64);
}

/* The reader with pread, and its argument checks: runs everywhere. */
static int
part_pread(void)
{
    struct tsock__reader *r;
    CHECK_EQ(tsock__reader_create(&r, 7, 8, dir), -EINVAL);
    CHECK_EQ(tsock__reader_create(&r, TSOCK__IO_PREAD, 0, dir), -EINVAL);
    CHECK_EQ(tsock__reader_create(&r, TSOCK__IO_PREAD, TSOCK__IO_MAX_DEPTH + 1, dir), -EINVAL);
    CHECK_EQ(tsock__reader_create(&r, TSOCK__IO_PREAD, 8, "/nonexistent-dir-xyz"), -ENOENT);
    make_small_files();
    test_mode(TSOCK__IO_PREAD);
    return CHECK_DONE();
}

/* The reader with io_uring: skipped, loudly, where the kernel or a sandbox refuses it. */
static int
part_uring(void)
{
    struct tsock__reader *r;
    int e = tsock__reader_create(&r, TSOCK__IO_URING, 8, dir);
    if (e < 0) {
        printf("SKIP: io_uring not usable here (%s): the io_uring reader is not tested\n",
               tsock_strerror(e));
        return 77;
    }
    tsock__reader_destroy(r);
    make_small_files();
    test_mode(TSOCK__IO_URING);
    return CHECK_DONE();
}

/* The fallback to pread when io_uring is refused (needs seccomp filters). */
static int
part_fallback(void)
{
    write_file("ok.bin", 100, 1);
    int rc = run_refused(ENOSYS);
    if (rc == 77)
        return 77;
    CHECK_EQ(rc, 0);
    CHECK_EQ(run_refused(EPERM), 0);
    return CHECK_DONE();
}

/* The parts are separate ctest tests (tests/CMakeLists.txt), so that one that cannot run here
 * is reported as skipped (exit 77) without hiding that the others passed. */
int
main(int argc, char **argv)
{
    const char *part = argc > 1 ? argv[1] : "pread";
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tsock-reader-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    tsock_set_log(capture_log, NULL, TSOCK_LOG_DEBUG);
    int rc;
    if (strcmp(part, "pread") == 0) {
        rc = part_pread();
    } else if (strcmp(part, "uring") == 0) {
        rc = part_uring();
    } else if (strcmp(part, "fallback") == 0) {
        rc = part_fallback();
    } else {
        fprintf(stderr, "usage: test_reader [pread|uring|fallback]\n");
        rc = 2;
    }
    cleanup(dir);
    return rc;
}
