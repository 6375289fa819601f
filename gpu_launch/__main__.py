"""`python -m gpu_launch` is the same as the `gpulaunch` console script."""

from gpu_launch.cli import main

if __name__ == "__main__":
    main()
