"""Other libraries speak only when asked: numprec's console is numprec's own lines and progress bars.

The model stack talks on stderr as it is imported and used: torchao's "Failed to load ..." lines for CUDA-only
extensions it cannot load here, torch's ``_pytree`` deprecation notes, bitsandbytes' "Failed to load CPU
gemm_4bit_forward ...", GPT-QModel's banner and its GIL and ENV notices, transformers' FutureWarnings and
conversion bars, gguf's and matplotlib's INFO lines (tokenicer, which gptqmodel imports, turns the root logger on at
INFO). Each is silenced at its source before anything heavy is imported (``harness.startup`` calls
``silence_libraries`` when a numprec package is imported):

- environment switches the libraries read when they load (transformers' verbosity, Hugging Face and tqdm progress
  bars; numprec's own bars pass ``disable`` explicitly, so TQDM_DISABLE leaves them alone);
- the root logger gets a handler of its own that drops records, so a library's ``logging.basicConfig`` is a no-op
  and log lines of libraries without handlers of their own go nowhere; torch's, torchao's and bitsandbytes'
  loggers are set to ERROR;
- warnings raised from outside numprec's packages are ignored;
- GPT-QModel's LogBar logger, made before gptqmodel is imported, keeps the level ERROR;
- llama.cpp's C log goes to a callback that drops it (``silence_llama_cpp``).

``--verbose`` on any command, or ``NUMPREC_VERBOSE=1`` in the environment, leaves all of it on (processes a
command starts inherit the variable).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import warnings

VERBOSE = "NUMPREC_VERBOSE"
OWN_PACKAGES = ("harness", "finetune", "scratch", "bench", "prompts", "eval_configs", "tests", "__main__")
# Read by the libraries when they are imported: set before, and only where the user has not set them.
SWITCHES = {
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "BITSANDBYTES_NOWELCOME": "1",
}
LOUD_LOGGERS = ("torch", "torch.utils._pytree", "torchao", "bitsandbytes", "gptqmodel", "tokenicer", "gguf")


def verbose() -> bool:
    """Whether the user asked to see other libraries' output: NUMPREC_VERBOSE=1, or ``--verbose`` given to the
    command being started (while ``python -m`` imports it, sys.argv[0] is "-m")."""
    if os.environ.get(VERBOSE, "") not in ("", "0"):
        return True
    return sys.argv[:1] == ["-m"] and "--verbose" in sys.argv[1:]  # python -m COMMAND ... --verbose, importing


class _Drop(logging.Handler):
    """The root logger's handler in quiet mode: a record that reaches it has no handler of its own to go to."""

    def emit(self, record: logging.LogRecord) -> None:
        pass


def silence_libraries() -> None:
    """Quiet every library numprec loads, unless ``verbose()``; then make sure child processes inherit verbose."""
    if verbose():
        os.environ[VERBOSE] = "1"
        return
    for name, value in SWITCHES.items():
        os.environ.setdefault(name, value)
    root = logging.getLogger()
    if not any(isinstance(handler, _Drop) for handler in root.handlers):
        root.addHandler(_Drop())
    root.setLevel(logging.ERROR)
    for name in LOUD_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    # module is a regular expression matched at the start of the module a warning is attributed to
    warnings.filterwarnings("ignore", module=rf"(?!(?:{'|'.join(OWN_PACKAGES)})(?:\.|$))")
    try:
        from logbar import LogBar  # GPT-QModel's logger; a shared instance made now keeps this level
    except ImportError:
        return
    LogBar.shared().setLevel(logging.ERROR)


_LOG_CALLBACK = None  # kept alive: llama.cpp holds a pointer to it


def silence_llama_cpp(llama_cpp) -> None:
    """llama.cpp logs every tensor it loads or quantizes to stderr (C code, past Python's logging); unless verbose,
    its log callback drops them."""
    global _LOG_CALLBACK
    if verbose() or _LOG_CALLBACK is not None:
        return
    _LOG_CALLBACK = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p())
