"""Loads PyTorch's backend conformance suite (``distributed_test.py`` from the torch wheel) for
one backend, with the suite's name checks answered as they would be for gloo.

The suite decides what to run by comparing its module-level ``BACKEND`` (read from the
environment) with backend names, in about 260 places: decorators evaluated while the module
body runs (``skip_but_pass_in_sandcastle_if(BACKEND != "gloo", ...)``,
``require_backend_is_available({"gloo"})``), and branches inside test bodies
(``if BACKEND == "mpi" or BACKEND == "gloo":`` picks the CPU model). A backend that is not
named there gets neither branch: its CPU tests are skipped or break on an unbound variable.

For a backend other than gloo the module is therefore executed from the installed file's own
source (read here at run time, never copied) with one change: the top-level statement
``BACKEND = os.environ["BACKEND"]`` takes a :class:`GlooGatedName` instead. That object is the
string ``"hora"`` (so ``init_process_group(backend=BACKEND)`` starts Hora and every message
names it) that also compares equal to ``"gloo"`` and hashes like it, so every gloo gate opens,
whichever side of ``==``/``!=``/``in`` it stands on (a str subclass's ``__eq__`` is tried first
even for ``"gloo" == BACKEND``; set lookups compare after a hash match). Its ``lower()`` and
``upper()`` are plain ``"hora"``/``"HORA"``, which is what ``dist.Backend(BACKEND)`` and the
suite's ``get_backend`` checks use. (Hashing like ``"gloo"``, it is not found in a set that
holds ``"hora"`` alone; the suite has none.) Because the module body runs with it in place, the
decorators evaluated at import see it too; patching ``BACKEND`` after an import could not
re-evaluate those.

``require_backend_is_available`` also asks ``dist.Backend(BACKEND)`` whether the backend is
available, and for a name other than gloo/nccl/mpi/ucc it looks in
``DistTestCases.backend_feature["plugin"]``, the set the suite keeps for out-of-tree backends;
the backend is added there.

The module is registered in ``sys.modules`` under its own name, so that objects the suite pickles
by reference resolve to this copy in the spawned ranks too (each rank imports the pytest module
first, which loads the suite the same way before anything else asks for it).
"""

from __future__ import annotations

import ast
import importlib.util
import marshal
import os
import sys
import types
import unittest
from typing import Any

SUITE_MODULE = "torch.testing._internal.distributed.distributed_test"
GATE_NAME = "gloo"  # the backend whose gates the loaded suite opens for the backend under test
_INJECTED = "_backend_under_test"
# A directory where the patched suite's compiled code is kept, so that the ranks of every test
# load it instead of compiling the 11,000-line source again (about a second each); optional.
CODE_CACHE_ENV = "TORCH_SUITE_CODE_CACHE"


class GlooGatedName(str):
    """A backend name that also compares (and hashes) equal to ``"gloo"``.

    ``str(name)``, formatting, ``lower()`` and ``upper()`` give the backend's own name.
    """

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str) and str.__eq__(other, GATE_NAME):
            return True
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash(GATE_NAME)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (GlooGatedName, (str(self),))


def suite_path() -> str:
    """The installed ``distributed_test.py`` of the torch this Python imports."""
    spec = importlib.util.find_spec(SUITE_MODULE)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"{SUITE_MODULE} is not installed with this torch")
    return spec.origin


def _backend_assignment(tree: ast.Module) -> ast.Assign:
    found = [
        node for node in tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "BACKEND"
    ]
    if len(found) != 1:
        raise RuntimeError(
            f"{SUITE_MODULE} has {len(found)} top-level assignments to BACKEND, expected one; "
            "this torch's suite is laid out differently, update tests/torch_suite/suite_loader.py"
        )
    return found[0]


def _open_plugin_gate(backend: str) -> None:
    from torch.testing._internal.common_distributed import DistTestCases

    DistTestCases.backend_feature["plugin"].add(backend)


def _patched_code(path: str) -> types.CodeType:
    """The suite's code with ``BACKEND`` bound to the injected name."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    assignment = _backend_assignment(tree)
    assignment.value = ast.copy_location(ast.Name(id=_INJECTED, ctx=ast.Load()),
                                         assignment.value)
    # dont_inherit: this file's ``from __future__ import annotations`` must not turn the suite's
    # annotations into strings (DDP checks a comm hook's ``bucket: dist.GradBucket`` by value).
    return compile(tree, path, "exec", dont_inherit=True)


def _cached_patched_code(path: str) -> types.CodeType:
    """:func:`_patched_code`, through the cache directory named by ``CODE_CACHE_ENV`` if set."""
    cache_dir = os.environ.get(CODE_CACHE_ENV)
    if not cache_dir:
        return _patched_code(path)
    stat = os.stat(path)
    key = f"{stat.st_mtime_ns}-{stat.st_size}-{sys.implementation.cache_tag}"
    cached = os.path.join(cache_dir, f"distributed_test-{key}.marshal")
    if os.path.exists(cached):
        with open(cached, "rb") as f:
            return marshal.load(f)  # type: ignore[no-any-return]
    code = _patched_code(path)
    partial = f"{cached}.{os.getpid()}"
    with open(partial, "wb") as f:
        marshal.dump(code, f)
    os.replace(partial, cached)
    return code


def load_suite(backend: str) -> types.ModuleType:
    """The suite module for ``backend``: imported as it is for gloo, otherwise executed from its
    source with ``BACKEND`` a :class:`GlooGatedName` (see the module docstring)."""
    loaded = sys.modules.get(SUITE_MODULE)
    if loaded is not None:
        if str(loaded.BACKEND) != backend:
            raise RuntimeError(f"{SUITE_MODULE} is already loaded for {loaded.BACKEND!r}, "
                               f"not {backend!r}")
        return loaded
    if backend == GATE_NAME:
        return importlib.import_module(SUITE_MODULE)

    _open_plugin_gate(backend)
    path = suite_path()
    code = _cached_patched_code(path)
    module = types.ModuleType(SUITE_MODULE)
    module.__file__ = path
    module.__dict__[_INJECTED] = GlooGatedName(backend)
    sys.modules[SUITE_MODULE] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 (the installed suite, one statement changed)
    except BaseException:
        del sys.modules[SUITE_MODULE]
        raise
    return module


def close_tests(test_class: type, closed: dict[str, str], backend: str) -> None:
    """Mark each test named in ``closed`` (name -> reason) skipped on ``test_class``.

    Raises:
        RuntimeError: a name that is not a test of ``test_class`` (the suite changed).
    """
    for name, reason in closed.items():
        test = getattr(test_class, name, None)
        if test is None or not name.startswith("test"):
            raise RuntimeError(f"{name} is closed for {backend}, but this torch's suite has no "
                               "such test")
        setattr(test_class, name, unittest.skip(f"closed for {backend}: {reason}")(test))
