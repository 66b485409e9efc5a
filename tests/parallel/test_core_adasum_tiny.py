"""Adasum of gradients near the smallest normal float32: the norms are tiny but not zero.

Every rank holds a multiple of one vector whose values are about FLT_MIN, so their squares (about
1e-76) are well inside double's range; Adasum of parallel vectors is then their average, not
their sum, as Horovod's stability test expects. Adasum needs a power-of-two rank count; other
counts get an error on every rank.
"""

from __future__ import annotations

import hora
import numpy as np
import pytest
from conftest import check_next_op_works, is_power_of_two, rank, size


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adasum_of_tiny_parallel_vectors_is_their_average(dtype: str) -> None:
    n = size()
    rng = np.random.default_rng(2)
    tiny = float(np.finfo(np.float32).tiny)
    direction = rng.normal(0.0, tiny, 1024)
    scales = rng.uniform(0.5, 2.0, n)
    # Powers of two times the direction: exact in float32, so every rank's vector is parallel.
    scales = 2.0 ** np.round(np.log2(scales))
    xs = [(direction * s).astype(dtype) for s in scales]
    name = f"adasum.tiny.{dtype}"
    if not is_power_of_two(n):
        with pytest.raises((ValueError, hora.HoraError)):
            hora.allreduce(xs[rank()], op=hora.Adasum, name=name)
        check_next_op_works(name)
        return
    out = hora.allreduce(xs[rank()], op=hora.Adasum, name=name)
    expected = sum(x.astype(np.float64) for x in xs) / n
    err = np.linalg.norm(out.astype(np.float64) - expected) / np.linalg.norm(expected)
    assert err < 1e-5, (err, out[:3], expected[:3])
