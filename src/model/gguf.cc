#include "model/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include "base/check.h"

namespace koi::model {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF I/O assumes a little-endian host");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxExtent = uint64_t{1} << 61;
constexpr std::string_view kAlignmentKey = "general.alignment";

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

bool is_float_type(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

// Bytes a scalar takes in the file; 0 for strings and arrays.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool: return 1;
    case GgufType::kUint16:
    case GgufType::kInt16: return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32: return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64: return 8;
    case GgufType::kString:
    case GgufType::kArray: return 0;
  }
  return 0;
}

// The fewest bytes a value of type t can take: bounds element counts before allocating.
size_t min_value_size(GgufType t) {
  if (t == GgufType::kString) return 8;
  if (t == GgufType::kArray) return 12;
  return scalar_size(t);
}

// The ggml name of a tensor type id, for messages about types Koi does not read.
std::string ggml_type_name(uint32_t id) {
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",  "Q4_3",  "Q5_0", "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",  "Q5_K",  "Q6_K", "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",   "IQ1_M", "BF16"};
  if (id < std::size(kNames)) return kNames[id];
  return "unknown";
}

// Bounds-checked little-endian reads over the file's bytes. Errors say what was being read
// and where; the caller adds the file name.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  Status need(uint64_t n, std::string_view what) const {
    if (n <= remaining()) return ok_status();
    return Status::corrupt("file ends at byte " + std::to_string(size_) + " inside " +
                           std::string(what) + " at byte " + std::to_string(pos_) +
                           "; the file is truncated");
  }

  template <typename T>
  Status read(T* out, std::string_view what) {
    KOI_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }

  Status read_string(std::string* out, std::string_view what) {
    uint64_t len = 0;
    KOI_RETURN_IF_ERROR(read(&len, what));
    if (len > remaining()) {
      return Status::corrupt(std::string(what) + " at byte " + std::to_string(pos_ - 8) +
                             " claims " + std::to_string(len) + " bytes but only " +
                             std::to_string(remaining()) + " remain; the file is truncated or corrupt");
    }
    out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return ok_status();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

template <typename T>
Status read_int(Reader& r, GgufValue* v, std::string_view what) {
  T x;
  KOI_RETURN_IF_ERROR(r.read(&x, what));
  v->i = static_cast<int64_t>(x);
  return ok_status();
}

// Reads a value of `type` (already read) into *v. `what` names the key for messages.
Status read_value(Reader& r, GgufType type, int depth, const std::string& what, GgufValue* v) {
  v->type = type;
  switch (type) {
    case GgufType::kUint8: return read_int<uint8_t>(r, v, what);
    case GgufType::kInt8: return read_int<int8_t>(r, v, what);
    case GgufType::kUint16: return read_int<uint16_t>(r, v, what);
    case GgufType::kInt16: return read_int<int16_t>(r, v, what);
    case GgufType::kUint32: return read_int<uint32_t>(r, v, what);
    case GgufType::kInt32: return read_int<int32_t>(r, v, what);
    case GgufType::kUint64: return read_int<uint64_t>(r, v, what);
    case GgufType::kInt64: return read_int<int64_t>(r, v, what);
    case GgufType::kBool: {
      KOI_RETURN_IF_ERROR(read_int<uint8_t>(r, v, what));
      if (v->i > 1) {
        return Status::corrupt(what + " is a bool stored as " + std::to_string(v->i) +
                               "; a GGUF bool must be 0 or 1");
      }
      return ok_status();
    }
    case GgufType::kFloat32: {
      float x;
      KOI_RETURN_IF_ERROR(r.read(&x, what));
      v->f = x;
      return ok_status();
    }
    case GgufType::kFloat64: return r.read(&v->f, what);
    case GgufType::kString: return r.read_string(&v->str, what);
    case GgufType::kArray: {
      uint32_t elem_type = 0;
      uint64_t count = 0;
      KOI_RETURN_IF_ERROR(r.read(&elem_type, what));
      KOI_RETURN_IF_ERROR(r.read(&count, what));
      if (!known_type(elem_type)) {
        return Status::corrupt(what + " is an array of unknown value type " + std::to_string(elem_type));
      }
      v->elem_type = static_cast<GgufType>(elem_type);
      if (v->elem_type == GgufType::kArray && depth + 1 >= kMaxArrayDepth) {
        return Status::corrupt(what + " nests arrays deeper than " + std::to_string(kMaxArrayDepth));
      }
      if (count > r.remaining() / min_value_size(v->elem_type)) {
        return Status::corrupt(what + " claims " + std::to_string(count) + " array elements but only " +
                               std::to_string(r.remaining()) + " bytes remain; the file is truncated or corrupt");
      }
      v->elems.resize(count);
      for (GgufValue& e : v->elems) KOI_RETURN_IF_ERROR(read_value(r, v->elem_type, depth + 1, what, &e));
      return ok_status();
    }
  }
  return Status::corrupt(what + " has unknown value type " + std::to_string(static_cast<uint32_t>(type)));
}

// Required alignment of a tensor's first byte: floats for F32 and Q8_K (an f32 scale per
// block), fp16 scales or halves for the rest.
uintptr_t element_alignment(DType t) { return t == DType::kF32 || t == DType::kQ8_K ? 4 : 2; }

std::string shape_string(const std::vector<uint64_t>& ne) {
  std::string s = "[";
  for (size_t d = 0; d < ne.size(); ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

// Reads one tensor info and checks everything that does not depend on the data section.
Status read_tensor_info(Reader& r, size_t index, GgufTensorInfo* t) {
  std::string what = "tensor info #" + std::to_string(index);
  KOI_RETURN_IF_ERROR(r.read_string(&t->name, "the name of " + what));
  std::string name = "tensor " + quote(t->name);
  uint32_t n_dims = 0;
  KOI_RETURN_IF_ERROR(r.read(&n_dims, what));
  if (n_dims < 1 || n_dims > kMaxDims) {
    return Status::corrupt(name + " has " + std::to_string(n_dims) + " dimensions; GGUF allows 1 to " +
                           std::to_string(kMaxDims));
  }
  std::vector<uint64_t> ne(n_dims);
  for (uint64_t& d : ne) KOI_RETURN_IF_ERROR(r.read(&d, what));
  uint32_t ggml_type = 0;
  KOI_RETURN_IF_ERROR(r.read(&ggml_type, what));
  KOI_RETURN_IF_ERROR(r.read(&t->offset, what));

  // Every product of dims (zeros counted as ones) below 2^61 keeps the element and byte
  // counts (at most 4 bytes a value) that TensorView computes in int64 range.
  uint64_t extent = 1;
  for (uint64_t d : ne) {
    if (__builtin_mul_overflow(extent, std::max<uint64_t>(d, 1), &extent) || extent >= kMaxExtent) {
      return Status::corrupt(name + " has shape " + shape_string(ne) + ", which is too large");
    }
  }
  std::optional<DType> type = dtype_from_ggml(ggml_type);
  if (!type) {
    return Status::unsupported(name + " has ggml type " + std::to_string(ggml_type) + " (" + ggml_type_name(ggml_type) +
                               "), which Koi does not read; convert the model to F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K");
  }
  if (ne[0] % static_cast<uint64_t>(dtype_block_size(*type)) != 0) {
    return Status::corrupt(name + " has rows of " + std::to_string(ne[0]) + " values, not a multiple of the " +
                           std::string(dtype_name(*type)) + " block size " + std::to_string(dtype_block_size(*type)));
  }
  t->view.type = *type;
  t->view.n_dims = static_cast<int>(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) t->view.ne[d] = static_cast<int64_t>(ne[d]);
  return ok_status();
}

}  // namespace

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "unknown";
}

GgufValue GgufValue::integer(GgufType type, int64_t v) {
  int64_t lo = 0, hi = 0;
  switch (type) {
    case GgufType::kUint8: lo = 0, hi = UINT8_MAX; break;
    case GgufType::kInt8: lo = INT8_MIN, hi = INT8_MAX; break;
    case GgufType::kUint16: lo = 0, hi = UINT16_MAX; break;
    case GgufType::kInt16: lo = INT16_MIN, hi = INT16_MAX; break;
    case GgufType::kUint32: lo = 0, hi = UINT32_MAX; break;
    case GgufType::kInt32: lo = INT32_MIN, hi = INT32_MAX; break;
    case GgufType::kInt64: lo = INT64_MIN, hi = INT64_MAX; break;
    default: KOI_CHECK(false && "GgufValue::integer takes a signed or unsigned type up to 32 bits, or int64");
  }
  KOI_CHECK(v >= lo && v <= hi);
  GgufValue out;
  out.type = type;
  out.i = v;
  return out;
}

GgufValue GgufValue::u64(uint64_t v) {
  GgufValue out;
  out.type = GgufType::kUint64;
  out.i = static_cast<int64_t>(v);
  return out;
}

GgufValue GgufValue::f32(float v) {
  GgufValue out;
  out.type = GgufType::kFloat32;
  out.f = v;
  return out;
}

GgufValue GgufValue::f64(double v) {
  GgufValue out;
  out.type = GgufType::kFloat64;
  out.f = v;
  return out;
}

GgufValue GgufValue::boolean(bool v) {
  GgufValue out;
  out.type = GgufType::kBool;
  out.i = v;
  return out;
}

GgufValue GgufValue::string(std::string v) {
  GgufValue out;
  out.type = GgufType::kString;
  out.str = std::move(v);
  return out;
}

GgufValue GgufValue::array(GgufType elem_type, std::vector<GgufValue> elems) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.elem_type = elem_type;
  out.elems = std::move(elems);
  return out;
}

