"""Exceptions raised by the tsock binding.

Every negative return value of a C function becomes a :class:`TsockError` carrying the code
and the text of ``tsock_strerror``. The codes a training loop usually wants to tell apart have
subclasses of their own, so ``except tsock.ProducerLost`` reads naturally; all of them are
still ``TsockError`` and expose ``.code``.
"""
import errno as _errno

# tsock's own codes (include/tsock/tsock.h, enum tsock_error). Every other negative code is a
# negated errno value.
E_PROTOCOL = -10001
E_VERSION = -10002
E_PRODUCER_LOST = -10003
E_PRODUCER_STOPPED = -10004
E_END = -10005
E_STATE = -10006
E_LAYOUT = -10007
E_FULL = -10008
E_REJECTED = -10009
E_NOT_HELD = -10010
E_BUSY_ENDPOINT = -10011
E_EPOCH_INTERRUPTED = -10012
E_BAD_SAMPLE = -10013
E_NO_DEVICE = -10014
E_DEVICE_UNUSABLE = -10015
E_CANCELLED = -10016
E_INSECURE = -10017
E_AUTH = -10018
E_BAD_STATE = -10019
E_GROUP_INCOMPLETE = -10020
E_GROUP_MISMATCH = -10021
E_GROUP_LOST = -10022

_CODE_NAMES = {
    E_PROTOCOL: "TSOCK_E_PROTOCOL",
    E_VERSION: "TSOCK_E_VERSION",
    E_PRODUCER_LOST: "TSOCK_E_PRODUCER_LOST",
    E_PRODUCER_STOPPED: "TSOCK_E_PRODUCER_STOPPED",
    E_END: "TSOCK_E_END",
    E_STATE: "TSOCK_E_STATE",
    E_LAYOUT: "TSOCK_E_LAYOUT",
    E_FULL: "TSOCK_E_FULL",
    E_REJECTED: "TSOCK_E_REJECTED",
    E_NOT_HELD: "TSOCK_E_NOT_HELD",
    E_BUSY_ENDPOINT: "TSOCK_E_BUSY_ENDPOINT",
    E_EPOCH_INTERRUPTED: "TSOCK_E_EPOCH_INTERRUPTED",
    E_BAD_SAMPLE: "TSOCK_E_BAD_SAMPLE",
    E_NO_DEVICE: "TSOCK_E_NO_DEVICE",
    E_DEVICE_UNUSABLE: "TSOCK_E_DEVICE_UNUSABLE",
    E_CANCELLED: "TSOCK_E_CANCELLED",
    E_INSECURE: "TSOCK_E_INSECURE",
    E_AUTH: "TSOCK_E_AUTH",
    E_BAD_STATE: "TSOCK_E_BAD_STATE",
    E_GROUP_INCOMPLETE: "TSOCK_E_GROUP_INCOMPLETE",
    E_GROUP_MISMATCH: "TSOCK_E_GROUP_MISMATCH",
    E_GROUP_LOST: "TSOCK_E_GROUP_LOST",
}


def code_name(code):
    """The symbolic name of a return code: "TSOCK_E_END", "ETIMEDOUT", ... or str(code)."""
    if code in _CODE_NAMES:
        return _CODE_NAMES[code]
    if code < 0 and -code in _errno.errorcode:
        return _errno.errorcode[-code]
    return str(code)


class TsockError(Exception):
    """A tsock C function failed.

    Attributes:
        code: the negative return value (a negated errno or a ``tsock.E_*`` code).
        errno: ``-code`` when the code is a negated errno value, else None.
        name: its symbolic name, for example ``"TSOCK_E_PRODUCER_LOST"`` or ``"ETIMEDOUT"``.
        message: ``tsock_strerror(code)``.
        function: the C function that failed, when known.
    """

    def __init__(self, code, message, function=None):
        self.code = int(code)
        self.name = code_name(self.code)
        self.message = message
        self.function = function
        Exception.__init__(self, self.code, message)
        # Like OSError.errno: the positive errno value, or None for tsock's own codes.
        self.errno = -self.code if -self.code in _errno.errorcode else None

    def __str__(self):
        where = f"{self.function}: " if self.function else ""
        return f"{where}{self.message} ({self.name}, code {self.code})"

    def __reduce__(self):
        # Exceptions cross process boundaries (multiprocessing); keep the code on the way.
        return (_rebuild, (self.code, self.message, self.function))


class EndOfStream(TsockError):
    """The producer finished its stream and every batch sent before the end was delivered."""


class ProducerLost(TsockError, ConnectionError):
    """The producer stopped answering (killed or hung): no heartbeat within the timeout."""


class ProducerStopped(TsockError, ConnectionError):
    """The producer shut down before the stream ended."""


class EpochInterrupted(TsockError):
    """The producer went away in the middle of this consumer's epoch and the consumer (with
    reconnect on) cut that epoch short; the next call starts a new epoch on the producer that
    came back. Raised once per interruption. A :class:`tsock.DataLoader` does not raise it: it
    ends that epoch's ``for`` loop and sets ``loader.last_epoch_interrupted``."""


class BadState(TsockError, ValueError):
    """A saved consumer state (``DataLoader.load_state_dict``) is corrupt, truncated, of another
    version, or foreign to the producer (another dataset size or batch layout, another batch
    size or drop_last, a producer without a sampler); the library's log line says which."""


class GroupIncomplete(TsockError):
    """Ranks of this consumer's group did not join within the group timeout; the library's log
    line names them ("group 'resnet': ranks 1, 3 of 4 did not join within 600 s")."""


class GroupMismatch(TsockError, ValueError):
    """The producer refused this rank: it disagrees with the ranks already joined on the world
    size, batch size or drop_last, repeats a joined rank, or is out of range; the library's log
    line says which field."""


class GroupLost(TsockError):
    """Another rank of this consumer's group was lost (it left, or was killed): the group's
    epoch cannot go on, as a DDP job fails when it loses a rank."""


class Timeout(TsockError, TimeoutError):
    """A call waited longer than its timeout (-ETIMEDOUT)."""


_SUBCLASSES = {
    E_END: EndOfStream,
    E_PRODUCER_LOST: ProducerLost,
    E_PRODUCER_STOPPED: ProducerStopped,
    E_EPOCH_INTERRUPTED: EpochInterrupted,
    E_BAD_STATE: BadState,
    E_GROUP_INCOMPLETE: GroupIncomplete,
    E_GROUP_MISMATCH: GroupMismatch,
    E_GROUP_LOST: GroupLost,
    -_errno.ETIMEDOUT: Timeout,
}


def error_class(code):
    """The exception class used for `code`."""
    return _SUBCLASSES.get(code, TsockError)


def _rebuild(code, message, function):
    return error_class(code)(code, message, function)
