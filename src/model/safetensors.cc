#include "model/safetensors.h"

#include <algorithm>
#include <bit>
#include <boost/json.hpp>
#include <cstring>
#include <new>
#include <set>

namespace koi::model {
namespace {

namespace json = boost::json;

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr uint64_t kMaxExtent = uint64_t{1} << 61;
constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr std::string_view kSingleFile = "model.safetensors";

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    default: return nullptr;
  }
}

// Parses JSON text; errors say how far the parser got. Boost.JSON reports errors through
// error_code; only allocation failure throws.
Result<json::value> parse_json(std::string_view text, std::string_view what) {
  try {
    json::stream_parser p;
    json::error_code ec;
    size_t consumed = p.write(text.data(), text.size(), ec);
    if (!ec) p.finish(ec);
    if (ec) {
      return Status::corrupt(std::string(what) + " is not valid JSON: " + ec.message() + " near byte " +
                             std::to_string(consumed));
    }
    return p.release();
  } catch (const std::bad_alloc&) {
    return Status::resource_exhausted(std::string(what) + " is too large to parse");
  }
}

// A non-negative JSON integer.
bool to_u64(const json::value& v, uint64_t* out) {
  if (v.is_uint64()) {
    *out = v.get_uint64();
    return true;
  }
  if (v.is_int64() && v.get_int64() >= 0) {
    *out = static_cast<uint64_t>(v.get_int64());
    return true;
  }
  return false;
}

struct Span {
  uint64_t begin, end;
  size_t tensor_idx;
};

}  // namespace

// ---- SafetensorsFile ---------------------------------------------------------------------

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::open(path));
  KOI_ASSIGN_OR_RETURN(SafetensorsFile f, parse(mapped.data(), mapped.size(), path));
  f.file_ = std::move(mapped);
  return f;
}

Result<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, size_t size, std::string name) {
  SafetensorsFile f;
  f.path_ = std::move(name);
  Status s = f.parse_bytes(data, size);
  if (!s.ok()) return s.with_prefix(f.path_);
  return f;
}

