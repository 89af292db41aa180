#!/usr/bin/env python3
"""Checkpointable consumers with the real programs: tsock-consume --save-state/--resume/--ids-out.

    resume_test.py TEST --producer PATH --consume PATH

A consumer saving its position after every release is killed with SIGKILL mid-epoch; a new one
resumes from the state file. The interrupted epoch, over both runs, must be exact apart from the
documented window: the restored run receives exactly the complement of the saved set, the
crashed run's --ids-out lines cover the saved set, and the only samples both runs received are
those of the batches after the last save (at most --save-every batches). The same across a
producer restart, with the same seed and with another. Bad state files get clear errors.
Standard library only.
"""
import os
import shutil
import signal
import struct

from itest import check, read_ids, run, wait_for
from tsock_integration import BATCH, SAMPLES, Env, wait_json


def decode_state(data, rank=False):
    """(epoch, batch, delivered ids) of a solo consumer's state file (docs/semantics.md,
    "Resume"); with rank=True, of a group rank's, plus its group block as a dict (world,
    nodes, node_rank, index)."""
    check(len(data) >= 53 and data[:4] == b"TSRS", f"not a state file ({len(data)} bytes)")
    version, flags, n, epoch, batch, group, layout, delivered, enc = struct.unpack_from(
        "<HHQQIIQQB", data, 4)
    check(version == 2 and group == (20 if rank else 0), f"state version {version}, group {group}")
    block = {}
    if rank:
        world, nodes, node_rank, index = struct.unpack_from("<IIIQ", data, 49)
        block = {"world": world, "nodes": nodes, "node_rank": node_rank, "index": index}
    body = data[49 + group:-4]
    ids = set()
    if enc == 1:
        for i in range(n):
            if body[i >> 3] >> (i & 7) & 1:
                ids.add(i)
    elif enc == 2:
        pos, prev = 0, -1
        for _ in range(delivered):
            v, shift = 0, 0
            while True:
                b = body[pos]
                pos += 1
                v |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            prev = prev + 1 + v
            ids.add(prev)
    check(len(ids) == delivered, f"state names {len(ids)} ids, count {delivered}")
    return (epoch, batch, ids, block) if rank else (epoch, batch, ids)


def interrupted_run(env, restart=None, save_every=1):
    """Consumer 1 saves after every `save_every` releases and is killed in its epoch 1; consumer
    2 resumes (after a producer restart when `restart` is a seed) and reads the rest of that
    epoch and one more."""
    p = env.producer("--epochs", "0", name="producer1")
    p.wait_stderr("serving", 10)
    state, ids1, ids2 = env.path("state"), env.path("ids1"), env.path("ids2")
    c1 = env.consumer("--epochs", "3", "--delay-ms", "5", "--save-state", state,
                      "--save-every", str(save_every), "--ids-out", ids1, name="consumer1")
    # Somewhere in its second epoch: between 1/4 and 3/4 of it.
    stop_at = SAMPLES + SAMPLES // 4 + (os.getpid() % (SAMPLES // 2))
    wait_for(lambda: sum(len(v) for v in read_ids(ids1).values()) >= stop_at, 30,
             f"consumer1 to receive {stop_at} samples")
    c1.p.send_signal(signal.SIGKILL)
    c1.wait(5)
    saved = env.path("state-at-kill")
    shutil.copyfile(state, saved)
    with open(saved, "rb") as f:
        epoch, batch, delivered = decode_state(f.read())
    check(epoch == 1, f"the state is of epoch {epoch}, expected 1")
    if restart is not None:
        p.p.send_signal(signal.SIGKILL)
        p.wait(5)
        p = env.producer("--epochs", "0", "--seed", str(restart), name="producer2")
        p.wait_stderr("serving", 10)
    c2 = env.consumer("--epochs", "1", "--resume", state, "--save-state", state,
                      "--ids-out", ids2, name="consumer2")
    res = wait_json(c2, 40, "the resumed consumer")
    p.signal(signal.SIGTERM)
    p.wait(10)
    check(c2.p.returncode == 0, f"consumer2 exit {c2.p.returncode}: {c2.stderr()}")
    check(res["duplicates"] == 0 and res["out_of_order"] == 0 and res["content_errors"] == 0,
          f"consumer2 found errors: {res}")
    check(res["epochs"] == 1 and res["partial_epochs"] == 1,
          f"consumer2: {res['epochs']} epochs, {res['partial_epochs']} partial")

    first, second = read_ids(ids1), read_ids(ids2)
    before, after = first.get(1, []), second.get(1, [])
    check(set(before) >= delivered, "the crashed run's lines do not cover its saved state")
    check(len(after) == len(set(after)), "the resumed run received a sample twice")
    check(not (set(after) & delivered), "the resumed run received saved samples again")
    check(set(after) | delivered == set(range(SAMPLES)),
          f"epoch 1 over both runs lacks {SAMPLES - len(set(after) | delivered)} samples")
    window = set(before) - delivered
    check(len(window) <= save_every * batch,
          f"{len(window)} samples after the last save, more than {save_every} batches")
    check(set(after) & set(before) == window, "samples seen twice outside the window")
    check(sorted(second.get(2, [])) == list(range(SAMPLES)), "epoch 2 is not exact")
    check(set(second) == {1, 2}, f"the resumed run's epochs are {sorted(second)}")
    print(f"saved {len(delivered)} of epoch 1; window {len(window)} samples; resumed run "
          f"received {len(after)} of epoch 1 in {res['batches']} batches")


