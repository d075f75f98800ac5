// Hugging Face model folders; see hf_folder.h. The index format and the shard naming follow
// huggingface_hub (`split_torch_state_dict_into_shards`, `save_torch_state_dict`) and
// transformers' save_pretrained.
#include "engine/io/hf_folder.h"
#include "engine/io/bnb_checkpoint.h"
#include "engine/io/durable_file.h"
#include "engine/text/json_depth.h"
#include "engine/text/regular_file.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>

namespace qtrain::engine::io {
namespace {

constexpr const char* kConfigFile = "config.json";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string read_text(const std::filesystem::path& path) {
  const auto problem = text::regular_file_problem(path, text::kMaxConfigBytes);
  TORCH_CHECK(problem.empty(), path.string(), " ", problem);
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, "cannot open ", path.string(), ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  TORCH_CHECK(!in.bad(), "cannot read ", path.string(), ": ", std::strerror(errno));
  return text.str();
}

std::string dump_json(const nlohmann::json& value, const std::filesystem::path& path) {
  try {
    return value.dump(2) + "\n";
  } catch (const nlohmann::json::type_error& e) {
    TORCH_CHECK(false, "cannot write ", path.string(), ": ", e.what(), " (a string in it is not valid UTF-8)");
  }
}

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

bool is_shard_name(const std::string& name) {
  static const std::regex pattern(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, pattern);
}

std::string no_weights_message(const std::filesystem::path& dir) {
  std::string message = dir.string() + " has no " + kSingleFile + " and no " + kIndexFile;
  if (std::filesystem::exists(dir / "pytorch_model.bin") ||
      std::filesystem::exists(dir / "pytorch_model.bin.index.json")) {
    return message +
           "; it holds pickled PyTorch weights (pytorch_model.bin), which qtrain does not read. Convert them with "
           "transformers: AutoModelForCausalLM.from_pretrained(dir).save_pretrained(dir) writes safetensors";
  }
  return message + "; download the model's safetensors weights into it";
}

}  // namespace

nlohmann::json parse_json_file(const std::filesystem::path& path, const nlohmann::json::parser_callback_t& callback) {
  const std::string text = read_text(path);
  const auto problem = text::json_depth_problem(text);
  TORCH_CHECK(problem.empty(), path.string(), ": ", problem);
  try {
    return nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::parse_error& e) {
    TORCH_CHECK(false, path.string(), ": not valid JSON (", e.what(), "); fix the file or download it again");
  }
}

nlohmann::json read_config_json(const std::filesystem::path& dir) {
  TORCH_CHECK(std::filesystem::is_directory(dir),
              dir.string(),
              " is not a directory; expected a Hugging Face model folder (config.json + *.safetensors). "
              "qtrain reads local folders: download the model into it (`hf download ORG/NAME --local-dir ",
              dir.string(),
              "`), or make one with random weights (`qtrain init-model --arch llama --preset demo --out ",
              dir.string(),
              "`, which scripts/demo.sh runs for configs/demo.yaml)");
  const std::filesystem::path config_path = dir / kConfigFile;
  TORCH_CHECK(std::filesystem::exists(config_path),
              config_path.string(),
              " does not exist; a Hugging Face model folder needs its config.json (download it with the weights)");
  nlohmann::json config = parse_json_file(config_path);
  TORCH_CHECK(config.is_object(),
              config_path.string(),
              ": expected a JSON object, got a ",
              config.type_name(),
              "; the file is not a model config");
  return config;
}

HfFolder HfFolder::open(const std::filesystem::path& dir) {
  HfFolder folder;
  folder.dir_ = dir;
  folder.config_ = read_config_json(dir);
  checkpoint_quantization(folder.config_, (dir / kConfigFile).string());  // see there: refuses GPTQ and others

  const std::filesystem::path single = dir / kSingleFile;
  const std::filesystem::path index_path = dir / kIndexFile;
  // transformers looks for the single file first; so do we, so both read the same weights.
  if (std::filesystem::exists(single)) {
    folder.files_.push_back(SafetensorsFile::open(single));
    for (const TensorInfo& t : folder.files_.back().tensors()) folder.where_.emplace(t.name, 0);
    return folder;
  }
  TORCH_CHECK(std::filesystem::exists(index_path), no_weights_message(dir));
  folder.sharded_ = true;
  const std::string where = index_path.string();

  // A tensor listed twice in the weight_map would be silently resolved to the last entry.
  using Event = nlohmann::json::parse_event_t;
  std::set<std::string> listed;
  std::string section;  // the top-level key being parsed
  const nlohmann::json::parser_callback_t check_duplicates = [&](int depth, Event event, nlohmann::json& parsed) {
    if (event == Event::key && depth == 1) {
      section = parsed.get<std::string>();
    } else if (event == Event::key && depth == 2 && section == "weight_map") {
      const auto& key = parsed.get_ref<const std::string&>();
      TORCH_CHECK(listed.insert(key).second,
                  where,
                  ": the tensor '",
                  key,
                  "' is listed twice in the weight_map; each tensor belongs to exactly one shard, remove the extra "
                  "entry");
    }
    return true;
  };
  const nlohmann::json index = parse_json_file(index_path, check_duplicates);
  TORCH_CHECK(index.is_object(), where, ": expected a JSON object with \"weight_map\", got a ", index.type_name());
  const auto map_it = index.find("weight_map");
  TORCH_CHECK(map_it != index.end() && map_it->is_object(),
              where,
              ": no \"weight_map\" object (tensor name -> shard file); the index is incomplete, download it again");
  if (const auto meta = index.find("metadata"); meta != index.end()) {
    TORCH_CHECK(meta->is_object(), where, ": \"metadata\" must be an object, got ", meta->dump());
  }
  const nlohmann::json& weight_map = *map_it;
  TORCH_CHECK(!weight_map.empty(), where, ": the weight_map is empty; the index lists no tensors");

  // Shards in file-name order, each opened once; `first_tensor` names one tensor per shard for
  // the missing-shard message.
  std::map<std::string, std::string> first_tensor;
  for (const auto& [name, shard] : weight_map.items()) {
    TORCH_CHECK(shard.is_string(),
                where,
                ": weight_map entry for '",
                name,
                "' is ",
                shard.dump(),
                "; it must be the file name of a shard");
    const auto& file = shard.get_ref<const std::string&>();
    // Plain file names only: an index must not point outside its folder.
    TORCH_CHECK(!file.empty() && file != "." && file != ".." && std::filesystem::path(file).filename() == file,
                where,
                ": weight_map puts '",
                name,
                "' in '",
                file,
                "', which is not a plain file name; shards must lie in the folder itself");
    first_tensor.emplace(file, name);
  }
  std::map<std::string, size_t> shard_index;
  for (const auto& [file, example] : first_tensor) {
    const std::filesystem::path path = dir / file;
    TORCH_CHECK(std::filesystem::exists(path),
                where,
                ": shard '",
                file,
                "' (which holds '",
                example,
                "', among others) is missing from ",
                dir.string(),
                "; download it again, or re-save the model so that the index matches its shards");
    shard_index.emplace(file, folder.files_.size());
    folder.files_.push_back(SafetensorsFile::open(path));
  }
  for (const auto& [file, i] : shard_index) {
    for (const TensorInfo& t : folder.files_[i].tensors()) {
      const auto [it, inserted] = folder.where_.emplace(t.name, i);
      TORCH_CHECK(inserted,
                  where,
                  ": the tensor '",
                  t.name,
                  "' is in two shards, ",
                  folder.files_[it->second].path().filename().string(),
                  " and ",
                  file,
                  "; a tensor must be in exactly one. The shards come from different saves: download them again");
      const auto listed_it = weight_map.find(t.name);
      TORCH_CHECK(listed_it != weight_map.end(),
                  where,
                  ": shard '",
                  file,
                  "' holds the tensor '",
                  t.name,
                  "', which the weight_map does not list; the index and the shards come from different saves, "
                  "download them again");
      TORCH_CHECK(listed_it->get_ref<const std::string&>() == file,
                  where,
                  ": the weight_map puts '",
                  t.name,
                  "' in '",
                  listed_it->get_ref<const std::string&>(),
                  "', but it is in '",
                  file,
                  "'; the index and the shards come from different saves, download them again");
    }
  }
  for (const auto& [name, shard] : weight_map.items()) {
    TORCH_CHECK(folder.where_.contains(name),
                where,
                ": the weight_map puts the tensor '",
                name,
                "' in '",
                shard.get_ref<const std::string&>(),
                "', but that shard does not hold it; the index and the shards come from different saves, "
                "download them again");
  }
  return folder;
}

std::vector<std::string> HfFolder::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(where_.size());
  for (const auto& entry : where_) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

const SafetensorsFile& HfFolder::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  TORCH_CHECK(it != where_.end(),
              dir_.string(),
              ": the model has no tensor '",
              name,
              "' (it has ",
              where_.size(),
              " tensors); check the name against the checkpoint's tensor names");
  return files_[it->second];
}

