"""A consumer process for the tests: reads N epochs with tsock.DataLoader and checks them.

    python consumer_child.py ENDPOINT EPOCHS SAMPLES IMAGE_SIZE [--delay-ms N] [--numpy]

Prints one JSON object: epochs, batches, samples, per_epoch (samples per epoch),
content_errors (batches whose bytes differ from the synthetic formula), label_errors,
duplicates and missing (by sample id, summed over epochs), output ("torch" or "numpy"),
error (the exception's name and code, or null).
"""
import argparse
import json
import sys
import time

import numpy as np

import tsock
from tsock_testutil import as_numpy, synthetic_images


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("epochs", type=int)
    ap.add_argument("samples", type=int)
    ap.add_argument("image_size", type=int)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--numpy", action="store_true")
    args = ap.parse_args()
    out = {"epochs": 0, "batches": 0, "samples": 0, "per_epoch": [], "content_errors": 0,
           "label_errors": 0, "duplicates": 0, "missing": 0, "error": None}
    try:
        loader = tsock.DataLoader(args.endpoint, return_ids=True, timeout=30,
                                  output="numpy" if args.numpy else None)
        out["output"] = loader.output
        with loader:
            for _ in range(args.epochs):
                seen = np.zeros(args.samples, dtype=np.int64)
                for images, labels, ids in loader:
                    x, y, i = as_numpy(images), as_numpy(labels), as_numpy(ids)
                    if not np.array_equal(x, synthetic_images(i, args.image_size)):
                        out["content_errors"] += 1
                    if not np.array_equal(y, i % 1000):
                        out["label_errors"] += 1
                    np.add.at(seen, i, 1)
                    out["batches"] += 1
                    out["samples"] += len(i)
                    if args.delay_ms:
                        time.sleep(args.delay_ms / 1000.0)
                out["epochs"] += 1
                out["per_epoch"].append(int(seen.sum()))
                out["duplicates"] += int(np.clip(seen - 1, 0, None).sum())
                out["missing"] += int((seen == 0).sum())
            out["len"] = len(loader)
            out["stats"] = loader.stats()
    except tsock.TsockError as e:
        out["error"] = {"name": e.name, "code": e.code, "message": str(e)}
    print(json.dumps(out))
    return 0 if out["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
