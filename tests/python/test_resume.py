"""DataLoader.state_dict() / load_state_dict(): a training job checkpointed with torch.save
after every batch is killed with SIGKILL mid-epoch and restarted from its checkpoint; over both
runs the interrupted epoch is exact apart from the batch yielded after the last save, and the
restarted job goes on with normal exact epochs, epoch numbers continuing. Bad states get clear
errors. Real producer, real torch."""
import os
import signal

import pytest

from tsock_testutil import read_id_log, start_producer, start_python, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = 400
BATCH = 16
STEPS_PER_EPOCH = SAMPLES // BATCH
IN_EPOCH_1 = 10  # the first run logs its 10th step of epoch 1 and hangs before saving it
HANG_AT = STEPS_PER_EPOCH + IN_EPOCH_1  # its epochs are 0 (whole) and 1


def test_kill_and_resume_training(tsock, programs, procs, endpoint, tmp_path):
    torch = pytest.importorskip("torch")
    start_producer(programs, procs, endpoint, batch_size=32, samples=SAMPLES, epochs=0,
                   image_size=4)
    ckpt, log = str(tmp_path / "ckpt.pt"), str(tmp_path / "ids.log")
    child = [os.path.join(HERE, "resume_child.py"), endpoint, ckpt, log, "2", str(BATCH)]
    first = start_python(procs, child + [str(HANG_AT)])
    wait_until(lambda: os.path.exists(log)
               and len(read_id_log(log).get(1, [])) >= IN_EPOCH_1 * BATCH,
               60, f"the first run to log its step {IN_EPOCH_1} of epoch 1")
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    before = read_id_log(log)
    saved = torch.load(ckpt)
    assert set(saved) == {"model", "optimizer", "loader", "step"}
    assert saved["loader"]["version"] == 1 and isinstance(saved["loader"]["state"], bytes)
    assert len(saved["loader"]["state"]) <= 53 + (SAMPLES + 7) // 8
    os.truncate(log, 0)

    second = start_python(procs, child)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    after = read_id_log(log)
    assert sorted(after) == [1, 2], f"the restarted job's epochs: {sorted(after)}"
    # The saved position covers exactly the batches logged before the last save: every id of
    # epoch 1 in the first run but the one batch yielded after it, which comes again.
    e1_before, e1_after = before[1], after[1]
    assert sorted(before) == [0, 1] and len(e1_before) == IN_EPOCH_1 * BATCH
    assert len(e1_after) == len(set(e1_after)), "the restarted job saw a sample twice"
    assert set(e1_before) | set(e1_after) == set(range(SAMPLES)), "epoch 1 is not complete"
    assert len(e1_after) == SAMPLES - (IN_EPOCH_1 - 1) * BATCH, "not resumed at the last save"
    assert sorted(after[2]) == list(range(SAMPLES)), "epoch 2 is not exact"
    assert '"first_epoch": 1' in out


def test_state_dict_errors(tsock, programs, procs, endpoint):
    start_producer(programs, procs, endpoint, batch_size=32, samples=SAMPLES, epochs=0,
                   image_size=4, wait_consumers=0)
    with tsock.DataLoader(endpoint, batch_size=BATCH, timeout=30) as plain:
        with pytest.raises(ValueError, match="checkpointing=True"):
            plain.state_dict()
    with tsock.DataLoader(endpoint, batch_size=BATCH, timeout=30, checkpointing=True) as loader:
        it = iter(loader)
        for _ in range(3):
            next(it)
        sd = loader.state_dict()
        assert sd["version"] == 1 and 53 < len(sd["state"]) <= 53 + (SAMPLES + 7) // 8
        with pytest.raises(RuntimeError, match="before iterating"):
            loader.load_state_dict(sd)
    fresh = lambda **kw: tsock.DataLoader(endpoint, timeout=30, **{"batch_size": BATCH, **kw})
    with fresh() as loader:
        with pytest.raises(ValueError, match="version"):
            loader.load_state_dict({"version": 2, "state": sd["state"]})
        with pytest.raises(ValueError, match="state_dict"):
            loader.load_state_dict({"version": 1})
        bad = bytearray(sd["state"])
        bad[-1] ^= 1
        with pytest.raises(tsock.BadState) as info:
            loader.load_state_dict({"version": 1, "state": bytes(bad)})
        assert info.value.code == tsock.E_BAD_STATE
        with pytest.raises(tsock.BadState):
            loader.load_state_dict({"version": 1, "state": sd["state"][:-5]})
    with fresh(batch_size=BATCH * 2) as loader:  # saved with another batch size
        with pytest.raises(tsock.BadState):
            loader.load_state_dict(sd)
    with fresh() as loader:  # and the right one: the rest of the epoch, numbering continued
        loader.load_state_dict(sd)
        batches = list(loader)
        assert len(batches) == len(loader) - 3
