#!/usr/bin/env python3
"""Train a small CNN on synthetic images, loading them with torch or with tsock.

The only difference between the two is the line that creates the loader (see make_loader):

    torch: torch.utils.data.DataLoader(SyntheticImages(...), batch_size=64, shuffle=True)
    tsock: tsock.DataLoader(endpoint)

With --loader torch this process computes every image itself (the stand-in for reading and
decoding JPEGs). With --loader tsock one tsock-producer computes each batch once and every
training job on the machine reads it zero-copy from shared memory:

    build/normal/producer/tsock-producer --dataset synthetic --endpoint ipc:///tmp/tsock-train.sock \\
        --batch-size 64 --samples 4096 --image-size 32 --epochs 2 --wait-consumers 1 &
    python3 examples/python/train.py --loader tsock --endpoint ipc:///tmp/tsock-train.sock

    python3 examples/python/train.py --loader torch            # the same data, no tsock

Images reach the model as torchvision's classification presets give them: float32 NCHW,
normalised with ImageNet's mean and std (to_model_input). A uint8 producer's batches (and the
torch loader's) are converted by each job; a producer started with --output float32 --layout
nchw --normalize has converted them once for every job, and they are used as they are.

Prints images/s per epoch and overall (and one JSON object with --json). examples/python/
launch.py starts a producer and several of these jobs at once.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

SAMPLE_MUL = 2654435761
BYTE_MUL = 40503


class SyntheticImages(torch.utils.data.Dataset):
    """The dataset tsock-producer --dataset synthetic serves: image s is H x W x 3 uint8 with
    byte p = (uint8)(((u32)s * 2654435761 + (u32)p * 40503) >> 16); label s % 1000."""

    def __init__(self, samples, image_size):
        self.samples = samples
        self.size = image_size
        self.positions = np.arange(image_size * image_size * 3, dtype=np.uint64)

    def __len__(self):
        return self.samples

    def __getitem__(self, s):
        v = (np.uint64(s) * np.uint64(SAMPLE_MUL) + self.positions * np.uint64(BYTE_MUL))
        v = (v & np.uint64(0xFFFFFFFF)) >> np.uint64(16)
        image = (v & np.uint64(0xFF)).astype(np.uint8).reshape(self.size, self.size, 3)
        return torch.from_numpy(image), s % 1000


def make_loader(args):
    if args.loader == "torch":
        return torch.utils.data.DataLoader(SyntheticImages(args.samples, args.image_size),
                                           batch_size=args.batch_size, shuffle=True,
                                           num_workers=args.workers)
    import tsock

    return tsock.DataLoader(args.endpoint, batch_size=args.batch_size)  # the one-line change


# --- Mixup / CutMix: batch-level mixing stays in the job (it needs the batch and the labels,
# and each job may want its own); torchvision's v2 transforms work on a tsock batch once it is
# float CHW (docs/pipeline.md, "Augmentations"). ---
def make_batch_mix(args, classes=1000):
    """v2.MixUp and/or v2.CutMix (one of them per batch when both are asked for), or None."""
    if not (args.mixup_alpha > 0 or args.cutmix_alpha > 0):
        return None
    from torchvision.transforms import v2

    mixes = []
    if args.mixup_alpha > 0:
        mixes.append(v2.MixUp(alpha=args.mixup_alpha, num_classes=classes))
    if args.cutmix_alpha > 0:
        mixes.append(v2.CutMix(alpha=args.cutmix_alpha, num_classes=classes))
    return mixes[0] if len(mixes) == 1 else v2.RandomChoice(mixes)


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def to_model_input(x, device):
    """What torchvision's presets give a model (PILToTensor, ConvertImageDtype(float),
    Normalize(ImageNet's mean and std)), from either kind of batch: uint8 NHWC (a uint8
    producer, or the torch loader) is converted here, into a new tensor (tsock batches are
    read-only views, never modified in place); float NCHW from a producer started with
    --output float32 --layout nchw --normalize is that already."""
    x = x.to(device, non_blocking=True)
    if x.dtype != torch.uint8:
        return x
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
    return x.permute(0, 3, 1, 2).float().div(255.0).sub(mean).div(std)


class SmallCNN(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loader", choices=("torch", "tsock"), default="torch")
    ap.add_argument("--endpoint", default=None,
                    help="tsock producer endpoint (default: the per-user default endpoint)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--samples", type=int, default=4096, help="dataset size (torch loader)")
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=0, help="torch DataLoader workers")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--name", default=None, help="job name printed with the figures")
    ap.add_argument("--json", action="store_true", help="print one JSON object at the end")
    ap.add_argument("--mixup-alpha", type=float, default=0.0, help="v2.MixUp alpha (0: off)")
    ap.add_argument("--cutmix-alpha", type=float, default=0.0, help="v2.CutMix alpha (0: off)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    name = args.name or f"{args.loader}-{os.getpid()}"

    loader = make_loader(args)
    model = SmallCNN().to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    mix = make_batch_mix(args)

    per_epoch = []
    images_total = 0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        images = 0
        loss_sum = 0.0
        for x, y in loader:
            x = to_model_input(x, args.device)
            y = y.to(args.device, non_blocking=True)
            if mix is not None:
                x, y = mix(x, y)  # y becomes soft labels [B, classes]; CrossEntropyLoss takes them
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            images += y.shape[0]
            loss_sum += float(loss) * y.shape[0]
        dt = time.perf_counter() - t0
        images_total += images
        per_epoch.append({"epoch": epoch, "images": images, "seconds": dt,
                          "images_per_s": images / dt if dt > 0 else 0.0,
                          "loss": loss_sum / max(images, 1)})
        if not args.json:
            print(f"[{name}] epoch {epoch}: {images} images in {dt:.2f} s, "
                  f"{images / dt:.0f} images/s, loss {loss_sum / max(images, 1):.3f}",
                  flush=True)
    wall = time.perf_counter() - start
    result = {"name": name, "loader": args.loader, "device": args.device,
              "epochs": args.epochs, "images": images_total, "seconds": wall,
              "images_per_s": images_total / wall if wall > 0 else 0.0, "per_epoch": per_epoch}
    if args.loader == "tsock":
        result["tsock"] = loader.stats()
        loader.close()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"[{name}] {images_total} images in {wall:.2f} s: "
              f"{result['images_per_s']:.0f} images/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