at::Tensor HfFolder::tensor(const std::string& name) const {
  const SafetensorsFile& file = file_of(name);
  at::Tensor t = file.tensor(name);
  const auto type = t.scalar_type();
  const bool checkable = type == at::kFloat || type == at::kBFloat16 || type == at::kHalf || type == at::kDouble;
  if (checkable && !at::isfinite(t).all().item<bool>()) {
    const int64_t nan = at::isnan(t).sum().item<int64_t>();
    TORCH_CHECK(false,
                file.path().string(),
                ": tensor '",
                name,
                "' holds ",
                nan,
                " NaN and ",
                t.numel() - nan - at::isfinite(t).sum().item<int64_t>(),
                " infinite values; no trained weight is non-finite, so the file is damaged or was written by a "
                "diverged run: download the model again, or use a checkpoint from before the divergence");
  }
  return t;
}

at::ScalarType HfFolder::dtype(const std::string& name) const {
  return file_of(name).info(name).dtype;
}

std::vector<int64_t> HfFolder::shape(const std::string& name) const {
  return file_of(name).info(name).shape;
}

const std::filesystem::path& HfFolder::file(const std::string& name) const {
  return file_of(name).path();
}

void save_hf_folder(const std::filesystem::path& dir,
                    const nlohmann::json& config,
                    const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                    int64_t max_shard_bytes) {
  TORCH_CHECK(max_shard_bytes > 0,
              "save_hf_folder(",
              dir.string(),
              "): max_shard_bytes must be positive, got ",
              max_shard_bytes);
  TORCH_CHECK(config.is_object(),
              "save_hf_folder(",
              dir.string(),
              "): the config must be a JSON object, got a ",
              config.type_name());
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : tensors) {
    TORCH_CHECK(names.insert(name).second,
                "save_hf_folder(",
                dir.string(),
                "): the tensor '",
                name,
                "' is given twice; names must be unique");
    TORCH_CHECK(tensor.defined(), "save_hf_folder(", dir.string(), "): the tensor '", name, "' is undefined");
  }

  // huggingface_hub's split: fill shards in order; a tensor that would overflow the current
  // shard starts a new one; a tensor over the limit on its own gets its own shard at once.
  using Shard = std::vector<std::pair<std::string, at::Tensor>>;
  std::vector<Shard> shards;
  Shard current;
  int64_t current_bytes = 0;
  int64_t total_bytes = 0;
  for (const auto& entry : tensors) {
    const int64_t bytes = entry.second.numel() * static_cast<int64_t>(entry.second.element_size());
    total_bytes += bytes;
    if (bytes > max_shard_bytes) {
      shards.push_back({entry});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(entry);
    current_bytes += bytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TORCH_CHECK(!ec, "cannot create the model folder ", dir.string(), ": ", ec.message());

  std::set<std::string> written;
  if (shards.size() == 1) {
    safetensors_save(dir / kSingleFile, shards[0]);
    written.insert(kSingleFile);
  } else {
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string file = shard_name(i, shards.size());
      safetensors_save(dir / file, shards[i]);
      written.insert(file);
      for (const auto& entry : shards[i]) weight_map[entry.first] = file;
    }
    const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", std::move(weight_map)}};
    write_file_atomic(dir / kIndexFile, dump_json(index, dir / kIndexFile));
    written.insert(kIndexFile);
  }
  write_file_atomic(dir / kConfigFile, dump_json(config, dir / kConfigFile));

  // Only now, with the new weights complete, remove those of an earlier save: until here the
  // old single file (which readers prefer) or the old index kept the folder consistent.
  std::vector<std::filesystem::path> stale;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const bool weights = name == kSingleFile || name == kIndexFile || is_shard_name(name);
    if (weights && !written.contains(name)) stale.push_back(entry.path());
  }
  for (const auto& path : stale) {
    std::filesystem::remove(path, ec);
    TORCH_CHECK(!ec,
                "save_hf_folder: wrote ",
                dir.string(),
                " but cannot remove the stale weight file ",
                path.string(),
                " of an earlier save (",
                ec.message(),
                "); delete it by hand");
  }
}

}  // namespace qtrain::engine::io
