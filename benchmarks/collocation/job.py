#!/usr/bin/env python3
"""One simulated training job of the collocation benchmark (run.py starts these).

    job.py --loader tsock --endpoint ipc:///... --epochs 2 --delay-ms 10
    job.py --loader torchvision --root TREE --workers 1 --epochs 2 --delay-ms 10

--loader tsock reads batches from a tsock producer through tsock.DataLoader (torch tensors,
zero-copy views of shared memory). --loader torchvision loads its own: ImageFolder +
DataLoader with RandomResizedCrop(224) + RandomHorizontalFlip() + PILToTensor() (uint8, what
tsock's train preset produces).

Each batch is touched (a strided sum of a few dozen bytes per image, so every sample's memory
is really read) and then held for --delay-ms by sleeping: a training step that costs no CPU.

--device cuda --model resnet18|resnet50: a real training step instead of the sleep: the model
(torchvision, random weights, SGD) runs forward and backward in mixed precision
(torch.autocast float16) on each batch. tsock batches are float16 NCHW normalised on the GPU
already (the producer converts); torchvision batches are pinned, copied and normalised here.
--model none with --device cuda keeps the sleep.

--loader tvgpu (issue 20's GPU-decode peer, what a job does alone with nvJPEG and nothing
carried): DataLoader workers read the files' bytes only; the job decodes each batch with
torchvision.io.decode_jpeg(list, device="cuda") (batched nvJPEG) and does RandomResizedCrop(224)
(antialiased) + RandomHorizontalFlip() on the GPU, then normalises to float16 NCHW as the
tsock producer does. Its workers are persistent and forked before the job touches CUDA; it
leaves with os._exit once its JSON is printed (no nvJPEG teardown at exit). --max-seconds S:
stop once S seconds have passed since the first batch (issue 20's spans), whatever --epochs
says. --first-batch-file F: create F at the first batch. SIGUSR1 prints every thread's Python
stack to stderr (gpu_decode.py sends it to a job past its bound before stopping it).

--group NAME --rank R --world-size W (benchmarks/groups/run.py): this job is rank R of a
data-parallel job of W ranks: with tsock, a rank of the group NAME on the producer; with
torchvision, a DataLoader over DistributedSampler(num_replicas=W, rank=R), set_epoch(e) each
epoch.

Prints one JSON object: samples, batches and epochs received; the CLOCK_MONOTONIC times of the
first and the last batch (comparable between processes); seconds spent waiting for batches;
and CPU seconds: `startup_cpu_s` (interpreter start and imports, up to the moment the loader
is built), `build_cpu_s` (building the loader), `loop_cpu_s` (the epochs) and `cpu_s`
(everything so far: this process and, for torchvision, its joined workers). What the process
spends after printing (interpreter shut-down, which with torch loaded is a few tenths of a
second) is seen only by its parent.
"""
import argparse
import faulthandler
import gc
import json
import os
import resource
import signal
import sys
import time


def cpu_now():
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime


def make_step(torch, args):
    """One mixed-precision training step of args.model on the GPU, for either loader."""
    import torchvision

    dev = torch.device("cuda")
    model = getattr(torchvision.models, args.model)(num_classes=1000).to(dev)
    model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255

    def step(images, labels):
        if images.device.type != "cuda":
            # torchvision: uint8 NCHW (PILToTensor) pinned on the host: copy, then normalise.
            images = images.to(dev, non_blocking=True)
            images = (images.float() - mean) / std
        elif images.dim() != 4 or images.shape[1] != 3:
            raise SystemExit(f"unexpected GPU batch {images.dtype} {tuple(images.shape)}")
        labels = labels.to(dev, non_blocking=True).long() % 1000
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(images.contiguous(memory_format=torch.channels_last)), labels)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def batch_files(torch, data):
    """The files of a tvgpu batch (tvgpu_loader's collate: the bytes end to end, the lengths)
    as a list of 1-D uint8 views, what decode_jpeg takes."""
    flat, lengths = data
    return list(torch.split(flat, lengths.tolist()))


