// The HTML page in headless Chromium: it loads with no console error, finishes rendering,
// and the figures in its DOM are those of --json. Skips (saying why) without Chromium.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "profiler/process_note.h"
#include "tools/report/html_report.h"
#include "tools/report/json_report.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/report/synthetic_outside.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {

std::string FindChromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome", "headless_shell"}) {
    std::string cmd = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return name;
  }
  return "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Page {
  std::string dom;
  std::string log;  // Chromium's stderr, where console messages are logged
};

// `after`: a script run once the page has drawn (what a user's pointer would do).
Page Load(const std::string& chromium, const std::vector<Report>& reports, const std::string& tag,
          const std::string& after = "") {
  const std::string dir = ::testing::TempDir() + "gpumem_html_" + tag;
  std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  {
    std::string html = RenderHtml(reports);
    if (!after.empty()) html.insert(html.rfind("</body>"), "<script>" + after + "</script>\n");
    std::ofstream out(dir + "/report.html", std::ios::binary);
    out << html;
  }
  const std::string cmd = chromium + " --headless --no-sandbox --disable-gpu --no-first-run" +
                          " --user-data-dir=" + dir + "/profile --enable-logging=stderr --v=0" +
                          " --dump-dom file://" + dir + "/report.html > " + dir + "/dom.html 2> " +
                          dir + "/log.txt";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return Page{ReadFile(dir + "/dom.html"), ReadFile(dir + "/log.txt")};
}

// data-field="NAME" data-value="VALUE" as the page wrote it.
std::string Field(const std::string& dom, const std::string& name) {
  std::smatch m;
  std::regex re("data-field=\"" + name + "\" data-value=\"([^\"]*)\"");
  return std::regex_search(dom, m, re) ? m[1].str() : "<missing>";
}

std::size_t Count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void ExpectNoConsoleErrors(const Page& page) {
  // The page writes nothing to the console, so any console line ("INFO:CONSOLE:12]" in
  // current Chromium, "CONSOLE(12)" in older ones) is an error or an uncaught exception.
  EXPECT_EQ(page.log.find("Uncaught"), std::string::npos) << page.log;
  EXPECT_FALSE(std::regex_search(page.log, std::regex("CONSOLE[:(]"))) << page.log;
  // The script marks the body once it has drawn everything: an exception stops it short.
  EXPECT_NE(page.dom.find("data-rendered=\"yes\""), std::string::npos);
}

TEST(HtmlInBrowser, LeakyMlpFiguresMatchJson) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp.trace.tsv.gz");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<Report> reports;
  reports.push_back(BuildReport(*t, {}));
  const nlohmann::json j = ReportToJson(reports[0]);
  Page page = Load(chromium, reports, "leaky");
  ExpectNoConsoleErrors(page);
  EXPECT_EQ(Field(page.dom, "peak_allocated"), j["peak_allocated"].dump());
  EXPECT_EQ(Field(page.dom, "steps.count"), j["steps"]["count"].dump());
  EXPECT_NE(page.dom.find(j["verdict"].get<std::string>()), std::string::npos);
  // Every suspect row, in rank order, with its rate.
  std::regex row("class=\"suspect\" data-site=\"([^\"]*)\" data-bytes-per-step=\"([^\"]*)\"");
  std::size_t k = 0;
  for (auto it = std::sregex_iterator(page.dom.begin(), page.dom.end(), row); it != std::sregex_iterator(); ++it, ++k) {
    ASSERT_LT(k, j["leak_suspects"].size());
    EXPECT_EQ((*it)[1].str(), j["leak_suspects"][k]["site"].get<std::string>());
    EXPECT_DOUBLE_EQ(std::stod((*it)[2].str()), j["leak_suspects"][k]["bytes_per_step"].get<double>());
  }
  EXPECT_EQ(k, j["leak_suspects"].size());
  EXPECT_GE(k, 1u);
  EXPECT_NE(page.dom.find("id=\"time-chart\""), std::string::npos);
  EXPECT_NE(page.dom.find("id=\"segment-map\""), std::string::npos);
  // No CUPTI trace: no line for memory outside the allocator.
  EXPECT_EQ(page.dom.find("data-series=\"with outside\""), std::string::npos);
}

