"""WebDataset tar shards as a native source (tsock-producer --dataset webdataset --shards SPEC).

The shards are made two ways from one tsock-mkdataset tree: by tsock-mkdataset --from-folder
(ustar, cls labels) and by Python's tarfile in PAX format (Python's default; long paths that
only PAX records hold, json labels read with --label-key), so that headers tsock did not write
are read too. Checked:
    - every shard sample decodes to the bytes of the same image read from the folder (val
      preset), with the folder's label, at the same id (ids: shard order, then tar order);
    - exact epochs (tsock-consume --content images checks coverage; --ids-out checked here) for
      a solo consumer, a late joiner and a group of two ranks, in both shuffle orders;
    - node shares: two producers' shares together are the dataset;
    - resume: a consumer killed mid-epoch and restored gets exactly the rest of its epoch;
    - bad shards: each malformed sample is named (shard, offset, key) and left out with
      --on-error skip, fails the start with --on-error fail; a shard that cannot be opened fails
      the start naming it;
    - the index cache is used on the next start;
    - tsock.ensure_producer and tsock.Producer.serve_images accept the source.
"""
import io
import json
import os
import signal
import subprocess
import tarfile

import numpy as np
import pytest

from conftest import BIN_DIR
from tsock_testutil import read_id_log, wait_until

IMAGES, CLASSES, BATCH, PER_SHARD = 45, 3, 8, 8
HEARTBEAT = ["--heartbeat-ms", "250", "--heartbeat-timeout-ms", "20000"]


def _age(path):
    """Moves a file's mtime 10 s back, so that an index of it may be cached at once."""
    st = os.stat(path)
    os.utime(path, (st.st_atime - 10, st.st_mtime - 10))


def _folder_samples(tree):
    """[(relative path, label)] in torchvision's ImageFolder order (flat class folders)."""
    classes = sorted(d for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    out = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(tree, c))):
            out.append((f"{c}/{f}", label))
    return out


def _pax_shards(tree, out, per_shard):
    """The tree as PAX shards written by Python's tarfile: keys under a 130-byte folder (too
    long for ustar's name field), labels in json. Returns the brace pattern."""
    os.makedirs(out)
    samples = _folder_samples(tree)
    deep = "p" * 130
    shards = [samples[i:i + per_shard] for i in range(0, len(samples), per_shard)]
    for s, chunk in enumerate(shards):
        with tarfile.open(os.path.join(out, f"pax-{s:03d}.tar"), "w",
                          format=tarfile.PAX_FORMAT) as t:
            for rel, label in chunk:
                key = f"{deep}/{rel.rsplit('.', 1)[0]}"
                with open(os.path.join(tree, rel), "rb") as f:
                    image = f.read()
                meta = json.dumps({"caption": "label", "nested": {"label": 99},
                                   "label": label}).encode()
                for name, data in ((key + ".jpeg", image), (key + ".json", meta),
                                   (key + ".txt", b"ignored")):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        _age(os.path.join(out, f"pax-{s:03d}.tar"))
    return os.path.join(out, "pax-{000..%03d}.tar" % (len(shards) - 1))


