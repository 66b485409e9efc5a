"""``hora.keras.callbacks``: the callbacks of ``hora.tensorflow.keras.callbacks``."""

from __future__ import annotations

from hora.tensorflow.keras.callbacks import *
from hora.tensorflow.keras.callbacks import __all__  # noqa: F401
