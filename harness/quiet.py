"""Libraries that talk at import or load time, kept quiet: our progress bar is the one that counts problems."""

from __future__ import annotations


def quiet_transformers() -> None:
    """Our progress bar is the one that counts problems; transformers' loading bars and notices are noise, and so
    are torchao's notes (imported by gptqmodel) on CUDA-only libraries it cannot load."""
    import logging

    for name in ("torchao", "torch.utils._pytree"):  # before transformers' import, which imports torchao
        logging.getLogger(name).setLevel(logging.ERROR)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def quiet_gptqmodel() -> None:
    """gptqmodel (which transformers loads AWQ checkpoints through) prints a banner and kernel notices through
    logbar at INFO; its shared logger, made here before gptqmodel's import, keeps the level set here."""
    import logging

    from logbar import LogBar

    LogBar.shared().setLevel(logging.WARNING)