// varlen_bert under PyTorch's allocator cached 1.43x what it allocated: against a cap just
// above that, the page says so, as --json does.
TEST(HtmlInBrowser, CachePressureIsShown) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  absl::StatusOr<trace::Trace> t =
      trace::LoadTrace(std::string(GPUMEM_TEST_DATA) + "/varlen_bert.pickle.xz");
  ASSERT_TRUE(t.ok()) << t.status();
  ReportOptions options;
  options.capacity = 18'000'000'000;
  std::vector<Report> reports;
  reports.push_back(BuildReport(*t, options));
  ASSERT_TRUE(reports[0].cache_pressure.has_value());
  Page page = Load(chromium, reports, "pressure");
  ExpectNoConsoleErrors(page);
  EXPECT_NE(page.dom.find("data-field=\"cache_pressure\">Cache pressure: the allocator reserved "
                          "up to 16.32 GiB, 1.43x"),
            std::string::npos);
}

// One process on two GPUs: each device's peaks under the figures, which are both
// devices' together, and the projection on the device the leak grows on, as --json says.
TEST(HtmlInBrowser, EachDeviceOfOneProcessIsShown) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(std::string(GPUMEM_TEST_DATA) +
                                                    "/split_over_two_gpus_long_batch.gpumem.xz");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<Report> reports;
  reports.push_back(BuildReport(*t, {}));
  const nlohmann::json j = ReportToJson(reports[0]);
  ASSERT_EQ(j["devices"].size(), 2u);
  ASSERT_EQ(j["projected_oom_device"], 0);
  Page page = Load(chromium, reports, "devices");
  ExpectNoConsoleErrors(page);
  EXPECT_EQ(Count(page.dom, "data-field=\"devices\""), 2u);
  EXPECT_NE(page.dom.find("device 1: peak allocated 3.84 GiB"), std::string::npos);
  EXPECT_NE(page.dom.find(absl::StrCat(j["projected_oom_step"].get<int>(), " on device 0")),
            std::string::npos);
  // The chart's lines are both devices' together, its cap one device's: the legend says so.
  EXPECT_NE(page.dom.find("the 2 devices together"), std::string::npos);
  EXPECT_NE(page.dom.find(absl::StrCat("capacity of device ",
                                       j["outside_allocator"]["device"].get<int>())),
            std::string::npos);
}

TEST(HtmlInBrowser, OomAndRanksAreShown) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  trace::Trace frag = synthetic::FragmentationTrace();
  trace::Trace peak = synthetic::PeakTrace();
  std::vector<Report> reports;
  reports.push_back(BuildReport(frag, {}));
  reports.push_back(BuildReport(peak, {}));
  Page page = Load(chromium, reports, "ooms");
  ExpectNoConsoleErrors(page);
  EXPECT_NE(page.dom.find("class=\"oom\" data-class=\"fragmentation\""), std::string::npos);
  EXPECT_NE(page.dom.find("class=\"oom\" data-class=\"peak\""), std::string::npos);
  EXPECT_NE(page.dom.find("class=\"oom-mark\""), std::string::npos);
  EXPECT_NE(page.dom.find("Live on device 0 at it, by site: "), std::string::npos);
  // Where the run ran out, the figures say the step instead of projecting one.
  const nlohmann::json j = ReportToJson(reports[0]);
  ASSERT_FALSE(j["fatal_oom"].is_null());
  ASSERT_TRUE(j["projected_oom_step"].is_null());
  EXPECT_EQ(Field(page.dom, "ran_out_step"),
            j["ooms"][j["fatal_oom"].get<std::size_t>()]["step"].dump());
  EXPECT_NE(page.dom.find("id=\"ranks\""), std::string::npos);
  // The ranks' table by rank number, with the step each ran out in.
  EXPECT_NE(page.dom.find("<th>rank</th>"), std::string::npos);
  EXPECT_NE(page.dom.find("<th>OOM step</th>"), std::string::npos);
  EXPECT_NE(page.dom.find("id=\"no-suspects\""), std::string::npos);
  // The ranks' imbalance: a bar per rank and the heat map of their step peaks.
  EXPECT_EQ(Count(page.dom, "class=\"rank-bar\""), 2u);
  EXPECT_NE(page.dom.find("id=\"rank-heat\""), std::string::npos);
  // Both traces are named "synthetic": the heat map's scale is still the higher peak's.
  EXPECT_NE(page.dom.find("scale 0 to 1.00 GiB"), std::string::npos);
}

