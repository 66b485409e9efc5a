"""Where a Spark estimator keeps what it writes: the training data it prepares from the
DataFrame, and per run the checkpoint and the logs (Horovod's ``horovod.spark.common.store``).

A store is a directory on any filesystem fsspec reaches: a local path (:class:`LocalStore`) or
a URL such as ``s3://bucket/prefix``, ``hdfs://namenode/prefix`` or ``file:///shared/prefix``
(:class:`FilesystemStore`). Spark writes the training data there and the ranks read it, so on a
cluster the store must be a path every executor and the driver see.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any
from urllib.parse import urlparse

DEFAULT_CHECKPOINT_FILENAME = "checkpoint"
DEFAULT_LOGS_SUBDIR = "logs"


class Store:
    """A directory of intermediate data and runs.

    Layout under ``prefix_path``: ``intermediate_train_data[.IDX]`` and
    ``intermediate_val_data[.IDX]`` (Parquet datasets), ``runs/RUN_ID/checkpoint`` and
    ``runs/RUN_ID/logs``. Each of ``train_path``, ``val_path``, ``test_path`` and ``runs_path``
    may move its part elsewhere.
    """

    def __init__(self, prefix_path: str, train_path: str | None = None,
                 val_path: str | None = None, test_path: str | None = None,
                 runs_path: str | None = None, save_runs: bool = True,
                 checkpoint_filename: str | None = None,
                 storage_options: dict[str, Any] | None = None) -> None:
        self.prefix_path = self._normalize(prefix_path)
        self._train_path = train_path or self._join(self.prefix_path, "intermediate_train_data")
        self._val_path = val_path or self._join(self.prefix_path, "intermediate_val_data")
        self._test_path = test_path or self._join(self.prefix_path, "intermediate_test_data")
        self._runs_path = runs_path or self._join(self.prefix_path, "runs")
        self._save_runs = save_runs
        self._checkpoint_filename = checkpoint_filename or DEFAULT_CHECKPOINT_FILENAME
        self.storage_options = dict(storage_options or {})

    @staticmethod
    def create(prefix_path: str, *args: Any, **kwargs: Any) -> Store:
        """A :class:`LocalStore` for a local path or ``file://`` URL, else a
        :class:`FilesystemStore`."""
        if LocalStore.matches(prefix_path):
            return LocalStore(prefix_path, *args, **kwargs)
        return FilesystemStore(prefix_path, *args, **kwargs)

    # -- where things go -------------------------------------------------------------------
    def get_train_data_path(self, idx: int | str | None = None) -> str:
        return self._indexed(self._train_path, idx)

    def get_val_data_path(self, idx: int | str | None = None) -> str:
        return self._indexed(self._val_path, idx)

    def get_test_data_path(self, idx: int | str | None = None) -> str:
        return self._indexed(self._test_path, idx)

    @property
    def saving_runs(self) -> bool:
        """Whether runs (checkpoints, logs) are kept in the store after training."""
        return self._save_runs

    def get_runs_path(self) -> str:
        return self._runs_path

    def get_run_path(self, run_id: str) -> str:
        return self._join(self._runs_path, run_id)

    def get_checkpoint_filename(self) -> str:
        return self._checkpoint_filename

    def get_checkpoint_path(self, run_id: str) -> str:
        return self._join(self.get_run_path(run_id), self._checkpoint_filename)

    def get_logs_subdir(self) -> str:
        return DEFAULT_LOGS_SUBDIR

    def get_logs_path(self, run_id: str) -> str:
        return self._join(self.get_run_path(run_id), DEFAULT_LOGS_SUBDIR)

    def spark_path(self, path: str) -> str:
        """``path`` as Spark's readers and writers name it."""
        return path

    # -- reading and writing -------------------------------------------------------------
    @property
    def filesystem(self) -> Any:
        """The fsspec filesystem of ``prefix_path``."""
        import fsspec

        return fsspec.url_to_fs(self.prefix_path, **self.storage_options)[0]

    def exists(self, path: str) -> bool:
        return bool(self.filesystem.exists(path))

    def read(self, path: str) -> bytes:
        with self.filesystem.open(path, "rb") as f:
            return bytes(f.read())

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` whole: readers see the old content or the new, never a
        part (on filesystems that rename atomically)."""
        fs = self.filesystem
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        partial = f"{path}.partial"
        with fs.open(partial, "wb") as f:
            f.write(data)
        fs.mv(partial, path)

    def write_text(self, path: str, text: str) -> None:
        self.write(path, text.encode())

    def read_text(self, path: str) -> str:
        return self.read(path).decode()

    def delete(self, path: str) -> None:
        """Remove ``path`` (a file or a directory tree); nothing when it does not exist."""
        fs = self.filesystem
        if fs.exists(path):
            fs.rm(path, recursive=True)

    def is_parquet_dataset(self, path: str) -> bool:
        """Whether ``path`` holds a Parquet dataset Spark finished writing."""
        return self.exists(self._join(path, "_SUCCESS"))

    def parquet_files(self, path: str) -> list[str]:
        """The Parquet files of the dataset at ``path``, in name order."""
        fs = self.filesystem
        names = [name for name in fs.ls(path, detail=False)
                 if posixpath.basename(name).endswith(".parquet")]
        return sorted(names)

    # -- helpers -------------------------------------------------------------------------
    def _normalize(self, path: str) -> str:
        return path.rstrip("/")

    @staticmethod
    def _join(base: str, *parts: str) -> str:
        return "/".join([base.rstrip("/"), *parts])

    @staticmethod
    def _indexed(path: str, idx: int | str | None) -> str:
        return path if idx is None else f"{path}.{idx}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.prefix_path!r})"


class FilesystemStore(Store):
    """A store at any fsspec URL (``s3://``, ``gs://``, ``hdfs://``, ``file://``, ...).
    ``storage_options`` go to fsspec; Spark must reach the same URL through its own
    connectors."""


class LocalStore(Store):
    """A store in a local directory (or ``file://`` URL). On a cluster the directory must be
    shared by the driver and every executor (NFS and the like)."""

    @staticmethod
    def matches(path: str) -> bool:
        scheme = urlparse(path).scheme
        return scheme in ("", "file")

    def _normalize(self, path: str) -> str:
        path = path.removeprefix("file://")
        return os.path.abspath(path).rstrip("/") or "/"

    def spark_path(self, path: str) -> str:
        return path if path.startswith("file://") else f"file://{path}"


__all__ = ["FilesystemStore", "LocalStore", "Store"]