def test_kill9(env):
    interrupted_run(env)


def test_kill9_save_every(env):
    interrupted_run(env, save_every=3)


def test_producer_restart_same_seed(env):
    interrupted_run(env, restart=0)


def test_producer_restart_other_seed(env):
    interrupted_run(env, restart=7)


def test_bad_state(env):
    """Corrupt, truncated, missing and foreign state files: clear errors, non-zero exits."""
    p = env.producer("--epochs", "0", name="producer1")
    p.wait_stderr("serving", 10)
    state = env.path("state")
    c = env.consumer("--epochs", "1", "--save-state", state, name="saver")
    wait_json(c, 30, "the saving consumer")
    with open(state, "rb") as f:
        good = f.read()
    check(len(good) == 53, f"a state at an epoch boundary has {len(good)} bytes, not 53")

    def refused(data, expect, name):
        path = env.path(name)
        if data is not None:
            with open(path, "wb") as f:
                f.write(data)
        r = env.consumer("--epochs", "1", "--resume", path, name=name)
        rc = r.wait(20, name)
        check(rc != 0, f"{name}: exit 0")
        check(expect in r.stderr(), f"{name}: no '{expect}' in {r.stderr()!r}")

    bad = bytearray(good)
    bad[20] ^= 1
    refused(bytes(bad), "checksum", "corrupt")
    refused(good[:40], "truncated", "truncated")
    refused(None, "No such file", "missing")
    p.signal(signal.SIGTERM)
    p.wait(10)
    # Another dataset size: refused at start.
    p = env.producer("--epochs", "0", samples=SAMPLES // 2, name="producer2")
    p.wait_stderr("serving", 10)
    r = env.consumer("--epochs", "1", "--resume", state, samples=SAMPLES // 2, name="foreign")
    rc = r.wait(20, "foreign")
    check(rc == 1 and "dataset of 2048 samples" in r.stderr(),
          f"foreign: exit {rc}, {r.stderr()!r}")
    p.signal(signal.SIGTERM)
    p.wait(10)


TESTS = {
    "resume_kill9": test_kill9,
    "resume_kill9_save_every": test_kill9_save_every,
    "resume_producer_restart_same_seed": test_producer_restart_same_seed,
    "resume_producer_restart_other_seed": test_producer_restart_other_seed,
    "resume_bad_state": test_bad_state,
}

if __name__ == "__main__":
    run(__doc__, TESTS, Env, [("producer", True), ("consume", True), ("garbage", False),
                              ("stat", False)])
