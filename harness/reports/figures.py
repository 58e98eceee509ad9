"""What every plot of the project shares: an accuracy panel's axes, and a finished figure as PNG bytes."""

from __future__ import annotations

import io


def accuracy_axes(ax, title: str, xlabel: str) -> None:
    """An accuracy panel's title, labels, 0-1 range, grid and legend, as every accuracy plot has them."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("exact-match accuracy")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def figure_png(fig) -> bytes:
    """A finished figure as PNG bytes (for an atomic write), the figure closed."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()
