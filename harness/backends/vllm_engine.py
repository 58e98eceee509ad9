"""vLLM's engine in a process of its own: the half of ``--backend vllm`` that runs in the environment vLLM is
installed in (``.venv-vllm``, or the main one where it has vLLM). harness/backends/vllm.py starts it with this file's
path, so it imports the standard library and vLLM only, never numprec (whose pins that environment does not hold).

It speaks JSON, a message a line: requests on stdin, answers on the file descriptor it was started with
(``--answers FD``); its own stdout is joined to stderr before vLLM is imported, so nothing vLLM prints can break an
answer. The first request loads the model::

    -> {"load": {LLM keyword arguments}, "lora": DIR or null}
    <- {"ready": {"vllm": "0.32.0", "device": "cpu", "dtype": "float32", "attention": "CPU_ATTN", "linear": "...",
                  "seconds": 5.1}}

then each request is one batch of token-id prompts, answered with the generated token ids::

    -> {"generate": [{"ids": [...], "max_tokens": 30, "temperature": 0.0, "top_k": -1, "top_p": 1.0, "seed": 7,
                      "stop": ["\\n"]}, ...]}
    <- {"outputs": [{"ids": [...], "finish": "stop", "stop_string": "\\n"}, ...]}

A failure is answered ``{"error": "one line"}`` and ends the process. End of stdin ends it too.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import time
import traceback

# Started by its path, Python puts this folder first on the import path, where vllm.py (the backend) would shadow
# the vllm package.
if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
    del sys.path[0]


def linear_method(model) -> str:
    """The linear layers' method as vLLM resolved it: a quantization scheme and its kernel class (for example
    ``CompressedTensorsW8A8Fp8 / ChannelWiseTorchFP8ScaledMMLinearKernel``), else ``dense``."""
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if method is None or type(method).__name__.startswith("Unquantized"):
            continue
        scheme = getattr(module, "scheme", None)
        kernel = getattr(scheme, "kernel", None) or getattr(method, "kernel", None)
        parts = [type(part).__name__ for part in (scheme or method, kernel) if part is not None]
        return " / ".join(parts)
    return "dense"


def layer_schemes(model) -> dict:
    """Each linear layer's scheme class as vLLM loaded it (``UnquantizedLinearMethod`` where none), by the
    checkpoint's layer names: a fused layer (qkv_proj, gate_up_proj) stands for each of its members."""
    packed = getattr(model, "packed_modules_mapping", None) or {}
    found = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is None or not type(method).__name__.endswith("LinearMethod"):
            continue
        scheme = type(getattr(module, "scheme", None) or method).__name__
        prefix, _, last = name.rpartition(".")
        for member in packed.get(last, [last]):
            found[f"{prefix}.{member}" if prefix else member] = scheme
    return found


def describe(runner) -> dict:
    """What ran, read from the model runner inside vLLM's worker: attention backend, linear method, and each linear
    layer's scheme."""
    groups = getattr(runner, "attn_groups", None) or [[]]
    attention = groups[0][0].backend.get_name() if groups[0] else "unknown"
    return {"attention": attention, "linear": linear_method(runner.model), "layers": layer_schemes(runner.model)}


def load(request: dict) -> tuple[object, object, dict]:
    import vllm
    from vllm import LLM

    # vLLM's start collects garbage five times, each a walk over the ~600,000 objects its import made, which live as
    # long as the process: frozen, the walks see only what loading makes (LLM() for the embedded model took
    # 3.7-4.1 CPU-s in five of six runs against 5.6-6.2 unfrozen, here). The model's objects stay collectable.
    gc.freeze()
    started = time.monotonic()
    llm = LLM(**request["load"])
    lora = None
    if request.get("lora"):
        from vllm.lora.request import LoRARequest

        lora = LoRARequest("adapter", 1, request["lora"])
    config = llm.llm_engine.vllm_config
    try:  # one engine process (VLLM_ENABLE_V1_MULTIPROCESSING=0): the worker's runner is reachable by a call
        found = llm.llm_engine.model_executor.collective_rpc(lambda worker: describe(worker.model_runner))[0]
    except Exception as err:  # several workers (tensor parallel) answer only calls they can unpickle
        found = {"attention": f"not read ({type(err).__name__})", "linear": "not read", "layers": None}
    info = {
        "vllm": vllm.__version__,
        "device": str(config.device_config.device),
        "dtype": str(config.model_config.dtype).removeprefix("torch."),
        "quantization": config.model_config.quantization or "",
        "graphs": "eager" if config.model_config.enforce_eager else "compiled",
        **found,
        "seconds": round(time.monotonic() - started, 1),
    }
    return llm, lora, info


def generate(llm, lora, rows: list[dict]) -> list[dict]:
    from vllm import SamplingParams

    params = [
        SamplingParams(
            max_tokens=row["max_tokens"],
            temperature=row["temperature"],
            top_k=row["top_k"],
            top_p=row["top_p"],
            seed=row["seed"],
            stop=row["stop"] or None,
            skip_special_tokens=True,
        )
        for row in rows
    ]
    prompts = [{"prompt_token_ids": row["ids"]} for row in rows]
    outputs = llm.generate(prompts, params, lora_request=lora, use_tqdm=False)
    answers = []
    for output in outputs:
        completion = output.outputs[0]
        stop = completion.stop_reason if isinstance(completion.stop_reason, str) else None
        answers.append({"ids": list(completion.token_ids), "finish": completion.finish_reason, "stop_string": stop})
    return answers


def serve(answers) -> None:
    llm = lora = None
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "load" in request:
                llm, lora, info = load(request)
                reply = {"ready": info}
            else:
                reply = {"outputs": generate(llm, lora, request["generate"])}
        except Exception as err:  # the parent turns it into one line; vLLM's traceback is in the log it keeps
            traceback.print_exc()
            reply = {"error": f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"}
        answers.write(json.dumps(reply) + "\n")
        answers.flush()
        if "error" in reply:
            return


def import_early() -> None:
    """vLLM imported before the first request arrives, while the parent loads its tokenizer: the two overlap (the
    import takes 7-8 s here). A failure is left to load(), which answers it in one line."""
    with contextlib.suppress(Exception):
        from vllm import LLM  # noqa: F401


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--answers", type=int, required=True, help="the file descriptor answers are written to")
    args = parser.parse_args()
    answers = os.fdopen(args.answers, "w", encoding="utf-8")
    os.dup2(2, 1)  # whatever vLLM prints goes to the log, never into an answer
    import_early()
    serve(answers)
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
        # The parent has closed this process's input: it asks nothing more, and one process has nothing to hand
        # back. vLLM's shutdown (a collection over every object its import made, the KV cache freed, the
        # interpreter's teardown) took 3.3-4.2 s of a 2-core CPU here; ending now takes 0.4-0.5 s.
        answers.close()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
