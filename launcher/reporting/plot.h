#pragma once

// Charts drawn by gnuplot (a Debian package) as PNG files: each chart is a
// data file and a script written into one directory, then gnuplot runs as a
// child process on the script. The scripts use paths relative to that
// directory, so `cd DIR && gnuplot NAME.gp` redraws a chart by hand.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace pstrain {

struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in this order
  bool dashed = false;
  int color = 0;  // gnuplot line colour index (1, 2, ...); 0: the series' position
  int marker = 0;  // > 0: points only, of this gnuplot point type (6: a circle), no line
};

// Lines with points, one per series, on shared axes.
struct LineChart {
  std::string name;  // file stem: NAME.png, NAME.gp, NAME.dat
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;    // series without points are left out
  std::optional<double> x_min;   // unset: gnuplot's autoscale
  std::optional<double> x_max;
  std::optional<double> y_min;
  std::optional<double> y_max;
  std::vector<double> x_tics;    // explicit x tics (empty: gnuplot's)
  bool log_x = false;            // a logarithmic x axis (base 2)
  std::vector<std::pair<double, std::string>> y_marks;  // labelled horizontal dotted lines
  bool points = true;            // mark each point (false: lines only)
  std::vector<std::pair<double, std::string>> x_marks;  // labelled vertical lines
};

// Clustered bars: one cluster per category, one bar per series in it.
struct BarChart {
  std::string name;
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<std::string> categories;
  std::vector<std::string> series_titles;
  std::vector<std::vector<double>> values;  // [series][category]
  int label_every = 1;                      // label every k-th category
};

// Whether the chart has anything to draw.
bool HasData(const LineChart& chart);
bool HasData(const BarChart& chart);

// The files of a chart: the data file's text and the gnuplot script, which
// reads NAME.dat and writes NAME.png.
std::string LineChartData(const LineChart& chart);
std::string LineChartScript(const LineChart& chart);
std::string BarChartData(const BarChart& chart);
std::string BarChartScript(const BarChart& chart);

// Writes NAME.dat and NAME.gp into `dir`. FailedPrecondition for a chart
// with no data; errors name the file.
absl::Status WriteChart(const std::string& dir, const LineChart& chart);
absl::Status WriteChart(const std::string& dir, const BarChart& chart);

// Runs `gnuplot` on DIR/NAME.gp in DIR (NAME.png appears there), its output
// going to DIR/NAME.log. NotFound when `gnuplot` cannot be run (not
// installed), Internal naming the script and the log when it fails.
absl::Status RunGnuplot(const std::string& gnuplot, const std::string& dir, const std::string& name);

// A drawn chart, for a report.
struct Figure {
  std::string path;     // relative to the report
  std::string caption;
};

// Draws an experiment's charts into `dir` (which the report calls
// `relative_dir`), keeping the figures drawn and a note for each chart that
// was not. Once gnuplot proves missing it stops trying, with one note.
class FigureDrawer {
 public:
  FigureDrawer(std::string dir, std::string relative_dir, std::string gnuplot)
      : dir_(std::move(dir)), relative_dir_(std::move(relative_dir)), gnuplot_(std::move(gnuplot)) {}

  // Writes the chart's files and, while gnuplot is there, draws it.
  template <typename Chart>
  void Add(const Chart& chart, const std::string& caption) {
    absl::Status s = WriteChart(dir_, chart);
    if (s.ok() && gnuplot_missing_) return;
    if (s.ok()) s = RunGnuplot(gnuplot_, dir_, chart.name);
    Record(s, chart.name, caption);
  }

  // A note of the caller's, e.g. why it drew no chart.
  void AddNote(std::string note) { notes_.push_back(std::move(note)); }

  const std::vector<Figure>& figures() const { return figures_; }
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  void Record(const absl::Status& drawn, const std::string& name, const std::string& caption);

  std::string dir_;
  std::string relative_dir_;
  std::string gnuplot_;
  bool gnuplot_missing_ = false;
  std::vector<Figure> figures_;
  std::vector<std::string> notes_;
};

// Single-quoted gnuplot string literal ('it''s').
std::string GnuplotQuote(const std::string& text);

}  // namespace pstrain
