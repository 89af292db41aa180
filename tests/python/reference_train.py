"""A training script shaped like torchvision's references/classification/train.py, with its two
DataLoaders replaced by tsock.DataLoader (issue 22's test of the drop-in):

    ImageFolder-style data (served by tsock-producer --dataset folder: the train split with
    RandomResizedCrop + flip, the val split with Resize + CenterCrop, both converted once by
    the producer to float32 NCHW and normalised with ImageNet's statistics, as the presets do),
    a train and an eval loader built with torch's arguments (batch_size, sampler, num_workers,
    pin_memory, collate_fn doing mixup or cutmix on default_collate's output), set_epoch,
    len(data_loader.dataset) in evaluate(), and a step limit per epoch (--max-steps) followed by
    validation: the loop is left with break.

Test hooks: the train loader also returns the sample ids (return_ids=True; the collate_fn records
and drops them); --hold-until FILE makes the first validation wait until FILE exists (a long
validation that other jobs must not wait for); --out FILE writes what the test checks as JSON,
and --pixels FILE the first eval batch (images, ids) as .npz (the eval loader's collate_fn
records the ids).
"""
import argparse
import json
import os
import time
import warnings

import numpy as np
import torch
from torch.utils.data import default_collate
from torchvision.transforms import v2

import tsock


def train_one_epoch(model, criterion, optimizer, data_loader, epoch, args, record):
    model.train()
    for i, (image, target) in enumerate(data_loader):
        output = model(image)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record["train_epochs"].append(data_loader.epoch)
        if args.max_steps and i + 1 >= args.max_steps:
            break  # the step limit: validation comes next


def evaluate(model, criterion, data_loader, args, record, pixels):
    model.eval()
    num_processed_samples = 0
    with torch.inference_mode():
        for image, target in data_loader:
            if pixels is not None and not pixels:
                pixels.append(image.clone())
            output = model(image)
            criterion(output, target)
            num_processed_samples += image.shape[0]
    # The reference's check: every validation sample seen exactly once.
    record["eval_samples"].append(num_processed_samples)
    record["eval_dataset_len"] = len(data_loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train-endpoint", required=True)
    parser.add_argument("--val-endpoint", required=True)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=0)
    parser.add_argument("--name", default="job")
    parser.add_argument("--hold-until")
    parser.add_argument("--out", required=True)
    parser.add_argument("--pixels")
    args = parser.parse_args()
    torch.manual_seed(0)

    record = {"train_ids": {}, "train_epochs": [], "eval_samples": [], "warnings": []}
    current_ids, eval_ids = [], []

    def eval_collate(batch):  # the test's hook: which files the first eval batch shows
        images, targets, ids = default_collate(batch)
        eval_ids.extend(int(i) for i in ids)
        return images, targets

    def collate_fn(batch):
        images, targets, ids = default_collate(batch)
        current_ids.extend(int(i) for i in ids)
        return mixup_cutmix(images, targets)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data_loader = tsock.DataLoader(
            args.train_endpoint, batch_size=args.batch_size,
            sampler=torch.utils.data.RandomSampler(range(1)), num_workers=16, pin_memory=True,
            collate_fn=collate_fn, return_ids=True, timeout=60, name=args.name + "-train")
        data_loader_test = tsock.DataLoader(
            args.val_endpoint, batch_size=args.batch_size, num_workers=16, pin_memory=True,
            collate_fn=eval_collate, return_ids=True, timeout=60, name=args.name + "-val")
    record["warnings"] = [str(w.message) for w in caught]
    classes = data_loader.dataset.classes
    record["classes"] = classes
    record["train_dataset_len"] = len(data_loader.dataset)
    num_classes = len(classes)
    mixup_cutmix = v2.RandomChoice([v2.MixUp(num_classes=num_classes, alpha=0.2),
                                    v2.CutMix(num_classes=num_classes, alpha=1.0)])

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(8, num_classes))
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    pixels = [] if args.pixels else None
    for epoch in range(args.epochs):
        data_loader.sampler.set_epoch(epoch)
        current_ids.clear()
        train_one_epoch(model, criterion, optimizer, data_loader, epoch, args, record)
        record["train_ids"][str(epoch)] = list(current_ids)
        if epoch == 0 and args.hold_until:
            while not os.path.exists(args.hold_until):  # a long validation
                time.sleep(0.05)
        evaluate(model, criterion, data_loader_test, args, record, pixels)
    if pixels:
        np.savez(args.pixels, images=pixels[0].numpy(),
                 ids=np.array(eval_ids[:pixels[0].shape[0]], dtype=np.int64))
    record["stats"] = data_loader.stats()
    with open(args.out, "w") as f:
        json.dump(record, f)
    data_loader.close()
    data_loader_test.close()


if __name__ == "__main__":
    main()
