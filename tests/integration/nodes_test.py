#!/usr/bin/env python3
"""Node shares: one tsock-producer per node (--nodes N --node-rank K, or the launcher's
environment), simulated here with one producer per endpoint, and tsock-consume --ids-out.

    nodes_test.py TEST --producer PATH --consume PATH

The checks are about coverage, read back from the consumers' --ids-out files: per epoch, the
nodes' shares together are the whole dataset, they overlap only in the padding a share needs
when the node count does not divide the dataset, and every node's consumer gets an exact epoch
of its share. Standard library only.
"""
import collections
import os
import signal
import struct
import time

from itest import check, run
from resume_test import decode_state
from resume_test import read_ids as read_ids_tolerant
from tsock_integration import Env, Proc, check_no_content_errors, read_stats

# Odd on purpose: two shares of 1024, one id padded onto node 1's.
SAMPLES = 2047
BATCH = 32
NODES = 2
SHARE = (SAMPLES + NODES - 1) // NODES

# The launchers' variables the producer reads; a test decides them itself, so the ones this
# script may have inherited (a CI job under Slurm or torchrun) are dropped for every child.
# Liveness is not under test here: generous heartbeats keep a loaded machine (or TSan) from
# declaring a slow peer dead.
HEARTBEAT = ["--heartbeat-ms", "250", "--heartbeat-timeout-ms", "20000"]

