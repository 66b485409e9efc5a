"""Broadcast of Gluon parameters (including ones whose initialization is deferred) and of
arbitrary Python objects."""

from __future__ import annotations

from typing import Any

from hora.common import ops
from hora.common.objects import allgather_object, broadcast_object
from hora.common.process_sets import ProcessSet, global_process_set
from hora.mxnet.compat import import_mxnet
from hora.mxnet.mpi_ops import _Pending

mx = import_mxnet()

__all__ = ["allgather_object", "broadcast_object", "broadcast_parameters"]

_HOOK_ATTRIBUTE = "_hora_deferred_broadcast"


def _is_deferred(param: Any) -> bool:
    return bool(getattr(param, "_deferred_init", ()))


def _broadcast_arrays(entries: list[tuple[list, str]], root_rank: int,
                      process_set: ProcessSet) -> None:
    """Broadcast the first array of each entry from ``root_rank`` and copy it to the others."""
    pending = _Pending()
    try:
        for arrays, name in entries:
            pending.add("broadcast", [arrays[0]], [ops.op_name("broadcast", name)],
                        "broadcast_parameters", root_rank=root_rank, process_set=process_set)
    except BaseException:
        pending.abandon()
        raise
    pending.wait()
    for arrays, _ in entries:
        for other in arrays[1:]:
            arrays[0].copyto(other)


def _hook_deferred_init(param: Any, root_rank: int, name: str, process_set: ProcessSet) -> None:
    """Make ``param`` broadcast its value right after its deferred initialization completes.

    The hook is an instance attribute shadowing ``Parameter._finish_deferred_init``; it removes
    itself once the parameter has data. Hooking a parameter again only updates root and name.
    """
    already_hooked = _HOOK_ATTRIBUTE in vars(param)
    setattr(param, _HOOK_ATTRIBUTE, (root_rank, name, process_set))
    if already_hooked:
        return
    finish = type(param)._finish_deferred_init

    def finish_then_broadcast() -> None:
        finish(param)
        if _is_deferred(param) or getattr(param, "_data", None) is None:
            return
        root, tensor_name, ps = vars(param).pop(_HOOK_ATTRIBUTE)
        vars(param).pop("_finish_deferred_init", None)
        _broadcast_arrays([(param.list_data(), tensor_name)], root, ps)

    param._finish_deferred_init = finish_then_broadcast


def broadcast_parameters(params: Any, root_rank: int = 0, prefix: str | None = None,
                         process_set: ProcessSet = global_process_set) -> None:
    """Overwrite parameters on every rank with their values on ``root_rank``.

    Args:
        params: a dict or ``ParameterDict`` from names to Gluon Parameters or NDArrays (for
            example ``net.collect_params()`` or ``dict(net.collect_params())``). Entries are
            broadcast in sorted-name order as ``broadcast.<prefix>.<name>``. A Parameter whose
            initialization is deferred (shape known only at the first forward pass) is broadcast
            right after that initialization, on every rank.
        root_rank: the global rank whose values are kept.
        prefix: keeps the names of separate calls apart.
        process_set: the ranks taking part.

    Raises:
        ValueError: ``params`` is not a dict or ParameterDict.
        TypeError: an entry is neither a Parameter nor an NDArray.
    """
    if not isinstance(params, (dict, mx.gluon.ParameterDict)):
        raise ValueError(  # noqa: TRY004 (ValueError, as in Horovod)
            f"invalid params of type: {type(params).__name__}; pass a dict or ParameterDict "
            "(for example net.collect_params())"
        )
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError(f"prefix must be a string, got {type(prefix).__name__}")
    lead = f"{prefix}." if prefix else ""
    entries: list[tuple[list, str]] = []
    for key, value in sorted(params.items(), key=lambda item: str(item[0])):
        name = f"{lead}{key}"
        if isinstance(value, mx.gluon.Parameter):
            if _is_deferred(value):
                _hook_deferred_init(value, root_rank, name, process_set)
                continue
            entries.append((value.list_data(), name))
        elif isinstance(value, mx.nd.NDArray):
            entries.append(([value], name))
        else:
            raise TypeError(
                f"broadcast_parameters: entry {key!r} is a {type(value).__name__}, expected a "
                "Parameter or an NDArray"
            )
    if entries:
        _broadcast_arrays(entries, root_rank, process_set)
