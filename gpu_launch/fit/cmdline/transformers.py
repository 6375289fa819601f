"""A Transformers script's command line (``python infer.py --model_name_or_path M``, ``torchrun``,
``accelerate launch``): scripts have no one parser, so only the model is read, under the spellings
of the Transformers examples and most scripts (HfArgumentParser accepts ``_`` and ``-`` alike).
"""

from gpu_launch.fit.cmdline import Flag, Table

TABLE = Table("transformers", (
    Flag("model", ("--model", "--model_name_or_path", "--model-name-or-path", "--model_id", "--model-id")),
), source="huggingface/transformers examples (HfArgumentParser)")
