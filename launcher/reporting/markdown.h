#pragma once

// The pieces of text every report is made of (`pstrain compare`, `scale`,
// `chaos` and `plan`): markdown tables, the figures section, accuracies and
// times as the reports write them. Pure functions.

#include <optional>
#include <string>
#include <vector>

#include "launcher/reporting/plot.h"

namespace pstrain {

// A GitHub-flavoured markdown table; cells may not hold '|' (escaped).
std::string MarkdownTable(const std::vector<std::string>& header,
                          const std::vector<std::vector<std::string>>& rows);

// "## Figures": each figure as an image with its caption, then `notes` (why
// a figure is missing).
std::string FiguresSection(const std::vector<Figure>& figures,
                           const std::vector<std::string>& notes);

// "12.3 s", or "not reached".
std::string SecondsOrNotReached(const std::optional<double>& seconds);

// An accuracy as a percentage: 0.97 -> "97%", 0.975 -> "97.5%".
std::string Percent(double accuracy);

}  // namespace pstrain
