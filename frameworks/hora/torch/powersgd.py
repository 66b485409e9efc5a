"""PowerSGD gradient compression as a communication hook (PyTorch's ``powerSGD_hook``).

For its first ``start_powerSGD_iter`` reductions a bucket is averaged as it is. After that each
gradient of the bucket is viewed as a matrix M (dim 0 by the rest) and, when that saves enough,
replaced by a rank-r approximation P Q^T: P = M Q is summed over the ranks and orthogonalised,
Q = M^T P is summed and divided by the number of ranks, and M becomes P Q^T. The gradients that
are not worth compressing (vectors, small matrices) are averaged together in one fused allreduce.

Error feedback adds what the approximation lost on this rank to the next gradient of the
bucket; warm start begins each step's power iteration from the previous step's Q instead of a
random one. The random Q depends only on ``random_seed``, the bucket's index and how many times
the bucket drew one, so it is the same on every rank.
"""

from __future__ import annotations

import torch

from hora.common.comm_hooks import (
    GradBucket,
    HookFuture,
    as_matrix_shape,
    check_powersgd_options,
    initial_q_seed,
    should_compress,
)
from hora.common.ops import Average, Sum
from hora.torch._hook_ops import allreduce, allreduce_tensors

_HALF_TYPES = (torch.float16, torch.bfloat16)


def orthogonalize(matrices: torch.Tensor, epsilon: float = 0.0) -> None:
    """Make the columns of each matrix of a (batch, rows, cols) tensor orthonormal, in place.

    Gram-Schmidt for at most two columns and for half types (QR has no half kernels), QR
    otherwise. ``epsilon`` is added to each column's norm before dividing by it (0: a column of
    zeros becomes NaN, as in PyTorch).
    """
    cols = matrices.shape[2]
    if cols > 2 and matrices.dtype not in _HALF_TYPES:
        q, _ = torch.linalg.qr(matrices)
        matrices.copy_(q)
        return
    for i in range(cols):
        col = matrices[:, :, i:i + 1]
        norm = torch.linalg.vector_norm(col, dim=1, keepdim=True)
        col.div_(norm + epsilon if epsilon else norm)
        if i + 1 < cols:
            rest = matrices[:, :, i + 1:]
            rest.sub_((col * rest).sum(dim=1, keepdim=True) * col)


