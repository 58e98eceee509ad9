"""numprec harness: evaluate language models on the paper's arithmetic tasks at a chosen precision."""

import os

# Set before torch is imported: spinning OpenMP threads cost 2.5-6x on these shared 2-core machines
# (shared/notes/platform-facts.md, "Threads").
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
