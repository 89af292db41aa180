"""tsock-mkdataset --restart-interval: restart markers added losslessly.

Every regular JPEG written with the option has a DRI segment with the interval asked and a
restart marker every N MCUs in its scan, and decodes (PIL) to exactly the pixels of the same
file written without it: generated images, --photos images, and --from-folder conversions into
a folder and into shards. The APPn/COM markers of a converted file are the source's, verbatim.
Files that cannot be transcoded (not a JPEG, truncated, corrupt) are copied unchanged and
listed; edge-case files are left as they are; bad values are refused (exit 2).

    mkdataset_restart_test.py CASE MKDATASET    CASE: generated photos from_folder bad_values
"""
import glob
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

from PIL import Image

PHOTOS = "/usr/share/backgrounds"
SOF = {0xC0 + k for k in range(16)} - {0xC4, 0xC8, 0xCC}


def run(mk, *args):
    r = subprocess.run([mk, *args], capture_output=True, text=True, timeout=300)
    return r


def ok(mk, *args):
    r = run(mk, *args)
    assert r.returncode == 0, (args, r.returncode, r.stderr)
    return r


def segments(data):
    """The marker segments before the first scan: [(marker, payload)], then the scan's bytes."""
    assert data[:2] == b"\xff\xd8", "no SOI"
    i, out = 2, []
    while True:
        assert data[i] == 0xFF, f"no marker at {i}"
        while data[i + 1] == 0xFF:  # fill bytes
            i += 1
        m = data[i + 1]
        n = (data[i + 2] << 8) | data[i + 3]
        out.append((m, data[i + 4:i + 2 + n]))
        i += 2 + n
        if m == 0xDA:
            return out, data[i:]


