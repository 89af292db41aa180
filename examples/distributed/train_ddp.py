#!/usr/bin/env python3
"""Data-parallel (DDP) training whose ranks share their node's tsock producer as one group.

Each rank is one process of a torchrun (or Slurm) job. Instead of a torch DataLoader over a
DistributedSampler, every rank reads its shard from the tsock producer of its own node:

    loader = tsock.DataLoader(endpoint, group="ddp", batch_size=64)  # rank, world: torchrun's

The ranks of the group share each epoch as DistributedSampler does (disjoint shards, together
every sample once, the same number of batches on every rank), and the node's images are
decoded once for every job on the node. One producer runs per node; with --start-producer the
first rank of each node to get there starts it (tsock.ensure_producer) and the others attach:

    # one node, 4 GPUs, the job starts its own producer:
    torchrun --nproc-per-node 4 examples/distributed/train_ddp.py --start-producer \\
        --dataset imagenet --root /data/imagenet --epochs 90

    # two nodes: the same command on each, with torchrun's multi-node flags
    torchrun --nnodes 2 --node-rank K --nproc-per-node 4 --master-addr HOST0 \\
        --master-port 29500 examples/distributed/train_ddp.py --start-producer \\
        --dataset imagenet --root /data/imagenet

Under torchrun the producer serves only its node's share of the dataset: it reads the node
count and node rank from torchrun's environment (WORLD_SIZE / LOCAL_WORLD_SIZE and
GROUP_RANK), so the nodes' shares together are the dataset once (docs/distributed.md). The
endpoint is node-local (default: the per-user ipc endpoint), so the same command line works on
every node. A producer started some other way (a Slurm task, a sidecar container) is simply
attached to: leave out --start-producer.

--synthetic SAMPLES trains on tsock's checkable synthetic images instead of a dataset, and
--ids-out DIR makes each rank write the sample ids it trained on (DIR/rank<R>.txt, lines
"EPOCH ID"), which is how tests/python/test_groups.py checks the shards. The script prints
one line per epoch on rank 0, and with --json one JSON object per rank at the end.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import tsock


class SmallCNN(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--endpoint", default=None,
                    help="this node's producer (default: the per-user ipc endpoint)")
    ap.add_argument("--group", default="ddp", help="the group's name (default: ddp)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="samples per rank and step")
    ap.add_argument("--drop-last", action="store_true")
    ap.add_argument("--group-timeout", type=float, default=None,
                    help="seconds the ranks wait for each other at the start")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds to wait for the producer to answer (it may still be "
                         "indexing the dataset) and for each batch (default 300)")
    ap.add_argument("--backend", default=None,
                    help="torch.distributed backend (default: nccl with CUDA, else gloo)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--ids-out", default=None, metavar="DIR",
                    help="write DIR/rank<R>.txt: a line 'EPOCH ID' per sample trained on")
    ap.add_argument("--json", action="store_true", help="print one JSON object per rank")
    p = ap.add_argument_group("starting the node's producer (tsock.ensure_producer)")
    p.add_argument("--start-producer", action="store_true",
                   help="start this node's producer unless one serves the endpoint")
    p.add_argument("--dataset", default="imagenet", help="tsock-producer --dataset")
    p.add_argument("--root", default=None, help="tsock-producer --root")
    p.add_argument("--synthetic", type=int, default=None, metavar="SAMPLES",
                   help="serve tsock's synthetic dataset of SAMPLES images instead")
    p.add_argument("--image-size", type=int, default=None)
    p.add_argument("--producer-batch-size", type=int, default=None,
                   help="the producer's batch size (default: --batch-size)")
    p.add_argument("--seed", type=int, default=0,
                   help="the shuffle's seed: the same on every node")
    p.add_argument("--keep-producer", action="store_true",
                   help="leave a producer this job started serving at the end (other jobs "
                        "of the node may share it); by default the rank that started it "
                        "stops it")
    return ap.parse_args()


def start_producer(args, endpoint):
    """Every local rank calls this; one of them starts the node's producer."""
    dataset = "synthetic" if args.synthetic is not None else args.dataset
    options = dict(batch_size=args.producer_batch_size or args.batch_size, epochs=0,
                   seed=args.seed, image_size=args.image_size)
    if args.synthetic is not None:
        options["samples"] = args.synthetic
    return tsock.ensure_producer(dataset, root=args.root, endpoint=endpoint, **options)


def main():
    args = parse_args()
    if "RANK" not in os.environ and "SLURM_PROCID" in os.environ:
        # Started by srun, one task per GPU (slurm_train.sbatch), rather than by torchrun:
        # torch.distributed reads its rank and world size from the same variables torchrun
        # sets. MASTER_ADDR and MASTER_PORT come from the batch script.
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
        os.environ["LOCAL_RANK"] = os.environ.get("SLURM_LOCALID", "0")
    cuda = torch.cuda.is_available()
    backend = args.backend or ("nccl" if cuda else "gloo")
    dist.init_process_group(backend)  # rank, world, master: from the environment
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    endpoint = args.endpoint or tsock.default_endpoint()
    producer = start_producer(args, endpoint) if args.start_producer else None
    # The one line that replaces DataLoader(dataset, sampler=DistributedSampler(dataset)):
    # rank and world size come from torch.distributed.
    loader = tsock.DataLoader(endpoint, group=args.group, batch_size=args.batch_size,
                              drop_last=args.drop_last, group_timeout=args.group_timeout,
                              return_ids=args.ids_out is not None, timeout=args.timeout)

    torch.manual_seed(0)  # the same initial weights on every rank (DDP broadcasts them anyway)
    model = DDP(SmallCNN().to(device), device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    ids_file = None
    if args.ids_out:
        os.makedirs(args.ids_out, exist_ok=True)
        ids_file = open(os.path.join(args.ids_out, f"rank{rank}.txt"), "w")

    per_epoch = []
    start = time.perf_counter()
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)  # DistributedSampler's habit: accepted, changes nothing
        t0, images, loss_sum = time.perf_counter(), 0, 0.0
        for item in loader:
            x, y = item[0], item[1]
            if ids_file is not None:
                ids_file.writelines(f"{loader.epoch} {int(i)}\n" for i in item[2].tolist())
            # A copy (the batch is a read-only view of shared memory): NHWC uint8 -> NCHW float.
            x = x.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div(255.0)
            y = y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)  # DDP all-reduces the gradients in backward()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            images += y.shape[0]
            loss_sum += loss.item() * y.shape[0]
        seconds = time.perf_counter() - t0
        per_epoch.append({"epoch": epoch, "images": images, "batches": len(loader),
                          "seconds": seconds, "loss": loss_sum / max(images, 1)})
        if rank == 0 and not args.json:
            print(f"epoch {epoch}: {images} images per rank in {seconds:.2f} s "
                  f"({images * world / seconds:.0f} images/s over {world} ranks), "
                  f"loss {loss_sum / max(images, 1):.3f}", flush=True)
    if ids_file is not None:
        ids_file.close()
    result = {"rank": rank, "world_size": world, "group": loader.group,
              "group_source": loader.group_source, "len": len(loader),
              "epochs": per_epoch, "seconds": time.perf_counter() - start,
              "producer_started": bool(producer and producer.started)}
    loader.close()  # leaves the group; the ranks still reading are not disturbed
    dist.barrier()  # every rank is done reading before the producer may go
    if producer is not None and producer.started and not args.keep_producer:
        producer.stop()
    dist.destroy_process_group()
    if args.json:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
