"""Issue 22's must-show: a script shaped like torchvision's references/classification/train.py
(reference_train.py) with tsock for both loaders trains 2 epochs beside a second job.

- job 1 leaves every training epoch after 3 steps (break), then validates; its first
  validation lasts until job 2 has finished (a file job 2's end creates): job 2 must read its
  two whole epochs meanwhile (before, job 1's queued batches held the slots and job 2 timed
  out), so job 2 never waits for job 1;
- both see exact epochs: job 2 every train sample once per epoch; job 1 each epoch distinct
  samples, epochs numbered 0 and 1 (a new iteration after break is a fresh epoch); every
  validation holds len(loader.dataset) samples;
- classes and len(dataset) come from the producer, and torch's DataLoader arguments are
  warned about, not refused;
- the eval pixels equal torchvision's eval preset (Resize, CenterCrop, PILToTensor,
  ConvertImageDtype, Normalize) on the same files within 2 levels of 255 on average (the
  bound test_image_pipeline uses for the resize), the producer having converted and
  normalised once on its host ring.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
pytest.importorskip("torchvision.transforms.v2")
from PIL import Image  # noqa: E402
from torchvision import datasets, transforms  # noqa: E402

from conftest import BIN_DIR  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_IMAGES, VAL_IMAGES, CLASSES, SIZE, BATCH = 48, 24, 3, 112, 8
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
# 112: Resize(128) + CenterCrop(112), where test_image_pipeline bounds tsock against
# torchvision at 2 levels; far smaller outputs decode large files at 1/8 scale (DCT-domain), a
# larger difference the presets do not have.


def make_tree(root, split, images, seed):
    mk = os.path.join(BIN_DIR, "tsock-mkdataset")
    subprocess.run([mk, root, "--images", str(images), "--classes", str(CLASSES), "--seed",
                    str(seed), "--split", split], check=True, capture_output=True, timeout=120)


def producer(programs, procs, endpoint, root, split):
    p = subprocess.Popen(
        [programs["tsock-producer"], "--dataset", "folder", "--root", root, "--split", split,
         "--endpoint", endpoint, "--batch-size", str(BATCH), "--slots", "4", "--image-size",
         str(SIZE), "--output", "float32", "--layout", "nchw", "--normalize", "--quiet"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def job(procs, tmp, name, train_ep, val_ep, *extra):
    out = os.path.join(tmp, f"{name}.json")
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "reference_train.py"),
                          "--train-endpoint", train_ep, "--val-endpoint", val_ep,
                          "--batch-size", str(BATCH), "--epochs", "2", "--name", name,
                          "--out", out, *extra],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p, out


def test_reference_script_two_jobs(tsock, programs, procs, tmp_path):
    tmp = str(tmp_path)
    train_root, val_root = os.path.join(tmp, "train"), os.path.join(tmp, "val")
    make_tree(train_root, "train", TRAIN_IMAGES, 3)
    make_tree(val_root, "val", VAL_IMAGES, 4)
    train_ep, val_ep = f"ipc://{tmp}/train.sock", f"ipc://{tmp}/val.sock"
    producer(programs, procs, train_ep, train_root, "train")
    producer(programs, procs, val_ep, val_root, "val")
    hold = os.path.join(tmp, "job2-done")
    pixels = os.path.join(tmp, "pixels.npz")
    job1, out1 = job(procs, tmp, "job1", train_ep, val_ep, "--max-steps", "3",
                     "--hold-until", hold, "--pixels", pixels)
    job2, out2 = job(procs, tmp, "job2", train_ep, val_ep)
    _, err2 = job2.communicate(timeout=300)
    assert job2.returncode == 0, f"job 2 (never to wait for job 1) failed:\n{err2}"
    open(hold, "w").close()  # job 1's long validation ends
    _, err1 = job1.communicate(timeout=300)
    assert job1.returncode == 0, err1
    r1, r2 = (json.load(open(p)) for p in (out1, out2))

    folder = datasets.ImageFolder(train_root)
    for r in (r1, r2):
        assert r["classes"] == folder.classes
        assert r["train_dataset_len"] == TRAIN_IMAGES
        assert r["eval_samples"] == [VAL_IMAGES, VAL_IMAGES]  # the reference's own check
        assert r["eval_dataset_len"] == VAL_IMAGES
        ignored = {w.split("=")[0].split()[-1] for w in r["warnings"]}
        assert ignored == {"sampler", "num_workers", "pin_memory"}, r["warnings"]
    # Job 2: each epoch every train sample exactly once.
    for epoch in ("0", "1"):
        assert sorted(r2["train_ids"][epoch]) == list(range(TRAIN_IMAGES))
    # Job 1: 3 steps an epoch, distinct samples, and a fresh epoch after each break.
    for epoch in ("0", "1"):
        ids = r1["train_ids"][epoch]
        assert len(ids) == 3 * BATCH and len(set(ids)) == len(ids)
    assert r1["train_epochs"] == [0, 0, 0, 1, 1, 1]

    # Pixels: the eval preset of torchvision's reference on the same files.
    val = datasets.ImageFolder(val_root)
    preset = transforms.Compose([
        transforms.Resize(SIZE * 256 // 224), transforms.CenterCrop(SIZE),
        transforms.PILToTensor(), transforms.ConvertImageDtype(torch.float),
        transforms.Normalize(MEAN, STD)])
    got = np.load(pixels)
    images, ids = got["images"], got["ids"]
    assert images.shape == (BATCH, 3, SIZE, SIZE) and images.dtype == np.float32
    bound = 2 / 255 / min(STD)  # 2 levels of 255, in normalised units
    for img, i in zip(images, ids):
        with Image.open(val.samples[int(i)][0]) as im:
            ref = preset(im.convert("RGB")).numpy()
        assert float(np.abs(img - ref).mean()) <= bound, val.samples[int(i)][0]
