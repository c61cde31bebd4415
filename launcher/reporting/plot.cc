#include "launcher/reporting/plot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/file_util.h"
#include "common/status_macros.h"

extern char** environ;

namespace pstrain {
namespace {

std::string Num(double v) { return absl::StrFormat("%.6g", v); }

std::string Preamble(const std::string& name, const std::string& title, const std::string& x_label,
                     const std::string& y_label) {
  return absl::StrCat(
      "# Drawn by pstrain; redraw with: gnuplot ", name, ".gp (in this directory)\n",
      "set terminal pngcairo size 900,540 font 'sans,10' noenhanced\n",
      "set output ", GnuplotQuote(name + ".png"), "\n", "set title ", GnuplotQuote(title), "\n",
      "set xlabel ", GnuplotQuote(x_label), "\n", "set ylabel ", GnuplotQuote(y_label), "\n",
      "set grid\nset key below reverse Left samplen 2 spacing 1.2 width 2\n");
}

std::string Range(const std::optional<double>& lo, const std::optional<double>& hi) {
  return absl::StrCat("[", lo ? Num(*lo) : "*", ":", hi ? Num(*hi) : "*", "]");
}

absl::Status WriteChartFiles(const std::string& dir, const std::string& name, const std::string& data,
                             const std::string& script) {
  RETURN_IF_ERROR(MakeDirs(dir));
  RETURN_IF_ERROR(WriteFileAtomic(absl::StrCat(dir, "/", name, ".dat"), data));
  return WriteFileAtomic(absl::StrCat(dir, "/", name, ".gp"), script);
}

}  // namespace

std::string GnuplotQuote(const std::string& text) {
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "''"}, {"\n", " "}}), "'");
}

bool HasData(const LineChart& chart) {
  for (const Series& s : chart.series) {
    if (!s.points.empty()) return true;
  }
  return false;
}

bool HasData(const BarChart& chart) { return !chart.categories.empty() && !chart.values.empty(); }

std::string LineChartData(const LineChart& chart) {
  std::string out;
  for (const Series& s : chart.series) {
    if (s.points.empty()) continue;
    absl::StrAppend(&out, "# ", s.title, "\n");
    for (const auto& [x, y] : s.points) absl::StrAppend(&out, Num(x), " ", Num(y), "\n");
    out += "\n\n";  // gnuplot: the next `index`
  }
  return out;
}

std::string LineChartScript(const LineChart& chart) {
  std::string out = Preamble(chart.name, chart.title, chart.x_label, chart.y_label);
  absl::StrAppend(&out, "set xrange ", Range(chart.x_min, chart.x_max), "\nset yrange ",
                  Range(chart.y_min, chart.y_max), "\n");
  if (!chart.x_tics.empty()) {
    std::vector<std::string> tics;
    for (double x : chart.x_tics) tics.push_back(Num(x));
    absl::StrAppend(&out, "set xtics (", absl::StrJoin(tics, ", "), ")\n");
  }
  if (chart.log_x) out += "set logscale x 2\n";
  for (const auto& [x, label] : chart.x_marks) {
    absl::StrAppend(&out, "set arrow from ", Num(x), ", graph 0 to ", Num(x),
                    ", graph 1 nohead dt 4 lc rgb 'gray40'\nset label ", GnuplotQuote(label), " at ", Num(x),
                    ", graph 0.96 offset 0.5, 0 textcolor rgb 'gray40'\n");
  }
  std::vector<std::string> plots;
  int index = 0;
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const Series& s = chart.series[i];
    if (s.points.empty()) continue;
    const int color = s.color > 0 ? s.color : static_cast<int>(i) + 1;
    const std::string style = s.marker > 0 ? absl::StrCat("points pt ", s.marker, " ps 2.2")
                              : chart.points ? "linespoints pt 7 ps 0.7"
                                             : "lines";
    plots.push_back(absl::StrCat(index == 0 ? GnuplotQuote(chart.name + ".dat") : "''", " index ", index,
                                 " using 1:2 with ", style, " lw 2 lc ", color, s.dashed ? " dt 2" : "",
                                 " title ", GnuplotQuote(s.title)));
    ++index;
  }
  for (const auto& [y, label] : chart.y_marks) {
    plots.push_back(absl::StrCat(Num(y), " with lines dt 3 lw 1 lc rgb 'gray40' title ", GnuplotQuote(label)));
  }
  absl::StrAppend(&out, "plot ", absl::StrJoin(plots, ", \\\n     "), "\n");
  return out;
}

