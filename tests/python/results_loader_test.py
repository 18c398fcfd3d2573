"""tools/python/fleetsim_results.py on every kind of result file, against the CLI's --csv.

Usage: results_loader_test.py FLEETSIM SOURCE_DIR. Writes a run (priced, two variants), a
sweep, a plan and a collective file, loads each, and checks that the summary has a row per
variant with text as str, numbers typed and units; that --csv prints the same table, cell for
cell; that the variants' tables and runs load; and that a file that is not a result is refused.
"""

import csv
import importlib.util
import io
import math
import os
import subprocess
import sys
import tempfile

FLEETSIM, SOURCE = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SOURCE, "tools", "python"))
import fleetsim_results  # noqa: E402  (found through the path above)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def fleetsim(*args):
    return subprocess.run([FLEETSIM, *args], check=True, capture_output=True, text=True).stdout


def columns_of(table):
    return list(table.columns) if hasattr(table, "columns") else list(table)


def column(table, name):
    return list(table[name])


def same_cell(text, value):
    """A CSV cell against the file's value: text, a flag (0/1 in HDF5), a number or empty."""
    if isinstance(value, str):
        return text == value
    if text in ("true", "false"):
        return float(value) == (1.0 if text == "true" else 0.0)
    if text == "":
        return math.isnan(value)
    return float(text) == float(value)  # the shortest form reads back exactly


def check_csv_matches(label, csv_text, table):
    rows = list(csv.reader(io.StringIO(csv_text)))
    header, body = rows[0], rows[1:]
    check(header == columns_of(table), f"{label}: --csv columns differ from the file's")
    check(len(body) == len(column(table, header[0])), f"{label}: --csv has another row count")
    for c, name in enumerate(header):
        for r, values in enumerate(zip(body, column(table, name))):
            if not same_cell(values[0][c], values[1]):
                failures.append(f"{label}: row {r} column {name}: csv {values[0][c]!r}, "
                                f"file {values[1]!r}")
                return


def check_summary(label, result, variants):
    summary = result.summary
    check(summary is not None, f"{label}: no summary")
    names = column(summary, "name")
    check(len(names) == variants, f"{label}: {len(names)} summary rows, expected {variants}")
    check(all(isinstance(n, str) for n in names), f"{label}: names not str")
    check(column(summary, "group") == list(result.variants), f"{label}: groups out of order")
    check(result.units.get("step_time_s") == "s", f"{label}: step_time_s unit")
    check(result.units.get("memory_total_bytes") == "bytes", f"{label}: memory unit")
    check(all(isinstance(v, float) for v in column(summary, "step_time_s")),
          f"{label}: step times not numbers")
    for group, name in zip(column(summary, "group"), names):
        variant = result.variants[group]
        check(variant.attributes["name"] == name, f"{label}: {group} is not {name}")
        check(set(variant.tables) >= {"breakdown", "memory", "links", "warnings"},
              f"{label}: {group} tables {sorted(variant.tables)}")
        memory = variant.tables["memory"]
        check(all(isinstance(item, str) for item in column(memory, "item")),
              f"{label}: memory items not str")


