/* tsock-consume's checkpoint files: the consumer state (--save-state, --resume), written
 * atomically, and the per-sample log (--ids-out), made durable before any state that covers
 * its lines. */
#ifndef TSOCK_CONSUME_STATE_H
#define TSOCK_CONSUME_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Reads a whole state file into a malloc'ed buffer (*buf, *len). Returns 0, or -1 with the
 * reason in why[]. A state is at most a few hundred MB (one bit per sample of 2^32). */
int state_file_read(const char *path, uint8_t **buf, size_t *len, char *why, size_t why_size);

/* Replaces `path` with buf[0, len) atomically: a temporary file beside it, written and
 * fsync'd, renamed over it, and the directory fsync'd, so a crash at any moment leaves the old
 * state or the new one, never a torn one. Returns 0, or a negated errno. */
int state_file_write(const char *path, const void *buf, size_t len);

/* Appends one line "EPOCH ID" per sample to f. */
void ids_out_write(FILE *f, uint64_t epoch, const int64_t *ids, uint32_t n);

/* Flushes f and fsyncs it: its lines survive a crash from now on. Returns 0 or a negated errno. */
int ids_out_sync(FILE *f);

#endif
