#include "tests/pprof/profile_reader.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/trace/decompress.h"

namespace gpumem::pprof::testing {

using perftools::profiles::Profile;

perftools::profiles::Profile ParseGzipped(const std::string& bytes) {
  Profile p;
  EXPECT_GE(bytes.size(), 2u);
  EXPECT_EQ(bytes.substr(0, 2), "\x1f\x8b") << "not gzip";
  absl::StatusOr<std::string> raw = trace::Decompress(bytes, "profile");
  EXPECT_TRUE(raw.ok()) << raw.status();
  if (!raw.ok()) return p;
  EXPECT_TRUE(p.ParseFromString(*raw));
  return p;
}

std::vector<std::string> SampleTypes(const Profile& p) {
  std::vector<std::string> out;
  for (const auto& t : p.sample_type()) {
    out.push_back(absl::StrCat(p.string_table(t.type()), "/", p.string_table(t.unit())));
  }
  return out;
}

std::vector<std::int64_t> Totals(const Profile& p) {
  std::vector<std::int64_t> out(p.sample_type_size(), 0);
  for (const auto& s : p.sample()) {
    EXPECT_EQ(s.value_size(), p.sample_type_size());
    for (int i = 0; i < s.value_size() && i < p.sample_type_size(); ++i) out[i] += s.value(i);
  }
  return out;
}

std::vector<std::string> Frames(const Profile& p, const perftools::profiles::Sample& s) {
  absl::flat_hash_map<std::uint64_t, const perftools::profiles::Location*> locations;
  absl::flat_hash_map<std::uint64_t, const perftools::profiles::Function*> functions;
  for (const auto& l : p.location()) locations[l.id()] = &l;
  for (const auto& f : p.function()) functions[f.id()] = &f;
  std::vector<std::string> out;
  for (std::uint64_t id : s.location_id()) {
    auto loc = locations.find(id);
    if (loc == locations.end() || loc->second->line_size() != 1) {
      ADD_FAILURE() << "location " << id << " missing or not one line";
      continue;
    }
    const perftools::profiles::Line& line = loc->second->line(0);
    auto fn = functions.find(line.function_id());
    if (fn == functions.end()) {
      ADD_FAILURE() << "function " << line.function_id() << " missing";
      continue;
    }
    out.push_back(absl::StrCat(p.string_table(fn->second->filename()), ":", line.line(), " ",
                               p.string_table(fn->second->name())));
  }
  return out;
}

std::vector<std::int64_t> ValuesOf(const Profile& p, const std::vector<std::string>& frames) {
  std::vector<std::int64_t> out;
  for (const auto& s : p.sample()) {
    if (Frames(p, s) != frames) continue;
    out.resize(s.value_size(), 0);
    for (int i = 0; i < s.value_size(); ++i) out[i] += s.value(i);
  }
  return out;
}

}  // namespace gpumem::pprof::testing
