"""``horarun``: start the ranks of a Hora job and supervise them.

``launch`` parses the command line, ``slots`` turns hosts and slots into per-rank coordinates,
``local_exec`` spawns the ranks on this host, prefixes their output and stops the job when a rank
fails.
"""
