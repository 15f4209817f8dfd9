// Reads an exported pprof file back with the protobuf library, and names what it holds:
// the checks of pprof_export_test.cc work on these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pprof_proto/profile.pb.h"

namespace gpumem::pprof::testing {

// Gunzips and parses; fails the current test (and returns an empty profile) when either
// step fails.
perftools::profiles::Profile ParseGzipped(const std::string& bytes);

// "type/unit" of each sample type, in order.
std::vector<std::string> SampleTypes(const perftools::profiles::Profile& p);

// The sum over samples of each value.
std::vector<std::int64_t> Totals(const perftools::profiles::Profile& p);

// A sample's frames, leaf first, as "file:line function" (the report's FrameName).
std::vector<std::string> Frames(const perftools::profiles::Profile& p,
                                const perftools::profiles::Sample& s);

// The values of the samples whose frames are `frames`, summed (over devices); empty
// when there is none.
std::vector<std::int64_t> ValuesOf(const perftools::profiles::Profile& p,
                                   const std::vector<std::string>& frames);

}  // namespace gpumem::pprof::testing
