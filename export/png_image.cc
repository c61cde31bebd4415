#include "export/png_image.h"

#include <png.h>
#include <sys/stat.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace pstrain {
namespace {

constexpr png_uint_32 kMaxSide = 4096;

// png_image must be freed on every path once begun.
class PngImage {
 public:
  PngImage() {
    std::memset(&image_, 0, sizeof(image_));
    image_.version = PNG_IMAGE_VERSION;
  }
  ~PngImage() { png_image_free(&image_); }
  png_image* get() { return &image_; }
  std::string error() const { return image_.message; }

 private:
  png_image image_;
};

}  // namespace

absl::StatusOr<GrayImage> ReadPng(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  PngImage png;
  if (!png_image_begin_read_from_file(png.get(), path.c_str())) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a PNG image (", png.error(), ")"));
  }
  if (png.get()->width > kMaxSide || png.get()->height > kMaxSide) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", png.get()->width, " x ",
                                                   png.get()->height, " pixels, over ", kMaxSide,
                                                   " x ", kMaxSide));
  }
  png.get()->format = PNG_FORMAT_GRAY;
  GrayImage out;
  out.width = static_cast<int>(png.get()->width);
  out.height = static_cast<int>(png.get()->height);
  out.pixels.resize(PNG_IMAGE_SIZE(*png.get()));
  png_color black{0, 0, 0};
  if (!png_image_finish_read(png.get(), &black, out.pixels.data(), 0, nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": damaged PNG (", png.error(), ")"));
  }
  return out;
}

absl::Status WritePng(const std::string& path, const GrayImage& image) {
  PngImage png;
  png.get()->width = static_cast<png_uint_32>(image.width);
  png.get()->height = static_cast<png_uint_32>(image.height);
  png.get()->format = PNG_FORMAT_GRAY;
  if (!png_image_write_to_file(png.get(), path.c_str(), 0, image.pixels.data(), 0, nullptr)) {
    return absl::InternalError(absl::StrCat(path, ": cannot write the PNG (", png.error(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace pstrain
