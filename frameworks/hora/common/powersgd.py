"""PowerSGD gradient compression as a communication hook (PyTorch's ``powerSGD_hook``), written
once against ``ArrayOps``; ``hora.torch.powersgd`` and ``hora.common.numpy_powersgd`` supply the
operations for torch tensors and NumPy arrays.

For its first ``start_powerSGD_iter`` reductions a bucket is averaged as it is. After that each
gradient of the bucket is viewed as a matrix M (dim 0 by the rest) and, when that saves enough,
replaced by a rank-r approximation P Q^T: P = M Q is summed over the ranks and orthogonalised,
Q = M^T P is summed and divided by the number of ranks, and M becomes P Q^T. The gradients that
are not worth compressing (vectors, small matrices) are averaged together in one fused allreduce.

Error feedback adds what the approximation lost on this rank to the next gradient of the
bucket; warm start begins each step's power iteration from the previous step's Q instead of a
random one. The random Q depends only on ``random_seed``, the bucket's index and how many times
the bucket drew one, so it is the same on every rank.

The arrays' arithmetic operators (``+=``, ``-=``, ``/=``, ``*``, indexing) are the same for
both kinds of array; everything else goes through ``ArrayOps``.
"""

from __future__ import annotations

from typing import Any, Protocol

from hora.common.comm_hooks import (
    GradBucket,
    HookFuture,
    as_matrix_shape,
    check_powersgd_options,
    initial_q_seed,
    should_compress,
)
from hora.common.ops import Average, Sum


class ArrayOps(Protocol):
    """What PowerSGD needs from an array library. "Batch" means a (batch, rows, cols) array;
    ``out`` arguments are written in place."""

    def empty(self, numel: int, dtype: Any) -> Any:
        """A new 1-d array of ``numel`` elements."""

    def concat(self, arrays: list[Any]) -> Any:
        """A new 1-d array: the arrays' elements one after the other."""

    def stack(self, arrays: list[Any]) -> Any:
        """A new array of the equally shaped ``arrays`` along a new first dimension."""

    def view(self, array: Any, shape: tuple[int, ...]) -> Any:
        """``array`` (contiguous) seen with another shape, sharing its memory."""

    def numel(self, array: Any) -> int:
        """The number of elements."""

    def clone(self, array: Any) -> Any:
        """A copy that does not share memory."""

    def copy(self, out: Any, source: Any) -> None:
        """Overwrite ``out`` with ``source`` (same shape)."""

    def divide(self, out: Any, divisor: int) -> None:
        """Divide ``out`` by an integer, in place."""

    def matmul(self, a: Any, b: Any, out: Any) -> None:
        """``out = a @ b`` of batches."""

    def transposed_matmul(self, a: Any, b: Any) -> Any:
        """A new batch ``a^T @ b``."""

    def matmul_transposed(self, a: Any, b: Any, out: Any) -> None:
        """``out = a @ b^T`` of batches."""

    def column_norms(self, batch: Any) -> Any:
        """The Euclidean norm of each column, as (batch, 1, cols)."""

    def column_sums(self, batch: Any) -> Any:
        """The sum of each column, as (batch, 1, cols)."""

    def has_qr(self, dtype: Any) -> bool:
        """Whether ``qr`` takes arrays of ``dtype``."""

    def qr(self, batch: Any) -> Any:
        """The Q of the reduced QR decomposition of each matrix."""

    def generator(self, seed: int) -> Any:
        """A random generator seeded with ``seed``."""

    def standard_normal(self, generator: Any, shape: tuple[int, ...], dtype: Any) -> Any:
        """A new array of standard normal values drawn from ``generator``."""

    def allreduce(self, arrays: list[Any], names: list[str], op: int, process_set: Any) -> Any:
        """Start one fused in-place allreduce; the result's ``wait()`` finishes it."""

    def average(self, bucket: GradBucket) -> HookFuture:
        """The plain averaging hook."""


def orthogonalize(ops: ArrayOps, matrices: Any, epsilon: float = 0.0) -> None:
    """Make the columns of each matrix of a batch orthonormal, in place.

    QR for more than two columns of a type ``ops.qr`` takes, Gram-Schmidt otherwise.
    ``epsilon`` is added to each column's norm before dividing by it (0: a column of zeros
    becomes NaN, as in PyTorch).
    """
    cols = matrices.shape[2]
    if cols > 2 and ops.has_qr(matrices.dtype):
        ops.copy(matrices, ops.qr(matrices))
        return
    for i in range(cols):
        col = matrices[:, :, i:i + 1]
        norm = ops.column_norms(col)
        col /= norm + epsilon if epsilon else norm
        if i + 1 < cols:
            rest = matrices[:, :, i + 1:]
            rest -= ops.column_sums(col * rest) * col