def tvgpu_loader(torch, torchvision, datasets, transforms, args):
    """The GPU-decode peer: workers read bytes; the job decodes, crops and flips on the GPU."""
    from torchvision.transforms.v2 import functional as F

    ds = datasets.ImageFolder(args.root, loader=torchvision.io.read_file)

    def collate(items):
        # One tensor per batch (the files end to end) and their lengths. A list of 64 tensors
        # crosses from a worker as 64 shared-memory file descriptors, and the worker's feeder
        # thread died on os.dup (EBADF) (seen on the dev machine, torch 2.15, no GPU needed),
        # leaving the job waiting for ever for its first batch: the likely cause of the H200
        # run's tvgpu row "ran past 250 s" (torch 2.11 there).
        files = [x for x, _ in items]
        return ((torch.cat(files), torch.tensor([len(x) for x in files])),
                torch.tensor([y for _, y in items]))

    # Persistent workers, forked by the first iter() before this process touches CUDA (main()
    # makes that iterator before the model or a CUDA tensor exists): a DataLoader without them
    # forks new workers each epoch (here about every second) from a process whose CUDA and
    # nvJPEG threads may hold a lock at that instant, and a worker so forked can hang for
    # ever, the job with it, never reaching its span's end.
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, collate_fn=collate,
                                         persistent_workers=args.workers > 0)
    rrc = transforms.RandomResizedCrop(224)
    dev = torch.device("cuda")
    norm = []  # mean and std, made on the first batch: after the workers are forked

    def gpu_batch(data, labels):
        if not norm:
            norm.append(torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255)
            norm.append(torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255)
        mean, std = norm
        decoded = torchvision.io.decode_jpeg(batch_files(torch, data), device="cuda",
                                             mode=torchvision.io.ImageReadMode.RGB)
        out = []
        for img in decoded:
            i, j, h, w = rrc.get_params(img, rrc.scale, rrc.ratio)
            img = F.resized_crop(img, i, j, h, w, [224, 224], antialias=True)
            if torch.rand(1).item() < 0.5:
                img = F.horizontal_flip(img)
            out.append(img)
        images = ((torch.stack(out).float() - mean) / std).half()
        return images, labels

    return loader, gpu_batch


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loader", choices=("tsock", "torchvision", "tvgpu"), required=True)
    ap.add_argument("--endpoint", help="tsock producer endpoint (--loader tsock)")
    ap.add_argument("--root", help="ImageFolder tree (--loader torchvision)")
    ap.add_argument("--workers", type=int, default=1, help="DataLoader num_workers (torchvision)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--delay-ms", type=float, default=10.0, help="simulated step per batch")
    ap.add_argument("--persistent-workers", action="store_true",
                    help="torchvision: keep the DataLoader workers between epochs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--model", choices=("none", "resnet18", "resnet50", "mobilenet_v3_small"),
                    default="none")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="stop this long after the first batch (default: run every epoch)")
    ap.add_argument("--name", default="job")
    ap.add_argument("--ready-file", help="create this file once the imports are done")
    ap.add_argument("--go-file", help="then wait for this file before building the loader")
    ap.add_argument("--first-batch-file",
                    help="create this file once the first batch is here (a hang before it is "
                         "then told apart from one after it)")
    ap.add_argument("--group", default=None, help="a rank of this data-parallel group")
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world-size", type=int, default=None)
    args = ap.parse_args()
    # SIGUSR1 writes every thread's Python stack to stderr: what a benchmark that finds this
    # job past its time sends before killing it, so that its report says where it was.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    import torch  # both loaders hand out torch tensors

    if args.loader == "tsock":
        import tsock
    else:
        from torchvision import datasets, transforms
    if args.loader == "tvgpu":
        import torchvision

    # Everything up to here is interpreter start and imports: a one-off cost of any Python job,
    # reported apart so the steady state can be compared as well as the whole. The benchmark
    # starts the producers, and lets every job of a configuration go, only once all are here,
    # so that no loader gets a head start while the others import torch.
    if args.ready_file:
        open(args.ready_file, "w").close()
    if args.go_file:
        while not os.path.exists(args.go_file):
            time.sleep(0.002)
    startup_self, startup_children = cpu_now()
    startup_cpu = startup_self + startup_children

    sampler = None
    if args.loader == "tsock":
        loader = tsock.DataLoader(args.endpoint, timeout=60.0, name=args.name,
                                  group=args.group, rank=args.rank, world_size=args.world_size)
    elif args.loader == "tvgpu":
        torch.manual_seed(args.seed)
        loader, gpu_batch = tvgpu_loader(torch, torchvision, datasets, transforms, args)
    else:
        torch.manual_seed(args.seed)
        tf = transforms.Compose([transforms.RandomResizedCrop(224),
                                 transforms.RandomHorizontalFlip(), transforms.PILToTensor()])
        ds = datasets.ImageFolder(args.root, transform=tf)
        if args.world_size is not None:
            sampler = torch.utils.data.DistributedSampler(
                ds, num_replicas=args.world_size, rank=args.rank, shuffle=True, seed=args.seed)
        loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size,
                                             shuffle=sampler is None, sampler=sampler,
                                             num_workers=args.workers,
                                             persistent_workers=args.persistent_workers,
                                             pin_memory=args.device == "cuda")
    first_it = iter(loader) if args.loader == "tvgpu" else None  # its workers, before CUDA
    step = make_step(torch, args) if args.device == "cuda" and args.model != "none" else None
    built_self, built_children = cpu_now()
    delay = args.delay_ms / 1000.0
    samples = batches = 0
    checksum = 0
    wait_s = wait_after_first_s = 0.0
    first_t = last_t = None
    stop = False
    for epoch in range(args.epochs):
        if stop:
            break
        if sampler is not None:
            sampler.set_epoch(epoch)
        it, first_it = (first_it, None) if first_it is not None else (iter(loader), None)
        while True:
            t0 = time.monotonic()
            try:
                images, labels = next(it)
            except StopIteration:
                break
            if args.loader == "tvgpu":
                images, labels = gpu_batch(images, labels)
            t1 = time.monotonic()
            wait_s += t1 - t0
            if first_t is None:
                first_t = t1
                if args.first_batch_file:
                    open(args.first_batch_file, "w").close()
            else:
                wait_after_first_s += t1 - t0
            last_t = t1
            n = images.shape[0]
            if step is not None:
                step(images, labels)
            else:
                if images.numel() != n * 224 * 224 * 3:
                    raise SystemExit(f"unexpected batch {images.dtype} {tuple(images.shape)}")
                # Touch each image: ~37 bytes spread over its 150 KB.
                checksum += int(images.reshape(n, -1)[:, ::4096].float().sum()) + int(labels.sum())
                if delay > 0:
                    time.sleep(delay)
            samples += n
            batches += 1
            if args.max_seconds is not None and time.monotonic() - first_t >= args.max_seconds:
                stop = True
                break
    loop_self, loop_children = cpu_now()
    extra = {}
    if args.loader == "tsock":
        extra["tsock_stats"] = loader.stats()
        loader.close()
    else:
        # Without persistent workers they were joined at the end of each epoch; with them,
        # dropping the last reference to the iterator shuts them down and joins them, so that
        # their CPU is counted here.
        del it, loader
        gc.collect()
    end_self, end_children = cpu_now()
    print(json.dumps({
        "name": args.name, "loader": args.loader, "samples": samples, "batches": batches,
        "epochs": args.epochs, "first_batch_t": first_t, "last_batch_t": last_t,
        "wait_s": wait_s, "wait_after_first_s": wait_after_first_s,
        "startup_cpu_s": startup_cpu,
        "build_cpu_s": built_self + built_children - startup_cpu,
        "loop_cpu_s": loop_self + loop_children - built_self - built_children,
        "cpu_s": end_self + end_children, "cpu_children_s": end_children,
        "checksum": checksum, **extra}), flush=True)
    if args.loader == "tvgpu":
        # Everything is counted and printed: leave without the interpreter's shut-down, in
        # which torchvision's nvJPEG decoder is destroyed by an exit hook that may run after
        # CUDA has begun to shut down (a teardown that can crash or hang).
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
