"""The figures of a fleetsim result, from a file loaded by fleetsim_results (without pandas).

Each function takes the loaded result and returns a matplotlib figure, or None where the file
has nothing to draw. tools/plot/fleetsim-plot saves them as PNG and SVG; fleetsim_report.py
inlines them as SVG in one HTML page.

  scaling      a sweep: tokens/s per GPU and scaling efficiency against the GPU count, a curve
               per series (points that differ only in size, as `fleetsim sweep` groups them);
               points that do not fit marked on the axis, not left out
  breakdown    every variant's step stacked as compute, exposed communication by kind and
               idle time (averaged over ranks); a variant that does not fit marked so
  memory       every variant's memory per GPU at its peak, item by item, against its capacity,
               with the 15-30% of it that practitioners keep free shaded
  runs         runs: the cumulative distribution of time to train over the replications, and
               of cost where priced (in USD, thousand or million USD as the costs need)
  attribution  each attributed variant: the first variant's step time, each cause's part, and
               the variant's (a waterfall)
  sensitivity  each variant with a sensitivity analysis: the step time with each input one
               sigma either way (a tornado)
  collective   a collective file: bus bandwidth against message size
"""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)

# Identical input gives identical SVG: no date, a fixed hash salt for element ids.
matplotlib.rcParams["svg.hashsalt"] = "fleetsim"
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, smaller
matplotlib.rcParams["text.parse_math"] = False  # a name's '$' is a dollar, not TeX

SIZE_AXES = {"cluster.nodes", "layout.dp"}  # the swept fields that set a point's size
DAY = 86400.0
GB = 1e9
BREAKDOWN_LABELS = {
    "compute": "compute",
    "exposed_dp": "exposed data-parallel comm",
    "exposed_tp": "exposed tensor-parallel comm",
    "exposed_cp": "exposed context-parallel comm",
    "exposed_ep": "exposed expert-parallel comm",
    "exposed_pp": "exposed pipeline transfers",
    "exposed_host": "exposed offload copies",
    "exposed_comm": "exposed communication",
    "idle": "idle (bubbles, waits)",
}


def _title(result):
    return result.attributes.get("scenario_name", "")


def simulated(row):
    return float(row["simulated"]) == 1.0


def _finished(figure, result):
    """The figure titled with the scenario and laid out; None stays None."""
    if figure is not None:
        figure.suptitle(_title(result))
        figure.tight_layout()
    return figure


def _value_text(value):
    """A swept value as the scenario writes it: text, or a number in the shortest form that
    reads back to it, without a needless '.0'."""
    if not isinstance(value, float):
        return str(value)
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def money_scale(largest):
    """(factor, unit) to write amounts up to `largest` USD in: USD, thousand or million USD."""
    if largest >= 1e6:
        return 1e-6, "million USD"
    if largest >= 1e4:
        return 1e-3, "thousand USD"
    return 1.0, "USD"


def _slanted_names(axis, names):
    slanted = len(names) > 3
    axis.set_xticks(range(len(names)))
    axis.set_xticklabels(names, rotation=45 if slanted else 0,
                         ha="right" if slanted else "center", fontsize=8)


def _figure_for(names, height=4.5):
    width = max(6.0, 0.45 * len(names) + 2)
    slanted = len(names) > 3
    # Room under the axis for names written at 45 degrees.
    return plt.subplots(figsize=(width, height + (0.05 * max(map(len, names)) if slanted else 0)))


def scaling(result):
    if not result.swept:
        return None
    # The summary's swept columns (sweep.<path>) but those that set a point's size.
    axes_swept = [a for a in result.swept if a.removeprefix("sweep.") not in SIZE_AXES]
    series = {}
    for row in result.rows():
        key = [f"{axis.removeprefix('sweep.')}={_value_text(row[axis])}" for axis in axes_swept]
        # As `fleetsim sweep` scales them: the node preset, GPU profile and model too.
        label = ", ".join(key) or f"{row['node']}, {row['model']}"
        fits = simulated(row)
        series.setdefault(label, []).append(
            (int(row["gpus"]), float(row["tokens_per_s_per_gpu"]) if fits else None,
             float(row["scaling_efficiency"]) if fits else None))
    figure, (per_gpu, efficiency) = plt.subplots(1, 2, figsize=(11, 4.2))
    marked = False
    for index, (label, points) in enumerate(series.items()):
        color = f"C{index % 10}"
        points.sort()
        fitting = [p for p in points if p[1] is not None]
        if fitting:
            gpus = [p[0] for p in fitting]
            per_gpu.plot(gpus, [p[1] for p in fitting], marker="o", color=color, label=label)
            efficiency.plot(gpus, [p[2] for p in fitting], marker="o", color=color, label=label)
        # A point that does not fit: a cross on the axis at its GPU count.
        unfit = [p[0] for p in points if p[1] is None]
        if unfit:
            for axis in (per_gpu, efficiency):
                axis.plot(unfit, [0] * len(unfit), linestyle="none", marker="x", color=color,
                          markersize=9, clip_on=False,
                          label=None if marked or axis is per_gpu else "does not fit")
            marked = True
    ticks = sorted({p[0] for points in series.values() for p in points})
    for axis in (per_gpu, efficiency):
        axis.set_xscale("log", base=2)
        axis.set_xticks(ticks, [str(t) for t in ticks])
        axis.minorticks_off()
        axis.set_xlabel("GPUs")
        axis.grid(True, which="both", alpha=0.3)
    per_gpu.set_ylabel("tokens/s per GPU")
    per_gpu.set_ylim(bottom=0)
    efficiency.set_ylabel("scaling efficiency (from the smallest point)")
    # Re-planned points can scale above 1: keep them in view.
    highest = max([p[2] for points in series.values() for p in points
                   if p[2] is not None and not math.isnan(p[2])], default=1.0)
    efficiency.set_ylim(0, max(1.05, 1.05 * highest))
    efficiency.legend(fontsize=8)
    return _finished(figure, result)


