// Errors raised by model code. Library code never prints or exits: it throws, and only the CLI
// turns an error into a message and an exit code.
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

}  // namespace fleetsim
