/* tsock-producer: CPU time per thread kind, from /proc (see struct thread_cpu in
 * producer_report.h). Used for the final record, where the scaling benchmark reads the serial
 * parts of the producer (main thread, service thread) beside the parallel one (the workers). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "producer_report.h"

/* CPU seconds of thread `tid`: schedstat's first field (ns on a CPU), else utime + stime from
 * stat (clock ticks). Returns -1 when neither can be read (the thread just ended). */
static double
task_cpu_s(const char *tid)
{
    char path[320]; /* "/proc/self/task/" + a d_name (up to 255 bytes) + the file */
    unsigned long long ns;
    snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", tid);
    FILE *f = fopen(path, "r");
    if (f) {
        int ok = fscanf(f, "%llu", &ns) == 1;
        fclose(f);
        if (ok)
            return (double)ns * 1e-9;
    }
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", tid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The name, in parentheses, may hold spaces: fields are counted after its last ')'. */
    char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The thread's name (comm), or "" when it cannot be read. */
static void
task_name(const char *tid, char *name, size_t cap)
{
    char path[320]; /* "/proc/self/task/" + a d_name (up to 255 bytes) + the file */
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", tid);
    name[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(name, (int)cap, f))
        name[strcspn(name, "\n")] = '\0';
    fclose(f);
}

void
thread_cpu_read(struct thread_cpu *t)
{
    char self[32], name[64];
    memset(t, 0, sizeof *t);
    DIR *dir = opendir("/proc/self/task");
    if (!dir)
        return;
    snprintf(self, sizeof self, "%ld", (long)getpid());
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        double s = task_cpu_s(e->d_name);
        if (s < 0)
            continue;
        task_name(e->d_name, name, sizeof name);
        if (strcmp(e->d_name, self) == 0) {
            t->main_s += s;
        } else if (strcmp(name, "tsock-decode") == 0) {
            t->workers_s += s;
            t->workers++;
        } else if (strcmp(name, "tsock-service") == 0) {
            t->service_s += s;
        } else if (strncmp(name, "ZMQbg", 5) == 0) {
            t->zmq_s += s;
        } else {
            t->other_s += s;
        }
    }
    closedir(dir);
    t->ok = 1;
}