bool gguf_is_integer(GgufType t) { return scalar_size(t) > 0 && t != GgufType::kBool && !is_float_type(t); }

bool GgufValue::is_integer() const { return gguf_is_integer(type); }

std::string GgufValue::type_name() const {
  if (type == GgufType::kArray) return "array of " + std::string(gguf_type_name(elem_type));
  return std::string(gguf_type_name(type));
}

// ---- GgufFile ----------------------------------------------------------------------------

Result<GgufFile> GgufFile::open(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  KOI_ASSIGN_OR_RETURN(GgufFile f, parse(mapped.data(), mapped.size(), path));
  f.file_ = std::move(mapped);
  return f;
}

Result<GgufFile> GgufFile::parse(const uint8_t* data, size_t size, std::string name) {
  GgufFile f;
  f.path_ = std::move(name);
  Status s = f.parse_bytes(data, size);
  if (!s.ok()) return s.with_prefix(f.path_);
  return f;
}

Status GgufFile::parse_bytes(const uint8_t* data, size_t size) {
  Reader r(data, size);
  uint32_t magic = 0;
  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
    return Status::invalid_argument("not a GGUF file: it does not start with the bytes 'GGUF'");
  }
  KOI_RETURN_IF_ERROR(r.read(&magic, "the header"));
  KOI_RETURN_IF_ERROR(r.read(&version_, "the header"));
  if (version_ == 1) return Status::unsupported("GGUF v1 is not supported; re-export with a current converter");
  if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3) {
    return Status::unsupported("big-endian GGUF is not supported; convert the file to little-endian");
  }
  if (version_ != 2 && version_ != 3) {
    return Status::unsupported("GGUF version " + std::to_string(version_) + " is not supported (Koi reads 2 and 3)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  KOI_RETURN_IF_ERROR(r.read(&n_tensors, "the header"));
  KOI_RETURN_IF_ERROR(r.read(&n_kv, "the header"));
  // Each entry takes at least 13 bytes, each tensor info at least 32.
  if (n_kv > r.remaining() / 13 || n_tensors > r.remaining() / 32 || n_kv * 13 + n_tensors * 32 > r.remaining()) {
    return Status::corrupt("header claims " + std::to_string(n_kv) + " metadata entries and " +
                           std::to_string(n_tensors) + " tensors, more than the file's " + std::to_string(size) +
                           " bytes can hold; the file is truncated or corrupt");
  }

  kv_.reserve(n_kv);
  for (uint64_t kv_idx = 0; kv_idx < n_kv; ++kv_idx) {
    std::string key;
    KOI_RETURN_IF_ERROR(r.read_string(&key, "metadata key #" + std::to_string(kv_idx)));
    std::string what = "metadata key " + quote(key);
    if (kv_index_.count(key)) return Status::corrupt(what + " appears twice");
    uint32_t type = 0;
    KOI_RETURN_IF_ERROR(r.read(&type, what));
    if (!known_type(type)) return Status::corrupt(what + " has unknown value type " + std::to_string(type));
    GgufValue v;
    KOI_RETURN_IF_ERROR(read_value(r, static_cast<GgufType>(type), 0, what, &v));
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = find(kAlignmentKey)) {
    if (a->type != GgufType::kUint32 || a->i == 0 || !std::has_single_bit(static_cast<uint64_t>(a->i))) {
      std::string got = a->type_name();
      if (a->is_integer()) got += " " + std::to_string(a->i);
      return Status::corrupt("general.alignment must be a uint32 power of two, got " + got);
    }
    alignment_ = static_cast<uint64_t>(a->i);
  }

  tensors_.resize(n_tensors);
  for (size_t tensor_idx = 0; tensor_idx < tensors_.size(); ++tensor_idx) {
    GgufTensorInfo& t = tensors_[tensor_idx];
    KOI_RETURN_IF_ERROR(read_tensor_info(r, tensor_idx, &t));
    if (!tensor_index_.emplace(t.name, tensor_idx).second) {
      return Status::corrupt("tensor " + quote(t.name) + " appears twice");
    }
  }

  uint64_t data_start = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_start > size) {
    return Status::corrupt("file ends at byte " + std::to_string(size) + ", before its tensor data at byte " +
                           std::to_string(data_start) + "; the file is truncated");
  }
  uint64_t data_size = data_start <= size ? size - data_start : 0;
  for (GgufTensorInfo& t : tensors_) {
    std::string name = "tensor " + quote(t.name);
    uint64_t bytes = static_cast<uint64_t>(t.view.num_bytes());
    if (t.offset % alignment_ != 0) {
      return Status::corrupt(name + " has data offset " + std::to_string(t.offset) +
                             ", not a multiple of the alignment " + std::to_string(alignment_));
    }
    if (t.offset > data_size || bytes > data_size - t.offset) {
      return Status::corrupt(name + " (" + std::to_string(bytes) + " bytes at data offset " +
                             std::to_string(t.offset) + ") extends past the end of the file (" +
                             std::to_string(data_size) + " bytes of tensor data); the file is truncated");
    }
    t.view.data = data + data_start + t.offset;
    if (reinterpret_cast<uintptr_t>(t.view.data) % element_alignment(t.view.type) != 0) {
      return Status::unsupported(name + " data is not aligned to " +
                                 std::to_string(element_alignment(t.view.type)) +
                                 " bytes; re-export the file with general.alignment 32");
    }
  }
  return ok_status();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  out.reserve(kv_.size());
  for (const auto& [key, value] : kv_) out.push_back(key);
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Status GgufFile::type_error(std::string_view key, const GgufValue& v, std::string_view expected) const {
  return Status::invalid_argument(path_ + ": metadata key " + quote(key) + " is " + v.type_name() +
                                  ", expected " + std::string(expected));
}

Result<const GgufValue*> GgufFile::get(std::string_view key, std::string_view expected,
                                       bool (*accept)(const GgufValue&)) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return Status::not_found(path_ + ": metadata key " + quote(key) + " is missing");
  if (!accept(*v)) return type_error(key, *v, expected);
  return v;
}

