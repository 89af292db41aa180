/* tsock-producer's reporting: the live status line on a terminal, the --stats-json records
 * (one JSON object per line: one per interval, then a final one) and the closing summary. */
#ifndef TSOCK_PRODUCER_REPORT_H
#define TSOCK_PRODUCER_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "producer_options.h"
#include "tsock/pipeline.h"
#include "tsock/tsock.h"

/* The last figures of every consumer that ever joined, by id: the library lists only the
 * consumers connected now. */
struct consumer_rec {
    uint64_t id, pid, batches, samples, released, held, bad_messages;
    uint64_t released_before; /* at the previous interval, for the rate */
    double rate;              /* batches released per second over the last interval */
    int connected;
};

struct consumer_table {
    struct consumer_rec *recs;
    size_t count, cap;
};

/* Samples the library's per-consumer statistics into the table. Returns the number of
 * connected consumers that still hold slots, or -1 when the list could not be read. */
int table_update(struct consumer_table *t, tsock_producer *p);

/* CPU time of this process's threads by kind, in seconds (from /proc/self/task/TID/schedstat,
 * or stat's ticks where schedstat is missing): the main thread (the pipeline's driving thread:
 * reads, publishing, reporting), the pipeline's decode workers ("tsock-decode"), the library's
 * service thread ("tsock-service"), ZeroMQ's threads ("ZMQbg/..."), and the rest (io_uring
 * workers, helpers). `ok` is 0 when /proc could not be read. */
struct thread_cpu {
    double main_s, workers_s, service_s, zmq_s, other_s;
    int workers, ok;
};

/* Reads the figures above for the calling process; the caller is the main thread. */
void thread_cpu_read(struct thread_cpu *t);

/* What the run did, as the main loop counts it. */
struct run_stats {
    uint64_t batches, samples, epochs;
    uint64_t joined, lost, bad_messages, wait_ns;
    double wall_s, cpu_s;
    int finished;      /* the sampler issued every epoch and finish was called */
    int stopped_by;    /* signal number, or 0 */
    const char *error; /* NULL, or the text of the error that ended the run */
    /* The main thread's CPU in tsock_producer_acquire and tsock_producer_publish, in ns
     * (CLOCK_THREAD_CPUTIME_ID): the publishing stage. */
    uint64_t publish_cpu_ns;
    struct thread_cpu threads; /* per thread group, read before the producer is destroyed */
};

struct reporter {
    const struct config *cfg;
    tsock_producer *producer;
    tsock_pipeline *pipeline; /* NULL for the synthetic dataset */
    const char *endpoint;
    FILE *json;      /* --stats-json, or NULL */
    int json_failed; /* a write failed (reported once) */
    int tty;         /* stderr is a terminal: show the live line */
    double t0, last_t, last_cpu;
    uint64_t last_samples, last_bytes, last_decode_ns;
    /* per-stage CPU at the previous interval (ns): read, codec, resample, publish */
    uint64_t last_stage_ns[4];
    const uint64_t *publish_cpu_ns; /* the run's counter (run_stats.publish_cpu_ns) */
};

/* Sets the reporter up (the clocks of the first interval); opens no file. */
void reporter_open(struct reporter *r, const struct config *cfg);

/* Opens --stats-json (truncating it), if given. Called only once the producer has started:
 * a producer that fails to start (a busy endpoint, a bad dataset) must leave the file as it
 * was, since it may be the running producer's. Returns 0 or a negated errno from opening it. */
int reporter_open_json(struct reporter *r);

/* Called often from the main loop: when an interval has passed, refreshes the table, prints
 * the live line (on a terminal, unless --quiet) and appends an interval record. */
void reporter_tick(struct reporter *r, const struct run_stats *st, struct consumer_table *t);

/* Appends the final record and closes the file. Returns 0, or a negated errno when any record
 * could not be written (a full disk). */
int reporter_close(struct reporter *r, const struct run_stats *st, const struct consumer_table *t);

#endif
