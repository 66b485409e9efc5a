"""PowerSGD on NumPy buckets (the TensorFlow/Keras and MXNet form of ``hora.torch.powersgd``).

The same algorithm, options and rules (``hora.common.comm_hooks``) as the torch hook: the first
``start_powerSGD_iter`` reductions of a bucket are plain averages; then each gradient worth
compressing is viewed as a matrix M and replaced by P Q^T, with P = M Q summed and
orthogonalised and Q = M^T P averaged; the others are averaged in one fused allreduce. Error
feedback and warm start as in PyTorch. The random initial Q comes from NumPy's generator seeded
by ``initial_q_seed``, so it is the same on every rank (not the same numbers as torch's).
"""

from __future__ import annotations

import numpy as np

from hora.common.comm_hooks import (
    GradBucket,
    HookFuture,
    as_matrix_shape,
    check_powersgd_options,
    initial_q_seed,
    should_compress,
)
from hora.common.numpy_hooks import allreduce, allreduce_arrays
from hora.common.ops import Average, Sum

_QR_TYPES = (np.float32, np.float64)


def orthogonalize(matrices: np.ndarray, epsilon: float = 0.0) -> None:
    """Make the columns of each matrix of a (batch, rows, cols) array orthonormal, in place:
    QR for more than two columns of float32/float64, Gram-Schmidt otherwise. ``epsilon`` is
    added to each column's norm before dividing by it."""
    cols = matrices.shape[2]
    if cols > 2 and matrices.dtype.type in _QR_TYPES:
        q, _ = np.linalg.qr(matrices)
        matrices[...] = q
        return
    for i in range(cols):
        col = matrices[:, :, i:i + 1]
        norm = np.sqrt(np.sum(col * col, axis=1, keepdims=True))
        col /= (norm + epsilon) if epsilon else norm
        if i + 1 < cols:
            rest = matrices[:, :, i + 1:]
            rest -= np.sum(col * rest, axis=1, keepdims=True) * col