// A job of 10 ranks: every rank in the bars, sections for 8 only, the leaking (differing)
// last rank among them.
TEST(HtmlInBrowser, ManyRanksKeepSectionsForTheDifferingFirst) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  std::vector<trace::Trace> traces;
  for (int i = 0; i < 9; ++i) traces.push_back(synthetic::PeakTrace());
  traces.push_back(synthetic::LeakTrace());
  std::vector<Report> reports;
  for (const trace::Trace& t : traces) reports.push_back(BuildReport(t, {}));
  const std::string leak_verdict = ReportToJson(reports.back())["verdict"].get<std::string>();
  Page page = Load(chromium, reports, "many_ranks");
  ExpectNoConsoleErrors(page);
  EXPECT_EQ(Count(page.dom, "class=\"rank-bar\""), 10u);
  EXPECT_EQ(Count(page.dom, "data-field=\"verdict\""), 8u);
  EXPECT_NE(page.dom.find(leak_verdict), std::string::npos);
  EXPECT_NE(page.dom.find("Sections below for 8 of 10 ranks"), std::string::npos);
  // The leaking rank's row in the table is marked as differing: one such row.
  EXPECT_EQ(Count(page.dom, "<tr class=\"differs\""), 1u);
}

// The band under the timeline: a bar per moment with the allocator, each library and the
// remainder (other processes apart where NVML was read); the merged table's outside-allocator column; "unknown" for an old trace.
TEST(HtmlInBrowser, OutsideAllocatorBandAndColumn) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  trace::Trace outside = synthetic::OutsideAllocatorTrace(true);
  // NVML read at the OOM: another process's 400 MiB is split out of the remainder.
  format::ProcessNote note;
  note.processes.self = synthetic::OutsideAnswer::UsedAtEnd() - (400ull << 20);
  note.processes.others = {{4242, 400ull << 20}};
  outside.annotations.push_back({format::ProcessNoteText(note), true,
                                 outside.events.back().time_us + 1, 0});
  trace::Trace old = synthetic::PeakTrace();
  std::vector<Report> reports;
  reports.push_back(BuildReport(outside, {}));
  reports.push_back(BuildReport(old, {}));
  Page page = Load(chromium, reports, "outside");
  ExpectNoConsoleErrors(page);
  EXPECT_NE(page.dom.find("data-card=\"outside-allocator\""), std::string::npos);
  EXPECT_NE(page.dom.find("data-moment=\"peak\""), std::string::npos);
  EXPECT_NE(page.dom.find("data-moment=\"OOM\""), std::string::npos);
  for (const char* part :
       {"reserved", "nccl", "cublas", "cudnn", "other", "unknown", "remainder", "others"}) {
    EXPECT_NE(page.dom.find(std::string("data-part=\"") + part + "\""), std::string::npos) << part;
  }
  EXPECT_NE(page.dom.find("unknown: no CUPTI records and no driver readings"), std::string::npos);
  EXPECT_NE(page.dom.find("<th>outside allocator</th>"), std::string::npos);
}

