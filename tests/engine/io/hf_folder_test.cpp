// Tests for engine/io/hf_folder: single-file and sharded round trips, huggingface_hub's shard
// split, zero-copy views, cleanup of an earlier save, every validation error of a broken folder,
// and interop with transformers (it loads qtrain's shards; qtrain reads its shards).
#include "engine/io/hf_folder.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/remove_tree.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"
#include "tests/tiny_llama.h"

namespace qtrain::engine::io {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> sorted_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes().equals(b.sizes()) &&
         at::equal(a.contiguous().view(at::kByte), b.contiguous().view(at::kByte));
}

// Five float32 tensors of 100 elements (400 bytes), "t0".."t4", distinct values.
Tensors small_tensors() {
  Tensors out;
  for (int i = 0; i < 5; ++i) {
    out.emplace_back("t" + std::to_string(i), at::arange(100, at::kFloat) + 1000 * i);
  }
  return out;
}

// Each test gets its own directory under the system temp dir, removed afterwards.
class HfFolderTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir(/*create=*/true); }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  // t0..t4 in three shards: [t0, t1], [t2, t3], [t4] with a 1000-byte limit.
  fs::path sharded_folder() {
    const fs::path model = dir_ / "model";
    save_hf_folder(model, {{"model_type", "llama"}}, small_tensors(), 1000);
    return model;
  }
  void rewrite_index(const fs::path& model, const std::string& from, const std::string& to) {
    std::string text = read_text(model / "model.safetensors.index.json");
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in the index:\n" << text;
    text.replace(at, from.size(), to);
    write_text(model / "model.safetensors.index.json", text);
  }

  fs::path dir_;
};

TEST_F(HfFolderTest, SingleFileRoundTrip) {
  const Tensors tensors = test::tiny_llama(at::kBFloat16, 7);
  const nlohmann::json config = test::tiny_llama_config("bfloat16");
  save_hf_folder(dir_ / "m", config, tensors);
  EXPECT_EQ(sorted_files(dir_ / "m"), (std::vector<std::string>{"config.json", "model.safetensors"}));

  const HfFolder folder = HfFolder::open(dir_ / "m");
  EXPECT_FALSE(folder.sharded());
  EXPECT_EQ(folder.config(), config);
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(folder.tensor_names(), names);
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(folder.contains(name));
    EXPECT_EQ(folder.dtype(name), at::kBFloat16);
    EXPECT_EQ(folder.shape(name), t.sizes().vec());
    EXPECT_TRUE(bitwise_equal(folder.tensor(name), t)) << name;
    EXPECT_EQ(folder.file(name), dir_ / "m" / "model.safetensors");
  }
  EXPECT_FALSE(folder.contains("model.layers.2.mlp.up_proj.weight"));
}

TEST_F(HfFolderTest, ConfigJsonIsWrittenLikeTransformers) {
  save_hf_folder(dir_,
                 {{"vocab_size", 128},
                  {"architectures", {"LlamaForCausalLM"}},
                  {"rms_norm_eps", 1e-6},
                  {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}},
                 small_tensors());
  // json.dumps(indent=2, sort_keys=True) + "\n"
  EXPECT_EQ(read_text(dir_ / "config.json"),
            "{\n"
            "  \"architectures\": [\n"
            "    \"LlamaForCausalLM\"\n"
            "  ],\n"
            "  \"rms_norm_eps\": 1e-06,\n"
            "  \"rope_parameters\": {\n"
            "    \"rope_theta\": 10000.0,\n"
            "    \"rope_type\": \"default\"\n"
            "  },\n"
            "  \"vocab_size\": 128\n"
            "}\n");
}

