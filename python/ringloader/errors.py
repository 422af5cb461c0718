"""The warnings ringloader gives, and its errors of its own, in a module
every other one may import.

Errors are ordinary exceptions: ``DecodeError`` (a ``ValueError``, from the
C core) and ``OSError`` naming the sample's file, ``FieldError`` (a
``DecodeError``) for a field of a shard sample that Python cannot decode,
and ``ShardError`` for a tar shard that cannot be used.
"""

from ._core import DecodeError

__all__ = ["DataWarning", "FallbackWarning", "FieldError", "UnsupportedTransform"]


class FallbackWarning(UserWarning):
    """Part of the work runs in Python instead of the fused C pipeline."""


class DataWarning(UserWarning):
    """A bad sample was tolerated: replaced (``on_error="skip"``) or decoded
    although truncated (``allow_truncated=True``)."""


class UnsupportedTransform(ValueError):
    """The transform cannot be fused into the decode (also
    ``ringloader.transforms.UnsupportedTransform``)."""


class FieldError(DecodeError):
    """A field of a tar shard sample that Python cannot decode (a ``.npy``
    member that holds no array; ``kind`` is ``"field"``, as for the
    members the C core refuses). The message names the shard, the sample
    and the member; ``index`` is the sample's position in the dataset,
    ``field`` the field as requested. Raised whatever ``on_error`` says:
    it is found after the batch is made, where no sample can be replaced
    (what the core checks before, bad text, JSON and integers, is
    replaced under ``on_error="skip"``)."""

    def __init__(self, message: str, index: int, field: str) -> None:
        super().__init__(message)
        self.index = index
        self.field = field
        self.kind = "field"
