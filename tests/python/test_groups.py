"""Data-parallel groups end to end (issue 14): real tsock-producer processes, DataLoader ranks
in their own processes, and a real DDP training launched by two torchrun agents.

The anchor is torch's DistributedSampler: each rank's per-epoch count and len() must be what
DataLoader(DistributedSampler(...)) gives for the same dataset size, world size, batch size
and drop_last, the ranks' shards disjoint except for DistributedSampler's padding, their union
every sample once.

These tests need the C side of groups (tsock_consumer_set_group) and, for two nodes,
tsock-producer --nodes; they are skipped, with the reason, against a library or program
without them."""
import collections
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from tsock_testutil import start_producer, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRAIN_DDP = os.path.join(REPO, "examples", "distributed", "train_ddp.py")

# The launchers' variables that the library, the producer or the binding read: a test sets
# the ones it means for each child, none is inherited.
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID",
               "SLURM_NNODES", "TORCHELASTIC_RUN_ID")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["OMP_NUM_THREADS"] = "1"  # several torch processes on a few cores
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture
def groups(tsock):
    if "tsock_consumer_set_group" in tsock._lib.missing:
        pytest.skip(f"libtsock at {tsock.library_path} has no tsock_consumer_set_group: the C "
                    f"side of data-parallel groups (issue 14) is not in this build")
    return tsock


@pytest.fixture
def nodes(programs):
    out = subprocess.run([programs["tsock-producer"], "--help"], capture_output=True,
                         text=True).stdout
    if "--nodes" not in out:
        pytest.skip("tsock-producer has no --nodes flag (node shares, issue 14) in this build")
    return programs


def error_class(tsock, name):
    """tsock.GroupLost etc., or None when this binding does not define it yet."""
    return getattr(tsock, name, None)


def distributed_sampler_counts(samples, world, batch, drop_last):
    """(samples per rank, batches per rank) of DataLoader(DistributedSampler(...)): the
    anchor, computed by torch itself."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, DistributedSampler

    data = list(range(samples))
    per_rank = set()
    for rank in range(world):
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, drop_last=drop_last)
        loader = DataLoader(data, batch_size=batch, sampler=sampler, drop_last=drop_last)
        delivered = sum(len(b) for b in loader)
        per_rank.add((delivered, len(loader)))
    assert len(per_rank) == 1, per_rank  # DistributedSampler's own promise
    del torch
    return per_rank.pop()


def start_agent(procs, argv):
    """A torchrun agent; kill_agents() ends it and its workers."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=clean_env())
    procs.append(p)
    return p


def kill_agents(agents):
    """Kills what is left of torchrun agents: their workers (which torchrun starts in
    sessions of their own, out of reach of the agent's process group), then the agents."""
    for p in agents:
        children = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == p.pid:  # the parent pid
                children.append(int(entry))
        for pid in children + [p.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_child(procs, args, env):
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "group_child.py"), *map(str, args)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    procs.append(p)
    return p


def result_of(p, timeout=180):
    out, err = p.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    assert lines, f"no output (status {p.returncode}):\n{err[-3000:]}"
    return json.loads(lines[-1]), err


def check_group_epoch(shards, samples, per_rank, drop_last):
    """The shards of one group epoch (one id list per rank): equal counts, disjoint except
    for DistributedSampler's padding, union every sample once (without drop_last)."""
    counts = [len(s) for s in shards]
    assert counts == [per_rank] * len(shards), counts
    total = collections.Counter(i for s in shards for i in s)
    assert all(0 <= i < samples for i in total), "an id outside the dataset"
    for s in shards:
        assert len(set(s)) == len(s), "a rank got a sample twice in one epoch"
    if drop_last:
        assert max(total.values()) == 1, "shards overlap"
    else:
        assert set(total) == set(range(samples)), (
            f"union misses {sorted(set(range(samples)) - set(total))[:10]}")
        padding = len(shards) * per_rank - samples
        assert sum(c - 1 for c in total.values()) == padding
        assert max(total.values()) <= 2


