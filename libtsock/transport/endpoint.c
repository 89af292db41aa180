/* Endpoints: the per-user default, and safe binding of ipc socket files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/core.h"
#include "transport/transport.h"

/* Creates `dir` with mode 0700 if missing and checks that an existing one belongs to us and is
 * not open to others: the socket files inside are the producer's front door. */
static int
ensure_private_dir(const char *dir)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(dir, &st) < 0)
        return -errno;
    if (!S_ISDIR(st.st_mode) || st.st_uid != getuid())
        return -EPERM;
    if ((st.st_mode & 077) && chmod(dir, 0700) < 0)
        return -errno;
    return 0;
}

int
tsock_default_endpoint(char *buf, size_t size)
{
    char base[256];
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    if (runtime && runtime[0] == '/' && strlen(runtime) < 200)
        snprintf(base, sizeof base, "%s/tsock", runtime);
    else
        snprintf(base, sizeof base, "/tmp/tsock-%u", (unsigned)getuid());
    int err = ensure_private_dir(base);
    if (err < 0)
        return err;
    int n = snprintf(buf, size, "ipc://%s/default.sock", base);
    if (n < 0 || (size_t)n >= size)
        return -ENAMETOOLONG;
    return n;
}

const char *
tsock__ipc_path(const char *endpoint)
{
    return strncmp(endpoint, "ipc://", 6) == 0 ? endpoint + 6 : NULL;
}

int
tsock__ipc_claim(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (path[0] == '@' || strlen(path) >= sizeof addr.sun_path)
        return path[0] == '@' ? 0 : -ENAMETOOLONG; /* abstract sockets leave no file */
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode))
        return -EEXIST; /* never delete something that is not a socket */
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int live = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    int connect_errno = errno;
    close(fd);
    if (live)
        return TSOCK_E_BUSY_ENDPOINT;
    if (connect_errno != ECONNREFUSED)
        return -connect_errno;
    tsock__log(TSOCK_LOG_INFO, "removing stale socket file %s", path);
    return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
}
