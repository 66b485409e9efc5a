"""Rank 0's negotiation cost, the allreduce algorithms and the links each algorithm opens at 8 to
4,096 ranks, from the scale simulator (bench/scale/: Hora's real coordinator, participant, queue,
codec and fusion planner, N ranks in one process over an in-memory network; an alpha-beta model
of the data plane; the real algorithms run one rank at a time to count the peers they use).

    python bench/scale.py [--ranks 8,16,...,4096] [--tensors 1,10,100,200,1000,10000]
        [--budget 4100000] [--thrash-budget 320000] [--label after|before] [--json PATH] [--no-plots]
        [--model-only]

Builds the simulator (-DHORA_BUILD_SCALE_SIM=ON in build/scale, or takes --binary), runs it,
prints the tables and writes bench/results/scale.json. Rows of the other --label already in that
file are kept, so the curve of the code before a change (run with --label before from a checkout
of it, --binary naming its simulator) stays beside the current one. --model-only runs only the
data-plane model and the link census, keeping every negotiation row of the file. Plots go to
docs/images/.
Negotiation CPU is measured (thread CPU time around the real calls); network times are modelled.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from common.launch import REPO
from common.results import Recorder, default_path, json_help
from reporting.scale import MODEL_RANKS, scale

BUILD = REPO / "build" / "scale"
IMAGES = REPO / "docs" / "images"
RANKS = "8,16,32,64,128,256,512,1024,2048,4096"
TENSORS = "1,10,100,200,1000,10000"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default=RANKS, help="world sizes (default %(default)s)")
    p.add_argument("--tensors", default=TENSORS, help="tensors per step (default %(default)s)")
    p.add_argument("--steps", type=int, default=4, help="steps per cell, the first uncached")
    p.add_argument("--chunks", type=int, default=4, help="parts a rank submits a step in")
    p.add_argument("--budget", type=int, default=4_100_000,
                   help="skip cells with N x T above this (default %(default)s)")
    p.add_argument("--thrash-budget", type=int, default=320_000,
                   help="skip cells with T above the cache capacity and N x T above this "
                        "(every step renegotiates in full; default %(default)s)")
    p.add_argument("--alpha-us", type=float, default=5.0, help="latency between hosts")
    p.add_argument("--gbits", type=float, default=10.0, help="bandwidth between hosts")
    p.add_argument("--intra-alpha-us", type=float, default=1.0, help="latency within a host")
    p.add_argument("--intra-gbits", type=float, default=100.0, help="bandwidth within a host")
    p.add_argument("--ranks-per-host", type=int, default=8, help="L of the hierarchical model")
    p.add_argument("--label", default="after", choices=("after", "before"),
                   help="which code version these negotiation rows are (default %(default)s)")
    p.add_argument("--binary", type=Path, help="a built hora_scale_sim (skips the build)")
    p.add_argument("--raw", type=Path, help=argparse.SUPPRESS)  # the simulator's own output
    p.add_argument("--commit", help=argparse.SUPPRESS)  # of the code a --raw file ran
    p.add_argument("--json", type=Path, help=json_help("scale", per_rank_count=False))
    p.add_argument("--no-plots", action="store_true", help="write no PNG")
    p.add_argument("--model-only", action="store_true",
                   help="rerun the model and the link census only; keep the negotiation rows")
    return p.parse_args(argv)


def build() -> Path:
    """Configures build/scale with the simulator and builds it; returns the binary."""
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(BUILD), "-G", "Ninja",
                    "-DHORA_BUILD_SCALE_SIM=ON", "-DHORA_WITH_MPI=OFF",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", str(BUILD), "-j", "2", "--target", "hora_scale_sim_main"],
                   check=True, stdout=subprocess.DEVNULL)
    return BUILD / "bench" / "scale" / "hora_scale_sim"


def simulate(binary: Path, args: argparse.Namespace, *flags: str) -> dict[str, Any]:
    command = [str(binary), "--ranks", args.ranks, "--tensors", args.tensors,
               "--steps", str(args.steps), "--chunks", str(args.chunks),
               "--budget", str(args.budget),
               "--thrash-budget", str(args.thrash_budget), "--alpha-us", str(args.alpha_us),
               "--gbits", str(args.gbits), "--intra-alpha-us", str(args.intra_alpha_us),
               "--intra-gbits", str(args.intra_gbits), "--ranks-per-host",
               str(args.ranks_per_host), *flags]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def negotiation_rows(raw: dict[str, Any], label: str) -> list[dict[str, Any]]:
    """The simulator's cells as flat result rows (seconds in *_s keys)."""
    rows = []
    for c in raw["negotiation"]:
        row: dict[str, Any] = {"implementation": label, "case": "negotiation",
                               "ranks": c["ranks"], "tensors": c["tensors"], "order": c["order"]}
        for step in ("uncached", "cached"):
            s = c[step]
            row[f"{step}_cpu_s"] = s["negotiation_cpu_s"]
            for key in ("ingest_cpu_s", "build_cpu_s", "decode_cpu_s", "encode_cpu_s", "cycles",
                        "response_batches", "collectives", "full_requests", "peak_pending",
                        "liveness_cpu_s", "deadlock_cpu_s"):
                row[f"{step}_{key}"] = s[key]
            for who in ("rank0", "rank1"):
                for key, value in s[who].items():
                    row[f"{step}_{who}_{key}"] = value
        row.update(c["memory"])
        rows.append(row)
    rows += [{"implementation": label, "case": "skipped", **s} for s in raw["skipped"]]
    return rows


