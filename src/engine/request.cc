#include "engine/request.h"

namespace koi::engine {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: return "";
  }
  return "";
}

}  // namespace koi::engine
