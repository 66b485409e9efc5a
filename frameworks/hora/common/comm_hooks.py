"""The framework-neutral part of communication hooks: the bucket a hook receives, the future it
returns, the check of what the future gives back, and PowerSGD's arithmetic rules.

A communication hook replaces the plain allreduce of a distributed optimizer. It is called with
one ``GradBucket`` once every gradient of the bucket is ready, starts whatever collectives it
needs, and returns at once an object with a ``wait()`` method (``HookFuture`` or any future) that
returns the reduced gradients. ``wait()`` may start further collectives (PowerSGD's second
round); the optimizer therefore calls the hook for every bucket before it waits for any, and waits
for the buckets in the order of their index, which is the same on every rank.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

from hora.common.process_sets import ProcessSet

HOOK_RETURN_ERROR = (
    "comm_hook must return a future: an object with a wait() method that returns the reduced "
    "gradients (a list with one tensor per gradient of the bucket)"
)


@dataclass
class GradBucket:
    """The gradients one call of a communication hook reduces.

    Attributes:
        index: the bucket's number, the same on every rank: the position of its first parameter
            among the optimizer's parameters.
        names: the parameters' names, in the order of ``tensors``.
        tensors: the gradients, dense and contiguous; the hook may overwrite them in place and
            return them.
        process_set: the ranks that reduce the bucket together.
    """

    index: int
    names: list[str]
    tensors: list[Any]
    process_set: ProcessSet

    @property
    def name(self) -> str:
        """A name for the bucket's collectives, the same on every rank (its first parameter's)."""
        return self.names[0]

    def size(self) -> int:
        """Number of ranks in the bucket's process set."""
        members = self.process_set.size()
        if members is None:
            raise ValueError(f"the process set {self.process_set} is not registered")
        return int(members)


class HookFuture:
    """The result of a hook: ``wait()`` runs ``compute`` once and returns (or re-raises) its
    outcome on every later call."""

    __slots__ = ("_compute", "_done", "_error", "_value")

    def __init__(self, compute: Callable[[], Any]) -> None:
        self._compute = compute
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None

    @classmethod
    def completed(cls, value: Any) -> HookFuture:
        """A future whose result is ``value`` already."""
        future = cls(lambda: value)
        future.wait()
        return future

    def done(self) -> bool:
        """True once ``wait()`` has run."""
        return self._done

    def wait(self) -> Any:
        """The hook's result; the first call computes it (waiting for its collectives)."""
        if not self._done:
            try:
                self._value = self._compute()
            except BaseException as exc:
                self._error = exc
                raise
            finally:
                self._done = True
                self._compute = _spent
        if self._error is not None:
            raise self._error
        return self._value


def _spent() -> None:
    return None


def check_future(result: Any, bucket: GradBucket) -> Any:
    """``result`` itself when it can be waited for.

    Raises:
        TypeError: the hook returned something without a ``wait()`` method.
    """
    if not callable(getattr(result, "wait", None)):
        raise TypeError(
            f"{HOOK_RETURN_ERROR}; for the bucket of {bucket.names} it returned "
            f"{type(result).__name__}"
        )
    return result


def check_result(value: Any, bucket: GradBucket, is_tensor: Callable[[Any], bool],
                 shape_of: Callable[[Any], Sequence[int]]) -> list:
    """The reduced gradients a hook's future gave, checked against the bucket.

    Raises:
        TypeError: not a list or tuple of tensors.
        ValueError: a different number of tensors, or a tensor of another shape.
    """
    if not isinstance(value, (list, tuple)) or not all(is_tensor(v) for v in value):
        raise TypeError(
            f"{HOOK_RETURN_ERROR}; for the bucket of {bucket.names} wait() returned "
            f"{type(value).__name__}"
        )
    if len(value) != len(bucket.tensors):
        raise ValueError(
            f"comm_hook's future returned {len(value)} tensors for the bucket of "
            f"{bucket.names}, which holds {len(bucket.tensors)}"
        )
    for name, got, grad in zip(bucket.names, value, bucket.tensors):
        if tuple(shape_of(got)) != tuple(shape_of(grad)):
            raise ValueError(
                f"comm_hook's future returned shape {list(shape_of(got))} for the gradient of "
                f"{name}, whose shape is {list(shape_of(grad))}"
            )
    return list(value)


# ------------------------------------------------------------------------ PowerSGD rules


def check_powersgd_options(matrix_approximation_rank: int, start_powerSGD_iter: int,
                           use_error_feedback: bool, warm_start: bool) -> None:
    """PyTorch's checks of PowerSGD's options.

    Raises:
        ValueError: a rank below 1, or error feedback / warm start with
            ``start_powerSGD_iter <= 1``.
    """
    if isinstance(matrix_approximation_rank, bool) or int(matrix_approximation_rank) < 1:
        raise ValueError(
            f"matrix_approximation_rank must be a positive int, got {matrix_approximation_rank!r}"
        )
    if (use_error_feedback or warm_start) and start_powerSGD_iter <= 1:
        raise ValueError(
            "Expect `start_powerSGD_iter` > 1 if `use_error_feedback` or `warm_start` is "
            "enabled, because PowerSGD can only be applied after the first two iterations."
        )


def as_matrix_shape(shape: Sequence[int]) -> tuple[int, int]:
    """The matrix a gradient is compressed as: dim 0 by the product of the others (a 0-d
    tensor is 1 x 1)."""
    if len(shape) == 0:
        return 1, 1
    rows = int(shape[0])
    cols = 1
    for d in shape[1:]:
        cols *= int(d)
    return rows, cols


def should_compress(rows: int, cols: int, rank: int, min_compression_rate: float
                    ) -> tuple[bool, int, int]:
    """Whether a rows x cols matrix is worth compressing at ``rank`` (PyTorch's rule: the
    compressed size times ``min_compression_rate`` is below the uncompressed size), with the
    element counts before and after."""
    uncompressed = rows * cols
    compressed = (rows + cols) * rank
    return compressed * min_compression_rate < uncompressed, uncompressed, compressed


def initial_q_seed(random_seed: int, bucket_index: int, draw: int) -> int:
    """The seed of a bucket's random initial Q: a function of the hook's ``random_seed``, the
    bucket and how many times that bucket drew one before, so every rank draws the same Q
    whatever order the buckets' hooks ran in."""
    return zlib.crc32(f"powersgd|{random_seed}|{bucket_index}|{draw}".encode()) % 1_000_000_000
