"""Helpers that keep state identical on every rank: variable broadcasts and object collectives.

Typical start of a custom training loop::

    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(optimizer.variables, root_rank=0)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable

import tensorflow as tf

from hora.common import objects as _objects
from hora.common.process_sets import ProcessSet, global_process_set
from hora.tensorflow.mpi_ops import assign_from_root
from hora.tensorflow.util import no_autograph

__all__ = [
    "allgather_object",
    "broadcast_global_variables",
    "broadcast_object",
    "broadcast_object_fn",
    "broadcast_variables",
]


@no_autograph
def broadcast_variables(variables: Iterable[Any], root_rank: int,
                        process_set: ProcessSet = global_process_set,
                        inplace: bool = False) -> tf.Operation | None:
    """Overwrite every variable with its value on ``root_rank`` (a global rank).

    All values travel in one call as one group. Works with ``tf.Variable`` and Keras 3 variables
    (``model.variables``, ``optimizer.variables``). ``inplace`` is accepted for compatibility
    (the update is always an assignment). Returns None eagerly, the grouped assignment while
    tracing a graph.
    """
    del inplace
    assigned = assign_from_root(list(variables), root_rank, None, process_set,
                                "broadcast_variables")
    if tf.executing_eagerly():
        return None
    return tf.group(*assigned)


def broadcast_global_variables(root_rank: int) -> tf.Operation:
    """Broadcast every global variable of the TF1-style default graph from ``root_rank``.

    Raises:
        RuntimeError: in eager mode (TensorFlow 2 has no global variable collection); use
            ``broadcast_variables(model.variables, root_rank)`` or the Keras
            ``BroadcastGlobalVariablesCallback`` instead.
    """
    if tf.executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. Please use "
            "`hvd.broadcast_variables(<model/optimizer variables>)` instead."
        )
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj: Any, root_rank: int = 0, session: Any = None,
                     name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """Send a picklable object from ``root_rank`` to every rank; returns the root's object.

    The object is serialized with cloudpickle and sent immediately (also when called while a
    graph is traced); ``session`` is accepted for compatibility and not needed. ``name``
    defaults to the object's type name.
    """
    del session
    return _objects.broadcast_object(obj, root_rank=root_rank, name=name,
                                     process_set=process_set)


def broadcast_object_fn(root_rank: int = 0, session: Any = None, name: str | None = None,
                        process_set: ProcessSet = global_process_set) -> Callable[[Any], Any]:
    """A function ``f(obj)`` that broadcasts ``obj`` from ``root_rank`` (see
    ``broadcast_object``)."""

    def fn(obj: Any) -> Any:
        return broadcast_object(obj, root_rank=root_rank, session=session, name=name,
                                process_set=process_set)

    return fn


def allgather_object(obj: Any, session: Any = None, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> list:
    """Collect a picklable object from every rank of the set; returns the list in rank order."""
    del session
    return _objects.allgather_object(obj, name=name, process_set=process_set)