@pytest.mark.parametrize("drop_last", [False, True], ids=["padded", "drop_last"])
def test_group_of_three_and_a_solo_job(groups, programs, procs, endpoint, drop_last):
    samples, world, batch, epochs = 100, 3, 8, 2
    per_rank, batches = distributed_sampler_counts(samples, world, batch, drop_last)
    start_producer(programs, procs, endpoint, batch_size=batch, samples=samples, epochs=0,
                   wait_consumers=world + 1)
    # The ranks run unsynchronised (no DDP here): one that finishes first and leaves must not
    # disturb the others' last epoch.
    flags = ["--group", "job", "--batch-size", batch] + (["--drop-last"] if drop_last else [])
    # The ranks take rank and world size from torchrun's variables, as under torchrun.
    ranks = [start_child(procs, [endpoint, epochs, *flags],
                         clean_env(RANK=r, WORLD_SIZE=world, LOCAL_RANK=r))
             for r in range(world)]
    solo = start_child(procs, [endpoint, epochs, "--batch-size", 16], clean_env())
    results = [result_of(p) for p in ranks]
    for r, (res, err) in enumerate(results):
        assert res["error"] is None, (res["error"], err[-2000:])
        assert res["rank"] == r and res["world_size"] == world
        assert res["group_source"] == "torchrun environment (RANK, WORLD_SIZE)"
        assert res["len_before"] == res["len"] == batches  # len() known up front, equal
        assert res["batches"] == [batches] * epochs
        assert res["epoch_numbers"] == list(range(epochs))
        assert res["content_errors"] == 0
    for e in range(epochs):
        check_group_epoch([res["ids"][e] for res, _ in results], samples, per_rank, drop_last)
    res, err = result_of(solo)
    assert res["error"] is None, (res["error"], err[-2000:])
    assert res["group_source"] is None and res["rank"] is None
    for ids in res["ids"]:  # the solo job's epochs are its own, exact
        assert sorted(ids) == list(range(samples))


def test_group_rank_that_disagrees_is_refused(groups, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=8, samples=64, epochs=0,
                   wait_consumers=1)
    mismatch = error_class(groups, "GroupMismatch")
    first = groups.DataLoader(endpoint, group="g", rank=0, world_size=2, timeout=30,
                              group_timeout=120)
    try:

        with pytest.raises(groups.TsockError) as info:
            with groups.DataLoader(endpoint, group="g", rank=1, world_size=3, timeout=30) as l:
                next(iter(l))
        if mismatch is not None:
            assert isinstance(info.value, mismatch), info.value
        assert info.value.code == -10021, info.value
        assert "world" in str(info.value).lower(), info.value
    finally:
        first.close()


def test_group_incomplete_names_missing_ranks(groups, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=8, samples=64, epochs=0,
                   wait_consumers=1)
    incomplete = error_class(groups, "GroupIncomplete")
    with pytest.raises(groups.TsockError) as info:
        # Ranks 1 and 3 of 4 never come; the group waits 1 s for them.
        with groups.DataLoader(endpoint, group="lonely", rank=0, world_size=4, timeout=60,
                               group_timeout=1.0) as a, \
                groups.DataLoader(endpoint, group="lonely", rank=2, world_size=4, timeout=60,
                                  group_timeout=1.0):
            next(iter(a))
    if incomplete is not None:
        assert isinstance(info.value, incomplete), info.value
    assert info.value.code == -10020, info.value
    assert "1, 3" in str(info.value), info.value


def test_killed_rank_interrupts_its_group_only(groups, programs, procs, endpoint, tmp_path):
    samples, world, batch = 4000, 3, 8
    start_producer(programs, procs, endpoint, batch_size=batch, samples=samples, epochs=0,
                   slots=4, wait_consumers=world + 1,
                   extra=["--heartbeat-ms", "100", "--heartbeat-timeout-ms", "2000"])
    go = str(tmp_path / "go")
    ranks = [start_child(procs, [endpoint, 2, "--group", "victims", "--rank", r,
                                 "--world-size", world, "--batch-size", batch,
                                 "--hold-after", 2, "--go", go], clean_env())
             for r in range(world)]
    solo = start_child(procs, [endpoint, 2], clean_env())
    for p in ranks:  # every rank is inside the group's epoch, holding its batches
        for line in p.stdout:
            if line.strip() == "holding":
                break
        else:
            pytest.fail(f"a rank ended before holding a batch:\n{p.stderr.read()[-3000:]}")
    ranks[1].send_signal(signal.SIGKILL)
    ranks[1].wait(timeout=30)
    open(go, "w").close()
    for r in (0, 2):
        res, err = result_of(ranks[r], timeout=120)
        assert res["error"] is not None, f"rank {r} finished although rank 1 died: {res}"
        # The library says EPOCH_INTERRUPTED, then GROUP_LOST; the DataLoader raises the
        # cause, with the lost rank the library logged.
        assert res["error"]["class"] == "GroupLost", res["error"]
        assert res["error"]["name"] == "TSOCK_E_GROUP_LOST", res["error"]
        assert "group 'victims': rank 1 of 3 was lost" in res["error"]["message"], res["error"]
    res, err = result_of(solo, timeout=180)
    assert res["error"] is None, (res["error"], err[-2000:])  # nobody else is disturbed
    for ids in res["ids"]:
        assert sorted(ids) == list(range(samples))