def restart_info(data):
    """(the DRI interval or 0, the number of RSTn markers in the first scan, MCUs per scan)."""
    segs, scan = segments(data)
    dri = [p for m, p in segs if m == 0xDD]
    interval = (dri[0][0] << 8) | dri[0][1] if dri else 0
    sof = [p for m, p in segs if m in SOF][0]
    h, w, nc = (sof[1] << 8) | sof[2], (sof[3] << 8) | sof[4], sof[5]
    hmax = max(sof[6 + 3 * c + 1] >> 4 for c in range(nc))
    vmax = max(sof[6 + 3 * c + 1] & 15 for c in range(nc))
    if nc == 1:  # a non-interleaved scan: one block per MCU
        hmax = vmax = 1
    mcus = -(-w // (8 * hmax)) * -(-h // (8 * vmax))
    rst, i = 0, 0
    while True:
        i = scan.find(b"\xff", i)
        if i < 0 or i + 1 >= len(scan):
            break
        m = scan[i + 1]
        if 0xD0 <= m <= 0xD7:
            rst += 1
        elif m != 0x00 and m != 0xFF:
            break  # EOI or the next scan
        i += 2 if m != 0xFF else 1
    return interval, rst, mcus


def app_markers(data):
    return [(m, p) for m, p in segments(data)[0] if 0xE0 <= m <= 0xEF or m == 0xFE]


def pixels(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im.mode, im.size, im.tobytes()


def check_marked(plain, marked, interval, what):
    """`marked` is `plain` with restart markers every `interval` MCUs, the same pixels."""
    got, rst, mcus = restart_info(marked)
    assert got == interval, (what, "DRI", got, interval)
    assert rst == (mcus - 1) // interval, (what, "RST markers", rst, mcus, interval)
    assert restart_info(plain)[0] == 0, (what, "the source has a DRI already")
    assert pixels(marked) == pixels(plain), (what, "other pixels")
    assert app_markers(marked) == app_markers(plain), (what, "APPn/COM markers differ")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tree_digest(root):
    return sorted((rel, hash(data)) for rel, data in tree_files(root).items())


def tree_files(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = read(p)
    return out


def shard_members(shards):
    """The image members of the shards in a folder: {name: bytes}."""
    members = {}
    for name in sorted(os.listdir(shards)):
        if name.endswith(".tar"):
            with tarfile.open(os.path.join(shards, name)) as t:
                for m in t.getmembers():
                    if not m.name.endswith(".cls"):
                        members[m.name] = t.extractfile(m).read()
    return members


def member_name(rel):
    """The shard member of the tree's file CLASS/NAME.EXT (mkdataset/shards.h)."""
    stem, ext = os.path.splitext(rel)
    return os.path.dirname(stem) + "/" + os.path.basename(stem).replace(".", "_") + ext.lower()


def generated(mk, tmp, extra, interval=3):
    """A tree with and without the option: the regular images marked, the rest the same."""
    base = ["--images", "18", "--classes", "3", "--seed", "5", "--json", *extra]
    plain, marked = os.path.join(tmp, "plain"), os.path.join(tmp, "marked")
    info = json.loads(ok(mk, plain, *base).stdout)
    minfo = json.loads(ok(mk, marked, *base, "--restart-interval", str(interval)).stdout)
    assert info["restart_interval"] == 0 and minfo["restart_interval"] == interval
    a, b = tree_files(plain), tree_files(marked)
    assert sorted(a) == sorted(b)
    edge = {rel for rels in info["edge_cases"].values() for rel in rels}
    for rel in a:
        if rel in edge:
            assert a[rel] == b[rel], (rel, "an edge-case file was changed")
        else:
            check_marked(a[rel], b[rel], interval, rel)
    assert len(a) - len(edge) == 18
    # --restart-interval 0 is no option: the same bytes.
    zero = os.path.join(tmp, "zero")
    ok(mk, zero, *base, "--restart-interval", "0")
    assert tree_files(zero) == a, "--restart-interval 0 changed the output"
    # --format webdataset: the same marked files in the shards.
    shards = os.path.join(tmp, "shards")
    ok(mk, shards, *base, "--restart-interval", str(interval), "--format", "webdataset")
    members = shard_members(shards)
    assert len(members) == len(b)
    for rel, data in b.items():
        assert members[member_name(rel)] == data, rel


def case_generated(mk, tmp):
    generated(mk, tmp, ["--edge-cases"])
    print("generated: passed")


def case_photos(mk, tmp):
    if not glob.glob(os.path.join(PHOTOS, "**", "*.jpg"), recursive=True):
        print(f"SKIP: no photographs under {PHOTOS} (apt install mate-backgrounds)")
        return 77
    generated(mk, tmp, ["--photos", PHOTOS], interval=1)
    print("photos: passed")


def odd_source_tree(mk, tmp):
    """A tree with every edge case, plus files a real dataset may hold: a JPEG with EXIF, an
    ICC profile and a comment (PIL), a CMYK JPEG and an RGB one with their Adobe markers (PIL),
    a PNG, a JPEG whose scan is garbage, a header claiming a huge image, and a README that is
    not an image."""
    src = os.path.join(tmp, "src")
    info = json.loads(ok(mk, src, "--images", "12", "--classes", "2", "--seed", "9",
                         "--edge-cases", "--json").stdout)
    cls = sorted(os.listdir(src))[0]
    im = Image.open(os.path.join(src, info["edge_cases"]["png"][0])).convert("RGB")
    exif = Image.Exif()
    exif[0x010F] = "tsock test camera"
    im.save(os.path.join(src, cls, "exif_icc_comment.jpg"), quality=85, exif=exif,
            icc_profile=b"\0" * 128 + b"not a real profile", comment=b"a comment")
    im.convert("CMYK").save(os.path.join(src, cls, "cmyk_pil.jpeg"), quality=80)
    # RGB components, no colour transform: only its Adobe marker (transform 0) says so.
    im.save(os.path.join(src, cls, "adobe_rgb.jpg"), quality=85, keep_rgb=True)
    im.save(os.path.join(src, cls, "real.png"))
    good = read(os.path.join(src, cls, "exif_icc_comment.jpg"))
    cut = good.index(b"\xff\xda")
    cut += 2 + ((good[cut + 2] << 8) | good[cut + 3])
    with open(os.path.join(src, cls, "garbage_scan.JPEG"), "wb") as f:
        f.write(good[:cut] + bytes((i * 37) % 255 for i in range(4000)) + b"\xff\xd9")
    # A frame header claiming 60000 x 60000 pixels: refused before libjpeg allocates for it.
    bomb = bytearray(good)
    sof = bomb.index(b"\xff\xc0")
    bomb[sof + 5:sof + 9] = (60000).to_bytes(2, "big") * 2
    with open(os.path.join(src, cls, "bomb.jpg"), "wb") as f:
        f.write(bytes(bomb))
    with open(os.path.join(src, cls, "README.txt"), "w") as f:
        f.write("not an image, not indexed\n")
    os.mkdir(os.path.join(src, "n00000000_empty_class"))
    expected_skip = {info["edge_cases"][k][i] for k in ("png", "truncated", "empty", "not_image")
                     for i in range(2)}
    expected_skip |= {f"{cls}/real.png", f"{cls}/garbage_scan.JPEG", f"{cls}/bomb.jpg"}
    return src, expected_skip


def case_from_folder(mk, tmp):
    src, expected_skip = odd_source_tree(mk, tmp)
    files = {k: v for k, v in tree_files(src).items() if not k.endswith("README.txt")}
    # Without the option: a byte-for-byte copy of the image files, every class folder kept.
    same = os.path.join(tmp, "same")
    info = json.loads(ok(mk, same, "--from-folder", src, "--json").stdout)
    assert tree_files(same) == files, "the plain copy differs from the source"
    assert os.path.isdir(os.path.join(same, "n00000000_empty_class"))
    assert info["restart_interval"] == 0 and info["transcoded"] == 0
    assert info["files"] == len(files) and info["not_transcoded"] == []
    # With it: every JPEG libjpeg reads cleanly marked, the rest copied and listed.
    out = os.path.join(tmp, "marked")
    r = ok(mk, out, "--from-folder", src, "--restart-interval", "2", "--format", "folder",
           "--json")
    info = json.loads(r.stdout)
    got = tree_files(out)
    assert sorted(got) == sorted(files)
    listed = {s["path"]: s["reason"] for s in info["not_transcoded"]}
    assert set(listed) == expected_skip, (sorted(listed), sorted(expected_skip))
    assert all(listed.values()), listed
    assert "megapixels" in listed[[k for k in listed if k.endswith("bomb.jpg")][0]], listed
    assert info["transcoded"] == len(files) - len(expected_skip), info
    assert info["copied_unchanged"] == len(expected_skip), info
    for rel, data in files.items():
        if rel in expected_skip:
            assert got[rel] == data, (rel, "a file that was not transcoded changed")
        else:
            check_marked(data, got[rel], 2, rel)
    # The text summary says it out loud.
    text = ok(mk, os.path.join(tmp, "text"), "--from-folder", src, "--restart-interval", "2")
    assert f"{len(expected_skip)} files could not be transcoded" in text.stdout, text.stdout
    assert "garbage_scan.JPEG" in text.stdout, text.stdout
    # Shards: the same transcoded bytes, member by member; the temporary tree is gone.
    shards = os.path.join(tmp, "shards")
    sinfo = json.loads(ok(mk, shards, "--from-folder", src, "--restart-interval", "2",
                          "--format", "webdataset", "--shard-samples", "7", "--json").stdout)
    assert sinfo["restart_interval"] == 2 and sinfo["transcoded"] == info["transcoded"]
    assert {s["path"] for s in sinfo["not_transcoded"]} == expected_skip
    assert sorted(os.listdir(shards)) == ["_info.json"] + [
        f"train-{k:06d}.tar" for k in range(sinfo["shards"])], os.listdir(shards)
    members = shard_members(shards)
    assert len(members) == len(files)
    for rel, data in got.items():
        assert members[member_name(rel)] == data, rel
    # TREE and OUT must not overlap (OUT would become a class; --force would delete TREE).
    before = tree_digest(src)
    for out, extra in ((os.path.join(src, "copy"), []), (tmp, ["--force"])):
        r = run(mk, out, "--from-folder", src, "--restart-interval", "1", *extra)
        assert r.returncode == 2 and "give an OUT outside it" in r.stderr, (out, r.stderr)
    assert not os.path.exists(os.path.join(src, "copy")) and tree_digest(src) == before
    print("from_folder: passed")


def case_bad_values(mk, tmp):
    for bad in ("-1", "65536", "70000", "x", "", "1.5", "3MCU"):
        out = os.path.join(tmp, "bad")
        r = run(mk, out, "--images", "2", "--classes", "1", "--restart-interval", bad)
        assert r.returncode == 2, (bad, r.returncode, r.stderr)
        assert "--restart-interval" in r.stderr and "0..65535" in r.stderr, (bad, r.stderr)
        assert not os.path.exists(out), (bad, "a refused run wrote OUT")
    r = run(mk, os.path.join(tmp, "bad"), "--images", "2", "--restart-interval")
    assert r.returncode == 2 and "--restart-interval" in r.stderr, r.stderr
    ok(mk, os.path.join(tmp, "max"), "--images", "2", "--classes", "1", "--restart-interval",
       "65535")
    # --from-folder converts a tree: the options that shape generated images are refused with
    # it, not silently ignored.
    tree = os.path.join(tmp, "max")
    for given in (["--images", "5"], ["--classes=3"], ["--edge-cases"], ["--seed", "4"],
                  ["--quality", "50"], ["--photos", tmp]):
        out = os.path.join(tmp, "conv")
        r = run(mk, out, "--from-folder", tree, *given)
        name = given[0].split("=")[0]
        assert r.returncode == 2, (given, r.returncode, r.stderr)
        assert name in r.stderr and "--from-folder" in r.stderr, (given, r.stderr)
        assert not os.path.exists(out), (given, "a refused run wrote OUT")
    ok(mk, os.path.join(tmp, "conv"), "--from-folder", tree, "--split", "val", "--format",
       "webdataset", "--restart-interval", "1")
    print("bad_values: passed")


def main(case, mk):
    with tempfile.TemporaryDirectory() as tmp:
        return globals()["case_" + case](mk, tmp) or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
