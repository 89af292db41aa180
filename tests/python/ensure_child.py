"""One local rank for test_ensure_producer: waits until GO exists (so that every rank calls at
once), calls tsock.ensure_producer, reads one epoch, and prints one JSON object: started, pid,
samples (of its epoch), distinct (sample ids), error.

    python ensure_child.py ENDPOINT PROGRAM GO SAMPLES
"""
import json
import os
import sys
import time

import numpy as np

import tsock
from tsock_testutil import as_numpy


def main():
    endpoint, program, go, samples = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    out = {"started": None, "pid": None, "samples": 0, "distinct": 0, "error": None}
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.001)
    try:
        h = tsock.ensure_producer("synthetic", endpoint=endpoint, program=program,
                                  samples=samples, image_size=8, batch_size=16, epochs=0,
                                  slots=4)
        out["started"], out["pid"] = h.started, h.pid
        seen = set()
        with tsock.DataLoader(endpoint, return_ids=True, timeout=30, output="numpy",
                              epoch_grace=30) as loader:
            for _, _, ids in loader:
                i = as_numpy(ids)
                out["samples"] += len(i)
                seen.update(int(x) for x in i)
        out["distinct"] = len(seen)
    except Exception as e:  # reported, and the test fails on it
        out["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
