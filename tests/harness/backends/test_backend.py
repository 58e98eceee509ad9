"""The transformers backend on the real default model: prompts, prefix-cache correctness, batch invariance."""

import pytest
import torch

from harness.backends import Sampling
from harness.questions.answers import FIRST_LINE
from harness.questions.problems import Task, generate
from harness.questions.prompts import user_message
from tests.devices import HAS_CUDA
from tests.harness.helpers import prompts_for

GREEDY = Sampling.named("greedy")


def test_prompt_is_the_papers_template_in_the_chat_template(smollm2_fp32):
    problem = generate(Task("iter_add", 3), 10, 4, 1, seed=5)[0]
    message = user_message(problem)
    assert message.startswith("Please directly calculate the following arithmetic expression in base 10")
    assert "<Expression> = <Result>" in message, "the format line keeps its placeholder"
    assert message.endswith("Arithmetic Expression:\n" + problem.expression)
    prompt = smollm2_fp32.chat_prompt(message)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert f"<|im_start|>user\n{message}<|im_end|>" in prompt
    assert "*" in user_message(generate(Task("mul"), 10, 2, 1)[0]).splitlines()[-1]


def test_prefix_cache_matches_plain_generation(smollm2_fp32):
    """The shared-prefix path must give what the model gives on each prompt alone, without any cache."""
    backend = smollm2_fp32
    problems, prompts = prompts_for(backend, Task("add"), 2, 6, seed=11)
    budget = FIRST_LINE.budget(Task("add"), 10, 2, backend.count_tokens)
    cached = backend.generate(prompts, budget, GREEDY)
    for prompt, generation in zip(prompts, cached, strict=True):
        ids = backend.tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            plain = backend.model.generate(
                ids,
                max_new_tokens=generation.tokens,
                do_sample=False,
                top_k=None,
                top_p=None,
                temperature=None,
                pad_token_id=backend.pad_id,
            )
        text = backend.tokenizer.decode(plain[0, ids.shape[1] :], skip_special_tokens=True)
        assert text == generation.text


def test_the_head_runs_at_one_position_a_row_never_over_the_prefix(smollm2_fp32):
    """The shared prefix (196 tokens of add's prompt) is run for its keys and values only: every call of the output
    head, the prefix's included, sees one position a row (an 8B model's 128k-token head over 196 positions would be
    200 GFLOP and 50 MB of bf16 logits thrown away)."""
    backend = smollm2_fp32
    _, prompts = prompts_for(backend, Task("add"), 1, 3, seed=4)
    seen = []
    hook = backend.model.get_output_embeddings().register_forward_hook(
        lambda module, args, output: seen.append(tuple(args[0].shape))
    )
    backend._prefixes.clear()  # the prefix computed again here, not taken from an earlier test's run
    try:
        backend.generate(prompts, 4, GREEDY)
    finally:
        hook.remove()
    assert seen and seen[0] == (1, 1, backend.model.config.hidden_size), "the prefix's run: one position"
    assert all(shape[1] == 1 for shape in seen), seen


def test_greedy_answers_do_not_depend_on_batch_size(smollm2_fp32):
    backend = smollm2_fp32
    _, prompts = prompts_for(backend, Task("add"), 3, 8, seed=2)
    budget = FIRST_LINE.budget(Task("add"), 10, 3, backend.count_tokens)
    backend.batch_size = 8
    batched = [g.text for g in backend.generate(prompts, budget, GREEDY)]
    backend.batch_size = 1
    try:
        single = [g.text for g in backend.generate(prompts, budget, GREEDY)]
    finally:
        backend.batch_size = 16
    assert batched == single


