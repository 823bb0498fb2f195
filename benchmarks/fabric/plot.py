#!/usr/bin/env python3
"""benchmarks/fabric/plot.py — draws tierce-bench-fabric's CSV as grouped bar charts.

usage: plot.py CSV PNG

Two panels (p50 and p99 latency, log scale). Along x: the operations; within each group one bar
per (backend, target load): a colour per backend, the loaded variant hatched. The label over a
loaded bar is its p50 (or p99) ratio to the unloaded one — the figure's point: one-sided backends
stay near 1x, two-sided operations do not (seed 000 Fig 6.5).
"""
import csv
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
except ImportError:
    sys.exit("plot.py: matplotlib is missing (Debian: apt install python3-matplotlib); "
             "or pass tierce-bench-fabric --python /path/to/a/python3/with/matplotlib")

COLOURS = {"shm": "#2a9d8f", "tcp": "#e76f51", "verbs": "#264653"}


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: plot.py CSV PNG")
    csv_path, png_path = argv[1], argv[2]
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {csv_path} has no rows")

    ops, series = [], []  # in the order the benchmark measured them
    value = {}
    threads = 0
    for r in rows:
        if r["op"] not in ops:
            ops.append(r["op"])
        key = (r["backend"], r["load"])
        if key not in series:
            series.append(key)
        value[(key, r["op"])] = (float(r["p50_us"]), float(r["p99_us"]))
        threads = max(threads, int(r["load_threads"]))

    # Pairs side by side: each backend unloaded, then loaded.
    backends = list(dict.fromkeys(b for b, _ in series))
    series.sort(key=lambda k: (backends.index(k[0]), k[1] != "unloaded"))

    fig, axes = plt.subplots(2, 1, figsize=(max(9, 1.9 * len(ops)), 8.5), sharex=True)
    width = 0.8 / len(series)
    for panel, (ax, name) in enumerate(zip(axes, ("p50", "p99"))):
        for s, (backend, load) in enumerate(series):
            xs, ys = [], []
            for i, op in enumerate(ops):
                v = value.get(((backend, load), op))
                if v is not None:
                    xs.append(i - 0.4 + width * (s + 0.5))
                    ys.append(v[panel])
            bars = ax.bar(xs, ys, width, color=COLOURS.get(backend, "grey"),
                          hatch="///" if load == "loaded" else None,
                          edgecolor="white" if load == "loaded" else None, linewidth=0)
            if load == "loaded":
                for bar, op in zip(bars, [o for o in ops if ((backend, load), o) in value]):
                    base = value.get(((backend, "unloaded"), op))
                    if base and base[panel] > 0:
                        ratio = value[((backend, load), op)][panel] / base[panel]
                        ax.annotate(f"{ratio:.1f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                    ha="center", va="bottom", fontsize=7, xytext=(0, 1),
                                    textcoords="offset points")
        ax.set_yscale("log")
        ax.set_ylabel(f"{name} latency (µs, log)")
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.set_axisbelow(True)
    axes[1].set_xticks(range(len(ops)))
    axes[1].set_xticklabels([o.replace(" batch", "\nbatch (per batch)") for o in ops])

    handles = [Patch(facecolor=COLOURS.get(b, "grey"), hatch="///" if l == "loaded" else None,
                     edgecolor="white" if l == "loaded" else None,
                     label=f"{b}, {l}" + (f" ({threads} busy thr)" if l == "loaded" else ""))
               for b, l in series]
    axes[0].legend(handles=handles, fontsize=8, ncol=2, loc="upper left")
    axes[0].set_title("Tierce fabric: operation latency against an idle and a CPU-loaded target\n"
                      "(label over a loaded bar: loaded / unloaded)", fontsize=10)
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
