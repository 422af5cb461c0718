"""The warnings ringloader gives, in a module every other one may import.

Errors are ordinary exceptions: ``DecodeError`` (a ``ValueError``, from the
C core) and ``OSError`` naming the sample's file, and ``ShardError`` for a
tar shard that cannot be used.
"""

__all__ = ["DataWarning", "FallbackWarning", "UnsupportedTransform"]


class FallbackWarning(UserWarning):
    """Part of the work runs in Python instead of the fused C pipeline."""


class DataWarning(UserWarning):
    """A bad sample was tolerated: replaced (``on_error="skip"``) or decoded
    although truncated (``allow_truncated=True``)."""


class UnsupportedTransform(ValueError):
    """The transform cannot be fused into the decode (also
    ``ringloader.transforms.UnsupportedTransform``)."""