namespace {

bool is_number(GgufType t) { return gguf_is_integer(t) || is_float_type(t); }

// A value as int64; false when a uint64 does not fit.
bool fits_int64(const GgufValue& v) { return v.type != GgufType::kUint64 || v.i >= 0; }

double as_double(const GgufValue& v) {
  if (is_float_type(v.type)) return v.f;
  if (v.type == GgufType::kUint64) return static_cast<double>(static_cast<uint64_t>(v.i));
  return static_cast<double>(v.i);
}

}  // namespace

Result<std::string> GgufFile::get_string(std::string_view key) const {
  KOI_ASSIGN_OR_RETURN(const GgufValue* v,
                       get(key, "string", [](const GgufValue& x) { return x.type == GgufType::kString; }));
  return v->str;
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  KOI_ASSIGN_OR_RETURN(const GgufValue* v, get(key, "an integer", [](const GgufValue& x) { return x.is_integer(); }));
  if (!fits_int64(*v)) {
    return Status::invalid_argument(path_ + ": metadata key " + quote(key) + " holds " +
                                    std::to_string(static_cast<uint64_t>(v->i)) + ", which does not fit in int64");
  }
  return v->i;
}

Result<double> GgufFile::get_float(std::string_view key) const {
  KOI_ASSIGN_OR_RETURN(const GgufValue* v,
                       get(key, "a number", [](const GgufValue& x) { return is_number(x.type); }));
  return as_double(*v);
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  KOI_ASSIGN_OR_RETURN(const GgufValue* v,
                       get(key, "bool", [](const GgufValue& x) { return x.type == GgufType::kBool; }));
  return v->i != 0;
}

