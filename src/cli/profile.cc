#include "cli/profile.h"

#include <cstdio>

#include "base/file.h"

namespace koi::cli {

Result<ProfileFile> ProfileFile::open(const std::string& path) {
  ProfileFile p;
  if (path.empty()) return p;
  if (Status s = write_file_atomic(path, "{\"traceEvents\":[]}\n"); !s.ok()) {
    return Status::invalid_argument("--profile: " + s.message());
  }
  p.path_ = path;
  p.recorder_ = std::make_unique<trace::Recorder>();
  return p;
}

Status ProfileFile::finish() const {
  if (!recorder_) return ok_status();
  if (Status s = recorder_->write(path_); !s.ok()) return Status::internal("--profile: " + s.message());
  std::fprintf(stderr, "profile: %zu spans in %s (open it in ui.perfetto.dev)\n", recorder_->size(), path_.c_str());
  return ok_status();
}

}  // namespace koi::cli
