/* What a GPU test run leaves behind, shared by gpu_ring and gpu_engine: its scratch directory,
 * and on the simulated device the objects of its own device name in /dev/shm (issue 20: every
 * run of the engine tests used to leave three there). A test removes both and fails, naming
 * them, when objects are left that neither it nor the driver's rules (a dead process's memory
 * goes once nobody maps it) would have freed. */
#ifndef TSOCK_TESTS_GPU_LEFTOVERS_H
#define TSOCK_TESTS_GPU_LEFTOVERS_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../unit/scratch.h" /* test_scratch_dir: the tests' folder, removed at exit */
#include "backend/cuda/devapi.h"
#include "backend/cuda/devapi_sim.h"

/* Removes the scratch directory `dir` and the files directly in it, as soon as the case is over
 * (scratch.h removes its root at exit in any case). */
static void
remove_scratch(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* On the simulated device `simdev`, once every process of the run has exited: removes what the
 * dead ones left (as the driver would), then names and removes whatever is still there.
 * Returns the number of objects that were left. */
static int
device_leftovers(const char *simdev)
{
    if (!tsock__dev_simulated())
        return 0;
    (void)tsock__dev_sim_sweep();
    char prefix[96];
    int plen = snprintf(prefix, sizeof prefix, "tsock-sim-%s-", simdev);
    int left = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        fprintf(stderr, "left behind in /dev/shm: %s\n", e->d_name);
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        shm_unlink(name);
        left++;
    }
    if (d)
        closedir(d);
    return left;
}

#endif