Result<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  KOI_ASSIGN_OR_RETURN(const GgufValue* v, get(key, "array of string", [](const GgufValue& x) {
                         return x.type == GgufType::kArray && x.elem_type == GgufType::kString;
                       }));
  std::vector<std::string> out;
  out.reserve(v->elems.size());
  for (const GgufValue& e : v->elems) out.push_back(e.str);
  return out;
}

Result<std::vector<float>> GgufFile::get_float_array(std::string_view key) const {
  KOI_ASSIGN_OR_RETURN(const GgufValue* v, get(key, "array of numbers", [](const GgufValue& x) {
                         return x.type == GgufType::kArray && is_number(x.elem_type);
                       }));
  std::vector<float> out;
  out.reserve(v->elems.size());
  for (const GgufValue& e : v->elems) out.push_back(static_cast<float>(as_double(e)));
  return out;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  KOI_ASSIGN_OR_RETURN(const GgufValue* v, get(key, "array of integers", [](const GgufValue& x) {
                         return x.type == GgufType::kArray && gguf_is_integer(x.elem_type);
                       }));
  std::vector<int64_t> out;
  out.reserve(v->elems.size());
  for (const GgufValue& e : v->elems) {
    if (!fits_int64(e)) {
      return Status::invalid_argument(path_ + ": metadata key " + quote(key) + " holds " +
                                      std::to_string(static_cast<uint64_t>(e.i)) + ", which does not fit in int64");
    }
    out.push_back(e.i);
  }
  return out;
}

