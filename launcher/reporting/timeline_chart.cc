#include "launcher/reporting/timeline_chart.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/status_macros.h"
#include "launcher/reporting/plot.h"

namespace pstrain {
namespace {

struct Span {
  std::string name;
  int pid = 0;
  int tid = 0;
  double ts = 0;
  double dur = 0;
  int64_t step = -1;  // "step" spans: args.step
};

struct Trace {
  std::vector<Span> spans;
  std::map<int, std::string> processes;                // pid -> name
  std::map<std::pair<int, int>, std::string> threads;  // (pid, tid) -> name
};

// The kinds drawn, in legend order, with their colours.
const std::vector<std::pair<std::string, std::string>>& Kinds() {
  static const auto* kinds = new std::vector<std::pair<std::string, std::string>>{
      {"compute", "#4477aa"},  {"forward", "#66ccee"},    {"backward", "#225588"},
      {"push_pull", "#ee6677"}, {"ps reply", "#ccbb44"},  {"gather", "#bbbbbb"},
      {"apply", "#ee7733"},    {"evaluate", "#228833"},  {"checkpoint", "#aa3377"},
      {"save", "#aa3377"},     {"rejoin", "#000000"}};
  return *kinds;
}

std::string KindOf(const std::string& name) {
  if (absl::StartsWith(name, "push_pull ps:")) return "ps reply";
  if (absl::StartsWith(name, "forward ")) return "forward";
  if (absl::StartsWith(name, "backward ")) return "backward";
  return name;
}

using Fields = google::protobuf::Map<std::string, google::protobuf::Value>;

// args.<key> of an event as a string ("" when absent).
std::string ArgString(const Fields& event, const std::string& key) {
  const auto args = event.find("args");
  if (args == event.end()) return "";
  const auto& f = args->second.struct_value().fields();
  const auto v = f.find(key);
  return v == f.end() ? "" : v->second.string_value();
}

absl::StatusOr<Trace> ReadTrace(const std::string& path) {
  auto text = ReadFileToString(path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist: run with --timeline"));
  }
  RETURN_IF_ERROR(text.status());
  ASSIGN_OR_RETURN(const google::protobuf::Value json, ParseJson(*text, path));
  const auto& top = json.struct_value().fields();
  const auto events = top.find("traceEvents");
  if (events == top.end() || !events->second.has_list_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no traceEvents list"));
  }
  Trace t;
  for (const google::protobuf::Value& e : events->second.list_value().values()) {
    const auto& f = e.struct_value().fields();
    auto str = [&](const char* k) { return f.count(k) ? f.at(k).string_value() : std::string(); };
    auto num = [&](const char* k) { return f.count(k) ? f.at(k).number_value() : 0.0; };
    const int pid = static_cast<int>(num("pid")), tid = static_cast<int>(num("tid"));
    if (str("ph") == "M") {
      const std::string name = ArgString(f, "name");
      if (str("name") == "process_name") t.processes[pid] = name;
      if (str("name") == "thread_name") t.threads[{pid, tid}] = name;
      continue;
    }
    if (str("ph") != "X") continue;
    Span s{str("name"), pid, tid, num("ts"), num("dur"), -1};
    if (s.name == "step" && f.count("args")) {
      const auto& args = f.at("args").struct_value().fields();
      if (args.count("step")) s.step = static_cast<int64_t>(args.at("step").number_value());
    }
    t.spans.push_back(s);
  }
  return t;
}

}  // namespace

absl::Status ParseStepRange(const std::string& text, TimelineChartOptions* o) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  int64_t a = -1, b = -1;
  const bool ok =
      (parts.size() == 1 && absl::SimpleAtoi(parts[0], &a) && (b = a) >= 0) ||
      (parts.size() == 2 && absl::SimpleAtoi(parts[0], &a) && absl::SimpleAtoi(parts[1], &b));
  if (!ok || a < 0 || b < a) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps=", text, ": expected A:B with 0 <= A <= B (or one step A)"));
  }
  o->first_step = a;
  o->last_step = b;
  return absl::OkStatus();
}

