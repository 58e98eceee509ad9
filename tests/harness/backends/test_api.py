"""The api backend against a real server on 127.0.0.1: llama.cpp's OpenAI-compatible server (harness.serve) serving
the embedded SmolLM2 GGUF, started here on free ports; faults injected by a proxy in front of it (tests/api_proxy.py).
Requests go to 127.0.0.1 only; every request loop is bounded by the backend's retries and timeouts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.backends.api import entry_digest
from harness.core.cli import run
from harness.diff import by_problem, same_output
from harness.eval import main
from harness.serve import wait_until_serving
from tests.api_proxy import FaultProxy
from tests.console import foreign_lines
from tests.harness.helpers import ROOT, command_env, free_port, run_module

# One xdist worker runs the modules of group "api": one server for the module.
pytestmark = pytest.mark.xdist_group("api")

# The zero-shot prompt throughout: what these tests ask of the server is its requests, faults and answers compared
# with others of the same prompt, and the server decodes each prompt whole from an empty cache: a third of the
# few-shot one's tokens halves its work.
PROMPT = ["--prompt", "zero-shot"]
GRID = ["--tasks", "add,mul", "--lengths", "1", "--samples", "3"]
SMALL = ["--tasks", "add", "--lengths", "1", "--samples", "5"]  # where what is tested is the requests, not answers
TWO = ["--tasks", "add", "--lengths", "1", "--samples", "2"]  # where what is tested is who answered


class Server:
    """``python -m harness.serve`` on a port of its own, started and stopped by the test."""

    def __init__(self, port: int | None = None, api_key: str | None = None):
        self.port, self.api_key, self.process = port or free_port(), api_key, None

    def start(self) -> Server:
        args = [sys.executable, "-m", "harness.serve", "--port", str(self.port), "--threads", "1"]
        env = {k: v for k, v in command_env().items() if k not in ("NUMPREC_API_KEY", "OPENAI_API_KEY")}
        if self.api_key:  # from the environment: a key on the command line is in every user's process list
            env["NUMPREC_API_KEY"] = self.api_key
        self.process = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until_serving([self.process], [self.url], seconds=90)
        except RuntimeError as error:
            tail = self.process.stderr.read()[-2000:] if self.process.poll() is not None else ""
            raise RuntimeError(f"harness.serve: {error} {tail}") from None
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> str:
        """Ctrl-C, as a user stops it: what it printed on stderr while it served."""
        self.process.send_signal(signal.SIGINT)
        try:
            _, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return err

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(scope="module")
def server():
    served = Server().start()
    yield served
    foreign = foreign_lines(served.stop())
    assert not foreign, f"harness.serve spoke other libraries' lines: {foreign[:5]}"


def evaluate(out: Path, *args: str, capsys=None, env: dict | None = None) -> tuple[int, list[str]]:
    """harness.eval in this process, as python -m harness.eval runs it: (exit status, stderr lines)."""
    saved = {name: os.environ.get(name) for name in (env or {})}
    os.environ.update(env or {})
    try:
        with pytest.raises(SystemExit) as exit_info:
            run(main, [*args, "--out", str(out)])
    finally:
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)
    err = capsys.readouterr().err if capsys else ""
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
    return exit_info.value.code, lines


def api(base: str, *extra: str, grid: list[str] = SMALL) -> list[str]:
    return ["--backend", "api", "--api-base", base, "--precision", "gguf-q4_1", *PROMPT, *grid, *extra]


def rows(out: Path) -> list[dict]:
    import csv

    with open(out / "results.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def clean_run(server, tmp_path_factory):
    """The grid through the server with nothing in the way, at concurrency 1."""
    out = tmp_path_factory.mktemp("clean") / "run"
    assert evaluate(out, *api(server.url, "--concurrency", "1", grid=GRID))[0] == 0
    return out


@pytest.fixture(scope="module")
def clean_small(server, tmp_path_factory):
    """The small grid through the server with nothing in the way."""
    out = tmp_path_factory.mktemp("clean-small") / "run"
    assert evaluate(out, *api(server.url, "--concurrency", "1"))[0] == 0
    return out


def requests_per_problem(run: Path) -> list[int]:
    """Completion requests each problem took, in the order sent at concurrency 1: a completion whose first line is
    blank is continued, one more request per leading newline (the server stops at a newline). Which ones are is the
    model's output on this CPU, so it is read from a clean run's journal."""
    texts = [json.loads(line)["text"] for line in (run / "responses.jsonl").read_text().splitlines()]
    return [1 + text[: len(text) - len(text.lstrip())].count("\n") for text in texts]


def test_completions_mode_gives_the_in_process_llamacpp_answers(clean_run, tmp_path, capsys):
    """The same prompt text (the model's chat template applied here), greedy, no repetition penalty: the server
    answers exactly what the in-process llamacpp backend answers one problem at a time (outputs compared as
    harness.diff does, the stop newline the server drops aside). Both decode each prompt whole from an empty cache
    with flash attention on; ggml rounds a prompt decoded in other pieces differently (a prefix shared by a batch,
    then the rest: logits apart by up to ~1), which is why the comparison is at batch size 1."""
    local = tmp_path / "local"
    assert evaluate(local, "--precision", "gguf-q4_1", *PROMPT, *GRID, "--batch-size", "1", capsys=capsys)[0] == 0
    served, here = by_problem(clean_run), by_problem(local)
    assert served.keys() == here.keys() and len(served) == 6
    differing = [
        (here[key]["output"], served[key]["output"]) for key in served if not same_output(served[key], here[key])
    ]
    assert not differing, differing
    row = rows(clean_run)[0]
    assert (row["backend"], row["precision_source"], row["served_model"], row["request_mode"]) == (
        "api",
        "declared",
        "smollm2",
        "completions",
    )
    assert row["endpoint"].startswith("http://127.0.0.1:") and int(row["prompt_tokens"]) > 3 * 50
    assert "declared" in (clean_run / "summary.md").read_text()
    records = [json.loads(line) for line in (clean_run / "responses.jsonl").read_text().splitlines()]
    assert len(records) == 6, "the journal is evidence of every request"
    assert all(r["model"] == "smollm2" and r["completion_tokens"] >= 1 and r["prompt_tokens"] > 50 for r in records)


def test_chat_mode_and_two_replicas(server, tmp_path, capsys):
    """Chat mode (the server's template) runs; with two base URLs (replicas) both take requests; --thinking off is
    sent as the server template's switch (chat_template_kwargs, as vLLM and SGLang take it)."""
    with FaultProxy(server.port) as proxy:
        code, err = evaluate(
            tmp_path / "chat",
            *api(f"{proxy.url},{server.url}", "--api-endpoint", "chat", "--concurrency", "2", "--thinking", "off"),
            capsys=capsys,
        )
        assert code == 0, err
        assert 0 < proxy.forwarded < 5, "each replica took some of the 5 requests"
        assert proxy.bodies and all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in proxy.bodies)
    assert {row["request_mode"] for row in rows(tmp_path / "chat")} == {"chat"}


# Each of the five requests meets one fault, then its retry goes through.
FAULTS = [
    ("status", 429, {"Retry-After": "1"}),
    ("status", 500, {}),
    ("drop",),  # the connection closed with no reply
    ("slow", 14),  # past the 10 s timeout, which no real request of 5 one-digit sums reaches on a loaded machine
    ("badjson",),
]


def test_every_fault_is_retried_and_the_run_equals_a_clean_one(server, clean_small, tmp_path, capsys):
    with FaultProxy(server.port) as proxy:
        for fault in FAULTS:
            proxy.faults.extend([fault, ("pass",)])
        args = api(proxy.url, "--concurrency", "1", "--api-retries", "2", "--api-timeout", "10")
        code, err = evaluate(tmp_path / "run", *args, capsys=capsys)
        assert not proxy.faults, "every fault was met"
    assert code == 0, err
    ours, clean = by_problem(tmp_path / "run"), by_problem(clean_small)
    assert ours.keys() == clean.keys() and all(same_output(ours[key], clean[key]) for key in clean)


def test_a_fault_that_outlasts_the_retries_is_one_line_and_loses_nothing(server, clean_small, tmp_path, capsys):
    """Two requests answer, then every request gets a 500: one line, exit 2; the two answers are kept, and the
    rerun sends only the other three, then equals the clean run."""
    out = tmp_path / "run"
    requests = requests_per_problem(clean_small)
    answered = max(k for k in range(len(requests) + 1) if sum(requests[:k]) <= 2)
    with FaultProxy(server.port) as proxy:
        proxy.faults.extend([("pass",)] * 2 + [("status", 500, {})] * 50)
        code, err = evaluate(out, *api(proxy.url, "--concurrency", "1", "--api-retries", "1"), capsys=capsys)
        fired = [prompt for fault, prompt in proxy.served if fault[0] == "status"]
        assert len(fired) == 2 and fired[0] == fired[1], "a request and its one retry met the 500s"
        assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
        assert "answered 500" in err[0] and "finished requests are saved" in err[0]
        assert len((out / "responses.jsonl").read_text().splitlines()) == answered >= 1
        proxy.faults.clear()
        before = proxy.forwarded
        assert evaluate(out, *api(proxy.url, "--concurrency", "1"), capsys=capsys)[0] == 0
        assert proxy.forwarded - before == sum(requests[answered:]), "only the missing requests are sent"
    ours, clean = by_problem(out), by_problem(clean_small)
    assert ours.keys() == clean.keys() and all(same_output(ours[key], clean[key]) for key in clean)


def test_the_server_killed_mid_cell_and_started_again(clean_small, tmp_path):
    """A real kill: harness.eval runs as a process against its own server; the server is killed after a few answers
    (the run stops with one line), started again on the same port, and the same command finishes the run. Through
    the proxy in front, the 5 problems' completions were answered once each: none lost, none sent twice."""
    served = Server().start()
    out = tmp_path / "run"
    command = [sys.executable, "-m", "harness.eval", "--out", str(out)]
    try:
        with FaultProxy(served.port) as proxy:
            args = api(proxy.url, "--concurrency", "1", "--api-retries", "1")
            running = subprocess.Popen(command + args, cwd=ROOT, env=command_env(), stderr=subprocess.PIPE, text=True)
            journal = out / "responses.jsonl"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (journal.exists() and len(journal.read_text().splitlines()) >= 2):
                time.sleep(0.1)
            served.kill()
            _, err = running.communicate(timeout=120)
            lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
            assert running.returncode == 2 and lines[-1].startswith("error: "), lines
            assert not [line for line in lines if "Traceback" in line]
            served.start()
            again = run_module("harness.eval", "--out", str(out), *args)
            assert again.returncode == 0, again.stderr[-2000:]
            # none lost, none sent twice: only a problem cut between its request and its continuation is sent again
            requests = requests_per_problem(clean_small)
            assert sum(requests) <= proxy.forwarded <= sum(requests) + max(requests) - 1
    finally:
        served.kill()
    ours, clean = by_problem(out), by_problem(clean_small)
    assert all(same_output(ours[key], clean[key]) for key in clean)
    keep = ("model", "precision", "task", "length", "n", "correct", "accuracy", "ci_low", "ci_high", "no_answer")
    assert [{k: r[k] for k in keep} for r in rows(out)] == [{k: r[k] for k in keep} for r in rows(clean_small)]


def test_bad_endpoints_are_one_line_before_any_work(server, tmp_path, capsys):
    closed = free_port()
    cases = [
        (api(f"http://127.0.0.1:{closed}/v1", "--api-retries", "0"), {}, f"cannot reach http://127.0.0.1:{closed}"),
        (api(server.url, "--api-model", "no-such-model"), {}, "does not serve a model named 'no-such-model'"),
    ]
    keyed = Server(api_key="sesame").start()
    try:
        cases.append((api(keyed.url), {"NUMPREC_API_KEY": "wrong"}, "refused the API key (401)"))
        for argv, env, fragment in cases:
            out = tmp_path / "run"
            code, err = evaluate(out, *argv, capsys=capsys, env=env)
            assert code == 2 and len(err) == 1 and fragment in err[0], err
            assert not out.exists(), "nothing written"
        # the right key works, and is written nowhere
        code, err = evaluate(tmp_path / "keyed", *api(keyed.url), capsys=capsys, env={"NUMPREC_API_KEY": "sesame"})
        assert code == 0, err
        for path in (tmp_path / "keyed").iterdir():
            assert b"sesame" not in path.read_bytes(), path
    finally:
        keyed.kill()


# ---------------------------------------------------------------- what answered is evidence (issue 30)


def journal(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]


def test_a_reply_from_another_model_is_refused_unless_declared(server, tmp_path, capsys):
    """The server answers as "gpt-4o-mini" when smollm2 was asked: one line, nothing of it credited or journaled.
    Declared with --api-accept-model, the run goes through and every row names the model that answered."""
    out = tmp_path / "run"
    with FaultProxy(server.port) as proxy:
        proxy.answer_as = "gpt-4o-mini"
        code, err = evaluate(out, *api(proxy.url, "--concurrency", "1", grid=TWO), capsys=capsys)
        assert code == 2 and len(err) == 1, err
        assert "answered as model 'gpt-4o-mini', not the 'smollm2' asked for" in err[0]
        assert "--api-accept-model gpt-4o-mini" in err[0]
        assert not (out / "responses.jsonl").exists() or not journal(out), "nothing of it kept"
        assert not (out / "results.csv").exists()
        code, err = evaluate(
            out, *api(proxy.url, "--concurrency", "1", "--api-accept-model", "gpt-4o-mini", grid=TWO), capsys=capsys
        )
        assert code == 0, err
        proxy.answer_as = "smollm2-2024-07-18"  # a dated snapshot of the asked name is the same model
        code, err = evaluate(tmp_path / "dated", *api(proxy.url, "--concurrency", "1", grid=TWO), capsys=capsys)
        assert code == 0, err
    assert {row["served_model"] for row in rows(out)} == {"gpt-4o-mini"}
    assert {entry["model"] for entry in journal(out)} == {"gpt-4o-mini"}
    assert json.loads((out / "run.json").read_text())["invocations"][-1]["spec"]["api_accept_model"] == "gpt-4o-mini"
    assert "model gpt-4o-mini at" in (out / "summary.md").read_text()
    assert {row["served_model"] for row in rows(tmp_path / "dated")} == {"smollm2-2024-07-18"}


def test_a_resume_against_another_server_is_refused_then_recorded_with_the_flag(server, tmp_path, capsys):
    """Half a cell answered by server A (then A fails), the rest asked of server B: refused in one line, nothing
    written; with --api-allow-other-endpoint both answer, and the row and summary.md name both."""
    out = tmp_path / "run"
    with FaultProxy(server.port) as first, FaultProxy(server.port) as second:
        first.faults.extend([("pass",)] * 2 + [("status", 500, {})] * 20)
        code, err = evaluate(out, *api(first.url, "--concurrency", "1", "--api-retries", "0"), capsys=capsys)
        assert code == 2 and "answered 500" in err[0], err
        answered = journal(out)
        assert answered and {entry["endpoint"] for entry in answered} == {first.url}
        before = {name: (out / name).read_bytes() for name in ("responses.jsonl",) if (out / name).exists()}
        code, err = evaluate(out, *api(second.url, "--concurrency", "1"), capsys=capsys)
        assert code == 2 and len(err) == 1, err
        assert f"this run's responses came from {first.url}, not from {second.url}" in err[0]
        assert "--api-allow-other-endpoint" in err[0] and second.forwarded == 0
        assert {name: (out / name).read_bytes() for name in before} == before, "nothing written"
        code, err = evaluate(out, *api(second.url, "--concurrency", "1", "--api-allow-other-endpoint"), capsys=capsys)
        assert code == 0, err
        assert second.forwarded >= 1
    (row,) = rows(out)
    assert row["endpoint"] == ",".join(sorted([first.url, second.url])), "the cell names both endpoints"
    assert "answered by several endpoints" in (out / "summary.md").read_text()


def test_the_journal_is_evidence(server, clean_small, tmp_path, capsys):
    """The cell unfinished, its journal kept but tampered with: a response's text edited, one repeated with another
    text, one cut short by a kill. Each is dropped, said, and requested again; the run then equals the clean one."""
    out = tmp_path / "run"
    out.mkdir()
    lines = (clean_small / "responses.jsonl").read_text().splitlines()
    edited = json.loads(lines[0])
    edited["text"] = "1 + 2 = 3"  # whatever it said, now a different answer
    repeated = json.loads(lines[1])
    lines[0] = json.dumps(edited)
    other = {**repeated, "text": repeated["text"] + " again"}
    lines.append(json.dumps({**other, "digest": entry_digest(other)}))  # a second reply, well formed: which is it?
    lines[2] = lines[2][:30]
    (out / "responses.jsonl").write_text("\n".join(lines) + "\n")
    with FaultProxy(server.port) as proxy:  # a proxy of its own, to count what is asked again
        code, err = evaluate(out, *api(proxy.url, "--concurrency", "1", "--api-allow-other-endpoint"), capsys=capsys)
        assert code == 0, err
        assert proxy.forwarded >= 3, "the three tampered requests were asked again"
    said = "\n".join(err)
    for what in ("1 damaged response(s)", "1 edited response(s)", "2 repeated with another reply response(s)"):
        assert what in said, said
    ours, clean = by_problem(out), by_problem(clean_small)
    assert ours.keys() == clean.keys() and all(same_output(ours[key], clean[key]) for key in clean)


def test_null_text_is_retried_and_a_runaway_reply_is_cut(server, tmp_path, capsys):
    """A reply whose text is null is retried like one that is not JSON; one that ignores the stop and runs to 5 MB is
    cut to the request's first line and token budget, as an in-process backend stops, and counted in the row."""
    out = tmp_path / "run"
    with FaultProxy(server.port) as proxy:
        proxy.faults.extend([("nulltext",), ("pass",), ("huge", 5_000_000)])
        code, err = evaluate(out, *api(proxy.url, "--concurrency", "1", "--api-retries", "2"), capsys=capsys)
        assert code == 0, err
        assert not proxy.faults
    (row,) = rows(out)
    assert row["cut_replies"] == "1"
    for name in ("responses.jsonl", "samples.jsonl"):
        assert (out / name).stat().st_size < 100_000, f"{name} keeps the cut reply, not 5 MB"
    cut = [entry for entry in journal(out) if entry["cut"]]
    assert len(cut) == 1 and cut[0]["reply_chars"] > 4_000_000 and "\n" not in cut[0]["text"].rstrip("\n")
    assert "1 reply cut to the request's budget or first line" in (out / "summary.md").read_text()


def test_no_key_escapes(tmp_path, capsys):
    """A server that echoes the Authorization header in its error, and a key in --api-base's query string: neither
    key is printed or written, in any file of the run."""
    keyed = Server(api_key="sesame-KEY-123").start()
    query_key = "QUERY-sekrit-456"
    printed = []
    try:
        with FaultProxy(keyed.port) as proxy:
            env = {"NUMPREC_API_KEY": "sesame-KEY-123"}
            proxy.faults.extend([("echo_auth",)] * 10)
            code, err = evaluate(tmp_path / "echo", *api(proxy.url, "--api-retries", "0"), capsys=capsys, env=env)
            printed += err
            assert code == 2 and len(err) == 1 and "(Error code: 500 - bad header Bearer ***)" in err[0], err
            assert any("sesame-KEY-123" in header for header in proxy.authorizations), "the key was sent"
            proxy.faults.clear()
            code, err = evaluate(tmp_path / "query", *api(f"{proxy.url}?api_key={query_key}"), capsys=capsys, env=env)
            printed += err
    finally:
        keyed.kill()
    for secret in ("sesame-KEY-123", query_key):
        assert not [line for line in printed if secret in line], printed
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert secret.encode() not in path.read_bytes(), path


def test_the_server_stops_where_the_answer_mode_says(server):
    """The served backend asks the server to stop where the run's answer mode says (a mode of the tests' own: the
    first word) and keeps what the in-process llama.cpp backend keeps of the same GGUF up to that stop."""
    from transformers import AutoTokenizer

    from harness.backends import Sampling
    from harness.backends.api import APIBackend, Endpoint
    from harness.backends.llamacpp import LlamaCppBackend
    from harness.models import get_model, get_precision
    from harness.models.weights import variant_weights
    from harness.questions.answers import FIRST_LINE
    from harness.questions.problems import Task, generate
    from harness.questions.prompts import user_message
    from tests.answer_modes import FIRST_WORD

    model = get_model("smollm2")
    precision = get_precision(model, "gguf-q4_1")
    gguf = variant_weights(model, precision)
    here = LlamaCppBackend(gguf, precision, batch_size=1)
    tokenizer = AutoTokenizer.from_pretrained(Path(gguf).parent)
    served = APIBackend(Endpoint((server.url,), "smollm2", concurrency=1), precision, tokenizer, batch_size=4)
    problems = generate(Task("add"), 10, 1, 5, seed=0)
    prompts = [here.chat_prompt(user_message(problem, "zero-shot")) for problem in problems]
    budgets = [FIRST_LINE.budget(Task("add"), 10, 1, here.count_tokens)] * len(prompts)
    greedy = Sampling.named("greedy")
    try:
        ours = here.generate(prompts, budgets, greedy, answer=FIRST_WORD, batch_size=1)
        theirs = served.generate(prompts, budgets, greedy, answer=FIRST_WORD)
    finally:
        here.close()
    for local, remote in zip(ours, theirs, strict=True):
        assert "\n" not in remote.text.strip() and " " not in remote.text.strip(), remote.text
        assert local.text.lstrip().startswith(remote.text.strip() + " ") or local.text.strip() == remote.text.strip()


def test_concurrency_adapts_to_what_the_server_takes(server, tmp_path, capsys):
    """A server that answers 429 to any request beyond 3 in flight, asked with --concurrency 8: the pacing halves on
    the refusals and grows on the answers, settling near 3; the run finishes with every problem asked once (none
    lost, none sent twice) and the trace of the pacing is in run.json."""
    out = tmp_path / "run"
    grid = ["--tasks", "add", "--lengths", "1", "--samples", "24"]
    with FaultProxy(server.port) as proxy:
        proxy.max_in_flight = 3
        code, err = evaluate(
            out, *api(proxy.url, "--concurrency", "8", "--api-retries", "10", grid=grid), capsys=capsys
        )
        assert code == 0, err
        forwarded = proxy.forwarded
    entries = journal(out)
    assert len(entries) == 24 and len({entry["key"] for entry in entries}) == 24, "every problem answered once"
    requests = requests_per_problem(out)
    assert forwarded == sum(requests), "none sent twice: each answered request was forwarded once"
    assert proxy.refused >= 1 and proxy.most_in_flight <= 3
    (pacing,) = [v for k, v in json.loads((out / "run.json").read_text())["invocations"][-1].items() if "pacing" in k]
    assert pacing["ceiling"] == 8 and 2 <= pacing["settled"] <= 4.5, pacing
    assert any(why == "pushed back" for _, _, why in pacing["trace"])


# ---------------------------------------------------------------- stopping while requests hang (issue 39)


def hanging_run(proxy: FaultProxy, out: Path) -> subprocess.Popen:
    """harness.eval as a process against the proxy, 8 problems at concurrency 4; returns once 4 requests are held
    at the proxy (a server that does not answer)."""
    grid = ["--tasks", "add", "--lengths", "1", "--samples", "8"]
    command = [
        sys.executable,
        "-m",
        "harness.eval",
        "--out",
        str(out),
        *api(proxy.url, "--concurrency", "4", grid=grid),
    ]
    running = subprocess.Popen(command, cwd=ROOT, env=command_env(), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proxy.in_flight < 3 and running.poll() is None:
        time.sleep(0.05)
    assert proxy.in_flight >= 3, "requests are held at the proxy"
    return running


# The promise is to stop without waiting for requests that hang (here for 120 s): measured in the runs of this
# machine at 1.3-2.6 s (tests print it), asserted with a margin a machine under load keeps (a bench, not a test,
# holds the figure).
STOPS_WITHIN = 30.0


def test_ctrl_c_stops_a_served_run_without_waiting_for_hanging_requests(server, tmp_path):
    with FaultProxy(server.port) as proxy:
        proxy.faults.extend([("slow", 120)] * 8)
        running = hanging_run(proxy, tmp_path / "run")
        asked = time.monotonic()
        running.send_signal(signal.SIGINT)
        _, err = running.communicate(timeout=60)
        took = time.monotonic() - asked
    print(f"Ctrl-C to exit with 4 requests hanging: {took:.2f} s")
    assert running.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    assert took < STOPS_WITHIN, f"{took:.1f} s after Ctrl-C"


def test_a_failed_request_stops_a_served_run_without_waiting_for_others_that_hang(server, tmp_path):
    with FaultProxy(server.port) as proxy:
        proxy.faults.extend([("slow", 120)] * 3 + [("status", 400, {})] + [("slow", 120)] * 4)
        running = hanging_run(proxy, tmp_path / "run")
        _, err = running.communicate(timeout=60)
        took = time.monotonic() - proxy.failed_at
    print(f"failure to exit with 3 requests hanging: {took:.2f} s")
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip() and "%|" not in line]
    assert running.returncode == 2 and len(lines) == 1 and "answered 400" in lines[0], lines
    assert took < STOPS_WITHIN, f"{took:.1f} s after the failure"


def test_api_timeout_bounds_a_whole_request_not_each_read(server, tmp_path, capsys):
    """A server that sends one byte a second and never finishes its reply: with --api-timeout 3 the request is given
    up about 3 s after it was sent (each read alone would never time out), then retried once, then one line. One
    request at a time, so that both faults meet the same request: the proxy says they did."""
    with FaultProxy(server.port) as proxy:
        proxy.faults.extend([("trickle", 90)] * 2)
        started = time.monotonic()
        args = api(proxy.url, "--api-timeout", "3", "--api-retries", "1", "--concurrency", "1")
        code, err = evaluate(tmp_path / "run", *args, capsys=capsys)
        took = time.monotonic() - started
    assert [fault for fault, _ in proxy.served] == [("trickle", 90)] * 2, "both faults fired"
    assert proxy.served[0][1] == proxy.served[1][1], "on one request and its retry"
    assert code == 2 and len(err) == 1, err
    assert "did not finish a reply within --api-timeout 3 s, retries spent" in err[0]
    assert took < 60, f"{took:.0f} s: the deadline held a request past the server's trickle"


def test_a_redirect_is_refused_in_one_line(server, tmp_path, capsys):
    with FaultProxy(server.port) as proxy:
        proxy.faults.append(("redirect", server.port))
        code, err = evaluate(tmp_path / "run", *api(proxy.url, "--concurrency", "1"), capsys=capsys)
    assert code == 2 and len(err) == 1, err
    assert f"redirected a request to http://127.0.0.1:{server.port}/v1/completions (307)" in err[0], err
    assert proxy.forwarded == 0, "nothing was answered through the redirect"
