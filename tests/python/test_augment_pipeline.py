"""The producer's augmented presets end to end, and the policies' draws.

- The same seed gives the same bytes with 1, 2 and 8 workers for ta_wide + random erasing,
  ra + colour jitter, and imagenet (the augmentations draw from each sample's own stream).
- The augmentations change the images (against the plain train preset with the same seed:
  same crops, other bytes) and --val-resize-size / --val-crop-size give torchvision's sizes.
- Bad values are usage errors (exit status 2) naming the option.
- tsock_augment_draw, the producer's own draw, chooses operations and magnitudes as the
  torchvision classes define them: every drawn magnitude is one of the class's bins (with its
  sign rule), and operation frequencies are within 5 standard deviations of uniform (seeds
  are fixed, so the check is deterministic); RandomErasing's boxes against torchvision's own
  draws, ColorJitter's order and factors against its definition.
"""
import ctypes
import json
import math
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torchvision.transforms import v2  # noqa: E402

from conftest import BIN_DIR  # noqa: E402

IMAGES, CLASSES, BATCH = 24, 3, 8
NAMES = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
         "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
         "Invert"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory, tsock):
    root = str(tmp_path_factory.mktemp("tree") / "t")
    mk = os.path.join(BIN_DIR, "tsock-mkdataset")
    subprocess.run([mk, root, "--images", str(IMAGES), "--classes", str(CLASSES), "--seed", "7",
                    "--split", "val"], check=True, capture_output=True, timeout=120)
    return root


