"""Other libraries speak only when asked: numprec's console is numprec's own lines and progress bars.

The model stack talks on stderr as it is imported and used: torchao's "Failed to load ..." lines for CUDA-only
extensions it cannot load here, torch's ``_pytree`` deprecation notes, bitsandbytes' "Failed to load CPU
gemm_4bit_forward ...", GPT-QModel's banner and its GIL and ENV notices, transformers' FutureWarnings and
conversion bars, gguf's and matplotlib's INFO lines (tokenicer, which gptqmodel imports, turns the root logger on at
INFO). Each is silenced at its source before anything heavy is imported (``harness.core.startup`` calls
``silence_libraries`` when a numprec package is imported):

- environment switches the libraries read when they load (transformers' verbosity, Hugging Face and tqdm progress
  bars; numprec's own bars pass ``disable`` explicitly, so TQDM_DISABLE leaves them alone); a bar another library
  opens with ``disable`` of its own (compressed-tensors' loading bars) opens disabled all the same;
- the root logger gets a handler of its own that drops records, so a library's ``logging.basicConfig`` is a no-op
  and log lines of libraries without handlers of their own go nowhere; torch's, torchao's and bitsandbytes'
  loggers are set to ERROR;
- warnings raised from outside numprec's packages are ignored;
- GPT-QModel's LogBar logger is imported with stdout held back and set to ERROR when gptqmodel imports it;
- llama.cpp's C log goes to a callback that drops it (``silence_llama_cpp``).

``--verbose`` on any command, or ``NUMPREC_VERBOSE=1`` in the environment, leaves all of it on (processes a
command starts inherit the variable).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.abc
import importlib.util
import io
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
    "TORCH_LOGS": "-all",  # torch's own loggers at ERROR (it resets their levels when it is imported)
    "LLM_COMPRESSOR_LOG_LEVEL": "ERROR",  # llm-compressor logs through loguru, past Python's logging
    "BITSANDBYTES_NOWELCOME": "1",
    "AR_LOG_LEVEL": "ERROR",  # AutoRound logs through a handler of its own, its level set from this when imported
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
    _quiet_foreign_bars()
    if "logbar" in sys.modules:
        _quiet_logbar(sys.modules["logbar"])
    elif not any(isinstance(finder, _QuietLogbar) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietLogbar())


def _creator(frame) -> str:
    """The module that asked for a progress bar: the first caller outside tqdm's own modules."""
    while frame is not None and frame.f_globals.get("__name__", "").startswith("tqdm"):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame is not None else ""


def _quiet_foreign_bars() -> None:
    """Bars other libraries open with ``disable`` passed explicitly (compressed-tensors' "Applying quantization
    config", "Dispatching model", "Decompressing model"), which TQDM_DISABLE cannot reach, open disabled; numprec's
    own bars are untouched."""
    import tqdm

    original = tqdm.tqdm.__init__
    if getattr(original, "numprec_quiet", False):
        return

    def quiet_init(bar, *args, **kwargs):
        if _creator(sys._getframe(1)).split(".")[0] not in OWN_PACKAGES:
            kwargs["disable"] = True
        original(bar, *args, **kwargs)

    quiet_init.numprec_quiet = True
    tqdm.tqdm.__init__ = quiet_init


def _quiet_logbar(logbar) -> None:
    logbar.LogBar.shared().setLevel(logging.ERROR)


class _QuietLogbar(importlib.abc.MetaPathFinder):
    """GPT-QModel's logger, LogBar, writes a newline to stdout when it is imported and logs its banner and notices at
    INFO: imported (by gptqmodel, when transformers loads an AWQ/GPTQ checkpoint) with stdout held back, its shared
    logger set to ERROR. Commands that never import it pay nothing."""

    def find_spec(self, name, path, target=None):
        if name != "logbar":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module) -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                execute(module)
                _quiet_logbar(module)

        spec.loader.exec_module = exec_module
        return spec


_LOG_CALLBACK = None  # kept alive: llama.cpp holds a pointer to it


def silence_llama_cpp(llama_cpp) -> None:
    """llama.cpp logs every tensor it loads or quantizes to stderr (C code, past Python's logging); unless verbose,
    its log callback drops them."""
    global _LOG_CALLBACK
    if verbose() or _LOG_CALLBACK is not None:
        return
    _LOG_CALLBACK = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p())
