"""``horarun`` and ``hora.run``: start the ranks of a Hora job and supervise them.

``launch`` parses the command line (``config`` adds ``--config-file`` values), ``slots`` turns
hosts and slots into per-rank coordinates, ``hosts`` reads hostfiles and tells local from remote
hosts, ``env`` builds every rank's environment, ``job`` runs a job on the built-in transport with
``local_exec`` (children, output, failure and signal handling), ``ssh_exec`` (remote ranks) and
``output`` (prefixed lines or per-rank files); ``mpirun`` builds ``--mpi`` command lines,
``check_build`` prints ``-cb``, ``api`` is ``hora.run``, ``run_task`` its per-rank side and
``task`` how the two exchange the function and its results. ``rank_discovery`` is the ranks'
side: it reads what a launcher (horarun, torchrun, mpirun, Slurm) told a rank about its place in
the job.

``from hora.runner import run`` works as ``from horovod.runner import run`` does.
"""

from hora.runner.api import run

__all__ = ["run"]
