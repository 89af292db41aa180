#!/usr/bin/env python3
"""The GPU decoder end to end on the simulated device (issue 20): tsock-producer --device cuda
--decoder gpu on tsock-mkdataset trees with grayscale, CMYK, progressive, PNG and broken files,
read by tsock-consume --content images. The simulated device decodes with tsock's own CPU
decoder, so every epoch must be byte for byte what --decoder cpu gives (the epoch digests), with
the fallbacks counted: that checks which image goes where, the merge into the slot before the
conversion, and the ordering on the device's stream, not nvJPEG's pixels (gpu-check.sh does
those on a GPU).

    gpudecode_test.py TEST --producer PATH --consume PATH --mkdataset PATH

Standard library only; the harness is pipeline_test.py's Env.
"""
import contextlib
import json
import os
import signal
import subprocess
import time

from cudasim import SimCleanup, sim_objects, use_sim_device
from itest import check, run, wait_for
from pipeline_test import CLASSES, IMAGES, Env

# Per epoch on an --edge-cases tree: the regular and grayscale JPEGs go to the device; CMYK,
# progressive (the simulated hardware engine refuses it, as NVJPG does) and PNG files to the
# CPU, and so does each truncated file's replacement (the truncated file itself, its JPEG
# ending before its EOI marker, goes to the CPU, which leaves it out).
ON_DEVICE = IMAGES + CLASSES
ON_CPU = 4 * CLASSES
TSOCK_E_PRODUCER_LOST = -10003
CONVERTED = ["--output", "float16", "--layout", "nchw", "--normalize"]


# Heartbeats that a sanitizer build on a loaded machine cannot miss: a consumer lost to a slow
# beat would rejoin and read a partial epoch, which is not what these tests are about.
SLOW_BEATS = ["--heartbeat-ms", "250", "--heartbeat-timeout-ms", "20000"]


@contextlib.contextmanager
def sim_controls(**controls):
    """The simulated device's controls (TSOCK_CUDA_SIM_*) in the environment of the programs
    started inside the block."""
    os.environ.update(controls)
    try:
        yield
    finally:
        for name in controls:
            del os.environ[name]


def serve(env, tree, decoder, *extra, epochs=2, stats=None):
    """pipeline_test's Env.serve, with SLOW_BEATS on both sides."""
    stats = stats or f"{decoder}{len(env.log)}.json"
    p = env.producer("--dataset", "imagenet", "--root", tree, "--epochs", str(epochs), "--device",
                     "cuda", "--decoder", decoder, *extra, *SLOW_BEATS, stats=stats)
    try:
        rc, res = env.consume(epochs, *SLOW_BEATS)
        prc, err = env.finish(p)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    st = env.stats(stats)
    check(prc == 0, f"--decoder {decoder} {extra}: producer exit {prc}: {err[-2000:]}")
    # 3: tsock-consume flags the truncated files' replacements (a duplicate and a missing id).
    check(rc == 3, f"--decoder {decoder} {extra}: consumer exit {rc}")
    check(res["label_errors"] == 0 and res["index_errors"] == 0 and res["layout_errors"] == 0,
          f"--decoder {decoder}: labels and ids in range")
    check(len(res["epoch_digests"]) == epochs, f"digests {res['epoch_digests']}")
    return res, st, err


def test_content(env):
    """Bit for bit the CPU decoder's epochs, uint8 and converted (float16, NCHW, normalised: the
    device-decoded images are merged into the slot before the conversion kernel runs), and with
    the val preset (resize, then the centre window)."""
    tree = env.mkdataset("tree", "--edge-cases")
    for extra in ([], CONVERTED, ["--split", "val"]):
        cpu, cst, _ = serve(env, tree, "cpu", *extra)
        name = f"gpu{len(extra)}.json"
        gpu, gst, err = serve(env, tree, "gpu", *extra, "--stats-interval", "0.1", stats=name)
        check(gpu["epoch_digests"] == cpu["epoch_digests"],
              f"{extra}: the GPU decoder's epochs differ from the CPU's: {gpu['epoch_digests']} "
              f"{cpu['epoch_digests']}")
        pl = gst["pipeline"]
        check(pl["decoded_gpu"] == 2 * ON_DEVICE and pl["decoded_cpu"] == 2 * ON_CPU,
              f"{extra}: decoded gpu {pl['decoded_gpu']} cpu {pl['decoded_cpu']}, expected "
              f"{2 * ON_DEVICE} and {2 * ON_CPU}")
        check(cst["pipeline"]["decoded_gpu"] == 0, "--decoder cpu decoded on the device")
        with open(env.path(name)) as f:
            intervals = [json.loads(l) for l in f if '"interval"' in l]
        # As many interval records as the run lasted tenths of a second (none on a fast
        # machine: the count is not checked, only what each one holds).
        check(all("decoded_gpu" in r and "decoded_cpu" in r for r in intervals),
              "an interval record without decoded_gpu and decoded_cpu")
        check(pl["bad_files"] == CLASSES and pl["replaced"] == 2 * CLASSES,
              f"the truncated files, with --on-error skip: {pl}")
    check(not sim_objects(), f"simulated device memory left behind: {sim_objects()}")


