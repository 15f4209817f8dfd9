// The real traces of tests/data, each loaded once per test program (loading varlen_bert
// takes a good part of a second).
#pragma once

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tools/trace/load.h"

namespace gpumem::replay::testing {

// `suffix`: ".trace.tsv.gz" or ".pickle.xz" (the snapshot exactly as PyTorch saved it).
inline const trace::Trace& RealTrace(const std::string& name,
                                     const std::string& suffix = ".trace.tsv.gz") {
  static std::map<std::string, trace::Trace>* cache = new std::map<std::string, trace::Trace>;
  auto it = cache->find(name + suffix);
  if (it == cache->end()) {
    const std::string path = std::string(GPUMEM_TEST_DATA) + "/" + name + suffix;
    absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
    if (!t.ok()) {
      ADD_FAILURE() << t.status();
      t = trace::Trace();
    }
    it = cache->emplace(name + suffix, *std::move(t)).first;
  }
  return it->second;
}

}  // namespace gpumem::replay::testing
