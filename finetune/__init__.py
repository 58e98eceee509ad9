"""LoRA / QLoRA fine-tuning on the paper's arithmetic tasks (appendix tab:lora_config)."""

import harness.core.startup  # noqa: F401  (thread settings and a quiet Ctrl-C before torch loads)
