/* Data-parallel groups: node shares, rank placement, the per-rank plan's DistributedSampler
 * semantics (equal counts and batches, disjoint shards, exact union, padding or drop_last) on
 * one node and on several, and the group's start barrier and checks. Exhaustive over small
 * sizes, so every tail shape is met. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dataset/groups.h"
#include "dataset/sampler.h"

static void
test_node_shares(void)
{
    for (uint64_t n = 1; n <= 40; n++) {
        for (uint32_t nodes = 1; nodes <= 5; nodes++) {
            uint64_t m = tsock__groups_node_samples(n, nodes);
            CHECK_EQ(m, (n + nodes - 1) / nodes);
            unsigned *seen = calloc(n, sizeof(*seen));
            uint64_t *ids = malloc(m * sizeof(*ids));
            uint64_t *again = malloc(m * sizeof(*again));
            for (uint32_t k = 0; k < nodes; k++) {
                CHECK_EQ(tsock__groups_node_share(n, 42, nodes, k, ids), 0);
                CHECK_EQ(tsock__groups_node_share(n, 42, nodes, k, again), 0);
                CHECK(memcmp(ids, again, m * sizeof(*ids)) == 0); /* derived, not drawn */
                for (uint64_t i = 0; i < m; i++) {
                    CHECK(ids[i] < n);
                    if (ids[i] < n)
                        seen[ids[i]]++;
                }
            }
            /* Every sample on some node; only the padding (nodes·m - n samples) twice. */
            uint64_t twice = 0;
            for (uint64_t i = 0; i < n; i++) {
                CHECK(seen[i] >= 1);
                twice += seen[i] - 1;
            }
            CHECK_EQ(twice, nodes * m - n);
            free(seen);
            free(ids);
            free(again);
        }
    }
    uint64_t a[50], b[50];
    CHECK_EQ(tsock__groups_node_share(100, 1, 2, 0, a), 0);
    CHECK_EQ(tsock__groups_node_share(100, 2, 2, 0, b), 0);
    CHECK(memcmp(a, b, sizeof(a)) != 0); /* the seed decides the split */
    CHECK_EQ(tsock__groups_node_share(0, 1, 2, 0, a), -EINVAL);
    CHECK_EQ(tsock__groups_node_share(10, 1, 0, 0, a), -EINVAL);
    CHECK_EQ(tsock__groups_node_share(10, 1, 2, 2, a), -EINVAL);
    CHECK_EQ(tsock__groups_node_share(10, 1, 2, 0, NULL), -EINVAL);
}

static void
test_place(void)
{
    uint32_t l = 99, lw = 99;
    CHECK_EQ(tsock__groups_place(3, 4, 2, 1, &l, &lw), 0);
    CHECK_EQ(l, 1);
    CHECK_EQ(lw, 2);
    CHECK_EQ(tsock__groups_place(2, 4, 2, 0, &l, &lw), -ERANGE);
    CHECK_EQ(tsock__groups_place(4, 4, 2, 0, &l, &lw), -EINVAL);
    CHECK_EQ(tsock__groups_place(0, 3, 2, 0, &l, &lw), -EINVAL); /* 3 ranks on 2 nodes */
    CHECK_EQ(tsock__groups_place(0, 0, 1, 0, &l, &lw), -EINVAL);
    CHECK_EQ(tsock__groups_place(0, 4, 0, 0, &l, &lw), -EINVAL);
    CHECK_EQ(tsock__groups_place(0, 4, 2, 2, &l, &lw), -EINVAL);
}

/* One group epoch over `nodes` nodes: each node's window is its share in a shuffled order (as
 * the producer's sampler would stream it); every rank's batches are collected and checked. */