class PowerSGDHook:
    """A communication hook compressing gradients to rank ``matrix_approximation_rank``, for the
    arrays of ``ops`` (set by each framework's subclass).

    The options and their defaults are PyTorch's ``PowerSGDState``'s. ``error_dict``,
    ``p_memory_dict`` and ``q_memory_dict`` (per bucket index) hold the error-feedback
    residuals and the warm-start P and Q; ``iterations`` counts each bucket's reductions.

    Raises:
        ValueError: ``matrix_approximation_rank`` below 1, or ``start_powerSGD_iter <= 1``
            with error feedback or warm start (PyTorch's rule).
    """

    ops: ArrayOps

    def __init__(self, matrix_approximation_rank: int = 1, start_powerSGD_iter: int = 1000,
                 min_compression_rate: float = 2, use_error_feedback: bool = True,
                 warm_start: bool = True, orthogonalization_epsilon: float = 0,
                 batch_tensors_with_same_shape: bool = False, random_seed: int = 0) -> None:
        check_powersgd_options(matrix_approximation_rank, start_powerSGD_iter,
                               use_error_feedback, warm_start)
        self.matrix_approximation_rank = int(matrix_approximation_rank)
        self.start_powerSGD_iter = int(start_powerSGD_iter)
        self.min_compression_rate = min_compression_rate
        self.use_error_feedback = bool(use_error_feedback)
        self.warm_start = bool(warm_start)
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.batch_tensors_with_same_shape = bool(batch_tensors_with_same_shape)
        self.random_seed = int(random_seed)
        self.error_dict: dict[int, list[Any]] = {}
        self.p_memory_dict: dict[int, Any] = {}
        self.q_memory_dict: dict[int, Any] = {}
        self.iterations: dict[int, int] = {}
        self.total_numel_before_compression = 0
        self.total_numel_after_compression = 0
        self._draws: dict[int, int] = {}

    def compression_stats(self) -> tuple[float, int, int]:
        """``(rate, elements before, elements after)`` over the compressed steps so far (the
        rate is 0 before the first one), as PyTorch's ``PowerSGDState.compression_stats``."""
        after = self.total_numel_after_compression
        before = self.total_numel_before_compression
        return (before / after if after else 0.0), before, after

    def initial_qs(self, bucket_index: int, shapes: list[tuple[int, ...]], dtype: Any,
                   draw: int = 0) -> list[Any]:
        """The random Q matrices (orthonormal columns, one per shape) a bucket starts from at its
        ``draw``-th draw: standard normal float32 values, in order, from one generator seeded by
        ``initial_q_seed``, cast to ``dtype``; the same on every rank."""
        gen = self.ops.generator(initial_q_seed(self.random_seed, bucket_index, draw))
        qs = []
        for shape in shapes:
            q = self.ops.standard_normal(gen, shape, dtype)
            orthogonalize(self.ops, q, self.orthogonalization_epsilon)
            qs.append(q)
        return qs

    # ------------------------------------------------------------------------ the hook

    def __call__(self, bucket: GradBucket) -> HookFuture:
        """Start the reduction of ``bucket``; the future's ``wait()`` finishes it."""
        index = bucket.index
        done = self.iterations.get(index, 0)
        self.iterations[index] = done + 1
        if done < self.start_powerSGD_iter:
            return self.ops.average(bucket)
        return self._compressed(bucket)

    def _compressed(self, bucket: GradBucket) -> HookFuture:
        ops = self.ops
        index, tensors = bucket.index, bucket.tensors
        copies = self._add_error(index, tensors) if self.use_error_feedback else None
        matrices, plain = self._split(tensors)
        batches, originals = self._batches(matrices)
        ps, qs = self._factors(index, batches, tensors[0].dtype)
        for m, p, q in zip(batches, ps, qs):
            ops.matmul(m, q, out=p)
        flat_plain = (ops.concat([ops.view(t, (-1,)) for t in plain]) if plain
                      else ops.empty(0, tensors[0].dtype))
        name, pset = f"powersgd.{bucket.name}", bucket.process_set
        plain_work = ops.allreduce([flat_plain] if plain else [], [f"{name}.plain"],
                                   Average, pset)
        p_mem, q_mem = self.p_memory_dict[index], self.q_memory_dict[index]
        p_work = ops.allreduce([p_mem] if batches else [], [f"{name}.p"], Sum, pset)

        def finish() -> list[Any]:
            plain_work.wait()
            offset = 0
            for t in plain:
                n = ops.numel(t)
                ops.copy(t, ops.view(flat_plain[offset:offset + n], tuple(t.shape)))
                offset += n
            if batches:
                p_work.wait()
                for p in ps:
                    orthogonalize(ops, p, self.orthogonalization_epsilon)
                for m, p, q in zip(batches, ps, qs):
                    ops.copy(q, ops.transposed_matmul(m, p))
                ops.allreduce([q_mem], [f"{name}.q"], Sum, pset).wait()
                ops.divide(q_mem, bucket.size())
                for m, p, q in zip(batches, ps, qs):
                    ops.matmul_transposed(p, q, out=m)
                for m, group in zip(batches, originals):
                    if len(group) > 1:
                        for i, original in enumerate(group):
                            ops.copy(original, m[i])
            if copies is not None:
                for copy, t in zip(copies, tensors):
                    copy -= t  # the residual: what this rank sent minus what came back
            if not self.warm_start:
                self.p_memory_dict.pop(index, None)
                self.q_memory_dict.pop(index, None)
            return list(tensors)

        return HookFuture(finish)

    def _add_error(self, index: int, tensors: list[Any]) -> list[Any]:
        """Add the bucket's residual to its gradients, then overwrite the residual buffers with
        copies of the sums (they become the next residual when the step finishes); returns
        them."""
        errors = self.error_dict.get(index)
        if errors is None:
            errors = [self.ops.clone(t) for t in tensors]
            self.error_dict[index] = errors
            return errors
        for t, e in zip(tensors, errors):
            t += e
            self.ops.copy(e, t)
        return errors

    def _split(self, tensors: list[Any]) -> tuple[list[Any], list[Any]]:
        """The gradients to compress (as matrix views) and those to average as they are."""
        matrices, plain = [], []
        for t in tensors:
            rows, cols = as_matrix_shape(t.shape)
            rank = min(rows, cols, self.matrix_approximation_rank)
            worth, before, after = should_compress(rows, cols, rank, self.min_compression_rate)
            self.total_numel_before_compression += before
            if worth and len(t.shape) > 0:
                matrices.append(self.ops.view(t, (rows, cols)))
                self.total_numel_after_compression += after
            else:
                plain.append(t)
                self.total_numel_after_compression += before
        return matrices, plain

    def _batches(self, matrices: list[Any]) -> tuple[list[Any], list[list[Any]]]:
        """3-d batches of the matrices, grouped by shape; with ``batch_tensors_with_same_shape``
        those of one shape are stacked into one batch (a copy), else each is a batch of one (a
        view). Also returns the matrices of each batch."""
        by_shape: dict[tuple[int, ...], list[Any]] = {}
        for m in matrices:
            by_shape.setdefault(tuple(m.shape), []).append(m)
        batches, originals = [], []
        for shape, group in by_shape.items():
            if self.batch_tensors_with_same_shape and len(group) > 1:
                batches.append(self.ops.stack(group))
                originals.append(group)
            else:
                batches.extend(self.ops.view(m, (1, *shape)) for m in group)
                originals.extend([m] for m in group)
        return batches, originals

    def _factors(self, index: int, batches: list[Any], dtype: Any
                 ) -> tuple[list[Any], list[Any]]:
        """Views of the bucket's P and Q memory, one per batch; Q orthogonalised (warm start)
        or drawn at random."""
        ops = self.ops
        shapes = [(b, n, m, min(n, m, self.matrix_approximation_rank))
                  for b, n, m in (tuple(x.shape) for x in batches)]
        fresh = not self.warm_start or index not in self.p_memory_dict
        if fresh:
            self.p_memory_dict[index] = ops.empty(sum(b * n * r for b, n, _, r in shapes), dtype)
            self.q_memory_dict[index] = ops.empty(sum(b * m * r for b, _, m, r in shapes), dtype)
        ps, qs, p_at, q_at = [], [], 0, 0
        for b, n, m, r in shapes:
            ps.append(ops.view(self.p_memory_dict[index][p_at:p_at + b * n * r], (b, n, r)))
            qs.append(ops.view(self.q_memory_dict[index][q_at:q_at + b * m * r], (b, m, r)))
            p_at += b * n * r
            q_at += b * m * r
        if not fresh:
            for q in qs:
                orthogonalize(ops, q, self.orthogonalization_epsilon)
            return ps, qs
        draw = self._draws.get(index, 0)
        self._draws[index] = draw + 1
        for q, drawn in zip(qs, self.initial_qs(index, [tuple(q.shape) for q in qs], dtype, draw)):
            ops.copy(q, drawn)
        return ps, qs

    def __repr__(self) -> str:
        return (f"PowerSGD(matrix_approximation_rank={self.matrix_approximation_rank}, "
                f"start_powerSGD_iter={self.start_powerSGD_iter})")