def test_the_static_cache_path_gives_the_answers_of_the_path_where_rows_leave(smollm2_fp32):
    """The GPU decode path (every row keeps its slot in a static KV cache until all have stopped: one step shape,
    captured as a CUDA graph there), run eagerly here: the same answers as the CPU path, greedy and sampled, in a
    batch with padding and spare slots (6 rows in 8 slots) and in one without (4 rows of one length, where
    transformers leaves the prefill's mask to the attention)."""
    backend = smollm2_fp32
    _, prompts = prompts_for(backend, Task("add"), 2, 12, seed=4)
    prompts = prompts[:6] + prompts[8:]
    budget = FIRST_LINE.budget(Task("add"), 10, 2, backend.count_tokens)
    ids, prefix, _ = backend.prepare(prompts[6:], [budget] * 4)
    assert len({len(x) for x in ids}) == 1 and len(prefix) < len(ids[0]), "the last batch has no padding"
    ids, prefix, _ = backend.prepare(prompts[:6], [budget] * 6)
    assert len({len(x) for x in ids}) > 1, "the first batch has"
    original = (backend.static_decode, backend.batch_size)  # on a GPU the static path is the default
    backend.batch_size = 6
    try:
        for sampling in (GREEDY, Sampling.named("paper")):
            backend.static_decode = False
            dynamic = backend.generate(prompts, budget, sampling, seed=list(range(10)))
            backend.static_decode = True
            static = backend.generate(prompts, budget, sampling, seed=list(range(10)))
            assert backend.graph_error is None
            assert [(g.text, g.tokens) for g in static] == [(g.text, g.tokens) for g in dynamic]
    finally:
        backend.static_decode, backend.batch_size = original
    assert len({g.tokens for g in dynamic}) > 1, "rows stop at different steps: stopped rows ride along"


@pytest.mark.skipif(HAS_CUDA, reason="breaks the CPU code generator; CUDA's needs no C++ compiler")
def test_a_graph_compiler_failure_decodes_the_batch_again_eagerly(tiny_llama):
    """What happens when graph compilation fails, provoked on the CPU through inductor's C++ compiler. On the small
    Llama of tests/tiny.py: tracing the real model's 30 layers took half a minute before the failure."""
    import torch._inductor.config

    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision

    backend = HFBackend(str(tiny_llama), get_precision(get_model("smollm2"), "fp32"), batch_size=4)
    _, prompts = prompts_for(backend, Task("add"), 1, 4, seed=3)
    expected = [g.text for g in backend.generate(prompts, 8, GREEDY)]
    saved = (backend.static_decode, backend.graphs, backend._step, backend.graph_error)
    backend.static_decode, backend.graphs, backend.graph_error = True, True, None
    backend._step = torch.compile(backend._forward_choice, mode="reduce-overhead", dynamic=False)
    try:  # inductor's own patching (pytest's monkeypatch deletes a config entry when it undoes itself)
        no_compiler = torch._inductor.config.patch({"cpp.cxx": ("/nonexistent/c++",)})
        with no_compiler, pytest.warns(UserWarning, match="CUDA graph decoding failed .*; decoding eagerly"):
            texts = [g.text for g in backend.generate(prompts, 8, GREEDY)]
        assert "C++ compiler" in backend.graph_error and not backend.static_decode and not backend.graphs
    finally:
        backend.static_decode, backend.graphs, backend._step, backend.graph_error = saved
    assert texts == expected


def test_generation_stops_at_the_end_of_the_first_line(smollm2_fp32):
    backend = smollm2_fp32
    _, prompts = prompts_for(backend, Task("add"), 1, 16, seed=0)
    for generation in backend.generate(prompts, 40, GREEDY):
        body = generation.text.lstrip()
        assert "\n" not in body.rstrip("\n"), "nothing is generated past the first line"
        assert generation.tokens <= 40


def test_paper_sampling_is_seeded(smollm2_fp32):
    backend = smollm2_fp32
    _, prompts = prompts_for(backend, Task("mul"), 2, 8, seed=4)
    paper = Sampling.named("paper")
    assert (paper.top_k, paper.top_p, paper.temperature) == (50, 0.95, 0.1)
    first = [g.text for g in backend.generate(prompts, 20, paper, seed=9)]
    again = [g.text for g in backend.generate(prompts, 20, paper, seed=9)]
    assert first == again


