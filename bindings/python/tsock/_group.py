"""Which rank of which data-parallel group a consumer is: the arguments of
``tsock.DataLoader(group=..., rank=..., world_size=...)`` resolved against what the launcher
provides.

Where rank and world size come from, first found wins (explicit arguments always win):
 1. ``torch.distributed``, when the process initialised it (``get_rank()``,
    ``get_world_size()`` of the default process group); torch is never imported for this, only
    consulted when the program imported it already;
 2. torchrun's environment: ``RANK`` and ``WORLD_SIZE``;
 3. Slurm's environment: ``SLURM_PROCID`` and ``SLURM_NTASKS``.
Both values come from one source; an explicit ``rank`` or ``world_size`` replaces that value
only. Every mistake is a ValueError or TypeError raised before anything connects.
"""
import math
import numbers
import os
import sys

NAME_MAX_BYTES = 64
U32_MAX = 0xFFFFFFFF

# (source label, rank variable, world variable), in the order they are consulted.
_ENVIRONMENTS = (
    ("torchrun environment (RANK, WORLD_SIZE)", "RANK", "WORLD_SIZE"),
    ("Slurm environment (SLURM_PROCID, SLURM_NTASKS)", "SLURM_PROCID", "SLURM_NTASKS"),
)


class Group:
    """A resolved group membership: ``name``, ``rank``, ``world_size``, ``timeout_ms`` (None:
    the library's default, 600 s) and ``source`` (where rank and world size came from)."""

    __slots__ = ("name", "rank", "world_size", "timeout_ms", "source")

    def __init__(self, name, rank, world_size, timeout_ms, source):
        self.name = name
        self.rank = rank
        self.world_size = world_size
        self.timeout_ms = timeout_ms
        self.source = source

    def __repr__(self):
        return (f"Group({self.name!r}, rank={self.rank}, world_size={self.world_size}, "
                f"from {self.source})")


def _int_arg(value, what):
    # numbers.Integral admits numpy integers; bool is an int to Python but never a rank.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, not {type(value).__name__} ({value!r})")
    return int(value)