std::string BarChartData(const BarChart& chart) {
  std::string out = absl::StrCat("# category ", absl::StrJoin(chart.series_titles, " "), "\n");
  for (size_t c = 0; c < chart.categories.size(); ++c) {
    absl::StrAppend(&out, "\"", chart.categories[c], "\"");
    for (const std::vector<double>& v : chart.values) absl::StrAppend(&out, " ", Num(v[c]));
    out += "\n";
  }
  return out;
}

std::string BarChartScript(const BarChart& chart) {
  std::string out = Preamble(chart.name, chart.title, chart.x_label, chart.y_label);
  absl::StrAppend(&out,
                  "set style data histograms\nset style histogram clustered gap 1\n"
                  "set style fill solid 0.85 border -1\nset yrange [0:*]\nset grid noxtics\n");
  std::vector<std::string> plots;
  for (size_t i = 0; i < chart.series_titles.size(); ++i) {
    const std::string labels =
        i == 0 ? absl::StrCat(":xticlabels(int($0) % ", std::max(1, chart.label_every),
                              " == 0 ? stringcolumn(1) : '')")
               : "";
    plots.push_back(absl::StrCat(i == 0 ? GnuplotQuote(chart.name + ".dat") : "''", " using ", i + 2,
                                 labels, " lc ", i + 1, " title ", GnuplotQuote(chart.series_titles[i])));
  }
  absl::StrAppend(&out, "plot ", absl::StrJoin(plots, ", \\\n     "), "\n");
  return out;
}

absl::Status WriteChart(const std::string& dir, const LineChart& chart) {
  if (!HasData(chart)) return absl::FailedPreconditionError(absl::StrCat(chart.name, ": no data"));
  return WriteChartFiles(dir, chart.name, LineChartData(chart), LineChartScript(chart));
}

absl::Status WriteChart(const std::string& dir, const BarChart& chart) {
  if (!HasData(chart)) return absl::FailedPreconditionError(absl::StrCat(chart.name, ": no data"));
  return WriteChartFiles(dir, chart.name, BarChartData(chart), BarChartScript(chart));
}

absl::Status RunGnuplot(const std::string& gnuplot, const std::string& dir, const std::string& name) {
  const std::string script = name + ".gp";
  const std::string log = absl::StrCat(dir, "/", name, ".log");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  const std::string cd = "cd " + GnuplotQuote(dir);
  std::vector<std::string> args = {gnuplot, "-e", cd, script};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, gnuplot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return absl::NotFoundError(absl::StrCat("cannot run ", gnuplot, ": ", std::strerror(err),
                                            " (install it: apt-get install gnuplot-nox)"));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid(gnuplot): ", std::strerror(errno)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    struct stat st;
    if (stat(log.c_str(), &st) == 0 && st.st_size == 0) std::remove(log.c_str());  // nothing said
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(gnuplot, " failed on ", dir, "/", script, " (",
                                          WIFEXITED(status) ? absl::StrCat("exit code ", WEXITSTATUS(status))
                                                            : "killed by a signal",
                                          "); see ", log));
}

void FigureDrawer::Record(const absl::Status& drawn, const std::string& name, const std::string& caption) {
  if (drawn.ok()) {
    figures_.push_back({absl::StrCat(relative_dir_, "/", name, ".png"), caption});
  } else if (absl::IsNotFound(drawn)) {
    gnuplot_missing_ = true;
    notes_.push_back(absl::StrCat("No plots: ", drawn.message(), ". The tables are complete; the "
                                  "data and gnuplot scripts are in ", relative_dir_, "/."));
  } else if (absl::IsFailedPrecondition(drawn)) {
    notes_.push_back(absl::StrCat("No plot of ", caption, ": no run has data for it."));
  } else {
    notes_.push_back(absl::StrCat("No plot of ", caption, ": ", drawn.message()));
  }
}

}  // namespace pstrain
