"""Figures and the summary of a sweep's results.csv (rows as read by csv.DictReader, values as text)."""

from __future__ import annotations

import pandas as pd

from harness.reports.figures import accuracy_axes, figure_png

PANEL_KEYS = ["task", "operands", "base", "fixed_width", "depth"]


def frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    for column in ("operands", "base", "length", "depth", "seed", "steps", "n", "correct"):
        df[column] = df[column].astype(int)
    for column in ("accuracy", "ci_low", "ci_high", "tokens_per_s", "mfu", "wall_s"):
        df[column] = df[column].astype(float)
    df["eval_format"] = df["eval_format"].fillna("").astype(str)
    # Columns later sweeps added: absent from older files (or empty in older rows) they read as their default.
    if "device" not in df:
        df["device"] = "cpu"
    for column, default in [("steps_per_s", float("nan")), ("runs_packed", 1)]:
        values = pd.to_numeric(df[column], errors="coerce") if column in df else pd.Series(float("nan"), df.index)
        df[column] = values.fillna(default)
    return df


def _title(key: tuple) -> str:
    task, operands, base, fixed, depth = key
    width = "fixed width" if str(fixed) == "True" else "stripped"
    name = f"{task} of {operands}" if task == "iter_add" else task
    return f"{name}, base {base}, depth {depth} ({width})"


def _figure(panels: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, max(1, panels), figsize=(4.6 * max(1, panels), 3.8), squeeze=False)


def accuracy_figure(rows: list[dict]) -> bytes:
    """The paper's Fig. 2-3: accuracy vs n, a colour per precision; best of seeds solid, mean dashed with
    the min-max band over seeds."""
    df = frame(rows)
    native = df[df["eval_format"] == ""] if not df.empty else df
    groups = list(native.groupby(PANEL_KEYS)) if not native.empty else []
    fig, axes = _figure(len(groups))
    for ax, (key, panel) in zip(axes[0], groups, strict=False):
        for precision, data in panel.groupby("precision", sort=False):
            stats = data.groupby("length")["accuracy"].agg(["max", "mean", "min", "count"]).reset_index()
            line = ax.plot(
                stats["length"], stats["max"], marker="o", label=f"{precision} best of {stats['count'].max()}"
            )[0]
            ax.plot(
                stats["length"],
                stats["mean"],
                linestyle="--",
                color=line.get_color(),
                alpha=0.8,
                label=f"{precision} mean",
            )
            ax.fill_between(stats["length"], stats["min"], stats["max"], color=line.get_color(), alpha=0.15)
        ax.set_xticks(sorted(panel["length"].unique()))
        accuracy_axes(ax, _title(key), "operand length n")
        ax.title.set_fontsize(9)
    return figure_png(fig)


def best_fp32_seeds(df: pd.DataFrame) -> pd.DataFrame:
    """Emulated-format rows of the fp32 model with the best native accuracy per cell: a seed that never
    learned says nothing about the precision the learned computation needs."""
    fp32 = df[df["precision"] == "fp32"]
    native = fp32[fp32["eval_format"] == ""]
    best = native.loc[native.groupby([*PANEL_KEYS, "length"])["accuracy"].idxmax(), [*PANEL_KEYS, "length", "seed"]]
    emulated = fp32[fp32["eval_format"] != ""]
    return emulated.merge(best, on=[*PANEL_KEYS, "length", "seed"])