def test_sampled_answers_depend_on_their_seeds_only(smollm2_fp32):
    """Gumbel-max with noise hashed from (seed, step, token): the same answers at batch sizes 1, 4 and 64 and when
    two processes split the batches; other seeds give other answers."""
    from harness.backends import Shard

    backend = smollm2_fp32
    _, prompts = prompts_for(backend, Task("mul"), 2, 8, seed=4)
    paper = Sampling.named("paper")
    seeds = list(range(100, 108))
    texts = {}
    try:
        for size in (1, 4, 64):
            backend.batch_size = size
            texts[size] = [g.text for g in backend.generate(prompts, 12, paper, seed=seeds)]
        backend.batch_size = 4
        halves = [backend.generate(prompts, 12, paper, seed=seeds, shard=Shard(rank, 2)) for rank in (0, 1)]
    finally:
        backend.batch_size = 16
    assert texts[1] == texts[4] == texts[64]
    assert [(a or b).text for a, b in zip(*halves, strict=True)] == texts[4]
    other = [g.text for g in backend.generate(prompts, 12, paper, seed=[s + 1000 for s in seeds])]
    assert other != texts[4], "the seed decides"


def test_gumbel_draws_follow_the_softmax():
    from harness.backends.sampling import gumbel_choice

    rows = 20_000
    values = torch.log(torch.tensor([[0.5, 0.3, 0.2]])).repeat(rows, 1)
    candidates = torch.tensor([[7, 3, 9]]).repeat(rows, 1)
    seeds = torch.arange(rows, dtype=torch.long)
    chosen = gumbel_choice(values, candidates, seeds, step=3)
    shares = torch.tensor([(chosen == token).double().mean().item() for token in (7, 3, 9)], dtype=torch.double)
    assert torch.allclose(shares, torch.tensor([0.5, 0.3, 0.2], dtype=torch.double), atol=0.015)
    alone = gumbel_choice(values[:7], candidates[:7], seeds[:7], step=3)
    assert alone.tolist() == chosen[:7].tolist(), "a row's draw is its own, whatever else is in the batch"


def test_the_kept_candidates_are_transformers_warpers_kept_tokens():
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from harness.backends.sampling import warped_candidates

    torch.manual_seed(0)
    logits = torch.randn(64, 1000) * 3
    warpers = LogitsProcessorList([TemperatureLogitsWarper(0.1), TopKLogitsWarper(50), TopPLogitsWarper(0.95)])
    reference = warpers(None, logits.clone())
    values, candidates = warped_candidates(logits, 0.1, 50, 0.95)
    for row in range(64):
        kept = set(candidates[row][values[row].isfinite()].tolist())
        assert kept == set(torch.nonzero(reference[row].isfinite()).flatten().tolist())
        assert torch.allclose(
            values[row][values[row].isfinite()], reference[row][list(kept)].sort(descending=True).values
        )


def test_only_float32_weights_are_stored_transposed():
    """A CPU without bf16 instructions multiplies bf16 through the transposed layout 10-30x slower: bf16 weights
    keep the plain one, float32 weights take the transposed one, and both keep their values."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from harness.backends.hf_loading import store_linear_weights_transposed

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    for dtype, transposed in ((torch.float32, True), (torch.bfloat16, False)):
        model = LlamaForCausalLM(config).to(dtype)
        before = {name: p.detach().clone() for name, p in model.named_parameters()}
        store_linear_weights_transposed(model)
        weight = model.model.layers[0].mlp.up_proj.weight
        assert weight.t().is_contiguous() is transposed and weight.is_contiguous() is not transposed
        assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts what makes the host wait for the device: reading a tensor's values (item, tolist, numpy, cpu, bool,
    int, float, index). On a GPU each is a synchronisation; on the CPU they are counted all the same."""

    READS = {
        torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu, torch.Tensor.__bool__,
        torch.Tensor.__int__, torch.Tensor.__float__, torch.Tensor.__index__,
    }  # fmt: skip

    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.READS:
            self.reads.append(func.__name__)
        return func(*args, **(kwargs or {}))


