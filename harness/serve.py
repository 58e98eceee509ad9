"""Serve a registered model's GGUF file with llama.cpp's OpenAI-compatible server (llama-cpp-python's ``server``
extra), under the model's registry name, for ``--backend api`` to evaluate:

    python -m harness.serve --model smollm2 --precision gguf-q4_1 --port 8080 &
    python -m harness.eval --model smollm2 --backend api --api-base http://127.0.0.1:8080/v1 --precision gguf-q4_1

The GGUF is the one harness.eval's llamacpp backend runs (the shipped file, or a variant made once in the cache),
loaded with the same CPU-safe settings (ggml's extra CPU buffer types off: they crash llama_decode on CPUs that
report AMX) and flash attention on, each request decoded whole from an empty cache, as the in-process backend decodes
a prompt at --batch-size 1: the two then answer alike, token for token (--prefix-cache reuses the previous request's
prefix: faster, but answers then depend on request order). The server answers one request at a time; to serve N
requests at once, start N servers on N ports and give harness.eval all of them (--api-base URL1,URL2,...): replicas,
each request to the least busy one (llama.cpp's own llama-server batches N slots in one process: bench/api.py). With
NUMPREC_API_KEY set (or --api-key-file FILE) the server refuses requests without that key (the client reads it from
NUMPREC_API_KEY too); a key is never taken from the command line, where every user of the machine can read it. A port
in use, a host that does not resolve or is not this machine's, and missing weights are one line, before the load.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness.core.bounds import THREADS, Bound
from harness.core.cli import ArgParser, input_path, run
from harness.core.errors import UserError

PORT = Bound(1, 65535, "TCP ports end there")
ENGINES = {"llamacpp": "gguf-q4_1", "vllm": "fp32"}  # each engine's default precision


def free_port() -> int:
    """A TCP port nothing on 127.0.0.1 listens on now (for a server started beside another: tests, bench.run)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_serving(processes: list, urls: list[str], seconds: float = 120) -> None:
    """Return once every server answers on its /models (a refusal for want of a key counts as up; a 503 while the
    model loads, as llama-server gives, does not); RuntimeError naming the server's URL where one exits first or
    none answers within ``seconds``."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + seconds
    for url in urls:
        while True:
            try:
                urllib.request.urlopen(url + "/models", timeout=2)
                break
            except urllib.error.HTTPError as refusal:
                if refusal.code in (401, 403):
                    break  # up, and asking for a key
            except OSError:
                pass
            if any(process.poll() is not None for process in processes):
                raise RuntimeError(f"the server at {url} exited before it answered")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server at {url} did not answer within {seconds:.0f} s")
            time.sleep(0.3)


def cpu_safe_llama_cpp():
    """llama_cpp, its model parameters defaulting to the plain CPU buffers harness/backends/llamacpp.py uses (ggml's
    AMX tiles and repacked weights crash llama_decode on CPUs that report AMX), for its high-level Llama class."""
    import llama_cpp

    defaults = llama_cpp.llama_model_default_params
    if getattr(defaults, "cpu_safe", False):
        return llama_cpp

    def cpu_safe_params():
        params = defaults()
        params.use_extra_bufts = False
        return params

    cpu_safe_params.cpu_safe = True
    llama_cpp.llama_model_default_params = cpu_safe_params
    llama_cpp.llama.llama_cpp.llama_model_default_params = cpu_safe_params
    return llama_cpp


def serve(
    gguf: str, alias: str, host: str, port: int, threads: int, api_key: str | None, context: int, prefix_cache: bool
) -> None:
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    llama_cpp = cpu_safe_llama_cpp()
    if not prefix_cache:
        # llama-cpp-python keeps the previous request's keys and values and decodes only what follows the prefix the
        # two share; ggml rounds differently for that other split, so an answer would depend on the request before
        # it. Each request starts from an empty cache instead: the same prompt, the same answer, in any order.
        generate = llama_cpp.Llama.generate

        def fresh_generate(self, tokens, *args, **kwargs):
            self.reset()
            return generate(self, tokens, *args, **kwargs)

        llama_cpp.Llama.generate = fresh_generate
    model = ModelSettings(
        model=gguf,
        model_alias=alias,
        n_ctx=context,
        n_threads=threads,
        n_threads_batch=threads,
        flash_attn=True,  # llama.cpp's own server's "auto" on a CPU, and the in-process backend's setting
        verbose=False,
    )
    app = create_app(server_settings=ServerSettings(host=host, port=port, api_key=api_key), model_settings=[model])
    uvicorn.run(app, host=host, port=port, log_level="warning")


def check_address(host: str, port: int) -> None:
    """Before the model loads: the host is a name that resolves to an address of this machine, and nothing listens on
    the port there (uvicorn would only say so in its own log line, exit 3, after the load)."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UserError(f"--host {host} is no address or host name this machine can resolve; use 127.0.0.1") from None
    family, kind, protocol, _, address = addresses[0]
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: closed connections aside
        try:
            probe.bind(address)
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise UserError(f"port {port} on {host} is in use; pass another --port") from None
            if err.errno == errno.EADDRNOTAVAIL:
                raise UserError(
                    f"--host {host} is not an address of this machine; use 127.0.0.1 (or 0.0.0.0)"
                ) from None
            if err.errno == errno.EACCES:
                raise UserError(f"port {port} needs privileges this user lacks; pass a --port above 1023") from None
            raise UserError(f"cannot listen on {host}:{port}: {err.strerror}") from None