def phase_figure(rows: list[dict]) -> bytes:
    """Mantissa bits x n -> accuracy of the best fp32-trained model per n, evaluated in each emulated format."""
    df = frame(rows)
    emulated = best_fp32_seeds(df) if not df.empty else df
    groups = list(emulated.groupby(PANEL_KEYS)) if not emulated.empty else []
    fig, axes = _figure(len(groups))
    for ax, (key, panel) in zip(axes[0], groups, strict=False):
        table = panel.pivot_table(index="eval_format", columns="length", values="accuracy", aggfunc="mean")
        order = sorted(table.index, key=lambda name: (int(name.split("m")[1]), int(name[1:].split("m")[0])))
        table = table.loc[order]
        image = ax.imshow(table.values, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        ax.set_xticks(range(len(table.columns)), [str(c) for c in table.columns])
        ax.set_yticks(range(len(table.index)), list(table.index))
        for (i, j), value in pd.DataFrame(table.values).stack().items():
            ax.text(
                j, i, f"{value:.2f}", ha="center", va="center", fontsize=7, color="white" if value < 0.6 else "black"
            )
        ax.set_xlabel("operand length n")
        ax.set_ylabel("evaluated in format (by mantissa bits)")
        ax.set_title("best fp32 seed, " + _title(key), fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046)
    return figure_png(fig)


def _lengths_where(panel: pd.DataFrame, column: str, value: str = "True") -> list[int]:
    if column not in panel:
        return []
    return sorted({int(n) for n, flag in zip(panel["length"], panel[column], strict=True) if str(flag) == value})


def summary_markdown(rows: list[dict]) -> str:
    df = frame(rows)
    lines = ["# From-scratch precision sweep", ""]
    if df.empty:
        return "\n".join(lines + ["No finished cells yet.", ""])
    native = df[df["eval_format"] == ""]
    for key, panel in native.groupby(PANEL_KEYS):
        lines += [f"## {_title(key)}", "", "Accuracy per precision: best of seeds / mean ± std (seeds).", ""]
        table = panel.groupby(["length", "precision"], sort=False)["accuracy"].agg(["max", "mean", "std", "count"])
        precisions = list(dict.fromkeys(panel["precision"]))
        whole = _lengths_where(panel, "whole_space_test")
        shared = [n for n in _lengths_where(panel, "disjoint_test", "False") if n not in whole]
        if whole:
            lines += [
                f"Lengths {', '.join(map(str, whole))}: the test set is the whole problem space, each problem once "
                "(n is its size): the accuracy is exact, and every test problem is also a training problem.",
                "",
            ]
        if shared:
            lines += [
                f"Lengths {', '.join(map(str, shared))}: the problem space is too small for a test set disjoint from "
                "training (the test set holds more than half of it), so these accuracies include problems seen in "
                "training.",
                "",
            ]
        lines.append("| n | " + " | ".join(precisions) + " |")
        lines.append("|---:|" + "---:|" * len(precisions))
        for length in sorted(panel["length"].unique()):
            cells = []
            for precision in precisions:
                if (length, precision) in table.index:
                    r = table.loc[(length, precision)]
                    cells.append(f"{r['max']:.3f} / {r['mean']:.3f} ± {0 if pd.isna(r['std']) else r['std']:.3f}")
                else:
                    cells.append("")
            lines.append(f"| {length} | " + " | ".join(cells) + " |")
        lines.append("")
    emulated = best_fp32_seeds(df)
    for key, panel in emulated.groupby(PANEL_KEYS):
        table = panel.pivot_table(index="eval_format", columns="length", values="accuracy")
        lengths = list(table.columns)
        lines += [
            f"## Best fp32 seed evaluated in emulated formats: {_title(key)}",
            "",
            "| format | " + " | ".join(f"n={n}" for n in lengths) + " |",
            "|---|" + "---:|" * len(lengths),
        ]
        order = sorted(table.index, key=lambda name: (-int(name.split("m")[1]), -int(name[1:].split("m")[0])))
        lines += [f"| {name} | " + " | ".join(f"{table.loc[name, n]:.3f}" for n in lengths) + " |" for name in order]
        lines.append("")
    speed = native.groupby(["precision", "device", "runs_packed"])[["tokens_per_s", "steps_per_s", "mfu"]].median()
    lines += [
        "## Training throughput (median over cells; a process's packed runs counted together)",
        "",
        "| precision | device | runs packed | tokens/s | steps/s | MFU |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {p} | {d} | {r_:.0f} | {r['tokens_per_s']:,.0f} | "
        f"{'' if pd.isna(r['steps_per_s']) else format(r['steps_per_s'], '.2f')} | {r['mfu']:.1%} |"
        for (p, d, r_), r in speed.iterrows()
    ]
    return "\n".join(lines + [""])
