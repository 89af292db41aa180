"""The image pipeline against torchvision, the loader users compare tsock with.

tsock-producer --dataset folder serves a tsock-mkdataset tree; a tsock.DataLoader reads it
with the sample ids, and each image is compared with what torchvision makes of the same file:
    - sample ids and labels follow torchvision's ImageFolder order and class numbering;
    - the val preset equals Resize(256) + CenterCrop(224) on PIL images within a mean absolute
      difference of 2 levels (the issue's bound; DCT-domain scaling accounts for the rest);
    - the train preset is random (its crop boxes follow torchvision's distribution: a C unit
      test checks the box sampler statistically); here: the same seed gives the same bytes,
      every epoch gives every sample a new crop, labels follow ImageFolder.
Skipped when torchvision or Pillow is missing (the test command installs both).
"""
import os
import subprocess

import numpy as np
import pytest

torchvision = pytest.importorskip("torchvision")
PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402
from torchvision import datasets, transforms  # noqa: E402

from conftest import BIN_DIR  # noqa: E402

IMAGES, CLASSES, BATCH = 24, 3, 8
# Natural photographs (Debian's mate-backgrounds, which scripts/deps.sh installs), cropped by
# tsock-mkdataset to ImageNet's sizes: the files the benchmarks measure on.
PHOTOS_DIR = "/usr/share/backgrounds"
PHOTO_IMAGES = 64


def has_jpegs(folder):
    return any(f.lower().endswith((".jpg", ".jpeg")) for _, _, fs in os.walk(folder) for f in fs)


@pytest.fixture(scope="module")
def tree(tmp_path_factory, tsock):
    root = str(tmp_path_factory.mktemp("tree") / "t")
    mk = os.path.join(BIN_DIR, "tsock-mkdataset")
    subprocess.run([mk, root, "--images", str(IMAGES), "--classes", str(CLASSES), "--seed", "5",
                    "--split", "val"], check=True, capture_output=True, timeout=120)
    return root


@pytest.fixture(scope="module")
def photo_tree(tmp_path_factory, tsock):
    if not os.path.isdir(PHOTOS_DIR) or not has_jpegs(PHOTOS_DIR):
        pytest.skip(f"no photographs under {PHOTOS_DIR}: install mate-backgrounds "
                    "(scripts/deps.sh does)")
    root = str(tmp_path_factory.mktemp("photos") / "t")
    mk = os.path.join(BIN_DIR, "tsock-mkdataset")
    subprocess.run([mk, root, "--images", str(PHOTO_IMAGES), "--classes", "4", "--seed", "11",
                    "--split", "val", "--photos", PHOTOS_DIR], check=True, capture_output=True,
                   timeout=300)
    return root


def serve(programs, procs, endpoint, tree, *extra, epochs=1):
    p = subprocess.Popen([programs["tsock-producer"], "--dataset", "folder", "--root", tree,
                          "--endpoint", endpoint, "--batch-size", str(BATCH), "--epochs",
                          str(epochs), "--wait-consumers", "1", "--quiet", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def read_all(tsock, endpoint, epochs=1):
    """{epoch: {sample id: (image HWC uint8, label)}} for `epochs` epochs."""
    out = []
    with tsock.DataLoader(endpoint, return_ids=True, timeout=60) as loader:
        for _ in range(epochs):
            got = {}
            for images, labels, ids in loader:
                images, labels, ids = (np.asarray(x) for x in (images, labels, ids))
                for img, label, i in zip(images, labels, ids):
                    got[int(i)] = (img.copy(), int(label))
            out.append(got)
    return out


# 224: Resize(256), no file large enough for DCT-domain scaling (expect byte equality);
# 112: Resize(128), where files of 512 pixels or more are decoded at half scale.
@pytest.mark.parametrize("size", [224, 112])
def test_val_preset_matches_torchvision(tsock, programs, procs, endpoint, tree, size):
    check_val_preset(tsock, programs, procs, endpoint, tree, size)


# Issue 21: on every photograph of the set the val preset is torchvision's bytes exactly (the
# decode reads only the rows and columns under the centre crop's filter support, and stops
# after the last of those rows).
def test_val_preset_photos_match_torchvision(tsock, programs, procs, endpoint, photo_tree):
    check_val_preset(tsock, programs, procs, endpoint, photo_tree, 224)


def check_val_preset(tsock, programs, procs, endpoint, tree, size):
    p = serve(programs, procs, endpoint, tree, "--split", "val", "--image-size", str(size))
    (got,) = read_all(tsock, endpoint)
    assert p.wait(timeout=60) == 0, p.stderr.read()
    folder = datasets.ImageFolder(tree)
    assert sorted(got) == list(range(len(folder.samples))), "one sample per file, in order"
    reference = transforms.Compose([transforms.Resize(size * 256 // 224),
                                    transforms.CenterCrop(size)])
    worst = 0.0
    for i, (path, label) in enumerate(folder.samples):
        img, tsock_label = got[i]
        assert tsock_label == label, f"{path}: label {tsock_label}, ImageFolder says {label}"
        with Image.open(path) as im:
            ref = np.asarray(reference(im.convert("RGB")))
        assert img.shape == ref.shape == (size, size, 3) and img.dtype == np.uint8
        mad = float(np.abs(img.astype(np.int16) - ref.astype(np.int16)).mean())
        worst = max(worst, mad)
        assert mad <= 2.0, f"{path}: mean absolute difference {mad:.3f} levels"
    print(f"val preset {size} vs torchvision on {len(folder.samples)} files: worst mean "
          f"absolute difference {worst:.3f} levels")
    if size == 224:
        assert worst == 0.0, "without DCT scaling the val preset is Pillow's bytes exactly"


def test_train_preset_varies_and_is_reproducible(tsock, programs, procs, endpoint, tree):
    runs = []
    for _ in range(2):
        p = serve(programs, procs, endpoint, tree, "--split", "train", "--seed", "9",
                  epochs=2)
        runs.append(read_all(tsock, endpoint, epochs=2))
        assert p.wait(timeout=60) == 0, p.stderr.read()
    first, second = runs
    folder = datasets.ImageFolder(tree)
    for epoch in range(2):
        assert sorted(first[epoch]) == list(range(IMAGES))
        for i, (img, label) in first[epoch].items():
            assert img.shape == (224, 224, 3) and label == folder.samples[i][1]
            assert np.array_equal(img, second[epoch][i][0]), "same seed, other bytes"
    changed = sum(not np.array_equal(first[0][i][0], first[1][i][0]) for i in range(IMAGES))
    assert changed == IMAGES, "every sample gets a new crop each epoch"