// Pointer events on the timeline, as a user makes them: fit the y scale to allocated (the
// synthetic trace's 64 GiB reserved dwarfs it); hover just above the x axis (over the
// bottom band) and keep the tooltip's text; drag across the middle fifth to zoom and time
// the redraw; zoom in on the peak until every event is drawn. Results go into the body's
// attributes, for --dump-dom.
constexpr char kPointer[] = R"js(
(function () {
  const chart = document.getElementById("time-chart"), hit = document.getElementById("chart-hit");
  const set = (name, value) => document.body.setAttribute(name, String(value));
  const top = () => chart.querySelectorAll(".y-tick")[4].textContent;
  set("data-first-tick-before", chart.querySelector(".x-tick").textContent);
  set("data-y-top", top());
  document.querySelector("button[data-action=fit]").click();
  set("data-y-top-fitted", top());
  const b = chart.getBoundingClientRect();
  const at = (fx, fy) => ({ clientX: b.left + b.width * fx, clientY: b.top + b.height * fy, bubbles: true });
  hit.dispatchEvent(new MouseEvent("mousemove", at(0.5, 0.86)));
  set("data-tip", document.getElementById("tip").textContent);
  const t0 = performance.now();
  hit.dispatchEvent(new MouseEvent("mousedown", at(0.4, 0.5)));
  hit.dispatchEvent(new MouseEvent("mousemove", at(0.6, 0.5)));
  hit.dispatchEvent(new MouseEvent("mouseup", at(0.6, 0.5)));
  set("data-zoom-ms", performance.now() - t0);
  set("data-first-tick", chart.querySelector(".x-tick").textContent);
  // Zoom in on the purple mark (the events kept one by one around the peak) until the
  // chart draws them: a few drags, each around the mark or inside it once it is wide.
  hit.dispatchEvent(new MouseEvent("dblclick", { bubbles: true }));
  const note = () => document.getElementById("chart-note").textContent;
  for (let i = 0; i < 8 && !note().includes("every event ("); i++) {
    const m = chart.querySelector(".detail-mark").getBoundingClientRect(), y = m.bottom + 60;
    const mid = m.left + m.width / 2, half = m.width > 40 ? m.width * 0.2 : 20;
    const ev = x => ({ clientX: x, clientY: y, bubbles: true });
    hit.dispatchEvent(new MouseEvent("mousedown", ev(mid - half)));
    hit.dispatchEvent(new MouseEvent("mousemove", ev(mid + half)));
    hit.dispatchEvent(new MouseEvent("mouseup", ev(mid + half)));
  }
  set("data-detail-note", note());
  set("data-detail-tick", chart.querySelector(".x-tick") ? chart.querySelector(".x-tick").textContent : "none");
})();
)js";

std::string BodyAttr(const std::string& dom, const std::string& name) {
  std::smatch m;
  return std::regex_search(dom, m, std::regex(name + "=\"([^\"]*)\"")) ? m[1].str() : "<missing>";
}

// A page built from a 1M-event trace (the benchmark does 10M, docs/report.md): bounded in
// size, drawn within the 3 s target, axis in steps and seconds, the projected OOM on the
// timeline, a band's stack and size on hover, a redraw on zoom well under a frame budget
// of a slow machine.
// A leak outside the allocator (the CUPTI trace's) is a suspect row of its own, without
// the blocks and stack the allocator's suspects have.
TEST(HtmlInBrowser, ALeakOutsideTheAllocatorIsASuspectRow) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  const std::string data = std::string(GPUMEM_TEST_DATA) + "/";
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(data + "extension_fills_the_gpu.gpumem.xz");
  absl::StatusOr<trace::Trace> cupti =
      trace::LoadTrace(data + "extension_fills_the_gpu.cupti.gpumem.xz");
  ASSERT_TRUE(t.ok() && cupti.ok());
  ReportOptions options;
  options.cupti = &*cupti;
  std::vector<Report> reports;
  reports.push_back(BuildReport(*t, options));
  const nlohmann::json j = ReportToJson(reports[0]);
  ASSERT_EQ(j["leak_suspects"].size(), 1u);
  Page page = Load(chromium, reports, "outside_leak");
  ExpectNoConsoleErrors(page);
  const std::string site = j["leak_suspects"][0]["site"].get<std::string>();
  EXPECT_NE(page.dom.find("class=\"suspect\" data-site=\"" + site + "\""), std::string::npos);
  EXPECT_NE(page.dom.find(site + " (outside the allocator)"), std::string::npos);
  EXPECT_NE(page.dom.find("in the CUPTI trace"), std::string::npos);
  // The timeline draws the libraries' memory beside the allocator's: the leak is seen.
  EXPECT_NE(page.dom.find("data-series=\"with outside\""), std::string::npos);
  EXPECT_NE(page.dom.find("and libraries' memory outside the allocator</span>"),
            std::string::npos);
}

// A run that ends well with a leak outside the allocator: the step the device would fill.
TEST(HtmlInBrowser, ALeakOutsideTheAllocatorProjectsTheStepTheDeviceFills) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  const trace::Trace main = synthetic::OutsideMainTrace();
  std::uint32_t stack = 0;
  const trace::Trace cupti = synthetic::OutsideCuptiTraceOfAnExtensionThatKeeps(main, &stack);
  ReportOptions options;
  options.cupti = &cupti;
  std::vector<Report> reports;
  reports.push_back(BuildReport(main, options));
  const nlohmann::json j = ReportToJson(reports[0]);
  ASSERT_FALSE(j["outside_projected_oom_step"].is_null());
  Page page = Load(chromium, reports, "outside_projection");
  ExpectNoConsoleErrors(page);
  EXPECT_NE(page.dom.find("the device has no free memory left in step " +
                          j["outside_projected_oom_step"].dump() + "."),
            std::string::npos);
  // The figures at the top say it too, beside the allocator's own (none).
  ASSERT_TRUE(j["projected_oom_step"].is_null());
  EXPECT_EQ(Field(page.dom, "projected_oom_step"), j["outside_projected_oom_step"].dump());
  EXPECT_EQ(std::stod(Field(page.dom, "outside_leak_bytes_per_step")),
            j["leak_suspects"][0]["bytes_per_step"].get<double>());
}