class PowerSGD:
    """A communication hook compressing gradients to rank ``matrix_approximation_rank``.

    The options and their defaults are PyTorch's ``PowerSGDState``'s. ``error_dict``,
    ``p_memory_dict`` and ``q_memory_dict`` (per bucket index) hold the error-feedback
    residuals and the warm-start P and Q; ``iterations`` counts each bucket's reductions.

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
        self.error_dict: dict[int, list[torch.Tensor]] = {}
        self.p_memory_dict: dict[int, torch.Tensor] = {}
        self.q_memory_dict: dict[int, torch.Tensor] = {}
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

    def initial_qs(self, bucket_index: int, shapes: list[tuple[int, ...]], dtype: torch.dtype,
                   draw: int = 0) -> list[torch.Tensor]:
        """The random Q matrices (orthonormal columns, one per shape) a bucket starts from at its
        ``draw``-th draw: standard normal values, in order, from one generator seeded by
        ``initial_q_seed``; the same on every rank."""
        gen = torch.Generator().manual_seed(initial_q_seed(self.random_seed, bucket_index, draw))
        qs = []
        for shape in shapes:
            q = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
            orthogonalize(q, self.orthogonalization_epsilon)
            qs.append(q)
        return qs

    # ------------------------------------------------------------------------ the hook

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
            torch.bmm(m, q, out=p)
        flat_plain = (torch.cat([t.reshape(-1) for t in plain]) if plain
                      else torch.empty(0, dtype=tensors[0].dtype))
        name, pset = f"powersgd.{bucket.name}", bucket.process_set
        plain_work = allreduce_tensors([flat_plain] if plain else [], [f"{name}.plain"],
                                       Average, pset)
        p_mem, q_mem = self.p_memory_dict[index], self.q_memory_dict[index]
        p_work = allreduce_tensors([p_mem] if batches else [], [f"{name}.p"], Sum, pset)

        def finish() -> list[torch.Tensor]:
            plain_work.wait()
            offset = 0
            for t in plain:
                t.copy_(flat_plain[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
            if batches:
                p_work.wait()
                for p in ps:
                    orthogonalize(p, self.orthogonalization_epsilon)
                for m, p, q in zip(batches, ps, qs):
                    # M^T P as (P^T M)^T: a transposed M takes a kernel many times slower.
                    q.copy_(torch.bmm(p.transpose(1, 2), m).transpose(1, 2))
                allreduce_tensors([q_mem], [f"{name}.q"], Sum, pset).wait()
                q_mem.div_(bucket.size())
                for m, p, q in zip(batches, ps, qs):
                    torch.bmm(p, q.transpose(1, 2), out=m)
                for m, group in zip(batches, originals):
                    if len(group) > 1:
                        for i, original in enumerate(group):
                            original.copy_(m[i])
            if copies is not None:
                for copy, t in zip(copies, tensors):
                    copy.sub_(t)  # the residual: what this rank sent minus what came back
            if not self.warm_start:
                self.p_memory_dict.pop(index, None)
                self.q_memory_dict.pop(index, None)
            return list(tensors)

        return HookFuture(finish)

    def _add_error(self, index: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Add the bucket's residual to its gradients, then overwrite the residual buffers with
        copies of the sums (they become the next residual when the step finishes); returns
        them."""
        errors = self.error_dict.get(index)
        if errors is None:
            errors = [t.detach().clone() for t in tensors]
            self.error_dict[index] = errors
            return errors
        for t, e in zip(tensors, errors):
            t.add_(e)
            e.copy_(t)
        return errors

    def _split(self, tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The gradients to compress (as matrices) and those to average as they are."""
        matrices, plain = [], []
        for t in tensors:
            rows, cols = as_matrix_shape(t.shape)
            rank = min(rows, cols, self.matrix_approximation_rank)
            worth, before, after = should_compress(rows, cols, rank, self.min_compression_rate)
            self.total_numel_before_compression += before
            if worth and t.dim() > 0:
                matrices.append(t.view(rows, cols))
                self.total_numel_after_compression += after
            else:
                plain.append(t)
                self.total_numel_after_compression += before
        return matrices, plain

    def _batches(self, matrices: list[torch.Tensor]
                 ) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
        """3-d batches of the matrices, grouped by shape; with ``batch_tensors_with_same_shape``
        those of one shape are stacked into one batch (a copy), else each is a batch of one (a
        view). Also returns the matrices of each batch."""
        by_shape: dict[tuple[int, ...], list[torch.Tensor]] = {}
        for m in matrices:
            by_shape.setdefault(tuple(m.shape), []).append(m)
        batches, originals = [], []
        for group in by_shape.values():
            if self.batch_tensors_with_same_shape and len(group) > 1:
                batches.append(torch.stack(group))
                originals.append(group)
            else:
                batches.extend(m.unsqueeze(0) for m in group)
                originals.extend([m] for m in group)
        return batches, originals

    def _factors(self, index: int, batches: list[torch.Tensor], dtype: torch.dtype
                 ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Views of the bucket's P and Q memory, one per batch; Q orthogonalised (warm start)
        or drawn at random."""
        shapes = [(b, n, m, min(n, m, self.matrix_approximation_rank))
                  for b, n, m in (tuple(x.shape) for x in batches)]
        fresh = not self.warm_start or index not in self.p_memory_dict
        if fresh:
            self.p_memory_dict[index] = torch.empty(sum(b * n * r for b, n, _, r in shapes),
                                                    dtype=dtype)
            self.q_memory_dict[index] = torch.empty(sum(b * m * r for b, _, m, r in shapes),
                                                    dtype=dtype)
        ps, qs, p_at, q_at = [], [], 0, 0
        for b, n, m, r in shapes:
            ps.append(self.p_memory_dict[index][p_at:p_at + b * n * r].view(b, n, r))
            qs.append(self.q_memory_dict[index][q_at:q_at + b * m * r].view(b, m, r))
            p_at += b * n * r
            q_at += b * m * r
        if not fresh:
            for q in qs:
                orthogonalize(q, self.orthogonalization_epsilon)
            return ps, qs
        draw = self._draws.get(index, 0)
        self._draws[index] = draw + 1
        for q, drawn in zip(qs, self.initial_qs(index, [tuple(q.shape) for q in qs], dtype, draw)):
            q.copy_(drawn)
        return ps, qs

    def __repr__(self) -> str:
        return (f"PowerSGD(matrix_approximation_rank={self.matrix_approximation_rank}, "
                f"start_powerSGD_iter={self.start_powerSGD_iter})")

