// The dimensions of a parallel layout: each field of ParallelPlan with the names and defaults
// the rest of fleetsim gives it. The scenario loader reads `layout:` from this table, the
// results (JSON, HDF5, the MPI archive) write a layout from it, a layout's label is made of its
// fragments, and `fleetsim list` and docs/results-schema.md describe each knob from it: a new
// dimension is a row here, a field in ParallelPlan, and its rules and model. What the planner
// tries for each is here too (candidates), and the order it searches them in is the planner's.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "workloads/layout/parallel_plan.hpp"

namespace fleetsim {

struct JobSubject;
struct NodeSpec;

// What `fleetsim plan` searches: the job (and its rules), the node and the cluster's GPUs, and
// the layout the scenario gives, of which the search keeps some choices (cp's ceiling, the
// overlaps, the bucket).
struct LayoutSearch {
  const JobSubject& subject;
  const NodeSpec& node;
  int gpus;
  const ParallelPlan& scenario;
  bool host_optimizer;  // the optimizer could be offloaded: FP32 Adam, a node that has a host
};

// How a scenario writes a dimension, and the type of its value: a count (an integer >= 1), one
// of a list of names, a flag (true or false), a size in bytes (like 25MB), or a list of names
// (its value the names in the order of `choices`, joined by ", ").
enum class DimensionKind { count, choice, flag, size, names };
using DimensionValue = std::variant<int, std::string, bool, double>;

struct LayoutDimension {
  std::string_view key;     // under layout: in a scenario
  std::string_view output;  // the JSON key and HDF5 attribute of results
  DimensionKind kind;
  std::vector<std::string_view> choices;  // kinds choice and names: the names allowed
  std::string_view description;           // one line, for `fleetsim list` and the reference
  std::string_view planner;               // what `fleetsim plan` tries for it, in words
  // The value as results write it: an int for counts and ZeRO's stage, the name of a choice, a
  // flag, or bytes.
  DimensionValue (*get)(const ParallelPlan&);
  // Sets it from a value of get's type, or a choice from its name.
  void (*set)(ParallelPlan&, const DimensionValue&);
  // Its words in the layout's label ("tp8", "recompute=none"), empty where it adds nothing.
  std::string (*label)(const ParallelPlan&);
  bool required = false;  // a scenario must give it
  // A count that a scenario may write as `auto`: left 0, for the loader to work out from the
  // cluster (data_parallel_size_for).
  bool automatic = false;
  int minimum = 1;  // a count's least value (0 where 0 means "all")
  // A value people write that is not one of the choices, with what to say instead.
  struct Misnamed {
    std::string_view value;
    std::string_view problem;
    std::string_view hint;
  };
  std::vector<Misnamed> misnamed = {};
  // What `fleetsim plan` tries for it, in order (`planner` in code): `chosen` holds the
  // dimensions the search set before it (the planner's order), the others at their defaults.
  std::vector<DimensionValue> (*candidates)(const LayoutSearch& search,
                                            const ParallelPlan& chosen) = nullptr;
};

// In the order labels and results list them.
std::span<const LayoutDimension> layout_dimensions();
// The dimension a scenario names by `key`, or nullptr.
const LayoutDimension* find_layout_dimension(std::string_view key);
// The default layout's value of a dimension, as a scenario would write it ("1", "none", "25MB"),
// or "required" for one a scenario must give.
std::string default_text(const LayoutDimension& dimension);

// "tp8 pp8 vpp2 dp16 zero1 recompute=selective tp-overlap": every dimension's fragment.
std::string layout_label(const ParallelPlan& plan);

// The layout's dp, or for dp: auto (0) the data-parallel size that `gpus` leave to
// tp x cp x pp: 0 when that product does not divide them.
int data_parallel_size_for(const ParallelPlan& plan, int gpus);

}  // namespace fleetsim
