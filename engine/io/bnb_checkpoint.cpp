// bitsandbytes checkpoint tensors; see bnb_checkpoint.h. The Python side this mirrors is
// bitsandbytes `functional.QuantState.as_dict` / `from_dict`, `nn.Linear4bit._save_to_state_dict`,
// `nn.Linear8bitLt._save_to_state_dict` / `_load_from_state_dict`, and transformers'
// `BitsAndBytesConfig.to_dict`.
#include "engine/io/bnb_checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "engine/text/json_depth.h"

namespace qtrain::engine::io {
namespace {

constexpr std::string_view kBlobInfix = ".quant_state.bitsandbytes__";
constexpr std::string_view kWeightSuffix = ".weight";

// bitsandbytes stores dtypes as str(torch.dtype) without "torch.".
const char* dtype_string(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      return nullptr;
  }
}

std::optional<at::ScalarType> dtype_from_string(std::string_view name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  return std::nullopt;
}

std::string blob_key(const std::string& weight_name, ops::QuantType type) {
  return weight_name + std::string(kBlobInfix) + std::string(ops::quant_type_name(type));
}

std::string sizes_str(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

// "<file>: 'key'" for messages about one tensor of the checkpoint.
std::string where_is(const HfFolder& folder, const std::string& key) {
  return folder.file(key).string() + ": '" + key + "'";
}

// A tensor of the checkpoint with the dtype and element count the layout requires.
at::Tensor checked_tensor(
    const HfFolder& folder, const std::string& key, at::ScalarType dtype, int64_t numel, const std::string& why) {
  TORCH_CHECK(folder.contains(key),
              folder.dir().string(),
              ": the bitsandbytes 4-bit weight has no tensor '",
              key,
              "' (",
              why,
              "); the checkpoint is incomplete, download or re-save it");
  const at::Tensor t = folder.tensor(key);
  TORCH_CHECK(t.scalar_type() == dtype && t.numel() == numel,
              where_is(folder, key),
              " is ",
              t.scalar_type(),
              " ",
              sizes_str(t.sizes()),
              " but must be ",
              dtype,
              " with ",
              numel,
              " elements (",
              why,
              "); the checkpoint is corrupt or was not written by bitsandbytes");
  return t.reshape({numel});
}

int64_t json_int(const nlohmann::json& v, const std::string& where, const char* field) {
  TORCH_CHECK(v.is_number_integer(), where, ": \"", field, "\" is ", v.dump(), " but must be an integer");
  return v.get<int64_t>();
}

struct BlobFields {
  ops::QuantType quant_type;
  int64_t blocksize;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  bool nested = false;
  double nested_offset = 0;
};

BlobFields parse_blob(const at::Tensor& blob, ops::QuantType key_type, const std::string& where) {
  TORCH_CHECK(blob.scalar_type() == at::kByte && blob.dim() == 1,
              where,
              " must be a 1-D uint8 tensor of JSON bytes, got ",
              blob.scalar_type(),
              " ",
              sizes_str(blob.sizes()),
              "; the checkpoint is corrupt");
  const at::Tensor bytes = blob.contiguous();
  const std::string_view text(reinterpret_cast<const char*>(bytes.const_data_ptr<uint8_t>()), bytes.numel());
  const auto problem = text::json_depth_problem(text);
  TORCH_CHECK(problem.empty(), where, ": ", problem, "; the quant_state blob is corrupt");
  nlohmann::json fields;
  try {
    fields = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    TORCH_CHECK(false, where, ": not valid JSON (", e.what(), "); the quant_state blob is corrupt");
  }
  TORCH_CHECK(fields.is_object(), where, ": expected a JSON object, got ", fields.dump());
  static const std::vector<std::string> kKnown = {
      "quant_type", "blocksize", "dtype", "shape", "nested_blocksize", "nested_dtype", "nested_offset"};
  for (const auto& [key, value] : fields.items()) {
    TORCH_CHECK(std::find(kKnown.begin(), kKnown.end(), key) != kKnown.end(),
                where,
                ": unknown field \"",
                key,
                "\"; bitsandbytes' QuantState has quant_type, blocksize, dtype, shape, nested_blocksize, "
                "nested_dtype, nested_offset (the checkpoint is from an incompatible writer)");
  }
  const auto field = [&](const char* key) -> const nlohmann::json& {
    const auto it = fields.find(key);
    TORCH_CHECK(
        it != fields.end(), where, ": no \"", key, "\" in ", fields.dump(), "; the quant_state blob is incomplete");
    return *it;
  };

  BlobFields out;
  const nlohmann::json& quant_type = field("quant_type");
  TORCH_CHECK(quant_type.is_string() && quant_type.get<std::string>() == ops::quant_type_name(key_type),
              where,
              ": quant_type is ",
              quant_type.dump(),
              " but the key says \"",
              ops::quant_type_name(key_type),
              "\"; the checkpoint is corrupt");
  out.quant_type = key_type;

  out.blocksize = json_int(field("blocksize"), where, "blocksize");
  TORCH_CHECK(out.blocksize >= 32 && out.blocksize <= 4096 && (out.blocksize & (out.blocksize - 1)) == 0,
              where,
              ": blocksize ",
              out.blocksize,
              " is not a bitsandbytes 4-bit blocksize (32, 64, 128, 256, 512, 1024, 2048, 4096)");

  const nlohmann::json& dtype = field("dtype");
  const auto parsed_dtype = dtype.is_string() ? dtype_from_string(dtype.get<std::string>()) : std::nullopt;
  TORCH_CHECK(parsed_dtype,
              where,
              ": dtype ",
              dtype.dump(),
              " is not supported; the original weight must be \"float32\", \"bfloat16\" or \"float16\"");
  out.dtype = *parsed_dtype;

  const nlohmann::json& shape = field("shape");
  TORCH_CHECK(shape.is_array() && !shape.empty(), where, ": shape ", shape.dump(), " must be a non-empty list");
  int64_t numel = 1;
  for (const nlohmann::json& dim : shape) {
    TORCH_CHECK(dim.is_number_unsigned() && dim.get<uint64_t>() > 0 && dim.get<uint64_t>() < (uint64_t{1} << 62) &&
                    !__builtin_mul_overflow(numel, dim.get<int64_t>(), &numel),
                where,
                ": shape ",
                shape.dump(),
                " must hold positive integers whose product fits in 64 bits");
    out.shape.push_back(dim.get<int64_t>());
  }

  const bool has_blocksize = fields.contains("nested_blocksize");
  const bool has_dtype = fields.contains("nested_dtype");
  const bool has_offset = fields.contains("nested_offset");
  TORCH_CHECK(has_blocksize == has_dtype && has_dtype == has_offset,
              where,
              ": nested_blocksize, nested_dtype and nested_offset must be all present (double quantization) or all "
              "absent, got ",
              fields.dump());
  out.nested = has_offset;
  if (out.nested) {
    const int64_t nested_blocksize = json_int(field("nested_blocksize"), where, "nested_blocksize");
    TORCH_CHECK(nested_blocksize == 256,
                where,
                ": nested_blocksize ",
                nested_blocksize,
                " is not supported; bitsandbytes double quantization uses 256");
    TORCH_CHECK(field("nested_dtype") == "float32",
                where,
                ": nested_dtype ",
                field("nested_dtype").dump(),
                " is not supported; bitsandbytes' nested absmax is \"float32\"");
    const nlohmann::json& offset = field("nested_offset");
    TORCH_CHECK(offset.is_number(), where, ": nested_offset ", offset.dump(), " must be a number");
    out.nested_offset = offset.get<double>();
  }
  return out;
}

}  // namespace

bool is_bnb_4bit(const HfFolder& folder, const std::string& weight_name) {
  return folder.contains(blob_key(weight_name, ops::QuantType::nf4)) ||
         folder.contains(blob_key(weight_name, ops::QuantType::fp4));
}

std::vector<std::string> bnb_4bit_weight_names(const HfFolder& folder) {
  std::vector<std::string> out;
  for (const std::string& name : folder.tensor_names()) {
    const size_t at = name.rfind(kBlobInfix);
    if (at == std::string::npos) continue;
    const std::string_view type = std::string_view(name).substr(at + kBlobInfix.size());
    if (type == "nf4" || type == "fp4") out.push_back(name.substr(0, at));
  }
  std::sort(out.begin(), out.end());
  return out;
}

ops::Packed4bit read_bnb_4bit(const HfFolder& folder, const std::string& weight_name) {
  const std::string nf4_key = blob_key(weight_name, ops::QuantType::nf4);
  const std::string fp4_key = blob_key(weight_name, ops::QuantType::fp4);
  const bool nf4 = folder.contains(nf4_key);
  const bool fp4 = folder.contains(fp4_key);
  if (!nf4 && !fp4) {
    // folder.file() names the folder when the weight itself is missing too.
    TORCH_CHECK(false,
                folder.file(weight_name).string(),
                ": '",
                weight_name,
                "' (",
                folder.dtype(weight_name),
                " ",
                sizes_str(folder.shape(weight_name)),
                ") has no quant_state ('",
                nf4_key,
                "' or '",
                fp4_key,
                "'), so it is "
                "not a bitsandbytes 4-bit weight; load it as a float weight, or quantize the checkpoint with "
                "bitsandbytes (BitsAndBytesConfig(load_in_4bit=True)) and save it again");
  }
  TORCH_CHECK(!(nf4 && fp4),
              folder.file(nf4_key).string(),
              ": '",
              weight_name,
              "' has two quant_state blobs (nf4 and fp4); keep the one that matches the packed codes");
  const ops::QuantType type = nf4 ? ops::QuantType::nf4 : ops::QuantType::fp4;
  const std::string& key = nf4 ? nf4_key : fp4_key;
  const BlobFields f = parse_blob(folder.tensor(key), type, where_is(folder, key));

  ops::Packed4bit q;
  q.quant_type = f.quant_type;
  q.blocksize = f.blocksize;
  q.dtype = f.dtype;
  q.shape = f.shape;
  const int64_t n = q.numel();
  const int64_t blocks = q.blocks();

  // Packed codes: bnb_4bit_quant_storage other than uint8 (bfloat16 for FSDP-QLoRA) holds the same
  // bytes in wider elements; a contiguous view reinterprets them without a copy.
  TORCH_CHECK(folder.contains(weight_name),
              folder.dir().string(),
              ": '",
              key,
              "' exists but its packed weight '",
              weight_name,
              "' does not; the checkpoint is incomplete");
  at::Tensor packed = folder.tensor(weight_name);
  if (packed.scalar_type() != at::kByte) {
    packed = packed.contiguous().reshape({-1}).view(at::kByte);
  }
  TORCH_CHECK(packed.numel() == (n + 1) / 2,
              where_is(folder, weight_name),
              " holds ",
              packed.numel(),
              " bytes of packed 4-bit codes, but its quant_state shape ",
              sizes_str(q.shape),
              " (",
              n,
              " elements) needs ",
              (n + 1) / 2,
              "; the weight and its quant_state do not belong together");
  q.packed = packed.reshape({-1, 1});

  const std::string quant_map_key = weight_name + ".quant_map";
  const at::Tensor quant_map = checked_tensor(folder, quant_map_key, at::kFloat, 16, "the 16-entry 4-bit code table");
  const auto& table = ops::codebook_4bit(type);
  const at::Tensor quant_map_c = quant_map.contiguous();
  const float* stored = quant_map_c.const_data_ptr<float>();
  for (size_t i = 0; i < table.size(); ++i) {
    // By value: bitsandbytes has written FP4's zero as +0.0 and as -0.0, both decode the same.
    TORCH_CHECK(stored[i] == table[i],
                where_is(folder, quant_map_key),
                " entry ",
                i,
                " is ",
                stored[i],
                " but bitsandbytes' ",
                ops::quant_type_name(type),
                " table has ",
                table[i],
                "; this checkpoint uses a custom code table, which qtrain cannot dequantize (re-quantize the float "
                "weights with the standard ",
                ops::quant_type_name(type),
                " type)");
  }

  const std::string absmax_key = weight_name + ".absmax";
  const std::string nested_absmax_key = weight_name + ".nested_absmax";
  const std::string nested_map_key = weight_name + ".nested_quant_map";
  if (f.nested) {
    ops::NestedAbsmax nested;
    nested.qabsmax = checked_tensor(
        folder, absmax_key, at::kByte, blocks, "uint8 codes of the double-quantized absmax, one per block");
    nested.absmax2 = checked_tensor(folder,
                                    nested_absmax_key,
                                    at::kFloat,
                                    (blocks + 255) / 256,
                                    "float32 absmax of the absmax codes, one per 256 blocks");
    nested.code = checked_tensor(folder, nested_map_key, at::kFloat, 256, "the 256-entry code of the absmax codes");
    nested.blocksize = 256;
    // Python: torch.tensor(float(nested_offset)), i.e. the JSON double rounded to float32.
    nested.offset = static_cast<float>(f.nested_offset);
    q.nested = std::move(nested);
  } else {
    TORCH_CHECK(!folder.contains(nested_absmax_key),
                where_is(folder, nested_absmax_key),
                " exists but the quant_state has no nested_offset; the checkpoint is inconsistent");
    q.absmax = checked_tensor(folder, absmax_key, at::kFloat, blocks, "float32 absmax, one per block");
  }
  q.validate(folder.file(weight_name).string() + ": '" + weight_name + "'");
  return q;
}

std::string python_float_repr(double x) {
  TORCH_CHECK(std::isfinite(x),
              "python_float_repr: ",
              x,
              " is not finite; a bitsandbytes quant_state cannot hold it (the weight contains inf or NaN)");
  // Shortest round-trip digits and exponent: d.ddd e±x.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), std::abs(x), std::chars_format::scientific);
  TORCH_INTERNAL_ASSERT(result.ec == std::errc());
  const std::string_view sci(buf, result.ptr - buf);
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+'), sci.data() + sci.size(), exponent);
  // Python (PyOS_double_to_string, repr): value = 0.DIGITS * 10^decpt; exponent notation when
  // decpt <= -4 or decpt > 16, at least two exponent digits; fixed notation keeps a ".0".
  const int decpt = exponent + 1;
  const int ndigits = static_cast<int>(digits.size());
  std::string out = std::signbit(x) ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits.substr(0, 1);
    if (ndigits > 1) out += "." + digits.substr(1);
    const int e10 = decpt - 1;
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", e10 < 0 ? '-' : '+', std::abs(e10));
    out += exp_buf;
  } else if (decpt <= 0) {
    out += "0." + std::string(-decpt, '0') + digits;
  } else if (decpt < ndigits) {
    out += digits.substr(0, decpt) + "." + digits.substr(decpt);
  } else {
    out += digits + std::string(decpt - ndigits, '0') + ".0";
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> bnb_4bit_tensors(const std::string& weight_name,
                                                                 const ops::Packed4bit& q) {
  q.validate(weight_name);
  const char* dtype = dtype_string(q.dtype);
  TORCH_CHECK(dtype,
              weight_name,
              ": the original dtype ",
              q.dtype,
              " cannot be written to a bitsandbytes quant_state; use float32, bfloat16 or float16");
  // json.dumps of the non-tensor items, in as_dict's insertion order, with Python's separators.
  std::string json = "{\"quant_type\": \"" + std::string(ops::quant_type_name(q.quant_type)) +
                     "\", \"blocksize\": " + std::to_string(q.blocksize) + ", \"dtype\": \"" + dtype +
                     "\", \"shape\": [";
  for (size_t i = 0; i < q.shape.size(); ++i) json += (i ? ", " : "") + std::to_string(q.shape[i]);
  json += "]";
  if (q.nested) {
    json += ", \"nested_blocksize\": " + std::to_string(q.nested->blocksize) +
            ", \"nested_dtype\": \"float32\", \"nested_offset\": " +
            python_float_repr(static_cast<double>(q.nested->offset));
  }
  json += "}";
  at::Tensor blob = at::empty({static_cast<int64_t>(json.size())}, at::kByte);
  std::memcpy(blob.data_ptr(), json.data(), json.size());

  const auto& table = ops::codebook_4bit(q.quant_type);
  const at::Tensor quant_map = at::from_blob(const_cast<float*>(table.data()), {16}, at::kFloat).clone();

  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back(weight_name, q.packed.reshape({-1, 1}));
  if (q.nested) {
    out.emplace_back(weight_name + ".absmax", q.nested->qabsmax.reshape({-1}));
    out.emplace_back(weight_name + ".quant_map", quant_map);
    out.emplace_back(weight_name + ".nested_absmax", q.nested->absmax2.reshape({-1}));
    out.emplace_back(weight_name + ".nested_quant_map", q.nested->code.reshape({-1}));
  } else {
    out.emplace_back(weight_name + ".absmax", q.absmax.reshape({-1}));
    out.emplace_back(weight_name + ".quant_map", quant_map);
  }
  out.emplace_back(blob_key(weight_name, q.quant_type), blob);
  return out;
}

namespace {

std::string module_of(const std::string& weight_name) {
  TORCH_CHECK(weight_name.size() > kWeightSuffix.size() && weight_name.ends_with(kWeightSuffix),
              "'",
              weight_name,
              "' is not the weight of a module (it does not end in \".weight\"); pass e.g. "
              "\"model.layers.0.mlp.down_proj.weight\"");
  return weight_name.substr(0, weight_name.size() - kWeightSuffix.size());
}

// bitsandbytes' LINEAR_8BIT_WEIGHT_FORMAT_MAPPING.
const char* weight_format_name(int64_t value) {
  switch (value) {
    case 0:
      return "row";
    case 1:
      return "col32";
    case 2:
      return "col_turing";
    case 3:
      return "col_ampere";
    default:
      return "unknown";
  }
}

}  // namespace

bool is_bnb_int8(const HfFolder& folder, const std::string& weight_name) {
  return folder.contains(weight_name) && folder.dtype(weight_name) == at::kChar;
}

std::vector<std::string> bnb_int8_weight_names(const HfFolder& folder) {
  std::vector<std::string> out;
  for (const std::string& name : folder.tensor_names()) {
    if (name.ends_with(kWeightSuffix) && folder.dtype(name) == at::kChar) out.push_back(name);
  }
  return out;
}

ops::Int8Weight read_bnb_int8(const HfFolder& folder, const std::string& weight_name) {
  const std::string module = module_of(weight_name);
  const at::Tensor cb = folder.tensor(weight_name);
  const std::string where = where_is(folder, weight_name);

  const std::string format_key = module + ".weight_format";
  if (folder.contains(format_key)) {
    const at::Tensor format = folder.tensor(format_key);
    TORCH_CHECK(format.numel() == 1 && at::isIntegralType(format.scalar_type(), /*includeBool=*/false),
                where_is(folder, format_key),
                " must be an integer scalar (0 = \"row\"), got ",
                format.scalar_type(),
                " ",
                sizes_str(format.sizes()));
    const int64_t value = format.item<int64_t>();
    TORCH_CHECK(value == 0,
                where_is(folder, format_key),
                " is ",
                value,
                " (\"",
                weight_format_name(value),
                "\"), but only 0 (\"row\") is a portable layout: the others are GPU-specific tiled layouts that "
                "current bitsandbytes cannot load either. Re-save the checkpoint with bitsandbytes >= 0.45 (row "
                "format), or quantize the float model again");
  }

  const std::string scb_key = module + ".SCB";
  std::optional<at::Tensor> scb;
  if (folder.contains(scb_key)) scb = folder.tensor(scb_key);
  return ops::Int8Weight::from_quantized(cb, scb, scb ? where : where + " (expected its SCB at '" + scb_key + "')");
}

std::vector<std::pair<std::string, at::Tensor>> bnb_int8_tensors(const std::string& weight_name,
                                                                 const ops::Int8Weight& w) {
  const std::string module = module_of(weight_name);
  return {{weight_name, w.cb()}, {module + ".SCB", w.scb()}, {module + ".weight_format", at::zeros({}, at::kByte)}};
}

nlohmann::json bnb_quantization_config(const BnbQuantization& q) {
  TORCH_CHECK(q.bits == 4 || q.bits == 8,
              "bnb_quantization_config: bits is ",
              q.bits,
              "; bitsandbytes checkpoints are 4-bit or 8-bit");
  const char* compute_dtype = dtype_string(q.compute_dtype);
  TORCH_CHECK(compute_dtype,
              "bnb_quantization_config: compute dtype ",
              q.compute_dtype,
              " is not supported; use float32, bfloat16 or float16");
  const bool four = q.bits == 4;
  return {
      {"quant_method", "bitsandbytes"},
      {"load_in_4bit", four},
      {"_load_in_4bit", four},
      {"load_in_8bit", !four},
      {"_load_in_8bit", !four},
      {"bnb_4bit_quant_type", std::string(ops::quant_type_name(q.quant_type))},
      {"bnb_4bit_use_double_quant", q.double_quant},
      {"bnb_4bit_compute_dtype", compute_dtype},
      {"bnb_4bit_quant_storage", "uint8"},
      {"llm_int8_threshold", q.llm_int8_threshold},
      {"llm_int8_skip_modules", q.skip_modules ? nlohmann::json(*q.skip_modules) : nlohmann::json(nullptr)},
      {"llm_int8_enable_fp32_cpu_offload", false},
      {"llm_int8_has_fp16_weight", false},
  };
}

std::optional<BnbQuantization> checkpoint_quantization(const nlohmann::json& config_json, const std::string& where) {
  const auto it = config_json.find("quantization_config");
  if (it == config_json.end() || it->is_null()) return std::nullopt;
  return parse_bnb_quantization_config(*it, where);
}

BnbQuantization parse_bnb_quantization_config(const nlohmann::json& config, const std::string& where) {
  const std::string at = where + ": quantization_config";
  TORCH_CHECK(config.is_object(), at, " must be an object, got ", config.dump());
  const auto get = [&](const char* key) -> const nlohmann::json* {
    const auto it = config.find(key);
    return it == config.end() || it->is_null() ? nullptr : &*it;
  };
  const auto get_bool = [&](std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
      if (const nlohmann::json* v = get(key)) {
        TORCH_CHECK(v->is_boolean(), at, ".", key, " is ", v->dump(), " but must be true or false");
        return v->get<bool>();
      }
    }
    return false;
  };
  const nlohmann::json* method = get("quant_method");
  TORCH_CHECK(method && *method == "bitsandbytes",
              at,
              ".quant_method is ",
              method ? method->dump() : "missing",
              "; qtrain loads bitsandbytes 4-bit / 8-bit checkpoints and float models only (dequantize or "
              "re-quantize this model with bitsandbytes)");
  BnbQuantization q;
  const bool four = get_bool({"load_in_4bit", "_load_in_4bit"});
  const bool eight = get_bool({"load_in_8bit", "_load_in_8bit"});
  TORCH_CHECK(four != eight,
              at,
              " has load_in_4bit = ",
              four,
              " and load_in_8bit = ",
              eight,
              "; exactly one of them must be true");
  q.bits = four ? 4 : 8;

  // Absent fields take BitsAndBytesConfig's defaults (fp4, no double quant, float32, 6.0).
  q.quant_type = ops::QuantType::fp4;
  if (const nlohmann::json* v = get("bnb_4bit_quant_type")) {
    TORCH_CHECK(*v == "nf4" || *v == "fp4",
                at,
                ".bnb_4bit_quant_type is ",
                v->dump(),
                "; accepted values are \"nf4\" and \"fp4\"");
    q.quant_type = ops::quant_type_from_name(v->get<std::string>());
  }
  q.double_quant = get_bool({"bnb_4bit_use_double_quant"});
  if (const nlohmann::json* v = get("bnb_4bit_compute_dtype")) {
    const auto dtype = v->is_string() ? dtype_from_string(v->get<std::string>()) : std::nullopt;
    TORCH_CHECK(dtype,
                at,
                ".bnb_4bit_compute_dtype is ",
                v->dump(),
                "; accepted values are \"float32\", \"bfloat16\" and \"float16\"");
    q.compute_dtype = *dtype;
  }
  if (const nlohmann::json* v = get("llm_int8_threshold")) {
    TORCH_CHECK(v->is_number(), at, ".llm_int8_threshold is ", v->dump(), " but must be a number");
    q.llm_int8_threshold = v->get<double>();
  }
  if (const nlohmann::json* v = get("llm_int8_skip_modules")) {
    TORCH_CHECK(v->is_array() && std::all_of(v->begin(), v->end(), [](const auto& s) { return s.is_string(); }),
                at,
                ".llm_int8_skip_modules is ",
                v->dump(),
                " but must be null or a list of module names");
    q.skip_modules = v->get<std::vector<std::string>>();
  }
  return q;
}

}  // namespace qtrain::engine::io
