// layout: every key a dimension of workloads/layout/dimensions.hpp, read as its kind says.
#include <string>

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
