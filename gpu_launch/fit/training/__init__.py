"""Training sizing: a fine-tuning launch read, each GPU's peak of one step worked out, never sized as inference.

Two halves meet at :mod:`setup`:

* the launch-form readers (``forms_*``: TRL, axolotl, LLaMA-Factory, Hugging Face Trainer flags behind
  torchrun/accelerate/deepspeed/python, torchtune, DeepSpeed JSON and accelerate configs) turn a command
  line and the files it names into a :class:`~gpu_launch.fit.training.setup.TrainingSetup`, listing in
  ``assumed`` whatever decides memory and could not be read;
* the step's memory rules (``memory_*``) turn a model's facts and a setup into a
  :class:`~gpu_launch.fit.training.setup.TrainingPeak` per GPU, each term labelled, checked against
  PyTorch's own accounting of real steps of the real Hugging Face code (tests/test_training_*.py).
"""
