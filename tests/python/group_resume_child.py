"""A rank of a checkpointing group for test_group_resume: reads with tsock.DataLoader(group=...,
checkpointing=True), appends each batch's sample ids to LOG as `EPOCH ID` lines (fsync'd),
and, at step SAVE_AT of a run without a saved state, saves loader.state_dict() with torch.save
to STATE_OUT and then hangs (the test kills it with SIGKILL). With STATE_IN it loads that
state first and reads until its epoch LAST_EPOCH is done; prints one JSON line: len() after
the restore, the first epoch it read, and batches per epoch.

    python group_resume_child.py ENDPOINT RANK WORLD LOG LAST_EPOCH BATCH
        (--save-at STEP --state-out FILE | --state-in FILE)
"""
import argparse
import json
import os
import signal
import time

import torch

import tsock


def main():
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ap = argparse.ArgumentParser()
    for name in ("endpoint", "rank", "world", "log", "last_epoch", "batch"):
        ap.add_argument(name)
    ap.add_argument("--save-at", type=int)
    ap.add_argument("--state-out")
    ap.add_argument("--state-in")
    a = ap.parse_args()
    loader = tsock.DataLoader(a.endpoint, group="resumed", rank=int(a.rank),
                              world_size=int(a.world), batch_size=int(a.batch), return_ids=True,
                              timeout=60, checkpointing=True, epoch_grace=60)
    if a.state_in:
        loader.load_state_dict(torch.load(a.state_in))
    out = {"len_restored": len(loader), "first_epoch": None, "batches": {}}
    step = 0
    with open(a.log, "a") as log, loader:
        while True:
            for images, labels, ids in loader:
                if out["first_epoch"] is None:
                    out["first_epoch"] = loader.epoch
                log.write("".join(f"{loader.epoch} {int(i)}\n" for i in ids))
                log.flush()
                os.fsync(log.fileno())
                step += 1
                out["batches"][loader.epoch] = out["batches"].get(loader.epoch, 0) + 1
                if a.save_at == step:
                    tmp = a.state_out + ".tmp"
                    torch.save(loader.state_dict(), tmp)
                    os.replace(tmp, a.state_out)
                    while True:
                        time.sleep(60)
            if loader.epoch >= int(a.last_epoch):
                break
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
