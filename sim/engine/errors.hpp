// Errors raised by library code. Library code never prints or exits: it throws, and only the
// CLI turns an error into a message and an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace fleetsim {

// A model was asked something it cannot answer (an inconsistent configuration, a layout that
// does not divide the cluster, a path that does not exist). The message carries the context.
class ModelError : public std::runtime_error {
 public:
  explicit ModelError(const std::string& message) : std::runtime_error(message) {}
};

// A mistake in an input file (a scenario, a preset, a profile): its message is
// "file:line:column: key: problem (hint: ...)", so that a person can go to the place and fix it.
class ScenarioError : public std::runtime_error {
 public:
  // line and column are 1-based; 0 means unknown (e.g. the file could not be opened).
  ScenarioError(std::string file, int line, int column, std::string key, std::string problem,
                std::string hint = {});
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& key() const { return key_; }

 private:
  std::string file_;
  int line_;
  int column_;
  std::string key_;
};

}  // namespace fleetsim
