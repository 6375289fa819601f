"""The parts of ``gpulaunch completions``: shared option data (words), one module per shell, and the
helper the scripts run at completion time. The verb itself is :mod:`gpu_launch.commands.completions`."""
