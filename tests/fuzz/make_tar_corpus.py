#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_tar (tests/fuzz/corpus/tar): small WebDataset shards in
every header format Python's tarfile writes (PAX, its default; GNU; ustar), a long path,
json labels, and broken variants. Deterministic (fixed mtimes and owners), so a rerun
rewrites the same bytes:  python3 tests/fuzz/make_tar_corpus.py tests/fuzz/corpus/tar
The corpus also holds a shard written by tsock-mkdataset (mkdataset-ustar.tar) and timm info
files (info-*.json, written by hand or found by the fuzzer), which this script leaves alone."""
import io
import json
import os
import sys
import tarfile


def shard(fmt, samples, label="cls"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for key, image, lab in samples:
            members = [(key + ".jpg", image)]
            if label == "cls":
                members.append((key + ".cls", str(lab).encode()))
            else:
                members.append((key + ".json", json.dumps({"label": lab, "x": [1]}).encode()))
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mtime = 1700000000
                info.uname = info.gname = "tsock"
                t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main(out):
    os.makedirs(out, exist_ok=True)
    few = [("a/k0", b"\xff\xd8JPEG0", 0), ("a/k1", b"\xff\xd8JPEG1", 1), ("b/k2", b"\xff\xd8J2", 7)]
    longp = [("d" * 120 + "/" + "e" * 90 + "/k0", b"\xff\xd8LONG", 3)]
    seeds = {
        "pax.tar": shard(tarfile.PAX_FORMAT, few),
        "gnu.tar": shard(tarfile.GNU_FORMAT, few),
        "ustar.tar": shard(tarfile.USTAR_FORMAT, few),
        "pax-long-path.tar": shard(tarfile.PAX_FORMAT, longp),
        "gnu-long-path.tar": shard(tarfile.GNU_FORMAT, longp),
        "pax-json.tar": shard(tarfile.PAX_FORMAT, few, label="json"),
        "duplicate-key.tar": shard(tarfile.USTAR_FORMAT, few + few[:1]),
        "empty.tar": b"",
    }
    good = seeds["ustar.tar"]
    bad_sum = bytearray(good)
    bad_sum[148] ^= 1
    seeds["bad-checksum.tar"] = bytes(bad_sum)
    seeds["truncated-header.tar"] = good[:512 * 2 + 100]
    seeds["truncated-data.tar"] = good[:512 * 3 + 3]
    no_label = bytearray(shard(tarfile.USTAR_FORMAT, few[:1]))
    seeds["no-image.tar"] = shard(tarfile.USTAR_FORMAT, [("x", b"", 1)])
    seeds["no-label.tar"] = bytes(no_label[:1024])
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                             "corpus", "tar"))
