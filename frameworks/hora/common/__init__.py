"""Framework-neutral pieces shared by every frontend.

The frontend pipeline: ``ops`` (the engine's enums, the op table, reduce-op resolution, names,
argument checks, submission, waiting with one error policy, integer handles), ``gradients`` (the
gradient of every collective on engine buffers), ``compression`` (the compressor base with a
cast hook per frontend) and ``api`` (the public names every frontend exports). Beside it:
lifecycle and topology (``basics``, which asks ``hora.runner.rank_discovery`` where this
process sits in the job), process sets, the NumPy-level collectives
(``collectives``) and object collectives (``objects``).
"""
