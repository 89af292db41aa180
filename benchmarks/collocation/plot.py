#!/usr/bin/env python3
"""Plots of the collocation benchmark, from the JSON run.py writes.

    python3 benchmarks/collocation/plot.py [docs/benchmarks/collocation.json] [--out-dir DIR]

collocation_cpu.png: CPU per delivered image and CPU per epoch for each configuration and K
(Python jobs' interpreter start, imports and exit hatched on top of the steady part).
collocation_throughput.png: images/s delivered to all K jobs together.
Bars are medians; the whiskers span the repeats (min to max).
"""
import argparse
import json
import os
import sys

ORDER = ("shared_c", "shared_py", "indep_tsock", "torchvision")
SHORT = {
    "shared_c": "tsock shared, C consumers",
    "shared_py": "tsock shared, Python consumers",
    "indep_tsock": "tsock, one producer per job",
    "torchvision": "torchvision DataLoader per job",
}
COLORS = {"shared_c": "#1b7837", "shared_py": "#7fbf7b", "indep_tsock": "#9970ab",
          "torchvision": "#d6604d"}


def _bars(ax, data, ks, value, startup=None, startup_div=1.0, scale=1.0, fmt="{:.2f}"):
    """Grouped bars: one group per K, one bar per configuration."""
    configs = [c for c in ORDER if c in data]
    width = 0.8 / len(configs)
    for i, c in enumerate(configs):
        xs, meds, lo, hi, ups = [], [], [], [], []
        for j, k in enumerate(ks):
            e = data[c].get(str(k))
            if not e or not e.get(value):
                continue
            xs.append(j + (i - (len(configs) - 1) / 2) * width)
            m = e[value]["median"] * scale
            meds.append(m)
            lo.append(m - e[value]["min"] * scale)
            hi.append(e[value]["max"] * scale - m)
            fixed = e.get(startup) if startup else None
            ups.append(fixed["median"] * scale / startup_div if fixed else 0.0)
        ax.bar(xs, meds, width, color=COLORS[c], label=SHORT[c],
               yerr=[lo, hi], capsize=2, error_kw={"elinewidth": 0.8})
        if any(u > 0 for u in ups):
            ax.bar(xs, ups, width, bottom=meds, color="white", edgecolor=COLORS[c],
                   hatch="///", linewidth=0.6)
        for x, m, u, h in zip(xs, meds, ups, hi):
            text = fmt.format(m) + ("\n+" + fmt.format(u) if u > 0 else "")
            ax.annotate(text, (x, m + max(u, h)), ha="center", va="bottom", fontsize=6.5,
                        xytext=(0, 2), textcoords="offset points")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.12)  # room for the labels under the title
    ax.set_xticks(range(len(ks)))
    ax.set_xticklabels([f"K = {k}" for k in ks])
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def plot(result, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    data = result["results"]
    ks = result["config"]["ks"]
    m = result["machine"]
    cfg = result["config"]
    sub = (f"{m['cpus']} CPUs ({m['cpu_model']}), {cfg['epochs_per_job']} epochs per job, "
           f"{result['dataset'].get('images', '?')} images, step {cfg['delay_ms']} ms/batch; "
           f"medians of {cfg['repeat']}, whiskers min-max")
    paths = []

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.8))
    _bars(a1, data, ks, "steady_cpu_ms_per_image", startup=None, fmt="{:.2f}")
    a1.set_ylabel("CPU ms per delivered image")
    a1.set_title("CPU per delivered image, steady\n(all processes; Python start-up, imports "
                 "and exit excluded)", fontsize=10)
    _bars(a2, data, ks, "steady_cpu_s_per_epoch", startup="python_fixed_cpu_s",
          startup_div=cfg["epochs_per_job"], fmt="{:.2f}")
    a2.set_ylabel("CPU s per epoch (all K jobs advance one epoch)")
    a2.set_title("CPU per epoch of the K jobs together\n(hatched, '+': Python start-up, imports "
                 "and exit, spread over the run's epochs)", fontsize=10)
    handles, labels = a1.get_legend_handles_labels()
    handles.append(Patch(facecolor="white", edgecolor="grey", hatch="///"))
    labels.append("Python start-up, imports, exit")
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle("Collocated jobs: CPU spent on data loading\n" + sub, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    p = os.path.join(out_dir, "collocation_cpu.png")
    fig.savefig(p, dpi=130)
    plt.close(fig)
    paths.append(p)

    fig, ax = plt.subplots(figsize=(8, 4.8))
    _bars(ax, data, ks, "images_per_s", fmt="{:.0f}")
    ax.set_ylabel("images/s delivered to all jobs together")
    ax.set_title("Aggregate throughput of K collocated jobs\n" + sub, fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    p = os.path.join(out_dir, "collocation_throughput.png")
    fig.savefig(p, dpi=130)
    plt.close(fig)
    paths.append(p)
    return paths


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="?",
                    default=os.path.join(repo, "docs", "benchmarks", "collocation.json"))
    ap.add_argument("--out-dir", default=None, help="default: the JSON file's folder")
    args = ap.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot.py: matplotlib is not installed (apt-get install python3-matplotlib, or "
              "pip install matplotlib)", file=sys.stderr)
        return 1
    with open(args.json) as f:
        result = json.load(f)
    for p in plot(result, args.out_dir or os.path.dirname(os.path.abspath(args.json))):
        print(f"written: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
