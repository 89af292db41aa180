"""tsock-mkdataset writes the tree it describes: regular images of ImageNet-like sizes in
sorted class folders, the edge cases it lists (each really what it claims to be, by its
leading bytes), deterministic output for a seed, a refusal to write into a non-empty directory
unless --force empties it, clear errors for bad options, and a clear error with no truncated
file left behind when the disk fills."""
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile

# A file may grow to this many bytes, then write() fails (RLIMIT_FSIZE, EFBIG): how a full disk
# meets each of mkdataset's writers, every time at the same byte, without a filesystem to fill.
FILE_LIMIT = 40000


def run(mk, *args):
    return subprocess.run([mk, *args], capture_output=True, text=True, timeout=120)


def tree_digest(root):
    h = hashlib.sha256()
    for dirpath, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def limited_files():
    """preexec_fn: files stop growing at FILE_LIMIT bytes; SIGXFSZ, ignored, stays ignored
    across exec, so the write fails with EFBIG instead of killing the process."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


def whole_image(path):
    """Whether the file ends as a JPEG or a PNG does (a truncated one does not)."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"\xff\xd8"):
        return data.endswith(b"\xff\xd9")
    return data.startswith(b"\x89PNG") and data[-8:-4] == b"IEND"


def full_disk(mk, tmp, photos):
    """Every writer of tsock-mkdataset meets a write that fails part way: it exits 1 naming
    the file and the reason, leaves no truncated image (a folder tree says it is partial and
    keeps only whole files) and no shard."""
    src = os.path.join(tmp, "src")
    r = run(mk, src, "--images", "24", "--classes", "3", "--seed", "5")
    assert r.returncode == 0, r.stderr
    cases = [("generated", ["--images", "40", "--classes", "4", "--seed", "5"], True),
             ("restart copy", ["--from-folder", src, "--restart-interval", "1"], True),
             ("shards", ["--from-folder", src, "--format", "webdataset", "--shard-samples",
                         "20"], False)]
    if photos:
        cases.append(("photographs", ["--images", "40", "--classes", "4", "--photos", photos],
                      True))
    for name, args, folder in cases:
        out = os.path.join(tmp, "full-" + name.replace(" ", "-"))
        r = subprocess.run([mk, out, *args], capture_output=True, text=True, timeout=120,
                           preexec_fn=limited_files)
        assert r.returncode == 1, (name, r.returncode, r.stderr)
        assert "cannot write" in r.stderr and os.strerror(27) in r.stderr, (name, r.stderr)
        left = [os.path.join(d, f) for d, _, files in os.walk(out) for f in files]
        if folder:
            assert "partial" in r.stderr and "--force" in r.stderr, (name, r.stderr)
            bad = [p for p in left if not whole_image(p)]
            assert not bad, (name, "truncated files left", bad)
        else:
            assert not left, (name, "files left", left)


def main(mk):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "tree")
        r = run(mk, out, "--images", "40", "--classes", "4", "--edge-cases", "--json",
                "--seed", "3")
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        assert info["images"] == 40 and info["classes"] == 4, info
        classes = sorted(os.listdir(out))
        assert len(classes) == 4, classes
        files = sum(len(os.listdir(os.path.join(out, c))) for c in classes)
        assert files == info["files"], (files, info["files"])
        assert 200 <= info["mean_width"] <= 700 and 200 <= info["mean_height"] <= 700, info
        edge = info["edge_cases"]
        magic = {"progressive": b"\xff\xd8", "grayscale": b"\xff\xd8", "cmyk": b"\xff\xd8",
                 "png": b"\x89PNG"}
        for kind, prefix in magic.items():
            assert edge[kind], kind
            for rel in edge[kind]:
                with open(os.path.join(out, rel), "rb") as f:
                    assert f.read(4).startswith(prefix), (kind, rel)
        for rel in edge.get("empty", []):
            assert os.path.getsize(os.path.join(out, rel)) == 0, rel
        again = os.path.join(tmp, "again")
        r = run(mk, again, "--images", "40", "--classes", "4", "--edge-cases", "--seed", "3")
        assert r.returncode == 0, r.stderr
        assert tree_digest(out) == tree_digest(again), "same seed, different bytes"
        # A non-empty OUT is refused, untouched; --force empties it first, so no file of the
        # earlier tree (other classes, a stray file) stays mixed with the new one.
        stale = os.path.join(out, "n99999999")
        os.mkdir(stale)
        with open(os.path.join(stale, "old.JPEG"), "w") as f:
            f.write("not an image")
        before = tree_digest(out)
        r = run(mk, out, "--images", "40", "--classes", "4", "--edge-cases", "--seed", "3")
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "not empty" in r.stderr and "--force" in r.stderr, r.stderr
        assert tree_digest(out) == before, "a refused run changed OUT"
        r = run(mk, out, "--images", "40", "--classes", "4", "--edge-cases", "--seed", "3",
                "--force")
        assert r.returncode == 0, r.stderr
        assert not os.path.exists(stale), "--force left the earlier tree's files"
        assert tree_digest(out) == tree_digest(again), "--force: not the same tree as a new OUT"
        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        r = run(mk, empty, "--images", "4", "--classes", "2")
        assert r.returncode == 0, ("an existing empty OUT is fine", r.stderr)
        notdir = os.path.join(tmp, "file")
        with open(notdir, "w") as f:
            f.write("x")
        for extra in ([], ["--force"]):
            r = run(mk, notdir, "--images", "4", "--classes", "2", *extra)
            assert r.returncode == 1 and "not a directory" in r.stderr, (extra, r.stderr)
        for bad in (["--images", "x"], ["--classes", "0"], ["--quality", "101"], ["--nope"]):
            r = run(mk, os.path.join(tmp, "bad"), *bad)
            assert r.returncode == 2, (bad, r.returncode, r.stderr)
            assert bad[0] in r.stderr, (bad, r.stderr)
        photos = "/usr/share/backgrounds" if os.path.isdir("/usr/share/backgrounds") else None
        if not photos:
            print("mkdataset: no /usr/share/backgrounds: the full-disk case of --photos is "
                  "not run")
        full_disk(mk, tmp, photos)
    print("mkdataset: 2 passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1])
