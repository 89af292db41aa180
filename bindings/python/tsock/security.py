"""Who may connect (docs/security.md): CURVE key pairs and the key-file arguments that
Consumer, DataLoader, Producer and query_stats take.

A key pair is two files written by :func:`curve_keygen` (or the ``tsock-keygen`` program): a
secret key (mode 0600) and a public key, each 40 Z85 characters and a newline. A producer
takes ``curve=(its secret key file, authorized keys)``, where the authorized keys are a file
with one client public key per line or a directory of ``*.key`` files; a client (consumer or
statistics query) takes ``curve=(its secret key file, the producer's public key file)``.
"""
import errno
import os

from . import _lib
from ._lib import lib

# What each failure of a key file usually means; the library's log has the exact reason.
_HINTS = {
    -errno.ENOENT: "a key file or the authorized keys do not exist",
    -errno.EACCES: "a secret key file must not be readable by group or others (chmod 600), "
                   "and authorized keys must not be writable by them (chmod go-w)",
    -errno.EINVAL: "a key file holds exactly 40 Z85 characters and an optional newline, as "
                   "tsock-keygen writes them; authorized keys hold at least one key",
    -errno.ENOTSUP: "this libzmq was built without CURVE (libsodium)",
}


def curve_keygen(secret_key_file, public_key_file):
    """Generates a CURVE key pair with libzmq and writes it as two new files: the secret key
    (mode 0600) and the public key (mode 0644). Never replaces an existing file (raises
    TsockError EEXIST)."""
    _lib.check(lib.tsock_curve_keygen(os.fsencode(secret_key_file),
                                      os.fsencode(public_key_file)), "tsock_curve_keygen")


def key_pair(curve, what):
    """`curve` as two encoded paths, or (None, None) for None; ValueError for anything else."""
    if curve is None:
        return None, None
    if isinstance(curve, (str, bytes, os.PathLike)) or len(curve) != 2:
        raise ValueError(f"{what} must be a pair of key file paths or None, not {curve!r}")
    a, b = curve
    if not a or not b:
        raise ValueError(f"{what} needs both key file paths, got {curve!r}")
    return os.fsencode(a), os.fsencode(b)


def check(rc, function, paths):
    """Raises the TsockError for a failed CURVE setter, naming the files and the likely fault."""
    if rc >= 0:
        return rc
    shown = ", ".join(repr(os.fsdecode(p)) for p in paths)
    err = _lib.error(rc, f"{function}({shown})")
    hint = _HINTS.get(rc)
    if hint:
        err.message = f"{err.message}: {hint}"
        err.args = (err.code, err.message)
    raise err
