#include "profiler/trace_path.h"

#include <unistd.h>

#include <cstdlib>
#include <initializer_list>
#include <string>

namespace gpumem {
namespace {

std::string FirstSet(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "";
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "host";
  return host;
}

// What %<c> stands for, or nullptr when `c` is no field.
const std::string* Field(char c, const TraceNameParts& parts, std::string* pid) {
  switch (c) {
    case 'p': *pid = std::to_string(parts.pid); return pid;
    case 'r': return &parts.rank;
    case 'l': return &parts.local_rank;
    case 'h': return &parts.host;
    default: return nullptr;
  }
}

}  // namespace

TraceNameParts TraceNameParts::OfThisProcess() {
  TraceNameParts parts;
  parts.pid = static_cast<long>(getpid());
  parts.rank = RankFromEnvironment();
  const std::string local = LocalRankFromEnvironment();
  parts.local_rank = local.empty() ? "0" : local;
  parts.host = HostName();
  return parts;
}

std::string ExpandTracePath(const std::string& pattern, const TraceNameParts& parts) {
  std::string out, pid;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      if (const std::string* field = Field(pattern[i + 1], parts, &pid)) {
        out += *field;
        ++i;
        continue;
      }
      if (pattern[i + 1] == '%') {
        out += '%';
        ++i;
        continue;
      }
    }
    out += pattern[i];
  }
  return out;
}

std::string ExpandTracePath(const std::string& pattern, long pid, const std::string& rank) {
  TraceNameParts parts = TraceNameParts::OfThisProcess();
  parts.pid = pid;
  parts.rank = rank;
  return ExpandTracePath(pattern, parts);
}

std::string GlobalRankFromEnvironment() { return FirstSet({"RANK", "SLURM_PROCID"}); }

std::string LocalRankFromEnvironment() { return FirstSet({"LOCAL_RANK", "SLURM_LOCALID"}); }

std::string RankFromEnvironment() {
  std::string rank = GlobalRankFromEnvironment();
  if (rank.empty()) rank = LocalRankFromEnvironment();
  return rank.empty() ? "0" : rank;
}

std::string DefaultTracePattern() {
  return GlobalRankFromEnvironment().empty() ? "gpumem-%p.gpumem"
                                             : "gpumem-rank%r-%h-%p.gpumem";
}

std::string PathWithPid(const std::string& path, long pid) {
  const std::string tag = "." + std::to_string(pid);
  const std::size_t slash = path.rfind('/');
  const std::size_t dot = path.rfind('.');
  const bool has_ext = dot != std::string::npos && dot > 0 &&
                       (slash == std::string::npos || dot > slash + 1);
  if (!has_ext) return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}

}  // namespace gpumem