def breakdown(result):
    names, parts, unfit = [], {c: [] for c in BREAKDOWN_LABELS}, []
    for variant in result.variants.values():
        names.append(variant.attributes["name"])
        if int(variant.attributes["simulated"]) != 1:
            unfit.append(len(names) - 1)
            seconds = {}
        else:
            table = variant.tables["breakdown"]
            seconds = dict(zip(table["component"], (float(s) for s in table["seconds"])))
        if "exposed_dp" in seconds:
            seconds["exposed_comm"] = 0.0  # shown by kind
        for component in seconds:  # one this module does not know, drawn by its own name
            parts.setdefault(component, [0.0] * (len(names) - 1))
        for component in parts:
            parts[component].append(seconds.get(component, 0.0))
    if len(unfit) == len(names):
        return None
    figure, axis = _figure_for(names)
    bottom = [0.0] * len(names)
    # Each component its own colour in every figure, whichever are drawn.
    for colour, (component, values) in enumerate(parts.items()):
        if not any(values):
            continue
        axis.bar(range(len(names)), values, bottom=bottom,
                 label=BREAKDOWN_LABELS.get(component, component), color=f"C{colour}")
        bottom = [b + v for b, v in zip(bottom, values)]
    for index in unfit:
        axis.text(index, 0, "does not fit", rotation=90, ha="center", va="bottom", fontsize=8,
                  color="dimgrey")
    _slanted_names(axis, names)
    axis.set_ylabel("step time (s), averaged over ranks")
    axis.legend(fontsize=8)
    axis.set_title(_title(result))
    figure.tight_layout()
    return figure


def memory_at_peak(variant):
    """(item, GB) of what the variant's fullest GPU holds at its peak: items held all along or
    at the peak's moment (the others peak elsewhere)."""
    table = variant.tables["memory"]
    peak = variant.attributes.get("memory_peak_moment", "")
    return [(item, float(size) / GB)
            for item, size, moment in zip(table["item"], table["bytes"], table["moment"])
            if moment in ("all along", peak) and float(size) > 0]


def memory(result):
    variants = list(result.variants.values())
    if not variants:
        return None
    names = [v.attributes["name"] for v in variants]
    figure, axis = _figure_for(names, height=5.0)
    items = []
    for variant in variants:
        for item, _ in memory_at_peak(variant):
            if item not in items:
                items.append(item)
    colors = {item: f"C{i % 10}" for i, item in enumerate(items)}
    bottom = [0.0] * len(variants)
    for item in items:
        values = [dict(memory_at_peak(v)).get(item, 0.0) for v in variants]
        axis.bar(range(len(variants)), values, bottom=bottom, label=item, color=colors[item])
        bottom = [b + v for b, v in zip(bottom, values)]
    for index, variant in enumerate(variants):
        capacity = float(variant.attributes["memory_capacity_bytes"]) / GB
        # The 15-30% of capacity practitioners keep free, shaded; the capacity a line.
        axis.fill_between([index - 0.45, index + 0.45], 0.70 * capacity, 0.85 * capacity,
                          color="orange", alpha=0.25, linewidth=0,
                          label="15-30% kept free" if index == 0 else None)
        axis.hlines(capacity, index - 0.45, index + 0.45, color="red",
                    label="capacity" if index == 0 else None)
    _slanted_names(axis, names)
    axis.set_ylabel("memory per GPU at its peak (GB)")
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axis.set_title(_title(result))
    figure.tight_layout()
    return figure


