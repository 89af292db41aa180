"""Statistics of a running producer, from any process: what ``tsock-stat`` shows."""
import ctypes
import json

from . import _lib, security
from ._lib import lib


def query_stats(endpoint=None, timeout=3.0, curve=None):
    """Asks the producer serving `endpoint` (None: the default endpoint) for its statistics and
    returns them as a dict: "endpoint", "producer" (its figures), "status" (the application's
    status object, or None) and "consumers" (one dict per connected consumer, in join order,
    with the figures it reports about itself). docs/stats.md lists every field.

    Asking does not make this process a consumer. Raises :class:`tsock.Timeout` when no
    producer answered within `timeout` seconds, or another :class:`tsock.TsockError` (for
    example ENOENT when an ipc endpoint has no socket file).

    `curve`: ``(client secret key file, producer public key file)`` for a producer that
    requires CURVE keys (docs/security.md); a refused handshake raises TsockError E_AUTH.
    """
    secret, server = security.key_pair(curve, "curve")
    if timeout is None:
        ms = -1
    elif timeout < 0:
        raise ValueError("timeout must be >= 0 seconds, or None to wait forever")
    else:
        ms = int(timeout * 1000.0 + 0.999)
    h = ctypes.c_void_p()
    ep = endpoint.encode() if isinstance(endpoint, str) else endpoint
    if secret is None:
        _lib.check(lib.tsock_stats_query(ctypes.byref(h), ep, ms), "tsock_stats_query")
    else:
        security.check(lib.tsock_stats_query_curve(ctypes.byref(h), ep, ms, secret, server),
                       "tsock_stats_query_curve", (secret, server))
    try:
        return json.loads(lib.tsock_stats_json(h.value).decode("utf-8"))
    finally:
        lib.tsock_stats_destroy(h.value)
