/* Statistics shared by the producer engine (tsock_producer_stat, STATS_REPLY) and the stats
 * client (tsock_stats_get): one place maps a tsock_stat key to a figure of a snapshot, so the
 * in-process and the remote view of a producer never disagree on what a key means. */
#ifndef TSOCK_STATS_H
#define TSOCK_STATS_H

#include <stdint.h>

#include "proto/proto.h"

/* A producer-wide figure; `consumers` is the number connected. Returns 0 or -EINVAL. */
int tsock__stats_producer_value(const struct tsock__stats_producer *p, uint32_t consumers, int key,
                                uint64_t *value);

/* A per-consumer figure. Returns 0 or -EINVAL. */
int tsock__stats_consumer_value(const struct tsock__stats_consumer *c, int key, uint64_t *value);

#endif
