"""tsock.DataLoader(group=...): where rank and world size come from (explicit arguments,
torch.distributed, torchrun's and Slurm's environment), every bad value, and set_epoch.

Resolution happens before anything connects, so these tests need no group support in the C
library; torch.distributed is initialised for real (gloo, in child processes)."""
import json
import os
import socket
import warnings

import pytest

from tsock_testutil import start_producer, start_python

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID", "SLURM_NNODES")


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher variables: the test sets the ones it means."""
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.fixture
def resolve(tsock):
    from tsock import _group

    return _group.resolve


def test_torchrun_environment(resolve, clean_env):
    clean_env.setenv("RANK", "3")
    clean_env.setenv("WORLD_SIZE", "8")
    g = resolve("job")
    assert (g.name, g.rank, g.world_size) == ("job", 3, 8)
    assert g.source == "torchrun environment (RANK, WORLD_SIZE)"
    assert g.timeout_ms is None  # the library's default


def test_slurm_environment(resolve, clean_env):
    clean_env.setenv("SLURM_PROCID", "5")
    clean_env.setenv("SLURM_NTASKS", "6")
    g = resolve("job")
    assert (g.rank, g.world_size) == (5, 6) and g.source.startswith("Slurm")


def test_torchrun_wins_over_slurm(resolve, clean_env):
    # torchrun inside a Slurm allocation: the Slurm task is the agent, RANK is the worker's.
    clean_env.setenv("SLURM_PROCID", "0")
    clean_env.setenv("SLURM_NTASKS", "2")
    clean_env.setenv("RANK", "7")
    clean_env.setenv("WORLD_SIZE", "8")
    g = resolve("job")
    assert (g.rank, g.world_size) == (7, 8) and g.source.startswith("torchrun")


def test_half_an_environment_is_not_used(resolve, clean_env):
    clean_env.setenv("RANK", "1")  # no WORLD_SIZE: not torchrun's environment
    clean_env.setenv("SLURM_PROCID", "2")
    clean_env.setenv("SLURM_NTASKS", "4")
    g = resolve("job")
    assert (g.rank, g.world_size) == (2, 4)


def test_explicit_arguments_win(resolve, clean_env):
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "4")
    g = resolve("job", rank=0, world_size=2)
    assert (g.rank, g.world_size, g.source) == (0, 2, "arguments")
    g = resolve("job", rank=3)  # only the rank given: the world size still from torchrun
    assert (g.rank, g.world_size) == (3, 4)
    assert g.source == "rank from the arguments, world_size from torchrun environment " \
                       "(RANK, WORLD_SIZE)"
    g = resolve("job", world_size=2)
    assert (g.rank, g.world_size) == (1, 2) and g.source.startswith("rank from torchrun")
    # Without any environment, both arguments are enough.
    clean_env.delenv("RANK")
    clean_env.delenv("WORLD_SIZE")
    g = resolve("job", rank=2, world_size=3, group_timeout=1.5)
    assert (g.rank, g.world_size, g.timeout_ms) == (2, 3, 1500)


def test_numpy_integers_are_ints(resolve, clean_env):
    import numpy as np

    g = resolve("job", rank=np.int64(1), world_size=np.uint32(2))
    assert (g.rank, g.world_size) == (1, 2) and type(g.rank) is int


def test_nothing_gives_rank_and_world(tsock, resolve, clean_env):
    with pytest.raises(ValueError, match=r"nothing gives rank and world_size.*torch.distributed "
                                         r"is not initialised.*RANK, WORLD_SIZE.*SLURM_PROCID"):
        resolve("job")
    with pytest.raises(ValueError, match="nothing gives world_size"):
        resolve("job", rank=0)
    # The DataLoader raises it before connecting: no producer is needed to see it.
    with pytest.raises(ValueError, match="needs this process's rank and world size"):
        tsock.DataLoader("ipc:///nonexistent/tsock.sock", group="job")


@pytest.mark.parametrize("kwargs, error, pattern", [
    (dict(rank=2, world_size=2), ValueError, r"rank must be in \[0, world_size\) = \[0, 2\), "
                                             r"not 2 \(from arguments\)"),
    (dict(rank=-1, world_size=2), ValueError, "not -1"),
    (dict(rank=0, world_size=0), ValueError, "world_size must be at least 1"),
    (dict(rank=0, world_size=2**32), ValueError, "fit in 32 bits"),
    (dict(rank=True, world_size=2), TypeError, "rank must be an int, not bool"),
    (dict(rank=0, world_size=2.0), TypeError, "world_size must be an int, not float"),
    (dict(rank="0", world_size=2), TypeError, "rank must be an int, not str"),
    (dict(rank=0, world_size=2, group_timeout=0), ValueError, "positive number of seconds"),
    (dict(rank=0, world_size=2, group_timeout=-1), ValueError, "positive number of seconds"),
    (dict(rank=0, world_size=2, group_timeout=float("nan")), ValueError, "positive"),
    (dict(rank=0, world_size=2, group_timeout=float("inf")), ValueError, "positive"),
    (dict(rank=0, world_size=2, group_timeout=2.0**40), ValueError, "too long"),
    (dict(rank=0, world_size=2, group_timeout="60"), TypeError, "number of seconds"),
])
def test_bad_values(tsock, resolve, clean_env, kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        resolve("job", **kwargs)
    with pytest.raises(error, match=pattern):  # the same error from the DataLoader
        tsock.DataLoader("ipc:///nonexistent/tsock.sock", group="job", **kwargs)


@pytest.mark.parametrize("var, value", [("RANK", "one"), ("WORLD_SIZE", ""),
                                        ("WORLD_SIZE", "2.0")])
def test_bad_environment(resolve, clean_env, var, value):
    clean_env.setenv("RANK", "0")
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv(var, value)
    with pytest.raises(ValueError, match=f"environment variable {var}=.* is not an integer"):
        resolve("job")
    clean_env.setenv("RANK", "4")
    clean_env.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match=r"not 4 \(from torchrun environment"):
        resolve("job")


@pytest.mark.parametrize("name, error, pattern", [
    ("", ValueError, "1 to 64 bytes"),
    ("x" * 65, ValueError, "not 65"),
    ("é" * 33, ValueError, "not 66"),  # 66 bytes of UTF-8 in 33 characters
    ("a\0b", ValueError, "control character"),
    ("a\nb", ValueError, "control character"),
    ("a\x7fb", ValueError, "control character"),
    ("\udc80", ValueError, "not valid UTF-8"),
    (b"job", TypeError, "must be a str"),
    (7, TypeError, "must be a str"),
])
def test_bad_group_names(resolve, clean_env, name, error, pattern):
    with pytest.raises(error, match=pattern):
        resolve(name, rank=0, world_size=1)


def test_longest_names(resolve, clean_env):
    assert resolve("x" * 64, rank=0, world_size=1).name == "x" * 64
    assert resolve("é" * 32, rank=0, world_size=1).name == "é" * 32


def test_a_checkpointing_rank_connects_on_first_use(tsock, clean_env):
    # A rank that joined its group fresh cannot become a restored one, so a checkpointing
    # rank connects only when first used, after any load_state_dict(): here nothing serves the
    # endpoint, and construction must not try it.
    loader = tsock.DataLoader("ipc:///nonexistent/tsock.sock", group="job", rank=0,
                              world_size=2, checkpointing=True, batch_size=8, timeout=0.5)
    assert not loader.closed and "nonexistent" in repr(loader)
    with pytest.raises(ValueError, match="state_dict"):
        loader.load_state_dict({"version": 1})
    with pytest.raises(tsock.BadState):  # a bad state leaves the loader as it was
        loader.load_state_dict({"version": 1, "state": b"not a state"})
    assert not loader.closed and loader._deferred
    with pytest.raises(tsock.TsockError):  # the first use connects, and nothing answers
        len(loader)
    loader.close()
    assert loader.closed
    with pytest.raises(tsock.BadState):  # a rank's state is checked like a solo job's
        tsock.Consumer("ipc:///nonexistent/tsock.sock", group="job", rank=0, world_size=2,
                       state=b"x")


def test_group_arguments_without_group(tsock, resolve, clean_env):
    assert resolve(None) is None
    for kwargs in (dict(rank=0), dict(world_size=2), dict(group_timeout=5)):
        with pytest.raises(ValueError, match="given without group="):
            resolve(None, **kwargs)
        with pytest.raises(ValueError, match="given without group="):
            tsock.DataLoader("ipc:///nonexistent/tsock.sock", **kwargs)


# A rank of a real gloo process group, with misleading torchrun variables in its environment:
# torch.distributed, initialised, must win over them, and explicit arguments over it.
DIST_CHILD = """
import json, sys
import torch.distributed as dist
from tsock import _group
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
pre = _group.resolve("job")
before = [pre.rank, pre.world_size, pre.source]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=world)
g = _group.resolve("job")
explicit = _group.resolve("job", rank=0)
dist.barrier()
dist.destroy_process_group()
print(json.dumps({"rank": g.rank, "world": g.world_size, "source": g.source,
                  "explicit": [explicit.rank, explicit.world_size, explicit.source],
                  "before": before}))
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torch_distributed_initialised(tsock, procs):
    pytest.importorskip("torch.distributed", reason="needs torch with torch.distributed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch build has no gloo backend for torch.distributed")
    world = 3
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(SLURM_PROCID="9", SLURM_NTASKS="10")  # misleading, and only this is set
    children = [start_python(procs, ["-c", DIST_CHILD, str(r), str(world), str(port)], env=env)
                for r in range(world)]
    results = []
    for c in children:
        out, err = c.communicate(timeout=120)
        assert c.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    for r, res in enumerate(results):
        assert (res["rank"], res["world"], res["source"]) == (r, world, "torch.distributed")
        assert res["explicit"] == [0, world, "rank from the arguments, world_size from "
                                              "torch.distributed"]
        # Before init_process_group the Slurm variables were what there was.
        assert res["before"] == [9, 10, "Slurm environment (SLURM_PROCID, SLURM_NTASKS)"]


def test_set_epoch(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=16, samples=32, epochs=4)
    with tsock.DataLoader(endpoint, timeout=20, output="numpy") as loader:
        assert loader.requested_epoch is None
        for bad, error in ((-1, ValueError), (1.0, TypeError), (True, TypeError),
                           ("1", TypeError)):
            with pytest.raises(error):
                loader.set_epoch(bad)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the usual loop agrees with the loader: no warning
            for epoch in range(2):
                loader.set_epoch(epoch)
                assert sum(1 for _ in loader) == 2 and loader.epoch == epoch
        loader.set_epoch(7)  # a job that resumed at epoch 7, reading its loader's epoch 2
        assert loader.requested_epoch == 7
        with pytest.warns(UserWarning, match=r"set_epoch\(7\) while the loader's next epoch "
                                             r"is its epoch 2"):
            assert sum(1 for _ in loader) == 2
        loader.set_epoch(9)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once only
            assert sum(1 for _ in loader) == 2
        assert loader.epoch == 3
