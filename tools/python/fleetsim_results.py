"""Loads a fleetsim result file into tables, for notebooks and scripts.

Any file fleetsim writes with -o (`run`, `sweep`, `plan`) or `collective --output`:

    import fleetsim_results
    result = fleetsim_results.load("results.h5")
    result.summary                   # a row per variant (sweep point, ranked layout)
    result.rows()                    # the same as a list of dicts
    result.units["step_time_s"]      # "s"; result.descriptions likewise
    result.swept                     # a sweep's swept columns of the summary
    result.attributes                # the file's own: scenario, plan, fleetsim version
    h100 = result.variants["h100"]   # by group name (the summary's `group` column)
    h100.attributes["step_time_s"], h100.tables["memory"], h100.tables["breakdown"]
    h100.run.tables["wall_s"]        # a run's replications (h100.run is None without one)
    result.collective                # `fleetsim collective`: a row per message size

A table is a pandas DataFrame where pandas is installed (or `load(path, pandas=False)` asks
for none), else a dict of column name to numpy array. Text comes back as str, never bytes;
numbers as they were written (doubles, NaN where absent: docs/results-schema.md).

Needs h5py and numpy (Debian: python3-h5py); pandas is optional.
"""

import h5py
import numpy

__all__ = ["load", "Result", "Group"]


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _plain(value):
    """An attribute's value as Python has it: str, int, float, or a list of those."""
    if isinstance(value, numpy.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, numpy.generic):
        return value.item()
    return _text(value)


def _column(values):
    if values.dtype.kind in ("O", "S"):
        return numpy.array([_text(v) for v in values], dtype=object)
    return values


def _table(dataset, pandas):
    """A compound dataset as columns; a one-dimensional one as an array (text as a list)."""
    values = dataset[()]
    if values.dtype.names is None:
        if values.dtype.kind in ("O", "S"):
            return [_text(v) for v in values.reshape(-1)]
        return values
    columns = {name: _column(values[name]) for name in values.dtype.names}
    return pandas.DataFrame(columns) if pandas is not None else columns


class Group:
    """An HDF5 group of the file: its attributes, its datasets as tables, its subgroups."""

    def __init__(self, group, pandas):
        self.name = group.name.rsplit("/", 1)[-1]
        self.attributes = {key: _plain(value) for key, value in group.attrs.items()}
        self.tables = {}
        self.groups = {}
        for key, item in group.items():
            if isinstance(item, h5py.Group):
                self.groups[key] = Group(item, pandas)
            else:
                self.tables[key] = _table(item, pandas)

    @property
    def run(self):
        """A variant's run: block (its Monte Carlo), or None."""
        return self.groups.get("run")

    def __repr__(self):
        return f"Group({self.name!r}, tables={sorted(self.tables)}, groups={sorted(self.groups)})"


class Result:
    """A fleetsim result file, loaded whole."""

    def __init__(self, file, pandas):
        self.attributes = {key: _plain(value) for key, value in file.attrs.items()}
        self.summary = None
        self.units = {}
        self.descriptions = {}
        self.swept = []
        if "summary" in file:
            summary = file["summary"]
            self.summary = _table(summary, pandas)
            names = summary.dtype.names
            self.units = dict(zip(names, _plain(summary.attrs["units"])))
            self.descriptions = dict(zip(names, _plain(summary.attrs["descriptions"])))
            self.swept = _plain(summary.attrs.get("swept", []))
        self.variants = {}
        if "variants" in file:
            groups = [Group(group, pandas) for group in file["variants"].values()]
            groups.sort(key=lambda group: group.attributes["index"])
            self.variants = {group.name: group for group in groups}
        self.collective = _table(file["collective"], pandas) if "collective" in file else None

    def rows(self):
        """The summary as a list of dicts, one a variant in the scenario's order (none in a
        collective file)."""
        if self.summary is None:
            return []
        if hasattr(self.summary, "to_dict"):
            return self.summary.to_dict("records")
        names = list(self.summary)
        count = len(self.summary[names[0]]) if names else 0
        return [{name: self.summary[name][i] for name in names} for i in range(count)]

    def __repr__(self):
        kind = "collective" if self.collective is not None else f"{len(self.variants)} variants"
        return f"Result({self.attributes.get('scenario_name', '')!r}, {kind})"


def _pandas(wanted):
    if wanted is False:
        return None
    try:
        import pandas
    except ImportError:
        if wanted:
            raise
        return None
    return pandas


def load(path, pandas=None):
    """The result file at `path`. pandas: None uses it where installed, True requires it,
    False returns dicts of numpy arrays."""
    module = _pandas(pandas)
    with h5py.File(path, "r") as file:
        if "fleetsim_version" not in file.attrs:
            raise ValueError(f"{path}: not a fleetsim result file (no fleetsim_version)")
        return Result(file, module)
