"""Helpers that keep model and optimizer state identical on every rank, and object collectives.

Typical start of a training script::

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from hora.common import objects
from hora.common.process_sets import ProcessSet, global_process_set
from hora.torch._async_ops import broadcast_async_, synchronize

_ROOT_WAS_EMPTY = "__hora_root_state_was_empty__"


def broadcast_object(
    obj: Any,
    root_rank: int = 0,
    name: str | None = None,
    process_set: ProcessSet = global_process_set,
) -> Any:
    """Send a picklable object from ``root_rank`` to every rank and return it everywhere.

    The object is serialized with cloudpickle; ``name`` defaults to the object's type name.
    """
    return objects.broadcast_object(
        obj, root_rank=root_rank, name=name, process_set=process_set
    )


def allgather_object(
    obj: Any, name: str | None = None, process_set: ProcessSet = global_process_set
) -> list[Any]:
    """Collect a picklable object from every rank; returns the list ordered by rank."""
    return objects.allgather_object(obj, name=name, process_set=process_set)


def _named_items(params: Any) -> list[tuple[str | None, torch.Tensor]]:
    if isinstance(params, Mapping):
        return sorted(params.items(), key=lambda item: str(item[0]))
    if isinstance(params, Iterable) and not isinstance(params, (str, bytes, torch.Tensor)):
        items: list[tuple[str | None, torch.Tensor]] = []
        for entry in params:
            if isinstance(entry, tuple):
                if len(entry) != 2:
                    raise ValueError("expected (name, tensor) pairs in params")
                items.append((entry[0], entry[1]))
            else:
                items.append((None, entry))
        return items
    raise ValueError(f"invalid params of type: {type(params)}")


def broadcast_parameters(
    params: Mapping[str, torch.Tensor] | Iterable[Any],
    root_rank: int,
    process_set: ProcessSet = global_process_set,
) -> None:
    """Overwrite the given tensors in place with ``root_rank``'s values.

    Args:
        params: a ``state_dict()`` (broadcast in the order of its sorted names) or a list of
            ``(name, tensor)`` pairs such as ``model.named_parameters()`` (plain tensors work
            too; they get automatic names).
        root_rank: global rank whose values win.
        process_set: ranks that take part.

    All broadcasts are started before the first is waited for, so they can run together.
    """
    handles: list[int] = []
    copy_back: list[tuple[torch.Tensor, torch.Tensor]] = []
    for name, tensor in _named_items(params):
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"parameter {name!r} is a {type(tensor).__name__}, not a tensor")
        target = tensor.detach()
        if not target.is_contiguous():
            staging = target.contiguous()
            copy_back.append((target, staging))
            target = staging
        handles.append(broadcast_async_(target, root_rank, name=name, process_set=process_set))
    first_error: Exception | None = None
    for handle in handles:
        try:
            synchronize(handle)
        except (RuntimeError, ValueError, TypeError) as exc:
            if first_error is None:
                first_error = exc
    if first_error is not None:
        raise first_error
    for target, staging in copy_back:
        target.copy_(staging)


def _sparse_parameters(model: torch.nn.Module | None) -> set[int]:
    """Ids of the parameters of the model's sparse embeddings (their gradients are sparse)."""
    if model is None:
        return set()
    return {id(p) for m in model.modules()
            if isinstance(m, torch.nn.Embedding) and m.sparse for p in m.parameters()}


def _initialise_state(optimizer: torch.optim.Optimizer, sparse: set[int]) -> None:
    """Create the optimizer's state by a step on zero gradients, leaving parameters unchanged.

    As in Horovod, every parameter that requires a gradient keeps the zero gradient it was
    given (sparse for SparseAdam, and for SGD on a sparse embedding); the others keep None.
    """
    saved = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                saved.append((p, p.detach().clone()))
                grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or (
                        isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    grad = grad.to_sparse()
                p.grad = grad
    local_step = getattr(optimizer, "_local_step", None)
    if local_step is not None:
        local_step()
    else:
        optimizer.step()
    with torch.no_grad():
        for p, data in saved:
            p.copy_(data)


def broadcast_optimizer_state(
    optimizer: torch.optim.Optimizer,
    root_rank: int,
    model: torch.nn.Module | None = None,
    process_set: ProcessSet = global_process_set,
) -> None:
    """Make every rank's optimizer state and hyperparameters equal to ``root_rank``'s.

    Works on a plain torch optimizer or a DistributedOptimizer. A rank whose state is still empty
    first creates it with a step on zero gradients: as in Horovod, every parameter that requires
    a gradient is left with a zero gradient (``model`` names the sparse embeddings whose zero
    gradient must be sparse), but the parameters themselves are left as they were. Tensor
    state is broadcast in place under the names ``<state key>.<occurrence>``; scalar state and the
    parameter-group options (lr, momentum, ...) travel in one ``broadcast_object``. When the root
    itself had no state yet, every rank ends with an empty (fresh) state.

    Raises:
        ValueError: for ``torch.optim.LBFGS``, whose state cannot be broadcast this way.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")  # noqa: TRY004
    was_empty = len(optimizer.state) == 0
    if was_empty:
        _initialise_state(optimizer, _sparse_parameters(model))

    tensors: list[tuple[str, torch.Tensor]] = []
    scalars: dict[str, Any] = {_ROOT_WAS_EMPTY: was_empty}
    places: dict[str, tuple[dict, Any]] = {}
    occurrences: dict[str, int] = defaultdict(int)
    for index, group in enumerate(optimizer.param_groups):
        for option in sorted(k for k in group if k != "params"):
            key = f"{option}.{index}"
            scalars[key] = group[option]
            places[key] = (group, option)
        for p in group["params"]:
            state = optimizer.state.get(p)
            if not state:
                continue
            for entry in sorted(state, key=str):
                occurrences[str(entry)] += 1
                key = f"{entry}.{occurrences[str(entry)]}"
                value = state[entry]
                if isinstance(value, torch.Tensor):
                    tensors.append((key, value))
                else:
                    scalars[key] = value
                    places[key] = (state, entry)

    broadcast_parameters(tensors, root_rank, process_set=process_set)
    received = broadcast_object(
        scalars, root_rank=root_rank, name="optimizer_state", process_set=process_set
    )
    for key, value in received.items():
        place = places.get(key)
        if place is not None:
            container, entry = place
            container[entry] = value
    if received.get(_ROOT_WAS_EMPTY):
        optimizer.state.clear()
