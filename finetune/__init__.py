"""LoRA / QLoRA fine-tuning on the paper's arithmetic tasks (appendix tab:lora_config)."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
