// Internal to fleetsim_report: serialises calls into the HDF5 library.
#pragma once

#include <mutex>

namespace fleetsim::report_detail {

// The distribution's HDF5 is built without thread safety, and a sweep may write result files
// from several threads; every HDF5 call in this library holds this lock.
std::mutex& hdf5_mutex();

}  // namespace fleetsim::report_detail
