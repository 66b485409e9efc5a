"""Hora on Spark: ``hora.spark.run(fn, num_proc=N)`` runs ``fn`` as N Hora ranks in Spark tasks
and returns their results in rank order (Horovod's ``horovod.spark.run``).

The ranks are the tasks of one barrier stage, so Spark starts them together and stops them
together: a rank that fails ends the job, and ``run`` raises with that rank's traceback. The
driver serves the rendezvous store; each task learns its rank from the stage's task list and
gets the store's address and a fresh job secret inside the closure Spark ships, so no MPI, ssh
or driver service is involved. ``import hora.spark`` imports pyspark; ``import hora`` does not.

``hora.spark.run_elastic(fn, num_proc=N, min_num_proc=M, max_num_proc=K)`` runs ``fn`` as an
elastic job (Horovod's ``horovod.spark.run_elastic``): each Spark task is an agent that offers
its slot to Hora's elastic driver and runs one worker when told to, so a lost task or a failed
worker makes the others re-form from the last committed state, and tasks that start later join.

``runner`` is the driver's side of ``run``, ``task`` what runs in each of its Spark tasks;
``elastic`` is the driver's side of ``run_elastic``, ``agent`` what runs in each of its tasks.
"""

from __future__ import annotations

from hora.spark.elastic import run_elastic
from hora.spark.runner import run

__all__ = ["run", "run_elastic"]