@pytest.fixture(scope="module")
def data(tmp_path_factory, tsock):
    base = tmp_path_factory.mktemp("wds")
    mk = os.path.join(BIN_DIR, "tsock-mkdataset")
    tree = str(base / "tree")
    subprocess.run([mk, tree, "--images", str(IMAGES), "--classes", str(CLASSES), "--seed", "3"],
                   check=True, capture_output=True, timeout=120)
    shards = str(base / "shards")
    r = subprocess.run([mk, shards, "--from-folder", tree, "--format", "webdataset",
                        "--shard-samples", str(PER_SHARD), "--json"], check=True,
                       capture_output=True, text=True, timeout=120)
    made = json.loads(r.stdout)
    assert made["samples"] == IMAGES and made["shards"] == -(-IMAGES // PER_SHARD)
    for f in os.listdir(shards):
        _age(os.path.join(shards, f))
    pax = _pax_shards(tree, str(base / "pax"), 7)
    return {"tree": tree, "shards": made["pattern"], "dir": shards, "pax": pax, "base": base,
            "samples": _folder_samples(tree)}


def producer(programs, procs, endpoint, spec, *extra, epochs=1, wait=1):
    p = subprocess.Popen([programs["tsock-producer"], "--dataset", "webdataset", "--shards", spec,
                          "--endpoint", endpoint, "--batch-size", str(BATCH), "--slots", "4",
                          "--image-size", "64", "--epochs", str(epochs), "--wait-consumers",
                          str(wait), "--quiet", *HEARTBEAT, *extra],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def consumer(programs, procs, endpoint, *extra):
    p = subprocess.Popen([programs["tsock-consume"], "--endpoint", endpoint, "--content",
                          "images", "--json", "--quiet", "--timeout-ms", "60000", *HEARTBEAT,
                          *extra],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def finished(p, timeout=120):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"exit {p.returncode}: {err}"
    return json.loads(out) if out.strip().startswith("{") else out


def read_images(tsock, endpoint):
    """{sample id: (image, label)} of one epoch."""
    got = {}
    with tsock.DataLoader(endpoint, return_ids=True, timeout=60) as loader:
        for images, labels, ids in loader:
            for img, label, i in zip(*(np.asarray(x) for x in (images, labels, ids))):
                assert int(i) not in got
                got[int(i)] = (img.copy(), int(label))
    return got


def test_val_preset_equals_folder(tsock, programs, procs, endpoint, data):
    """The same images through a folder, mkdataset shards and PAX shards: identical bytes."""
    folder = subprocess.Popen([programs["tsock-producer"], "--dataset", "folder", "--root",
                               data["tree"], "--endpoint", endpoint, "--batch-size", str(BATCH),
                               "--image-size", "64", "--split", "val", "--wait-consumers", "1",
                               "--epochs", "1", "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    procs.append(folder)
    want = read_images(tsock, endpoint)
    assert folder.wait(timeout=60) == 0, folder.stderr.read()
    assert sorted(want) == list(range(IMAGES))
    for i, (_, label) in enumerate(data["samples"]):
        assert want[i][1] == label
    for spec, extra in ((data["shards"], ()), (data["pax"], ("--label-key", "label"))):
        p = producer(programs, procs, endpoint, spec, "--split", "val", *extra)
        got = read_images(tsock, endpoint)
        assert p.wait(timeout=60) == 0, p.stderr.read()
        assert sorted(got) == list(range(IMAGES)), spec
        for i in range(IMAGES):
            assert got[i][1] == want[i][1], f"{spec}: sample {i}: label {got[i][1]}"
            assert np.array_equal(got[i][0], want[i][0]), f"{spec}: sample {i}: other bytes"


def _exact(epochs, n=IMAGES):
    for e, ids in epochs.items():
        assert sorted(ids) == list(range(n)), f"epoch {e}: not every sample exactly once"


@pytest.mark.parametrize("shuffle", ["samples", "shards"])
def test_exact_epochs_solo_late_group(tsock, programs, procs, endpoint, data, tmp_path, shuffle):
    extra = ["--shuffle", shuffle] + (["--shard-window", "2"] if shuffle == "shards" else [])
    p = producer(programs, procs, endpoint, data["shards"], *extra, epochs=0, wait=1)
    logs = {k: str(tmp_path / f"{k}.ids") for k in ("solo", "late", "r0", "r1")}
    solo = consumer(programs, procs, endpoint, "--epochs", "3", "--ids-out", logs["solo"],
                    "--delay-ms", "5")
    wait_until(lambda: os.path.exists(logs["solo"]) and os.path.getsize(logs["solo"]) > 60,
               60, "the first consumer's first batches")
    late = consumer(programs, procs, endpoint, "--epochs", "2", "--ids-out", logs["late"],
                    "--batch-size", "5")
    ranks = [consumer(programs, procs, endpoint, "--epochs", "2", "--group", "g", "--rank",
                      str(r), "--world-size", "2", "--ids-out", logs[f"r{r}"])
             for r in range(2)]
    for c in [solo, late] + ranks:
        res = finished(c)
        assert res["duplicates"] == 0 and res["missing"] == 0 and res["label_errors"] == 0
    _exact(read_id_log(logs["solo"]))
    late_ids = read_id_log(logs["late"])
    assert len(late_ids) == 2
    _exact(late_ids)
    r0, r1 = read_id_log(logs["r0"]), read_id_log(logs["r1"])
    for e in (0, 1):
        both = r0[e] + r1[e]
        assert len(r0[e]) == len(r1[e]) == -(-IMAGES // 2), "equal shares, padded"
        assert set(both) == set(range(IMAGES)), f"group epoch {e} misses samples"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 0, p.stderr.read()
    if shuffle == "shards":
        # The solo consumer's first epoch reads two shards at a time: a third shard shows up
        # only once both shards of the current window are done.
        first = read_id_log(logs["solo"])[0]
        sizes = {s: min(PER_SHARD, IMAGES - s * PER_SHARD) for s in range(-(-IMAGES // PER_SHARD))}
        window = {}
        for i in first:
            s = i // PER_SHARD
            if s not in window:
                assert len(window) < 2, f"a third shard ({s}) inside a window of 2: {first}"
                window[s] = sizes[s]
            window[s] -= 1
            if len(window) == 2 and not any(window.values()):
                window = {}


@pytest.mark.parametrize("shuffle", ["samples", "shards"])
def test_node_shares(tsock, programs, procs, data, tmp_path, shuffle):
    got = []
    for k in range(2):
        ep = f"ipc://{tmp_path}/n{k}.sock"
        producer(programs, procs, ep, data["shards"], "--nodes", "2", "--node-rank", str(k),
                 "--shuffle", shuffle)
        log = str(tmp_path / f"n{k}.ids")
        got.append((consumer(programs, procs, ep, "--nodes", "2", "--samples", str(IMAGES),
                             "--ids-out", log), log))
    shares = []
    for c, log in got:
        finished(c)
        shares.append(read_id_log(log)[0])
    assert len(shares[0]) == len(shares[1]) == -(-IMAGES // 2)
    assert set(shares[0]) | set(shares[1]) == set(range(IMAGES))
    assert len(set(shares[0]) & set(shares[1])) == 2 * (-(-IMAGES // 2)) - IMAGES


def test_resume(tsock, programs, procs, endpoint, data, tmp_path):
    p = producer(programs, procs, endpoint, data["pax"], "--label-key", "label", "--shuffle",
                 "shards", epochs=0)
    state, first_log, rest_log = (str(tmp_path / n) for n in ("state", "a.ids", "b.ids"))
    a = consumer(programs, procs, endpoint, "--epochs", "1", "--save-state", state,
                 "--ids-out", first_log, "--stall-after", "2")
    wait_until(lambda: "stall" in (a.stderr.readline() or ""), 60, "the consumer's stall")
    a.kill()
    a.wait(timeout=10)
    b = consumer(programs, procs, endpoint, "--epochs", "1", "--resume", state, "--ids-out",
                 rest_log)
    finished(b)
    before, after = read_id_log(first_log)[0], read_id_log(rest_log)[0]
    assert len(before) == 2 * BATCH
    assert sorted(before + after) == list(range(IMAGES)), "the rest of the epoch, exactly"
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 0


def _bad_shards(base, shards_dir):
    """A copy of the mkdataset shards with four broken samples, one per shard."""
    out = os.path.join(base, "bad")
    os.makedirs(out, exist_ok=True)
    names = sorted(f for f in os.listdir(shards_dir) if f.endswith(".tar"))
    expect = []
    for s, name in enumerate(names):
        with open(os.path.join(shards_dir, name), "rb") as f:
            b = bytearray(f.read())
        if s == 0:  # the second member header's checksum: its sample (and the rest) go
            members = tarfile.open(os.path.join(shards_dir, name)).getmembers()
            b[members[2].offset + 148] ^= 1
            expect.append(("checksum", name, members[2].offset, PER_SHARD - 1))
        elif s == 1:  # cut inside the last image: that sample goes
            members = tarfile.open(os.path.join(shards_dir, name)).getmembers()
            b = b[:members[-2].offset_data + 10]
            expect.append(("truncated", name, members[-2].offset, 1))
        elif s == 2:  # the first sample's cls renamed: no label
            members = tarfile.open(os.path.join(shards_dir, name)).getmembers()
            at = members[1].offset
            name_bytes = members[1].name.encode()
            b[at + len(name_bytes) - 3:at + len(name_bytes)] = b"txt"
            chk = sum(b[at:at + 148]) + 8 * 32 + sum(b[at + 156:at + 512])
            b[at + 148:at + 156] = b"%06o\0 " % chk
            expect.append(("no label", name, members[0].offset, 1))
        with open(os.path.join(out, name), "wb") as f:
            f.write(b)
        _age(os.path.join(out, name))
    return os.path.join(out, "train-{000000..%06d}.tar" % (len(names) - 1)), expect


def test_bad_shards_named_and_left_out(tsock, programs, procs, endpoint, data):
    spec, expect = _bad_shards(str(data["base"]), data["dir"])
    p = subprocess.Popen([programs["tsock-producer"], "--dataset", "webdataset", "--shards", spec,
                          "--endpoint", endpoint, "--batch-size", str(BATCH), "--image-size",
                          "32", "--wait-consumers", "1", "--epochs", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    procs.append(p)
    left = sum(n for *_, n in expect)
    c = consumer(programs, procs, endpoint, "--epochs", "1")
    res = finished(c)
    assert res["samples"] == IMAGES - left
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    for what, name, offset, _ in expect:
        assert f"{name} offset {offset} key" in err, f"{what} not named: {err}"
    assert "checksum is wrong" in err and "truncated" in err and "no label" in err
    # --on-error fail refuses the malformed shards at the start, saying what to do.
    r = subprocess.run([programs["tsock-producer"], "--dataset", "webdataset", "--shards", spec,
                        "--endpoint", endpoint, "--on-error", "fail", "--quiet"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "--on-error skip" in r.stderr, r.stderr
    # A shard that cannot be opened fails the start, named.
    missing = spec.rsplit("..", 1)[0] + "..000009}.tar"  # shards 6..9 do not exist
    r = subprocess.run([programs["tsock-producer"], "--dataset", "webdataset", "--shards",
                        missing, "--endpoint", endpoint, "--quiet"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "cannot open shard" in r.stderr and "No such file" in r.stderr
    # Bad usage is named.
    r = subprocess.run([programs["tsock-producer"], "--dataset", "webdataset"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--shards SPEC" in r.stderr
    r = subprocess.run([programs["tsock-producer"], "--dataset", "folder", "--root", "x",
                        "--shuffle", "shards"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "only for --dataset webdataset" in r.stderr


def test_index_cache_and_directory_spec(tsock, programs, procs, endpoint, data, tmp_path):
    cache = str(tmp_path / "wds.idx")
    for run in range(2):
        p = producer(programs, procs, endpoint, data["dir"], "--index-cache", cache,
                     "--verbose")
        finished(consumer(programs, procs, endpoint, "--epochs", "1"))
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert ("from cache" in err) == (run == 1), err
    assert os.path.exists(cache)


def test_python_ensure_producer_and_serve_images(tsock, programs, data, tmp_path):
    ep = f"ipc://{tmp_path}/e.sock"
    h = tsock.ensure_producer("webdataset", shards=data["shards"], endpoint=ep, batch_size=BATCH,
                              image_size=32, epochs=1, shuffle="shards", heartbeat_ms=250,
                              heartbeat_timeout_ms=20000)
    try:
        got = read_images(tsock, ep)
        assert sorted(got) == list(range(IMAGES))
    finally:
        assert h.stop() == 0
    import threading
    ep2 = f"ipc://{tmp_path}/s.sock"
    prod = tsock.Producer(ep2, batch_size=BATCH)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("n", prod.serve_images(
        "webdataset", data["pax"], label_key="label", image_size=32, preset="val",
        shuffle="shards", shard_window=3, wait_consumers=1, entry_points_mb=16)))
    t.start()
    try:
        got = read_images(tsock, ep2)
    finally:
        t.join(timeout=60)
        prod.close()
    assert out["n"] == -(-IMAGES // BATCH)
    assert sorted(got) == list(range(IMAGES))
    for i, (_, label) in enumerate(data["samples"]):
        assert got[i][1] == label
    with pytest.raises(ValueError):
        tsock.Producer(ep2).serve_images("webdataset", data["pax"], shuffle="sideways")
    for bad in (-1, 1.5, True, 1 << 31):
        with pytest.raises(ValueError, match="entry_points_mb"):
            tsock.Producer(ep2).serve_images("webdataset", data["pax"], entry_points_mb=bad)


def test_device_cuda_simulated_same_bytes(tsock, programs, procs, endpoint, data, monkeypatch):
    """--device cuda on shards (the simulated device: TSOCK_CUDA_SIM=1, every run) serves the
    bytes the host ring serves, and so does --io pread: the consumers' epoch digests are
    equal."""
    monkeypatch.setenv("TSOCK_CUDA_SIM", "1")
    monkeypatch.setenv("TSOCK_CUDA_SIM_DEVICE", f"wds{os.getpid()}")
    digests = []
    for device, io in (("cpu", "auto"), ("cuda", "auto"), ("cpu", "pread")):
        p = producer(programs, procs, endpoint, data["shards"], "--split", "val", "--device",
                     device, "--shuffle", "shards", "--io", io)
        res = finished(consumer(programs, procs, endpoint, "--epochs", "1"))
        assert p.wait(timeout=60) == 0, p.stderr.read()
        assert res["samples"] == IMAGES and res["missing"] == 0
        digests.append(res["epoch_digests"])
    assert digests[0] == digests[1] == digests[2]


def test_mkdataset_format_webdataset(tsock, programs, procs, endpoint, tmp_path):
    """tsock-mkdataset --format webdataset writes shards and a timm info file (its temporary
    tree gone), which a directory SPEC serves; misuse is a usage error."""
    mk = os.path.join(BIN_DIR, "tsock-mkdataset")
    out = str(tmp_path / "gen")
    r = subprocess.run([mk, out, "--images", "20", "--classes", "2", "--format", "webdataset",
                        "--shard-samples", "8", "--edge-cases", "--split", "val"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["_info.json"] + [f"val-{i:06d}.tar" for i in range(5)]
    info = json.load(open(os.path.join(out, "_info.json")))
    assert info["splits"]["validation"]["num_samples"] == 34  # 20 + 7 edge cases per class
    for f in os.listdir(out):
        _age(os.path.join(out, f))
    p = producer(programs, procs, endpoint, out, "--split", "val")
    c = consumer(programs, procs, endpoint, "--epochs", "1")
    cout, cerr = c.communicate(timeout=120)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    res = json.loads(cout)
    # The empty files are rejected by the tar index and the text files by the header check;
    # a truncated JPEG fails when decoded and is replaced by the next sample, as in a folder
    # (tsock-consume counts that duplicate and exits 3); the grayscale, CMYK, progressive and
    # PNG files are served.
    assert err.count("the image member is empty") == 2, err
    assert err.count("not an image") == 2, err
    assert res["samples"] == 20 + 5 * 2 and res["duplicates"] == 2, (cout, cerr)
    # --from-folder needs an ImageFolder tree (into a folder copy or shards, docs/mkdataset.md).
    r = subprocess.run([mk, str(tmp_path / "x"), "--from-folder", out], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "no class directory" in r.stderr, r.stderr
    r = subprocess.run([mk, str(tmp_path / "y"), "--from-folder", str(tmp_path / "nowhere")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--from-folder" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "y")