def runs(result):
    runs_of = [(v.attributes["name"], v.run) for v in result.variants.values() if v.run]
    if not runs_of:
        return None
    # Cost for the runs that have a price (compare entries may set one and not the others).
    costs = [float(c) for _, run in runs_of for c in run.tables.get("cost_usd", [])]
    priced = bool(costs)
    figure, axes = plt.subplots(1, 2 if priced else 1, figsize=(11 if priced else 6, 4.2))
    axes = list(axes) if priced else [axes]
    panels = [("wall_s", 1 / DAY, "time to train (days)")]
    if priced:
        factor, unit = money_scale(max(costs))
        panels.append(("cost_usd", factor, f"cost ({unit})"))
    # Cumulative distributions: overlaid, they stay readable for many variants, and the P50
    # and P90 are where each curve crosses the dotted lines.
    for axis, (dataset, scale, label) in zip(axes, panels):
        for index, (name, run) in enumerate(runs_of):
            if dataset not in run.tables:
                continue
            values = sorted(float(v) * scale for v in run.tables[dataset])
            shares = [(i + 1) / len(values) for i in range(len(values))]
            axis.step(values, shares, where="post", label=name, color=f"C{index % 10}")
        for q in (0.5, 0.9):
            axis.axhline(q, color="grey", linestyle=":", linewidth=0.8)
        axis.set_xlabel(label)
        axis.set_ylabel("share of replications finished (P50, P90 dotted)")
        axis.set_ylim(0, 1.02)
        axis.grid(True, alpha=0.3)
    axes[-1].legend(fontsize=7)
    return _finished(figure, result)


def swing(minus, plus):
    """How far an input moves the step either way; -1 where a side did not run (NaN), so that
    it sorts last, as the console's table sorts it."""
    width = abs(float(plus) - float(minus))
    return -1.0 if math.isnan(width) else width


def _panels(result, analysis, width, height, drawable):
    """(figure, [(axis, variant, its `analysis` group)]): a panel a variant whose analysis
    (attribution, sensitivity) has something to draw; (None, []) where none has."""
    analysed = [v for v in result.variants.values()
                if analysis in v.groups and drawable(v.groups[analysis])]
    if not analysed:
        return None, []
    figure, axes = plt.subplots(1, len(analysed), figsize=(width * len(analysed), height),
                                squeeze=False)
    return figure, [(axis, v, v.groups[analysis]) for axis, v in zip(axes[0], analysed)]


def attribution(result):
    figure, panels = _panels(result, "attribution", 6, 4.5,
                             lambda group: len(group.tables["parts"]["factor"]) > 0)
    for axis, variant, group in panels:
        parts = group.tables["parts"]
        start = float(group.attributes["baseline_step_time_s"])
        end = float(group.attributes["variant_step_time_s"])
        labels = [group.attributes["against"]]
        level = start
        axis.bar(0, start, color="grey")
        for i, (factor, part) in enumerate(zip(parts["factor"], parts["step_time_s"])):
            part = float(part)
            if math.isnan(part):
                continue
            axis.bar(len(labels), part, bottom=level, color="C3" if part > 0 else "C2")
            level += part
            labels.append(factor)
        axis.bar(len(labels), end, color="grey")
        labels.append(variant.attributes["name"])
        _slanted_names(axis, labels)
        axis.set_ylabel("step time (s)")
        axis.set_title(f"{variant.attributes['name']} against {group.attributes['against']}",
                       fontsize=9)
    return _finished(figure, result)


def sensitivity(result):
    # (A variant that does not fit has no interval: nothing to draw.)
    figure, panels = _panels(result, "sensitivity", 6.5, 4.8,
                             lambda group: "step_time_s" in group.tables["intervals"]["metric"])
    for axis, variant, group in panels:
        inputs = group.tables["inputs"]
        intervals = group.tables["intervals"]
        nominal = float(dict(zip(intervals["metric"], intervals["nominal"]))["step_time_s"])
        rows = sorted(zip(inputs["input"], inputs["step_time_s_minus"], inputs["step_time_s_plus"]),
                      key=lambda r: -swing(r[1], r[2]))[:12]
        rows.reverse()  # the widest on top
        for y, (name, minus, plus) in enumerate(rows):
            for value, color in ((float(minus), "C0"), (float(plus), "C1")):
                if not math.isnan(value):
                    axis.barh(y, value - nominal, left=nominal, color=color)
        axis.set_yticks(range(len(rows)))
        axis.set_yticklabels([r[0] for r in rows], fontsize=7)
        axis.axvline(nominal, color="black", linewidth=0.8)
        axis.set_xlabel("step time (s): input one sigma below (blue) and above (orange)")
        axis.set_title(variant.attributes["name"], fontsize=9)
    return _finished(figure, result)


def collective(result):
    table = result.collective
    if table is None or not len(table["size_bytes"]):
        return None
    figure, axis = plt.subplots(figsize=(7, 4.2))
    axis.plot([float(s) for s in table["size_bytes"]],
              [float(b) for b in table["busbw_gb_per_s"]], marker="o")
    axis.set_xscale("log", base=2)
    axis.set_xlabel("message size (bytes)")
    axis.set_ylabel("bus bandwidth (GB/s)")
    axis.grid(True, which="both", alpha=0.3)
    attributes = result.attributes
    axis.set_title(f"{attributes.get('op', '')} on {attributes.get('ranks', '')} GPUs of "
                   f"{attributes.get('nodes', '')} x {attributes.get('node', '')}")
    figure.tight_layout()
    return figure


# Every figure, by the name the plot tool gives its files (<stem>-<name>).
FIGURES = {
    "scaling": scaling,
    "breakdown": breakdown,
    "memory": memory,
    "runs": runs,
    "attribution": attribution,
    "sensitivity": sensitivity,
    "collective": collective,
}