// ---- GgufWriter --------------------------------------------------------------------------

void GgufWriter::set_value(std::string key, GgufValue v) {
  for (auto& [k, old] : kv_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void GgufWriter::set_string(std::string key, std::string v) { set_value(std::move(key), GgufValue::string(std::move(v))); }
void GgufWriter::set_u32(std::string key, uint32_t v) { set_value(std::move(key), GgufValue::integer(GgufType::kUint32, v)); }
void GgufWriter::set_i32(std::string key, int32_t v) { set_value(std::move(key), GgufValue::integer(GgufType::kInt32, v)); }
void GgufWriter::set_u64(std::string key, uint64_t v) { set_value(std::move(key), GgufValue::u64(v)); }
void GgufWriter::set_f32(std::string key, float v) { set_value(std::move(key), GgufValue::f32(v)); }
void GgufWriter::set_bool(std::string key, bool v) { set_value(std::move(key), GgufValue::boolean(v)); }

void GgufWriter::set_string_array(std::string key, std::vector<std::string> v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (std::string& s : v) elems.push_back(GgufValue::string(std::move(s)));
  set_value(std::move(key), GgufValue::array(GgufType::kString, std::move(elems)));
}

void GgufWriter::set_f32_array(std::string key, std::vector<float> v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (float x : v) elems.push_back(GgufValue::f32(x));
  set_value(std::move(key), GgufValue::array(GgufType::kFloat32, std::move(elems)));
}

void GgufWriter::set_i32_array(std::string key, std::vector<int32_t> v) {
  std::vector<GgufValue> elems;
  elems.reserve(v.size());
  for (int32_t x : v) elems.push_back(GgufValue::integer(GgufType::kInt32, x));
  set_value(std::move(key), GgufValue::array(GgufType::kInt32, std::move(elems)));
}

void GgufWriter::set_alignment(uint64_t alignment) {
  KOI_CHECK(alignment > 0 && alignment <= UINT32_MAX && std::has_single_bit(alignment));
  set_u32(std::string(kAlignmentKey), static_cast<uint32_t>(alignment));
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne, const void* data) {
  tensors_.push_back({std::move(name), type, std::move(ne), data, {}});
}

void GgufWriter::add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  tensors_.push_back({std::move(name), type, std::move(ne), nullptr, std::move(data)});
}

namespace {

// Bytes of a tensor of `type` with dims `ne`; an error message when the shape is invalid.
Result<uint64_t> tensor_bytes(const std::string& name, DType type, const std::vector<int64_t>& ne) {
  std::string what = "tensor " + quote(name);
  if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims)) {
    return Status::invalid_argument(what + " has " + std::to_string(ne.size()) + " dimensions; GGUF allows 1 to 4");
  }
  uint64_t extent = 1, rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 0) return Status::invalid_argument(what + " has a negative dimension");
    if (__builtin_mul_overflow(extent, std::max<int64_t>(ne[d], 1), &extent) || extent >= kMaxExtent) {
      return Status::invalid_argument(what + " is too large");
    }
    if (d > 0) rows *= ne[d];
  }
  if (ne[0] % dtype_block_size(type) != 0) {
    return Status::invalid_argument(what + " has rows of " + std::to_string(ne[0]) + " values, not a multiple of the " +
                                    std::string(dtype_name(type)) + " block size " +
                                    std::to_string(dtype_block_size(type)));
  }
  return static_cast<uint64_t>(dtype_row_bytes(type, ne[0])) * rows;
}

