"""Small helpers of the TensorFlow frontend: execution mode, dtypes, names, NumPy conversion.

Nothing here talks to the engine; ``hora.tensorflow.mpi_ops`` does.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from hora.common import ops as _ops

# The dtypes the engine reduces, gathers and broadcasts (bfloat16 travels as uint16 + override).
SUPPORTED_DTYPES: frozenset = frozenset({
    tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64,
    tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.bool,
})

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


def _executing_eagerly() -> bool:
    """True when ops run immediately (eager), False while a ``tf.function`` is being traced."""
    return tf.executing_eagerly()


def normalize_name(name: str) -> str:
    """A TensorFlow tensor or op name with every character outside ``[A-Za-z0-9_]`` replaced
    by ``_`` (``dense/MatMul:0`` -> ``dense_MatMul_0``)."""
    return _NAME_CHARS.sub("_", name)


def check_dtype(tensor: Any, what: str) -> None:
    """Raise ``ValueError`` when the engine cannot carry ``tensor``'s dtype.

    Raises:
        ValueError: an unsupported dtype (complex, string, resource, ...).
    """
    dtype = tf.as_dtype(tensor.dtype)
    if dtype not in SUPPORTED_DTYPES:
        supported = ", ".join(sorted(d.name for d in SUPPORTED_DTYPES))
        raise ValueError(
            f"{what}: tensor type {dtype.name} is not supported; supported types are {supported}"
        )


_graph_names: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()


def _unique_in_graph(name: str) -> str:
    """``name``, or ``name_<k>`` when the graph being traced already used it k times, so two
    operations of one ``tf.function`` never share a name (and tracing is the same on every rank).
    """
    graph = tf.compat.v1.get_default_graph()
    try:
        used = _graph_names.setdefault(graph, {})
    except TypeError:
        return name
    count = used.get(name, 0)
    used[name] = count + 1
    return name if count == 0 else f"{name}_{count}"


def default_name(kind_prefix: str, graph_prefix: str, tensor: Any, name: str | None,
                 ignore_name_scope: bool = False) -> str:
    """The engine name of one operation.

    - ``name`` given: the name itself; while tracing, inside the current name scope unless
      ``ignore_name_scope``.
    - no name, while tracing a ``tf.function``: ``<graph_prefix>_<tensor name>`` (for instance
      ``HorovodAllreduce_dense_MatMul_0``), made unique within the traced function. It is stable
      from step to step (so the engine's response cache hits) and equal on every rank that runs
      the same code.
    - no name, eager: ``<kind_prefix>.noname.<n>`` from a per-process counter; equal on every
      rank as long as the ranks issue unnamed operations in the same order.
    """
    if tf.executing_eagerly():
        return name if name else _ops.auto_name(kind_prefix)
    if name:
        scope = "" if ignore_name_scope else tf.get_current_name_scope()
        return _unique_in_graph(f"{scope}/{name}" if scope else name)
    tensor_name = getattr(tensor, "name", None)
    if not tensor_name:
        return _unique_in_graph(f"{graph_prefix}_noname")
    return _unique_in_graph(f"{graph_prefix}_{normalize_name(tensor_name)}")


def group_base_name(kind_prefix: str, graph_prefix: str, tensors: Sequence[Any],
                    name: str | None) -> str:
    """The shared base name of a grouped operation (see ``default_name``)."""
    return default_name(kind_prefix, graph_prefix, tensors[0] if tensors else None, name)


def grouped_names(base: str, count: int) -> list[str]:
    """``<base>_<i>of<count>`` for i = 1 .. count, the names of a grouped operation's tensors."""
    return [f"{base}_{i + 1}of{count}" for i in range(count)]


def no_autograph(fn: Any) -> Any:
    """Keep AutoGraph from rewriting ``fn`` when it is called inside a ``tf.function``: the
    frontend's Python control flow is over Python values and must run as written."""
    return tf.autograph.experimental.do_not_convert(fn)


def gpu_available(ext_base_name: str = "tensorflow", verbose: bool = False) -> bool:
    """Whether this frontend can run collectives on GPU tensors (Horovod's question, asked by
    scripts that choose a device): False, as Hora reduces host memory only."""
    return False
