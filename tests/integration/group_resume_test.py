#!/usr/bin/env python3
"""Resuming the ranks of a data-parallel group, with the real programs: tsock-consume --group
--save-state/--resume/--ids-out.

    group_resume_test.py TEST --producer PATH --consume PATH

A group of 3 ranks saves its position (every batch, or every 3rd), each rank stops at the same
step of its second epoch (--stall-after, as a DDP job's ranks reach one step together) and is
killed with SIGKILL. Every rank's state is then the same bytes: the group's consumed set. The
group restarts from the states with 3, 2 or 4 ranks (the same or another world size). Over both
runs the interrupted epoch must be exact apart from the documented window (batches delivered
after the last save): the consumed set is exactly the first `index` group batches of the first
run; the restored ranks get equal counts, disjoint shares that together are the rest of the
epoch (plus DistributedSampler's padding, or less drop_last's tail), none of them consumed
before; the next epoch is exact. Ranks restored from states saved at different steps, or mixed
with fresh ranks, are refused with the field named; a group's state restored into a solo
consumer, and a solo state into a rank, are refused.
Standard library only.
"""
import shutil
import signal

from groups_test import consumer, producer
from itest import check, read_ids, run
from resume_test import decode_state
from tsock_integration import Env, wait_json

N = 1003  # groups_test's dataset: every tail case comes up
WORLD = 3
BATCH = 16
STEP = 27  # the step of the second epoch (21 per epoch with padding, 20 with drop_last) ...
# ... at which the first run's ranks stop: 6 or 7 steps into epoch 1.


