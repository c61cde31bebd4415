#include "launcher/reporting/markdown.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace pstrain {
namespace {

std::string Cell(const std::string& text) { return absl::StrReplaceAll(text, {{"|", "\\|"}, {"\n", " "}}); }

}  // namespace

std::string MarkdownTable(const std::vector<std::string>& header,
                          const std::vector<std::vector<std::string>>& rows) {
  auto line = [](const std::vector<std::string>& cells) {
    std::vector<std::string> escaped;
    for (const std::string& c : cells) escaped.push_back(Cell(c));
    return absl::StrCat("| ", absl::StrJoin(escaped, " | "), " |\n");
  };
  std::string out = line(header);
  out += line(std::vector<std::string>(header.size(), "---"));
  for (const auto& row : rows) out += line(row);
  return out;
}

std::string FiguresSection(const std::vector<Figure>& figures, const std::vector<std::string>& notes) {
  std::string out = "## Figures\n\n";
  for (const Figure& f : figures) absl::StrAppend(&out, "![", f.caption, "](", f.path, ")\n\n*", f.caption, "*\n\n");
  for (const std::string& n : notes) absl::StrAppend(&out, "> ", n, "\n\n");
  return out;
}

std::string SecondsOrNotReached(const std::optional<double>& seconds) {
  return seconds ? absl::StrFormat("%.1f s", *seconds) : std::string("not reached");
}

std::string Percent(double accuracy) { return absl::StrFormat("%g%%", accuracy * 100); }

}  // namespace pstrain
