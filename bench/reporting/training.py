"""Tables of the training and start-up benchmarks (torch_synthetic, torch_ddp_backends,
torch_zero, powersgd, torch_import_cost, tensorflow_synthetic, clients): (caption, Markdown
table lines) from a results file."""

from __future__ import annotations

from typing import Any

import powersgd as powersgd_script
from common.tables import markdown_table, ratio_cell, time_cell

Table = tuple[str, list[str]]


def _by(rows: list[dict[str, Any]], key: str = "implementation") -> dict[str, dict[str, Any]]:
    return {r[key]: r for r in rows}


def torch_synthetic(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    rows = doc["results"]
    ddp = _by(rows)["torch DDP (gloo)"]["images_per_s_per_rank"]
    table = [[r["implementation"],
              f"{r['images_per_s_per_rank']:.1f} ± {r['images_per_s_conf95']:.1f}",
              f"{r['images_per_s']:.1f}", ratio_cell(r["images_per_s_per_rank"], ddp)]
             for r in rows]
    caption = (f"Synthetic training, model {s['model']}, {s['image_size']}x{s['image_size']} "
               f"images, batch {s['batch_size']} per rank, {s['ranks']} ranks "
               f"(`--bind-to {s['bind_to']}`), best of {s['repeats']} alternating runs: images "
               "per second; ratio = throughput / DDP's (above 1: faster than DDP). No "
               "communication: every rank trains alone, the bound for any data-parallel run "
               "on this host.")
    return caption, markdown_table(["runtime", "img/s per rank", "total img/s", "vs DDP"], table)


def torch_ddp_backends(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    models = list(dict.fromkeys(r["case"] for r in doc["results"]))
    rates = {(r["case"], r["implementation"]): r["images_per_s"] for r in doc["results"]}
    table = [[m, f"{rates[m, 'hora']:.1f}", f"{rates[m, 'gloo']:.1f}",
              ratio_cell(rates[m, "hora"], rates[m, "gloo"])] for m in models]
    caption = (f"The same DDP training step over the `hora` and the `gloo` torch.distributed "
               f"backends in one job, {s['ranks']} ranks, batch {s['batch_size']} per rank, "
               f"{s['steps']} timed steps, best of {s['repeats']} alternating runs: images per "
               "second of all ranks; ratio = hora / gloo (above 1: Hora is faster).")
    return caption, markdown_table(["model", "hora img/s", "gloo img/s", "hora / gloo"], table)


def torch_zero(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    by_ranks: dict[int, dict[str, dict[str, Any]]] = {}
    for r in doc["results"]:
        by_ranks.setdefault(r["ranks"], {})[r["implementation"]] = r
    table = []
    for ranks, ways in by_ranks.items():
        std, sib, zero = ways["standard"], ways["step_in_backward"], ways["zero"]
        table.append([str(ranks), f"{std['max_state_bytes'] / 2**20:.2f} MiB",
                      f"{zero['max_state_bytes'] / 2**20:.2f} MiB",
                      ratio_cell(zero["max_state_bytes"], std["max_state_bytes"]),
                      time_cell(std["median_s"]), time_cell(sib["median_s"]),
                      ratio_cell(sib["median_s"], std["median_s"]), time_cell(zero["median_s"]),
                      ratio_cell(zero["median_s"], std["median_s"])])
    header = ["ranks", "state: DistributedOptimizer", "ZeroRedundancyOptimizer", "ratio",
              "step: standard", "step_in_backward", "ratio", "ZeRO", "ratio"]
    caption = (f"MLP of {s['layers']} x Linear({s['width']}, {s['width']}) ({s['parameters']} "
               f"float32 parameters, {s['optimizer']}, batch {s['batch_size']} per rank): "
               "optimizer state of the largest rank and median step time of the slowest; "
               "ratio = figure / the standard DistributedOptimizer's (below 1: less).")
    return caption, markdown_table(header, table)


def powersgd(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    caption = (f"PowerSGD against plain allreduce, {s['ranks']} ranks, MLP "
               f"1024-{s['width']}-{s['width']}-512 ({s['weights'] / 1e6:.1f} M weights), batch "
               f"{s['batch_size']} per rank, median of {s['steps']} steps averaged over the "
               "ranks; ratios = figure / plain allreduce's (below 1: less).")
    return caption, powersgd_script.table(doc["results"])


def torch_import_cost(doc: dict[str, Any]) -> Table:
    labels = {"scan": "torch's entry-point scan (with or without Hora)",
              "load": "import hora_torch_autoload", "register": "register()",
              "added": "Hora adds (load + register)"}
    table = [[r["scope"], labels.get(r["case"], r["case"]), time_cell(r["median_s"]),
              time_cell(r.get("min_s"))] for r in doc["results"]]
    caption = ("What Hora's torch.distributed registration adds to `import torch`: inside one "
               "process, and whole `python -c 'import torch'` processes with autoloading on and "
               "off, whose difference is an upper bound (it holds torch's own entry-point scan "
               f"and the machine's noise); median and least of {doc['settings']['runs']} runs.")
    return caption, markdown_table(["scope", "measurement", "median", "least"], table)


def tensorflow_synthetic(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    rows = doc["results"]
    mwms = _by(rows)["MultiWorkerMirroredStrategy"]["steps_per_s"]
    table = [[r["implementation"], time_cell(r["median_s"]), f"{r['steps_per_s']:.2f}",
              f"{r['images_per_s']:.1f}", time_cell(r["rank0_cpu_s"]),
              ratio_cell(r["steps_per_s"], mwms)] for r in rows]
    caption = (f"TensorFlow training step, model {s['model']}, batch {s['batch_size']} per rank, "
               f"{s['ranks']} ranks, {s['steps']} steps x {s['rounds']} alternating rounds: "
               "median step time, rank 0's CPU time per step; ratio = steps/s over "
               "MultiWorkerMirroredStrategy's (above 1: faster).")
    header = ["run", "step", "steps/s", "img/s", "rank 0 CPU per step", "vs MWMS"]
    return caption, markdown_table(header, table)


def clients(doc: dict[str, Any]) -> Table:
    s = doc["settings"]
    steps = {(r["case"], r["implementation"]): r["median_step_s"] for r in doc["results"]}
    names = list(dict.fromkeys(r["case"] for r in doc["results"]))
    table = [[n, time_cell(steps[n, "gloo"]), time_cell(steps[n, "hora"]),
              ratio_cell(steps[n, "gloo"], steps[n, "hora"])] for n in names]
    caption = (f"Training clients over gloo and hora, {s['ranks']} ranks, model {s['model']}, "
               f"batch {s['batch_size']} per rank: median step time of {s['steps']} steps after "
               f"{s['warmup']} warm-up, best of {s['repeats']}; ratio = gloo / hora (above 1: "
               "Hora is faster).")
    return caption, markdown_table(["client", "gloo per step", "hora per step", "gloo / hora"],
                                   table)
