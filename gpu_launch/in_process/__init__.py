"""The machinery under the Python API (:mod:`gpu_launch.api`): what it does inside the calling process.

``gpu_launch.api`` is the module users import; these are its parts, at its layer (beside
``commands/``), imported by it and by nothing below.
"""
