"""``DistributedOptimizer``: an MXNet optimizer that sums gradients over the ranks before each
update, and the gradient allreduce it shares with ``DistributedTrainer``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hora.common import basics, ops
from hora.common.hook_driver import check_hook_options, reduce_buckets
from hora.common.process_sets import ProcessSet, global_process_set
from hora.mxnet.compat import import_mxnet
from hora.mxnet.mpi_ops import _Pending

mx = import_mxnet()

__all__ = ["DistributedOptimizer"]


def process_set_size(process_set: ProcessSet) -> int:
    """Number of ranks in ``process_set``.

    Raises:
        ValueError: Hora is not initialized or the set is not registered.
    """
    if not basics.is_initialized():
        raise ValueError("Hora has not been initialized; use hvd.init().")
    n = process_set.size()
    if not n:
        raise ValueError(
            f"the process set {process_set} is not registered; pass it to "
            "hvd.init(process_sets=[...]) or hvd.add_process_set() first"
        )
    return int(n)


def split_groups(count: int, num_groups: int) -> list[range]:
    """``range(count)`` cut into ``num_groups`` consecutive, nearly equal, non-empty parts."""
    num_groups = max(1, min(num_groups, count))
    base, extra = divmod(count, num_groups)
    parts = []
    start = 0
    for g in range(num_groups):
        stop = start + base + (1 if g < extra else 0)
        if stop > start:
            parts.append(range(start, stop))
        start = stop
    return parts


def allreduce_gradients_(grads: Sequence[Any], names: Sequence[str], *, prescale_factor: float,
                         num_groups: int, process_set: ProcessSet) -> None:
    """Sum ``grads`` over ``process_set`` in place, each scaled by ``prescale_factor`` first.

    Without groups every gradient is one allreduce named ``allreduce.<name>``; with
    ``num_groups > 0`` the gradients are cut into that many consecutive groups, and each group
    into one grouped allreduce per dtype, named after its first and last gradient. Everything is
    enqueued before anything is waited for, so the engine fuses across gradients.
    """
    if not grads:
        return
    pending = _Pending()
    try:
        if num_groups > 0:
            for part in split_groups(len(grads), num_groups):
                by_dtype: dict[np.dtype, list[int]] = {}
                for i in part:
                    by_dtype.setdefault(np.dtype(grads[i].dtype), []).append(i)
                for members in by_dtype.values():
                    label = f"{names[members[0]]}:{names[members[-1]]}"
                    pending.add("allreduce", [grads[i] for i in members],
                                ops.group_names("grouped_allreduce", label, len(members)),
                                "grouped_allreduce_", op=ops.Sum, prescale=prescale_factor,
                                process_set=process_set)
        else:
            for grad, name in zip(grads, names):
                pending.add("allreduce", [grad], [ops.op_name("allreduce", name)],
                            "allreduce_", op=ops.Sum, prescale=prescale_factor,
                            process_set=process_set)
    except BaseException:
        pending.abandon()
        raise
    pending.wait()


def hook_reduce_(hook: Any, grads: Sequence[Any], names: Sequence[str], ids: Sequence[int],
                 num_groups: int, process_set: ProcessSet) -> None:
    """Average ``grads`` (NDArrays) over ``process_set`` in place through the communication
    hook ``hook``: one bucket per gradient, or ``num_groups`` consecutive buckets; a bucket's
    index is the id (``ids``) of its first gradient."""
    if not grads:
        return
    parts = (split_groups(len(grads), num_groups) if num_groups > 0
             else [range(i, i + 1) for i in range(len(grads))])
    arrays = [g.asnumpy() for g in grads]
    reduced = reduce_buckets(hook, [list(p) for p in parts], list(names), arrays, process_set,
                             ids)
    for grad, value in zip(grads, reduced):
        grad[:] = mx.nd.array(value, ctx=grad.context, dtype=grad.dtype)


def check_mxnet_hook(comm_hook: Any, compressed: bool, predivide: float) -> None:
    """``check_hook_options`` for the MXNet wrappers (they only average)."""
    check_hook_options(comm_hook, compressed, ops.Average, ops.Average, predivide,
                       "hora.mxnet.hooks")


_OWN_ATTRIBUTES = frozenset(
    ("_optimizer", "_gradient_predivide_factor", "_num_groups", "_process_set", "_rescale_factor",
     "_comm_hook")
)


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps an MXNet optimizer so that every update first sums the gradients over the ranks.

    The sum is turned into an average by scaling the wrapped optimizer's ``rescale_grad`` by
    ``gradient_predivide_factor / size``; each gradient is multiplied by
    ``1 / gradient_predivide_factor`` before the sum. Everything else (learning rate, states,
    attributes, and attribute assignments such as ``param_dict`` set by ``gluon.Trainer``) is the
    wrapped optimizer's.

    Use it with ``gluon.Trainer(params, opt, kvstore=None)`` or ``mx.mod.Module``; for Gluon,
    :class:`hora.mxnet.DistributedTrainer` is the more direct choice.

    Args:
        optimizer: the MXNet optimizer to wrap.
        gradient_predivide_factor: split of the averaging between before and after the sum.
        num_groups: when > 0, gradients of one update call are reduced in that many grouped
            allreduces.
        process_set: the ranks that average their gradients; a rank outside it updates with
            its own gradient.
        comm_hook: ``hook(bucket) -> future`` averaging the gradients instead of the allreduce
            (``hora.mxnet.hooks``); ``rescale_grad`` is then left as it is.

    Raises:
        TypeError: not an MXNet optimizer, or a ``comm_hook`` that is not callable.
        ValueError: a predivide factor that is not positive, or one other than 1 with a hook.
    """

    def __init__(self, optimizer: Any, gradient_predivide_factor: float = 1.0,
                 num_groups: int = 0, process_set: ProcessSet = global_process_set,
                 comm_hook: Any = None) -> None:
        if isinstance(optimizer, DistributedOptimizer):
            raise TypeError("the optimizer is already a DistributedOptimizer")
        if not isinstance(optimizer, mx.optimizer.Optimizer):
            raise TypeError(
                f"DistributedOptimizer wraps an mxnet Optimizer, got {type(optimizer).__name__}"
            )
        if gradient_predivide_factor <= 0:
            raise ValueError("gradient_predivide_factor must be positive")
        object.__setattr__(self, "_optimizer", optimizer)
        object.__setattr__(self, "_gradient_predivide_factor", float(gradient_predivide_factor))
        object.__setattr__(self, "_num_groups", int(num_groups))
        object.__setattr__(self, "_process_set", process_set)
        object.__setattr__(self, "_comm_hook", comm_hook)
        factor = gradient_predivide_factor / process_set_size(process_set)
        if comm_hook is not None:
            check_mxnet_hook(comm_hook, False, gradient_predivide_factor)
            factor = 1.0  # the hook returns averages
        object.__setattr__(self, "_rescale_factor", factor)
        optimizer.rescale_grad *= factor

    # Attributes not defined here are the wrapped optimizer's, read and written.
    def __getattr__(self, name: str) -> Any:
        if name in _OWN_ATTRIBUTES or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN_ATTRIBUTES:
            object.__setattr__(self, name, value)
        else:
            setattr(self._optimizer, name, value)

    def __getstate__(self) -> dict:
        return {name: self.__dict__[name] for name in _OWN_ATTRIBUTES}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    # ------------------------------------------------------------------------ the allreduce

    def _allreduce(self, index: Any, grad: Any) -> None:
        size = process_set_size(self._process_set)
        prescale = 1.0 / self._gradient_predivide_factor
        if not self._process_set.included() or (
                size == 1 and prescale == 1.0 and self._comm_hook is None):
            return  # a rank outside the set updates with its own gradient, as in Horovod
        if isinstance(index, (list, tuple)):
            grads, names = list(grad), [str(i) for i in index]
        else:
            grads, names = [grad], [str(index)]
        if self._comm_hook is not None:
            ids = list(index) if isinstance(index, (list, tuple)) else [index]
            hook_reduce_(self._comm_hook, grads, [f"opt.{n}" for n in names],
                         [int(i) for i in ids], self._num_groups, self._process_set)
            return
        allreduce_gradients_(grads, names, prescale_factor=prescale,
                             num_groups=self._num_groups, process_set=self._process_set)

    def update(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        """Sum ``grad`` (one NDArray or a list) over the ranks, then update ``weight``."""
        self._allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        """Sum ``grad`` over the ranks, then update ``weight`` (with an fp32 master copy when
        the wrapped optimizer uses multi-precision)."""
        self._allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    # ------------------------------------------------------------------------ delegation

    @property
    def learning_rate(self) -> float:
        """The wrapped optimizer's current learning rate."""
        return self._optimizer.learning_rate

    def create_state(self, index: Any, weight: Any) -> Any:
        """The wrapped optimizer's state for ``weight``."""
        return self._optimizer.create_state(index, weight)

    def create_state_multi_precision(self, index: Any, weight: Any) -> Any:
        """The wrapped optimizer's (multi-precision) state for ``weight``."""
        return self._optimizer.create_state_multi_precision(index, weight)

    def set_learning_rate(self, lr: float) -> None:
        """Set the wrapped optimizer's learning rate."""
        self._optimizer.set_learning_rate(lr)

    def set_lr_scale(self, args_lrscale: dict) -> None:
        """Set the wrapped optimizer's per-index learning-rate scale (deprecated in MXNet)."""
        self._optimizer.set_lr_scale(args_lrscale)

    def set_lr_mult(self, args_lr_mult: dict) -> None:
        """Set the wrapped optimizer's per-parameter learning-rate multipliers."""
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: dict) -> None:
        """Set the wrapped optimizer's per-parameter weight-decay multipliers."""
        self._optimizer.set_wd_mult(args_wd_mult)

    def _set_current_context(self, device_id: int) -> None:
        self._optimizer._set_current_context(device_id)

    def _update_count(self, index: Any) -> None:
        self._optimizer._update_count(index)

    def _get_lrs(self, indices: Any) -> Any:
        return self._optimizer._get_lrs(indices)

    def _get_lr(self, index: Any) -> Any:
        return self._optimizer._get_lr(index)

    def _get_wds(self, indices: Any) -> Any:
        return self._optimizer._get_wds(indices)

    def _get_wd(self, index: Any) -> Any:
        return self._optimizer._get_wd(index)

    def __repr__(self) -> str:
        return f"DistributedOptimizer({self._optimizer!r})"


def unwrap(optimizer: Any) -> Any | None:
    """The optimizer inside a DistributedOptimizer with its ``rescale_grad`` restored to what it
    was before wrapping, or None for anything else."""
    if not isinstance(optimizer, DistributedOptimizer):
        return None
    inner = optimizer._optimizer
    inner.rescale_grad /= optimizer._rescale_factor
    return inner