// A run that died in its first step: no step end sampled the driver, the OOM did. The
// band shows that moment, and the summary the step the run ran out in.
TEST(HtmlInBrowser, TheOomMomentIsShownWhereNoStepEnded) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  absl::StatusOr<trace::Trace> t = trace::LoadTrace(
      std::string(GPUMEM_TEST_DATA) + "/bounded_prefetcher_first_step_too_large.gpumem.xz");
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<Report> reports;
  reports.push_back(BuildReport(*t, {}));
  Page page = Load(chromium, reports, "oom_moment");
  ExpectNoConsoleErrors(page);
  EXPECT_NE(page.dom.find("data-moment=\"OOM\""), std::string::npos);
  EXPECT_EQ(page.dom.find("data-moment=\"peak\""), std::string::npos);
  EXPECT_EQ(Field(page.dom, "ran_out_step"), "1");
}

TEST(HtmlInBrowser, LargeTracePageLoadsFastAndZooms) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/install-deps.sh installs it)";
  const trace::Trace t = synthetic::LargeTrace(1'000'000, 10'000, 64, 8u << 20);
  ReportOptions options;
  options.capacity = 16ull << 30;
  std::vector<Report> reports;
  reports.push_back(BuildReport(t, options));
  const nlohmann::json j = ReportToJson(reports[0]);
  ASSERT_FALSE(j["projected_oom_step"].is_null());
  Page page = Load(chromium, reports, "large", kPointer);
  ExpectNoConsoleErrors(page);
  EXPECT_LT(std::stod(BodyAttr(page.dom, "data-ready-ms")), 3000.0);
  EXPECT_EQ(BodyAttr(page.dom, "data-first-tick-before"), "step 0") << "x axis in steps";
  EXPECT_TRUE(std::regex_search(page.dom, std::regex("class=\"x-tick2\"[^>]*>[0-9.]+ s<"))) << "and seconds";
  EXPECT_NE(page.dom.find("class=\"projected-oom\" data-step=\"" + j["projected_oom_step"].dump() + "\""),
            std::string::npos);
  EXPECT_NE(page.dom.find("id=\"envelope\""), std::string::npos);
  // The tooltip names the band under the pointer, its size and its stack.
  const std::string tip = BodyAttr(page.dom, "data-tip");
  EXPECT_TRUE(std::regex_search(tip, std::regex("train\\.py:[0-9]+ [a-z_0-9]+: [0-9.]+ [KMG]iB live"))) << tip;
  EXPECT_NE(tip.find("torch/nn/modules/linear.py"), std::string::npos) << tip;
  EXPECT_LT(std::stod(BodyAttr(page.dom, "data-zoom-ms")), 250.0);
  EXPECT_NE(BodyAttr(page.dom, "data-first-tick"), "step 0") << "zoomed into the middle";
  // Fitting the y scale to allocated drops the synthetic trace's 64 GiB reserved from it.
  EXPECT_NE(BodyAttr(page.dom, "data-y-top"), BodyAttr(page.dom, "data-y-top-fitted"));
  EXPECT_NE(BodyAttr(page.dom, "data-y-top").find("GiB"), std::string::npos);
  EXPECT_NE(BodyAttr(page.dom, "data-detail-note").find("every event (detail kept around the peak"), std::string::npos)
      << BodyAttr(page.dom, "data-detail-note");
  // Ticks at fractions of a step once zoomed inside one.
  EXPECT_TRUE(std::regex_match(BodyAttr(page.dom, "data-detail-tick"), std::regex("step [0-9]+\\.[0-9]+")))
      << BodyAttr(page.dom, "data-detail-tick");
}

}  // namespace
}  // namespace gpumem::report