def _from_torch_distributed():
    """(rank, world) from an initialised torch.distributed, else None. torch is looked up in
    sys.modules only: a process that did not import it cannot have initialised it."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # an exotic build without the functions: fall through to the env
        return None


def _env_int(var):
    text = os.environ[var].strip()
    try:
        return int(text, 10)
    except ValueError:
        raise ValueError(f"environment variable {var}={os.environ[var]!r} is not an integer "
                         f"(tsock reads it as this process's rank or world size; pass rank= "
                         f"and world_size= explicitly to override)") from None


def _from_environment():
    """(rank, world, source) from the first launcher environment that sets both variables."""
    for source, rank_var, world_var in _ENVIRONMENTS:
        if rank_var in os.environ and world_var in os.environ:
            return _env_int(rank_var), _env_int(world_var), source
    return None


def check_name(group):
    if not isinstance(group, str):
        raise TypeError(f"group must be a str (the group's name), not {type(group).__name__}")
    data = group.encode("utf-8", "surrogatepass")
    if not 1 <= len(data) <= NAME_MAX_BYTES:
        raise ValueError(f"group name {group!r} must be 1 to {NAME_MAX_BYTES} bytes of UTF-8, "
                         f"not {len(data)}")
    bad = [c for c in group if ord(c) < 0x20 or ord(c) == 0x7F]
    if bad:
        raise ValueError(f"group name {group!r} contains a control character ({bad[0]!r})")
    try:
        group.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"group name {group!r} is not valid UTF-8 (a lone surrogate)") from None
    return group


def timeout_ms(group_timeout):
    """group_timeout in seconds (None: library default) -> milliseconds, or None."""
    if group_timeout is None:
        return None
    if isinstance(group_timeout, bool) or not isinstance(group_timeout, (int, float)):
        raise TypeError(f"group_timeout must be a number of seconds, not "
                        f"{type(group_timeout).__name__}")
    if not group_timeout > 0 or math.isinf(group_timeout):
        raise ValueError(f"group_timeout must be a positive number of seconds, not "
                         f"{group_timeout!r}")
    ms = int(math.ceil(group_timeout * 1000.0))
    if ms > U32_MAX:
        raise ValueError(f"group_timeout {group_timeout!r} s is too long (at most "
                         f"{U32_MAX // 1000} s)")
    return ms


def _refuse_silent_duplicates():
    """A solo loader in a process that is one of several ranks would give every rank the whole
    dataset: each sample trained world_size times per epoch, with no error. Refused unless
    the caller says group=False."""
    found = _from_torch_distributed()
    source = "torch.distributed"
    if found is None:
        env = _from_environment()
        if env is not None:
            found, source = env[:2], env[2]
    if found is None or found[1] <= 1:
        return
    rank, world = found
    raise ValueError(
        f"this process is rank {rank} of {world} ({source}) but tsock.DataLoader was given no "
        f"group=: every rank would receive the whole dataset, so each sample would be trained "
        f"{world} times per epoch. Name the data-parallel group, e.g. "
        f"tsock.DataLoader(endpoint, group='my-job') (ranks then share each epoch as "
        f"DistributedSampler does), or pass group=False if each rank really is a job of its "
        f"own that should see every sample")


def resolve(group, rank=None, world_size=None, group_timeout=None, solo_check=False):
    """The :class:`Group` for these arguments, or None when `group` is None or False (a solo
    consumer).

    With `solo_check` (tsock.DataLoader), group=None in a process that torch.distributed or a
    launcher's environment makes one of several ranks is a ValueError that shows group=;
    group=False is the explicit opt-out. Raises ValueError when rank, world_size or
    group_timeout are given without a group, when nothing gives this process's rank and world
    size, or when they are out of range; TypeError for values of the wrong type."""
    if group is None or group is False:
        given = [k for k, v in (("rank", rank), ("world_size", world_size),
                                ("group_timeout", group_timeout)) if v is not None]
        if given:
            raise ValueError(f"{', '.join(given)} given without group=: name the group this "
                             f"process is a rank of (group='my-job'), or leave them out for "
                             f"a solo consumer")
        if group is None and solo_check:
            _refuse_silent_duplicates()
        return None
    check_name(group)
    ms = timeout_ms(group_timeout)
    if rank is not None:
        rank = _int_arg(rank, "rank")
    if world_size is not None:
        world_size = _int_arg(world_size, "world_size")
    source = "arguments"
    if rank is None or world_size is None:
        found = _from_torch_distributed()
        if found is not None:
            found = found + ("torch.distributed",)
        else:
            found = _from_environment()
        if found is None:
            missing = " and ".join(k for k, v in (("rank", rank), ("world_size", world_size))
                                   if v is None)
            raise ValueError(
                f"group={group!r} needs this process's rank and world size, and nothing gives "
                f"{missing}: torch.distributed is not initialised and neither torchrun's "
                f"(RANK, WORLD_SIZE) nor Slurm's (SLURM_PROCID, SLURM_NTASKS) environment "
                f"variables are set; pass rank= and world_size=, or start the job with "
                f"torchrun or srun")
        env_rank, env_world, env_source = found
        if rank is None and world_size is None:
            source = env_source
        elif rank is None:
            source = f"rank from {env_source}, world_size from the arguments"
        else:
            source = f"rank from the arguments, world_size from {env_source}"
        rank = env_rank if rank is None else rank
        world_size = env_world if world_size is None else world_size
    if not 1 <= world_size <= U32_MAX:
        raise ValueError(f"world_size must be at least 1 (and fit in 32 bits), not {world_size} "
                         f"(from {source})")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size) = [0, {world_size}), not {rank} "
                         f"(from {source})")
    return Group(group, rank, world_size, ms, source)
