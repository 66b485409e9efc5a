"""The bridge between TensorFlow tensors and the engine, without gradients.

Every collective is one Python callable that submits to the engine (``hora.common.ops.submit``)
and waits. Eagerly it runs at once on the tensors (read in place through DLPack);
while a ``tf.function`` is traced it becomes one stateful ``tf.numpy_function`` node, so the
same code runs on every TensorFlow version without a compiled kernel. TensorFlow's automatic
control dependencies keep stateful nodes in program order, so every rank executes its
collectives in the order the code issues them.

A grouped call is one node for all of its tensors (one Python round trip per group).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from hora.common import ops as _ops
from hora.common.process_sets import ProcessSet, global_process_set
from hora.tensorflow._host import as_numpy_dtype, host_view, private, readable, to_tensor

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

    def node(*arrays: np.ndarray) -> list:
        outs = fn([np.asarray(a) for a in arrays])
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


def grouped(collective: str, tensors: Sequence[tf.Tensor], names: Sequence[str],
            op_name: str, shape_of: Callable[[tf.TensorShape], tf.TensorShape] = lambda s: s,
            **request: Any) -> list[tf.Tensor]:
    """One call of ``collective`` on ``tensors`` as one group; in-place collectives work on
    private copies. ``shape_of`` gives each output's static shape from its input's."""
    tensors = list(tensors)
    if not tensors:
        return []
    names = list(names)
    in_place = _ops.OPS[collective].in_place

    def fn(sources: list) -> list:
        bufs = [private(x) if in_place else readable(x) for x in sources]
        handles = _ops.enqueue(collective, bufs, names=names, **request)
        wait_all(handles)
        return bufs if in_place else [_ops.allocated_output(h) for h in handles]

    outs = run(fn, tensors, [t.dtype for t in tensors], op_name)
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
    """Allreduce several groups (each negotiated and fused on its own) in ONE call.

    Used for gradients: one Python round trip per step whatever ``num_groups`` is.
    """
    sizes = [len(g) for g in groups]
    flat = [t for g in groups for t in g]
    if not flat:
        return [[] for _ in groups]
    def fn(sources: list) -> list:
        bufs = [private(x) for x in sources]
        handles = []
        start = 0
        for group_names, count in zip(names, sizes):
            if count:
                handles += _ops.enqueue("allreduce", bufs[start:start + count],
                                        names=list(group_names), op=op, prescale=prescale,
                                        postscale=postscale, process_set=process_set)
            start += count
        wait_all(handles)
        return bufs

    outs = _set_shapes(run(fn, flat, [t.dtype for t in flat], "HorovodGroupedAllreduce"),
                       [t.shape for t in flat])
    result, start = [], 0
    for count in sizes:
        result.append(outs[start:start + count])
        start += count
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

    def fn(sources: list) -> list:
        buf = readable(sources[0])
        split_values = None if len(sources) == 1 else np.asarray(host_view(sources[1]),
                                                                 dtype=np.int32)
        handle = _ops.enqueue("alltoall", [buf], names=[name], splits=split_values,
                              process_set=process_set)[0]
        wait_all([handle])
        received = np.asarray(handle.received_splits(), dtype=np.int32)
        return [_ops.handle_output(handle), received]

    out, received = run(fn, inputs, [tensor.dtype, tf.int32], "HorovodAlltoall")
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
