"""Elastic training shared by every frontend: state, the retry loop and the worker's side of the
driver protocol (see ``protocol``)."""

from hora.common.elastic.run import run_fn
from hora.common.elastic.state import ObjectState, State

__all__ = ["ObjectState", "State", "run_fn"]
