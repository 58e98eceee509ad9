"""Resuming a fine-tune takes the latest complete checkpoint: one cut short by a kill (scancel, preemption) while it
was being written is skipped, not loaded."""

from finetune.train import CHECKPOINT_FILES, last_checkpoint


def test_an_incomplete_checkpoint_is_skipped(tmp_path, capsys):
    for step, files in ((4, CHECKPOINT_FILES), (5, CHECKPOINT_FILES[1:]), (10, ())):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        for name in files:
            (folder / name).write_bytes(b"x")
    (tmp_path / "checkpoint-notes").mkdir()
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-4")
    said = capsys.readouterr().err
    assert "checkpoint-10 is incomplete (no trainer_state.json): skipped" in said and "checkpoint-5" in said
    assert last_checkpoint(tmp_path / "none") is None
