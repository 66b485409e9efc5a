"""``hora.keras``: the Keras 3 API of Hora (``horovod.keras`` / ``horovod.tensorflow.keras``).

Keras 3 with the TensorFlow backend is what ``tf.keras`` is in TensorFlow 2.16+, so this module
is ``hora.tensorflow.keras`` under a second name::

    import hora.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(1e-3)), loss=...)
    model.fit(..., callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])

Other Keras backends (JAX, torch) are not supported: the gradient hooks are TensorFlow ops.
"""

from __future__ import annotations

from hora.tensorflow.keras import *
from hora.tensorflow.keras import __all__, callbacks, elastic  # noqa: F401