static void
check_epoch(uint64_t n, uint32_t world, uint32_t nodes, uint32_t batch, int drop_last)
{
    uint32_t lw = world / nodes;
    uint64_t m = tsock__groups_node_samples(n, nodes);
    uint64_t *share = malloc(m * sizeof(*share));
    uint64_t *order = malloc(m * sizeof(*order));
    uint64_t *pos = malloc(batch * sizeof(*pos));
    unsigned *seen = calloc(n, sizeof(*seen));
    unsigned *node_copies = calloc(n, sizeof(*node_copies));
    uint64_t expect_t = drop_last ? n / world : (n + world - 1) / world;
    uint64_t expect_batches = drop_last ? (n / world) / batch : (expect_t + batch - 1) / batch;
    uint64_t delivered = 0;
    int init_ok = 1;
    for (uint32_t k = 0; k < nodes; k++) {
        CHECK_EQ(tsock__groups_node_share(n, 7, nodes, k, share), 0);
        tsock__sampler_permutation(m, 7, 3 + k, order);
        for (uint64_t i = 0; i < m; i++)
            node_copies[share[i]]++;
        for (uint32_t l = 0; l < lw; l++) {
            struct tsock__rank_plan p;
            int rc = tsock__rank_plan_init(&p, n, m, world, lw, l, batch, drop_last);
            if (expect_batches == 0) {
                CHECK_EQ(rc, -EINVAL); /* an empty epoch is refused, not looped over */
                init_ok = 0;
                continue;
            }
            CHECK_EQ(rc, 0);
            CHECK_EQ(p.batches, expect_batches);
            uint64_t got = 0;
            for (uint64_t b = 0; b < p.batches; b++) {
                uint32_t k2 = tsock__rank_plan_batch(&p, b, pos);
                CHECK(k2 >= 1 && k2 <= batch);
                if (drop_last || b + 1 < p.batches)
                    CHECK_EQ(k2, batch);
                for (uint32_t j = 0; j < k2; j++) {
                    CHECK(pos[j] < m);
                    if (pos[j] < m)
                        seen[share[order[pos[j]]]]++;
                }
                got += k2;
            }
            CHECK_EQ(tsock__rank_plan_batch(&p, p.batches, pos), 0);
            /* Equal samples per rank: T = ceil(N / W), or whole batches of floor(N / W). */
            CHECK_EQ(got, drop_last ? expect_batches * batch : expect_t);
            delivered += got;
        }
    }
    if (init_ok) {
        uint64_t dup = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (!drop_last)
                CHECK(seen[i] >= 1); /* the union is the whole dataset */
            /* A sample twice only as padding: DistributedSampler's (on the last round) or a
             * node share's (samples two nodes hold). */
            if (seen[i] > 1) {
                dup += seen[i] - 1;
                if (drop_last)
                    CHECK(node_copies[i] > 1);
            }
        }
        if (!drop_last)
            CHECK_EQ(dup, (uint64_t)world * expect_t - n);
        else
            CHECK(delivered <= n + (nodes * m - n));
    }
    free(share);
    free(order);
    free(pos);
    free(seen);
    free(node_copies);
}

static void
test_rank_plans(void)
{
    static const uint32_t worlds[][2] = {{1, 1}, {2, 1}, {3, 1}, {4, 1},
                                         {2, 2}, {4, 2}, {6, 3}, {8, 2}};
    for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); w++)
        for (uint64_t n = 1; n <= 70; n++)
            for (uint32_t batch = 1; batch <= 9; batch += 2)
                for (int drop = 0; drop <= 1; drop++)
                    check_epoch(n, worlds[w][0], worlds[w][1], batch, drop);
    check_epoch(50000, 4, 1, 64, 0);
    check_epoch(50001, 4, 2, 32, 1);
}

static void
test_plan_layout(void)
{
    /* 10 samples, 3 ranks, batch 2: full round [0, 6); tail [6, 10) = 1 each + rank 0 one more;
     * ranks 1 and 2 padded with tail positions 6 and 7 (other ranks' samples). */
    struct tsock__rank_plan p;
    uint64_t pos[2];
    CHECK_EQ(tsock__rank_plan_init(&p, 10, 10, 3, 3, 1, 2, 0), 0);
    CHECK_EQ(p.per_rank, 4);
    CHECK_EQ(p.batches, 2);
    CHECK_EQ(tsock__rank_plan_batch(&p, 0, pos), 2);
    CHECK_EQ(pos[0], 2);
    CHECK_EQ(pos[1], 3);
    CHECK_EQ(tsock__rank_plan_batch(&p, 1, pos), 2);
    CHECK_EQ(pos[0], 8);
    CHECK_EQ(pos[1], 6);
    CHECK_EQ(tsock__rank_plan_init(&p, 10, 10, 3, 3, 2, 2, 0), 0);
    CHECK_EQ(tsock__rank_plan_batch(&p, 1, pos), 2);
    CHECK_EQ(pos[0], 9);
    CHECK_EQ(pos[1], 7);
    /* Bad input. */
    CHECK_EQ(tsock__rank_plan_init(&p, 10, 9, 3, 3, 0, 2, 0), -EINVAL);  /* wrong window */
    CHECK_EQ(tsock__rank_plan_init(&p, 10, 10, 3, 3, 3, 2, 0), -EINVAL); /* local >= L */
    CHECK_EQ(tsock__rank_plan_init(&p, 10, 5, 3, 2, 0, 2, 0), -EINVAL);  /* 3 ranks, 2 each */
    CHECK_EQ(tsock__rank_plan_init(&p, 10, 10, 3, 3, 0, 0, 0), -EINVAL);
    CHECK_EQ(tsock__rank_plan_init(&p, 5, 5, 4, 4, 0, 2, 1), -EINVAL); /* empty epoch */
}