Status check_value(const std::string& key, const GgufValue& v) {
  if (v.type != GgufType::kArray) return ok_status();
  for (size_t idx = 0; idx < v.elems.size(); ++idx) {
    const GgufValue& e = v.elems[idx];
    if (e.type != v.elem_type) {
      return Status::invalid_argument("metadata key " + quote(key) + ": element " + std::to_string(idx) + " is " +
                                      e.type_name() + " in an array of " + std::string(gguf_type_name(v.elem_type)));
    }
    KOI_RETURN_IF_ERROR(check_value(key, e));
  }
  return ok_status();
}

class Emitter {
 public:
  explicit Emitter(AtomicFileWriter& out) : out_(out) {}

  template <typename T>
  Status put(T x) {
    return out_.append(&x, sizeof x);
  }
  Status put_string(std::string_view s) {
    KOI_RETURN_IF_ERROR(put<uint64_t>(s.size()));
    return out_.append(s);
  }
  Status put_payload(const GgufValue& v) {
    switch (v.type) {
      case GgufType::kUint8: return put(static_cast<uint8_t>(v.i));
      case GgufType::kInt8: return put(static_cast<int8_t>(v.i));
      case GgufType::kUint16: return put(static_cast<uint16_t>(v.i));
      case GgufType::kInt16: return put(static_cast<int16_t>(v.i));
      case GgufType::kUint32: return put(static_cast<uint32_t>(v.i));
      case GgufType::kInt32: return put(static_cast<int32_t>(v.i));
      case GgufType::kUint64: return put(static_cast<uint64_t>(v.i));
      case GgufType::kInt64: return put(v.i);
      case GgufType::kBool: return put(static_cast<uint8_t>(v.i != 0));
      case GgufType::kFloat32: return put(static_cast<float>(v.f));
      case GgufType::kFloat64: return put(v.f);
      case GgufType::kString: return put_string(v.str);
      case GgufType::kArray:
        KOI_RETURN_IF_ERROR(put(static_cast<uint32_t>(v.elem_type)));
        KOI_RETURN_IF_ERROR(put<uint64_t>(v.elems.size()));
        for (const GgufValue& e : v.elems) KOI_RETURN_IF_ERROR(put_payload(e));
        return ok_status();
    }
    return ok_status();
  }
  Status pad_to(uint64_t alignment) {
    return out_.append_zeros((alignment - out_.size() % alignment) % alignment);
  }

