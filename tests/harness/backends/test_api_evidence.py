"""What answered is evidence (issue 30): the api backend against llama.cpp's server (tests/harness/backends/
conftest.py) with a proxy in front that answers as another model, fails, tampers or runs away; the journal of
responses checked, keys kept out of every file, the server's stop and pacing as the run's answer mode and the server
ask. Requests go to 127.0.0.1 only; every request loop is bounded by the backend's retries and timeouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.backends.api import entry_digest
from harness.diff import by_problem, same_output
from tests.api_proxy import FaultProxy
from tests.harness.backends.served import TWO, Server, api, evaluate, journal, requests_per_problem
from tests.harness.helpers import csv_rows

pytestmark = pytest.mark.xdist_group("api")  # the server of group "api" (conftest.py)


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
    assert {row["served_model"] for row in csv_rows(out / "results.csv")} == {"gpt-4o-mini"}
    assert {entry["model"] for entry in journal(out)} == {"gpt-4o-mini"}
    assert json.loads((out / "run.json").read_text())["invocations"][-1]["spec"]["api_accept_model"] == "gpt-4o-mini"
    assert "model gpt-4o-mini at" in (out / "summary.md").read_text()
    assert {row["served_model"] for row in csv_rows(tmp_path / "dated" / "results.csv")} == {"smollm2-2024-07-18"}


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
    (row,) = csv_rows(out / "results.csv")
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
    (row,) = csv_rows(out / "results.csv")
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