static void
test_membership(void)
{
    struct tsock__group *g = malloc(sizeof(*g));
    const char *why = NULL;
    char text[128];
    CHECK_EQ(tsock__group_init(g, "", 4, 1, 0, 8, 0, &why), -EINVAL);
    CHECK(why != NULL);
    CHECK_EQ(tsock__group_init(g, "a\nb", 4, 1, 0, 8, 0, &why), -EINVAL);
    CHECK_EQ(tsock__group_init(g, "job", 3, 2, 0, 8, 0, &why), -EINVAL);
    CHECK_EQ(tsock__group_init(g, "job", 4, 1, 0, 0, 0, &why), -EINVAL);
    CHECK_EQ(tsock__group_init(g, "job", 4, 2, 1, 8, 0, &why), 0); /* ranks 2 and 3 here */
    CHECK_EQ(g->local_world, 2);
    CHECK_EQ(tsock__group_join(g, 1, 4, 8, 0, 11, &why), -ERANGE);
    CHECK_EQ(tsock__group_join(g, 3, 4, 8, 0, 11, &why), 0);
    CHECK(!tsock__group_complete(g));
    CHECK_EQ(tsock__group_describe_missing(g, text, sizeof(text)),
             (int)strlen("group 'job': rank 2 of 4 did not join"));
    CHECK(strcmp(text, "group 'job': rank 2 of 4 did not join") == 0);
    CHECK_EQ(tsock__group_join(g, 3, 4, 8, 0, 12, &why), -EEXIST);
    CHECK_EQ(tsock__group_join(g, 2, 2, 8, 0, 12, &why), -EINVAL);
    CHECK_EQ(tsock__group_join(g, 2, 4, 16, 0, 12, &why), -EINVAL);
    CHECK(why != NULL && strstr(why, "batch") != NULL);
    CHECK_EQ(tsock__group_join(g, 2, 4, 8, 1, 12, &why), -EINVAL);
    CHECK_EQ(tsock__group_join(g, 2, 4, 8, 0, 0, &why), -EINVAL);
    CHECK_EQ(tsock__group_join(g, 2, 4, 8, 0, 12, &why), 1); /* complete: start now */
    CHECK(tsock__group_complete(g));
    CHECK_EQ(tsock__group_leave(g, 99), -ENOENT);
    CHECK_EQ(tsock__group_leave(g, 11), 3); /* the lost rank, for the others' message */
    CHECK(!tsock__group_complete(g));

    CHECK_EQ(tsock__group_init(g, "big", 6, 1, 0, 8, 0, &why), 0);
    CHECK_EQ(tsock__group_join(g, 4, 6, 8, 0, 5, &why), 0);
    tsock__group_describe_missing(g, text, sizeof(text));
    CHECK(strcmp(text, "group 'big': ranks 0, 1, 2, 3, 5 of 6 did not join") == 0);
    /* Truncation still ends in a NUL and reports the full length. */
    int need = tsock__group_describe_missing(g, text, 10);
    CHECK_EQ(need, (int)strlen("group 'big': ranks 0, 1, 2, 3, 5 of 6 did not join"));
    CHECK_EQ(strlen(text), 9);
    free(g);
}

/* One node's ranks of a restored plan over a filtered window of `rest` positions: equal
 * counts, and the positions every one once (padding: plus at most one repeat per rank) or,
 * with drop_last, disjoint with fewer than ranks · batch left out (plus one per rank with
 * several nodes: a rank's count floor(N / W) is the global one, up to one below the node's). */
static void
check_rest_cover(const struct tsock__rank_plan *plans, uint32_t lw, uint64_t rest, uint32_t nodes)
{
    unsigned *seen = calloc(rest, sizeof *seen);
    uint64_t *pos = malloc(plans[0].batch * sizeof *pos);
    uint64_t total = 0;
    for (uint32_t l = 0; l < lw; l++) {
        uint64_t count = 0;
        for (uint64_t i = 0; i < plans[l].batches; i++) {
            uint32_t k = tsock__rank_plan_batch(&plans[l], i, pos);
            for (uint32_t j = 0; j < k; j++) {
                CHECK(pos[j] < rest);
                seen[pos[j]]++;
            }
            count += k;
        }
        CHECK_EQ(count, plans[0].drop_last ? plans[0].batches * plans[0].batch : plans[0].per_rank);
        total += count;
    }
    uint64_t covered = 0;
    for (uint64_t i = 0; i < rest; i++)
        covered += seen[i] > 0;
    if (plans[0].drop_last) {
        CHECK_EQ(covered, total);
        CHECK(rest - covered < (uint64_t)lw * (plans[0].batch + (nodes > 1)));
    } else {
        CHECK_EQ(covered, rest);
        CHECK(total - rest < lw);
    }
    free(pos);
    free(seen);
}