 private:
  AtomicFileWriter& out_;
};

uint64_t align_up(uint64_t x, uint64_t alignment) { return (x + alignment - 1) / alignment * alignment; }

}  // namespace

Status GgufWriter::validate() const {
  for (const auto& [key, v] : kv_) KOI_RETURN_IF_ERROR(check_value(key, v));
  for (const auto& [key, v] : kv_) {
    if (key == kAlignmentKey && (v.type != GgufType::kUint32 || v.i == 0 || !std::has_single_bit(static_cast<uint64_t>(v.i)))) {
      return Status::invalid_argument("general.alignment must be a uint32 power of two; use set_alignment()");
    }
  }
  std::set<std::string_view> names;
  for (const PendingTensor& t : tensors_) {
    if (!names.insert(t.name).second) return Status::invalid_argument("tensor " + quote(t.name) + " is added twice");
    KOI_ASSIGN_OR_RETURN(uint64_t bytes, tensor_bytes(t.name, t.type, t.ne));
    if (t.data == nullptr && t.owned.size() != bytes) {
      return Status::invalid_argument("tensor " + quote(t.name) + " has " + std::to_string(t.owned.size()) +
                                      " bytes of data; its shape and type need " + std::to_string(bytes));
    }
  }
  return ok_status();
}

Status GgufWriter::write(const std::string& path) const {
  Status valid = validate();
  if (!valid.ok()) return valid.with_prefix(path);
  uint64_t alignment = kDefaultAlignment;
  for (const auto& [key, v] : kv_) {
    if (key == kAlignmentKey) alignment = static_cast<uint64_t>(v.i);
  }

  KOI_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::create(path));
  Emitter e(out);
  KOI_RETURN_IF_ERROR(e.put(kMagic));
  KOI_RETURN_IF_ERROR(e.put<uint32_t>(3));
  KOI_RETURN_IF_ERROR(e.put<uint64_t>(tensors_.size()));
  KOI_RETURN_IF_ERROR(e.put<uint64_t>(kv_.size()));
  for (const auto& [key, v] : kv_) {
    KOI_RETURN_IF_ERROR(e.put_string(key));
    KOI_RETURN_IF_ERROR(e.put(static_cast<uint32_t>(v.type)));
    KOI_RETURN_IF_ERROR(e.put_payload(v));
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    KOI_RETURN_IF_ERROR(e.put_string(t.name));
    KOI_RETURN_IF_ERROR(e.put<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) KOI_RETURN_IF_ERROR(e.put<uint64_t>(d));
    KOI_RETURN_IF_ERROR(e.put(static_cast<uint32_t>(t.type)));
    KOI_RETURN_IF_ERROR(e.put(offset));
    offset = align_up(offset + *tensor_bytes(t.name, t.type, t.ne), alignment);
  }
  KOI_RETURN_IF_ERROR(e.pad_to(alignment));
  for (const PendingTensor& t : tensors_) {
    const void* bytes = t.data != nullptr ? t.data : t.owned.data();
    KOI_RETURN_IF_ERROR(out.append(bytes, *tensor_bytes(t.name, t.type, t.ne)));
    KOI_RETURN_IF_ERROR(e.pad_to(alignment));
  }
  return out.commit();
}

}  // namespace koi::model
