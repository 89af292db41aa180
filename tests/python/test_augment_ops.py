"""Each augmentation operation of the producer against torchvision.transforms.v2.functional.

tsock_augment_apply (include/tsock/augment.h) applies one operation with given parameters to
a uint8 HWC image; the same image as a uint8 CHW tensor goes through torchvision's function
with the same parameters. Colour and histogram operations must give the same bytes; geometric
ones (shear, translate, rotate with grid_sample) may differ by at most 1 level on at most 0.1%
of the values. The images are photographs (Debian's mate-backgrounds, cropped and resized with
PIL) and a noise image, square and not. The policies' draws are checked against the
torchvision classes' own search spaces.
"""
import ctypes
import glob
import math
import os
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from PIL import Image  # noqa: E402
from torchvision.transforms import v2  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

(IDENTITY, SHEAR_X, SHEAR_Y, TRANSLATE_X, TRANSLATE_Y, ROTATE, BRIGHTNESS, COLOR, CONTRAST,
 SHARPNESS, POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE, INVERT, HUE, ERASE,
 COLOR_JITTER) = range(18)
NAMES = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
         "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize",
         "Invert"]
NEAREST, BILINEAR = 0, 1
PHOTOS = sorted(glob.glob("/usr/share/backgrounds/mate/*/*.jpg"))


@pytest.fixture(scope="module")
def lib(tsock):
    from tsock import _lib
    lib = _lib.lib
    lib.tsock_augment_apply.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_double), ctypes.c_int,
                                        ctypes.c_int]
    lib.tsock_augment_apply.restype = ctypes.c_int
    lib.tsock_augment_draw.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_uint64,
                                       ctypes.POINTER(ctypes.c_int),
                                       ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    lib.tsock_augment_draw.restype = ctypes.c_int
    return lib


def photo(index, w, h):
    if not PIL_PHOTOS_OK():
        pytest.skip("no photographs in /usr/share/backgrounds/mate (apt install mate-backgrounds)")
    with Image.open(PHOTOS[index % len(PHOTOS)]) as im:
        im = im.convert("RGB")
        side = min(im.size)
        im = im.crop((0, 0, side, side)).resize((w, h), Image.BILINEAR)
        return np.ascontiguousarray(np.asarray(im))


def PIL_PHOTOS_OK():
    return bool(PHOTOS)


def images():
    rng = np.random.default_rng(3)
    return [("photo224", photo(0, 224, 224)), ("photo97x61", photo(1, 97, 61)),
            ("noise40x33", rng.integers(0, 256, (33, 40, 3), dtype=np.uint8))]


def tsock_apply(lib, img, op, params, interp=NEAREST):
    out = np.ascontiguousarray(img.copy())
    arr = (ctypes.c_double * max(1, len(params)))(*params)
    r = lib.tsock_augment_apply(out.ctypes.data, img.shape[1], img.shape[0], op, arr,
                                len(params), interp)
    assert r == 0, f"tsock_augment_apply({op}, {params}) = {r}"
    return out


def torch_apply(img, fn):
    t = torch.from_numpy(img).permute(2, 0, 1).contiguous()
    return fn(t).permute(1, 2, 0).contiguous().numpy()


def assert_same(got, want, what):
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert diff.max() == 0, (f"{what}: {int((diff > 0).sum())} of {diff.size} values differ, "
                             f"up to {int(diff.max())}")


def assert_close(got, want, what):
    diff = np.abs(got.astype(np.int16) - want.astype(np.int16))
    bad = int((diff > 0).sum())
    assert diff.max() <= 1 and bad <= diff.size * 0.001, (
        f"{what}: {bad} of {diff.size} values differ (allowed {diff.size * 0.001:.0f}), "
        f"up to {int(diff.max())}")


COLOUR_CASES = [
    (BRIGHTNESS, [0.01, 0.37, 1.0, 1.5, 1.99], F.adjust_brightness),
    (COLOR, [0.0, 0.3, 1.0, 1.6, 1.99], F.adjust_saturation),
    (CONTRAST, [0.0, 0.25, 1.0, 1.7, 1.99], F.adjust_contrast),
    (SHARPNESS, [0.0, 0.5, 1.0, 1.8, 1.99], F.adjust_sharpness),
    (HUE, [-0.5, -0.21, 0.0, 0.05, 0.33, 0.5], F.adjust_hue),
    (POSTERIZE, [0, 1, 4, 7, 8], lambda t, b: F.posterize(t, int(b))),
    (SOLARIZE, [0.0, 8.5, 127.5, 200.0, 255.0], F.solarize),
]


