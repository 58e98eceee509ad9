"""LoRA / QLoRA fine-tuning of a model on one arithmetic task: the paper's recipe (appendix tab:lora_config).

    python -m finetune.train --config finetune/configs/cpu_smoke.yaml --out runs/smoke-lora
    accelerate launch --cpu --num_processes 2 -m finetune.train --config ... --out ...   # DDP over gloo
    accelerate launch --config_file finetune/accelerate/multi_gpu.yaml -m finetune.train --config ... --out ...

trl's SFTTrainer does the training (loss on the assistant turn only); peft adds the adapters; QLoRA loads
the base in nf4 through bitsandbytes and prepares it with prepare_model_for_kbit_training. Rerunning
into the same --out resumes from the last checkpoint. The adapter lands in OUT/adapter in peft format,
beside the config that made it; evaluate it with

    python -m harness.eval --model smollm2 --adapter OUT/adapter [--model-path OUT/base]
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from finetune.config import (
    FinetuneConfig,
    load_config,
    task_list,
)
from harness.core.cli import ArgParser, command_line, input_path, output_dir, run
from harness.core.errors import UserError
from harness.core.files import follow_umask
from harness.core.lock import DirectoryLock
from harness.core.machine import describe
from harness.runs.trackers import Trackers, add_report_to_flag, check_folders


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def base_weights(config: FinetuneConfig, out: Path) -> str:
    """The directory the base model loads from: a registry model, --model_path, or a tiny model saved in OUT/base."""
    from harness.models import get_model
    from harness.models.weights import resolve_weights

    model = get_model(config.model)
    weights = resolve_weights(model, config.model_path)
    if config.tiny is None:
        return weights
    target = out / "base"
    if not (target / "model.safetensors").is_file():
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(weights)
        torch.manual_seed(config.seed)
        llama = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tokenizer),
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
                tie_word_embeddings=True,
                max_position_embeddings=2048,
                **config.tiny.model_dump(),
            )
        )
        if is_main_process():  # under DDP one process writes; every process builds the same seeded weights
            staging = out / "base.partial"
            llama.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            follow_umask(staging)
            os.replace(staging, target)
        else:
            while not (target / "model.safetensors").is_file():
                time.sleep(0.2)
    return str(target)


def check_lora_targets(config: FinetuneConfig) -> None:
    """LoRA's target_modules must name modules of the model: checked against its architecture (built on the meta
    device, no weights) before anything is written, where peft would refuse only after the base model was made."""
    targets = config.lora.target_modules
    if targets == "all-linear":
        return
    import torch
    from peft import LoraConfig
    from peft.tuners.tuners_utils import check_target_module_exists
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

    from harness.models import get_model
    from harness.models.weights import resolve_weights

    if config.tiny is not None:
        architecture = LlamaConfig(**config.tiny.model_dump())
    else:
        architecture = AutoConfig.from_pretrained(resolve_weights(get_model(config.model), config.model_path))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(architecture)
    lora = LoraConfig(target_modules=targets, task_type="CAUSAL_LM")
    if not any(check_target_module_exists(lora, name) for name, _ in model.named_modules()):
        linear = sorted(
            {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        )
        raise UserError(
            f"lora.target_modules {targets!r} names no module of {config.model}; its linear layers are "
            f"{', '.join(linear)} (or write all-linear)"
        )


def load_model(config: FinetuneConfig, weights: str):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, config.train.dtype)
    if config.method == "lora":
        return AutoModelForCausalLM.from_pretrained(weights, dtype=dtype)
    try:
        import bitsandbytes  # noqa: F401
        from peft import prepare_model_for_kbit_training
        from transformers import BitsAndBytesConfig
    except ImportError:
        raise UserError("QLoRA needs bitsandbytes and peft; run: bash scripts/setup.sh") from None
    quant = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=getattr(torch, config.quant.compute_dtype),
        bnb_4bit_quant_storage=getattr(torch, config.quant.storage_dtype),
    )
    model = AutoModelForCausalLM.from_pretrained(weights, quantization_config=quant, dtype=dtype)
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=config.train.gradient_checkpointing)


def training_data(config: FinetuneConfig):
    """The examples in the order they are read: a saved dataset as it is (read in random order), or the tasks'
    sets built here, shuffled in blocks of one prompt template, a batch each (read in order: see build_mixture)."""
    from finetune.data import build_mixture
    from harness.questions.problems import parse_task

    if config.data.path:
        import datasets

        dataset = datasets.load_from_disk(config.data.path)
    else:
        tasks = [parse_task(task) for task in task_list(config)]
        block = config.train.batch_size if config.train.shared_prefix else 1
        dataset, _ = build_mixture(
            tasks, seed=config.data.seed, scale=config.data.scale, block=block, lengths=config.data.lengths
        )
    if config.data.max_samples:
        dataset = dataset.select(range(min(config.data.max_samples, dataset.num_rows)))
    return dataset.select_columns(["prompt", "completion"])


CHECKPOINT_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "adapter_model.safetensors")


def last_checkpoint(checkpoints: Path) -> str | None:
    """The latest complete checkpoint: a run killed while writing one (scancel, preemption) leaves it without some
    of its files, and resuming from it would fail; it is skipped (and written again when training gets there)."""
    if not checkpoints.is_dir():
        return None
    found = [p for p in checkpoints.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    for candidate in sorted(found, key=lambda p: int(p.name.split("-")[-1]), reverse=True):
        missing = [name for name in CHECKPOINT_FILES if not (candidate / name).is_file()]
        if not missing:
            return str(candidate)
        if is_main_process():
            print(f"{candidate.name} is incomplete (no {missing[0]}): skipped", file=sys.stderr, flush=True)
    return None


def sft_config(config: FinetuneConfig, checkpoints: Path):
    """trl's SFTConfig from the run's settings (the paper's LoRA settings, tab:lora_config, by default)."""
    import torch
    from trl import SFTConfig

    settings = config.train
    return SFTConfig(
        output_dir=str(checkpoints),
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        gradient_accumulation_steps=settings.grad_accum,
        learning_rate=settings.learning_rate,
        weight_decay=settings.weight_decay,
        adam_beta1=settings.adam_beta1,
        adam_beta2=settings.adam_beta2,
        optim="adamw_torch",
        lr_scheduler_type=settings.scheduler,
        warmup_steps=settings.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio of total steps
        bf16=settings.dtype == "bfloat16" and config.method == "lora" and torch.cuda.is_available(),
        logging_steps=settings.logging_steps,
        save_steps=settings.save_steps,
        save_total_limit=2,
        max_length=settings.max_length,
        completion_only_loss=True,
        activation_checkpointing=settings.gradient_checkpointing,  # transformers 5.23's name for it
        seed=config.seed,
        data_seed=config.data.seed,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0,
        disable_tqdm=True,  # progress_bar() instead
        # examples built here come in template blocks, a batch each, already shuffled: read them in that order
        train_sampling_strategy="sequential" if settings.shared_prefix and not config.data.path else "random",
    )


def train(config: FinetuneConfig, config_path: Path, out: Path, report_to: Sequence[str] = ()) -> dict:
    from peft import LoraConfig
    from transformers import AutoTokenizer, PrinterCallback
    from trl import SFTTrainer

    from finetune.prefix import SharedPrefixTrainer

    out.mkdir(parents=True, exist_ok=True)
    weights = base_weights(config, out)
    tokenizer = AutoTokenizer.from_pretrained(weights)
    model = load_model(config, weights)
    settings = config.train
    checkpoints = out / "checkpoints"
    args = sft_config(config, checkpoints)
    lora = LoraConfig(
        r=config.lora.r,
        lora_alpha=config.lora.alpha,
        lora_dropout=config.lora.dropout,
        target_modules=config.lora.target_modules,
        task_type="CAUSAL_LM",
    )
    trainer_class = SharedPrefixTrainer if settings.shared_prefix else SFTTrainer
    dataset = training_data(config)
    trainer = trainer_class(model=model, args=args, train_dataset=dataset, processing_class=tokenizer, peft_config=lora)
    curve = out / "curve" if settings.curve else None
    trainer.add_callback(on_save(curve, settings.batch_size * settings.grad_accum))
    trainer.remove_callback(PrinterCallback)  # the log dicts: progress_bar() says the loss in numprec's words
    trainer.add_callback(progress_bar())
    trackers = (
        Trackers(report_to, out, out.name, config.model_dump())
        if report_to and trainer.is_world_process_zero()
        else None
    )
    if trackers:
        trainer.add_callback(tracked(trackers))
    resume = last_checkpoint(checkpoints)
    started = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=resume)
    finally:
        if trackers:
            trackers.close()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    per_step = settings.batch_size * settings.grad_accum * trainer.args.world_size
    samples = min(trainer.state.global_step * per_step, dataset.num_rows * settings.epochs)  # last batch: partial
    summary = {
        "method": config.method,
        "task": config.task,
        "steps": trainer.state.global_step,
        "samples": samples,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "losses": losses,
        "log": [entry for entry in trainer.state.log_history if "loss" in entry],
        "resumed_from": resume,
        "wall_s": round(time.perf_counter() - started, 1),
        "world_size": trainer.args.world_size,
        "shared_prefix": settings.shared_prefix,
        "machine": describe(),
    }
    adapter = out / "adapter"
    trainer.save_model(str(adapter))  # peft format: adapter_config.json + adapter_model.safetensors
    if trainer.is_world_process_zero():
        shutil.copyfile(config_path, adapter / "train_config.yaml")
        (adapter / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        follow_umask(out)  # checkpoints and adapter: safetensors writes 0600 whatever the umask
    return summary


def tracked(trackers: Trackers):
    """A callback that gives every logging step's numbers (loss, learning rate, gradient norm) to the trackers."""
    from transformers import TrainerCallback

    class Tracked(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                trackers.log(logs, state.global_step)

    return Tracked()


def progress_bar():
    """numprec's own bar over the training steps, the loss of the latest logging step beside it and a line per
    logging step (Trainer's bar and printer are off: its tqdm follows the quiet console's TQDM_DISABLE)."""
    from tqdm import tqdm
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        bar = None

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                self.bar = tqdm(
                    total=state.max_steps, initial=state.global_step, unit="step", file=sys.stderr, disable=False
                )

        def on_step_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.update(state.global_step - self.bar.n)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.bar is not None and logs and "loss" in logs:
                self.bar.set_postfix(loss=f"{logs['loss']:.4f}", refresh=False)
                self.bar.write(
                    f"step {state.global_step}/{state.max_steps}: loss {logs['loss']:.4f}, "
                    f"learning rate {logs.get('learning_rate', 0.0):.3g}",
                    file=sys.stderr,
                )

        def on_train_end(self, args, state, control, **kwargs):
            if self.bar is not None:
                self.bar.close()
                self.bar = None

    return Progress()


def on_save(curve: Path | None, per_step: int):
    """A TrainerCallback for each checkpoint: its files get the umask's modes (safetensors writes 0600), and with
    ``curve`` its adapter is copied to CURVE/samples-N (N training examples seen), where the learning curve
    (finetune/curve.py) finds it (checkpoints/ keeps only the last two)."""
    from transformers import TrainerCallback

    class OnSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            if not state.is_world_process_zero:
                return
            source = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            follow_umask(source)
            if curve is None:
                return
            target = curve / f"samples-{state.global_step * per_step * args.world_size}"
            staging = target.with_name(target.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            for name in ("adapter_config.json", "adapter_model.safetensors"):
                shutil.copyfile(source / name, staging / name)
            follow_umask(staging)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)

    return OnSave()


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgParser(prog="python -m finetune.train", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config", type=input_path, required=True, help="a YAML file like finetune/configs/cpu_smoke.yaml"
    )
    parser.add_argument("--out", type=output_dir, required=True, help="run directory: checkpoints/, adapter/, base/")
    add_report_to_flag(parser)
    args = parser.parse_args(argv)
    config = load_config(args.config)
    from harness.models import get_model
    from harness.models.weights import has_cuda

    model = get_model(config.model)
    if model.requires == "gpu" and config.tiny is None and not has_cuda():
        raise UserError(
            f"{model.name} is trained on a CUDA GPU and this machine has none; use "
            "finetune/configs/cpu_smoke.yaml here, or submit finetune/slurm/train.sbatch"
        )
    check_lora_targets(config)
    check_folders(args.report_to, args.out)
    # One writer per --out; under DDP the main process holds it for all of the run's processes.
    lock = DirectoryLock(args.out, command_line("finetune.train", argv)) if is_main_process() else None
    try:
        summary = train(config, args.config, args.out, args.report_to)
    finally:
        if lock:
            lock.release()
    if is_main_process():
        print(
            f"{config.method} on {config.task}: {summary['steps']} steps, loss {summary['first_loss']:.3f} -> "
            f"{summary['last_loss']:.3f} in {summary['wall_s']} s; adapter in {args.out / 'adapter'}"
        )
    return 0


if __name__ == "__main__":
    run(main)
