/* Scratch folders for the C tests (tests leave nothing behind: no temporary directory).
 *
 * test_scratch_dir(buf, size, tag) makes a new empty folder for sockets and files and writes its
 * path to buf. All of a process's folders live in one root, $TMPDIR/tsock-TAG-XXXXXX (TMPDIR
 * unset or empty: /tmp), made on first use and removed with everything in it when the process
 * that made it exits normally (return from main or exit()), whether the test passed or failed.
 * A forked child that calls exit() shares the root and leaves it alone. A test killed by a
 * signal leaves its root behind: scripts/test.sh runs the tests with TMPDIR in its scratch
 * folder and names whatever is left there.
 *
 * ipc socket paths hold at most 107 bytes (sun_path), so a TMPDIR too long for the tests'
 * sockets is an error that says so, never a silent move elsewhere. */
#ifndef TSOCK_TEST_SCRATCH_H
#define TSOCK_TEST_SCRATCH_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw's FTW_DEPTH, FTW_PHYS */
#endif

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Room kept in sun_path for what the tests add under a scratch folder ("/NN/name.sock"). */
#define TEST_SCRATCH_SOCKET_ROOM 40
/* sizeof(((struct sockaddr_un *)0)->sun_path) - 1 on Linux. */
#define TEST_SCRATCH_SUN_PATH_MAX 107

static char test_scratch_root[128];
static pid_t test_scratch_owner;
static int test_scratch_count;
static pthread_mutex_t test_scratch_lock = PTHREAD_MUTEX_INITIALIZER;

static int
test_scratch_remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    if (remove(path) < 0 && errno != ENOENT)
        fprintf(stderr, "scratch: cannot remove %s: %s\n", path, strerror(errno));
    return 0; /* carry on: remove as much as can be removed */
}

/* atexit: the process that made the root removes it, depth first, without following links. */
static void
test_scratch_remove_root(void)
{
    if (getpid() != test_scratch_owner || !test_scratch_root[0])
        return;
    nftw(test_scratch_root, test_scratch_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void
test_scratch_make_root(const char *tag)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0])
        tmp = "/tmp";
    int n = snprintf(test_scratch_root, sizeof test_scratch_root, "%s/tsock-%s-XXXXXX", tmp, tag);
    if (n < 0 || (size_t)n >= sizeof test_scratch_root ||
        n + TEST_SCRATCH_SOCKET_ROOM > TEST_SCRATCH_SUN_PATH_MAX) {
        fprintf(stderr,
                "scratch: TMPDIR=%s is too long for the tests' ipc socket paths (at most %d "
                "bytes in all): set TMPDIR to a shorter folder, such as /tmp\n",
                tmp, TEST_SCRATCH_SUN_PATH_MAX);
        exit(1);
    }
    if (!mkdtemp(test_scratch_root)) {
        fprintf(stderr, "scratch: cannot make %s: %s (is TMPDIR=%s a writable folder?)\n",
                test_scratch_root, strerror(errno), tmp);
        exit(1);
    }
    test_scratch_owner = getpid();
    atexit(test_scratch_remove_root);
}

/* Makes a new empty folder under this process's scratch root and writes its path to buf
 * (size bytes). `tag` names the root (the first call's tag wins): "tsock-TAG-XXXXXX".
 * Thread-safe; a forked child gets folders of its own in its parent's root. Returns buf; a
 * folder that cannot be made ends the test (exit 1), saying why. */
static char *
test_scratch_dir(char *buf, size_t size, const char *tag)
{
    pthread_mutex_lock(&test_scratch_lock);
    if (!test_scratch_root[0])
        test_scratch_make_root(tag);
    int n, err;
    do { /* a forked child counts from its parent's count: skip the names taken */
        n = snprintf(buf, size, "%s/%d", test_scratch_root, test_scratch_count++);
        err = n < 0 || (size_t)n >= size ? ENAMETOOLONG : mkdir(buf, 0700) < 0 ? errno : 0;
    } while (err == EEXIST);
    pthread_mutex_unlock(&test_scratch_lock);
    if (err) {
        fprintf(stderr, "scratch: cannot make a folder in %s: %s\n", test_scratch_root,
                strerror(err));
        exit(1);
    }
    return buf;
}

#endif