TEST_F(HfFolderTest, ShardsFollowHuggingfaceHubSplit) {
  // 400 + 400 fit in 1000; t2 would overflow; t4 is over the limit on its own and gets a shard
  // at once, ahead of the shard still being filled (huggingface_hub's order).
  Tensors tensors = small_tensors();
  tensors[4].second = at::arange(300, at::kFloat);  // 1200 bytes
  save_hf_folder(dir_, {{"model_type", "llama"}}, tensors, 1000);
  EXPECT_EQ(sorted_files(dir_),
            (std::vector<std::string>{"config.json",
                                      "model-00001-of-00003.safetensors",
                                      "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors",
                                      "model.safetensors.index.json"}));
  const auto names_in = [&](const std::string& file) {
    std::vector<std::string> names;
    const SafetensorsFile shard = SafetensorsFile::open(dir_ / file);
    for (const auto& t : shard.tensors()) names.push_back(t.name);
    return names;
  };
  EXPECT_EQ(names_in("model-00001-of-00003.safetensors"), (std::vector<std::string>{"t0", "t1"}));
  EXPECT_EQ(names_in("model-00002-of-00003.safetensors"), (std::vector<std::string>{"t4"}));
  EXPECT_EQ(names_in("model-00003-of-00003.safetensors"), (std::vector<std::string>{"t2", "t3"}));
  EXPECT_EQ(read_text(dir_ / "model.safetensors.index.json"),
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_size\": 2800\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"t0\": \"model-00001-of-00003.safetensors\",\n"
            "    \"t1\": \"model-00001-of-00003.safetensors\",\n"
            "    \"t2\": \"model-00003-of-00003.safetensors\",\n"
            "    \"t3\": \"model-00003-of-00003.safetensors\",\n"
            "    \"t4\": \"model-00002-of-00003.safetensors\"\n"
            "  }\n"
            "}\n");

  const HfFolder folder = HfFolder::open(dir_);
  EXPECT_TRUE(folder.sharded());
  EXPECT_EQ(folder.tensor_names(), (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4"}));
  for (const auto& [name, t] : tensors) EXPECT_TRUE(bitwise_equal(folder.tensor(name), t)) << name;
  EXPECT_EQ(folder.file("t4"), dir_ / "model-00002-of-00003.safetensors");
  EXPECT_EQ(folder.shape("t4"), (std::vector<int64_t>{300}));
}

TEST_F(HfFolderTest, TensorsAreViewsOfTheMappedShard) {
  at::Tensor kept;
  {
    const HfFolder folder = HfFolder::open(sharded_folder());
    const at::Tensor a = folder.tensor("t3");
    const at::Tensor b = folder.tensor("t3");
    // Two reads of a mapped tensor see the same bytes in place; copies would not.
    EXPECT_EQ(a.data_ptr(), b.data_ptr());
    kept = a;
  }
  // The view keeps the mapping alive after the folder is gone.
  EXPECT_TRUE(bitwise_equal(kept, at::arange(100, at::kFloat) + 3000));
}

TEST_F(HfFolderTest, ResavingRemovesWeightFilesOfEarlierSaves) {
  write_text(dir_ / "tokenizer.json", "{}");
  save_hf_folder(dir_, {{"a", 1}}, small_tensors(), 1000);  // 3 shards
  save_hf_folder(dir_, {{"a", 2}}, small_tensors(), 1600);  // 2 shards
  EXPECT_EQ(sorted_files(dir_),
            (std::vector<std::string>{"config.json",
                                      "model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json",
                                      "tokenizer.json"}));
  save_hf_folder(dir_, {{"a", 3}}, small_tensors());  // single file
  EXPECT_EQ(sorted_files(dir_), (std::vector<std::string>{"config.json", "model.safetensors", "tokenizer.json"}));
  save_hf_folder(dir_, {{"a", 4}}, small_tensors(), 1000);
  EXPECT_EQ(sorted_files(dir_).size(), 6u);
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  const HfFolder folder = HfFolder::open(dir_);
  EXPECT_TRUE(folder.sharded());
  EXPECT_EQ(folder.config().at("a"), 4);
}

TEST_F(HfFolderTest, SaveCreatesNestedDirectories) {
  save_hf_folder(dir_ / "a" / "b", {{"x", 1}}, small_tensors());
  EXPECT_EQ(HfFolder::open(dir_ / "a" / "b").tensor_names().size(), 5u);
}

TEST_F(HfFolderTest, SaveRejectsBadArguments) {
  Tensors twice = small_tensors();
  twice.push_back(twice[0]);
  expect_error([&] { save_hf_folder(dir_, {{"x", 1}}, twice); }, "the tensor 't0' is given twice");
  expect_error([&] { save_hf_folder(dir_, nlohmann::json::array(), small_tensors()); }, "must be a JSON object");
  expect_error([&] { save_hf_folder(dir_, {{"x", 1}}, small_tensors(), 0); }, "max_shard_bytes must be positive");
}

// --- broken folders: each error names the file, the tensor and the fix ------------------------

TEST_F(HfFolderTest, RejectsMissingDirectory) {
  expect_error([&] { HfFolder::open(dir_ / "nope"); }, "nope is not a directory");
  expect_error([&] { HfFolder::open(dir_ / "nope"); }, "qtrain init-model --arch llama --preset demo --out");
}

TEST_F(HfFolderTest, RejectsMissingConfig) {
  save_hf_folder(dir_, {{"x", 1}}, small_tensors());
  fs::remove(dir_ / "config.json");
  expect_error([&] { HfFolder::open(dir_); }, "config.json does not exist; a Hugging Face model folder needs");
}

TEST_F(HfFolderTest, RejectsConfigThatIsNotJson) {
  save_hf_folder(dir_, {{"x", 1}}, small_tensors());
  write_text(dir_ / "config.json", "{\"hidden_size\": 64,");
  expect_error([&] { HfFolder::open(dir_); }, (dir_ / "config.json").string() + ": not valid JSON");
  write_text(dir_ / "config.json", "[1, 2]");
  expect_error([&] { HfFolder::open(dir_); }, "config.json: expected a JSON object, got a array");
}

TEST_F(HfFolderTest, RejectsFolderWithoutWeights) {
  write_text(dir_ / "config.json", "{}");
  expect_error([&] { HfFolder::open(dir_); }, "has no model.safetensors and no model.safetensors.index.json");
  write_text(dir_ / "pytorch_model.bin", "");
  expect_error([&] { HfFolder::open(dir_); },
               "pickled PyTorch weights (pytorch_model.bin), which qtrain does not read");
}

TEST_F(HfFolderTest, RejectsMissingShard) {
  const fs::path model = sharded_folder();
  fs::remove(model / "model-00002-of-00003.safetensors");
  expect_error([&] { HfFolder::open(model); },
               "model.safetensors.index.json: shard 'model-00002-of-00003.safetensors' (which holds 't2', among "
               "others) is missing from " +
                   model.string() + "; download it again");
}

// A checkpoint quantized by another method than bitsandbytes is refused when the folder opens,
// for every command, rather than read as float or as bitsandbytes weights.
TEST_F(HfFolderTest, RefusesACheckpointQuantizedByAnotherMethod) {
  for (const std::string method : {"gptq", "awq"}) {
    save_hf_folder(dir_,
                   {{"model_type", "llama"}, {"quantization_config", {{"quant_method", method}, {"bits", 4}}}},
                   small_tensors());
    expect_error([&] { HfFolder::open(dir_); },
                 (dir_ / "config.json").string() + ": quantization_config.quant_method is \"" + method +
                     "\"; qtrain loads bitsandbytes 4-bit / 8-bit checkpoints and float models only (dequantize or "
                     "re-quantize this model with bitsandbytes)");
  }
}

// A shard listed in the index that is a folder, not a file, is refused as the file it should be.
TEST_F(HfFolderTest, RejectsAShardThatIsAFolder) {
  const fs::path model = sharded_folder();
  fs::remove(model / "model-00003-of-00003.safetensors");
  fs::create_directory(model / "model-00003-of-00003.safetensors");
  expect_error([&] { HfFolder::open(model); }, (model / "model-00003-of-00003.safetensors").string());
}

// Each non-finite value in a float weight of each dtype is refused when the tensor is read,
// naming the file, the tensor and what to do; finite tensors and integer tensors read as before.
TEST_F(HfFolderTest, NonFiniteWeightsAreRefusedNamingTheFileAndTheTensor) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const double bad : {nan, inf, -inf}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + std::to_string(bad));
      at::Tensor damaged = at::ones({4, 8}, dtype);
      damaged[2][5] = bad;
      const fs::path model = dir_ / "model";
      qtrain::engine::io::remove_tree(model);
      save_hf_folder(model,
                     {{"model_type", "llama"}},
                     {{"good", at::ones({3}, dtype)}, {"ids", at::arange(4, at::kLong)}, {"w", damaged}});
      const auto folder = HfFolder::open(model);
      EXPECT_TRUE(at::equal(folder.tensor("good"), at::ones({3}, dtype)));
      EXPECT_TRUE(at::equal(folder.tensor("ids"), at::arange(4, at::kLong)));
      expect_error([&] { folder.tensor("w"); },
                   (model / "model.safetensors").string() + ": tensor 'w' holds " +
                       (std::isnan(bad) ? "1 NaN and 0" : "0 NaN and 1") +
                       " infinite values; no trained weight is non-finite, so the file is damaged or was written by a "
                       "diverged run: download the model again");
    }
  }
}

