"""Hora on Spark: ``hora.spark.run(fn, num_proc=N)`` runs ``fn`` as N Hora ranks in Spark tasks
and returns their results in rank order (Horovod's ``horovod.spark.run``).

The ranks are the tasks of one barrier stage, so Spark starts them together and stops them
together: a rank that fails ends the job, and ``run`` raises with that rank's traceback. The
driver serves the rendezvous store; each task learns its rank from the stage's task list and
gets the store's address and a fresh job secret inside the closure Spark ships, so no MPI, ssh
or driver service is involved. ``import hora.spark`` imports pyspark; ``import hora`` does not.

``runner`` is the driver's side, ``task`` what runs in each Spark task.
"""

from __future__ import annotations

from hora.spark.runner import run

__all__ = ["run"]
