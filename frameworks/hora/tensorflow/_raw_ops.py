"""The bridge between TensorFlow tensors and the engine, without gradients.

Every collective is a ``start`` callable that submits to the engine (``hora.common.ops``) and
returns a ``finish`` that waits. Eagerly both run at once on the tensors (read in place through
DLPack); while a graph is built they become a submit node and a wait node
(``hora.tensorflow._submit_wait``, which explains why such graphs cannot deadlock), so the same
code runs on every TensorFlow version without a compiled kernel.

A grouped call is one submit node and one wait node for all of its tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from hora.common import call_sites
from hora.common import ops as _ops
from hora.common.process_sets import ProcessSet, global_process_set, process_set_by_id
from hora.tensorflow import _device, _submit_wait
from hora.tensorflow._host import (
    PrivatePool,
    as_numpy_dtype,
    host_view,
    readable,
    to_tensor,
)
from hora.tensorflow._submit_wait import Finish, Submitted

NumpyFn = Callable[[list], list]


def run(fn: NumpyFn, inputs: Sequence[tf.Tensor], out_dtypes: Sequence[tf.DType],
        op_name: str) -> list[tf.Tensor]:
    """Run ``fn(sources)`` on ``inputs``; returns its outputs (NumPy arrays) as tensors.

    Eagerly the sources are the tensors themselves; inside a ``tf.function`` they are NumPy
    views of TensorFlow's buffers. Either way ``fn`` must not modify them: it reads them through
    ``readable`` and writes into ``private`` copies.
    """
    inputs = list(inputs)
    out_dtypes = list(out_dtypes)
    if tf.executing_eagerly():
        outs = fn(inputs)
        return [to_tensor(o, d) for o, d in zip(outs, out_dtypes)]

    built_at = call_sites.call_site()  # what stall and deadlock reports name

    def node(*arrays: np.ndarray) -> list:
        outs = call_sites.run_as_if_from(built_at, fn, [np.asarray(a) for a in arrays])
        return [as_numpy_dtype(np.asarray(o), d) for o, d in zip(outs, out_dtypes)]

    outs = tf.numpy_function(node, inputs, out_dtypes, stateful=True, name=op_name)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


wait_all = _ops.wait_all


def _set_shapes(outputs: list[tf.Tensor], shapes: Sequence[tf.TensorShape]) -> list[tf.Tensor]:
    for out, shape in zip(outputs, shapes):
        out.set_shape(shape)
    return outputs


def _rows_unknown(shape: tf.TensorShape) -> tf.TensorShape:
    if shape.rank is None or shape.rank == 0:
        return tf.TensorShape(None)
    return tf.TensorShape([None]).concatenate(shape[1:])


def _start(collective: str, names: Sequence[str], **request: Any) -> _submit_wait.Start:
    """What submits ``collective`` on its sources as one group; in-place collectives work on
    private copies (a graph node reuses its buffers of earlier runs once nothing else holds
    them), on the device for eager GPU tensors that NCCL takes (``_device``). The sources stay
    referenced until the returned ``finish`` ran."""
    names = list(names)
    pool = PrivatePool() if _ops.OPS[collective].in_place else None

    def start(sources: list) -> Finish:
        if _device.takes(sources, request):
            bufs = [_device.writable(x) if pool is not None else _device.readable(x)
                    for x in sources]
        elif pool is not None:
            bufs = pool.copies(sources)
        else:
            bufs = [readable(x) for x in sources]
        handles = _ops.enqueue(collective, bufs, names=names, **request)

        def finish() -> list:
            wait_all(handles)
            return bufs if pool is not None else [_ops.allocated_output(h) for h in handles]

        return finish

    return start


def submit_grouped(collective: str, tensors: Sequence[tf.Tensor], names: Sequence[str],
                   op_name: str, **request: Any) -> Submitted:
    """Submit one call of ``collective`` on ``tensors`` as one group (see ``grouped``).

    Raises:
        ValueError: the process set is not registered (found while the graph is built).
    """
    tensors = list(tensors)
    process_set = request.get("process_set")
    if process_set is not None and process_set.process_set_id is not None:
        process_set_by_id(process_set.process_set_id)
    return _submit_wait.submit(_start(collective, names, **request), tensors,
                               [t.dtype for t in tensors], op_name, names)


def grouped(collective: str, tensors: Sequence[tf.Tensor], names: Sequence[str],
            op_name: str, shape_of: Callable[[tf.TensorShape], tf.TensorShape] = lambda s: s,
            **request: Any) -> list[tf.Tensor]:
    """One call of ``collective`` on ``tensors`` as one group; in-place collectives work on
    private copies. ``shape_of`` gives each output's static shape from its input's."""
    tensors = list(tensors)
    if not tensors:
        return []
    item = submit_grouped(collective, tensors, names, op_name, **request)
    outs = _submit_wait.wait([item])[0]
    return _set_shapes(outs, [shape_of(t.shape) for t in tensors])


# ------------------------------------------------------------------------------------ allreduce


def grouped_allreduce(tensors: Sequence[tf.Tensor], names: Sequence[str], op: int,
                      prescale: float = 1.0, postscale: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Allreduce dense tensors as one group in one call; outputs keep the input shapes."""
    return grouped("allreduce", tensors, names, "HorovodAllreduce", op=op, prescale=prescale,
                   postscale=postscale, process_set=process_set)


