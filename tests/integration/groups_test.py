#!/usr/bin/env python3
"""Data-parallel groups on one producer, with the real programs: tsock-consume --group.

    groups_test.py TEST --producer PATH --consume PATH

groups_pad / groups_drop_last: one producer; groups of world 2, 3 and 4 with different batch
sizes (one of them joining late) and a solo consumer, two epochs each. Per group epoch, read
from the ranks' --ids-out files: every rank has the same number of samples and of batches; the
ranks' shares are disjoint and together the whole dataset plus only the repeated tail samples
(padding), or a subset of it lacking fewer than world x batch samples (drop_last).
groups_incomplete: ranks that never start make every waiting rank fail, naming them.
groups_mismatch: a rank that disagrees with the joined ranks is refused, the field named.
groups_kill9 / groups_stopped_rank: kill -9 of one rank (its connection goes), or SIGSTOP (its
heartbeats stop), ends its group's other ranks with the group-lost error within the heartbeat
timeout; a solo consumer and another group finish their epochs exactly.
groups_two_nodes: two producers with --nodes 2 serve a group of world 4, two ranks each: every
group epoch is exact across the four ranks.
Standard library only.
"""
import signal
import time

from itest import check, read_ids, run, wait_for
from tsock_integration import Env, Proc, wait_json

N = 1003  # not a multiple of any world or batch size here: every tail case comes up
PRODUCER_BATCH = 32
# Heartbeat timeout: generous, so that a live peer starved of CPU (sanitizers, a loaded
# machine) is never taken for a lost one; the lost-rank tests use HB_LOST_S.
HB_TIMEOUT_MS = 10000
HB_LOST_MS = 3000


def heartbeat(timeout_ms):
    return ("--heartbeat-ms", "100", "--heartbeat-timeout-ms", str(timeout_ms))


def producer(env, *extra, hb_ms=HB_TIMEOUT_MS, **kw):
    return env.producer("--epochs", "0", *heartbeat(hb_ms), *extra, hb=False, samples=N, **kw)


def consumer(env, *extra, hb_ms=HB_TIMEOUT_MS, **kw):
    return env.consumer(*heartbeat(hb_ms), "--timeout-ms", "60000", *extra, hb=False, samples=N,
                        **kw)


def start_group(env, name, world, batch, *extra, epochs=2, hb_ms=HB_TIMEOUT_MS):
    """The ranks of a group as tsock-consume processes, each writing its --ids-out file."""
    ranks = []
    for r in range(world):
        ids = env.path(f"{name}-{r}.ids")
        p = consumer(env, "--group", name, "--rank", str(r), "--world-size", str(world),
                     "--batch-size", str(batch), "--epochs", str(epochs), "--ids-out", ids,
                     *extra, hb_ms=hb_ms, name=f"{name}-{r}")
        ranks.append((p, ids))
    return ranks


