#include "sim/engine/errors.hpp"

#include <utility>

namespace fleetsim {
namespace {

std::string format_error(const std::string& file, int line, int column, const std::string& key,
                         const std::string& problem, const std::string& hint) {
  std::string text = file;
  if (line > 0) {
    text += ":" + std::to_string(line) + ":" + std::to_string(column);
  }
  text += ": ";
  if (!key.empty()) {
    text += key + ": ";
  }
  text += problem;
  if (!hint.empty()) {
    text += " (hint: " + hint + ")";
  }
  return text;
}

}  // namespace

ScenarioError::ScenarioError(std::string file, int line, int column, std::string key,
                             std::string problem, std::string hint)
    : std::runtime_error(format_error(file, line, column, key, problem, hint)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      key_(std::move(key)) {}

}  // namespace fleetsim