namespace {

// The chosen steps of every worker: from the earliest start of the first to
// the latest end of the last (Unix microseconds).
struct Window {
  double begin = std::numeric_limits<double>::max();
  double end = 0;
  bool Overlaps(const Span& s) const { return s.ts < end && s.ts + s.dur > begin; }
};

absl::StatusOr<Window> FindWindow(const Trace& t, const TimelineChartOptions& o,
                                  const std::string& path) {
  Window w;
  int64_t min_step = std::numeric_limits<int64_t>::max(), max_step = -1;
  for (const Span& s : t.spans) {
    if (s.name != "step") continue;
    min_step = std::min(min_step, s.step);
    max_step = std::max(max_step, s.step);
    if (s.step < o.first_step || s.step > o.last_step) continue;
    w.begin = std::min(w.begin, s.ts);
    w.end = std::max(w.end, s.ts + s.dur);
  }
  if (w.end > 0) return w;
  return absl::InvalidArgumentError(
      max_step < 0 ? absl::StrCat(path, " holds no steps")
                   : absl::StrCat("no step of ", o.first_step, ":", o.last_step, " in ", path,
                                  " (it has steps ", min_step, " to ", max_step, ")"));
}

// One row per (pid, tid) with a span in the window, top to bottom in pid,
// tid order; `ytics` labels them for gnuplot.
std::map<std::pair<int, int>, int> AssignRows(const Trace& t, const Window& w, std::string* ytics) {
  std::map<std::pair<int, int>, int> rows;
  for (const Span& s : t.spans) {
    if (s.name != "step" && w.Overlaps(s)) rows[{s.pid, s.tid}] = 0;
  }
  int row = static_cast<int>(rows.size()) - 1;
  for (auto& [key, r] : rows) {
    r = row--;
    const auto p = t.processes.find(key.first);
    const auto th = t.threads.find(key);
    const std::string label =
        absl::StrCat(p != t.processes.end() ? p->second : absl::StrCat("pid ", key.first), " ",
                     th != t.threads.end() ? th->second : absl::StrCat("tid ", key.second));
    absl::StrAppend(ytics, ytics->empty() ? "" : ", ", GnuplotQuote(label), " ", r);
  }
  return rows;
}

// The data file (one block per kind, gnuplot's `index`; boxes of x, y,
// dx, dy in ms) and the plot clauses that draw it from `data_file`.
std::string ChartData(const Trace& t, const Window& w,
                      const std::map<std::pair<int, int>, int>& rows, const std::string& data_file,
                      std::vector<std::string>* plots) {
  std::string data;
  int block = 0;
  for (const auto& [kind, colour] : Kinds()) {
    std::string lines;
    for (const Span& s : t.spans) {
      if (s.name == "step" || KindOf(s.name) != kind || !w.Overlaps(s)) continue;
      const double x0 = (std::max(s.ts, w.begin) - w.begin) / 1e3;
      const double x1 = (std::min(s.ts + s.dur, w.end) - w.begin) / 1e3;
      absl::StrAppendFormat(&lines, "%.4f %d %.4f 0.35\n", (x0 + x1) / 2, rows.at({s.pid, s.tid}),
                            std::max((x1 - x0) / 2, 0.0005));
    }
    if (lines.empty()) continue;
    absl::StrAppend(&data, "# ", kind, "\n", lines, "\n\n");
    plots->push_back(absl::StrFormat(
        "%s index %d using 1:2:3:4 with boxxyerror fs solid 0.9 noborder lc rgb '%s' title '%s'",
        block == 0 ? GnuplotQuote(data_file) : "''", block, colour, kind));
    ++block;
  }
  return data;
}

}  // namespace

absl::Status DrawTimelineChart(const TimelineChartOptions& o) {
  if (!absl::EndsWith(o.out, ".png") || o.out.size() <= 4) {
    return absl::InvalidArgumentError(absl::StrCat("--out=", o.out, ": expected FILE.png"));
  }
  const std::string path = o.run_dir + "/timeline.json";
  ASSIGN_OR_RETURN(const Trace t, ReadTrace(path));
  ASSIGN_OR_RETURN(const Window w, FindWindow(t, o, path));
  std::string ytics;
  const std::map<std::pair<int, int>, int> rows = AssignRows(t, w, &ytics);
  const auto [dir, name] = SplitPath(o.out);
  const std::string stem = name.substr(0, name.size() - 4);
  std::vector<std::string> plots;
  const std::string data = ChartData(t, w, rows, stem + ".dat", &plots);
  const std::string script = absl::StrCat(
      "set terminal pngcairo size 1400,", 160 + 40 * rows.size(), " font 'sans,10'\n",
      "set termoption noenhanced\n", "set output ", GnuplotQuote(name), "\n", "set title ",
      GnuplotQuote(absl::StrCat(o.run_dir, ": steps ", o.first_step, " to ", o.last_step)), "\n",
      "set xlabel 'ms from the start of step ", o.first_step, "'\n",
      "set yrange [-0.7:", rows.size() - 0.3, "]\n", "set ytics (", ytics, ")\n",
      "set xrange [0:", absl::StrFormat("%.4f", (w.end - w.begin) / 1e3), "]\n",
      "set grid xtics\nset key outside right top\nset lmargin 24\n", "plot ",
      absl::StrJoin(plots, ", \\\n     "), "\n");
  RETURN_IF_ERROR(MakeDirs(dir));
  RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(dir, "/", stem, ".dat"), data));
  RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(dir, "/", stem, ".gp"), script));
  return RunGnuplot(o.gnuplot, dir, stem);
}

}  // namespace pstrain
