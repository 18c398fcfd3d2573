// A scenario's variants: the compare entries and the sweep's points, each laid over the base
// scenario as it was read (fields.hpp), so that every value keeps its place in the file and the
// file is read once.
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/engine/stop.hpp"
#include "sim/scenario/loader.hpp"
#include "workloads/layout/dimensions.hpp"
#include "workloads/memory_model.hpp"

namespace fleetsim {

using namespace fields;

namespace {

const Keys kCompareKeys = {"name",    "model", "training", "layout",
                           "cluster", "run",   "pricing",  "measured"};
const Keys kSweepKeys = {"grid", "zip", "batch", "layout"};
// A sweep of more points than this is a mistake, not a study: refused before anything runs.
constexpr std::size_t kMaxSweepPoints = 10000;

}  // namespace

// Whether a variant could fit in some layout: its weights alone, sharded over every GPU, must
// fit a GPU. Throws at the base's model when no variant could.
void check_some_variant_can_fit(const Field& model, const Scenario& scenario) {
  const auto weights_per_gpu = [](const StepInputs& in) {
    return model_weight_bytes(in.model, in.training) /
           (static_cast<double>(in.nodes) * in.node.gpus);
  };
  for (const Variant& variant : scenario.variants) {
    if (weights_per_gpu(variant.inputs) <= variant.inputs.gpu.hbm_capacity_bytes.value) return;
  }
  const StepInputs& in = scenario.variants.front().inputs;
  const double gpus = static_cast<double>(in.nodes) * in.node.gpus;
  fail(model,
       "model " + in.model.name + " cannot fit on " + rounded(gpus, 0) +
           " GPUs in any layout: its weights alone, " +
           rounded(model_weight_bytes(in.model, in.training) / 1e9, 0) + " GB, need " +
           rounded(weights_per_gpu(in) / 1e9, 1) + " GB a GPU sharded over all of them; a " +
           in.gpu.name + " has " + rounded(in.gpu.hbm_capacity_bytes.value / 1e9, 1) + " GB" +
           (scenario.variants.size() > 1 ? ", and no compare entry fits either" : ""),
       "use more GPUs (cluster.nodes), GPUs with more memory, or a smaller model");
}

void Loader::parse_compare(const Field& list, const YAML::Node& base, Scenario& scenario) {
  if (!list.node.IsSequence() || list.node.size() == 0) {
    fail(list, "expected a list of variants, got " + describe(list.node),
         "write each variant as `- name: ...` followed by the keys it changes");
  }
  // A comparison is read as a table, each entry a column: past a thousand it is a sweep
  // written out by hand (loading would take seconds and memory before anything runs).
  constexpr std::size_t kMostEntries = 1000;
  if (list.node.size() > kMostEntries) {
    fail(list,
         "expected at most " + std::to_string(kMostEntries) + " variants, got " +
             std::to_string(list.node.size()),
         "sweep what varies instead: sweep: {grid: {cluster.nodes: [1, 2, 4]}}");
  }
  std::set<std::string> names;
  for (const Variant& v : scenario.variants) names.insert(v.name);
  for (std::size_t i = 0; i < list.node.size(); ++i) {
    const Field entry{list.node[i], list.doc, list.path + "[" + std::to_string(i) + "]"};
    expect_map(entry, kCompareKeys);
    const Field name_field = require(entry, "name");
    const std::string name = read_name(name_field);
    if (!names.insert(name).second) {
      fail(name_field, "variant name " + in_quotes(name) + " is already taken",
           "the base variant is named by label (default: its node preset); give every "
           "compare entry its own name");
    }
    // The entry laid over the base: the file is read once, whatever the number of entries. (Its
    // name, laid over the scenario's too, is read from the entry alone.)
    const Doc doc{list.doc->file, static_cast<int>(i), name,
                  replaced_paths(base, entry.node, "name")};
    const Field root{base, &doc, "", {Layer{"", entry.node}}};
    scenario.variants.push_back(parse_full_variant(name, root));
    // A measurement is of one run: an entry has its own, whole, or none (not the base's).
    if (const auto measured = find(entry, "measured")) {
      if (child_node(base, "sweep")) refuse_measured_in_sweep(*measured);
      scenario.variants.back().measured = parse_measured(*measured);
    }
  }
}

// The sweep: every combination of the grid's lists (in the order written, the last varying
// fastest) times every row of the zip's lists (of one length, varied together). Each point is
// the variant (the base scenario, or it with a compare entry merged in) with those values in
// place of the ones it sets, which keep their marks: a value that does not fit its key is
// reported at its place in the sweep. A compare entry may not set a swept field.
void Loader::parse_sweep(const Field& sweep, const YAML::Node& base_root, const Variant& variant,
                         int entry, std::size_t copies, Scenario& scenario) {
  const StepInputs& base = variant.inputs;
  const bool compared = copies > 1;
  expect_map(sweep, kSweepKeys);
  const auto batch = find(sweep, "batch");
  const bool per_gpu = batch && read_choice(*batch, {"fixed", "per_gpu"}) == "per_gpu";
  if (const auto layout = find(sweep, "layout")) {
    scenario.replanned = read_choice(*layout, {"fixed", "plan"}) == "plan";
  }
  struct Axis {
    std::string path;
    std::string group;  // "grid" or "zip"
    Field key;          // where the sweep names it
    std::vector<Field> values;
  };
  // The sections a point is made of; the rest (name, seed, ...) is the scenario's alone.
  const Keys sections = {"model", "training", "layout", "cluster", "run", "pricing"};
  std::vector<Axis> axes;
  std::size_t zip_rows = 0;
  for (const std::string& group : {std::string("grid"), std::string("zip")}) {
    const auto lists = find(sweep, group);
    if (!lists) continue;
    if (!lists->node.IsMap() || lists->node.size() == 0) {
      fail(*lists, "expected a map of field paths to lists of values, got " + describe(lists->node),
           "e.g. " + group + ": {cluster.nodes: [1, 2, 4]}");
    }
    for (const auto& kv : lists->node) {
      const Field key{kv.first, sweep.doc, lists->path};
      const std::string path = scalar(key, "a field path such as cluster.nodes");
      const std::string section = path.substr(0, path.find('.'));
      if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
        fail(key, in_quotes(path) + " is not a field a sweep can vary",
             "sweep fields of " + join_list(sections) + ", e.g. cluster.nodes");
      }
      for (const Axis& other : axes) {
        const auto covers = [](const std::string& outer, const std::string& inner) {
          return inner == outer || inner.starts_with(outer + ".");
        };
        if (covers(other.path, path) || covers(path, other.path)) {
          fail(key, in_quotes(path) + " overlaps " + in_quotes(other.path) + ", swept already",
               "sweep each field once");
        }
      }
      const Field values{kv.second, sweep.doc, join(lists->path, path)};
      const std::vector<Field> elements = read_list(values, 0, "values");
      for (const Field& element : elements) {
        if (!element.node.IsScalar()) {
          fail(element,
               "a swept value is one value (a number, a name, a size), got " +
                   describe(element.node),
               "sweep the fields inside it one by one, e.g. cluster.fabric.link");
        }
      }
      const std::size_t count = elements.size();
      if (group == "zip") {
        if (zip_rows != 0 && count != zip_rows) {
          fail(values,
               "zipped lists vary together and need one length: this has " + std::to_string(count) +
                   " values, the one before " + std::to_string(zip_rows),
               "give every list under zip the same number of values");
        }
        zip_rows = count;
      }
      axes.push_back({path, group, key, elements});
    }
  }
  if (axes.empty())
    fail(sweep, "a sweep needs a grid or a zip", "grid: {cluster.nodes: [1, 2, 4]}");
  std::size_t points = zip_rows == 0 ? 1 : zip_rows;
  for (const Axis& axis : axes) {
    if (axis.group == "grid") points *= axis.values.size();
    if (points * copies > kMaxSweepPoints) {
      fail(sweep,
           "the sweep has more than " + std::to_string(kMaxSweepPoints) + " points" +
               (compared ? " over its " + std::to_string(copies) + " compared variants" : ""),
           "sweep fewer values, or split the study into several scenarios");
    }
  }
  if (per_gpu) {
    for (const Axis& axis : axes) {
      if (axis.path == "training" || axis.path == "training.global_batch") {
        fail(*batch, "batch: per_gpu sets training.global_batch, which the sweep also varies",
             "use batch: fixed with the swept batch, or stop sweeping it");
      }
    }
  }
  // The compare entry laid under every point, and what it replaces: a field it sets cannot be
  // swept too.
  std::vector<Layer> entry_layer;
  std::set<std::string> overridden;
  if (entry >= 0) {
    const YAML::Node entry_node =
        (*child_node(base_root, "compare"))[static_cast<std::size_t>(entry)];
    entry_layer.push_back({"", entry_node});
    overridden = replaced_paths(base_root, entry_node, "name");
    const Doc entry_doc{sweep.doc->file, entry, variant.name, overridden};
    for (const Axis& axis : axes) {
      const bool inside =
          std::any_of(overridden.begin(), overridden.end(),
                      [&](const std::string& path) { return path.starts_with(axis.path + "."); });
      if (replaced_by_entry(entry_doc, axis.path) || inside) {
        fail(Field{axis.key.node, sweep.doc, "sweep." + axis.group},
             "compare entry " + in_quotes(variant.name) + " sets " + in_quotes(axis.path) +
                 ", which the sweep varies",
             "vary a field in the sweep or in the compare entries, not both");
      }
    }
  }
  // Each point: which value of each axis (grid axes odometer-style, zip axes on one row).
  for (std::size_t point = 0; point < points; ++point) {
    // Thousands of points take seconds to lay out: a limit or a signal stops the load too.
    if (stop_requested()) throw Stopped();
    Doc doc{sweep.doc->file, entry, entry >= 0 ? variant.name : std::string(), overridden};
    std::size_t rest = zip_rows == 0 ? point : point / zip_rows;
    const std::size_t zip_row = zip_rows == 0 ? 0 : point % zip_rows;
    std::vector<std::size_t> index(axes.size());
    for (std::size_t a = axes.size(); a-- > 0;) {
      if (axes[a].group == "grid") {
        index[a] = rest % axes[a].values.size();
        rest /= axes[a].values.size();
      } else {
        index[a] = zip_row;
      }
    }
    // The point: the base, the entry, then each swept value laid over the one it replaces.
    Field root{base_root, &doc, "", entry_layer};
    std::string name;
    std::vector<std::pair<std::string, std::string>> swept;
    for (std::size_t a = 0; a < axes.size(); ++a) {
      const YAML::Node value = axes[a].values[index[a]].node;
      // The path must be a field the scenario sets: its value is the one replaced.
      Field at = root;
      std::string walked;
      for (std::size_t begin = 0; begin <= axes[a].path.size();) {
        const std::size_t end = std::min(axes[a].path.find('.', begin), axes[a].path.size());
        const std::string key = axes[a].path.substr(begin, end - begin);
        walked = join(walked, key);
        const std::optional<Field> found = at.node.IsMap() ? find(at, key) : std::nullopt;
        if (!found) {
          fail(Field{value, &doc, "sweep." + axes[a].group + "." + axes[a].path},
               walked + " is not a field the scenario sets",
               "a sweep varies fields the scenario sets: write " + walked +
                   " in the scenario (the scenario must be valid as written; the sweep replaces "
                   "the value)");
        }
        at = *found;
        begin = end + 1;
      }
      root.over.push_back({axes[a].path, value});
      const std::string shown = value.IsScalar() ? value.Scalar() : std::string("...");
      name += (name.empty() ? "" : ", ") + axes[a].path + "=" + shown;
      swept.emplace_back(axes[a].path, shown);
    }
    if (compared) {
      name = variant.name + ": " + name;
      swept.insert(swept.begin(), {"compare", variant.name});
    }
    doc.variant = name;
    // Per GPU: each replica keeps the base's share of the batch, so the batch grows with the
    // data-parallel replicas the point's GPUs make. A point whose replicas do not come out
    // whole keeps the batch, and its layout's own error names the problem.
    if (per_gpu) {
      StepInputs point;
      parse_cluster(require(root, "cluster"), point);
      const ParallelPlan plan = parse_layout(require(root, "layout"));
      const int dp = data_parallel_size_for(plan, point.nodes * point.node.gpus);
      const long long global_batch =
          static_cast<long long>(base.training.global_batch) / base.plan.dp * dp;
      const Field training = require(root, "training");
      const int micro_batch = read_int(require(training, "micro_batch"), 1);
      if (dp > 0 && global_batch % (static_cast<long long>(micro_batch) * dp) != 0) {
        fail(*batch,
             "at sweep point " + in_quotes(name) + ": per GPU the batch would be " +
                 std::to_string(global_batch) +
                 " sequences, not a multiple of micro_batch x dp = " +
                 std::to_string(static_cast<long long>(micro_batch) * dp),
             "keep the base's share of the batch a multiple of every point's micro_batch");
      }
      if (dp > 0) root.over.push_back({"training.global_batch", YAML::Node(global_batch)});
    }
    scenario.variants.push_back(parse_full_variant(name, root));
    scenario.variants.back().swept = std::move(swept);
  }
}

}  // namespace fleetsim
