"""Type stub of ``hora._core``, the engine's extension module (bindings/*.cc).

Use the ``hora`` package instead of this module; the stub lets editors and type checkers see
what the package calls.
"""

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

version: str
__version__: str

class OpKind(enum.IntEnum):
    """Kind of a submitted operation (the engine's ``OpKind``)."""

    ALLREDUCE = 0
    ALLGATHER = 1
    BROADCAST = 2
    JOIN = 3
    ADASUM = 4
    ALLTOALL = 5
    BARRIER = 6
    REDUCESCATTER = 7

class ReduceOp(enum.IntEnum):
    """Reduction of allreduce/reducescatter (the engine's ``ReduceOp``, Horovod's numbers)."""

    AVERAGE = 0
    SUM = 1
    ADASUM = 2
    MIN = 3
    MAX = 4
    PRODUCT = 5

class DeviceTensor:
    """A GPU result of the engine, used through DLPack."""

    def __dlpack__(self, *, stream: Any = ..., max_version: Any = ..., dl_device: Any = ...,
                   copy: Any = ...) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    @property
    def data_ptr(self) -> int: ...
    @property
    def shape(self) -> list[int]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def nbytes(self) -> int: ...

class Handle:
    """One submitted operation."""

    def poll(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def output(self) -> np.ndarray | DeviceTensor | None: ...
    def received_splits(self) -> list[int]: ...
    def last_joined_rank(self) -> int: ...

class StoreServer:
    """The rendezvous key-value store, served from this process."""

    def __init__(self, host: str = "0.0.0.0", port: int = 0, secret: str = "") -> None: ...
    @property
    def port(self) -> int: ...
    def stop(self) -> None: ...

def init(
    rank: int,
    size: int,
    local_rank: int,
    local_size: int,
    cross_rank: int,
    cross_size: int,
    transport: str = "tcp",
    controller: str = "",
    store_host: str = "",
    store_port: int = 0,
    serve_store: bool = False,
    secret: str = "",
    listen_host: str = "",
    process_sets: Sequence[Sequence[int]] = ...,
    mpi_comm: int = -1,
) -> None: ...
def shutdown() -> None: ...
def is_initialized() -> bool: ...
def topology() -> dict[str, int]: ...
def enqueue(
    kind: int,
    tensors: Sequence[Any],
    names: Sequence[str],
    process_set_id: int = 0,
    reduce_op: int = 1,
    prescale: float = 1.0,
    postscale: float = 1.0,
    root_rank: int = 0,
    splits: Sequence[int] | None = None,
    call_site: str = "",
    dtype_overrides: Sequence[str | None] | None = None,
) -> list[Handle]: ...
def add_process_set(ranks: Sequence[int]) -> int: ...
def remove_process_set(id: int) -> None: ...
def process_set_ranks(id: int) -> list[int]: ...
def process_set_ids() -> list[int]: ...
def transport_name() -> str: ...
def start_timeline(path: str, mark_cycles: bool = False) -> None: ...
def stop_timeline() -> None: ...
def mpi_comm_info(comm: int = -1, ranks: Sequence[int] = ...) -> dict[str, int]: ...
def mpi_threads_supported() -> bool: ...
def mpi_built() -> bool: ...
def nccl_built() -> int: ...
def gpu_info() -> dict[str, Any]: ...
def tcp_built() -> bool: ...
def env_vars() -> list[tuple[str, str, str]]: ...
def lookup_env(name: str) -> str | None: ...