Status SafetensorsFile::parse_bytes(const uint8_t* data, size_t size) {
  uint64_t header_len = 0;
  if (size < sizeof header_len) {
    return Status::corrupt("file is " + std::to_string(size) +
                           " bytes, too short for the 8-byte header length; the file is truncated");
  }
  std::memcpy(&header_len, data, sizeof header_len);
  if (header_len > kMaxHeaderBytes) {
    return Status::corrupt("header length " + std::to_string(header_len) +
                           " is over the 100 MB limit; the file is corrupt or not safetensors");
  }
  if (header_len > size - 8) {
    return Status::corrupt("header length " + std::to_string(header_len) + " runs past the end of the file (" +
                           std::to_string(size) + " bytes); the file is truncated");
  }
  KOI_ASSIGN_OR_RETURN(json::value root,
                       parse_json({reinterpret_cast<const char*>(data + 8), header_len}, "header"));
  const json::object* entries = root.if_object();
  if (entries == nullptr) return Status::corrupt("header is not a JSON object");
  const uint8_t* buffer = data + 8 + header_len;
  uint64_t buffer_size = size - 8 - header_len;

  std::vector<Span> spans;
  for (const auto& [key, value] : *entries) {
    std::string name(key);
    if (name == kMetadataKey) {
      const json::object* meta = value.if_object();
      if (meta == nullptr) return Status::corrupt("__metadata__ is not an object of strings");
      for (const auto& [mk, mv] : *meta) {
        if (!mv.is_string()) return Status::corrupt("__metadata__ value " + quote(mk) + " is not a string");
        metadata_.emplace(std::string(mk), std::string(mv.get_string()));
      }
      continue;
    }
    std::string what = "tensor " + quote(name);
    const json::object* entry = value.if_object();
    const json::value* dtype = entry ? entry->if_contains("dtype") : nullptr;
    const json::value* shape = entry ? entry->if_contains("shape") : nullptr;
    const json::value* offsets = entry ? entry->if_contains("data_offsets") : nullptr;
    if (dtype == nullptr || !dtype->is_string() || shape == nullptr || !shape->is_array() || offsets == nullptr ||
        !offsets->is_array()) {
      return Status::corrupt(what + " needs a string \"dtype\", an array \"shape\" and an array \"data_offsets\"");
    }
    std::optional<DType> type = dtype_from_safetensors(dtype->get_string());
    if (!type) {
      return Status::unsupported(what + " has dtype " + quote(dtype->get_string()) +
                                 ", which Koi does not read; it reads F32, F16 and BF16");
    }
    const json::array& dims = shape->get_array();
    if (dims.size() > static_cast<size_t>(kMaxDims)) {
      return Status::unsupported(what + " has " + std::to_string(dims.size()) + " dimensions; Koi handles at most " +
                                 std::to_string(kMaxDims));
    }
    SafetensorsTensor t{name, {}};
    t.view.type = *type;
    t.view.n_dims = std::max<int>(1, static_cast<int>(dims.size()));
    // Every product of dims (zeros counted as ones) below 2^61 keeps the element and byte
    // counts that TensorView computes in int64 range.
    uint64_t bytes = static_cast<uint64_t>(dtype_block_bytes(*type)), extent = 1;
    for (size_t d = 0; d < dims.size(); ++d) {
      uint64_t n = 0;
      if (!to_u64(dims[d], &n)) return Status::corrupt(what + " has a shape entry that is not a non-negative integer");
      if (__builtin_mul_overflow(extent, std::max<uint64_t>(n, 1), &extent) || extent >= kMaxExtent) {
        return Status::corrupt(what + " has a shape that is too large");
      }
      bytes *= n;
      t.view.ne[dims.size() - 1 - d] = static_cast<int64_t>(n);
    }
    uint64_t begin = 0, end = 0;
    const json::array& offs = offsets->get_array();
    if (offs.size() != 2 || !to_u64(offs[0], &begin) || !to_u64(offs[1], &end) || begin > end) {
      return Status::corrupt(what + " needs data_offsets [begin, end] with 0 <= begin <= end");
    }
    if (end > buffer_size) {
      return Status::corrupt(what + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                             "] run past the end of the " + std::to_string(buffer_size) +
                             " data bytes; the file is truncated");
    }
    if (end - begin != bytes) {
      return Status::corrupt(what + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                             "] hold " + std::to_string(end - begin) + " bytes; its dtype and shape need " +
                             std::to_string(bytes));
    }
    t.view.data = buffer + begin;
    if (reinterpret_cast<uintptr_t>(t.view.data) % static_cast<uintptr_t>(dtype_block_bytes(*type)) != 0) {
      return Status::unsupported(what + " data is not aligned to its " + std::to_string(dtype_block_bytes(*type)) +
                                 "-byte elements; re-save the file with a current safetensors library");
    }
    index_.emplace(name, tensors_.size());
    if (end > begin) spans.push_back({begin, end, tensors_.size()});  // empty tensors overlap nothing
    tensors_.push_back(std::move(t));
  }

  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t idx = 1; idx < spans.size(); ++idx) {
    if (spans[idx].begin < spans[idx - 1].end) {
      return Status::corrupt("tensors " + quote(tensors_[spans[idx - 1].tensor_idx].name) + " and " +
                             quote(tensors_[spans[idx].tensor_idx].name) + " overlap in the data buffer");
    }
  }
  return ok_status();
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- SafetensorsModel --------------------------------------------------------------------

