"""Hugging Face Accelerate (and the Trainer built on it) over the ``hora`` backend.

Accelerate chooses the backend itself; on CPU it accepts gloo or mpi only, so
``PartialState(cpu=True, backend="hora")`` and ``InitProcessGroupKwargs(backend="hora")`` are
refused by Accelerate ("Your assigned backend hora is not available, please use gloo"). It does
train on a default process group that exists before it starts, whatever that group's backend, but
then reports ``gloo``. ``state()`` creates that group with ``hora`` and makes Accelerate's shared
state report the backend it really runs on::

    from hora.torch.accelerate import state
    state()                                   # before Accelerator(...) or TrainingArguments(...)
    accelerator = Accelerator(cpu=True)       # accelerator.state.backend == "hora"

``transformers.TrainingArguments`` reset Accelerate's state unless told to keep it: give them
``use_cpu=True, accelerator_config={"use_configured_state": True}`` (without it training still
runs over the hora group, but ``args.distributed_state.backend`` says gloo).

It needs a launcher that tells each process its place (torchrun, ``accelerate launch``,
``horarun``: RANK, WORLD_SIZE, LOCAL_RANK in the environment), as Accelerate itself does.
"""

from __future__ import annotations

from typing import Any

BACKEND_NAME = "hora"


def state(**init_process_group_kwargs: Any) -> Any:
    """Accelerate's ``PartialState`` on CPU over a default process group of the ``hora`` backend.

    Creates the default group (``init_process_group("hora", **init_process_group_kwargs)``, from
    the launcher's environment by default) unless it exists, then Accelerate's shared state, whose
    ``backend`` then says ``hora``. Call it before ``Accelerator(...)``, ``PartialState(...)`` or
    ``transformers.TrainingArguments(...)`` are made; they share this state (the latter with
    ``accelerator_config={"use_configured_state": True}``).

    Raises:
        ValueError: a default group of another backend exists already, or Accelerate's state was
            made before (it would keep its own backend); the message says which.
    """
    import torch.distributed as dist
    from accelerate import PartialState

    if not dist.is_initialized():
        dist.init_process_group(BACKEND_NAME, **init_process_group_kwargs)
    elif dist.get_backend() != BACKEND_NAME:
        raise ValueError(f"hora.torch.accelerate.state: the default process group exists already "
                         f"with backend {dist.get_backend()!r}; call state() before anything "
                         "initializes torch.distributed")
    if PartialState._shared_state:
        raise ValueError("hora.torch.accelerate.state: Accelerate's state exists already (an "
                         "Accelerator or PartialState was made first); call state() before them")
    shared = PartialState(cpu=True)
    shared.backend = BACKEND_NAME
    return shared