def check_group(name, ranks, world, batch, drop_last, epochs=2, nodes=1):
    """Waits for every rank and checks each group epoch across the ranks. With node shares a
    node's padding sample (up to nodes - 1 per epoch, docs/distributed.md) may come twice."""
    results = [wait_json(p, 60, f"{name} rank {r}") for r, (p, _) in enumerate(ranks)]
    per_rank = (N // world) if drop_last else -(-N // world)
    if drop_last:
        per_rank -= per_rank % batch
    batches = -(-per_rank // batch)
    for r, res in enumerate(results):
        check(res["epochs"] == epochs and res["duplicates"] == 0 and res["missing"] == 0 and
              res["content_errors"] == 0 and res["batch_size_errors"] == 0 and
              res["epoch_size_errors"] == 0 and res["out_of_order"] == 0,
              f"{name} rank {r}: {res}")
        check(res["batches"] == epochs * batches and res["samples"] == epochs * per_rank,
              f"{name} rank {r}: {res['batches']} batches, {res['samples']} samples; expected "
              f"{epochs * batches} and {epochs * per_rank}")
        check(res["batches_per_epoch"] == batches,
              f"{name} rank {r}: batches_per_epoch {res['batches_per_epoch']}, not {batches}")
    ids = [read_ids(path) for _, path in ranks]
    for e in range(epochs):
        shares = [i.get(e, []) for i in ids]
        for r, s in enumerate(shares):
            check(len(s) == per_rank and len(set(s)) == per_rank,
                  f"{name} epoch {e} rank {r}: {len(s)} samples ({len(set(s))} distinct), "
                  f"expected {per_rank}")
        union = set().union(*map(set, shares))
        total = sum(len(s) for s in shares)
        check(union <= set(range(N)), f"{name} epoch {e}: ids outside the dataset")
        if drop_last:
            check(total - len(union) <= nodes - 1, f"{name} epoch {e}: the ranks' shares overlap")
            check(N - len(union) < world * batch + nodes - 1,
                  f"{name} epoch {e}: {N - len(union)} samples left out, not fewer than "
                  f"{world * batch}")
        else:
            check(union == set(range(N)), f"{name} epoch {e}: {N - len(union)} samples missing")
            # Padding repeats tail samples, at most one per rank; nothing else is shared.
            check(total - N == world * per_rank - N and world * per_rank - N < world,
                  f"{name} epoch {e}: {total - N} samples repeated")
    print(f"{name}: world {world}, batch {batch}: {per_rank} samples in {batches} batches per "
          f"rank and epoch; views {sum(r['views'] for r in results)}, gathers "
          f"{sum(r['gathers'] for r in results)}")


def mixed(env, drop_last):
    extra = ("--drop-last",) if drop_last else ()
    p = producer(env, batch=PRODUCER_BATCH, slots=8)
    p.wait_stderr("serving", 10)
    a = start_group(env, "a", 2, PRODUCER_BATCH, *extra)  # blocks = producer batches: views
    b = start_group(env, "b", 3, 20, *extra)
    solo = consumer(env, "--batch-size", "50", "--epochs", "2", *extra, name="solo")
    # Group c joins late: once group a is into its first epoch.
    wait_for(lambda: len(read_ids(a[0][1]).get(0, [])) >= 64, 30, "group a to start")
    c = start_group(env, "c", 4, 16, *extra)
    check_group("a", a, 2, PRODUCER_BATCH, drop_last)
    check_group("b", b, 3, 20, drop_last)
    check_group("c", c, 4, 16, drop_last)
    res = wait_json(solo, 60, "the solo consumer")
    check(res["epochs"] == 2 and res["missing"] == 0 and res["duplicates"] == 0,
          f"solo: {res}")
    p.signal(signal.SIGTERM)
    p.wait(10)


def test_pad(env):
    mixed(env, False)


def test_drop_last(env):
    mixed(env, True)


def test_incomplete(env):
    p = producer(env)
    p.wait_stderr("serving", 10)
    # The timeout must outlast the start of the ranks that do come (slow under sanitizers).
    ranks = [consumer(env, "--group", "resnet", "--rank", str(r), "--world-size", "4",
                      "--group-timeout", "6000", name=f"rank{r}") for r in (0, 2)]
    want = "group 'resnet': ranks 1, 3 of 4 did not join within 6 s"
    for r, c in zip((0, 2), ranks):
        rc = c.wait(30, f"rank {r}")
        res = c.json()
        check(rc == 1 and res["error_code"] == -10020,
              f"rank {r}: exit {rc}, error {res.get('error')} ({res.get('error_code')})")
        check(want in c.stderr(), f"rank {r} does not say '{want}': {c.stderr()!r}")
        check(res["batches"] == 0, f"rank {r} received batches before its group was complete")
    check(want in p.stderr(), f"the producer does not say '{want}'")
    # The group was forgotten: a new one of that name forms and runs.
    ranks = start_group(env, "resnet", 2, 32, epochs=1)
    check_group("resnet", ranks, 2, 32, False, epochs=1)
    p.signal(signal.SIGTERM)
    p.wait(10)


def test_mismatch(env):
    p = producer(env, "--verbose")
    p.wait_stderr("serving", 10)
    ids0 = env.path("rank0.ids")
    first = consumer(env, "--group", "g", "--rank", "0", "--world-size", "2", "--batch-size",
                     "16", "--epochs", "1", "--ids-out", ids0, name="rank0")
    p.wait_stderr("group 'g': rank 0 of 2 joined", 10)

    def refused(field, *args):
        c = consumer(env, "--group", "g", "--epochs", "1", *args, name=field)
        rc = c.wait(20, field)
        res = c.json()
        check(rc == 1 and res["error_code"] == -10021,
              f"{field}: exit {rc}, error {res.get('error')} ({res.get('error_code')})")
        check(field in c.stderr(), f"{field}: the refusal does not name it: {c.stderr()!r}")

    refused("the world size differs", "--rank", "1", "--world-size", "3", "--batch-size", "16")
    refused("the batch size differs", "--rank", "1", "--world-size", "2", "--batch-size", "8")
    refused("drop_last differs", "--rank", "1", "--world-size", "2", "--batch-size", "16",
            "--drop-last")
    refused("has joined the group already", "--rank", "0", "--world-size", "2",
            "--batch-size", "16")
    # The group is unharmed: its missing rank joins and both finish an exact epoch.
    second = consumer(env, "--group", "g", "--rank", "1", "--world-size", "2", "--batch-size",
                      "16", "--epochs", "1", "--ids-out", env.path("rank1.ids"), name="rank1")
    check_group("g", [(first, ids0), (second, env.path("rank1.ids"))], 2, 16, False, epochs=1)
    # Bad declarations are refused by the program before anything connects.
    bad = consumer(env, "--group", "g", "--rank", "2", "--world-size", "2", name="bad-rank")
    check(bad.wait(10) == 2 and "not below" in bad.stderr(), f"bad rank: {bad.stderr()!r}")
    p.signal(signal.SIGTERM)
    p.wait(10)


def lost_rank(env, sig):
    """One rank of group 'victim' gets `sig`: SIGKILL (its connection goes) or SIGSTOP (its
    heartbeats stop, so the producer finds it in a heartbeat pass)."""
    p = producer(env, hb_ms=HB_LOST_MS, slots=8)
    p.wait_stderr("serving", 10)
    victim = start_group(env, "victim", 3, 32, "--delay-ms", "5", epochs=6, hb_ms=HB_LOST_MS)
    other = start_group(env, "other", 2, 24, epochs=4, hb_ms=HB_LOST_MS)
    solo = consumer(env, "--epochs", "3", hb_ms=HB_LOST_MS, name="solo")
    wait_for(lambda: len(read_ids(victim[1][1]).get(0, [])) >= 64, 30, "the victim group")
    victim[1][0].p.send_signal(sig)
    killed = time.monotonic()
    if sig == signal.SIGKILL:
        victim[1][0].wait(5)
    for r in (0, 2):
        c = victim[r][0]
        rc = c.wait(30, f"victim rank {r}")
        res = c.json()
        check(rc == 1 and res["error_code"] == -10022,
              f"victim rank {r}: exit {rc}, error {res.get('error')} ({res.get('error_code')})")
        check("group 'victim': rank 1 of 3 was lost" in c.stderr(),
              f"victim rank {r} does not name the lost rank: {c.stderr()!r}")
    # Within the heartbeat timeout (3 s here), with room for a loaded machine.
    took = time.monotonic() - killed
    check(took < 20, f"the victim group's ranks took {took:.1f} s to fail")
    check_group("other", other, 2, 24, False, epochs=4)
    res = wait_json(solo, 60, "the solo consumer")
    check(res["epochs"] == 3 and res["missing"] == 0 and res["duplicates"] == 0,
          f"solo: {res}")
    victim[1][0].kill()
    p.signal(signal.SIGTERM)
    p.wait(10)
    print(f"the victim group's ranks failed {took:.2f} s after the signal")


def test_kill9(env):
    lost_rank(env, signal.SIGKILL)


def test_stopped_rank(env):
    lost_rank(env, signal.SIGSTOP)


def test_two_nodes(env):
    """Two producers with --nodes 2 (two simulated nodes, same seed) and a group of world 4,
    ranks 0 and 1 on node 0, 2 and 3 on node 1: each group epoch is exact across all four
    ranks (plus the node and rank padding), with and without drop_last; a rank attached to the
    other node's producer is refused."""
    eps = [f"ipc://{env.path(f'node{k}.sock')}" for k in (0, 1)]
    prods = [producer(env, "--nodes", "2", "--node-rank", str(k), "--seed", "7", "--verbose",
                      endpoint=eps[k], name=f"producer{k}") for k in (0, 1)]
    for p in prods:
        p.wait_stderr("serving", 10)
    for name, batch, extra in (("pad", 20, ()), ("drop", 16, ("--drop-last",))):
        ranks = []
        for r in range(4):
            ids = env.path(f"{name}-{r}.ids")
            c = consumer(env, "--group", name, "--rank", str(r), "--world-size", "4",
                         "--batch-size", str(batch), "--epochs", "2", "--nodes", "2",
                         "--ids-out", ids, *extra, endpoint=eps[r // 2], name=f"{name}-{r}")
            ranks.append((c, ids))
        check_group(name, ranks, 4, batch, bool(extra), nodes=2)
    stray = consumer(env, "--group", "stray", "--rank", "3", "--world-size", "4", "--nodes", "2",
                     endpoint=eps[0], name="stray")
    rc = stray.wait(20, "stray")
    check(rc == 1 and "belongs to another node" in stray.stderr(),
          f"a rank of node 1 on node 0's producer: exit {rc}, {stray.stderr()!r}")
    for p in prods:
        p.signal(signal.SIGTERM)
        p.wait(10)


def test_no_reconnect(env):
    """A rank with --reconnect-ms does not reconnect when its producer is killed: its epoch
    ends interrupted, then it fails with the producer's loss, even though a new producer
    serves the endpoint (its window and rank plan belonged to the lost stream)."""
    p = producer(env, hb_ms=HB_LOST_MS)
    p.wait_stderr("serving", 10)
    ids = env.path("rank0.ids")
    rank = consumer(env, "--group", "solo-rank", "--rank", "0", "--world-size", "1",
                    "--batch-size", "16", "--epochs", "0", "--delay-ms", "20",
                    "--reconnect-ms", "20000", "--ids-out", ids, hb_ms=HB_LOST_MS, name="rank0")
    wait_for(lambda: read_ids(ids), 30, "the rank's first batch")
    p.kill()
    p2 = producer(env, hb_ms=HB_LOST_MS, name="producer2")
    p2.wait_stderr("serving", 10)
    rc = rank.wait(30, "rank 0")
    res = rank.json()
    check(rc == 1 and res["error_code"] in (-10003, -10004),
          f"rank 0: exit {rc}, error {res.get('error')} ({res.get('error_code')})")
    check("do not reconnect one by one" in rank.stderr(),
          f"rank 0 does not say why it did not reconnect: {rank.stderr()!r}")
    p2.signal(signal.SIGTERM)
    p2.wait(10)


def test_late_rank(env):
    """Issue 18, item 1: ranks waiting at their group's start barrier receive nothing, so the
    producer waits with them instead of publishing its finite stream to nobody. Rank 1 starts
    after rank 0 has joined; the pause between them only gives a wrong producer time to
    publish, the verdict does not depend on it. Both ranks then get the whole epoch, with
    equal counts, and the producer decoded the epoch once."""
    p = producer(env, "--epochs", "1", "--verbose", batch=10, slots=4)
    p.wait_stderr("serving", 10)
    ids0 = env.path("late-0.ids")
    first = [(consumer(env, "--group", "late", "--rank", "0", "--world-size", "2",
                       "--batch-size", "10", "--epochs", "1", "--ids-out", ids0, name="late-0"),
              ids0)]
    p.wait_stderr("group 'late': rank 0 of 2 joined", 20)
    time.sleep(1.0)
    ids1 = env.path("late-1.ids")
    second = consumer(env, "--group", "late", "--rank", "1", "--world-size", "2",
                      "--batch-size", "10", "--epochs", "1", "--ids-out", ids1, name="late-1")
    check_group("late", first + [(second, ids1)], 2, 10, False, epochs=1)
    rc = p.wait(30, "the producer to finish its epoch")
    check(rc == 0 and f"{-(-N // 10)} batches, {N} samples, 1 epochs" in p.stderr(),
          f"the producer published for nobody: {p.stderr()[-400:]!r}")


def stalled_solo(env, *extra, endpoint=None):
    """A solo consumer that reads 3 batches and stalls, so that a group joins after the
    stream's first batches and its window is cut by the stream's end."""
    solo = consumer(env, "--batch-size", "10", "--epochs", "1", "--stall-after", "3", *extra,
                    endpoint=endpoint, name="solo")
    solo.wait_stderr("stalled after 3 batches", 30)
    return solo


def test_stream_end(env):
    """Issue 18, item 2: a 1-epoch producer whose stream ends inside a late group's window
    finishes that window for the group's ranks (docs/distributed.md, "When a finite stream
    ends"): every rank gets the same batch count and the whole epoch. Then the same over two
    node shares, the late group on node 0 only."""
    p = producer(env, "--epochs", "1", "--verbose", batch=10, slots=4)
    p.wait_stderr("serving", 10)
    solo = stalled_solo(env)
    ranks = start_group(env, "cut", 2, 10, epochs=1)
    p.wait_stderr("group 'cut': all 2 ranks joined", 20)
    solo.signal(signal.SIGTERM)
    solo.wait(20, "the stalled solo consumer")
    check_group("cut", ranks, 2, 10, False, epochs=1)
    check(p.wait(30, "the producer") == 0, f"producer: {p.stderr()[-400:]!r}")

    eps = [f"ipc://{env.path(f'node{k}.sock')}" for k in (0, 1)]
    prods = [producer(env, "--epochs", "1", "--nodes", "2", "--node-rank", str(k), "--seed", "7",
                      "--verbose", batch=10, slots=4, endpoint=eps[k], name=f"producer{k}")
             for k in (0, 1)]
    for q in prods:
        q.wait_stderr("serving", 10)
    solo = stalled_solo(env, "--nodes", "2", endpoint=eps[0])
    ranks = []
    for r in range(4):
        ids = env.path(f"nodes-{r}.ids")
        c = consumer(env, "--group", "nodes", "--rank", str(r), "--world-size", "4",
                     "--batch-size", "10", "--epochs", "1", "--nodes", "2", "--ids-out", ids,
                     endpoint=eps[r // 2], name=f"nodes-{r}")
        ranks.append((c, ids))
    prods[0].wait_stderr("group 'nodes': all 2 ranks joined", 20)
    solo.signal(signal.SIGTERM)
    solo.wait(20, "the stalled solo consumer")
    check_group("nodes", ranks, 4, 10, False, epochs=1, nodes=2)
    for q in prods:
        check(q.wait(30, "a node's producer") == 0, f"{q.name}: {q.stderr()[-400:]!r}")


def test_hold(env):
    """Issue 18, item 3: ranks that hold their batches while asking for the next (tsock-consume
    --hold N, as a prefetching loop does) each keep their own slots. With slots <= local ranks
    x held batches the ring used to be pinned: every rank timed out after its first batch.
    Now a rank passes other ranks' blocks as they arrive and copies its block out of the ring
    beyond its share of views, so every case completes its epochs: 8 ranks holding one batch
    each on the default 8 slots, world 2 on 2 slots, world 4 on 4 slots holding two each, and
    world 2 on 5 slots holding two each (two views each, the third batch copied)."""
    for world, slots, hold in ((8, 8, 1), (2, 2, 1), (4, 4, 2), (2, 5, 2)):
        name = f"hold{world}-{slots}-{hold}"
        p = producer(env, "--verbose", batch=10, slots=slots, name=f"producer-{name}")
        p.wait_stderr("serving", 10)
        ranks = start_group(env, name, world, 10, "--hold", str(hold), "--timeout-ms", "30000")
        check_group(name, ranks, world, 10, False)
        p.signal(signal.SIGTERM)
        p.wait(10)


def test_nodes_from_welcome(env):
    """Issue 18, item 4: ranks of a group over two --nodes 2 producers, run without --nodes and
    without --samples, take the node split from the producer's WELCOME and stop after
    --epochs 2 as the library counts them (they used to run on forever, their checker
    counting the node share as the whole dataset). A wrong --nodes is refused, named."""
    eps = [f"ipc://{env.path(f'node{k}.sock')}" for k in (0, 1)]
    prods = [producer(env, "--nodes", "2", "--node-rank", str(k), "--seed", "3", endpoint=eps[k],
                      name=f"producer{k}") for k in (0, 1)]
    for p in prods:
        p.wait_stderr("serving", 10)

    def rank_proc(r, *extra):
        name = f"welcome-{r}"
        argv = [env.args.consume, "--endpoint", eps[r // 2], "--json", "--quiet", "--name", name,
                *heartbeat(HB_TIMEOUT_MS), "--timeout-ms", "60000", "--epoch-grace-ms", "30000",
                "--group", "welcome", "--rank", str(r), "--world-size", "4", "--batch-size",
                "16", "--epochs", "2", *extra]
        p = Proc(name, argv)
        env.procs.append(p)
        return p

    ranks = []
    for r in range(4):
        ids = env.path(f"welcome-{r}.ids")
        ranks.append((rank_proc(r, "--ids-out", ids), ids))
    check_group("welcome", ranks, 4, 16, False, nodes=2)
    wrong = rank_proc(0, "--nodes", "3", "--group-timeout", "5000")
    rc = wrong.wait(30, "a rank with a wrong --nodes")
    check(rc != 0 and "--nodes 3 but the producer serves node 0 of 2" in wrong.stderr(),
          f"a wrong --nodes: exit {rc}, {wrong.stderr()!r}")
    for p in prods:
        p.signal(signal.SIGTERM)
        p.wait(10)


TESTS = {
    "groups_nodes_from_welcome": test_nodes_from_welcome,
    "groups_hold": test_hold,
    "groups_late_rank": test_late_rank,
    "groups_stream_end": test_stream_end,
    "groups_pad": test_pad,
    "groups_drop_last": test_drop_last,
    "groups_incomplete": test_incomplete,
    "groups_mismatch": test_mismatch,
    "groups_kill9": test_kill9,
    "groups_stopped_rank": test_stopped_rank,
    "groups_two_nodes": test_two_nodes,
    "groups_no_reconnect": test_no_reconnect,
}

if __name__ == "__main__":
    run(__doc__, TESTS, Env, [("producer", True), ("consume", True), ("garbage", False),
                              ("stat", False)])
