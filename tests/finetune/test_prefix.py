"""The shared-prefix loss is trl's completion-only loss, value and gradient, computed with the prefix once."""

import pytest
import torch

from finetune.data import build_mixture
from finetune.prefix import shared_prefix_length, shared_prefix_loss
from harness.questions.problems import Task


def trainer_and_batch(block: int, tasks):
    """trl's own batch (tokenized, chat-templated, completion-masked, right-padded) on a tiny random Llama with
    LoRA whose B matrices are non-zero, so gradients reach both LoRA factors through the prefix."""
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    from bench.decode import random_llama

    model, tokenizer = random_llama("tiny", "cpu", "fp32")  # 2 layers of 64, the default model's tokenizer
    dataset, _ = build_mixture(tasks, seed=0, scale=0.002, block=block)
    args = SFTConfig(
        output_dir="/tmp/unused",
        per_device_train_batch_size=block,
        completion_only_loss=True,
        report_to="none",
        use_cpu=True,
        train_sampling_strategy="sequential",
        max_length=512,
        activation_checkpointing=False,  # as finetune.train runs it with shared_prefix (trl's default is on)
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset.select_columns(["prompt", "completion"]),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear"),
    )
    for name, parameter in trainer.model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(parameter, std=0.02)
    return trainer, next(iter(trainer.get_train_dataloader()))


def gradients(model) -> dict[str, torch.Tensor]:
    out = {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    return out


def same_loss_and_gradient_as_trl(trainer, batch) -> dict[str, torch.Tensor]:
    """Asserts shared_prefix_loss gives trl's loss and gradient on the batch; returns the gradients."""
    model = trainer.model
    theirs = trainer.compute_loss(model, dict(batch))
    theirs.backward()
    expected = gradients(model)
    ours = shared_prefix_loss(model, batch["input_ids"], batch["attention_mask"], batch["labels"])
    ours.backward()
    got = gradients(model)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)
    assert expected.keys() == got.keys() and len(got) > 10
    for name, gradient in expected.items():
        assert torch.allclose(got[name], gradient, rtol=1e-3, atol=1e-7), name
    return got


@pytest.mark.parametrize("tasks", [[Task("add"), Task("iter_add", 3)], [Task("mul")]])
def test_the_shared_prefix_loss_is_trls_loss_and_gradient(tasks):
    trainer, batch = trainer_and_batch(6, tasks)
    model = trainer.model
    model.train()
    split = shared_prefix_length(batch["input_ids"], batch["attention_mask"], batch["labels"])
    assert split > 100, "the rows share the chat header and the few-shot examples"
    assert len({len(row) for row in batch["input_ids"].tolist()}) == 1 and (batch["attention_mask"] == 0).any()
    got = same_loss_and_gradient_as_trl(trainer, batch)
    # lora_A of k_proj in layer 0 receives gradient only through the keys, most of which are the prefix's
    assert any("k_proj.lora_A" in name and got[name].abs().sum() > 0 for name in got)


def test_a_batch_of_two_templates_shares_only_the_chat_header_and_is_still_right():
    trainer, batch = trainer_and_batch(1, [Task("add"), Task("mul")])  # blocks of 1: templates mixed
    rows = [trainer.train_dataset[i] for i in range(40)]
    for start in range(0, 38):
        pair = trainer.data_collator(rows[start : start + 2])
        split = shared_prefix_length(pair["input_ids"], pair["attention_mask"], pair["labels"])
        if split < 60:  # an add and a mul example: the system prompt only
            break
    else:
        pytest.fail("no mixed pair in 40 examples")
    model = trainer.model
    theirs = trainer.compute_loss(model, dict(pair))
    ours = shared_prefix_loss(model, pair["input_ids"], pair["attention_mask"], pair["labels"])
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5)


def test_a_batch_of_two_templates_runs_each_templates_prefix_once_with_trls_loss_and_gradient():
    """A mixture's last batch holds two templates' leftover rows: they run as two groups, each with its own shared
    prefix (not whole, which took 22 GB at batch 32), and the loss and gradient are still trl's."""
    from finetune.prefix import prefix_groups

    trainer, _ = trainer_and_batch(1, [Task("add"), Task("mul")])  # blocks of 1: templates mixed
    rows = [trainer.train_dataset[i] for i in range(8)]
    batch = trainer.data_collator(rows)
    dataset, _ = build_mixture([Task("add"), Task("mul")], seed=0, scale=0.002, block=1)  # the trainer's rows
    templates = ["mul" if " * " in expression else "add" for expression in dataset["expression"][:8]]
    groups = prefix_groups(batch["input_ids"], batch["attention_mask"], batch["labels"])
    assert len(set(templates)) == 2 and len(groups) == 2
    assert all(len({templates[i] for i in group}) == 1 for group in groups), (templates, groups)
    trainer.model.train()
    same_loss_and_gradient_as_trl(trainer, batch)


def test_template_blocks_keep_each_batch_on_one_template():
    from harness.questions.prompts import TEMPLATE_FOR_TASK

    dataset, _ = build_mixture([Task("add"), Task("iter_add", 3), Task("mul")], seed=0, scale=0.002, block=8)
    templates = [TEMPLATE_FOR_TASK["mul" if " * " in e else "add"] for e in dataset["expression"]]
    full = len(templates) - len(templates) % 8
    for start in range(0, full, 8):
        assert len(set(templates[start : start + 8])) == 1, start
    assert len(set(templates)) == 2 and dataset.num_rows == 3 * 120
    again, _ = build_mixture([Task("add"), Task("iter_add", 3), Task("mul")], seed=0, scale=0.002, block=8)
    assert again["expression"] == dataset["expression"]