Result<SafetensorsModel> SafetensorsModel::open_dir(const std::string& dir) {
  SafetensorsModel m;
  std::string index_path = path_join(dir, kIndexFile);
  if (!file_exists(index_path)) {
    std::string single = path_join(dir, kSingleFile);
    if (!file_exists(single)) {
      return Status::not_found(dir + ": has neither " + std::string(kSingleFile) + " nor " + std::string(kIndexFile) +
                               "; point Koi at a Hugging Face model directory");
    }
    KOI_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(single));
    for (size_t tensor_idx = 0; tensor_idx < f.tensors().size(); ++tensor_idx) {
      m.index_.emplace(f.tensors()[tensor_idx].name, std::make_pair(size_t{0}, tensor_idx));
    }
    m.shards_.push_back(std::move(f));
    return m;
  }

  KOI_ASSIGN_OR_RETURN(std::string text, read_file(index_path));
  Result<json::value> root = parse_json(text, "the index");
  if (!root.ok()) return root.status().with_prefix(index_path);
  const json::object* obj = root->if_object();
  const json::value* weight_map = obj ? obj->if_contains("weight_map") : nullptr;
  if (weight_map == nullptr || !weight_map->is_object()) {
    return Status::corrupt(index_path + ": has no \"weight_map\" object");
  }
  std::map<std::string, size_t> shard_idx;
  for (const auto& [tensor, shard] : weight_map->get_object()) {
    std::string_view file = shard.is_string() ? std::string_view(shard.get_string()) : std::string_view();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string_view::npos) {
      return Status::corrupt(index_path + ": weight_map entry " + quote(tensor) +
                             " does not name a shard file in the model directory");
    }
    auto [it, inserted] = shard_idx.emplace(std::string(file), m.shards_.size());
    if (inserted) {
      KOI_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path_join(dir, file)));
      m.shards_.push_back(std::move(f));
    }
    const SafetensorsFile& f = m.shards_[it->second];
    const SafetensorsTensor* t = f.find(tensor);
    if (t == nullptr) {
      return Status::not_found(f.path() + ": has no tensor " + quote(tensor) + ", which " +
                               std::string(kIndexFile) + " places there; the download is incomplete or mixed");
    }
    m.index_.emplace(std::string(tensor), std::make_pair(it->second, static_cast<size_t>(t - f.tensors().data())));
  }
  return m;
}

const SafetensorsTensor* SafetensorsModel::find(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  return &shards_[it->second.first].tensors()[it->second.second];
}

std::vector<std::string> SafetensorsModel::tensor_names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, where] : index_) out.push_back(name);
  return out;
}

std::vector<std::span<const uint8_t>> SafetensorsModel::mapped_bytes() const {
  std::vector<std::span<const uint8_t>> out;
  for (const SafetensorsFile& shard : shards_) out.push_back(shard.mapped_bytes());
  return out;
}

// ---- write_safetensors -------------------------------------------------------------------

Status write_safetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> bytes(tensors.size());
  std::set<std::string_view> names;
  for (size_t idx = 0; idx < tensors.size(); ++idx) {
    const SafetensorsWriteTensor& t = tensors[idx];
    std::string what = path + ": tensor " + quote(t.name);
    if (safetensors_dtype_name(t.type) == nullptr) {
      return Status::unsupported(what + " is " + std::string(dtype_name(t.type)) +
                                 "; safetensors files from Koi hold f32, f16 or bf16");
    }
    if (t.name == kMetadataKey || !names.insert(t.name).second) {
      return Status::invalid_argument(what + " is added twice or uses the reserved name __metadata__");
    }
    bytes[idx] = static_cast<uint64_t>(dtype_block_bytes(t.type));
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(bytes[idx], static_cast<uint64_t>(d), &bytes[idx])) {
        return Status::invalid_argument(what + " has a negative or too large shape");
      }
    }
  }
  // Largest elements first, then by name (as the safetensors library does): every tensor
  // starts at a multiple of its element size.
  std::vector<size_t> order(tensors.size());
  for (size_t idx = 0; idx < order.size(); ++idx) order[idx] = idx;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    int64_t sa = dtype_block_bytes(tensors[a].type), sb = dtype_block_bytes(tensors[b].type);
    return sa != sb ? sa > sb : tensors[a].name < tensors[b].name;
  });

  json::object header;
  if (!metadata.empty()) {
    json::object meta;
    for (const auto& [k, v] : metadata) meta[k] = v;
    header[kMetadataKey] = std::move(meta);
  }
  uint64_t offset = 0;
  for (size_t idx : order) {
    const SafetensorsWriteTensor& t = tensors[idx];
    json::object entry;
    entry["dtype"] = safetensors_dtype_name(t.type);
    entry["shape"] = json::array(t.shape.begin(), t.shape.end());
    entry["data_offsets"] = json::array{offset, offset + bytes[idx]};
    header[t.name] = std::move(entry);
    offset += bytes[idx];
  }
  std::string text = json::serialize(header);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned

  KOI_ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::create(path));
  uint64_t header_len = text.size();
  KOI_RETURN_IF_ERROR(out.append(&header_len, sizeof header_len));
  KOI_RETURN_IF_ERROR(out.append(text));
  for (size_t idx : order) KOI_RETURN_IF_ERROR(out.append(tensors[idx].data, bytes[idx]));
  return out.commit();
}

}  // namespace koi::model
