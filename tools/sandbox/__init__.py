"""The confined child process that runs model-written Python for ``code.exec_python``.

``sandbox`` starts and limits the run (``run_python``), ``confinement`` chooses and applies
the kernel layer (Landlock, bubblewrap or none), ``write_limit`` measures what a run writes and
removes what a run over its limit created, and ``runner`` is the script the child runs with
``python -I``: it imports nothing of the project, so it stays one file. The package may
import ``actline.storage``, ``actline.timeline``, ``actline.messages`` and
``actline.tools.errors``.
"""