def server_key(key_file: Path | None) -> str | None:
    """The key requests must carry: from --api-key-file, else NUMPREC_API_KEY; never from the command line, which
    every user of the machine can read in the process list."""
    if key_file is None:
        return os.environ.get("NUMPREC_API_KEY") or None
    try:
        key = key_file.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(
            f"cannot read the key from {key_file}: {getattr(err, 'strerror', None) or 'not UTF-8 text'}"
        ) from None
    if not key or len(key.split()) != 1:
        raise UserError(f"{key_file} must hold the key alone, on one line")
    return key


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if any(arg == "--api-key" or arg.startswith("--api-key=") for arg in arguments):
        raise UserError(
            "--api-key would put the key in the process list, where every user of this machine reads it; set "
            "NUMPREC_API_KEY or pass --api-key-file FILE"
        )
    parser = ArgParser(prog="python -m harness.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="llamacpp",
        help="llamacpp (llama-cpp-python's server, GGUF files) or vllm (vLLM's server, checkpoints; from .venv-vllm)",
    )
    parser.add_argument("--model", default="smollm2", help="a registry model (default smollm2)")
    parser.add_argument(
        "--precision", help="gguf-* for llamacpp (default gguf-q4_1); a cast or GPTQ/AWQ one for vllm (default fp32)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=PORT.arg, default=8080, help="TCP port (default 8080)")
    parser.add_argument("--threads", type=THREADS.arg, default=1, help="llama.cpp threads (default 1)")
    parser.add_argument("--context", type=Bound(256, 131_072, "the model's window").arg, default=2048)
    parser.add_argument(
        "--api-key-file",
        type=input_path,
        help="a file holding the key requests must carry (default: NUMPREC_API_KEY, else none)",
    )
    parser.add_argument(
        "--prefix-cache",
        action="store_true",
        help="reuse the previous request's keys and values for the prefix two requests share (faster; an answer can "
        "then depend on the request before it)",
    )
    args = parser.parse_args(argv)
    from harness.backends.vllm import CHECKPOINT_METHODS, check_vllm_kernels
    from harness.models import get_model, get_precision
    from harness.models.weights import variant_weights

    key = server_key(args.api_key_file)
    check_address(args.host, args.port)
    model = get_model(args.model)
    precision = get_precision(model, args.precision or ENGINES[args.engine])
    if args.engine == "vllm":
        if precision.method not in CHECKPOINT_METHODS:  # before any weights are made for it
            raise UserError(f"the vllm engine serves casts and GPTQ/AWQ checkpoints, not {precision.name}")
        check_vllm_kernels(precision)  # a kernel this CPU lacks: said before the server starts
        return serve_vllm(model.name, variant_weights(model, precision), precision, args, key)
    if precision.method != "gguf":
        raise UserError(
            f"the llamacpp engine serves GGUF files (gguf-* precisions), not {precision.name}; add --engine vllm"
        )
    gguf = variant_weights(model, precision)
    serve(gguf, model.name, args.host, args.port, args.threads, key, args.context, args.prefix_cache)
    return 0


def serve_vllm(name: str, weights: str, precision, args, key: str | None) -> int:
    """vLLM's server as this command's child until it exits or Ctrl-C stops both: the key in its environment, never
    on its command line; its console kept in memory (shown with --verbose), and its last line said if it fails.
    vLLM keeps prefix caching on, as the in-process backend has it."""
    import signal
    import subprocess

    from harness.backends.vllm import LoggedChild, engine_environment, server_command

    command = server_command(weights, name, precision, args.host, args.port, args.context)
    env = engine_environment(batch_invariant=False, one_process=False)
    if key:
        env["VLLM_API_KEY"] = key
    child = LoggedChild(command, env, stdin=subprocess.DEVNULL)
    server = child.process
    signal.signal(signal.SIGTERM, lambda *_: server.send_signal(signal.SIGTERM))
    try:
        status = server.wait()
    except KeyboardInterrupt:  # the user's stop: vLLM's too, then a normal end
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        return 0
    if status not in (0, -signal.SIGTERM):
        raise UserError(
            f"vLLM's server exited with status {status}: {child.last_line()} (rerun with --verbose for its log)"
        )
    return 0


if __name__ == "__main__":
    run(main)
