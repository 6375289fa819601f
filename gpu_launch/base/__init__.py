"""The ground floor every stage stands on: no gpulaunch module below it, nothing of the pipeline in it.

``units`` (sizes and durations, parsed and shown), ``text`` (printable text, words, widths), ``records``
(light dataclasses: ``dataclasses`` itself costs start-up), ``streams`` (stdout and stderr that a closed
or full descriptor cannot turn into a traceback), ``interrupt`` (Ctrl-C at any moment, one line). The
exceptions stay at the top as :mod:`gpu_launch.errors`: they are part of the Python API.
"""