@pytest.mark.parametrize("op,values,fn", COLOUR_CASES, ids=[NAMES[c[0]] if c[0] < 15 else "Hue"
                                                            for c in COLOUR_CASES])
def test_colour_ops_are_byte_identical(lib, op, values, fn):
    for name, img in images():
        for v in values:
            got = tsock_apply(lib, img, op, [v])
            want = torch_apply(img, lambda t: fn(t, v))
            assert_same(got, want, f"op {op} ({v}) on {name}")


@pytest.mark.parametrize("op,fn", [(AUTOCONTRAST, F.autocontrast), (EQUALIZE, F.equalize),
                                   (INVERT, F.invert), (IDENTITY, lambda t: t)])
def test_histogram_ops_are_byte_identical(lib, op, fn):
    cases = images() + [("flat", np.full((20, 30, 3), 77, np.uint8)),
                        ("dark", (photo(2, 64, 48) // 4).astype(np.uint8))]
    for name, img in cases:
        assert_same(tsock_apply(lib, img, op, []), torch_apply(img, fn), f"op {op} on {name}")


def test_erase_and_color_jitter(lib):
    for name, img in images():
        got = tsock_apply(lib, img, ERASE, [5, 3, 17, 11, 124, 116, 104])
        v = torch.tensor([124, 116, 104], dtype=torch.uint8)[:, None, None]
        want = torch_apply(img, lambda t: F.erase(t, 3, 5, 11, 17, v))
        assert_same(got, want, f"erase on {name}")
        factors, order = [1.3, 0.7, 1.2, -0.1], [2, 0, 3, 1]
        fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]

        def jitter(t):
            for k in order:
                t = fns[k](t, factors[k])
            return t
        got = tsock_apply(lib, img, COLOR_JITTER, factors + order)
        assert_same(got, torch_apply(img, jitter), f"color jitter on {name}")


def geometric(op, m, interp):
    mode = v2.InterpolationMode.NEAREST if interp == NEAREST else v2.InterpolationMode.BILINEAR
    if op == SHEAR_X:
        return lambda t: F.affine(t, angle=0.0, translate=[0, 0], scale=1.0,
                                  shear=[math.degrees(math.atan(m)), 0.0], interpolation=mode,
                                  fill=None, center=[0, 0])
    if op == SHEAR_Y:
        return lambda t: F.affine(t, angle=0.0, translate=[0, 0], scale=1.0,
                                  shear=[0.0, math.degrees(math.atan(m))], interpolation=mode,
                                  fill=None, center=[0, 0])
    if op == TRANSLATE_X:
        return lambda t: F.affine(t, angle=0.0, translate=[int(m), 0], scale=1.0,
                                  shear=[0.0, 0.0], interpolation=mode, fill=None)
    if op == TRANSLATE_Y:
        return lambda t: F.affine(t, angle=0.0, translate=[0, int(m)], scale=1.0,
                                  shear=[0.0, 0.0], interpolation=mode, fill=None)
    return lambda t: F.rotate(t, angle=m, interpolation=mode, fill=None)


# The policies' own magnitudes (TrivialAugmentWide's and RandAugment's bins) and a few others.
GEOMETRIC_CASES = [
    (SHEAR_X, [0.0, 0.033, 0.3, -0.3, 0.99, -0.66]),
    (SHEAR_Y, [0.033, -0.3, 0.99, 0.5]),
    (TRANSLATE_X, [0.0, 1.0, -14.6, 32.0, -32.0, 101.6]),
    (TRANSLATE_Y, [3.2, -32.0, 17.9]),
    (ROTATE, [0.0, 4.5, -30.0, 90.0, -90.0, 135.0, 180.0, 13.5, -121.5]),
]


@pytest.mark.parametrize("interp", [NEAREST, BILINEAR], ids=["nearest", "bilinear"])
@pytest.mark.parametrize("op,values", GEOMETRIC_CASES,
                         ids=[NAMES[c[0]] for c in GEOMETRIC_CASES])
def test_geometric_ops_match_within_bound(lib, op, values, interp):
    for name, img in images():
        for m in values:
            m32 = float(np.float32(m))
            got = tsock_apply(lib, img, op, [m32], interp)
            want = torch_apply(img, geometric(op, m32, interp))
            assert_close(got, want, f"op {NAMES[op]} ({m32}, interp {interp}) on {name}")