TEST_F(HfFolderTest, RejectsTensorMissingFromItsShard) {
  const fs::path model = sharded_folder();
  // Shard 3 loses t4; the index still lists it there.
  safetensors_save(model / "model-00003-of-00003.safetensors", {{"other", at::ones({2})}});
  rewrite_index(model, "\"t0\"", "\"other\": \"model-00003-of-00003.safetensors\",\n    \"t0\"");
  expect_error([&] { HfFolder::open(model); },
               "weight_map puts the tensor 't4' in 'model-00003-of-00003.safetensors', but that shard does not hold "
               "it");
}

TEST_F(HfFolderTest, RejectsTensorInTwoShards) {
  const fs::path model = sharded_folder();
  safetensors_save(model / "model-00003-of-00003.safetensors", {{"t4", at::ones({2})}, {"t0", at::ones({2})}});
  expect_error([&] { HfFolder::open(model); },
               "the tensor 't0' is in two shards, model-00001-of-00003.safetensors and "
               "model-00003-of-00003.safetensors; a tensor must be in exactly one");
}

TEST_F(HfFolderTest, RejectsTensorListedTwice) {
  const fs::path model = sharded_folder();
  rewrite_index(model, "\"t0\"", "\"t4\": \"model-00003-of-00003.safetensors\",\n    \"t0\"");
  expect_error([&] { HfFolder::open(model); }, "the tensor 't4' is listed twice in the weight_map");
}

