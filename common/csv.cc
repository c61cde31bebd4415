#include "common/csv.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace pstrain {

absl::StatusOr<std::unique_ptr<CsvWriter>> CsvWriter::Open(const std::string& path,
                                                           const std::vector<std::string>& columns,
                                                           bool append) {
  const std::string header = absl::StrJoin(columns, ",");
  if (append) {
    std::ifstream in(path);
    std::string first;
    if (std::getline(in, first) && first != header) {
      // link() refuses a name that exists: no earlier .old is overwritten.
      std::string old = path + ".old";
      for (int k = 2; link(path.c_str(), old.c_str()) != 0; ++k) {
        if (errno != EEXIST) {
          return absl::InternalError(
              absl::StrCat(path, ": cannot move aside to ", old, ": ", std::strerror(errno)));
        }
        old = absl::StrCat(path, ".old.", k);
      }
      if (unlink(path.c_str()) != 0) {
        return absl::InternalError(absl::StrCat(path, ": cannot remove after moving it to ", old,
                                                ": ", std::strerror(errno)));
      }
      LOG(WARNING) << path << " has other columns (another version wrote it): moved to " << old;
    }
  }
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (f == nullptr) {
    return absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  std::unique_ptr<CsvWriter> w(new CsvWriter(path, f, columns.size()));
  if (append && std::fseek(f, 0, SEEK_END) == 0 && std::ftell(f) > 0) return w;  // has its header
  RETURN_IF_ERROR(w->Row(columns));
  RETURN_IF_ERROR(w->Flush());
  return w;
}

CsvWriter::~CsvWriter() { std::fclose(file_); }

absl::Status CsvWriter::Row(const std::vector<std::string>& values) {
  CHECK_EQ(values.size(), columns_) << path_;
  const std::string line = absl::StrCat(absl::StrJoin(values, ","), "\n");
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) {
    return absl::InternalError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status CsvWriter::Flush() {
  if (std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat(path_, ": flush failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

int CsvTable::Column(absl::string_view name) const {
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] == name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<CsvTable> ReadCsv(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  CsvTable table;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++line_no;
    std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (line_no == 1) {
      table.columns = std::move(cells);
      continue;
    }
    if (cells.size() != table.columns.size()) {
      return absl::DataLossError(absl::StrCat(path, ":", line_no, ": ", cells.size(),
                                              " cells for ", table.columns.size(), " columns"));
    }
    table.rows.push_back(std::move(cells));
  }
  if (line_no == 0) return absl::DataLossError(absl::StrCat(path, ": empty, no header"));
  return table;
}

std::string CsvNumber(double value) { return absl::StrFormat("%.6g", value); }

}  // namespace pstrain
