"""What a training script written for torch.utils.data.DataLoader reads from a loader and
passes to it, for tsock.DataLoader (docs/python.md, "What a torch training script reads"):
``loader.dataset``, ``loader.sampler``, and torch's arguments that a shared loader ignores."""
import warnings


# torch.utils.data.DataLoader arguments that a shared loader has no use for: accepted so that a
# training script's call works unchanged, warned about once per process each, and ignored.
_TORCH_ONLY_ARGS = {
    "num_workers": "the producer decodes and augments for every job; the job runs no workers",
    "pin_memory": "batches are views of the producer's shared memory (device='cuda' copies "
                  "them to the GPU, or the producer's ring is on the GPU already)",
    "shuffle": "the producer's sampler shuffles every epoch (tsock-producer --seed)",
    "sampler": "the producer's sampler decides each epoch; for a DDP job pass group= instead "
               "of a DistributedSampler",
    "prefetch_factor": "the producer keeps its ring of slots filled ahead (tsock-producer "
                       "--slots)",
    "persistent_workers": "there are no workers to keep",
}
_warned_args = set()


def _warn_ignored(name, value):
    if name in _warned_args:
        return
    _warned_args.add(name)
    warnings.warn(f"tsock.DataLoader ignores {name}={value!r}: {_TORCH_ONLY_ARGS[name]}. "
                  f"This warning is shown once.", UserWarning, stacklevel=3)


class _Dataset:
    """What ``loader.dataset`` offers a training script: ``len()`` (the producer's samples per
    epoch: its dataset, or with tsock-producer --nodes its node's share), ``classes`` and
    ``class_to_idx`` (the producer's class names, ImageFolder's: folder names sorted)."""

    def __init__(self, loader):
        self._loader = loader

    def __len__(self):
        n = self._loader._consumer.dataset_size
        if n == 0:
            if self._loader.samples is not None:
                return int(self._loader.samples)
            raise TypeError("len(loader.dataset) is not known: this producer has no sampler "
                            "(free mode); pass samples=<dataset size> to the DataLoader")
        return int(n)

    @property
    def classes(self):
        names = self._loader._consumer.classes
        if names is None:
            raise AttributeError(
                "the producer announced no class names (a synthetic or list dataset, a "
                "producer that publishes its own batches without tsock_producer_set_classes, "
                "or names too long to send): labels are 0..N-1")
        return list(names)

    @property
    def class_to_idx(self):
        return {name: i for i, name in enumerate(self.classes)}

    def __repr__(self):
        return f"<tsock.DataLoader dataset: {len(self)} samples from the producer>"


class _Sampler:
    """``loader.sampler``: ``set_epoch`` as DistributedSampler has it (see
    :meth:`DataLoader.set_epoch`), and ``len()``: this process's samples per epoch."""

    def __init__(self, loader):
        self._loader = loader

    def set_epoch(self, epoch):
        self._loader.set_epoch(epoch)

    def __len__(self):
        loader = self._loader
        n = len(loader.dataset)
        if loader.world_size:
            return -(-n // loader.world_size)  # DistributedSampler's per-rank count
        return n
