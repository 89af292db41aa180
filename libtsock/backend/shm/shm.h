/* Host shared memory: the ring as one POSIX shared-memory object, created by the producer
 * (mode 0600) and mapped read-only by each consumer. The slot-memory table over these is in
 * shm_table.c; the functions are also used directly by tests that play a broken producer. */
#ifndef TSOCK_BACKEND_SHM_H
#define TSOCK_BACKEND_SHM_H

#include <stddef.h>
#include <stdint.h>

#define TSOCK__REGION_NAME_MAX 256

struct tsock__region {
    char name[TSOCK__REGION_NAME_MAX]; /* what a consumer needs to attach */
    uint8_t *base;
    size_t bytes;
    int owner; /* created here (producer): release removes the name */
};

/* Creates a new region of `bytes` (mode 0600) named /tsock-<uid>-<pid>-<n>, mapped read-write.
 * Returns 0 or a negated errno. */
int tsock__shm_create(struct tsock__region *r, size_t bytes);

/* Maps an existing region read-only; fails with -EPROTO when its size is not `bytes` (so a
 * consumer never touches memory past the object's end). Returns 0 or a negated errno. */
int tsock__shm_attach(struct tsock__region *r, const char *name, size_t bytes);

/* Unmaps; when the region is the producer's own, also removes its name. */
void tsock__shm_release(struct tsock__region *r);

/* Removes the name of a region whose creator process is gone (the pid is part of the name).
 * Returns 1 when removed, 0 when the creator is alive or the name is not a tsock region. */
int tsock__shm_remove_if_orphaned(const char *name);

/* Removes every region of this user whose creator process is gone (left by a kill -9).
 * Returns how many were removed. */
int tsock__shm_sweep_orphans(void);

#endif
