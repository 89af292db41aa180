"""A training job for the resume tests: trains a tiny model on tsock.DataLoader batches and,
after every batch, appends the batch's sample ids to a log (fsync'd) and then saves
{'model', 'optimizer', 'loader': loader.state_dict(), 'step'} with torch.save (to a temporary
file renamed over the checkpoint). On start it loads the checkpoint when there is one.

    python resume_child.py ENDPOINT CHECKPOINT LOG LAST_EPOCH BATCH_SIZE [HANG_AT_STEP]

Runs until it finished its epoch LAST_EPOCH; prints one JSON object (steps, first_epoch).
With HANG_AT_STEP, a run that started without a checkpoint logs that step's ids and then
hangs before saving, so the test kills it at a known point however fast or loaded the
machine is: mid-epoch, with one yielded batch that no checkpoint covers.
"""
import json
import os
import sys
import time

import torch

import tsock


def main():
    endpoint, ckpt, log, last_epoch, batch = sys.argv[1:6]
    last_epoch, batch = int(last_epoch), int(batch)
    hang_at = int(sys.argv[6]) if len(sys.argv) > 6 and not os.path.exists(ckpt) else None
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = tsock.DataLoader(endpoint, batch_size=batch, return_ids=True, timeout=30,
                              checkpointing=True)
    step = 0
    if os.path.exists(ckpt):
        saved = torch.load(ckpt)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["loader"])
        step = saved["step"]
    first_epoch = None
    with open(log, "a") as out, loader:
        while True:
            for images, labels, ids in loader:
                if first_epoch is None:
                    first_epoch = loader.epoch
                x = images.float().mean(dim=(1, 2))
                loss = torch.nn.functional.cross_entropy(model(x), labels % 10)
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                out.write("".join(f"{loader.epoch} {int(i)}\n" for i in ids))
                out.flush()
                os.fsync(out.fileno())
                if step == hang_at:
                    while True:
                        time.sleep(60)
                tmp = ckpt + ".tmp"
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "loader": loader.state_dict(), "step": step}, tmp)
                os.replace(tmp, ckpt)
            if loader.epoch >= last_epoch:
                break
    print(json.dumps({"steps": step, "first_epoch": first_epoch}))


if __name__ == "__main__":
    main()
