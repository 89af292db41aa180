"""benchmarks/collocation/gpu_decode.py's bounds on its jobs, without a GPU: fake jobs that
speak job.py's protocol (ready file, go file, first-batch file, one JSON line) and then hang
before their first batch, hang after it, fail, or finish. A hung job must be stopped within its
bound and its Python stack and stderr must reach the report (issue 20's GPU run lost a whole
budget to a torchvision job that never ended, with nothing in the report saying where)."""
import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmarks", "collocation"))
gpu_decode = importlib.import_module("gpu_decode")

# argv: MODE READY GO FIRST. Modes: ok, nofirst (hangs before its first batch), noexit (hangs
# after it), fails (exits 3 after a message on stderr).
FAKE_JOB = r"""
import faulthandler, json, os, signal, sys, time
mode, ready, go, first = sys.argv[1:5]
faulthandler.register(signal.SIGUSR1, all_threads=True)
open(ready, "w").close()
while not os.path.exists(go):
    time.sleep(0.01)

def waiting_for_first_batch():
    while True:
        time.sleep(0.1)

def stuck_after_its_span():
    while True:
        time.sleep(0.1)

if mode == "nofirst":
    waiting_for_first_batch()
if mode == "fails":
    sys.stderr.write("RuntimeError: nvjpegDecodeBatched failed (fake)\n")
    sys.exit(3)
t = time.monotonic()
open(first, "w").close()
if mode == "noexit":
    stuck_after_its_span()
print(json.dumps({"samples": 64, "first_batch_t": t, "last_batch_t": t + 0.5,
                  "wait_after_first_s": 0.1}))
"""


@pytest.fixture
def bench(monkeypatch):
    gate_first = gpu_decode.first_batch_file
    workdir = tempfile.mkdtemp(prefix="tsock-gpudec-test-")
    fake = os.path.join(workdir, "fake_job.py")
    with open(fake, "w") as f:
        f.write(FAKE_JOB)
    modes = []

    def job_argv(args, loader, name, gate, model, span, endpoint=None, root=None, workers=1):
        return [sys.executable, fake, modes.pop(0), gate.ready(name), gate.go,
                gate_first(gate, name)]

    monkeypatch.setattr(gpu_decode, "job_argv", job_argv)
    # No nvidia-smi sampling: the fake runs need no GPU.
    monkeypatch.setattr(gpu_decode, "GpuUtil", lambda: None)

    def run(job_modes, margin, span=1.0):
        modes[:] = list(job_modes)
        args = argparse.Namespace(margin=margin, cpus=4, batch_size=64)
        tag = f"t{len(os.listdir(workdir))}"
        return gpu_decode.run_one(args, "tvgpu", "none", len(job_modes), span, workdir,
                                  workdir, dict(os.environ), tag)

    yield run
    shutil.rmtree(workdir)


def test_a_job_without_a_first_batch_is_stopped_and_its_stack_reported(bench):
    t0 = time.monotonic()
    with pytest.raises(gpu_decode.RunFailed) as e:
        bench(["ok", "nofirst"], margin=1.0)
    assert "j1: no first batch 1 s after it was let go" in e.value.summary
    assert "waiting_for_first_batch" in e.value.detail, e.value.detail
    assert time.monotonic() - t0 < 60  # bounded: not the old span + 90 s, nor for ever


def test_a_job_running_past_its_span_is_stopped_and_its_stack_reported(bench):
    with pytest.raises(gpu_decode.RunFailed) as e:
        bench(["noexit"], margin=1.0)
    assert "j0: still running 1 s after its 1 s span" in e.value.summary
    assert "stuck_after_its_span" in e.value.detail, e.value.detail


def test_a_failing_job_s_stderr_reaches_the_report(bench):
    with pytest.raises(gpu_decode.RunFailed) as e:
        bench(["fails"], margin=30.0)
    assert "j0 exited with 3" in e.value.summary
    assert "nvjpegDecodeBatched failed (fake)" in e.value.detail
    row = {"phase": "decode", "model": "none", "config": "tvgpu", "k": 1,
           "error": e.value.summary, "stderr_tail": e.value.detail}
    md = gpu_decode.markdown({"gpu": "fake", "cpus": [0], "commit": None, "date_utc": "now",
                              "span_s": 1, "decode_span_s": 1, "runs": [row]})
    assert "## FAILED: decode none tvgpu K=1" in md
    assert "nvjpegDecodeBatched failed (fake)" in md


def test_jobs_that_finish_give_their_figures(bench):
    r = bench(["ok", "ok"], margin=30.0)
    assert r["samples"] == 128 and r["k"] == 2
    assert r["images_per_s_per_job"] == pytest.approx(128.0)


# The tvgpu job's DataLoader (its workers read the files' bytes) on a real tree, no GPU needed:
# two epochs of batches must arrive, each file's bytes intact. In a child, so a hang is a
# failure after a bound, not a stuck test run.
TVGPU_LOADER = r"""
import argparse, os, sys
import torch, torchvision
from torchvision import datasets, transforms
sys.path.insert(0, sys.argv[2])
import job
args = argparse.Namespace(root=sys.argv[1], batch_size=32, workers=2, persistent_workers=False)
loader, _ = job.tvgpu_loader(torch, torchvision, datasets, transforms, args)
want = sorted(os.path.getsize(p) for p, _ in loader.dataset.samples)
for epoch in range(2):
    got = []
    for data, labels in loader:
        for part in job.batch_files(torch, data):
            assert part.dtype == torch.uint8 and part.dim() == 1
            assert part[0] == 0xFF and part[1] == 0xD8  # a JPEG's start of image
            got.append(part.numel())
    assert sorted(got) == want, (len(got), len(want))
print("ok", len(want))
"""


def test_the_tvgpu_loader_delivers_every_file_across_epochs(tmp_path, short_tmp):
    import subprocess
    bin_dir = os.environ["TSOCK_BIN_DIR"]
    mk = os.path.join(bin_dir, "tsock-mkdataset")
    assert os.path.exists(mk), f"{mk} missing: build tsock (TSOCK_BIN_DIR)"
    tree = tmp_path / "tree"
    subprocess.run([mk, str(tree), "--images", "300", "--classes", "3", "--force"], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        r = subprocess.run([sys.executable, "-c", TVGPU_LOADER, str(tree),
                            os.path.join(REPO, "benchmarks", "collocation")],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, TMPDIR=short_tmp))  # its workers' pymp-*
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        pytest.fail(f"the tvgpu loader delivered nothing in 120 s:\n{(err or '')[-3000:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("ok 300")