/* A group saved after k steps and restored (docs/semantics.md, "Resume"): with the world it
 * saved with, every rank's restored batches are exactly its uninterrupted batches from k on
 * (positions shifted by the consumed prefix); with any other world, the rest is dealt out
 * evenly and exactly. Exhaustive over small sizes. */
static void
test_restored_plans(void)
{
    uint64_t pos[8], full_pos[8];
    for (uint64_t n = 1; n <= 45; n++)
        for (uint32_t nodes = 1; nodes <= 2; nodes++)
            for (uint32_t world = nodes; world <= 6; world += nodes)
                for (uint32_t batch = 1; batch <= 4; batch++)
                    for (int drop = 0; drop <= 1; drop++) {
                        uint64_t m = tsock__groups_node_samples(n, nodes);
                        uint32_t lw = world / nodes;
                        struct tsock__rank_plan full[6], rest[6];
                        if (tsock__rank_plan_init(&full[0], n, m, world, lw, 0, batch, drop) < 0)
                            continue;
                        for (uint64_t k = 1; k < full[0].batches; k++) {
                            uint64_t used = k * lw * batch;
                            for (uint32_t l = 0; l < lw; l++) {
                                CHECK_EQ(tsock__rank_plan_init(&full[l], n, m, world, lw, l, batch,
                                                               drop),
                                         0);
                                CHECK_EQ(tsock__rank_plan_init_rest(&rest[l], n, m, used, world, lw,
                                                                    l, batch, drop),
                                         0);
                                CHECK_EQ(rest[l].per_rank, full[l].per_rank - k * batch);
                                CHECK_EQ(rest[l].batches, full[l].batches - k);
                                for (uint64_t i = 0; i < rest[l].batches; i++) {
                                    uint32_t got = tsock__rank_plan_batch(&rest[l], i, pos);
                                    CHECK_EQ(got,
                                             tsock__rank_plan_batch(&full[l], k + i, full_pos));
                                    for (uint32_t j = 0; j < got; j++)
                                        CHECK_EQ(pos[j] + used, full_pos[j]);
                                }
                            }
                            /* Another world size over the same rest. */
                            for (uint32_t w2 = nodes; w2 <= 6; w2 += nodes) {
                                uint32_t lw2 = w2 / nodes;
                                int rc = 0;
                                for (uint32_t l = 0; l < lw2 && rc == 0; l++)
                                    rc = tsock__rank_plan_init_rest(&rest[l], n, m, used, w2, lw2,
                                                                    l, batch, drop);
                                uint64_t left = n - nodes * used;
                                if (drop && left / w2 < batch) {
                                    CHECK_EQ(rc, -EINVAL); /* no batch: refused, not looped */
                                    continue;
                                }
                                CHECK_EQ(rc, 0);
                                check_rest_cover(rest, lw2, m - used, nodes);
                            }
                        }
                    }
    struct tsock__rank_plan p;
    CHECK_EQ(tsock__rank_plan_init_rest(&p, 10, 10, 10, 1, 1, 0, 1, 0), -EINVAL); /* all used */
    CHECK_EQ(tsock__rank_plan_init_rest(&p, 10, 10, 3, 2, 1, 0, 1, 0),
             -EINVAL); /* a window of one node of two */
    CHECK_EQ(tsock__rank_plan_init_rest(&p, 10, 10, 3, 2, 2, 1, 1, 0), 0);
    CHECK_EQ(p.window, 7);
    CHECK_EQ(p.per_rank, 4);
}

/* Restored ranks must agree on the state they restored (HELLO's fingerprint). */
static void
test_check_resume(void)
{
    struct tsock__group g;
    const char *why = NULL;
    CHECK_EQ(tsock__group_init(&g, "g", 2, 1, 0, 4, 0, &why), 0);
    CHECK_EQ(tsock__group_check_resume(&g, 0, &why), 0);
    CHECK_EQ(tsock__group_check_resume(&g, 7, &why), -EINVAL);
    CHECK(strstr(why, "restored state") && strstr(why, "fresh ranks mixed"));
    g.resume = 7;
    CHECK_EQ(tsock__group_check_resume(&g, 7, &why), 0);
    CHECK_EQ(tsock__group_check_resume(&g, 0, &why), -EINVAL);
    CHECK(strstr(why, "fresh ranks mixed") != NULL);
    CHECK_EQ(tsock__group_check_resume(&g, 8, &why), -EINVAL);
    CHECK(strstr(why, "saved at another step") != NULL);
    CHECK_EQ(tsock__group_check_resume(NULL, 0, &why), -EINVAL);
}

int
main(void)
{
    test_restored_plans();
    test_check_resume();
    test_node_shares();
    test_place();
    test_rank_plans();
    test_plan_layout();
    test_membership();
    return CHECK_DONE();
}