def model_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"implementation": "alpha-beta model", "case": "allreduce_model", **m}
            for m in raw["model"]]


def link_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The link census: per N and algorithm, the peers a rank moves bytes with."""
    return [{"implementation": "real algorithms, one rank at a time", "case": "links", **c}
            for c in raw["links"]]


def control_rows(raw: dict[str, Any], negotiation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The control tree's census per N, with rank 0's bytes per step of the 200-tensor step
    (same order, 'after') in the star and in the tree: the star writes every response batch
    N - 1 times, the tree once per child of rank 0 (a worker receives each batch once either way,
    so its bytes received times the copies is what rank 0 writes)."""
    rows = []
    for c in raw.get("control", []):
        row: dict[str, Any] = {"implementation": "real control tree", "case": "control", **c}
        cell = next((r for r in negotiation if r["case"] == "negotiation"
                     and r["implementation"] == "after" and r["ranks"] == c["ranks"]
                     and r["tensors"] == 200 and r["order"] == "same"), None)
        for step in ("uncached", "cached"):
            star = tree = None
            if cell is not None:
                star = cell[f"{step}_rank0_bytes_sent"]
                tree = cell[f"{step}_rank1_bytes_received"] * c["rank0_copies"]
            row[f"{step}_rank0_bytes_sent_star"] = star
            row[f"{step}_rank0_bytes_sent_tree"] = tree
        rows.append(row)
    return rows