with tempfile.TemporaryDirectory() as scratch:
    run_file = os.path.join(SOURCE, "tests", "data", "small-run.yaml")
    scenario = os.path.join(scratch, "run.yaml")
    with open(run_file) as source, open(scenario, "w") as target:
        target.write(source.read() + "compare:\n  - name: every hour / priced\n"
                                     "    run: {checkpoint: 1h}\n")
    sweep = os.path.join(SOURCE, "tests", "data", "small-sweep.yaml")

    # Each file and CSV once; loaded without pandas, and with it where it is installed.
    path = {kind: os.path.join(scratch, kind + ".h5") for kind in
            ("run", "sweep", "plan", "collective")}
    fleetsim("run", scenario, "-q", "-o", path["run"])
    run_csv = fleetsim("run", scenario, "-q", "--csv")
    fleetsim("sweep", sweep, "-q", "-o", path["sweep"])
    sweep_csv = fleetsim("sweep", sweep, "-q", "--csv")
    fleetsim("plan", run_file, "-q", "--top", "3", "-o", path["plan"])
    plan_csv = fleetsim("plan", run_file, "-q", "--top", "3", "--csv")
    args = ["collective", "--node", "dgx-h100", "-b", "1M", "-e", "64M"]
    fleetsim(*args, "--output", path["collective"])
    collective_csv = fleetsim(*args, "--csv")
    modes = (False, True) if importlib.util.find_spec("pandas") else (False,)

    for mode in modes:
        run = fleetsim_results.load(path["run"], pandas=mode)
        check_summary("run", run, 2)
        check(list(run.variants) == ["dgx-h100", "every_hour_priced"],
              f"run: plain group names, got {list(run.variants)}")
        check(run.attributes["scenario_name"] == "small-run", "run: scenario name")
        check(run.variants["dgx-h100"].run is not None, "run: no run group")
        wall = run.variants["dgx-h100"].run.tables["wall_s"]
        check(len(wall) == 100, f"run: {len(wall)} replications, expected 100")
        check(run.units.get("run_wall_s_mean") == "s", "run: run_wall_s_mean unit")
        check(run.units.get("run_cost_usd_p90") == "USD", "run: cost unit")
        profile = run.variants["dgx-h100"].tables["profile"]
        keys = column(profile, "key")
        check(keys[:2] == ["hbm_capacity", "dense_bf16"], f"run: profile entries {keys[:2]}")
        check(all(isinstance(p, str) and p for p in column(profile, "provenance")),
              "run: every profile entry has its provenance")
        check_csv_matches("run", run_csv, run.summary)
        # Each variant's breakdown rows hold the same seconds as its summary row: compute,
        # exposed communication (in all and by kind) and idle, by component name.
        for row, group in enumerate(column(run.summary, "group")):
            breakdown = run.variants[group].tables["breakdown"]
            seconds = dict(zip(column(breakdown, "component"), column(breakdown, "seconds")))
            check(len(seconds) == 9, f"run: {group} breakdown has {len(seconds)} components")
            for component, value in seconds.items():
                key = component + "_s"
                check(key in columns_of(run.summary), f"run: no summary column {key}")
                if key in columns_of(run.summary):
                    summary_value = column(run.summary, key)[row]
                    check(value == summary_value,
                          f"run: {group} {component} {value} in breakdown, "
                          f"{summary_value} in summary")
            parts = sum(v for k, v in seconds.items()
                        if k.startswith("exposed_") and k != "exposed_comm")
            check(abs(seconds["exposed_comm"] - parts) <= 1e-9 * max(1.0, parts),
                  f"run: {group} exposed parts sum to {parts}, not {seconds['exposed_comm']}")

        swept = fleetsim_results.load(path["sweep"], pandas=mode)
        check_summary("sweep", swept, 6)
        check(swept.swept == ["sweep.cluster.node", "sweep.cluster.nodes"], f"sweep: swept {swept.swept}")
        check(column(swept.summary, "sweep.cluster.nodes") == [1.0, 2.0, 4.0, 1.0, 2.0, 4.0],
              "sweep: node counts as numbers")
        check(column(swept.summary, "sweep.cluster.node")[3] == "dgx-b200", "sweep: node as text")
        check(column(swept.summary, "scaling_efficiency")[0] == 1.0, "sweep: first efficiency")
        check_csv_matches("sweep", sweep_csv, swept.summary)

        plan = fleetsim_results.load(path["plan"], pandas=mode)
        check_summary("plan", plan, 3)
        check(plan.attributes["plan_replayed"] >= 3, "plan: its root attributes")
        steps = column(plan.summary, "step_time_s")
        check(steps == sorted(steps), "plan: the ranking fastest first")
        check_csv_matches("plan", plan_csv, plan.summary)

        collective = fleetsim_results.load(path["collective"], pandas=mode)
        check(collective.summary is None and not collective.variants, "collective: no variants")
        check(column(collective.collective, "algorithm")[0] in ("ring", "nvls", "tree"),
              "collective: algorithm as text")
        check(len(column(collective.collective, "busbw_gb_per_s")) == 7, "collective: 7 sizes")
        csv_rows = list(csv.DictReader(io.StringIO(collective_csv)))
        check([float(r["busbw_gb_per_s"]) for r in csv_rows] ==
              [float(b) for b in column(collective.collective, "busbw_gb_per_s")],
              "collective: --csv busbw differs from the file's")

    not_result = os.path.join(scratch, "other.h5")
    import h5py
    with h5py.File(not_result, "w") as other:
        other.attrs["something"] = 1
    try:
        fleetsim_results.load(not_result)
        failures.append("a file without fleetsim_version was loaded")
    except ValueError:
        pass

for failure in failures:
    print("FAILED:", failure)
if failures:
    sys.exit(1)
print("results loader: all checks passed")
