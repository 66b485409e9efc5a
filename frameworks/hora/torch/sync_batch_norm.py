"""Batch normalization whose batch statistics cover the samples of every rank.

In training mode on more than one rank, the per-channel count, sum and sum of squares are summed
across ranks (one allreduce), so the output equals ``BatchNorm`` applied to the concatenation of
all ranks' batches. The backward pass sums the two per-channel gradient reductions across ranks
(a second allreduce); the weight and bias gradients stay local, as DistributedOptimizer averages
them like any other gradient.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from hora.common.basics import size
from hora.common.process_sets import ProcessSet, global_process_set
from hora.torch import _async_ops as _a
from hora.torch._async_ops import Sum

__all__ = ["SyncBatchNorm"]


def _channel_view(tensor: torch.Tensor, ndim: int) -> torch.Tensor:
    """Reshape a per-channel vector so it broadcasts against an (N, C, ...) input."""
    return tensor.reshape((1, -1) + (1,) * (ndim - 2))


def _sum_across(tensor: torch.Tensor, process_set: ProcessSet) -> torch.Tensor:
    buffer = tensor.contiguous()
    return _a.call("allreduce", [buffer], False, "allreduce_async_", None, True, op=Sum,
                   process_set=process_set).wait()


class _SyncBatchNormFunction(torch.autograd.Function):
    """Normalization with global statistics.

    Returns (output, global mean, global biased variance, global sample count per channel).
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        eps: float,
        process_set: ProcessSet,
    ) -> tuple[torch.Tensor, ...]:
        channels = x.shape[1]
        dims = [d for d in range(x.dim()) if d != 1]
        stats_dtype = torch.float64
        xs = x.to(stats_dtype)
        local_count = float(x.numel() // channels) if channels else 0.0
        packed = torch.cat(
            [
                torch.tensor([local_count], dtype=stats_dtype),
                xs.sum(dim=dims),
                (xs * xs).sum(dim=dims),
            ]
        )
        packed = _sum_across(packed, process_set)
        count = packed[0].item()
        if count < 1:
            raise ValueError("SyncBatchNorm: no samples on any rank")
        mean = packed[1 : 1 + channels] / count
        var = (packed[1 + channels :] / count - mean * mean).clamp_min(0.0)
        invstd = torch.rsqrt(var + eps)
        xhat = (xs - _channel_view(mean, x.dim())) * _channel_view(invstd, x.dim())
        out = xhat
        if weight is not None:
            out = out * _channel_view(weight.to(stats_dtype), x.dim())
        if bias is not None:
            out = out + _channel_view(bias.to(stats_dtype), x.dim())
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.count = count
        ctx.process_set = process_set
        ctx.has_bias = bias is not None
        ctx.in_dtype = x.dtype
        total = packed[:1].clone()
        ctx.mark_non_differentiable(mean, var, total)
        return out.to(x.dtype), mean, var, total

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, *_unused: Any) -> tuple:
        xhat, invstd, weight = ctx.saved_tensors
        ndim = xhat.dim()
        dims = [d for d in range(ndim) if d != 1]
        g = grad_out.to(xhat.dtype)
        sum_g = g.sum(dim=dims)
        sum_g_xhat = (g * xhat).sum(dim=dims)
        grad_weight = sum_g_xhat.to(weight.dtype) if weight is not None else None
        grad_bias = (
            sum_g.to(weight.dtype if weight is not None else ctx.in_dtype) if ctx.has_bias else None
        )
        grad_input = None
        if ctx.needs_input_grad[0]:
            channels = xhat.shape[1]
            totals = _sum_across(torch.cat([sum_g, sum_g_xhat]), ctx.process_set)
            mean_g = totals[:channels] / ctx.count
            mean_g_xhat = totals[channels:] / ctx.count
            scale = invstd if weight is None else invstd * weight.to(xhat.dtype)
            grad_input = (
                g - _channel_view(mean_g, ndim) - xhat * _channel_view(mean_g_xhat, ndim)
            ) * _channel_view(scale, ndim)
            grad_input = grad_input.to(ctx.in_dtype)
        return grad_input, grad_weight, grad_bias, None, None


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over the union of all ranks' batches (``torch.nn.BatchNorm{1,2,3}d`` otherwise).

    Accepts inputs of shape (N, C, ...) with at least 2 dimensions. In evaluation mode, or on a
    single rank, it behaves exactly like the local batch norm. Running statistics are updated
    from the global batch (unbiased variance over all ranks' samples).

    Args:
        num_features: C, the number of channels.
        eps: added to the variance for numerical stability.
        momentum: weight of the new batch in the running statistics (None: cumulative average).
        affine: learn a per-channel weight and bias.
        track_running_stats: keep running mean and variance for evaluation.
        process_set: ranks whose batches are combined.
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_set: ProcessSet = global_process_set,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Normalize ``input`` with statistics of the global batch when training."""
        self._check_input_dim(input)
        if not self.training or size() == 1 or self.process_set.size() == 1:
            return super().forward(input)
        factor = 0.0
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
            else:
                factor = self.momentum
        out, mean, var, total = _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, self.eps, self.process_set
        )
        if (self.track_running_stats and self.running_mean is not None
                and self.running_var is not None):
            count = float(total.item())
            with torch.no_grad():
                unbiased = var * (count / (count - 1)) if count > 1 else var
                self.running_mean.mul_(1 - factor).add_(
                    mean.to(self.running_mean.dtype), alpha=factor
                )
                self.running_var.mul_(1 - factor).add_(
                    unbiased.to(self.running_var.dtype), alpha=factor
                )
        return out
