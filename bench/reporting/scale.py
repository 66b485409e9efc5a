"""The tables of the scale simulator's results (bench/scale.py): rank 0's negotiation CPU per
step before and after the coordinator's changes, per N and T, the control plane's messages and
bytes per rank, the state each rank holds, the alpha-beta model of one allreduce, and the links
each algorithm opens."""

from __future__ import annotations

from typing import Any

from common.sizes import format_size
from common.tables import markdown_table, ratio_cell, time_cell

Table = "tuple[str, list[str]]"
HEADLINE_TENSORS = 200
MODEL_RANKS = (8, 64, 512, 4096)
ALGORITHMS = (("recursive_doubling_s", "recursive doubling"), ("ring_s", "ring"),
              ("rank_ordered_s", "rank-ordered"),
              ("chain_ordered_s", "chain-ordered"),
              ("bruck_ordered_s", "bruck-ordered"), ("gather_fold_s", "gather-fold"),
              ("hierarchical_s", "hierarchical"))


def negotiation_rows(doc: dict[str, Any], label: str | None = None) -> list[dict[str, Any]]:
    """The negotiation rows, of one code version when ``label`` is given."""
    return [r for r in doc["results"] if r["case"] == "negotiation"
            and (label is None or r["implementation"] == label)]


def find(rows: list[dict[str, Any]], **keys: Any) -> dict[str, Any] | None:
    """The first row whose fields equal ``keys``."""
    for r in rows:
        if all(r.get(k) == v for k, v in keys.items()):
            return r
    return None


def cpu_table(doc: dict[str, Any], tensors: int = HEADLINE_TENSORS) -> list[str]:
    """Rank 0's negotiation CPU per step at T tensors, before and after, per N and order."""
    rows = negotiation_rows(doc)
    ranks = sorted({r["ranks"] for r in rows if r["tensors"] == tensors})
    header = ["ranks", "order", "uncached before", "uncached after", "cached before",
              "cached after", "cached before / after"]
    table = []
    for n in ranks:
        for order in ("same", "random"):
            b = find(rows, implementation="before", ranks=n, tensors=tensors, order=order)
            a = find(rows, implementation="after", ranks=n, tensors=tensors, order=order)
            if a is None and b is None:
                continue
            table.append([str(n), order,
                          time_cell(b and b["uncached_cpu_s"]), time_cell(a and a["uncached_cpu_s"]),
                          time_cell(b and b["cached_cpu_s"]), time_cell(a and a["cached_cpu_s"]),
                          ratio_cell(b and b["cached_cpu_s"], a and a["cached_cpu_s"], 1)])
    return markdown_table(header, table)


def checks_table(doc: dict[str, Any], tensors: int = HEADLINE_TENSORS) -> list[str]:
    """Rank 0's periodic checks per call, before and after, at the cached step's pending table."""
    rows = negotiation_rows(doc)
    ranks = sorted({r["ranks"] for r in rows if r["tensors"] == tensors})
    header = ["ranks", "order", "liveness check before", "after", "deadlock check before",
              "after"]
    table = []
    for n in ranks:
        for order in ("same", "random"):
            b = find(rows, implementation="before", ranks=n, tensors=tensors, order=order)
            a = find(rows, implementation="after", ranks=n, tensors=tensors, order=order)
            if a is None or b is None or "cached_liveness_cpu_s" not in b:
                continue
            table.append([str(n), order, time_cell(b["cached_liveness_cpu_s"]),
                          time_cell(a["cached_liveness_cpu_s"]),
                          time_cell(b["cached_deadlock_cpu_s"]),
                          time_cell(a["cached_deadlock_cpu_s"])])
    return markdown_table(header, table)


def grid_table(doc: dict[str, Any], field: str, order: str = "same") -> list[str]:
    """``field`` of the 'after' rows, N down, T across; '-' where the cell was skipped."""
    rows = negotiation_rows(doc, "after")
    ranks = sorted({r["ranks"] for r in rows} | {r["ranks"] for r in skipped(doc)})
    tensors = sorted({r["tensors"] for r in rows} | {r["tensors"] for r in skipped(doc)})
    table = []
    for n in ranks:
        cells = []
        for t in tensors:
            r = find(rows, ranks=n, tensors=t, order=order)
            cells.append(time_cell(r[field]) if r else "skipped")
        table.append([str(n), *cells])
    return markdown_table(["ranks", *[f"T={t}" for t in tensors]], table)


