"""gpulaunch: put a command on the right NVIDIA GPUs."""

__version__ = "0.1.0"
