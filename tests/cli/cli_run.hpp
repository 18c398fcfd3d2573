// Running the fleetsim executable from a test: its exit code and what it printed.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fleetsim::testing {

struct Result {
  int exit_code;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A directory of this test process's own, for the files a command writes.
inline std::filesystem::path scratch_dir() {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fleetsim-cli-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// `fleetsim ARGUMENTS`, its output and errors captured.
inline Result run_cli(const std::string& arguments) {
  const std::filesystem::path dir = scratch_dir();
  const std::string command = std::string(FLEETSIM_CLI) + " " + arguments + " >" +
                              (dir / "out").string() + " 2>" + (dir / "err").string();
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out"), slurp(dir / "err")};
}

}  // namespace fleetsim::testing