TEST_F(HfFolderTest, RejectsShardTensorTheIndexDoesNotList) {
  const fs::path model = sharded_folder();
  safetensors_save(model / "model-00003-of-00003.safetensors", {{"t4", at::ones({2})}, {"extra", at::ones({2})}});
  expect_error([&] { HfFolder::open(model); },
               "shard 'model-00003-of-00003.safetensors' holds the tensor 'extra', which the weight_map does not "
               "list");
}

TEST_F(HfFolderTest, RejectsWeightMapThatDisagreesWithShards) {
  const fs::path model = sharded_folder();
  rewrite_index(model, "\"t0\": \"model-00001-of-00003.safetensors\"", "\"t0\": \"model-00002-of-00003.safetensors\"");
  expect_error([&] { HfFolder::open(model); },
               "the weight_map puts 't0' in 'model-00002-of-00003.safetensors', but it is in "
               "'model-00001-of-00003.safetensors'");
}

TEST_F(HfFolderTest, RejectsShardOutsideTheFolder) {
  const fs::path model = sharded_folder();
  rewrite_index(model, "\"t0\": \"model-00001", "\"t0\": \"../model-00001");
  expect_error([&] { HfFolder::open(model); }, "which is not a plain file name; shards must lie in the folder itself");
}

TEST_F(HfFolderTest, RejectsIndexWithoutWeightMap) {
  const fs::path model = sharded_folder();
  write_text(model / "model.safetensors.index.json", "{\"metadata\": {\"total_size\": 1}}");
  expect_error([&] { HfFolder::open(model); }, "index.json: no \"weight_map\" object");
  write_text(model / "model.safetensors.index.json", "{\"weight_map\": {\"t0\": 3}}");
  expect_error([&] { HfFolder::open(model); }, "weight_map entry for 't0' is 3; it must be the file name of a shard");
}

