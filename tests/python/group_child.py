"""A rank of a group (or a solo job) for test_groups: reads EPOCHS epochs with tsock.DataLoader
and prints, as its last line, one JSON object: rank, world_size, group_source, len (before
the first batch and after the last epoch), ids (one list of sample ids per epoch), batches
(per epoch), content_errors, error (the exception's class, name and message, or null).

    python group_child.py ENDPOINT EPOCHS [--group G [--rank R --world-size W]]
        [--batch-size B] [--drop-last] [--hold-after N --go FILE [--state FILE]]
        [--resume FILE]

Without --rank/--world-size a group rank takes them from the environment (RANK, WORLD_SIZE),
as under torchrun. --hold-after N: after N batches print "holding" and wait until FILE exists
(the test kills another rank meanwhile); with --state FILE it first writes its
state_dict() there (pickle) and the ids it read so far to FILE.ids (JSON). --resume FILE:
load_state_dict() from FILE before the first epoch (both need checkpointing=True, with
which a rank connects on first use: it joins its group restored, never fresh).
"""
import argparse
import json
import os
import pickle
import sys
import time

import numpy as np

import tsock
from tsock_testutil import as_numpy, synthetic_images


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("endpoint")
    ap.add_argument("epochs", type=int)
    ap.add_argument("--group", default=None)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--drop-last", action="store_true")
    ap.add_argument("--image-size", type=int, default=8)
    ap.add_argument("--hold-after", type=int, default=None)
    ap.add_argument("--go", default=None)
    ap.add_argument("--state", default=None)
    ap.add_argument("--resume", default=None)
    args = ap.parse_args()
    out = {"ids": [], "batches": [], "content_errors": 0, "error": None}
    try:
        loader = tsock.DataLoader(args.endpoint, group=args.group, rank=args.rank,
                                  world_size=args.world_size, batch_size=args.batch_size,
                                  drop_last=args.drop_last, return_ids=True, timeout=60,
                                  output="numpy", epoch_grace=60,
                                  checkpointing=bool(args.state or args.resume))
        if args.resume:
            with open(args.resume, "rb") as f:
                loader.load_state_dict(pickle.load(f))
        out.update(rank=loader.rank, world_size=loader.world_size,
                   group_source=loader.group_source, len_before=len(loader))
        print("connected", flush=True)
        received = 0
        with loader:
            for epoch in range(args.epochs):
                loader.set_epoch(epoch)
                ids, batches = [], 0
                for images, labels, i in loader:
                    i = as_numpy(i)
                    if not np.array_equal(as_numpy(images), synthetic_images(i, args.image_size)):
                        out["content_errors"] += 1
                    ids += [int(x) for x in i]
                    batches += 1
                    received += 1
                    if args.hold_after is not None and received == args.hold_after:
                        if args.state:
                            with open(args.state + ".tmp", "wb") as f:
                                pickle.dump(loader.state_dict(), f)
                            os.rename(args.state + ".tmp", args.state)
                            with open(args.state + ".ids", "w") as f:
                                json.dump(ids, f)
                        print("holding", flush=True)
                        while not os.path.exists(args.go):
                            time.sleep(0.01)
                out["ids"].append(ids)
                out["batches"].append(batches)
                out["epoch_numbers"] = out.get("epoch_numbers", []) + [loader.epoch]
            out["len"] = len(loader)
    except (tsock.TsockError, ValueError) as e:
        out["error"] = {"class": type(e).__name__, "name": getattr(e, "name", None),
                        "message": str(e)}
    print(json.dumps(out), flush=True)
    return 0 if out["error"] is None else 1


if __name__ == "__main__":
    sys.exit(main())