def per_rank_count(remaining, world, batch, drop_last):
    """A rank's samples over `remaining` samples (dataset/groups.c's arithmetic)."""
    if drop_last:
        t = remaining // world
        return t - t % batch
    return -(-remaining // world)


def first_run(env, save_every, drop_last, step=STEP):
    """The group of WORLD ranks to `step`, killed there. Returns (states, ids files, extra)."""
    extra = ("--drop-last",) if drop_last else ()
    ranks = []
    for r in range(WORLD):
        c = consumer(env, "--group", "g", "--rank", str(r), "--world-size", str(WORLD),
                     "--batch-size", str(BATCH), "--epochs", "0", "--save-state",
                     env.path(f"state{r}"), "--save-every", str(save_every),
                     "--stall-after", str(step), "--ids-out", env.path(f"run1-{r}.ids"),
                     *extra, name=f"run1-{r}")
        ranks.append(c)
    for r, c in enumerate(ranks):
        c.wait_stderr("stalled after", 60)
    for c in ranks:
        c.p.send_signal(signal.SIGKILL)
        c.wait(5)
    states = []
    for r in range(WORLD):
        path = env.path(f"saved{r}")
        shutil.copyfile(env.path(f"state{r}"), path)
        states.append(path)
    return states, [env.path(f"run1-{r}.ids") for r in range(WORLD)], extra


def resumed(env, world2, save_every=1, drop_last=False, step=STEP):
    p = producer(env, batch=32, slots=8)
    p.wait_stderr("serving", 10)
    states, ids1, extra = first_run(env, save_every, drop_last, step)
    blobs = [open(s, "rb").read() for s in states]
    check(all(b == blobs[0] for b in blobs),
          "the ranks' states differ although they saved at the same step")
    epoch, batch, used, block = decode_state(blobs[0], rank=True)
    steps_per_epoch = (per_rank_count(N, WORLD, BATCH, drop_last) + BATCH - 1) // BATCH
    saved_step = step - step % save_every
    check(epoch == 1 and block["index"] == saved_step - steps_per_epoch and
          block["world"] == WORLD and batch == BATCH,
          f"state: epoch {epoch}, {block}, batch {batch}")
    k = block["index"]
    first = [read_ids(path) for path in ids1]
    check_group_epoch0 = [f.get(0, []) for f in first]
    check(all(len(s) == per_rank_count(N, WORLD, BATCH, drop_last) for s in check_group_epoch0),
          "the first run's epoch 0 is incomplete")
    # The consumed set is the group's first k batches of epoch 1: every rank's first k blocks.
    blocks = set()
    for f in first:
        blocks |= set(f.get(1, [])[:k * BATCH])
    check(used == blocks and len(used) == WORLD * k * BATCH,
          f"the state's {len(used)} ids are not the group's first {k} batches")
    window = set()
    for f in first:
        window |= set(f.get(1, [])[k * BATCH:])
    check(not window & used, "samples after the save are in the saved set")

    # The restart: world2 ranks, each restoring a state of the first run.
    ranks = []
    for r in range(world2):
        ids = env.path(f"run2-{r}.ids")
        c = consumer(env, "--group", "g2", "--rank", str(r), "--world-size", str(world2),
                     "--batch-size", str(BATCH), "--epochs", "1", "--resume", states[r % WORLD],
                     "--ids-out", ids, *extra, name=f"run2-{r}")
        ranks.append((c, ids))
    results = [wait_json(c, 60, f"restored rank {r}") for r, (c, _) in enumerate(ranks)]
    for r, res in enumerate(results):
        check(ranks[r][0].p.returncode == 0 and res["duplicates"] == 0 and
              res["content_errors"] == 0 and res["out_of_order"] == 0,
              f"restored rank {r}: {res}")
    second = [read_ids(path) for _, path in ranks]
    rest = set(range(N)) - used
    want = per_rank_count(len(rest), world2, BATCH, drop_last)
    # With drop_last and more ranks, the rest may hold no full batch per rank: the restored
    # epoch is then empty (DistributedSampler's too) and the ranks go on with epoch 2.
    for r, s in enumerate(second):
        check(set(s) == ({1, 2} if want else {2}), f"restored rank {r}'s epochs are {sorted(s)}")
    shares = [s.get(1, []) for s in second]
    for r, s in enumerate(shares):
        check(len(s) == want and len(set(s)) == want,
              f"restored epoch, rank {r}: {len(s)} samples ({len(set(s))} distinct), expected "
              f"{want}")
    union = set().union(*map(set, shares))
    total = sum(len(s) for s in shares)
    check(not union & used, "the restored epoch repeats samples consumed before the save")
    if drop_last:
        check(union <= rest and total == len(union), "the restored ranks' shares overlap")
        check(len(rest) - len(union) < world2 * BATCH,
              f"the restored epoch leaves out {len(rest) - len(union)} samples")
    else:
        check(union == rest, f"the restored epoch lacks {len(rest - union)} samples")
        check(total - len(rest) < world2, f"{total - len(rest)} samples repeated (padding)")
    # The window: the batches of the first run after its last save, which the state does not
    # cover, so the restored ranks deliver them again (at-least-once there, exactly-once
    # elsewhere: nothing else is delivered twice, since the restored epoch avoids the set).
    check(len(window) == WORLD * (step - saved_step) * BATCH,
          f"the window holds {len(window)} samples, not {step - saved_step} steps' worth")
    if not drop_last:
        check(window <= union, "the window's samples are not delivered again")
    # The next epoch is a normal exact group epoch of world2 ranks.
    nxt = [s[2] for s in second]
    per = per_rank_count(N, world2, BATCH, drop_last)
    nunion = set().union(*map(set, nxt))
    check(all(len(s) == per for s in nxt), f"epoch 2: counts {[len(s) for s in nxt]}, not {per}")
    if drop_last:
        check(sum(map(len, nxt)) == len(nunion) and N - len(nunion) < world2 * BATCH,
              "epoch 2 is not exact")
    else:
        check(nunion == set(range(N)), "epoch 2 is not exact")
    p.signal(signal.SIGTERM)
    p.wait(10)
    print(f"saved after {k} group batches of epoch 1 ({len(used)} samples; window "
          f"{len(window)}); {world2} ranks resumed with {want} samples each, then epoch 2 exact")


def test_same_world(env):
    resumed(env, WORLD)


def test_save_every(env):
    resumed(env, WORLD, save_every=4)


def test_fewer_ranks(env):
    resumed(env, 2)


def test_more_ranks(env):
    resumed(env, 4)


def test_drop_last(env):
    resumed(env, 2, drop_last=True)


def test_empty_epoch(env):
    # drop_last, 20 steps per epoch: saved after 19 steps of epoch 1, 91 samples are left,
    # fewer than 6 ranks x 16.
    resumed(env, 6, drop_last=True, step=39)


def test_two_nodes(env):
    """Two producers with --nodes 2 and a group of world 4 (two ranks per node) saving at one
    step, killed, restored with world 2 (one rank per node), each rank from a state saved on its
    node: over both runs the interrupted epoch is every sample once, apart from the node
    padding; a state restored on the other node's producer is refused."""
    eps = [f"ipc://{env.path(f'node{k}.sock')}" for k in (0, 1)]
    prods = [producer(env, "--nodes", "2", "--node-rank", str(k), "--seed", "7", batch=32,
                      slots=8, endpoint=eps[k], name=f"producer{k}") for k in (0, 1)]
    for p in prods:
        p.wait_stderr("serving", 10)
    step = 20  # 16 steps per epoch (ceil(ceil(1003 / 4) / 16)): 4 into epoch 1
    run1 = []
    for r in range(4):
        c = consumer(env, "--group", "g", "--rank", str(r), "--world-size", "4", "--batch-size",
                     str(BATCH), "--epochs", "0", "--nodes", "2", "--save-state",
                     env.path(f"state{r}"), "--stall-after", str(step), "--ids-out",
                     env.path(f"run1-{r}.ids"), endpoint=eps[r // 2], name=f"run1-{r}")
        run1.append(c)
    for c in run1:
        c.wait_stderr("stalled after", 60)
    for c in run1:
        c.p.send_signal(signal.SIGKILL)
        c.wait(5)
    blocks = [decode_state(open(env.path(f"state{r}"), "rb").read(), rank=True) for r in range(4)]
    check(blocks[0] == blocks[1] and blocks[2] == blocks[3] and blocks[0][3]["node_rank"] == 0 and
          blocks[2][3]["node_rank"] == 1 and blocks[0][3]["index"] == 4,
          "the states of a node's ranks differ, or name another node or step")
    k = blocks[0][3]["index"]
    used = set()
    for r in range(4):
        used |= set(read_ids(env.path(f"run1-{r}.ids")).get(1, [])[:k * BATCH])
    wrong = consumer(env, "--group", "w", "--rank", "0", "--world-size", "2", "--batch-size",
                     str(BATCH), "--epochs", "1", "--nodes", "2", "--resume",
                     env.path("state2"), endpoint=eps[0], name="wrong-node")
    rc = wrong.wait(20, "wrong-node")
    check(rc == 1 and "node 1 of 2" in wrong.stderr(),
          f"a node-1 state on node 0: exit {rc}, {wrong.stderr()!r}")
    run2 = []
    for r in range(2):
        ids = env.path(f"run2-{r}.ids")
        c = consumer(env, "--group", "g2", "--rank", str(r), "--world-size", "2",
                     "--batch-size", str(BATCH), "--epochs", "1", "--nodes", "2", "--resume",
                     env.path(f"state{2 * r}"), "--ids-out", ids, endpoint=eps[r],
                     name=f"run2-{r}")
        run2.append((c, ids))
    for r, (c, _) in enumerate(run2):
        res = wait_json(c, 60, f"restored rank {r}")
        check(c.p.returncode == 0 and res["duplicates"] == 0 and res["content_errors"] == 0,
              f"restored rank {r}: {res}")
    second = [read_ids(ids) for _, ids in run2]
    shares = [s.get(1, []) for s in second]
    check(len(shares[0]) == len(shares[1]) > 0, f"restored counts {[len(s) for s in shares]}")
    union = set().union(*map(set, shares))
    # The node padding: the sample(s) both node shares hold (each node's epoch 2 is its share).
    both = set(second[0].get(2, [])) & set(second[1].get(2, []))
    check(len(both) < 2, f"the node shares overlap in {len(both)} samples")
    # One node may have consumed its copy before the save while the other had not: that copy
    # comes on the other node's restored epoch, rightly.
    check(not (union & used) - both, "the restored epoch repeats samples consumed before the "
          "save")
    check(union | used == set(range(N)),
          f"the interrupted epoch lacks {N - len(union | used)} samples over both runs")
    # Repeats: DistributedSampler's padding (< world) and the node padding (< nodes).
    check(len(used) + sum(map(len, shares)) - N < 2 + 1, "samples repeated beyond the padding")
    nxt = set().union(*(set(s.get(2, [])) for s in second))
    check(nxt == set(range(N)), "epoch 2 is not exact")
    for p in prods:
        p.signal(signal.SIGTERM)
        p.wait(10)
    print(f"two nodes: saved after {k} steps ({len(used)} samples), restored with 2 ranks of "
          f"{len(shares[0])} samples each")


def test_twice(env):
    """A restored group saves again inside its restored epoch and is restored once more, with
    yet another world size: 3 ranks stopped at step 27, 2 ranks restored and stopped after 4
    more steps, 4 ranks restored from those states. The second state's set is the first one's
    plus the 2 ranks' first 4 batches; the third run's restored epoch is exactly the rest."""
    p = producer(env, batch=32, slots=8)
    p.wait_stderr("serving", 10)
    states, ids1, _ = first_run(env, 1, False)
    _, _, used1, block1 = decode_state(open(states[0], "rb").read(), rank=True)
    run2 = []
    for r in range(2):
        c = consumer(env, "--group", "g2", "--rank", str(r), "--world-size", "2", "--batch-size",
                     str(BATCH), "--epochs", "0", "--resume", states[r], "--save-state",
                     env.path(f"state2-{r}"), "--stall-after", "4", "--ids-out",
                     env.path(f"run2-{r}.ids"), name=f"run2-{r}")
        run2.append(c)
    for c in run2:
        c.wait_stderr("stalled after", 60)
    for c in run2:
        c.p.send_signal(signal.SIGKILL)
        c.wait(5)
    blobs = [open(env.path(f"state2-{r}"), "rb").read() for r in range(2)]
    check(blobs[0] == blobs[1], "the restored ranks' states differ")
    epoch, _, used2, block2 = decode_state(blobs[0], rank=True)
    took = set()
    for r in range(2):
        took |= set(read_ids(env.path(f"run2-{r}.ids")).get(1, [])[:4 * BATCH])
    check(epoch == 1 and block2["index"] == block1["index"] + 4 and block2["world"] == 2,
          f"second state: epoch {epoch}, {block2}")
    check(used2 == used1 | took and not used1 & took,
          "the second state's set is not the first plus the restored ranks' batches")
    run3 = []
    for r in range(4):
        ids = env.path(f"run3-{r}.ids")
        c = consumer(env, "--group", "g3", "--rank", str(r), "--world-size", "4", "--batch-size",
                     str(BATCH), "--epochs", "1", "--resume", env.path(f"state2-{r % 2}"),
                     "--ids-out", ids, name=f"run3-{r}")
        run3.append((c, ids))
    for r, (c, _) in enumerate(run3):
        res = wait_json(c, 60, f"run 3 rank {r}")
        check(c.p.returncode == 0 and res["duplicates"] == 0, f"run 3 rank {r}: {res}")
    third = [read_ids(ids) for _, ids in run3]
    shares = [t.get(1, []) for t in third]
    rest = set(range(N)) - used2
    want = per_rank_count(len(rest), 4, BATCH, False)
    union = set().union(*map(set, shares))
    check(all(len(s) == want for s in shares), f"run 3 counts {[len(s) for s in shares]}")
    check(union == rest and sum(map(len, shares)) - len(rest) < 4,
          "the third run's restored epoch is not exactly the rest")
    check(set().union(*(set(t.get(2, [])) for t in third)) == set(range(N)), "epoch 2 inexact")
    p.signal(signal.SIGTERM)
    p.wait(10)


def test_refused(env):
    """Ranks restored from states of different steps, fresh ranks mixed with restored ones, a
    group's state in a solo consumer, a solo state in a rank: each refused, and said why."""
    p = producer(env, "--verbose", batch=32, slots=8)
    p.wait_stderr("serving", 10)
    states = []
    for step in (3, 4):
        c = consumer(env, "--group", f"s{step}", "--rank", "0", "--world-size", "1",
                     "--batch-size", str(BATCH), "--epochs", "0", "--save-state",
                     env.path(f"state{step}"), "--stall-after", str(step), name=f"saver{step}")
        c.wait_stderr("stalled after", 30)
        c.p.send_signal(signal.SIGKILL)
        c.wait(5)
        states.append(env.path(f"state{step}"))
    first = consumer(env, "--group", "m", "--rank", "0", "--world-size", "2", "--batch-size",
                     str(BATCH), "--epochs", "1", "--resume", states[0], name="m0")
    p.wait_stderr("group 'm': rank 0 of 2 joined", 10)

    def refused(name, expect, code, *args):
        c = consumer(env, "--epochs", "1", "--batch-size", str(BATCH), *args, name=name)
        rc = c.wait(20, name)
        res = c.json()
        check(rc == 1 and res["error_code"] == code,
              f"{name}: exit {rc}, error {res.get('error')} ({res.get('error_code')})")
        check(expect in c.stderr(), f"{name}: no '{expect}' in {c.stderr()!r}")

    group = ("--group", "m", "--rank", "1", "--world-size", "2")
    refused("other-step", "saved at another step", -10021, *group, "--resume", states[1])
    refused("fresh", "fresh ranks mixed", -10021, *group)
    refused("solo", "saved by a rank of a group", -10019, "--resume", states[0])
    solo_state = env.path("solo-state")
    s = consumer(env, "--epochs", "1", "--batch-size", str(BATCH), "--save-state", solo_state,
                 name="solo-saver")
    wait_json(s, 30, "the solo saver")
    refused("solo-into-rank", "saved by a solo consumer", -10019, "--group", "x", "--rank",
            "0", "--world-size", "1", "--resume", solo_state)
    # The group is unharmed: a rank restored from the same state joins and both finish.
    second = consumer(env, *group, "--batch-size", str(BATCH), "--epochs", "1", "--resume",
                      states[0], name="m1")
    for c in (first, second):
        res = wait_json(c, 60, "a restored rank")
        check(c.p.returncode == 0 and res["duplicates"] == 0, f"restored rank: {res}")
    p.signal(signal.SIGTERM)
    p.wait(10)


TESTS = {
    "group_resume_same_world": test_same_world,
    "group_resume_save_every": test_save_every,
    "group_resume_fewer_ranks": test_fewer_ranks,
    "group_resume_more_ranks": test_more_ranks,
    "group_resume_drop_last": test_drop_last,
    "group_resume_empty_epoch": test_empty_epoch,
    "group_resume_two_nodes": test_two_nodes,
    "group_resume_twice": test_twice,
    "group_resume_refused": test_refused,
}

if __name__ == "__main__":
    run(__doc__, TESTS, Env, [("producer", True), ("consume", True), ("garbage", False),
                              ("stat", False)])