class PowerSGD:
    """A communication hook compressing gradients to rank ``matrix_approximation_rank``.

    Options, defaults, state (``error_dict``, ``p_memory_dict``, ``q_memory_dict``,
    ``iterations``) and ``compression_stats()`` as ``hora.torch.hooks.PowerSGD``.

    Raises:
        ValueError: ``matrix_approximation_rank`` below 1, or ``start_powerSGD_iter <= 1``
            with error feedback or warm start (PyTorch's rule).
    """

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
        self.error_dict: dict[int, list[np.ndarray]] = {}
        self.p_memory_dict: dict[int, np.ndarray] = {}
        self.q_memory_dict: dict[int, np.ndarray] = {}
        self.iterations: dict[int, int] = {}
        self.total_numel_before_compression = 0
        self.total_numel_after_compression = 0
        self._draws: dict[int, int] = {}

    def compression_stats(self) -> tuple[float, int, int]:
        """``(rate, elements before, elements after)`` over the compressed steps so far."""
        after = self.total_numel_after_compression
        before = self.total_numel_before_compression
        return (before / after if after else 0.0), before, after

    def initial_qs(self, bucket_index: int, shapes: list[tuple[int, ...]], dtype: np.dtype,
                   draw: int = 0) -> list[np.ndarray]:
        """The random Q matrices (orthonormal columns) a bucket starts from at its ``draw``-th
        draw; the same on every rank."""
        rng = np.random.default_rng(initial_q_seed(self.random_seed, bucket_index, draw))
        qs = []
        for shape in shapes:
            q = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
            orthogonalize(q, self.orthogonalization_epsilon)
            qs.append(q)
        return qs

    def __call__(self, bucket: GradBucket) -> HookFuture:
        """Start the reduction of ``bucket``; the future's ``wait()`` finishes it."""
        index = bucket.index
        done = self.iterations.get(index, 0)
        self.iterations[index] = done + 1
        if done < self.start_powerSGD_iter:
            return allreduce(bucket)
        return self._compressed(bucket)

    def _compressed(self, bucket: GradBucket) -> HookFuture:
        index, tensors = bucket.index, bucket.tensors
        copies = self._add_error(index, tensors) if self.use_error_feedback else None
        matrices, plain = self._split(tensors)
        batches, originals = self._batches(matrices)
        ps, qs = self._factors(index, batches, tensors[0].dtype)
        for m, p, q in zip(batches, ps, qs):
            np.matmul(m, q, out=p)
        flat_plain = (np.concatenate([t.reshape(-1) for t in plain]) if plain
                      else np.empty(0, dtype=tensors[0].dtype))
        name, pset = f"powersgd.{bucket.name}", bucket.process_set
        plain_work = allreduce_arrays([flat_plain] if plain else [], [f"{name}.plain"],
                                      Average, pset)
        p_mem, q_mem = self.p_memory_dict[index], self.q_memory_dict[index]
        p_work = allreduce_arrays([p_mem] if batches else [], [f"{name}.p"], Sum, pset)

        def finish() -> list[np.ndarray]:
            plain_work.wait()
            offset = 0
            for t in plain:
                t[...] = flat_plain[offset:offset + t.size].reshape(t.shape)
                offset += t.size
            if batches:
                p_work.wait()
                for p in ps:
                    orthogonalize(p, self.orthogonalization_epsilon)
                for m, p, q in zip(batches, ps, qs):
                    q[...] = np.matmul(m.transpose(0, 2, 1), p)
                allreduce_arrays([q_mem], [f"{name}.q"], Sum, pset).wait()
                np.divide(q_mem, np.asarray(bucket.size(), dtype=q_mem.dtype), out=q_mem)
                for m, p, q in zip(batches, ps, qs):
                    m[...] = np.matmul(p, q.transpose(0, 2, 1))
                for m, group in zip(batches, originals):
                    if len(group) > 1:
                        for i, original in enumerate(group):
                            original[...] = m[i]
            if copies is not None:
                for copy, t in zip(copies, tensors):
                    copy -= t  # the residual: what this rank sent minus what came back
            if not self.warm_start:
                self.p_memory_dict.pop(index, None)
                self.q_memory_dict.pop(index, None)
            return list(tensors)

        return HookFuture(finish)

    def _add_error(self, index: int, tensors: list[np.ndarray]) -> list[np.ndarray]:
        """Add the bucket's residual to its gradients and keep copies of the sums (the next
        residual once the step finishes)."""
        errors = self.error_dict.get(index)
        if errors is None:
            errors = [t.copy() for t in tensors]
            self.error_dict[index] = errors
            return errors
        for t, e in zip(tensors, errors):
            t += e
            e[...] = t
        return errors

    def _split(self, tensors: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The gradients to compress (as matrix views) and those to average as they are."""
        matrices, plain = [], []
        for t in tensors:
            rows, cols = as_matrix_shape(t.shape)
            rank = min(rows, cols, self.matrix_approximation_rank)
            worth, before, after = should_compress(rows, cols, rank, self.min_compression_rate)
            self.total_numel_before_compression += before
            if worth and t.ndim > 0:
                matrices.append(t.reshape(rows, cols))  # a view: the arrays are contiguous
                self.total_numel_after_compression += after
            else:
                plain.append(t)
                self.total_numel_after_compression += before
        return matrices, plain

    def _batches(self, matrices: list[np.ndarray]
                 ) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
        """3-d batches of the matrices grouped by shape (stacked copies with
        ``batch_tensors_with_same_shape``, else views of one), with each batch's matrices."""
        by_shape: dict[tuple[int, ...], list[np.ndarray]] = {}
        for m in matrices:
            by_shape.setdefault(tuple(m.shape), []).append(m)
        batches, originals = [], []
        for group in by_shape.values():
            if self.batch_tensors_with_same_shape and len(group) > 1:
                batches.append(np.stack(group))
                originals.append(group)
            else:
                batches.extend(m[np.newaxis] for m in group)
                originals.extend([m] for m in group)
        return batches, originals

    def _factors(self, index: int, batches: list[np.ndarray], dtype: np.dtype
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Views of the bucket's P and Q memory, one per batch; Q orthogonalised (warm start)
        or drawn at random."""
        shapes = [(b, n, m, min(n, m, self.matrix_approximation_rank))
                  for b, n, m in (x.shape for x in batches)]
        fresh = not self.warm_start or index not in self.p_memory_dict
        if fresh:
            self.p_memory_dict[index] = np.empty(sum(b * n * r for b, n, _, r in shapes), dtype)
            self.q_memory_dict[index] = np.empty(sum(b * m * r for b, _, m, r in shapes), dtype)
        ps, qs, p_at, q_at = [], [], 0, 0
        for b, n, m, r in shapes:
            ps.append(self.p_memory_dict[index][p_at:p_at + b * n * r].reshape(b, n, r))
            qs.append(self.q_memory_dict[index][q_at:q_at + b * m * r].reshape(b, m, r))
            p_at += b * n * r
            q_at += b * m * r
        if not fresh:
            for q in qs:
                orthogonalize(q, self.orthogonalization_epsilon)
            return ps, qs
        draw = self._draws.get(index, 0)
        self._draws[index] = draw + 1
        for q, drawn in zip(qs, self.initial_qs(index, [q.shape for q in qs], dtype, draw)):
            q[...] = drawn
        return ps, qs

    def __repr__(self) -> str:
        return (f"PowerSGD(matrix_approximation_rank={self.matrix_approximation_rank}, "
                f"start_powerSGD_iter={self.start_powerSGD_iter})")
