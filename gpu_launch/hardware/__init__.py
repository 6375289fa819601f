"""The machine as plain data (model), and where it is read from: NVML, a snapshot file or a bundled
example, plus host facts (sysfs, /proc). nvml.py and nvml_topology.py are the only importers of pynvml.

Named ``hardware`` rather than ``machine``: ``gpu_launch.machine`` is the Python API's ``machine()``.
"""