def skipped(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in doc["results"] if r["case"] == "skipped"]


def traffic_table(doc: dict[str, Any], tensors: int = HEADLINE_TENSORS) -> list[str]:
    """Control-plane messages and bytes per step of rank 0 and rank 1 ('after', same order)."""
    rows = negotiation_rows(doc, "after")
    header = ["ranks", "step", "rank 0 sends", "rank 0 receives", "rank 1 sends",
              "rank 1 receives", "collectives", "response batches"]
    table = []
    for r in sorted((r for r in rows if r["tensors"] == tensors and r["order"] == "same"),
                    key=lambda r: r["ranks"]):
        for step in ("uncached", "cached"):
            def cell(who: str, way: str, r: dict[str, Any] = r, step: str = step) -> str:
                return (f"{r[f'{step}_{who}_messages_{way}']} msgs, "
                        f"{format_size(r[f'{step}_{who}_bytes_{way}'])}")
            table.append([str(r["ranks"]), step, cell("rank0", "sent"), cell("rank0", "received"),
                          cell("rank1", "sent"), cell("rank1", "received"),
                          str(r[f"{step}_collectives"]), str(r[f"{step}_response_batches"])])
    return markdown_table(header, table)


def memory_table(doc: dict[str, Any]) -> list[str]:
    """Estimated negotiation state per rank ('after', same order), per N and T."""
    rows = negotiation_rows(doc, "after")
    header = ["ranks", "tensors", "coordinator (rank 0)", "of which pending (last step)",
              "participant", "tensor queue"]
    table = [[str(r["ranks"]), str(r["tensors"]), format_size(r["coordinator_bytes"]),
              format_size(r["coordinator_pending_bytes"]), format_size(r["participant_bytes"]),
              format_size(r["queue_bytes"])]
             for r in sorted(rows, key=lambda r: (r["tensors"], r["ranks"]))
             if r["order"] == "same" and r["tensors"] in (HEADLINE_TENSORS, 10000)]
    return markdown_table(header, table)


def model_table(doc: dict[str, Any], ranks: int) -> list[str]:
    """The modelled time of one allreduce per algorithm at ``ranks``, the bound, the choice."""
    header = ["size", *[name for _, name in ALGORITHMS], "lower bound", "chosen (float Sum)",
              "chosen (order-free)"]
    table = []
    for r in doc["results"]:
        if r["case"] != "allreduce_model" or r["ranks"] != ranks:
            continue
        table.append([format_size(r["bytes"]), *[time_cell(r[key]) for key, _ in ALGORITHMS],
                      time_cell(r["lower_bound_s"]), r["choice_float_sum"].replace("_", " "),
                      r["choice_order_free"].replace("_", " ")])
    return markdown_table(header, table)