def serve_and_read(tsock, programs, procs, endpoint, tree, *extra):
    p = subprocess.Popen([programs["tsock-producer"], "--dataset", "folder", "--root", tree,
                          "--endpoint", endpoint, "--batch-size", str(BATCH), "--epochs", "1",
                          "--wait-consumers", "1", "--quiet", "--seed", "11", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    got = {}
    with tsock.DataLoader(endpoint, return_ids=True, timeout=60) as loader:
        for images, labels, ids in loader:
            for img, i in zip(np.asarray(images), np.asarray(ids)):
                got[int(i)] = img.copy()
    assert p.wait(timeout=60) == 0, p.stderr.read()
    return got


RECIPES = {
    "ta_wide+erase": ["--auto-augment", "ta_wide", "--random-erase", "0.5",
                      "--augment-interpolation", "bilinear", "--train-crop-size", "96"],
    "ra+jitter": ["--auto-augment", "ra", "--ra-magnitude", "15", "--ra-ops", "3",
                  "--color-jitter", "0.4,0.4,0.4,0.1", "--image-size", "64"],
    "imagenet": ["--auto-augment", "imagenet", "--image-size", "80"],
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_same_seed_same_bytes_whatever_the_workers(tsock, programs, procs, endpoint, tree, recipe):
    runs = [serve_and_read(tsock, programs, procs, endpoint, tree, "--workers", str(n),
                           *RECIPES[recipe]) for n in (1, 2, 8)]
    assert sorted(runs[0]) == list(range(IMAGES))
    for n, run in zip((2, 8), runs[1:]):
        for i in range(IMAGES):
            assert np.array_equal(runs[0][i], run[i]), f"{recipe}: sample {i} differs with {n} workers"
    size = RECIPES[recipe][RECIPES[recipe].index("--train-crop-size" if "--train-crop-size" in
                                                 RECIPES[recipe] else "--image-size") + 1]
    plain = serve_and_read(tsock, programs, procs, endpoint, tree, "--workers", "2",
                           "--image-size", size)
    changed = sum(not np.array_equal(plain[i], runs[0][i]) for i in range(IMAGES))
    assert changed >= IMAGES // 3, f"{recipe}: only {changed} of {IMAGES} images changed"


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_val_preset_interpolation_is_pils(tsock, programs, procs, endpoint, tree, interpolation):
    """--interpolation with --val-resize-size/--val-crop-size: torchvision's eval preset on PIL
    images byte for byte (no file is large enough for DCT-domain scaling at this size)."""
    from PIL import Image
    from torchvision import datasets, transforms
    got = serve_and_read(tsock, programs, procs, endpoint, tree, "--split", "val",
                         "--val-resize-size", "232", "--val-crop-size", "224",
                         "--interpolation", interpolation)
    mode = getattr(transforms.InterpolationMode, interpolation.upper())
    reference = transforms.Compose([transforms.Resize(232, interpolation=mode),
                                    transforms.CenterCrop(224)])
    for i, (path, _) in enumerate(datasets.ImageFolder(tree).samples):
        with Image.open(path) as im:
            ref = np.asarray(reference(im.convert("RGB")))
        assert got[i].shape == ref.shape == (224, 224, 3)
        diff = np.abs(got[i].astype(np.int16) - ref.astype(np.int16))
        assert diff.max() == 0, f"{path}: {int((diff > 0).sum())} values differ ({interpolation})"


def test_val_sizes(tsock, programs, procs, endpoint, tree):
    got = serve_and_read(tsock, programs, procs, endpoint, tree, "--split", "val",
                         "--val-resize-size", "232", "--val-crop-size", "200")
    assert got[0].shape == (200, 200, 3)


@pytest.mark.parametrize("args,message", [
    (["--auto-augment", "autoaug"], "--auto-augment: 'autoaug' is not a valid value"),
    (["--auto-augment", "ra", "--ra-magnitude", "-2"], "--ra-magnitude: must be from 0 to 30"),
    (["--auto-augment", "ra", "--ra-ops", "-1"], "--ra-ops: must be from 0 to 64"),
    (["--ra-magnitude", "9"], "only with --auto-augment ra"),
    (["--random-erase", "1.01"], "--random-erase: a probability in [0, 1]"),
    (["--random-erase", "-0.1"], "--random-erase: a probability in [0, 1]"),
    (["--color-jitter", "0.4,-0.4,0.4,0"], "--color-jitter: brightness, contrast and saturation"),
    (["--color-jitter", "0.4,0.4,0.4,0.6"], "--color-jitter: hue must be in [0, 0.5]"),
    (["--color-jitter", "0.4,0.4"], "--color-jitter: expected four numbers"),
    (["--augment-interpolation", "cubic"], "--augment-interpolation: 'cubic' is not a valid"),
    (["--split", "val", "--auto-augment", "ta_wide"], "not for --split val"),
    (["--split", "val", "--val-resize-size", "100", "--val-crop-size", "224"],
     "--val-resize-size 100: must be at least the crop size 224"),
    (["--train-crop-size", "176", "--image-size", "224"], "contradicts --image-size"),
    (["--interpolation", "lanczos"], "--interpolation: 'lanczos' is not a valid value"),
])
def test_bad_values_are_usage_errors(programs, tree, args, message):
    r = subprocess.run([programs["tsock-producer"], "--dataset", "folder", "--root", tree, *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and message in r.stderr, r.stderr


@pytest.fixture(scope="module")
def draw(tsock):
    from tsock import _lib
    fn = _lib.lib.tsock_augment_draw
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                   ctypes.c_uint64, ctypes.POINTER(ctypes.c_int),
                   ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    fn.restype = ctypes.c_int

    def run(policy, seed, magnitude=9, num_ops=2, w=224, h=160):
        ops, mags = (ctypes.c_int * 64)(), (ctypes.c_double * 64)()
        n = fn(policy, magnitude, num_ops, w, h, seed, ops, mags, 64)
        assert n >= 0
        return [(NAMES[ops[i]], mags[i]) for i in range(n)]
    return run


def bins(cls, name, n, w=224, h=160):
    fn, signed = cls._AUGMENTATION_SPACE[name]
    m = fn(n, h, w)
    values = {0.0} if m is None else {float(v) for v in m}
    return values | ({-v for v in values} if signed else set())


def check_uniform(counts, names, total):
    p = 1.0 / len(names)
    sd = math.sqrt(total * p * (1 - p))
    for name in names:
        assert abs(counts[name] - total * p) < 5 * sd, (name, counts[name], total * p)


def test_trivial_augment_wide_draws(draw):
    counts, total = Counter(), 14000
    space = v2.TrivialAugmentWide._AUGMENTATION_SPACE
    for seed in range(total):
        ((name, m),) = draw(1, seed)
        counts[name] += 1
        assert m in bins(v2.TrivialAugmentWide, name, 31), (name, m)
    check_uniform(counts, list(space), total)


def test_rand_augment_draws(draw):
    counts, total = Counter(), 0
    for seed in range(3000):
        steps = draw(2, seed, magnitude=13, num_ops=3)
        assert len(steps) == 3
        for name, m in steps:
            counts[name] += 1
            total += 1
            fn, signed = v2.RandAugment._AUGMENTATION_SPACE[name]
            mags = fn(31, 160, 224)
            want = 0.0 if mags is None else float(mags[13])
            assert m == want or (signed and m == -want), (name, m, want)
    check_uniform(counts, list(v2.RandAugment._AUGMENTATION_SPACE), total)


def test_auto_augment_imagenet_draws(draw):
    policies = v2.AutoAugment(v2.AutoAugmentPolicy.IMAGENET)._policies
    # Expected count of each operation per draw: sum over sub-policies of p / 25.
    expected = Counter()
    for sub in policies:
        for name, p, _ in sub:
            expected[name] += p / len(policies)
    counts, total = Counter(), 20000
    for seed in range(total):
        for name, m in draw(3, seed):
            counts[name] += 1
            allowed = {0.0}
            for sub in policies:
                for n, _, b in sub:
                    if n == name and b is not None:
                        fn, signed = v2.AutoAugment._AUGMENTATION_SPACE[name]
                        v = float(fn(10, 160, 224)[b])
                        allowed |= {v, -v} if signed else {v}
            assert m in allowed, (name, m, allowed)
    for name, e in expected.items():
        sd = math.sqrt(total * e)
        assert abs(counts[name] - total * e) < 5 * sd + 1, (name, counts[name], total * e)


def test_train_example_mixes_a_tsock_batch(tsock, programs, procs, endpoint):
    """examples/python/train.py --mixup-alpha/--cutmix-alpha trains on a tsock batch with
    torchvision's v2.MixUp / v2.CutMix (the slot itself is never written: its view is
    read-only, so an in-place mix would raise)."""
    p = subprocess.Popen([programs["tsock-producer"], "--dataset", "synthetic", "--samples", "256",
                          "--image-size", "32", "--batch-size", "64", "--epochs", "1",
                          "--endpoint", endpoint, "--wait-consumers", "1", "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python",
                           "train.py")
    r = subprocess.run([sys.executable, example, "--loader", "tsock", "--endpoint", endpoint,
                        "--epochs", "1", "--device", "cpu", "--json", "--mixup-alpha", "0.2",
                        "--cutmix-alpha", "1.0"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["images"] == 256 and math.isfinite(result["per_epoch"][0]["loss"])
    assert p.wait(timeout=60) == 0, p.stderr.read()


def test_ensure_producer_keywords_are_the_flags(tsock):
    """tsock.ensure_producer(**options) passes the recipe's options as the same flags."""
    from tsock.launch import _flag_args
    assert _flag_args({"auto_augment": "ta_wide", "random_erase": 0.1,
                       "color_jitter": (0.4, 0.4, 0.4, 0), "train_crop_size": 176,
                       "interpolation": "bicubic"}) == [
        "--auto-augment", "ta_wide", "--random-erase", "0.1", "--color-jitter", "0.4,0.4,0.4,0",
        "--train-crop-size", "176", "--interpolation", "bicubic"]


def ecdf_gap(a, b, points):
    """The largest gap between two samples' empirical distribution functions at `points`."""
    a, b = np.sort(np.asarray(a)), np.sort(np.asarray(b))
    return max(abs(np.searchsorted(a, p, "right") / len(a) - np.searchsorted(b, p, "right") /
                   len(b)) for p in points)


def test_random_erasing_draws(tsock):
    """The erase boxes follow RandomErasing.get_params (the reference presets' scale and ratio):
    the probability, and the distributions of area fraction, aspect and position compared with
    torchvision's own draws (fixed seeds: deterministic)."""
    from torchvision import transforms
    from tsock import _lib
    fn = _lib.lib.tsock_augment_draw_erase
    fn.argtypes = [ctypes.c_double, ctypes.c_int, ctypes.c_int, ctypes.c_uint64,
                   ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_int
    w, h, n = 160, 224, 6000
    box = (ctypes.c_int * 4)()
    erased = sum(fn(0.3, w, h, seed, box) for seed in range(n))
    assert abs(erased - 0.3 * n) < 5 * math.sqrt(n * 0.3 * 0.7)
    assert fn(1.5, w, h, 0, box) == -22 and fn(-0.1, w, h, 0, box) == -22
    ours = []
    for seed in range(n):
        assert fn(1.0, w, h, seed, box) == 1
        x, y, bw, bh = box
        assert 0 <= x and x + bw <= w and 0 <= y and y + bh <= h and bw < w and bh < h
        ours.append((bw * bh / (w * h), math.log(bh / bw), (x + bw / 2) / w))
    torch.manual_seed(0)
    img = torch.zeros(3, h, w)
    theirs = []
    for _ in range(n):
        i, j, bh, bw, _ = transforms.RandomErasing.get_params(img, scale=(0.02, 0.33),
                                                              ratio=(0.3, 3.3), value=[0])
        theirs.append((bw * bh / (w * h), math.log(bh / bw), (j + bw / 2) / w))
    ours, theirs = np.array(ours), np.array(theirs)
    for k, points in enumerate([np.linspace(0.02, 0.33, 12), np.linspace(-1.2, 1.2, 12),
                                np.linspace(0.1, 0.9, 9)]):
        gap = ecdf_gap(ours[:, k], theirs[:, k], points)
        assert gap < 0.04, (["area", "log aspect", "centre x"][k], gap)


def test_color_jitter_draws(tsock):
    """ColorJitter's order is a uniform permutation and its factors uniform on torchvision's
    ranges ([max(0, 1 - x), 1 + x], [-h, h])."""
    from tsock import _lib
    fn = _lib.lib.tsock_augment_draw_jitter
    fn.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_uint64,
                   ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_double)]
    fn.restype = ctypes.c_int
    jitter = (ctypes.c_double * 4)(0.4, 1.5, 0.0, 0.1)
    order, factors = (ctypes.c_int * 4)(), (ctypes.c_double * 4)()
    perms, values, n = Counter(), [], 24000
    for seed in range(n):
        assert fn(jitter, seed, order, factors) == 0
        perms[tuple(order)] += 1
        values.append(tuple(factors))
    assert len(perms) == 24
    sd = math.sqrt(n / 24 * (1 - 1 / 24))
    assert all(abs(c - n / 24) < 5 * sd for c in perms.values()), perms
    v = np.array(values)
    for k, (lo, hi) in enumerate([(0.6, 1.4), (0.0, 2.5), (1.0, 1.0), (-0.1, 0.1)]):
        assert v[:, k].min() >= lo and v[:, k].max() <= hi
        if hi > lo:
            assert abs(v[:, k].mean() - (lo + hi) / 2) < 5 * (hi - lo) / math.sqrt(12 * n)
    bad = (ctypes.c_double * 4)(0.4, -0.1, 0.4, 0.0)
    assert fn(bad, 0, order, factors) == -22
