"""DataLoader(group=..., checkpointing=True): the ranks of a DDP-style group save
state_dict() at one step and are killed with SIGKILL; the job restarts from those states with
the same or another world size and receives exactly the rest of the interrupted group epoch,
dealt evenly, then normal exact epochs (issue 15, over issue 14's groups). Real producer, real
torch, a process per rank."""
import json
import os
import signal

import pytest

from tsock_testutil import read_id_log, start_producer, start_python, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "group_resume_child.py")
SAMPLES = 240
BATCH = 8
SAVE_AT = 4  # each rank of the first run saves after its 4th batch of epoch 0


def child(endpoint, rank, world, log, *more):
    """A rank reading to the end of epoch 1 with batches of BATCH."""
    return [CHILD, endpoint, *map(str, (rank, world, log, 1, BATCH, *more))]


@pytest.fixture
def groups(tsock):
    if "tsock_consumer_set_group" in tsock._lib.missing:
        pytest.skip("libtsock has no tsock_consumer_set_group (groups, issue 14)")
    return tsock


@pytest.mark.parametrize("new_world", [3, 2])
def test_group_restored_with_its_states(groups, programs, procs, endpoint, tmp_path, new_world):
    torch = pytest.importorskip("torch")
    start_producer(programs, procs, endpoint, batch_size=BATCH, samples=SAMPLES, epochs=0,
                   image_size=4, wait_consumers=0)
    world = 3
    logs = [str(tmp_path / f"first{r}.log") for r in range(world)]
    states = [str(tmp_path / f"state{r}.pt") for r in range(world)]
    first = [start_python(procs, child(endpoint, r, world, logs[r], "--save-at", SAVE_AT,
                                       "--state-out", states[r])) for r in range(world)]
    wait_until(lambda: all(os.path.exists(s) for s in states), 120,
               "every rank of the first run to save its state")
    for p in first:
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    saved = [torch.load(s) for s in states]
    assert all(sd == saved[0] for sd in saved), "ranks that saved at one step differ"
    before = set()
    for log in logs:
        ids = read_id_log(log)
        assert sorted(ids) == [0] and len(ids[0]) == SAVE_AT * BATCH
        before |= set(ids[0])
    assert len(before) == world * SAVE_AT * BATCH, "the first run's ranks overlapped"

    # The restarted job: each new rank loads a saved state (they are the same bytes).
    logs2 = [str(tmp_path / f"second{r}.log") for r in range(new_world)]
    second = [start_python(procs, child(endpoint, r, new_world, logs2[r], "--state-in",
                                        states[r % world])) for r in range(new_world)]
    results = []
    for p in second:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    rest = SAMPLES - len(before)
    per_rank = -(-rest // new_world)  # DistributedSampler's padding over the rest
    shards = [read_id_log(log) for log in logs2]
    for r, (res, shard) in enumerate(zip(results, shards)):
        assert res["first_epoch"] == 0, "the restored epoch is not numbered on"
        assert sorted(shard) == [0, 1]
        assert len(shard[0]) == per_rank, f"rank {r}: {len(shard[0])} samples, not {per_rank}"
        # len() is a whole epoch's, as for a solo job restored; the restored epoch is shorter.
        assert res["len_restored"] == -(-(-(-SAMPLES // new_world)) // BATCH)
        assert res["batches"]["0"] == -(-per_rank // BATCH)
    restored = [set(s[0]) for s in shards]
    union = set().union(*restored)
    assert not (union & before), "a sample of the saved steps came again"
    assert union | before == set(range(SAMPLES)), "the interrupted epoch is not complete"
    assert sum(len(s) for s in restored) - len(union) == per_rank * new_world - rest  # padding
    epoch1 = [s[1] for s in shards]
    assert set().union(*map(set, epoch1)) == set(range(SAMPLES)), "epoch 1 is not exact"
    assert len({len(s) for s in epoch1}) == 1, "epoch 1's shares are unequal"


def test_restore_after_first_use_is_refused(groups, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=BATCH, samples=SAMPLES, epochs=0,
                   image_size=4, wait_consumers=0)
    with groups.DataLoader(endpoint, group="used", rank=0, world_size=1, batch_size=BATCH,
                           checkpointing=True, timeout=30) as loader:
        assert len(loader) == SAMPLES // BATCH  # first use: the rank joins its group fresh
        with pytest.raises(RuntimeError, match="before the loader is first used"):
            loader.load_state_dict({"version": 1, "state": b"whatever"})