TEST_F(HfFolderTest, CorruptShardNamesTheShard) {
  const fs::path model = sharded_folder();
  write_text(model / "model-00002-of-00003.safetensors", "garbage!");
  expect_error([&] { HfFolder::open(model); }, "model-00002-of-00003.safetensors: header length");
}

TEST_F(HfFolderTest, UnknownTensorNamesTheFolder) {
  const HfFolder folder = HfFolder::open(sharded_folder());
  expect_error([&] { folder.tensor("t9"); }, (dir_ / "model").string() + ": the model has no tensor 't9' (it has 5");
  expect_error([&] { folder.shape("t9"); }, "no tensor 't9'");
}

// --- interop with transformers -----------------------------------------------------------------

fs::path reference_script() {
  // QTRAIN_SOURCE_DIR: the repository root, a compile definition of the test target (__FILE__
  // can be relative under ccache's base_dir).
  return fs::path(QTRAIN_SOURCE_DIR) / "scripts" / "reference" / "bnb_checkpoint_reference.py";
}

class HfFolderInteropTest : public HfFolderTest {
 protected:
  void SetUp() override {
    HfFolderTest::SetUp();
    const char* python = std::getenv("QTRAIN_PYTHON");
    if (python == nullptr || *python == '\0') {
      GTEST_SKIP() << "QTRAIN_PYTHON is not set (ctest sets it to the venv's python)";
    }
    python_ = python;
  }

  // Runs a subcommand of scripts/reference/bnb_checkpoint_reference.py on dir_; fails the test
  // with the script's output unless it exits 0.
  void run_reference(const std::string& command) {
    ASSERT_TRUE(fs::exists(reference_script())) << reference_script();
    const fs::path log = dir_ / (command + ".log");
    const std::string line = "'" + python_ + "' '" + reference_script().string() + "' " + command + " --dir '" +
                             dir_.string() + "' > '" + log.string() + "' 2>&1";
    const int status = std::system(line.c_str());
    ASSERT_EQ(status, 0) << line << "\n" << read_text(log);
  }

  std::string python_;
};

TEST_F(HfFolderInteropTest, TransformersReadsQtrainShardsAndQtrainReadsTransformersShards) {
  const Tensors tensors = test::tiny_llama(at::kBFloat16, 7);
  save_hf_folder(dir_ / "qtrain", test::tiny_llama_config("bfloat16"), tensors, 20'000);
  ASSERT_TRUE(HfFolder::open(dir_ / "qtrain").sharded());
  safetensors_save(dir_ / "expected.safetensors", tensors);

  // transformers loads every tensor of qtrain's shards bit for bit, then saves them sharded.
  run_reference("hf-interop");

  const HfFolder python = HfFolder::open(dir_ / "python");
  EXPECT_TRUE(python.sharded());
  EXPECT_GT(sorted_files(dir_ / "python").size(), 3u);
  EXPECT_EQ(python.config().at("model_type"), "llama");
  EXPECT_EQ(python.config().at("num_key_value_heads"), 2);
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) {
    names.push_back(name);
    ASSERT_TRUE(python.contains(name)) << name;
    EXPECT_TRUE(bitwise_equal(python.tensor(name), t)) << name;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(python.tensor_names(), names);
}

}  // namespace
}  // namespace qtrain::engine::io
