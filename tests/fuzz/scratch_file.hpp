// For fuzz targets whose reader takes a file: the input written to this process's own scratch
// file (the same one every time), whose path is returned.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

inline std::filesystem::path scratch_file(const std::uint8_t* data, std::size_t size,
                                          const std::string& extension) {
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("fleetsim-fuzz-" + std::to_string(getpid()) + extension);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return file;
}
