// libFuzzer target: SafetensorsFile::parse on arbitrary bytes returns a file or a Status; it
// never crashes, never reads outside the input (AddressSanitizer) and has no undefined
// behaviour (UBSan). Every tensor of a parsed file is read back.
//
// With KOI_FUZZ_SEED_DIR set, the target first writes valid files there as a seed corpus
// (scripts/run-fuzzers does this).
#include <cstdlib>
#include <vector>

#include "base/check.h"
#include "base/file.h"
#include "model/safetensors.h"

namespace {

volatile unsigned g_sink;  // keeps the reads of tensor bytes

using koi::DType;
using koi::model::SafetensorsFile;

void write_seeds(const std::string& dir) {
  std::vector<uint8_t> bytes(1024);
  for (size_t idx = 0; idx < bytes.size(); ++idx) bytes[idx] = static_cast<uint8_t>(idx * 7);
  KOI_CHECK(koi::model::write_safetensors(koi::path_join(dir, "model.safetensors"),
                                          {{"model.embed_tokens.weight", DType::kF32, {3, 8}, bytes.data()},
                                           {"model.norm.weight", DType::kF16, {8}, bytes.data()},
                                           {"lm_head.weight", DType::kBF16, {2, 1, 1, 3}, bytes.data()},
                                           {"scale", DType::kF32, {}, bytes.data()}},
                                          {{"format", "pt"}})
                .ok());
  KOI_CHECK(koi::model::write_safetensors(koi::path_join(dir, "empty.safetensors"), {}).ok());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KOI_FUZZ_SEED_DIR")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = SafetensorsFile::parse(data, size, "fuzz.safetensors");
  if (!f.ok()) return 0;
  unsigned sum = 0;
  for (const auto& t : f->tensors()) {
    const uint8_t* p = static_cast<const uint8_t*>(t.view.data);
    for (int64_t idx = 0; idx < t.view.num_bytes(); ++idx) sum += p[idx];
    KOI_CHECK(f->find(t.name) != nullptr);
  }
  g_sink = sum;
  return 0;
}