LAUNCHER_VARS = ("SLURM_NNODES", "SLURM_NODEID", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
for _v in LAUNCHER_VARS:
    os.environ.pop(_v, None)


def read_ids(path):
    """{epoch: [ids in order]} from an --ids-out file, checking every line's format."""
    epochs = collections.defaultdict(list)
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            check(len(parts) == 2 and all(p.isdigit() for p in parts),
                  f"{path}:{n}: not 'EPOCH ID': {line!r}")
            epochs[int(parts[0])].append(int(parts[1]))
    return epochs


def node_producer(env, k, *extra, environ=None, epochs=2, seed=11):
    argv = [env.args.producer, "--dataset", "synthetic", "--endpoint",
            f"ipc://{env.path(f'node{k}.sock')}", "--samples", str(SAMPLES), "--image-size", "8",
            "--batch-size", str(BATCH), "--slots", "4", "--epochs", str(epochs), "--seed",
            str(seed), "--wait-consumers", "1"] + HEARTBEAT + list(extra)
    if environ is not None:
        old = dict(os.environ)
        os.environ.update(environ)
    try:
        p = Proc(f"producer-node{k}", argv)
    finally:
        if environ is not None:
            os.environ.clear()
            os.environ.update(old)
    env.procs.append(p)
    return p


def node_consumer(env, k, ids_path, epochs=2):
    return env.consumer("--epochs", str(epochs), "--nodes", str(NODES), "--batch-size",
                        str(BATCH), "--ids-out", ids_path, *HEARTBEAT,
                        endpoint=f"ipc://{env.path(f'node{k}.sock')}", name=f"consumer-node{k}",
                        samples=SAMPLES, hb=False)


_RUNS = 0


def serve_two_nodes(env, flags_for, environ_for=lambda k: None, epochs=2):
    """Runs one producer per simulated node and one consumer on each; returns each node's
    {epoch: ids} after checking that every consumer ran clean and exact over its share."""
    # tsock-consume --ids-out appends (a resumed run goes on in the same file): fresh files
    # for every run of the same test.
    global _RUNS
    _RUNS += 1
    stats = [env.path(f"stats{k}-{_RUNS}.json") for k in range(NODES)]
    prods = [node_producer(env, k, *flags_for(k), "--stats-json", stats[k],
                           environ=environ_for(k), epochs=epochs) for k in range(NODES)]
    paths = [env.path(f"ids{k}-{_RUNS}.txt") for k in range(NODES)]
    cons = [node_consumer(env, k, paths[k], epochs) for k in range(NODES)]
    nodes = []
    for k, c in enumerate(cons):
        rc = c.wait(60)
        res = c.json()
        check(rc == 0, f"{c.name} exit code {rc}")
        check_no_content_errors(res, c.name)
        check(res["missing"] == 0, f"{c.name}: missing {res['missing']}")
        check(res["per_epoch_samples"] == [SHARE] * epochs,
              f"{c.name}: per-epoch samples {res['per_epoch_samples']}, expected {SHARE} each")
        ids = read_ids(paths[k])
        check(sorted(ids) == list(range(epochs)), f"{c.name}: epochs in --ids-out {sorted(ids)}")
        check(sum(len(v) for v in ids.values()) == res["samples"],
              f"{c.name}: --ids-out has {sum(len(v) for v in ids.values())} lines for "
              f"{res['samples']} samples")
        nodes.append(ids)
    for k, p in enumerate(prods):
        check(p.wait(20) == 0, f"{p.name} exit code {p.p.poll()}")
        st = read_stats(stats[k])
        check(st["epochs"] == epochs and st["samples"] == epochs * SHARE,
              f"{p.name}: {st['epochs']} epochs, {st['samples']} samples; expected {epochs} "
              f"epochs of its share ({SHARE})")
    return nodes, prods


def check_union(nodes, epochs=2):
    for e in range(epochs):
        shares = [set(n[e]) for n in nodes]
        for k, n in enumerate(nodes):
            check(len(n[e]) == len(shares[k]) == SHARE,
                  f"node {k} epoch {e}: {len(n[e])} ids, {len(shares[k])} distinct")
        union = set().union(*shares)
        check(union == set(range(SAMPLES)),
              f"epoch {e}: the nodes' union misses {len(set(range(SAMPLES)) - union)} ids")
        overlap = shares[0] & shares[1]
        check(len(overlap) == NODES * SHARE - SAMPLES,
              f"epoch {e}: shares overlap in {len(overlap)} ids, expected only the padding")
    # A share is fixed by (samples, seed, nodes): the same in every epoch.
    for k, n in enumerate(nodes):
        check(all(set(n[e]) == set(n[0]) for e in range(epochs)), f"node {k}: share changed")


def test_two_nodes(env):
    nodes, prods = serve_two_nodes(env, lambda k: ["--nodes", str(NODES), "--node-rank", str(k)])
    check_union(nodes)
    for k, p in enumerate(prods):
        check(f"serving the share of node {k} of {NODES}" in p.stderr(),
              f"{p.name} did not say which share it serves")
    # Consecutive epochs of a share are different orders of it.
    check(nodes[0][0] != nodes[0][1], "node 0 served the same order twice")


def test_nodes_from_environment(env):
    """Slurm's and torchrun's variables give the same shares as the flags, and a flag wins."""
    flags, _ = serve_two_nodes(env, lambda k: ["--nodes", str(NODES), "--node-rank", str(k)])
    slurm, prods = serve_two_nodes(env, lambda k: [],
                                   lambda k: {"SLURM_NNODES": str(NODES), "SLURM_NODEID": str(k)})
    for p in prods:
        check("SLURM_NNODES" in p.stderr(), f"{p.name} did not name Slurm as the source")
    torchrun, prods = serve_two_nodes(env, lambda k: [], lambda k: {
        "WORLD_SIZE": str(2 * NODES), "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": str(k)})
    for p in prods:
        check("GROUP_RANK" in p.stderr(), f"{p.name} did not name torchrun as the source")
    # Flags over a contradicting environment.
    won, _ = serve_two_nodes(env, lambda k: ["--nodes", str(NODES), "--node-rank", str(k)],
                             lambda k: {"SLURM_NNODES": "5", "SLURM_NODEID": "4"})
    for name, got in (("slurm", slurm), ("torchrun", torchrun), ("flags over env", won)):
        for k in range(NODES):
            check(set(got[k][0]) == set(flags[k][0]), f"{name}: node {k}'s share differs")


def test_nodes_bad_options(env):
    P, C = env.args.producer, env.args.consume
    base = [P, "--dataset", "synthetic", "--samples", "100"]
    cases = [
        (base + ["--node-rank", "1"], None, "--node-rank: needs --nodes"),
        (base + ["--nodes", "2"], None, "needs --node-rank"),
        (base + ["--nodes", "2", "--node-rank", "2"], None, "must be below the 2 nodes"),
        (base + ["--nodes", "0", "--node-rank", "0"], None, "--nodes"),
        (base + ["--nodes", "200", "--node-rank", "0"], None, "more nodes than the 100 samples"),
        (base, {"SLURM_NNODES": "two"}, "SLURM_NNODES=two"),
        (base, {"SLURM_NNODES": "2"}, "SLURM_NODEID is not set"),
        (base, {"SLURM_NNODES": "2", "SLURM_NODEID": "3"}, "must be below the 2 nodes"),
        (base, {"WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"},
         "not a multiple of LOCAL_WORLD_SIZE"),
        # Issue 18, item 7: half a torchrun environment is a usage error, never one node.
        (base, {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, "makes 2 nodes, but GROUP_RANK"),
        (base, {"GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "4"}, "GROUP_RANK=1 is set without "
         "WORLD_SIZE"),
        ([C, "--nodes", "x", "--samples", "10"], None, "--nodes"),
        ([C, "--ids-out", ""], None, "--ids-out"),
        # A file that cannot be opened is found before connecting: a failed run (3), not usage.
        ([C, "--ids-out", env.path("no/such/dir/ids.txt")], None, "--ids-out", 3),
    ]
    for argv, environ, needle, *want in cases:
        want = want[0] if want else 2
        old = dict(os.environ)
        os.environ.update(environ or {})
        # Without --endpoint the programs make their default endpoint's folder
        # (/tmp/tsock-UID) before they refuse the options: here, in the test's folder.
        os.environ["XDG_RUNTIME_DIR"] = env.dir
        try:
            p = Proc("bad-options", argv)
        finally:
            os.environ.clear()
            os.environ.update(old)
        env.procs.append(p)
        rc = p.wait(10)
        check(rc == want, f"{argv[1:]} {environ}: exit code {rc}, expected {want}")
        check(needle in p.stderr(), f"{argv[1:]} {environ}: message {p.stderr()!r} lacks "
              f"{needle!r}")
        env.procs.remove(p)

    # A consumer told the wrong node count is refused with the sizes it saw.
    prod = node_producer(env, 0, "--nodes", str(NODES), "--node-rank", "0", epochs=1)
    c = env.consumer("--epochs", "1", "--nodes", "3", *HEARTBEAT,
                     endpoint=f"ipc://{env.path('node0.sock')}", name="wrong-nodes",
                     samples=SAMPLES, hb=False)
    rc = c.wait(30)
    check(rc == 3, f"wrong --nodes: exit code {rc}, expected 3")
    check("--nodes 3 but the producer serves node 0 of 2 node shares" in c.json()["error"],
          f"wrong --nodes: error {c.json()['error']!r}")
    prod.kill()


# Resume: liveness matters here (the killed consumer's slots must come back within the run),
# so the library's default heartbeats, which a loaded machine keeps.
RESUME_HB = ["--heartbeat-ms", "250", "--heartbeat-timeout-ms", "3000"]


def resume_producer(env, k, *flags):
    return env.producer("--epochs", "0", "--seed", "11", *flags, *RESUME_HB,
                        endpoint=f"ipc://{env.path(f'node{k}.sock')}", name=f"producer-node{k}",
                        samples=SAMPLES, batch=BATCH, image=8, hb=False)


def resume_consumer(env, k, *extra, name, nodes=NODES):
    return env.consumer("--nodes", str(nodes), "--batch-size", str(BATCH), *RESUME_HB, *extra,
                        endpoint=f"ipc://{env.path(f'node{k}.sock')}", name=name,
                        samples=SAMPLES, hb=False)


def test_nodes_resume_kill9(env):
    """A checkpointing consumer of node 1 (whose share holds the padding id) is killed with
    SIGKILL; a new one resumes from its state file. The state is over the node's share (its
    dataset size is the share's), and the interrupted epoch over both runs is exactly the
    share, apart from the documented window of the batch after the last save."""
    k = 1
    p = resume_producer(env, k, "--nodes", str(NODES), "--node-rank", str(k))
    p.wait_stderr("serving", 10)
    state, ids1, ids2 = env.path("state"), env.path("ids1"), env.path("ids2")
    c1 = resume_consumer(env, k, "--epochs", "0", "--delay-ms", "5", "--save-state", state,
                         "--ids-out", ids1, name="consumer1")
    # Somewhere after its first epoch; which epoch the state ends up in does not matter.
    stop_at = SHARE + SHARE // 3
    deadline = time.monotonic() + 60
    while sum(len(v) for v in read_ids_tolerant(ids1).values()) < stop_at:
        check(time.monotonic() < deadline and c1.running(),
              f"consumer1 did not receive {stop_at} samples")
        time.sleep(0.02)
    c1.p.send_signal(signal.SIGKILL)
    c1.wait(5)
    with open(state, "rb") as f:
        data = f.read()
    n = struct.unpack_from("<Q", data, 8)[0]
    check(n == SHARE, f"the state's dataset size is {n}, not the node's share {SHARE}")
    epoch, batch, delivered = decode_state(data)
    check(epoch >= 1 and batch == BATCH, f"state of epoch {epoch}, batch {batch}")

    c2 = resume_consumer(env, k, "--epochs", "1", "--resume", state, "--ids-out", ids2,
                         name="consumer2")
    res = c2.wait(60)
    check(res == 0, f"consumer2 exit code {res}: {c2.stderr()}")
    out = c2.json()
    check(out["duplicates"] == 0 and out["content_errors"] == 0 and out["index_errors"] == 0,
          f"consumer2 found errors: {out}")
    p.signal(signal.SIGTERM)
    p.wait(10)

    # The killed run's last line may be torn; the resumed run ended cleanly.
    first, second = read_ids_tolerant(ids1), read_ids(ids2)
    share = set(first[0])
    check(len(first[0]) == len(share) == SHARE, f"epoch 0 holds {len(first[0])} ids")
    before, after = first.get(epoch, []), second.get(epoch, [])
    check(len(after) == len(set(after)), "the resumed run received a sample twice")
    check(len(after) == SHARE - len(delivered),
          f"the resumed run received {len(after)} of epoch {epoch}, expected "
          f"{SHARE - len(delivered)} (the share less the {len(delivered)} saved)")
    check(set(before) | set(after) == share,
          f"epoch {epoch} over both runs is not the node's share")
    window = set(before) & set(after)
    check(len(window) == len(before) - len(delivered) and len(window) <= batch,
          f"{len(window)} samples seen by both runs; {len(before)} received, "
          f"{len(delivered)} saved")
    check(set(second.get(epoch + 1, [])) == share and len(second[epoch + 1]) == SHARE,
          f"the resumed run's next epoch is not exactly the share")


def test_nodes_resume_other_share(env):
    """A state saved under another node count (another share size) is refused clearly, either
    way round."""
    cases = [(NODES, 1, SHARE, SAMPLES), (1, NODES, SAMPLES, SHARE)]
    for i, (saved_under, resumed_under, n_saved, n_now) in enumerate(cases):
        state = env.path(f"state{i}")
        p = resume_producer(env, 0, "--nodes", str(saved_under), "--node-rank", "0")
        p.wait_stderr("serving", 10)
        c = resume_consumer(env, 0, "--epochs", "1", "--save-state", state, nodes=saved_under,
                            name=f"saver{i}")
        check(c.wait(60) == 0, f"saver{i}: {c.stderr()}")
        p.signal(signal.SIGTERM)
        p.wait(10)
        p = resume_producer(env, 0, "--nodes", str(resumed_under), "--node-rank", "0")
        p.wait_stderr("serving", 10)
        r = resume_consumer(env, 0, "--epochs", "1", "--resume", state, nodes=resumed_under,
                            name=f"resumer{i}")
        rc = r.wait(30)
        want = (f"the state is of a dataset of {n_saved} samples, the producer serves "
                f"{n_now}")
        check(rc == 1 and want in r.stderr(),
              f"resumer{i}: exit {rc}, expected 1 and {want!r} in {r.stderr()!r}")
        p.signal(signal.SIGTERM)
        p.wait(10)


TESTS = {
    "two_nodes": test_two_nodes,
    "nodes_from_environment": test_nodes_from_environment,
    "nodes_bad_options": test_nodes_bad_options,
    "nodes_resume_kill9": test_nodes_resume_kill9,
    "nodes_resume_other_share": test_nodes_resume_other_share,
}

if __name__ == "__main__":
    run(__doc__, TESTS, Env, [("producer", True), ("consume", True)])
