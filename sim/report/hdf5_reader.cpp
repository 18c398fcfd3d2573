// Reads back the summary of a result file written by write_hdf5 (layout in hdf5.cpp).
#include <H5Cpp.h>

#include <algorithm>
#include <mutex>

#include "sim/engine/errors.hpp"
#include "sim/report/hdf5_lock.hpp"
#include "sim/report/report.hpp"

namespace fleetsim {
namespace {

Hdf5Attribute read_integer(const H5::Attribute& attribute) {
  if (attribute.getIntType().getSign() == H5T_SGN_NONE) {
    std::uint64_t value = 0;
    attribute.read(H5::PredType::NATIVE_UINT64, &value);
    return value;
  }
  std::int64_t value = 0;
  attribute.read(H5::PredType::NATIVE_INT64, &value);
  return value;
}

Hdf5Attribute read_attribute(const H5::Attribute& attribute) {
  switch (attribute.getTypeClass()) {
    case H5T_STRING: {
      std::string value;
      attribute.read(attribute.getStrType(), value);
      return value;
    }
    case H5T_INTEGER: return read_integer(attribute);
    case H5T_FLOAT: {
      double value = 0;
      attribute.read(H5::PredType::NATIVE_DOUBLE, &value);
      return value;
    }
    default: throw ModelError("attribute " + attribute.getName() + " has an unsupported type");
  }
}

std::map<std::string, Hdf5Attribute> read_attributes(const H5::H5Object& object) {
  std::map<std::string, Hdf5Attribute> attributes;
  const int count = object.getNumAttrs();
  for (int i = 0; i < count; ++i) {
    const H5::Attribute attribute = object.openAttribute(static_cast<unsigned>(i));
    attributes.emplace(attribute.getName(), read_attribute(attribute));
  }
  return attributes;
}

// HDF5's C++ API reads a dataset and an attribute with their arguments in opposite orders.
void read_into(const H5::DataSet& dataset, const H5::DataType& type, void* buffer) {
  dataset.read(buffer, type);
}
void read_into(const H5::Attribute& attribute, const H5::DataType& type, void* buffer) {
  attribute.read(type, buffer);
}

// A one-dimensional dataset or attribute of variable-length strings.
template <typename Object>
std::vector<std::string> read_strings(const Object& object) {
  const H5::DataSpace space = object.getSpace();
  std::vector<char*> buffer(static_cast<std::size_t>(space.getSimpleExtentNpoints()), nullptr);
  if (buffer.empty()) {
    return {};
  }
  const H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  read_into(object, type, buffer.data());
  std::vector<std::string> strings(buffer.begin(), buffer.end());
  H5::DataSet::vlenReclaim(buffer.data(), type, space);
  return strings;
}

Hdf5VariantSummary read_variant(const H5::Group& variants, const std::string& name) {
  const H5::Group group = variants.openGroup(name);
  Hdf5VariantSummary summary;
  summary.group = "/variants/" + name;
  summary.attributes = read_attributes(group);
  for (hsize_t i = 0; i < group.getNumObjs(); ++i) {
    const std::string child = group.getObjnameByIdx(i);
    if (group.childObjType(child) == H5O_TYPE_GROUP) {
      // run, attribution, sensitivity: their attributes, and their datasets' rows under
      // "<group>/"
      const H5::Group inner = group.openGroup(child);
      summary.group_attributes[child] = read_attributes(inner);
      for (hsize_t k = 0; k < inner.getNumObjs(); ++k) {
        const std::string name = inner.getObjnameByIdx(k);
        hsize_t dims[2] = {0, 0};
        inner.openDataSet(name).getSpace().getSimpleExtentDims(dims);
        summary.dataset_rows[child + "/" + name] = static_cast<std::size_t>(dims[0]);
      }
    }
    if (group.childObjType(child) != H5O_TYPE_DATASET) {
      continue;
    }
    const H5::DataSet dataset = group.openDataSet(child);
    summary.dataset_rows[child] =
        static_cast<std::size_t>(dataset.getSpace().getSimpleExtentNpoints());
    if (child == "warnings") {
      summary.warnings = read_strings(dataset);
    }
  }
  return summary;
}

std::int64_t written_index(const Hdf5VariantSummary& variant) {
  const auto found = variant.attributes.find("index");
  if (found == variant.attributes.end() || !std::holds_alternative<std::int64_t>(found->second)) {
    throw ModelError(variant.group + " has no integer attribute 'index'");
  }
  return std::get<std::int64_t>(found->second);
}

Hdf5Summary read_file(const std::filesystem::path& path) {
  const H5::H5File file(path.string(), H5F_ACC_RDONLY);
  Hdf5Summary summary;
  summary.attributes = read_attributes(file);
  const H5::Group variants = file.openGroup("variants");
  for (hsize_t i = 0; i < variants.getNumObjs(); ++i) {
    summary.variants.push_back(read_variant(variants, variants.getObjnameByIdx(i)));
  }
  std::stable_sort(summary.variants.begin(), summary.variants.end(),
                   [](const Hdf5VariantSummary& a, const Hdf5VariantSummary& b) {
                     return written_index(a) < written_index(b);
                   });
  const H5::DataSet table = file.openDataSet("summary");
  const H5::CompType columns = table.getCompType();
  for (int c = 0; c < columns.getNmembers(); ++c) {
    summary.summary_columns.push_back(columns.getMemberName(static_cast<unsigned>(c)));
  }
  hsize_t rows = 0;
  table.getSpace().getSimpleExtentDims(&rows);
  summary.summary_rows = rows;
  if (table.attrExists("swept")) summary.swept = read_strings(table.openAttribute("swept"));
  return summary;
}

}  // namespace

Hdf5Summary read_hdf5_summary(const std::filesystem::path& path) {
  try {
    const std::lock_guard<std::mutex> lock(report_detail::hdf5_mutex());
    H5::Exception::dontPrint();
    return read_file(path);
  } catch (const H5::Exception& e) {
    throw ModelError("cannot read HDF5 file " + path.string() + ": " + e.getFuncName() + ": " +
                     e.getDetailMsg());
  } catch (const ModelError& e) {
    throw ModelError("cannot read HDF5 file " + path.string() + ": " + e.what());
  }
}

}  // namespace fleetsim
