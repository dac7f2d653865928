// --profile FILE, the one spelling in `koi train`, `koi serve` and `koi bench offline`: a
// Chrome trace (Perfetto JSON, base/trace.h) written when the command ends. open() writes an
// empty trace at once, so a path that cannot be written fails at start, not after the run.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "base/trace.h"

namespace koi::cli {

class ProfileFile {
 public:
  // Empty `path`: no profile (recorder() is null and finish() does nothing).
  static Result<ProfileFile> open(const std::string& path);

  trace::Recorder* recorder() const { return recorder_.get(); }
  // Writes the trace and says on stderr how many spans went where.
  Status finish() const;

 private:
  std::string path_;
  std::unique_ptr<trace::Recorder> recorder_;
};

}  // namespace koi::cli
