"""Draws one curve file of `tributary-bench curves` as a PNG.

Usage: plot.py CSV PNG TITLE X_LABEL [--log-x]

The CSV's first column is the x value; every other column is one series,
named `panel|series`: columns that share a panel are drawn on one set of axes
(the panel's name is its y label), one panel under the other. Empty cells are
points that were not measured.
"""

import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    log_x = "--log-x" in sys.argv
    source, target, title, x_label = args
    with open(source, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    xs = [float(r[0]) for r in body]
    panels: dict[str, list[int]] = {}
    for i, name in enumerate(header[1:], start=1):
        panel = name.split("|", 1)[0]
        panels.setdefault(panel, []).append(i)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(7, 3.2 * len(panels)), sharex=True, squeeze=False
    )
    for ax, (panel, columns) in zip(axes[:, 0], panels.items()):
        for i in columns:
            points = [(x, float(r[i])) for x, r in zip(xs, body) if r[i] != ""]
            ax.plot(
                [p[0] for p in points],
                [p[1] for p in points],
                marker="o",
                label=header[i].split("|", 1)[-1],
            )
        ax.set_ylabel(panel)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        if log_x:
            ax.set_xscale("log")
    axes[0, 0].set_title(title)
    axes[-1, 0].set_xlabel(x_label)
    fig.tight_layout()
    fig.savefig(target, dpi=110)


if __name__ == "__main__":
    main()
