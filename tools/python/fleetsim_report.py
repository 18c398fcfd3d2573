#!/usr/bin/python3
"""One self-contained HTML page of a fleetsim result file (`fleetsim report RESULT.h5`).

The page holds, where the file has them: the comparison of its variants (step, throughput,
MFU, memory against capacity, a run's time and cost to train and cost per checkpoint), where
each step's time goes, memory per GPU item by item against capacity with the 15-30% margin
practitioners keep shaded, why each variant differs from the first (attribution), how sure the
prediction is (sensitivity), a sweep's scaling curves, a run's distributions, a collective's
bandwidth, the assumptions behind the numbers with their sources, and the fleetsim version,
scenario and GPU profiles that produced it. Figures are inline SVG (fleetsim_plots.py): the
page loads nothing else, runs no script and needs no network.

Usage: fleetsim_report.py RESULT.h5 [-o report.html]  (default: RESULT.html beside it)
Exit status: 0 written, 2 the file is not a fleetsim result (or cannot be read).
"""

import argparse
import html
import io
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import fleetsim_output  # noqa: E402  (beside this file)
import fleetsim_plots  # noqa: E402
import fleetsim_results  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402  (its backend chosen by fleetsim_plots)

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
       margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #1a1a1a; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; }
p.meta { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.8em 0; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: right; vertical-align: top; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
td:first-child { white-space: nowrap; }
tr.unfit td { color: #a33; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
.partial { background: #fff3cd; border: 1px solid #e0c060; padding: 0.6em; }
ul.assumptions li { margin: 0.3em 0; }
"""

GB = fleetsim_plots.GB
DAY = fleetsim_plots.DAY


def esc(value):
    return html.escape(str(value), quote=True)


def absent(value):
    return value is None or (isinstance(value, float) and math.isnan(value))


def number(value, digits=3):
    """A value for a table: significant digits, thousands separated (whole from 1,000 on); an
    en dash when absent."""
    if absent(value):
        return "&ndash;"
    value = float(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def times(value):
    """A ratio as '1.61x'; an en dash when absent (a baseline that does not fit)."""
    return "&ndash;" if absent(value) else f"{float(value):.3g}x"


def svg_of(figure):
    """A figure as inline SVG: the <svg> element alone, without the XML prolog and doctype."""
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None})
    plt.close(figure)
    text = out.getvalue()
    return text[text.index("<svg"):]


def figure_html(draw, result, caption):
    figure = draw(result)
    if figure is None:
        return ""
    return f"<figure>{svg_of(figure)}<figcaption>{esc(caption)}</figcaption></figure>\n"


def table_html(headers, rows, text_columns=(0,), row_classes=None):
    """A table; `rows` hold cells already escaped or formatted."""
    def cell(tag, index, content):
        kind = ' class="text"' if index in text_columns else ""
        return f"<{tag}{kind}>{content}</{tag}>"
    out = ["<table><tr>" + "".join(cell("th", i, esc(h)) for i, h in enumerate(headers)) + "</tr>"]
    for r, row in enumerate(rows):
        css = f' class="{row_classes[r]}"' if row_classes and row_classes[r] else ""
        out.append(f"<tr{css}>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>")
    return "\n".join(out) + "</table>\n"


def comparison(result):
    rows = result.rows()
    if not rows:
        return ""
    has_run = any("run_wall_s_p50" in row and not math.isnan(float(row["run_wall_s_p50"]))
                  for row in rows)
    priced = any("run_cost_usd_p50" in row and not math.isnan(float(row["run_cost_usd_p50"]))
                 for row in rows)
    headers = ["variant", "GPUs", "layout", "step (s)", "tokens/s per GPU",
               "MFU (% of BF16 peak)", "memory per GPU (GB)", "headroom (%)", "speed-up vs first"]
    if has_run:
        headers += ["time to train P50 / P90 (days)", "goodput (mean)"]
    if priced:
        headers += ["cost P50 / P90 (USD)", "USD per checkpoint (mean)"]
    body, classes = [], []
    for row in rows:
        fits = fleetsim_plots.simulated(row)
        memory = (f"{number(float(row['memory_total_bytes']) / GB, 4)} of "
                  f"{number(float(row['memory_capacity_bytes']) / GB, 4)}")
        cells = [esc(row["name"]), number(row["gpus"]), esc(row["layout_label"]),
                 number(row["step_time_s"], 4) if fits else "does not fit",
                 number(row["tokens_per_s_per_gpu"], 4) if fits else "&ndash;",
                 number(100 * float(row["mfu"]), 3) if fits else "&ndash;", memory,
                 number(100 * float(row["headroom_fraction"]), 3),
                 times(row["speedup_vs_first"]) if fits else "&ndash;"]
        if has_run:
            cells += [f"{number(row.get('run_wall_s_p50', math.nan) / DAY)} / "
                      f"{number(row.get('run_wall_s_p90', math.nan) / DAY)}",
                      number(row.get("run_goodput_mean", math.nan))]
        if priced:
            cells += [f"{number(row.get('run_cost_usd_p50', math.nan), 4)} / "
                      f"{number(row.get('run_cost_usd_p90', math.nan), 4)}",
                      number(row.get("run_usd_per_checkpoint_mean", math.nan), 4)]
        body.append(cells)
        classes.append("" if fits else "unfit")
    return ("<h2>Comparison</h2>\n" +
            table_html(headers, body, text_columns=(0, 2), row_classes=classes))


def figure_section(heading, draw, caption):
    """A section of one figure, left out where the file has nothing for it to draw."""
    def section(result):
        figure = figure_html(draw, result, caption)
        return f"<h2>{esc(heading)}</h2>\n{figure}" if figure else ""
    return section


breakdown_section = figure_section(
    "Where the step goes", fleetsim_plots.breakdown,
    "Each variant's step: compute, communication left exposed by kind, and idle time (the "
    "pipeline's bubble, waits), averaged over ranks.")
scaling_section = figure_section(
    "Scaling", fleetsim_plots.scaling,
    "Tokens/s per GPU and scaling efficiency against the GPU count, a curve per series of points "
    "that differ only in size; a cross on the axis: a point that does not fit.")
runs_section = figure_section(
    "Runs", fleetsim_plots.runs,
    "Over the Monte Carlo's replications: the share finished by each time to train, and by each "
    "cost.")


def memory_section(result):
    figure = figure_html(fleetsim_plots.memory, result,
                         "Memory per GPU at the fullest rank's peak, item by item, against the "
                         "GPU's capacity (red); shaded, the 15-30% of it practitioners keep free.")
    if not figure:
        return ""
    out = ["<h2>Memory per GPU</h2>\n", figure]
    for variant in result.variants.values():
        table = variant.tables["memory"]
        rows = [[esc(item), number(float(size) / GB, 4), esc(moment), esc(basis)]
                for item, size, moment, basis in
                zip(table["item"], table["bytes"], table["moment"], table["basis"])]
        out.append(f"<h3>{esc(variant.attributes['name'])}</h3>\n")
        out.append(table_html(["item", "GB", "held", "what it assumes"], rows,
                              text_columns=(0, 2, 3)))
    return "".join(out)


def analysis_section(result, analysis, heading, figure, subsection):
    """A section of an analysis some variants have (attribution, sensitivity): its figure, then
    for each such variant a heading and table, from subsection(variant, group) -> (title,
    table html)."""
    if not figure:
        return ""
    out = [f"<h2>{esc(heading)}</h2>\n", figure]
    for variant in result.variants.values():
        group = variant.groups.get(analysis)
        if group is not None:
            title, table = subsection(variant, group)
            out.append(f"<h3>{esc(title)}</h3>\n{table}")
    return "".join(out)


def attribution_table(variant, group):
    parts = group.tables["parts"]
    # The run's columns where both sides have a run (and a price).
    columns = [("step time (s)", "step_time_s", 1.0, 3),
               ("time to train, mean (days)", "wall_s_mean", 1 / DAY, 3),
               ("cost, mean (USD)", "cost_usd_mean", 1.0, 4)]
    columns = [c for c in columns if not all(math.isnan(float(v)) for v in parts[c[1]])]
    rows = [[esc(factor)] + [number(float(parts[key][i]) * scale, digits)
                             for _, key, scale, digits in columns]
            for i, factor in enumerate(parts["factor"])]
    return (f"{variant.attributes['name']} against {group.attributes['against']}",
            table_html(["cause"] + [c[0] for c in columns], rows))


def attribution_section(result):
    return analysis_section(
        result, "attribution", "Why they differ",
        figure_html(fleetsim_plots.attribution, result,
                    "Each variant's step time against the first's, split among its causes by "
                    "counterfactual simulations (Shapley values): slower in red, faster in "
                    "green."),
        attribution_table)


def sensitivity_table(variant, group):
    intervals = group.tables["intervals"]
    coverage = 100 * float(group.attributes["coverage"])
    rows = [[esc(m), number(n, 4), number(lo, 4), number(md, 4), number(hi, 4)]
            for m, n, lo, md, hi in zip(intervals["metric"], intervals["nominal"],
                                        intervals["low"], intervals["median"], intervals["high"])]
    return (f"{variant.attributes['name']}: {coverage:.0f}% prediction interval over "
            f"{int(group.attributes['draws'])} draws",
            table_html(["metric", "nominal", "low", "median", "high"], rows))


def sensitivity_section(result):
    return analysis_section(
        result, "sensitivity", "How sure",
        figure_html(fleetsim_plots.sensitivity, result,
                    "The step time with each calibrated input one sigma below and above its "
                    "value, the others at theirs: the inputs that move the prediction most."),
        sensitivity_table)


def collective_section(result):
    table = result.collective
    if table is None:
        return ""
    figure = figure_html(fleetsim_plots.collective, result, "Bus bandwidth against message size.")
    rows = [[number(s, 6), number(t, 4), number(a, 4), number(b, 4), esc(al), esc(p)]
            for s, t, a, b, al, p in zip(table["size_bytes"], table["time_us"],
                                         table["algbw_gb_per_s"], table["busbw_gb_per_s"],
                                         table["algorithm"], table["protocol"])]
    return ("<h2>Collective</h2>\n" + figure +
            table_html(["size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm",
                        "protocol"], rows, text_columns=(4, 5)))


def assumptions_section(result):
    """What the numbers assume: every memory item and warning that says `assumed:`, and every
    warning (each names the variant)."""
    items = []
    for variant in result.variants.values():
        name = variant.attributes["name"]
        table = variant.tables["memory"]
        for item, basis in zip(table["item"], table["basis"]):
            if "assumed" in basis:
                items.append(f"{name}: memory, {item}: {basis}")
        for warning in variant.tables.get("warnings", []):
            items.append(f"{name}: {warning}")
    if not items:
        return ""
    unique = list(dict.fromkeys(items))
    return ("<h2>Assumptions and warnings</h2>\n<ul class=\"assumptions\">" +
            "".join(f"<li>{esc(i)}</li>" for i in unique) + "</ul>\n")


def provenance_section(result):
    attributes = result.attributes
    rows = [[esc(k), esc(attributes[k])]
            for k in ("fleetsim_version", "scenario_name", "scenario_file", "seed", "node", "op")
            if k in attributes]
    profiles = sorted({v.attributes.get("gpu_profile", "") for v in result.variants.values()}
                      | ({attributes["gpu_profile"]} if "gpu_profile" in attributes else set()))
    rows.append([esc("GPU profiles"), esc(", ".join(p for p in profiles if p))])
    out = ["<h2>Provenance</h2>\n", table_html(["", ""], rows, text_columns=(0, 1))]
    for variant in result.variants.values():
        profile = variant.tables.get("profile")
        if profile is None:
            continue
        out.append(f"<h3>{esc(variant.attributes['name'])}: {esc(variant.attributes['gpu_profile'])}"
                   "</h3>\n")
        out.append(table_html(
            ["entry", "value", "sigma", "provenance"],
            [[esc(k), number(v, 5), number(s, 3), esc(p)]
             for k, v, s, p in zip(profile["key"], profile["value"], profile["sigma"],
                                   profile["provenance"])],
            text_columns=(0, 3)))
    return "".join(out)


def render(result):
    attributes = result.attributes
    title = attributes.get("scenario_name") or (
        f"{attributes.get('op', 'collective')} on {attributes.get('node', '')}")
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>fleetsim: {esc(title)}</title><style>{STYLE}</style></head><body>\n",
             f"<h1>{esc(title)}</h1>\n"]
    if attributes.get("description"):
        parts.append(f"<p>{esc(attributes['description'])}</p>\n")
    parts.append(f"<p class=\"meta\">fleetsim {esc(attributes.get('fleetsim_version', ''))}"
                 + (f", {esc(attributes['scenario_file'])}, seed {esc(attributes['seed'])}"
                    if "scenario_file" in attributes else "") + "</p>\n")
    if int(attributes.get("partial", 0)) == 1:
        said = [f"stopped by {attributes.get('stopped_by', '')}",
                f"{len(result.variants)} of {attributes.get('variants_planned', '?')} variants "
                "finished"]
        if attributes.get("not_finished"):
            said.append(f"not finished: {attributes['not_finished']}")
        if attributes.get("left_out"):
            said.append(f"left out: {attributes['left_out']}")
        parts.append(f"<p class=\"partial\">Partial: {esc('; '.join(said))}.</p>\n")
    for section in (comparison, attribution_section, scaling_section, breakdown_section,
                    memory_section, sensitivity_section, runs_section, collective_section,
                    assumptions_section, provenance_section):
        parts.append(section(result))
    parts.append("</body></html>\n")
    return "".join(parts)


def main(argv):
    parser = argparse.ArgumentParser(prog="fleetsim report", description=__doc__.splitlines()[0])
    parser.add_argument("result", help="an HDF5 file written by fleetsim -o or --output")
    parser.add_argument("-o", "--output", help="the page to write (default: RESULT.html)")
    args = parser.parse_args(argv)
    output = args.output or os.path.splitext(args.result)[0] + ".html"
    if not output.lower().endswith((".html", ".htm")):
        parser.error(f"-o writes HTML: name the page .html, got '{output}'")
    # A directory, a pipe or a device is no result file (a pipe would never open).
    if not os.path.exists(args.result):
        print(f"fleetsim: error: {args.result}: no such file", file=sys.stderr)
        return 2
    if not os.path.isfile(args.result):
        print(f"fleetsim: error: {args.result}: not a regular file (hint: give the HDF5 file "
              "that fleetsim run -o wrote)", file=sys.stderr)
        return 2
    try:
        result = fleetsim_results.load(args.result, pandas=False)
    except (OSError, KeyError, ValueError) as error:
        print(f"fleetsim: error: {args.result}: not a fleetsim result file ({error})",
              file=sys.stderr)
        return 2
    page = render(result)

    def write(temp):
        with open(temp, "w", encoding="utf-8") as out:
            out.write(page)
    try:
        fleetsim_output.write_atomically(output, write)
    except OSError as error:
        print(f"fleetsim: error: cannot write {output}: {error}", file=sys.stderr)
        return 1
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