def test_failed_decode(env):
    """A GPU decode that fails for chosen images (the simulator's injected failure): those are
    decoded on the CPU with the same crop, id and label, the epochs stay exact, and each failure
    is logged."""
    tree = env.mkdataset("tree", "--edge-cases")
    cpu, _, _ = serve(env, tree, "cpu")
    # Sample 0 is a regular JPEG of class 0; 7 one of class 1 (ids follow the sorted paths).
    with sim_controls(TSOCK_CUDA_SIM_DECODE_FAIL="0,7"):
        gpu, st, err = serve(env, tree, "gpu")
    check(gpu["epoch_digests"] == cpu["epoch_digests"], "a failed GPU decode changed the epochs")
    failed = [l for l in err.splitlines() if "the GPU decoder" in l and "failed" in l]
    check(len(failed) == 4, f"each failed decode is logged (2 images x 2 epochs): {failed}")
    pl = st["pipeline"]
    check(pl["decoded_gpu"] == 2 * ON_DEVICE - 4 and pl["decoded_cpu"] == 2 * ON_CPU + 4,
          f"decoded gpu {pl['decoded_gpu']} cpu {pl['decoded_cpu']}")


def test_cuda_backend(env):
    """As nvJPEG's CUDA decoder (no hardware engine), the device takes progressive JPEGs too."""
    tree = env.mkdataset("tree", "--edge-cases")
    cpu, _, _ = serve(env, tree, "cpu")
    with sim_controls(TSOCK_CUDA_SIM_DECODE_HW="0"):
        gpu, st, _ = serve(env, tree, "gpu")
    check(gpu["epoch_digests"] == cpu["epoch_digests"], "the CUDA backend changed the epochs")
    pl = st["pipeline"]
    check(pl["decoded_gpu"] == 2 * (ON_DEVICE + CLASSES) and
          pl["decoded_cpu"] == 2 * (ON_CPU - CLASSES),
          f"progressive on the device: decoded gpu {pl['decoded_gpu']} cpu {pl['decoded_cpu']}")


def test_killed_mid_decode(env):
    """A producer killed while its device decodes a batch (the simulator holds the third decode
    halfway, with half its writes queued): the consumer, which received the batches before,
    fails with TSOCK_E_PRODUCER_LOST within its heartbeat timeout, and nothing of the device is
    left behind."""
    tree = env.mkdataset("tree", "--edge-cases")
    held = env.path("held")
    with sim_controls(TSOCK_CUDA_SIM_DECODE_HOLD=held, TSOCK_CUDA_SIM_DECODE_HOLD_AFTER="2"):
        p = env.producer("--dataset", "imagenet", "--root", tree, "--epochs", "0", "--device",
                         "cuda", "--decoder", "gpu", *CONVERTED, stats="held.json")
    argv = [env.args.consume, "--endpoint", env.ipc, "--content", "images", "--epochs", "0",
            "--json", "--quiet", "--timeout-ms", "60000", "--connect-timeout-ms", "60000",
            "--heartbeat-ms", "100", "--heartbeat-timeout-ms", "2000"]
    c = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    env.procs.append((argv, c))
    wait_for(lambda: os.path.exists(held) or p.poll() is not None, 120, "the held decode")
    check(p.poll() is None, f"the producer exited (status {p.returncode}) instead of decoding")
    p.send_signal(signal.SIGKILL)
    p.wait()
    out, err = c.communicate(timeout=60)
    env.log.append((argv, c.returncode, out, err))
    lines = [l for l in out.splitlines() if l.startswith("{")]
    check(lines, f"tsock-consume printed no JSON (exit {c.returncode}): {err}")
    res = json.loads(lines[-1])
    check(res["error_code"] == TSOCK_E_PRODUCER_LOST,
          f"error_code {res['error_code']} ({res['error']}), expected the producer's loss")
    check(res["batches"] >= 1, "the consumer received no batch before the kill")
    check(res["label_errors"] == 0 and res["index_errors"] == 0, "labels and ids in range")
    wait_for(lambda: not sim_objects(), 30, f"the device's objects to go: {sim_objects()}")


def test_bad_options(env):
    """--decoder gpu needs --device cuda and an image dataset, and takes no CPU-only option (an
    augmentation, bicubic); a bad value is named."""
    tree = env.mkdataset("tree")
    for extra, says in ((["--dataset", "imagenet", "--root", tree, "--decoder", "gpu"],
                         "add --device cuda"),
                        (["--dataset", "synthetic", "--device", "cuda", "--decoder", "gpu"],
                         "only for the image datasets"),
                        (["--dataset", "imagenet", "--root", tree, "--decoder", "nvjpeg"],
                         "--decoder"),
                        # The GPU decoder augments nothing: refused, never silently skipped.
                        (["--dataset", "imagenet", "--root", tree, "--device", "cuda",
                          "--decoder", "gpu", "--auto-augment", "ta_wide"],
                         "--auto-augment runs on the CPU workers"),
                        (["--dataset", "imagenet", "--root", tree, "--device", "cuda",
                          "--decoder", "gpu", "--interpolation", "bicubic"],
                         "--interpolation bicubic runs on the CPU workers")):
        r = subprocess.run([env.args.producer, "--endpoint", env.ipc, *extra],
                           capture_output=True, text=True, timeout=60)
        env.log.append((extra, r.returncode, r.stdout, r.stderr))
        check(r.returncode == 2 and says in r.stderr, f"{extra}: exit {r.returncode} {r.stderr}")


TESTS = {
    "content": test_content,
    "failed_decode": test_failed_decode,
    "cuda_backend": test_cuda_backend,
    "killed_mid_decode": test_killed_mid_decode,
    "bad_options": test_bad_options,
}


class SimEnv(SimCleanup, Env):
    """pipeline_test's Env on a simulated device of its own; whatever a failed test's killed
    processes left on it goes with the rest of the test's files."""


def make_env(args, test):
    use_sim_device("gd")
    return SimEnv(args, test)


if __name__ == "__main__":
    run(__doc__, TESTS, make_env, [("producer", True), ("consume", True), ("mkdataset", True)])
