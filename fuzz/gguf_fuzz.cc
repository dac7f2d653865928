// libFuzzer target: GgufFile::parse on arbitrary bytes returns a file or a Status; it never
// crashes, never reads outside the input (AddressSanitizer) and has no undefined behaviour
// (UBSan). Everything a parsed file exposes is read back.
//
// With KOI_FUZZ_SEED_DIR set, the target first writes valid files there as a seed corpus
// (scripts/run-fuzzers does this).
#include <cstdlib>
#include <vector>

#include "base/check.h"
#include "base/file.h"
#include "model/gguf.h"

namespace {

volatile unsigned g_sink;  // keeps the reads of tensor bytes

using koi::DType;
using koi::model::GgufFile;
using koi::model::GgufType;
using koi::model::GgufValue;
using koi::model::GgufWriter;

void write_seeds(const std::string& dir) {
  std::vector<uint8_t> bytes(4096);
  for (size_t idx = 0; idx < bytes.size(); ++idx) bytes[idx] = static_cast<uint8_t>(idx * 7);

  GgufWriter model;
  model.set_string("general.architecture", "llama");
  model.set_u32("llama.block_count", 1);
  model.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  model.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "\xE2\x96\x81the"});
  model.set_f32_array("tokenizer.ggml.scores", {0, 0, -1.5f});
  model.set_i32_array("tokenizer.ggml.token_type", {2, 3, 1});
  model.add_tensor("token_embd.weight", DType::kF32, {8, 3}, bytes.data());
  model.add_tensor("blk.0.attn_q.weight", DType::kQ8_0, {32, 2}, bytes.data());
  model.add_tensor("blk.0.attn_k.weight", DType::kQ4_0, {64, 1}, bytes.data());
  model.add_tensor("blk.0.attn_norm.weight", DType::kF16, {8}, bytes.data());
  model.add_tensor("output.weight", DType::kBF16, {8, 1, 1, 3}, bytes.data());
  KOI_CHECK(model.write(koi::path_join(dir, "model.gguf")).ok());

  GgufWriter values;
  values.set_alignment(64);
  values.set_value("u8", GgufValue::integer(GgufType::kUint8, 200));
  values.set_value("i16", GgufValue::integer(GgufType::kInt16, -2));
  values.set_value("u64", GgufValue::u64(1ull << 40));
  values.set_value("i64", GgufValue::integer(GgufType::kInt64, -3));
  values.set_value("f64", GgufValue::f64(0.5));
  values.set_bool("bool", true);
  values.set_value("nested", GgufValue::array(GgufType::kArray, {GgufValue::array(GgufType::kInt8, {})}));
  values.add_tensor("t", DType::kF32, {4}, bytes.data());
  KOI_CHECK(values.write(koi::path_join(dir, "values.gguf")).ok());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KOI_FUZZ_SEED_DIR")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = GgufFile::parse(data, size, "fuzz.gguf");
  if (!f.ok()) return 0;
  for (const std::string& key : f->keys()) {
    (void)f->get_int(key);
    (void)f->get_float(key);
    (void)f->get_bool(key);
    (void)f->get_string(key);
    (void)f->get_string_array(key);
    (void)f->get_float_array(key);
    (void)f->get_int_array(key);
  }
  unsigned sum = 0;
  for (const auto& t : f->tensors()) {
    const uint8_t* p = static_cast<const uint8_t*>(t.view.data);
    for (int64_t idx = 0; idx < t.view.num_bytes(); ++idx) sum += p[idx];
    KOI_CHECK(f->find_tensor(t.name) == &t);
  }
  g_sink = sum;
  return 0;
}
