// GGUF v3: the llama.cpp model file (a header of typed metadata, a table of tensor infos,
// then the aligned tensor data). Spec: ggml docs/gguf.md.
//
// GgufFile reads one. open() memory-maps the file and owns the mapping; parse() reads bytes
// owned by the caller, which must outlive the GgufFile. Tensor views point into those
// bytes and stay valid when the GgufFile is moved. Every field is validated on parse
// (counts, lengths, types, shapes, offsets, alignment), so that a truncated or hostile
// file gives a Status whose message starts with the file name and never reads out of
// bounds. Immutable after parse; safe to read from many threads.
//
// GgufWriter collects metadata and tensors and writes the file atomically (temporary file,
// fsync, rename), streaming tensor data straight from the caller's buffers. Not
// thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/file.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace koi::model {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint8", ..., "float64".
std::string_view gguf_type_name(GgufType t);
// The eight integer types (not bool).
bool gguf_is_integer(GgufType t);

// One metadata value: a scalar of any GGUF type, a string, or an array whose elements all
// have elem_type (arrays of arrays are allowed). Build one with the named constructors,
// which check that the value fits its type.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  int64_t i = 0;       // integer types and bool; a kUint64 above INT64_MAX keeps its bits
  double f = 0;        // kFloat32 (held exactly) and kFloat64
  std::string str;     // kString
  GgufType elem_type = GgufType::kUint8;  // kArray
  std::vector<GgufValue> elems;           // kArray

  static GgufValue integer(GgufType type, int64_t v);  // kUint8 .. kInt64 except kUint64
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue f64(double v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue array(GgufType elem_type, std::vector<GgufValue> elems);

  bool is_integer() const;
  // "uint32", "string", "array of float32".
  std::string type_name() const;
  bool operator==(const GgufValue&) const = default;
};

struct GgufTensorInfo {
  std::string name;
  TensorView view;  // ne in ggml order; data points into the file's bytes
  uint64_t offset;  // relative to the data section
};

class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);
  static Result<GgufFile> parse(const uint8_t* data, size_t size, std::string name);

  // The path given to open(), or the name given to parse().
  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;
  // In file order.
  std::vector<std::string> keys() const;

  // Typed getters. A missing key is kNotFound, a value of another type kInvalidArgument;
  // both messages name the file and the key.
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;   // any integer type, not bool
  Result<double> get_float(std::string_view key) const;  // float32/64 or any integer type
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;  // of any numbers
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // The file's read-only shared mapping, which the tensors' bytes lie in (empty for parse()).
  std::span<const uint8_t> mapped_bytes() const { return {file_.data(), file_.size()}; }

 private:
  GgufFile() = default;
  Status parse_bytes(const uint8_t* data, size_t size);
  Result<const GgufValue*> get(std::string_view key, std::string_view expected,
                               bool (*accept)(const GgufValue&)) const;
  Status type_error(std::string_view key, const GgufValue& v, std::string_view expected) const;

  MappedFile file_;  // empty for parse()
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

class GgufWriter {
 public:
  // Setting a key twice replaces its value and keeps its first position.
  void set_string(std::string key, std::string v);
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_u64(std::string key, uint64_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_string_array(std::string key, std::vector<std::string> v);
  void set_f32_array(std::string key, std::vector<float> v);
  void set_i32_array(std::string key, std::vector<int32_t> v);
  void set_value(std::string key, GgufValue v);
  // Writes general.alignment (uint32, a power of two); without it the alignment is 32.
  void set_alignment(uint64_t alignment);

  // A tensor of `type` with dims `ne` in ggml order (innermost first), whose
  // dtype_row_bytes(type, ne[0]) * rows bytes are read from `data` during write(): the
  // buffer must stay valid until then.
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data);
  // The same, owning its bytes (converted data).
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data);

  // Validates everything (shapes, sizes, duplicate names, array element types), then
  // streams the file to "<path>.tmp.<pid>", fsyncs and renames it over `path`.
  Status write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    const void* data;
    std::vector<uint8_t> owned;
  };
  Status validate() const;

  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace koi::model
