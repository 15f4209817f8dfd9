#include "tools/pprof/pprof_export.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/pprof/gzip.h"

namespace gpumem::pprof {
namespace {

using perftools::profiles::Profile;

// One mapping stands for "already symbolized": pprof then never looks for binaries.
constexpr std::uint64_t kMappingId = 1;

// Builds a Profile, interning strings, functions and locations as samples need them.
class ProfileWriter {
 public:
  explicit ProfileWriter(const trace::Trace& t) : trace_(t), location_of_frame_(t.frames.size(), 0) {
    Str("");  // string_table[0] must be ""
  }

  void Header(const report::StackProfile& p);
  void AddSample(const report::StackSample& s);
  Profile Take() { return std::move(profile_); }

 private:
  std::int64_t Str(const std::string& s);
  void SampleType(const char* type, const char* unit);
  std::uint64_t FunctionId(const std::string& name, const std::string& file);
  std::uint64_t NewLocation(const std::string& name, const std::string& file, std::int64_t line);
  std::uint64_t LocationOfFrame(std::uint32_t frame);

  const trace::Trace& trace_;
  Profile profile_;
  absl::flat_hash_map<std::string, std::int64_t> strings_;
  absl::flat_hash_map<std::pair<std::string, std::string>, std::uint64_t> functions_;
  std::vector<std::uint64_t> location_of_frame_;  // frame id -> location id, 0: none yet
  std::uint64_t no_stack_location_ = 0;
};

std::int64_t ProfileWriter::Str(const std::string& s) {
  auto [it, inserted] = strings_.try_emplace(s, profile_.string_table_size());
  if (inserted) profile_.add_string_table(s);
  return it->second;
}

void ProfileWriter::SampleType(const char* type, const char* unit) {
  perftools::profiles::ValueType* v = profile_.add_sample_type();
  v->set_type(Str(type));
  v->set_unit(Str(unit));
}

void ProfileWriter::Header(const report::StackProfile& p) {
  SampleType("alloc_objects", "count");
  SampleType("alloc_space", "bytes");
  SampleType("inuse_objects", "count");
  SampleType("inuse_space", "bytes");
  profile_.set_default_sample_type(Str("inuse_space"));
  profile_.mutable_period_type()->set_type(Str("space"));
  profile_.mutable_period_type()->set_unit(Str("bytes"));
  profile_.set_period(1);
  profile_.set_duration_nanos(p.duration_us * 1000);
  profile_.add_comment(Str(absl::StrCat("gpumem: ", trace_.source, " (", trace_.format, ")")));
  profile_.add_comment(Str(absl::StrCat("inuse: live at ", p.description)));
  profile_.add_comment(Str("alloc: allocated from the trace's start to that moment"));
  perftools::profiles::Mapping* m = profile_.add_mapping();
  m->set_id(kMappingId);
  m->set_filename(Str("gpumem trace"));
  m->set_has_functions(true);
  m->set_has_filenames(true);
  m->set_has_line_numbers(true);
}

std::uint64_t ProfileWriter::FunctionId(const std::string& name, const std::string& file) {
  auto [it, inserted] = functions_.try_emplace(std::pair(name, file), functions_.size() + 1);
  if (!inserted) return it->second;
  perftools::profiles::Function* f = profile_.add_function();
  f->set_id(it->second);
  f->set_name(Str(name));
  f->set_system_name(Str(name));
  f->set_filename(Str(file));
  return it->second;
}

std::uint64_t ProfileWriter::NewLocation(const std::string& name, const std::string& file,
                                         std::int64_t line) {
  perftools::profiles::Location* loc = profile_.add_location();
  loc->set_id(profile_.location_size());
  loc->set_mapping_id(kMappingId);
  perftools::profiles::Line* l = loc->add_line();
  l->set_function_id(FunctionId(name, file));
  l->set_line(line);
  return loc->id();
}

std::uint64_t ProfileWriter::LocationOfFrame(std::uint32_t frame) {
  std::uint64_t& id = location_of_frame_[frame];
  if (id != 0) return id;
  const trace::Frame& f = trace_.frames[frame];
  // A frame without a function name is named by its place.
  const std::string name = f.function.empty() ? absl::StrCat(f.filename, ":", f.line) : f.function;
  id = NewLocation(name, f.filename, f.line);
  return id;
}

void ProfileWriter::AddSample(const report::StackSample& s) {
  perftools::profiles::Sample* sample = profile_.add_sample();
  for (std::uint32_t frame : trace_.stacks[s.stack]) sample->add_location_id(LocationOfFrame(frame));
  if (sample->location_id_size() == 0) {
    if (no_stack_location_ == 0) no_stack_location_ = NewLocation("<no stack recorded>", "", 0);
    sample->add_location_id(no_stack_location_);
  }
  for (std::uint64_t v : {s.allocs, s.alloc_bytes, s.inuse_blocks, s.inuse_bytes}) {
    sample->add_value(static_cast<std::int64_t>(v));
  }
  // A string label: pprof drops a numeric one whose value is 0.
  perftools::profiles::Label* device = sample->add_label();
  device->set_key(Str("device"));
  device->set_str(Str(absl::StrCat("cuda:", s.device)));
}

}  // namespace

Profile BuildProfile(const trace::Trace& trace, const report::StackProfile& profile) {
  ProfileWriter w(trace);
  w.Header(profile);
  for (const report::StackSample& s : profile.samples) w.AddSample(s);
  return w.Take();
}

absl::StatusOr<std::string> ExportPprof(const trace::Trace& trace,
                                        const report::StackProfile& profile) {
  std::string bytes;
  if (!BuildProfile(trace, profile).SerializeToString(&bytes)) {
    return absl::InternalError("pprof: the profile could not be serialized");
  }
  return Gzip(bytes);
}

}  // namespace gpumem::pprof