def links_table(doc: dict[str, Any]) -> list[str]:
    """Per algorithm, the TCP links of the busiest rank at each N of MODEL_RANKS (cross-host and
    host links apart for the hierarchical rows), and the full mesh's N - 1."""
    rows = [r for r in doc["results"] if r["case"] == "links"]
    ranks = [n for n in MODEL_RANKS if any(r["ranks"] == n for r in rows)]
    header = ["algorithm", *[f"N={n}" for n in ranks]]

    def cell(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        if r["max_cross_host_peers"] is None:
            return str(r["max_peers"])
        return f"{r['max_cross_host_peers']} + {r['max_host_peers']} on the host"

    table = [[name, *[cell(find(rows, algorithm=name, ranks=n)) for n in ranks]]
             for name in dict.fromkeys(r["algorithm"] for r in rows)]
    table.append(["full mesh (before)", *[str(n - 1) for n in ranks]])
    return markdown_table(header, table)


def control_table(doc: dict[str, Any]) -> list[str]:
    """Per N, rank 0's control connections and bytes written per step in the star and the tree,
    the busiest rank's connections, the tree's depth and what relaying adds to a round trip."""
    rows = sorted((r for r in doc["results"] if r["case"] == "control"), key=lambda r: r["ranks"])
    header = ["ranks", "rank 0 sockets (star / tree)", "busiest rank (tree)", "depth",
              "rank 0 bytes per step, cached (star / tree)",
              "uncached (star / tree)", "extra round trip"]

    def size(value: int | None) -> str:
        return "-" if value is None else format_size(value)

    def pair(r: dict[str, Any], step: str) -> str:
        return (f"{size(r[f'{step}_rank0_bytes_sent_star'])} / "
                f"{size(r[f'{step}_rank0_bytes_sent_tree'])}")

    table = [[str(r["ranks"]), f"{r['star_rank0_sockets']} / {r['rank0_sockets']}",
              str(r["max_sockets"]), str(r["depth"]), pair(r, "cached"), pair(r, "uncached"),
              time_cell(r["extra_round_trip_s"])] for r in rows]
    return markdown_table(header, table)


def scale(doc: dict[str, Any]) -> tuple[str, list[str]]:
    """Every table of the scale simulator, each under its own caption."""
    s = doc["settings"]
    before = (f"{HEADLINE_TENSORS} tensors of {format_size(s['tensor_bytes'])}, before and after "
              "the coordinator's bit tables (`before`: the core of commit "
              f"{s.get('before_commit', '?')} in the same simulator):")
    traffic = (f"**Control-plane traffic per step**, {HEADLINE_TENSORS} tensors, same order "
               "(bytes as the codec encodes them):")
    checks = ("**Rank 0's periodic checks, CPU per call**, at the largest pending table of a "
              f"cached step of {HEADLINE_TENSORS} tensors (liveness: Coordinator::awaitedRanks, "
              "every 20 ms while tensors are pending; deadlock: failDeadlocks, every 200 ms):")
    lines = [f"**Rank 0's negotiation CPU per step**, {before}", "", *cpu_table(doc), "",
             checks, "", *checks_table(doc), "",
             "**Cached (steady-state) negotiation CPU per step, after**, same order:", "", *grid_table(doc, "cached_cpu_s"), "",
             "**Uncached (first step) negotiation CPU, after**, same order:", "",
             *grid_table(doc, "uncached_cpu_s"), "",
             "**Cached negotiation CPU per step, after, random order per rank**:", "",
             *grid_table(doc, "cached_cpu_s", "random"), "",
             traffic, "", *traffic_table(doc), "",
             "**Estimated negotiation state per rank** (same order):", "", *memory_table(doc)]
    for n in MODEL_RANKS:
        if any(r["case"] == "allreduce_model" and r["ranks"] == n for r in doc["results"]):
            lines += ["", f"**Modelled allreduce, {n} ranks** ({model_caption(s)}):", "",
                      *model_table(doc, n)]
    if any(r["case"] == "links" for r in doc["results"]):
        links = ("**TCP links of the busiest rank per algorithm** (the real algorithm code run "
                 "for each rank, or a sample of 256 and more above 512 ranks, against pipes that "
                 "always move; hierarchical: links to other hosts + links on the host, "
                 f"{s['ranks_per_host']} ranks per host):")
        lines += ["", links, "", *links_table(doc)]
    control = [r for r in doc["results"] if r["case"] == "control"]
    if control:
        caption = (f"**The TCP control plane, star against tree** (fanout {control[0]['fanout']}; "
                   f"bytes for {HEADLINE_TENSORS} tensors, same order; the extra round trip is "
                   "2 (depth - 1) alphas between hosts):")
        lines += ["", caption, "", *control_table(doc)]
    caption = (f"The scale simulator (`bench/scale/`): Hora's real negotiation code for N ranks "
               f"in one process, {s['steps']} steps per cell (the first uncached, the median of "
               f"the others cached), each rank submitting its tensors in {s['chunks']} parts; "
               "negotiation CPU is CLOCK_THREAD_CPUTIME_ID around Coordinator::ingest and "
               "buildBatch. Network times are an alpha-beta model, not measurements.")
    return caption, lines


def model_caption(s: dict[str, Any]) -> str:
    inter = (f"{s['inter_alpha_s'] * 1e6:g} us, {8 / s['inter_beta_s_per_byte'] / 1e9:g} Gbit/s")
    intra = (f"{s['intra_alpha_s'] * 1e6:g} us, {8 / s['intra_beta_s_per_byte'] / 1e9:g} Gbit/s")
    return (f"between hosts {inter}; within a host {intra}; {s['ranks_per_host']} ranks per host "
            "for the hierarchical composition")