def plot(doc: dict[str, Any], images: Path) -> None:
    """Negotiation CPU against N (before and after) and modelled allreduce time against size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, style in (("before", "--"), ("after", "-")):
        for step, marker in (("cached", "o"), ("uncached", "s")):
            for order in ("same", "random"):
                pts = sorted((r["ranks"], r[f"{step}_cpu_s"] * 1e3) for r in doc["results"]
                             if r["case"] == "negotiation" and r["implementation"] == label
                             and r["tensors"] == 200 and r["order"] == order)
                if pts:
                    ax.plot(*zip(*pts), style, marker=marker, markersize=4,
                            label=f"{step}, {order} order, {label}")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set(xscale="log", yscale="log", xlabel="ranks", ylabel="rank 0 negotiation CPU per step (ms)",
           title="Rank 0's negotiation of 200 tensors per step (measured, real code)")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(images / "scale-negotiation.png", dpi=110, metadata={"Software": None})
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for ax, n in zip(axes, (MODEL_RANKS[1], MODEL_RANKS[-1])):
        rows = [r for r in doc["results"] if r["case"] == "allreduce_model" and r["ranks"] == n]
        sizes = [r["bytes"] for r in rows]
        for key, name in (("recursive_doubling_s", "recursive doubling"), ("ring_s", "ring"),
                          ("rank_ordered_s", "rank-ordered"),
                          ("chain_ordered_s", "chain-ordered"),
                          ("bruck_ordered_s", "bruck-ordered"), ("gather_fold_s", "gather-fold"),
                          ("hierarchical_s", "hierarchical"),
                          ("lower_bound_s", "lower bound")):
            ys = [r[key] for r in rows]
            if all(y is not None for y in ys):
                ax.plot(sizes, ys, ":" if key == "lower_bound_s" else "-", label=name)
        ax.set(xscale="log", yscale="log", xlabel="bytes", title=f"{n} ranks (modelled)")
        ax.grid(True, which="both", linewidth=0.3)
    axes[0].set_ylabel("seconds per allreduce")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(images / "scale-allreduce-model.png", dpi=110, metadata={"Software": None})
    plt.close(fig)

    links = [r for r in doc["results"] if r["case"] == "links"]
    if links:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ranks = sorted({r["ranks"] for r in links})
        ax.plot(ranks, [n - 1 for n in ranks], "k:", label="full mesh (N - 1)")
        colours = plt.get_cmap("tab20").colors
        for i, name in enumerate(dict.fromkeys(r["algorithm"] for r in links)):
            rows = [r for r in links if r["algorithm"] == name]
            # Hierarchical: the links to other hosts (TCP; the host's own go through shared
            # memory where its ranks can share it).
            hier = rows[0]["max_cross_host_peers"] is not None
            key = "max_cross_host_peers" if hier else "max_peers"
            pts = sorted((r["ranks"], r[key]) for r in rows)
            ax.plot(*zip(*pts), "--" if hier else "-", marker="o", markersize=3,
                    color=colours[i % len(colours)],
                    label=name + (" (to other hosts)" if hier else ""))
        ax.set(xscale="log", yscale="log", xlabel="ranks",
               ylabel="TCP links of the busiest rank",
               title="Links a rank opens per algorithm (real code, counted)")
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=6, ncol=2)
        ax.grid(True, which="both", linewidth=0.3)
        fig.tight_layout()
        fig.savefig(images / "scale-links.png", dpi=110, metadata={"Software": None})
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    recorder = Recorder("scale")
    binary = args.binary or (None if args.raw else build())
    raw: dict[str, Any] = {"negotiation": [], "skipped": []}
    if args.raw:
        raw = json.loads(args.raw.read_text())
    elif not args.model_only:
        assert binary is not None
        raw = simulate(binary, args, "--no-model")
    model = simulate(binary or build(), args, "--no-negotiation")
    path = args.json or default_path("scale")
    kept: list[dict[str, Any]] = []
    if path.exists():
        kept = [r for r in json.loads(path.read_text())["results"]
                if r["case"] not in ("allreduce_model", "links", "control")
                and (args.model_only or r["implementation"] != args.label)]
    negotiation = [*kept, *negotiation_rows(raw, args.label)]
    results = [*negotiation, *model_rows(model), *link_rows(model),
               *control_rows(model, negotiation)]
    settings = dict(model["settings"])
    settings["ranks"] = args.ranks
    settings["tensors"] = args.tensors
    if path.exists():
        old = json.loads(path.read_text())["settings"]
        if "before_commit" in old:
            settings["before_commit"] = old["before_commit"]
    if args.label == "before":
        done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=False)
        settings["before_commit"] = args.commit or done.stdout.strip() or "?"
    doc = recorder.document(settings, results)
    caption, lines = scale(doc)
    print(caption)
    print("\n".join(lines))
    recorder.write(path, settings, results)
    if not args.no_plots:
        plot(doc, IMAGES)
        print(f"plots: {IMAGES / 'scale-negotiation.png'}, {IMAGES / 'scale-allreduce-model.png'}, "
              f"{IMAGES / 'scale-links.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