class Launches(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the operators dispatched (on a GPU, each a kernel launch, or part of a captured graph's)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def test_the_static_path_reads_the_device_once_every_k_steps(tiny_llama):
    """The GPU decode loop keeps chosen tokens, positions and masks on the device and reads the tokens of k steps
    at once: counted here as the reads two budgets cost beyond each other (setup and prefill cancel), at most one per
    k steps, with the answers of the path where rows leave the batch. The operators of a step are counted too."""
    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision
    from harness.questions.answers import FreeForm

    backend = HFBackend(str(tiny_llama), get_precision(get_model("smollm2"), "fp32"), batch_size=4)
    _, prompts = prompts_for(backend, Task("add"), 2, 4, seed=7)
    run_on = FreeForm(64)  # to the end of the turn: a random model runs to the budget, whatever it writes
    backend.static_decode, backend.read_every = True, 4
    counted = {}
    for budget in (12, 36):
        reads, launches = HostReads(), Launches()
        with reads, launches:
            static = backend.generate(prompts, budget, GREEDY, answer=run_on)
        counted[budget] = (len(reads.reads), launches.count)
        assert all(g.tokens == budget for g in static), "every row ran to the budget"
    per_step_reads = (counted[36][0] - counted[12][0]) / 24
    per_step_launches = (counted[36][1] - counted[12][1]) / 24
    print(f"static path, 4 rows: {per_step_reads:.3f} host reads and {per_step_launches:.0f} operators a step")
    assert per_step_reads <= 1 / backend.read_every
    backend.static_decode = False
    assert [g.text for g in backend.generate(prompts, 36, GREEDY, answer=run_on)] == [g.text for g in static]


def test_one_compiled_step_serves_every_cell_of_a_grid_per_shape(tiny_llama, capsys):
    """The quick grid's seven cells (two prompt templates: two prefix lengths) and a batch of another size, on the
    static path with the step compiled (dynamo, counting its compilations): one compilation per step shape, each
    announced with its duration, whatever the cell."""
    from torch._dynamo.testing import CompileCounter

    from harness.backends.hf import HFBackend
    from harness.models import get_model, get_precision

    backend = HFBackend(str(tiny_llama), get_precision(get_model("smollm2"), "fp32"), batch_size=16)
    counter = CompileCounter()
    backend.static_decode, backend.graphs = True, True
    backend._step = torch.compile(backend._forward_choice, backend=counter, dynamic=False)
    grid = [(Task("add"), (1, 2, 3)), (Task("iter_add", 3), (1, 2)), (Task("mul"), (1, 2))]
    for task, lengths in grid:
        for length in lengths:
            _, prompts = prompts_for(backend, task, length, 16, style="few-shot")  # its cache widths are counted
            backend.generate(prompts, FIRST_LINE.budget(task, 10, length, backend.count_tokens), GREEDY)
    _, prompts = prompts_for(backend, Task("add"), 2, 8, style="few-shot")
    backend.generate(prompts, 12, GREEDY)
    assert backend.graph_error is None
    assert len(backend.compile_seconds) == 2, backend.compile_seconds  # 16 slots x 64, 8 slots x 64
    assert counter.frame_count == len(backend.compile_seconds), "no recompilation beyond one per shape"
    said = [line for line in capsys.readouterr().err.splitlines() if "decode step" in line]
    assert len(said) == 4 and said[0].startswith("compiling the decode step for 16 rows x 64 positions")
    assert said[1].startswith("compiled the decode step in ")
