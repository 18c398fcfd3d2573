// layout: every key a dimension of workloads/layout/dimensions.hpp, read as its kind says.
#include <algorithm>
#include <string>
#include <vector>

#include "sim/scenario/loader.hpp"
#include "workloads/layout/dimensions.hpp"

namespace fleetsim {

using namespace fields;

namespace {

// A value of one layout dimension, read as its kind says.
DimensionValue read_dimension(const Field& f, const LayoutDimension& dimension) {
  switch (dimension.kind) {
    case DimensionKind::count:
      if (dimension.automatic && f.node.IsScalar() && f.node.Scalar() == "auto") return 0;
      return read_int(f, dimension.minimum);
    case DimensionKind::choice:
      for (const LayoutDimension::Misnamed& misnamed : dimension.misnamed) {
        if (f.node.IsScalar() && f.node.Scalar() == misnamed.value) {
          fail(f, std::string(misnamed.problem), std::string(misnamed.hint));
        }
      }
      return read_choice(f, dimension.choices);
    case DimensionKind::flag: return read_bool(f);
    case DimensionKind::size: return read_quantity(f, Quantity::size);
    case DimensionKind::names: {
      // A list of names, or one name alone; kept in the order of the choices, once each.
      std::vector<std::string> named;
      const std::vector<Field> elements =
          f.node.IsScalar() ? std::vector<Field>{f} : read_list(f, 0, "names");
      for (const Field& element : elements)
        named.push_back(read_choice(element, dimension.choices));
      std::string names;
      for (const std::string_view choice : dimension.choices) {
        if (std::find(named.begin(), named.end(), choice) == named.end()) continue;
        names += (names.empty() ? "" : ", ") + std::string(choice);
      }
      return names;
    }
  }
  return 0;
}

}  // namespace

// `layout:`, every key a dimension of workloads/layout/dimensions.hpp. dp: auto is left 0, for
// parse_variant to resolve once the cluster is known.
ParallelPlan parse_layout(const Field& f) {
  Keys keys;
  for (const LayoutDimension& dimension : layout_dimensions()) keys.push_back(dimension.key);
  expect_map(f, keys);
  ParallelPlan plan;
  for (const LayoutDimension& dimension : layout_dimensions()) {
    const std::optional<Field> value =
        dimension.required ? require(f, dimension.key) : find(f, dimension.key);
    if (value) dimension.set(plan, read_dimension(*value, dimension));
  }
  return plan;
}

}  // namespace fleetsim
