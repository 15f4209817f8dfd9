// The real traces of tests/data, each loaded once per test program (loading varlen_bert
// takes a good part of a second).
#pragma once

#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tools/trace/load.h"

namespace gpumem::replay::testing {

inline const trace::Trace& RealTrace(const std::string& name) {
  static std::map<std::string, trace::Trace>* cache = new std::map<std::string, trace::Trace>;
  auto it = cache->find(name);
  if (it == cache->end()) {
    const std::string path = std::string(GPUMEM_TEST_DATA) + "/" + name + ".trace.tsv.gz";
    absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
    if (!t.ok()) {
      ADD_FAILURE() << t.status();
      t = trace::Trace();
    }
    it = cache->emplace(name, *std::move(t)).first;
  }
  return it->second;
}

}  // namespace gpumem::replay::testing
