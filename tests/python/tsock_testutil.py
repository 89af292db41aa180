"""Helpers shared by the binding's tests and their child processes (standard library + numpy)."""
import os
import subprocess
import sys
import time

import numpy as np

SAMPLE_MUL = 2654435761
BYTE_MUL = 40503


def synthetic_images(ids, image_size):
    """The bytes tsock-producer --dataset synthetic puts in `image` for sample ids `ids`:
    byte p of sample s is (uint8)(((u32)s * 2654435761 + (u32)p * 40503) >> 16), u32 wrapping."""
    ids = np.asarray(ids, dtype=np.uint64).reshape(-1, 1)
    p = np.arange(image_size * image_size * 3, dtype=np.uint64).reshape(1, -1)
    v = ((ids * np.uint64(SAMPLE_MUL) + p * np.uint64(BYTE_MUL)) & np.uint64(0xFFFFFFFF)) >> np.uint64(16)
    return (v & np.uint64(0xFF)).astype(np.uint8).reshape(-1, image_size, image_size, 3)


def as_numpy(x):
    """A numpy view of a batch element, whether torch tensor or numpy array."""
    if isinstance(x, np.ndarray):
        return x
    return x.numpy()


def start_producer(programs, procs, endpoint, *, batch_size=16, samples=100, image_size=8,
                   epochs=1, slots=8, seed=1, wait_consumers=1, extra=()):
    """Starts tsock-producer --dataset synthetic; it is killed at the end of the test."""
    argv = [programs["tsock-producer"], "--dataset", "synthetic", "--endpoint", endpoint,
            "--batch-size", str(batch_size), "--slots", str(slots), "--samples", str(samples),
            "--image-size", str(image_size), "--epochs", str(epochs), "--seed", str(seed),
            "--wait-consumers", str(wait_consumers), "--quiet", *extra]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def start_python(procs, script_args, env=None):
    p = subprocess.Popen([sys.executable, *script_args], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    procs.append(p)
    return p


def wait_until(predicate, timeout, what):
    """Polls `predicate` until it is true; fails the test after `timeout` seconds. The bound
    only turns a hang into a failure: nothing is asserted about how fast it became true."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def read_id_log(path):
    """{epoch: [ids]} from a log of `EPOCH ID` lines that a child appends (and fsyncs) per
    batch; a torn last line, left by a kill, is ignored; a missing file is empty."""
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.endswith("\n"):
                    e, i = line.split()
                    out.setdefault(int(e), []).append(int(i))
    return out
