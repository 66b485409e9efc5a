"""``hora.keras.elastic``: the same as ``hora.tensorflow.keras.elastic``."""

from hora.tensorflow.keras.elastic import *
from hora.tensorflow.keras.elastic import __all__  # noqa: F401