def multi_group_allreduce(groups: Sequence[Sequence[tf.Tensor]],
                          names: Sequence[Sequence[str]], op: int, prescale: float = 1.0,
                          postscale: float = 1.0,
                          process_set: ProcessSet = global_process_set) -> list[list[tf.Tensor]]:
    """Allreduce several groups, each negotiated and fused on its own: one submit node per
    group (it starts as soon as that group's tensors exist), then one wait node for all.

    Used for gradients, so that each reduction starts while the others are still computed.
    """
    items = [submit_grouped("allreduce", list(group), group_names, "HorovodAllreduce", op=op,
                            prescale=prescale, postscale=postscale, process_set=process_set)
             for group, group_names in zip(groups, names) if len(group)]
    waited = iter(_submit_wait.wait(items, "HorovodGroupedAllreduce"))
    result = []
    for group in groups:
        if not len(group):
            result.append([])
            continue
        result.append(_set_shapes(next(waited), [t.shape for t in group]))
    return result


# ------------------------------------------------------------------------------------ allgather


def grouped_allgather(tensors: Sequence[tf.Tensor], names: Sequence[str],
                      process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Allgather tensors as one group; dim 0 of the outputs is unknown statically."""
    return grouped("allgather", tensors, names, "HorovodAllgather", _rows_unknown,
                   process_set=process_set)


# ------------------------------------------------------------------------------------ broadcast


def grouped_broadcast(tensors: Sequence[tf.Tensor], names: Sequence[str], root_rank: int,
                      process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Broadcast tensors from ``root_rank`` (a global rank) in one call."""
    return grouped("broadcast", tensors, names, "HorovodBroadcast", root_rank=root_rank,
                   process_set=process_set)


# ------------------------------------------------------------------------------------- alltoall


def alltoall(tensor: tf.Tensor, splits: tf.Tensor | None, name: str,
             process_set: ProcessSet = global_process_set) -> tuple[tf.Tensor, tf.Tensor]:
    """Alltoall of ``tensor`` (``splits`` rows to each set rank, or equal parts); returns the
    received rows and the number of rows received from each rank (int32)."""
    inputs = [tensor] if splits is None else [tensor, tf.cast(splits, tf.int32)]

    def start(sources: list) -> Finish:
        buf = (_device.readable(sources[0]) if _device.takes(sources[:1], {})
               else readable(sources[0]))
        split_values = None if len(sources) == 1 else np.asarray(host_view(sources[1]),
                                                                 dtype=np.int32)
        handle = _ops.enqueue("alltoall", [buf], names=[name], splits=split_values,
                              process_set=process_set)[0]

        def finish(_source: Any = buf) -> list:  # the engine reads the source until done
            wait_all([handle])
            received = np.asarray(handle.received_splits(), dtype=np.int32)
            return [_ops.handle_output(handle), received]

        return finish

    out, received = _submit_wait.run(start, inputs, [tensor.dtype, tf.int32], "HorovodAlltoall",
                                     [name])
    out.set_shape(_rows_unknown(tensor.shape))
    members = process_set.size() if process_set.process_set_id is not None else None
    received.set_shape([members])
    return out, received


# -------------------------------------------------------------------------------- reducescatter


def _reducescatter_rows(dim0: int | None, process_set: ProcessSet) -> int | None:
    if dim0 is None or process_set.process_set_id is None or not process_set.included():
        return None
    n = process_set.size()
    base, extra = divmod(dim0, n)
    return base + (1 if process_set.rank() < extra else 0)


def grouped_reducescatter(tensors: Sequence[tf.Tensor], names: Sequence[str], op: int,
                          prescale: float = 1.0, postscale: float = 1.0,
                          process_set: ProcessSet = global_process_set) -> list[tf.Tensor]:
    """Reducescatter tensors as one group; each output holds this rank's rows."""

    def shape_of(shape: tf.TensorShape) -> tf.TensorShape:
        if shape.rank is None or shape.rank == 0:
            return tf.TensorShape(None)
        return tf.TensorShape([_reducescatter_rows(shape[0], process_set)]).concatenate(shape[1:])

    return grouped("reducescatter", tensors, names, "HorovodReducescatter", shape_of, op=op,
                   prescale=prescale, postscale=postscale, process_set=process_set)


# ---------------------------------------------------------------------------- join and barrier


def join() -> tf.Tensor:
    """Join (see ``hora.tensorflow.join``); returns the last joined rank as an int32 scalar."""

    def fn(sources: list) -> list:
        handle = _ops.enqueue("join", [], names=["join.noname"])[0]
        wait_all([handle])
        return [np.array(handle.last_joined_rank(), dtype=np.int32)]

    out = run(fn, [], [tf.int32], "HorovodJoin")[0]
    out.set_shape([])
    return out


def barrier(process_set: ProcessSet = global_process_set) -> tf.Tensor:
    """Barrier over ``process_set``; returns an int32 scalar 0 once every rank arrived."""

    def fn(sources: list) -> list:
        wait_all(_ops.enqueue("barrier", [], names=["barrier.noname"], process_set=process_set))
        return [np.array(0, dtype=np.int32)]

    out = run(fn, [], [tf.int32], "HorovodBarrier")[0]
    out.set_shape([])
    return out


def runtime_value(getter: Callable[[], int], op_name: str) -> tf.Tensor:
    """An int32 scalar whose value ``getter()`` gives when the op runs (not when traced)."""

    def fn(sources: list) -> list:
        return [np.array(getter(), dtype=np.int32)]

    out = run(fn, [], [tf.int32], op_name)[0]
    out.set_shape([])
    return out
