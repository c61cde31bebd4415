#pragma once

// CSV files for metrics: one header line, then rows of plain numbers and
// words (no quoting needed: values never hold commas). Rows are written
// whole and reach the file at each Flush (a step log: every row, see
// worker/metrics_recorder.cc) or when the stdio buffer fills, so a reader (a
// plot, `tail -f`) sees whole rows.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace pstrain {

class CsvWriter {
 public:
  // Creates (truncates) `path` and writes the header. With `append`, a
  // non-empty `path` is kept and rows are added after its own (a resumed
  // run), if its header is `columns`; one with another header (written by
  // another version) is moved to `path`.old (.old.2, ... if taken) and a
  // new file begun, so no file mixes two layouts. Errors name the path.
  static absl::StatusOr<std::unique_ptr<CsvWriter>> Open(const std::string& path,
                                                         const std::vector<std::string>& columns,
                                                         bool append = false);
  ~CsvWriter();

  // REQUIRES: values.size() == number of columns.
  absl::Status Row(const std::vector<std::string>& values);
  absl::Status Flush();

 private:
  CsvWriter(std::string path, std::FILE* file, size_t columns)
      : path_(std::move(path)), file_(file), columns_(columns) {}

  std::string path_;
  std::FILE* file_;
  size_t columns_;
};

// A CSV file read back: the header's column names and the rows' cells.
struct CsvTable {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;

  // Index of `name` in columns, or -1.
  int Column(absl::string_view name) const;
};

// Reads a CSV file written by CsvWriter. DataLoss naming the file and line
// for a row whose cell count differs from the header's.
absl::StatusOr<CsvTable> ReadCsv(const std::string& path);

// Formats a double compactly for a CSV cell ("0.1234", "1e-05").
std::string CsvNumber(double value);

}  // namespace pstrain
