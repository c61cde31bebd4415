#include "common/logging.h"

#include <cstdio>
#include <iomanip>
#include <ostream>

#include "glog/logging.h"

namespace pstrain {
namespace {

void ShortPrefix(std::ostream& s, const google::LogMessageInfo& l, void*) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%c %02d:%02d:%02d.%03d ", l.severity[0], l.time.hour(),
                l.time.min(), l.time.sec(), l.time.usec() / 1000);
  s << buf << l.filename << ':' << l.line_number << ']';
}

}  // namespace

void InitLogging(const char* argv0) {
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  google::InitGoogleLogging(argv0, &ShortPrefix, nullptr);
  // Lines reach the launcher (a pipe) as they are written.
  std::setvbuf(stderr, nullptr, _IOLBF, 0);
}

}  // namespace pstrain