def test_restarted_group_begins_a_fresh_exact_epoch(groups, programs, procs, endpoint,
                                                    tmp_path):
    """What torchrun's elastic agent does when a rank crashes: the job's processes die
    (here both kill -9, in the middle of the group's epoch) and new ones start as the same
    ranks of the same group. They form the group anew and read a fresh, exact epoch 0.

    (The agent itself is not used here: on this machine torch 2.15's gloo set-up in a
    restarted attempt sometimes never connects or is refused, which would make the test
    about torch; the restart it performs is exactly this.)"""
    samples, world, batch = 64, 2, 4
    start_producer(programs, procs, endpoint, batch_size=batch, samples=samples, epochs=0,
                   slots=4, wait_consumers=0,
                   extra=["--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"])
    go = str(tmp_path / "go")
    first = [start_child(procs, [endpoint, 1, "--group", "job", "--rank", r, "--world-size",
                                 world, "--batch-size", batch, "--hold-after", 3, "--go", go],
                         clean_env())
             for r in range(world)]
    for p in first:  # both inside the group's epoch
        for line in p.stdout:
            if line.strip() == "holding":
                break
        else:
            pytest.fail(f"a rank ended before holding a batch:\n{p.stderr.read()[-3000:]}")
    for p in first:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    # The new ranks come once the producer has declared the old ones lost: a rank number
    # still joined would be refused (GroupMismatch), and the agent would simply restart again.
    wait_until(lambda: groups.query_stats(endpoint)["producer"]["lost"] >= world, 60,
               "the producer to declare the killed ranks lost")
    second = [start_child(procs, [endpoint, 1, "--group", "job", "--rank", r, "--world-size",
                                  world, "--batch-size", batch], clean_env())
              for r in range(world)]
    results = [result_of(p) for p in second]
    for res, err in results:
        assert res["error"] is None, (res["error"], err[-2000:])
        assert res["epoch_numbers"] == [0]  # the new group's own first epoch
    check_group_epoch([res["ids"][0] for res, _ in results], samples, samples // world, False)


@pytest.mark.parametrize("worlds", [(2, 2), (2, 3)], ids=["same_world", "two_then_three"])
def test_group_resumes_its_interrupted_epoch(groups, programs, procs, endpoint, tmp_path,
                                            worlds):
    """Checkpoints of a group: every rank saves state_dict() at the same step, all are
    killed -9, and ranks restored from those states (each its own; with another world size,
    the states of rank 0 and 1 spread over the new ranks) complete the group's interrupted
    epoch exactly: what was read before the save and what the restored ranks read together
    are every sample once, plus DistributedSampler's padding."""
    samples, batch, step = 67, 4, 3
    old_world, new_world = worlds
    start_producer(programs, procs, endpoint, batch_size=batch, samples=samples, epochs=0,
                   slots=4, wait_consumers=0,
                   extra=["--heartbeat-ms", "100", "--heartbeat-timeout-ms", "1000"])
    go = str(tmp_path / "never")
    states = [str(tmp_path / f"rank{r}.state") for r in range(old_world)]
    first = [start_child(procs, [endpoint, 1, "--group", "job", "--rank", r, "--world-size",
                                 old_world, "--batch-size", batch, "--hold-after", step,
                                 "--go", go, "--state", states[r]], clean_env())
             for r in range(old_world)]
    for p in first:  # every rank saved at step 3 and holds
        for line in p.stdout:
            if line.strip() == "holding":
                break
        else:
            pytest.fail(f"a rank ended before saving:\n{p.stderr.read()[-3000:]}")
    before = []
    for r in range(old_world):
        with open(states[r] + ".ids") as f:
            before += json.load(f)
    assert len(before) == old_world * step * batch
    for p in first:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    wait_until(lambda: groups.query_stats(endpoint)["producer"]["lost"] >= old_world, 60,
               "the producer to declare the killed ranks lost")
    second = [start_child(procs, [endpoint, 1, "--group", "job", "--rank", r, "--world-size",
                                  new_world, "--batch-size", batch, "--resume",
                                  states[r % old_world]], clean_env())
              for r in range(new_world)]
    results = [result_of(p) for p in second]
    for res, err in results:
        assert res["error"] is None, (res["error"], err[-2000:])
    after = [res["ids"][0] for res, _ in results]
    counts = [len(a) for a in after]
    assert len(set(counts)) == 1, counts  # equal shares of the rest
    total = collections.Counter(before + [i for a in after for i in a])
    assert set(total) == set(range(samples)), sorted(set(range(samples)) - set(total))
    padding = sum(total.values()) - samples
    assert padding < new_world + old_world, total  # only DistributedSampler's padding repeats
    if new_world == old_world:  # exactly the uninterrupted epoch's shares
        per_rank, _ = distributed_sampler_counts(samples, old_world, batch, False)
        assert counts == [per_rank - step * batch] * new_world


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_ids_file(path):
    epochs = collections.defaultdict(list)
    with open(path) as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            assert len(parts) == 2 and all(p.isdigit() for p in parts), f"{path}:{n}: {line!r}"
            epochs[int(parts[0])].append(int(parts[1]))
    return epochs


@pytest.mark.parametrize("producers", ["started_by_test", "ensure_producer"])
def test_two_nodes_ddp_with_torchrun(groups, nodes, procs, tmp_path, producers):
    """Two simulated nodes: a producer each (--nodes 2, same seed, own endpoint) and a torchrun
    agent each (--nnodes 2 --nproc-per-node 2), training a small model with DDP over gloo;
    each rank attaches to its node's producer. Each group epoch must be exact across the four
    ranks, and every rank must finish (a rank one batch short would hang DDP).

    started_by_test: the test starts tsock-producer --nodes 2 --node-rank K. ensure_producer:
    the ranks do (train_ddp.py --start-producer): one per node starts it, and it takes its
    node share from torchrun's environment (GROUP_RANK, WORLD_SIZE / LOCAL_WORLD_SIZE)."""
    pytest.importorskip("torch.distributed.run", reason="needs torchrun (torch.distributed.run)")
    import torch.distributed as dist

    if not dist.is_gloo_available():
        pytest.skip("this torch build has no gloo backend")
    samples, world, batch, epochs, seed = 66, 4, 4, 2, 5  # 33 per node; 17 per rank
    per_rank, batches = distributed_sampler_counts(samples, world, batch, False)
    endpoints = [f"ipc://{tmp_path}/node{k}.sock" for k in range(2)]
    extra = []
    if producers == "started_by_test":
        for k in range(2):
            p = subprocess.Popen(
                [nodes["tsock-producer"], "--dataset", "synthetic", "--endpoint", endpoints[k],
                 "--samples", str(samples), "--image-size", "8", "--batch-size", str(batch),
                 "--slots", "4", "--epochs", "0", "--seed", str(seed), "--nodes", "2",
                 "--node-rank", str(k), "--wait-consumers", "2", "--quiet"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env=clean_env())
            procs.append(p)
    else:
        extra = ["--start-producer", "--synthetic", str(samples), "--image-size", "8",
                 "--seed", str(seed)]
    port = free_port()
    ids_dir = tmp_path / "ids"
    agents = []
    try:
        for k in range(2):
            argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                    "--nproc-per-node", "2", "--node-rank", str(k), "--master-addr",
                    "127.0.0.1", "--master-port", str(port), TRAIN_DDP, "--endpoint",
                    endpoints[k], "--backend", "gloo", "--group", "ddp", "--epochs",
                    str(epochs), "--batch-size", str(batch), "--ids-out", str(ids_dir),
                    "--json", "--group-timeout", "120", *extra]  # a barrier never met fails
            # Its logs in the test's folder: by default torchrun makes /tmp/torchelastic_*
            # and leaves it there.
            argv[3:3] = ["--log-dir", str(tmp_path / f"torchrun{k}")]
            agents.append(start_agent(procs, argv))
        reports = []
        for k, p in enumerate(agents):
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, f"torchrun agent of node {k} failed:\n{err[-4000:]}"
            reports += [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    finally:
        kill_agents(agents)
        if producers == "ensure_producer":
            stop_answering_producers(groups, endpoints)
    assert sorted(r["rank"] for r in reports) == list(range(world)), reports  # all finished
    for r in reports:
        assert r["group_source"] == "torch.distributed" and r["world_size"] == world
        assert r["len"] == batches
        assert [e["images"] for e in r["epochs"]] == [per_rank] * epochs
    if producers == "ensure_producer":  # one rank per node started its node's producer
        assert sorted(r["rank"] for r in reports if r["producer_started"]) in (
            [0, 2], [0, 3], [1, 2], [1, 3]), reports
    files = [read_ids_file(ids_dir / f"rank{r}.txt") for r in range(world)]
    for e in range(epochs):
        check_group_epoch([f[e] for f in files], samples, per_rank, False)
    # Node-major ranks: ranks 0, 1 read node 0's share and 2, 3 node 1's; the shares differ.
    node0 = set(files[0][0]) | set(files[1][0])
    node1 = set(files[2][0]) | set(files[3][0])
    assert len(node0 & node1) <= 1, "the nodes' shares overlap beyond the padding"


def stop_answering_producers(tsock, endpoints):
    """Kills a producer the ranks started and left behind (a failed run): detached from them,
    it would outlive the test."""
    for endpoint in endpoints:
        try:
            pid = tsock.query_stats(endpoint, timeout=0.5)["producer"]["pid"]
        except tsock.TsockError:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
