// Tests for engine/config/run_config: defaults, a config that sets every key, path resolution,
// --set overrides, a table of broken configs with the message each must give (place, key, value,
// fix), an axolotl-style config, the to_yaml round trip, and docs/CONFIG.md listing every key.
#include "engine/config/run_config.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/dataset_split.h"
#include "engine/config/run_config_table.h"
#include "engine/io/remove_tree.h"
#include "engine/text/named_chat_template.h"
#include "tests/expect_error.h"

namespace qtrain::engine::config {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

const fs::path kBase = "/cfg/run";

// A dataset entry with the defaults of every other key.
DatasetConfig dataset_config(const fs::path& path, const std::string& type, const std::string& field) {
  DatasetConfig d;
  d.path = path;
  d.type = type;
  d.field = field;
  return d;
}

RunConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_run_config(text, "run.yaml", kBase, overrides);
}

// The least a valid config needs: a base and what to put LoRA on.
const std::string kMinimal = "base_model: model\nlora_target_modules: [q_proj]\n";

// Sets every key to a value other than its default.
const std::string kFull = R"(# a QLoRA run
base_model: ../models/llama
load_in_4bit: true
load_in_8bit: false
bnb_4bit_quant_type: fp4
bnb_4bit_use_double_quant: false
bnb_4bit_blocksize: 128
llm_int8_threshold: 5.5
int8_compute: llm_int8
model_config:
  output_router_logits: true
  router_aux_loss_coef: 0.02
adapter: qlora
lora_r: 32
lora_alpha: 64
lora_dropout: 0.05
lora_target_modules:
  - q_proj
  - self_attn.v_proj
lora_target_linear: true
peft_use_rslora: true
lora_rank_pattern:
  ".*\\.o_proj": 64
  q_proj: 8
lora_alpha_pattern: {k_proj: 3.5}
lora_model_dir: /adapters/start
datasets:
  - path: data/train.jsonl
    type: completion
    field: body
  - path: /data/alpaca.jsonl
    type: alpaca
  - path: tokens.jsonl
sequence_len: 4096
sample_packing: true
train_on_inputs: true
dataset_processes: 3
val_set_size: 0.05
micro_batch_size: 2
gradient_accumulation_steps: 4
num_epochs: 3
max_steps: 1000
learning_rate: 1e-4
lr_scheduler: linear
warmup_steps: 0
warmup_ratio: 0.1
optimizer: adamw
adam_beta1: 0.8
adam_beta2: 0.95
adam_epsilon: 1e-6
weight_decay: 0.01
max_grad_norm: 0.5
gradient_checkpointing: every_kth
gradient_checkpointing_every_k: 2
bf16: auto
fp16: false
device: cuda:1
offload_layers: 4
offload_prefetch_depth: 2
gpu_memory_limit: 20GiB
output_dir: out/run1
save_steps: 100
save_total_limit: 3
logging_steps: 10
eval_steps: 50
seed: 7
resume_from_checkpoint: out/run1/checkpoint-100
use_tensorboard: true
)";

TEST(RunConfigTest, DefaultsOfAMinimalConfig) {
  const RunConfig c = parse(kMinimal);
  RunConfig expected;
  expected.base_model = "/cfg/run/model";
  expected.lora_target_modules = {"q_proj"};
  expected.output_dir = "/cfg/run/outputs";
  EXPECT_EQ(c, expected);
  // The documented defaults, spelled out.
  EXPECT_FALSE(c.load_in_4bit);
  EXPECT_FALSE(c.load_in_8bit);
  EXPECT_EQ(c.bnb_4bit_quant_type, "nf4");
  EXPECT_TRUE(c.bnb_4bit_use_double_quant);
  EXPECT_EQ(c.bnb_4bit_blocksize, 64);
  EXPECT_EQ(c.llm_int8_threshold, 6.0);
  EXPECT_EQ(c.int8_compute, "dequantize");
  EXPECT_EQ(c.adapter, "lora");
  EXPECT_EQ(c.lora_r, 8);
  EXPECT_EQ(c.lora_alpha, 16);
  EXPECT_EQ(c.lora_dropout, 0.0);
  EXPECT_FALSE(c.lora_target_linear);
  EXPECT_FALSE(c.peft_use_rslora);
  EXPECT_TRUE(c.lora_model_dir.empty());
  EXPECT_TRUE(c.datasets.empty());
  EXPECT_EQ(c.sequence_len, 2048);
  EXPECT_FALSE(c.sample_packing);
  EXPECT_FALSE(c.train_on_inputs);
  EXPECT_EQ(c.val_set_size, 0.0);
  EXPECT_EQ(c.micro_batch_size, 1);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_EQ(c.num_epochs, 1);
  EXPECT_EQ(c.max_steps, -1);
  EXPECT_EQ(c.learning_rate, 2e-4);
  EXPECT_EQ(c.lr_scheduler, "cosine");
  EXPECT_EQ(c.warmup_steps, 0);
  EXPECT_EQ(c.warmup_ratio, 0.0);
  EXPECT_EQ(c.optimizer, "adamw_torch");
  EXPECT_EQ(c.adam_beta1, 0.9);
  EXPECT_EQ(c.adam_beta2, 0.999);
  EXPECT_EQ(c.adam_epsilon, 1e-8);
  EXPECT_EQ(c.weight_decay, 0.0);
  EXPECT_EQ(c.max_grad_norm, 1.0);
  EXPECT_EQ(c.gradient_checkpointing, GradientCheckpointing::every_layer);
  EXPECT_EQ(c.gradient_checkpointing_every_k, 1);
  EXPECT_EQ(c.bf16, Bf16::off);
  EXPECT_FALSE(c.fp16);
  EXPECT_EQ(c.device, "auto");
  EXPECT_EQ(c.offload_layers, 0);
  EXPECT_FALSE(c.offload_layers_auto);
  EXPECT_EQ(c.offload_prefetch_depth, 1);
  EXPECT_EQ(c.gpu_memory_limit, 0);
  EXPECT_EQ(c.save_steps, 0);
  EXPECT_EQ(c.save_total_limit, 0);
  EXPECT_EQ(c.dataset_processes, 0);
  EXPECT_EQ(c.logging_steps, 1);
  EXPECT_EQ(c.eval_steps, 0);
  EXPECT_EQ(c.seed, 42);
  EXPECT_TRUE(c.resume_from_checkpoint.empty());
  EXPECT_FALSE(c.resume_from_latest_checkpoint);
  EXPECT_FALSE(c.use_tensorboard);
}

TEST(RunConfigTest, AdapterDefaultFollowsLoadIn4bit) {
  EXPECT_EQ(parse(kMinimal + "load_in_4bit: true\n").adapter, "qlora");
  EXPECT_EQ(parse(kMinimal + "load_in_8bit: true\n").adapter, "lora");
}

TEST(RunConfigTest, NullValuesMeanTheDefault) {
  const RunConfig c = parse(kMinimal + "lora_r:\nlora_model_dir: ~\nseed: null\n");
  EXPECT_EQ(c.lora_r, 8);
  EXPECT_TRUE(c.lora_model_dir.empty());
  EXPECT_EQ(c.seed, 42);
}

TEST(RunConfigTest, FullConfig) {
  const RunConfig c = parse(kFull);
  EXPECT_EQ(c.base_model, "/cfg/models/llama");
  EXPECT_TRUE(c.load_in_4bit);
  EXPECT_FALSE(c.load_in_8bit);
  EXPECT_EQ(c.bnb_4bit_quant_type, "fp4");
  EXPECT_FALSE(c.bnb_4bit_use_double_quant);
  EXPECT_EQ(c.bnb_4bit_blocksize, 128);
  EXPECT_EQ(c.llm_int8_threshold, 5.5);
  EXPECT_EQ(c.int8_compute, "llm_int8");
  EXPECT_EQ(c.output_router_logits, true);
  EXPECT_EQ(c.router_aux_loss_coef, 0.02);
  EXPECT_EQ(parse(kMinimal).output_router_logits, std::nullopt);
  // axolotl's older spelling of model_config reads the same.
  const auto older = parse(std::string(kMinimal) +
                           "overrides_of_model_config: {output_router_logits: true, router_aux_loss_coef: 0.5}\n");
  EXPECT_EQ(older.output_router_logits, true);
  EXPECT_EQ(older.router_aux_loss_coef, 0.5);
  EXPECT_EQ(c.adapter, "qlora");
  EXPECT_EQ(c.lora_r, 32);
  EXPECT_EQ(c.lora_alpha, 64);
  EXPECT_EQ(c.lora_dropout, 0.05);
  EXPECT_EQ(c.lora_target_modules, (std::vector<std::string>{"q_proj", "self_attn.v_proj"}));
  EXPECT_TRUE(c.lora_target_linear);
  EXPECT_TRUE(c.peft_use_rslora);
  // In the order written (the first pattern that matches wins).
  EXPECT_EQ(c.lora_rank_pattern, (std::vector<std::pair<std::string, int64_t>>{{".*\\.o_proj", 64}, {"q_proj", 8}}));
  EXPECT_EQ(c.lora_alpha_pattern, (std::vector<std::pair<std::string, double>>{{"k_proj", 3.5}}));
  EXPECT_EQ(c.lora_model_dir, "/adapters/start");
  ASSERT_EQ(c.datasets.size(), 3u);
  EXPECT_EQ(c.datasets[0], dataset_config("/cfg/run/data/train.jsonl", "completion", "body"));
  EXPECT_EQ(c.datasets[1], dataset_config("/data/alpaca.jsonl", "alpaca", "text"));
  EXPECT_EQ(c.datasets[2], dataset_config("/cfg/run/tokens.jsonl", "", "text"));
  EXPECT_EQ(c.sequence_len, 4096);
  EXPECT_TRUE(c.sample_packing);
  EXPECT_TRUE(c.train_on_inputs);
  EXPECT_EQ(c.dataset_processes, 3);
  EXPECT_EQ(c.val_set_size, 0.05);
  EXPECT_EQ(c.micro_batch_size, 2);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.num_epochs, 3);
  EXPECT_EQ(c.max_steps, 1000);
  EXPECT_EQ(c.learning_rate, 1e-4);
  EXPECT_EQ(c.lr_scheduler, "linear");
  EXPECT_EQ(c.warmup_steps, 0);
  EXPECT_EQ(c.warmup_ratio, 0.1);
  EXPECT_EQ(c.optimizer, "adamw_torch");  // "adamw" is read as adamw_torch
  EXPECT_EQ(c.adam_beta1, 0.8);
  EXPECT_EQ(c.adam_beta2, 0.95);
  EXPECT_EQ(c.adam_epsilon, 1e-6);
  EXPECT_EQ(c.weight_decay, 0.01);
  EXPECT_EQ(c.max_grad_norm, 0.5);
  EXPECT_EQ(c.gradient_checkpointing, GradientCheckpointing::every_kth);
  EXPECT_EQ(c.gradient_checkpointing_every_k, 2);
  EXPECT_EQ(c.bf16, Bf16::automatic);
  EXPECT_FALSE(c.fp16);
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_EQ(c.offload_layers, 4);
  EXPECT_FALSE(c.offload_layers_auto);
  EXPECT_EQ(c.offload_prefetch_depth, 2);
  EXPECT_EQ(c.gpu_memory_limit, int64_t{20} << 30);
  EXPECT_EQ(c.output_dir, "/cfg/run/out/run1");
  EXPECT_EQ(c.save_steps, 100);
  EXPECT_EQ(c.save_total_limit, 3);
  EXPECT_EQ(c.logging_steps, 10);
  EXPECT_EQ(c.eval_steps, 50);
  EXPECT_EQ(c.seed, 7);
  EXPECT_EQ(c.resume_from_checkpoint, "/cfg/run/out/run1/checkpoint-100");
  EXPECT_FALSE(c.resume_from_latest_checkpoint);
  EXPECT_TRUE(c.use_tensorboard);
}

TEST(RunConfigTest, ScalarSpellings) {
  // YAML 1.1 booleans as PyYAML reads them; numbers in exponent form (PyYAML keeps `2e-4` a
  // string, axolotl converts it); a whole val_set_size is a row count; quoted numbers are read.
  const RunConfig c = parse(kMinimal +
                            "load_in_8bit: yes\nsample_packing: On\nuse_tensorboard: TRUE\nfp16: off\n"
                            "learning_rate: 2e-4\nlora_alpha: 16.5\nval_set_size: 500\nlora_r: \"16\"\n"
                            "resume_from_checkpoint: true\ngradient_checkpointing: false\nbf16: true\n"
                            "device: cpu\nmax_steps: +20\n");
  EXPECT_TRUE(c.load_in_8bit);
  EXPECT_TRUE(c.sample_packing);
  EXPECT_TRUE(c.use_tensorboard);
  EXPECT_FALSE(c.fp16);
  EXPECT_EQ(c.learning_rate, 2e-4);
  EXPECT_EQ(c.lora_alpha, 16.5);
  EXPECT_EQ(c.val_set_size, 500);
  EXPECT_EQ(c.lora_r, 16);
  EXPECT_TRUE(c.resume_from_latest_checkpoint);
  EXPECT_TRUE(c.resume_from_checkpoint.empty());
  EXPECT_EQ(c.gradient_checkpointing, GradientCheckpointing::off);
  EXPECT_EQ(c.bf16, Bf16::on);
  EXPECT_EQ(c.device, "cpu");
  EXPECT_EQ(c.max_steps, 20);
}

TEST(RunConfigTest, OffloadAndMemoryLimit) {
  const RunConfig a = parse(kMinimal + "offload_layers: auto\ngpu_memory_limit: 24GB\n");
  EXPECT_TRUE(a.offload_layers_auto);
  EXPECT_EQ(a.offload_layers, 0);
  EXPECT_EQ(a.gpu_memory_limit, int64_t{24'000'000'000});
  // axolotl's convention: a bare number is GiB.
  EXPECT_EQ(parse(kMinimal + "gpu_memory_limit: 20\n").gpu_memory_limit, int64_t{20} << 30);
  EXPECT_EQ(parse(kMinimal + "gpu_memory_limit: 1.5 gib\n").gpu_memory_limit, int64_t{3} << 29);
  EXPECT_EQ(parse(kMinimal + "gpu_memory_limit: 512MiB\n").gpu_memory_limit, int64_t{512} << 20);
  EXPECT_EQ(parse(kMinimal + "gpu_memory_limit:\n").gpu_memory_limit, 0);
  EXPECT_EQ(parse(kMinimal + "gpu_memory_limit: 0\n").gpu_memory_limit, 0);
  const RunConfig n = parse(kMinimal, {"offload_layers=12", "offload_prefetch_depth=3"});
  EXPECT_FALSE(n.offload_layers_auto);
  EXPECT_EQ(n.offload_layers, 12);
  EXPECT_EQ(n.offload_prefetch_depth, 3);
  // A prefetch depth with auto is fine even if auto then offloads nothing.
  EXPECT_EQ(parse(kMinimal, {"offload_layers=auto", "offload_prefetch_depth=2"}).offload_prefetch_depth, 2);
  // Offloaded activations and a sharded base's gathers run that far ahead too.
  EXPECT_EQ(
      parse(kMinimal + "gradient_checkpointing: true\n", {"activation_offloading=true", "offload_prefetch_depth=2"})
          .offload_prefetch_depth,
      2);
  EXPECT_EQ(parse(kMinimal, {"shard_base=true", "offload_prefetch_depth=3"}).offload_prefetch_depth, 3);
}

class RunConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("qtrain_run_config_test_" + std::to_string(::getpid()));
    qtrain::engine::io::remove_tree(dir_);
    fs::create_directories(dir_ / "configs");
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  fs::path dir_;
};

TEST_F(RunConfigFileTest, RelativePathsResolveAgainstTheConfigsDirectory) {
  const fs::path file = write("configs/run.yaml",
                              "base_model: ../models/llama\n"
                              "lora_target_linear: true\n"
                              "lora_model_dir: ./adapters/../adapters/start\n"
                              "datasets:\n  - path: data.jsonl\n  - path: /abs/data.jsonl\n"
                              "output_dir: ../outputs\n"
                              "resume_from_checkpoint: ../outputs/checkpoint-5\n");
  const RunConfig c = load_run_config(file);
  EXPECT_EQ(c.base_model, dir_ / "models" / "llama");
  EXPECT_EQ(c.lora_model_dir, dir_ / "configs" / "adapters" / "start");
  ASSERT_EQ(c.datasets.size(), 2u);
  EXPECT_EQ(c.datasets[0].path, dir_ / "configs" / "data.jsonl");
  EXPECT_EQ(c.datasets[1].path, "/abs/data.jsonl");
  EXPECT_EQ(c.output_dir, dir_ / "outputs");
  EXPECT_EQ(c.resume_from_checkpoint, dir_ / "outputs" / "checkpoint-5");
  // The default output_dir is ./outputs beside the config; --set paths resolve the same way.
  const RunConfig d = load_run_config(file, {"output_dir=", "lora_model_dir=other"});
  EXPECT_EQ(d.output_dir, dir_ / "configs" / "outputs");
  EXPECT_EQ(d.lora_model_dir, dir_ / "configs" / "other");
}

TEST_F(RunConfigFileTest, MissingFileNamesIt) {
  expect_error(
      [&] { load_run_config(dir_ / "nope.yaml"); },
      (dir_ / "nope.yaml").string() + ": cannot read the run config (No such file or directory); check the path");
}

TEST_F(RunConfigFileTest, ErrorsNameTheFileAsGiven) {
  const fs::path file = write("configs/bad.yaml", "base_model: m\nlora_rank: 4\n");
  expect_error([&] { load_run_config(file); },
               file.string() + ":2:1: lora_rank: unknown key 'lora_rank'; did you mean 'lora_r'?");
}

TEST(RunConfigTest, Overrides) {
  // A scalar replaces the file's value; a list; a list of maps; later --set wins.
  const RunConfig c = parse(kMinimal + "lora_r: 4\n",
                            {"lora_r=16",
                             "lora_target_modules=[q_proj,v_proj]",
                             "datasets=[{path: data.jsonl, type: alpaca}, {path: b.jsonl}]",
                             "seed=1",
                             "seed=2",
                             "learning_rate=3e-4",
                             "bf16=auto",
                             "deepspeed="});  // an unsupported key turned off is accepted
  EXPECT_EQ(c.lora_r, 16);
  EXPECT_EQ(c.lora_target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  ASSERT_EQ(c.datasets.size(), 2u);
  EXPECT_EQ(c.datasets[0], dataset_config("/cfg/run/data.jsonl", "alpaca", "text"));
  EXPECT_EQ(c.datasets[1].path, "/cfg/run/b.jsonl");
  EXPECT_EQ(c.seed, 2);
  EXPECT_EQ(c.learning_rate, 3e-4);
  EXPECT_EQ(c.bf16, Bf16::automatic);
  // An override may supply a key the file lacks, even a required one.
  EXPECT_EQ(parse("lora_target_linear: true\n", {"base_model=/m"}).base_model, "/m");
  // A value with '=' in it keeps everything after the first '='.
  EXPECT_EQ(parse(kMinimal, {"output_dir=/runs/a=b"}).output_dir, "/runs/a=b");
}

// An axolotl example config (examples/llama-3/qlora.yml, paths made local) reads with no edits
// beyond the paths: its blank and false unsupported keys ask for nothing.
TEST(RunConfigTest, AxolotlStyleConfig) {
  const RunConfig c = parse(R"(base_model: ./Meta-Llama-3-8B
model_type: 
tokenizer_type:
load_in_8bit: false
load_in_4bit: true
strict: false
bnb_config_kwargs:
  bnb_4bit_quant_type: nf4
  bnb_4bit_use_double_quant: true
  llm_int8_has_fp16_weight: false
datasets:
  - path: alpaca_2k.jsonl
    type: alpaca
    split:
dataset_prepared_path:
val_set_size: 0
output_dir: ./outputs/qlora-out
adapter: qlora
lora_model_dir:
sequence_len: 4096
sample_packing: true
eval_sample_packing: false
pad_to_sequence_len: false
lora_r: 32
lora_alpha: 16
lora_dropout: 0.05
lora_target_modules:
lora_target_linear: true
lora_fan_in_fan_out:
wandb_project:
wandb_entity:
wandb_watch:
wandb_name:
wandb_log_model:
gradient_accumulation_steps: 4
micro_batch_size: 2
num_epochs: 4
optimizer: adamw_torch
lr_scheduler: cosine
learning_rate: 0.0002
train_on_inputs: false
group_by_length: false
bf16: auto
fp16:
tf32: false
gradient_checkpointing: true
early_stopping_patience:
resume_from_checkpoint:
local_rank:
logging_steps: 1
xformers_attention:
flash_attention: false
warmup_ratio: 0.1
debug:
deepspeed:
weight_decay: 0.0
fsdp:
fsdp_config:
special_tokens:
)");
  EXPECT_EQ(c.base_model, "/cfg/run/Meta-Llama-3-8B");
  EXPECT_EQ(c.adapter, "qlora");
  EXPECT_EQ(c.bnb_4bit_quant_type, "nf4");
  EXPECT_TRUE(c.bnb_4bit_use_double_quant);
  EXPECT_TRUE(c.lora_target_modules.empty());
  EXPECT_TRUE(c.lora_target_linear);
  EXPECT_EQ(c.warmup_ratio, 0.1);
  EXPECT_FALSE(c.resume_from_latest_checkpoint);
}

struct BadConfig {
  std::string yaml;
  std::vector<std::string> overrides;
  std::string fragment;
};

// Most rows start from a valid head (lines 1 and 2), so their own text begins at line 3.
const std::string kHead = "base_model: m\nlora_target_linear: true\n";

TEST(RunConfigTest, BadConfigsNameThePlaceTheValueAndTheFix) {
  const std::vector<BadConfig> table = {
      // unknown keys, with and without a suggestion
      {kHead + "lora_rank: 16\n", {}, "run.yaml:3:1: lora_rank: unknown key 'lora_rank'; did you mean 'lora_r'?"},
      {kHead + "learning_rte: 1e-4\n",
       {},
       "run.yaml:3:1: learning_rte: unknown key 'learning_rte'; did you mean 'learning_rate'?"},
      {kHead + "zzzzzz: 1\n", {}, "run.yaml:3:1: zzzzzz: unknown key 'zzzzzz'; the keys are listed in docs/CONFIG.md"},
      // model_config: only the load-balancing loss's two values
      {kHead + "model_config: {num_experts: 4}\n",
       {},
       "run.yaml:3:16: model_config.num_experts: qtrain reads only output_router_logits and router_aux_loss_coef "
       "from model_config; change other values in the model's config.json"},
      {kHead + "model_config: {router_aux_loss_coef: -1}\n", {}, "model_config.router_aux_loss_coef: "},
      {kHead + "model_config: true\n", {}, "model_config: expected a map, got 'true'"},
      {kHead + "overrides_of_model_config: {num_experts: 4}\n",
       {},
       "run.yaml:3:29: overrides_of_model_config.num_experts: qtrain reads only output_router_logits and "
       "router_aux_loss_coef"},
      {kHead + "model_config: {output_router_logits: true}\noverrides_of_model_config: {output_router_logits: true}\n",
       {},
       "run.yaml:4:1: overrides_of_model_config: model_config is given too (at run.yaml:3:1); "
       "overrides_of_model_config is its older spelling: keep one of them"},
      // wrong types
      {kHead + "lora_r: abc\n", {}, "run.yaml:3:9: lora_r: expected an integer, got 'abc'; use a rank of 1 or more"},
      {kHead + "lora_r: 1.5\n", {}, "run.yaml:3:9: lora_r: expected an integer, got '1.5'"},
      {kHead + "lora_r: +-5\n", {}, "run.yaml:3:9: lora_r: expected an integer, got '+-5'"},
      {kHead + "lora_alpha: .inf\n", {}, "run.yaml:3:13: lora_alpha: expected a number, got '.inf'"},
      {kHead + "lora_alpha: nan\n", {}, "run.yaml:3:13: lora_alpha: expected a number, got 'nan'"},
      {kHead + "load_in_4bit: maybe\n", {}, "run.yaml:3:15: load_in_4bit: expected true or false, got 'maybe'"},
      {kHead + "learning_rate: [1]\n", {}, "run.yaml:3:16: learning_rate: expected a number, got a list"},
      {kHead + "lora_target_modules: q_proj\n",
       {},
       "run.yaml:3:22: lora_target_modules: 'q_proj' is one string, which PEFT reads as a regular expression the "
       "whole module name must match, and no module name such as model.layers.0.self_attn.q_proj is just that; "
       "write a list, e.g. [q_proj], or a pattern, e.g. .*\\.q_proj"},
      {kHead + "lora_target_modules: '(?<=x)q_proj'\n",
       {},
       "run.yaml:3:22: lora_target_modules: '(?<=x)q_proj' is not a regular expression qtrain can read"},
      {kHead + "lora_target_modules: {q: 1}\n",
       {},
       "run.yaml:3:22: lora_target_modules: expected a list of module names, got a map; write e.g. [q_proj, v_proj]"},
      {kHead + "lora_target_modules: [q_proj, '.*_proj']\n",
       {},
       "run.yaml:3:31: lora_target_modules[1]: '.*_proj' is not a module name"},
      {kHead + "gradient_checkpointing: sometimes\n",
       {},
       "run.yaml:3:25: gradient_checkpointing: expected true, false, offload or every_kth, got 'sometimes'"},
      {kHead + "bf16: maybe\n", {}, "bf16: expected true, false or auto, got 'maybe'"},
      {kHead + "device: gpu\n", {}, "run.yaml:3:9: device: expected auto, cpu, cuda or cuda:N, got 'gpu'"},
      {kHead + "device: cuda:x\n", {}, "device: expected auto, cpu, cuda or cuda:N, got 'cuda:x'"},
      {kHead + "offload_layers: some\n",
       {},
       "run.yaml:3:17: offload_layers: expected an integer, got 'some'; use auto (as few layers as fit "
       "gpu_memory_limit) or a number of layers, 0 for none"},
      {kHead + "offload_layers: -1\n", {}, "run.yaml:3:17: offload_layers: -1 must be >= 0; use auto"},
      {kHead + "offload_prefetch_depth: 0\n",
       {},
       "run.yaml:3:25: offload_prefetch_depth: 0 must be >= 1; use 1 (copy the next offloaded layer while one "
       "computes) or more"},
      {kHead + "offload_prefetch_depth: 2\n",
       {},
       "run.yaml:3:1: offload_prefetch_depth: 2 has no effect without offloaded layers, activation offloading or a "
       "sharded base; set offload_layers (auto or a number), or remove this key"},
      {kHead + "gpu_memory_limit: lots\n",
       {},
       "run.yaml:3:19: gpu_memory_limit: expected a size such as 20GiB, 24GB or 20 (GiB), got 'lots'; 0 or blank: "
       "the whole device"},
      {kHead + "gpu_memory_limit: -4GiB\n", {}, "gpu_memory_limit: expected a size such as 20GiB"},
      {kHead + "gpu_memory_limit: 20 GiBs\n", {}, "gpu_memory_limit: expected a size such as 20GiB"},
      {kHead + "gpu_memory_limit: [20GiB]\n",
       {},
       "gpu_memory_limit: expected a size such as 20GiB, 24GB or 20 (GiB), got a list"},
      // ranges
      {kHead + "lora_dropout: 1.5\n",
       {},
       "run.yaml:3:15: lora_dropout: 1.5 is outside [0, 1); use a value from 0 (off) to below 1"},
      {kHead + "lora_r: 0\n", {}, "run.yaml:3:9: lora_r: 0 is outside [1, 65536]; use a rank of 1 or more"},
      {kHead + "learning_rate: -1e-4\n", {}, "learning_rate: -1e-4 is outside (0, 10]"},
      {kHead + "bnb_4bit_blocksize: 8192\n", {}, "run.yaml:3:21: bnb_4bit_blocksize: 8192 is outside [32, 4096]"},
      {kHead + "bnb_4bit_blocksize: 96\n", {}, "run.yaml:3:21: bnb_4bit_blocksize: 96 is not a power of 2"},
      {kHead + "val_set_size: 2.5\n",
       {},
       "run.yaml:3:15: val_set_size: 2.5 is neither a fraction in [0, 1) nor a whole number of rows >= 1"},
      {kHead + "val_set_size: -0.1\n", {}, "val_set_size: -0.1 must be >= 0"},
      {kHead + "dataset_num_proc: 4\n",
       {},
       "qtrain reads the tokenizing threads as dataset_processes (axolotl's older name); rename the key"},
      {kHead + "dataset_processes: -2\n",
       {},
       "run.yaml:3:20: dataset_processes: -2 is outside [0, 4096]; use the threads that tokenize rows, or 0 for every "
       "core"},
      {kHead + "max_steps: 0\n", {}, "run.yaml:3:12: max_steps: 0 is neither -1 (run num_epochs) nor a step count"},
      // bounds beyond any real run (engine/config/run_limits.h, docs/RELIABILITY.md)
      {kHead + "learning_rate: 1e308\n",
       {},
       "run.yaml:3:16: learning_rate: 1e308 is outside (0, 10]; use a positive rate, e.g. 2e-4 for LoRA (a rate above "
       "10 diverges at the first step)"},
      {kHead + "learning_rate: 0\n", {}, "run.yaml:3:16: learning_rate: 0 is outside (0, 10]"},
      {kHead + "learning_rate: .nan\n", {}, "run.yaml:3:16: learning_rate: expected a number, got '.nan'"},
      {kHead + "learning_rate: -.inf\n", {}, "run.yaml:3:16: learning_rate: expected a number, got '-.inf'"},
      {kHead + "learning_rate: 1e999\n", {}, "run.yaml:3:16: learning_rate: expected a number, got '1e999'"},
      {kHead + "max_steps: 9223372036854775807\n",
       {},
       "run.yaml:3:12: max_steps: 9223372036854775807 is outside [-1, 1000000000]; use -1 (run num_epochs)"},
      {kHead + "max_steps: 9223372036854775808\n",
       {},
       "run.yaml:3:12: max_steps: expected an integer, got '9223372036854775808'"},
      {kHead + "max_steps: -5\n", {}, "run.yaml:3:12: max_steps: -5 is outside [-1, 1000000000]"},
      {kHead + "num_epochs: 0\n", {}, "run.yaml:3:13: num_epochs: 0 is outside [1, 1000000]"},
      {kHead + "num_epochs: 4611686018427387904\n", {}, "num_epochs: 4611686018427387904 is outside [1, 1000000]"},
      {kHead + "gradient_accumulation_steps: 4611686018427387904\n",
       {},
       "run.yaml:3:30: gradient_accumulation_steps: 4611686018427387904 is outside [1, 1048576]; use the "
       "micro-batches per optimizer step"},
      {kHead + "gradient_accumulation_steps: 0\n", {}, "gradient_accumulation_steps: 0 is outside [1, 1048576]"},
      {kHead + "micro_batch_size: 0\n", {}, "run.yaml:3:19: micro_batch_size: 0 is outside [1, 65536]"},
      {kHead + "micro_batch_size: 1000000\n", {}, "micro_batch_size: 1000000 is outside [1, 65536]"},
      {kHead + "sequence_len: 0\n", {}, "run.yaml:3:15: sequence_len: 0 is outside [1, 16777216]"},
      {kHead + "sequence_len: 4611686018427387904\n", {}, "sequence_len: 4611686018427387904 is outside [1, 16777216]"},
      {kHead + "micro_batch_size: 65536\nsequence_len: 65536\n",
       {},
       "run.yaml:3:1: micro_batch_size: micro_batch_size 65536 * sequence_len 65536 = 4294967296 tokens in one forward "
       "pass, more than 2^31 that qtrain accepts; lower micro_batch_size or sequence_len and raise "
       "gradient_accumulation_steps"},
      {kHead + "micro_batch_size: 1024\nsequence_len: 1048576\ngradient_accumulation_steps: 1048576\n",
       {},
       "run.yaml:5:1: gradient_accumulation_steps: micro_batch_size 1024 * sequence_len 1048576 * "
       "gradient_accumulation_steps 1048576 = 1125899906842624 tokens per optimizer step, more than 2^34 that qtrain "
       "accepts; lower gradient_accumulation_steps"},
      {kHead + "warmup_steps: -1\n", {}, "run.yaml:3:15: warmup_steps: -1 is outside [0, 1000000000]"},
      {kHead + "warmup_steps: 2000000000\n", {}, "warmup_steps: 2000000000 is outside [0, 1000000000]"},
      {kHead + "save_steps: -3\n", {}, "run.yaml:3:13: save_steps: -3 is outside [0, 1000000000]"},
      {kHead + "save_steps: 9223372036854775807\n", {}, "save_steps: 9223372036854775807 is outside [0, 1000000000]"},
      {kHead + "eval_steps: -1\n", {}, "run.yaml:3:13: eval_steps: -1 is outside [0, 1000000000]"},
      {kHead + "eval_steps: 9223372036854775807\n", {}, "eval_steps: 9223372036854775807 is outside [0, 1000000000]"},
      {kHead + "logging_steps: 0\n", {}, "run.yaml:3:16: logging_steps: 0 is outside [1, 1000000000]"},
      {kHead + "saves_per_epoch: 4611686018427387904\n",
       {},
       "saves_per_epoch: 4611686018427387904 is outside [0, 1000000]"},
      {kHead + "evals_per_epoch: 4611686018427387904\n",
       {},
       "evals_per_epoch: 4611686018427387904 is outside [0, 1000000]"},
      {kHead + "lora_r: 4611686018427387904\n", {}, "run.yaml:3:9: lora_r: 4611686018427387904 is outside [1, 65536]"},
      {kHead + "dataset_processes: 1000000\n", {}, "dataset_processes: 1000000 is outside [0, 4096]"},
      {kHead + "ddp_timeout: 4611686018427387904\n", {}, "ddp_timeout: 4611686018427387904 is outside [1, 10000000]"},
      {kHead + "output_dir: ''\n", {}, "run.yaml:3:13: output_dir: empty; set a folder"},
      // choices
      {kHead + "lr_scheduler: cosin\n",
       {},
       "run.yaml:3:15: lr_scheduler: 'cosin' is not one of constant, linear, cosine; did you mean 'cosine'?"},
      {kHead + "optimizer: lion_8bit\n",
       {},
       "run.yaml:3:12: optimizer: 'lion_8bit' is not one of adamw_torch, adamw_bnb_8bit; qtrain implements AdamW: "
       "use adamw_torch"},
      {kHead + "bnb_4bit_quant_type: int4\n", {}, "bnb_4bit_quant_type: 'int4' is not one of nf4, fp4"},
      // contradictions
      {kHead + "load_in_4bit: true\nload_in_8bit: true\n",
       {},
       "run.yaml:4:1: load_in_8bit: load_in_4bit (run.yaml:3:1) and load_in_8bit are both true"},
      {kHead + "adapter: qlora\n", {}, "run.yaml:3:1: adapter: qlora needs load_in_4bit: true (it is false)"},
      {kHead + "load_in_4bit: true\nadapter: lora\n",
       {},
       "run.yaml:4:1: adapter: lora with load_in_4bit: true is QLoRA; write adapter: qlora"},
      {kHead + "adapter:\n",
       {},
       "run.yaml:3:1: adapter: blank (axolotl's full fine-tune); qtrain trains LoRA adapters only"},
      {kHead + "bf16: true\nfp16: true\n",
       {},
       "run.yaml:4:1: fp16: fp16 and bf16 (run.yaml:3:1) are both on; choose one"},
      {kHead + "warmup_steps: 10\nwarmup_ratio: 0.1\n",
       {},
       "run.yaml:4:1: warmup_ratio: warmup_steps (10, at run.yaml:3:1) and warmup_ratio are both set; keep one"},
      {"base_model: m\nlora_target_modules: []\n",
       {},
       "run.yaml:2:1: lora_target_modules: no LoRA target modules; list them"},
      {"base_model: m\n", {}, "run.yaml: lora_target_modules: no LoRA target modules"},
      {kHead + "lora_rank_pattern: {q_proj: 0}\n", {}, "lora_rank_pattern.q_proj: 0 is outside [1, 65536]"},
      {kHead + "lora_alpha_pattern: [q_proj]\n",
       {},
       "run.yaml:3:21: lora_alpha_pattern: expected a map of module-name patterns, got a list"},
      {kHead + "lora_rank_pattern: {'(?<=a)q': 4}\n",
       {},
       "lora_rank_pattern.(?<=a)q: '(?<=a)q' is not a regular expression qtrain can read"},
      {kHead + "lora_target_parameters: [mlp.experts.down_proj]\nlora_dropout: 0.05\n",
       {},
       "run.yaml:4:1: lora_dropout: LoRA on parameters (lora_target_parameters, MoE experts) has no dropout"},
      {kHead + "gradient_checkpointing_every_k: 3\n",
       {},
       "run.yaml:3:1: gradient_checkpointing_every_k: 3 has no effect unless gradient_checkpointing: every_kth"},
      {kHead + "eval_steps: 10\n",
       {},
       "run.yaml:3:1: eval_steps: evaluating every 10 steps needs held-out rows, but val_set_size is 0"},
      // required keys
      {"lora_target_linear: true\n", {}, "run.yaml: base_model: missing; set it to a local Hugging Face model folder"},
      {"base_model: ''\nlora_target_linear: true\n", {}, "run.yaml:1:1: base_model: missing"},
      // unsupported axolotl keys
      {kHead + "deepspeed: deepspeed_configs/zero3.json\n",
       {},
       "run.yaml:3:1: deepspeed: axolotl key 'deepspeed' is not supported by qtrain; qtrain's multi-GPU runs do not "
       "use DeepSpeed or FSDP"},
      {kHead + "relora_steps: 100\n",
       {},
       "run.yaml:3:1: relora_steps: axolotl key 'relora_steps' is not supported by qtrain; ReLoRA is not supported"},
      {kHead + "layer_offloading: true\n",
       {},
       "run.yaml:3:1: layer_offloading: axolotl key 'layer_offloading' is not supported by qtrain; qtrain streams "
       "layers from host RAM with its own keys: offload_layers: auto"},
      {kHead + "wandb_project: my-run\n",
       {},
       "wandb_project: axolotl key 'wandb_project' is not supported by qtrain; qtrain does not log to W&B or MLflow; "
       "use use_tensorboard: true"},
      {kHead + "bnb_config_kwargs:\n  bnb_4bit_compute_dtype: bfloat16\n",
       {},
       "run.yaml:4:3: bnb_config_kwargs.bnb_4bit_compute_dtype: qtrain reads only bnb_4bit_quant_type"},
      // duplicates
      {kHead + "lora_r: 8\nlora_r: 16\n",
       {},
       "run.yaml:4:1: lora_r: duplicate key (first at run.yaml:3:1); keep one of them"},
      {kHead + "bnb_4bit_quant_type: nf4\nbnb_config_kwargs: {bnb_4bit_quant_type: fp4}\n",
       {},
       "run.yaml:4:21: bnb_config_kwargs.bnb_4bit_quant_type: duplicate key (first as bnb_4bit_quant_type at "
       "run.yaml:3:1)"},
      // the file's shape
      {kHead + "lora_target_modules: [q_proj\nlora_r: 8\n", {}, "run.yaml:4:7: invalid YAML: "},
      {"", {}, "run.yaml: the file is empty; a run config is a YAML map"},
      {"# nothing but a comment\n", {}, "run.yaml: the file is empty"},
      {"- base_model: m\n", {}, "run.yaml:1:1: the top level is a list, not a map"},
      {"just a sentence\n", {}, "run.yaml:1:1: the top level is a single value, not a map"},
      {kHead + "---\nlora_r: 8\n", {}, "run.yaml: the file holds 2 YAML documents"},
      // found by fuzz/run_config_fuzz (fuzz/regressions/run_config/stray-comma.yaml): yaml-cpp's LoadAll
      // never returned; see Note [Stray comma] in config_entries.cpp
      {",", {}, "run.yaml: invalid YAML: the parser finds more than 64 documents, which a `,` outside brackets"},
      {"base_model: m\n,\n", {}, "run.yaml:2:1: invalid YAML: "},
      // datasets
      {kHead + "datasets:\n  - type: alpaca\n",
       {},
       "run.yaml:4:5: datasets[0].path: missing; every dataset needs the path of a local file"},
      {kHead + "datasets: data.jsonl\n", {}, "run.yaml:3:11: datasets: expected a list of datasets, got 'data.jsonl'"},
      {kHead + "datasets:\n  - data.jsonl\n",
       {},
       "run.yaml:4:5: datasets[0]: expected a map such as {path: data.jsonl, type: completion}"},
      {kHead + "datasets:\n  - path: a.jsonl\n    typ: alpaca\n",
       {},
       "run.yaml:5:5: datasets[0].typ: unknown key 'typ'; did you mean 'type'?"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: sharegpt\n",
       {},
       "run.yaml:5:11: datasets[0].type: 'sharegpt' is not one of completion, alpaca, input_output, chat_template, "
       "pretokenized"},
      {kHead + "datasets:\n  - path: data/train.parquet\n",
       {},
       "run.yaml:4:11: datasets[0].path: qtrain reads JSON Lines (.jsonl) or a JSON array of rows (.json), not "
       ".parquet; convert it with `python -c \"import pandas as pd; pd.read_parquet('/cfg/run/data/train.parquet')"
       ".to_json('/cfg/run/data/train.jsonl', orient='records', lines=True, force_ascii=False)\"` and set path: "
       "/cfg/run/data/train.jsonl"},
      {kHead + "datasets:\n  - path: tatsu-lab/alpaca\n    type: alpaca\n",
       {},
       "run.yaml:4:11: datasets[0].path: no such local file; qtrain reads local files, not Hugging Face Hub "
       "datasets. If 'tatsu-lab/alpaca' is a Hub dataset, download it with `huggingface-cli download --repo-type "
       "dataset tatsu-lab/alpaca --local-dir data/alpaca` and set path: to the .jsonl or .json file in it"},
      {kHead + "datasets:\n  - path: a.jsonl\n    ds_type: parquet\n",
       {},
       "run.yaml:5:14: datasets[0].ds_type: 'parquet': qtrain reads JSON Lines or a JSON array of rows (ds_type: "
       "json); convert it with `python -c \"import pandas as pd; pd.read_parquet("},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: chat_template\n    train_on_eot: each\n",
       {},
       "run.yaml:6:19: datasets[0].train_on_eot: 'each' is not one of turn, all, last, none"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
               "    message_property_mappings: {role: from}\n    message_field_role: speaker\n",
       {},
       "run.yaml:7:25: datasets[0].message_field_role: 'speaker' conflicts with message_property_mappings.role "
       "'from'; keep only message_property_mappings"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
               "    message_property_mappings: {role: from}\n    field_thinking: thoughts\n",
       {},
       "run.yaml:7:21: datasets[0].field_thinking: axolotl applies field_thinking only without "
       "message_property_mappings; map it there instead: message_property_mappings: {reasoning_content: thoughts}"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: alpaca\n    drop_system_message: true\n",
       {},
       "run.yaml:6:5: datasets[0].drop_system_message: drop_system_message applies only to type: chat_template"},
      {kHead + "excess_length_strategy: split\n",
       {},
       "run.yaml:3:25: excess_length_strategy: 'split' is not one of drop, truncate, raise; use drop (axolotl's "
       "default), truncate or raise"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: chat_template\n    field_system: sys\n",
       {},
       "run.yaml:6:5: datasets[0].field_system: axolotl key 'field_system' is not supported by qtrain; type "
       "chat_template reads a row's top-level \"system\""},
      {kHead + "datasets:\n  - path: a.jsonl\n    data_files: [a.jsonl]\n",
       {},
       "run.yaml:5:5: datasets[0].data_files: axolotl key 'data_files' is not supported by qtrain; give each local "
       "file as the path of its own datasets entry"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: completion\n    roles_to_train: [user]\n",
       {},
       "run.yaml:6:5: datasets[0].roles_to_train: roles_to_train applies only to type: chat_template (this "
       "dataset's type is completion); remove it or set type: chat_template"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: chat_template\n    train_on_eos: every\n",
       {},
       "run.yaml:6:19: datasets[0].train_on_eos: 'every' is not one of turn, all, last, none"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: chat_template\n    chat_template: chatml2\n",
       {},
       "run.yaml:6:20: datasets[0].chat_template: 'chatml2' is not one of tokenizer_default, jinja, chatml"},
      {kHead + "chat_template: chatml3\n",
       {},
       "run.yaml:3:16: chat_template: 'chatml3' is not one of tokenizer_default, jinja, chatml, gemma, gemma3, gemma4, "
       "llama3, mistral_v1"},
      {kHead + "chat_template: chatml3\n", {}, "or jinja with chat_template_jinja (your own template"},
      {kHead + "chat_template: tokenizer_default_fallback_chatml3\n",
       {},
       "chat_template: 'tokenizer_default_fallback_chatml3' is not one of"},
      {kHead + "chat_template: jinja\n", {}, "run.yaml:3:1: chat_template: jinja needs chat_template_jinja"},
      {kHead + "chat_template_jinja: missing.jinja\n",
       {},
       "chat_template_jinja: cannot read '/cfg/run/missing.jinja'; give the path of a .jinja file or the template "
       "text itself"},
      {kHead + "datasets:\n  - path: a.jsonl\n    type: alpaca\n    field: text\n",
       {},
       "run.yaml:6:5: datasets[0].field: field applies only to type: completion"},
      {kHead + "datasets:\n  - path: a.jsonl\n    split: validation\n",
       {},
       "run.yaml:5:12: datasets[0].split: 'validation': a local file has the one split 'train' (as datasets reads "
       "it); write e.g. train[:10%]"},
      {kHead + "datasets:\n  - path: a.jsonl\n    split: train[:10]+train[20:]\n",
       {},
       "run.yaml:5:12: datasets[0].split: 'train[:10]+train[20:]' joins several splits"},
      {kHead + "datasets:\n  - path: a.jsonl\n    path: b.jsonl\n",
       {},
       "run.yaml:5:5: datasets[0].path: duplicate key"},
      // --set
      {kHead, {"lora_r"}, "--set lora_r: expected key=value, got 'lora_r'; write e.g. --set lora_r=16"},
      {kHead, {"=16"}, "--set =16: expected key=value"},
      {kHead, {"lora_rank=16"}, "--set lora_rank=16: lora_rank: unknown key 'lora_rank'; did you mean 'lora_r'?"},
      {kHead, {"lora_r=abc"}, "--set lora_r=abc: lora_r: expected an integer, got 'abc'"},
      {kHead,
       {"lora_target_modules=[q_proj"},
       "--set lora_target_modules=[q_proj: lora_target_modules: the value is not valid YAML"},
      {kHead, {"datasets=[{type: alpaca}]"}, "--set datasets=[{type: alpaca}]: datasets[0].path: missing"},
      // YAML would keep the first document of the value and drop the rest.
      {kHead,
       {"lora_r=4\n---\n5"},
       "--set lora_r=4\n---\n5: lora_r: the value holds several YAML documents (a --- line, or a , outside "
       "brackets); a value is one"},
      {kHead,
       {"deepspeed=zero2.json"},
       "--set deepspeed=zero2.json: deepspeed: axolotl key 'deepspeed' is not supported by qtrain"},
  };
  for (const BadConfig& row : table) {
    SCOPED_TRACE(row.yaml + (row.overrides.empty() ? "" : " --set " + row.overrides[0]));
    expect_error([&] { parse(row.yaml, row.overrides); }, row.fragment);
  }
  EXPECT_GE(table.size(), 15u);
}

// rl: dpo's losses: TRL's names with weights, label smoothing only where a loss reads it, and the
// keys of older axolotl/TRL spellings answered with today's.
TEST(RunConfigTest, DpoLossKeysReadTrlsLossesAndRefuseWhatChangesNothing) {
  const auto dpo = kHead + "rl: dpo\n";
  EXPECT_EQ(dpo_losses(parse(dpo)), (std::vector<std::pair<std::string, double>>{{"sigmoid", 1.0}}));
  EXPECT_EQ(dpo_losses(parse(kHead + "rl: ipo\n")), (std::vector<std::pair<std::string, double>>{{"ipo", 1.0}}));
  const auto c = parse(dpo + "dpo_loss_type: [sigmoid, sft]\ndpo_loss_weights: [1, 0.5]\n");
  EXPECT_EQ(dpo_losses(c), (std::vector<std::pair<std::string, double>>{{"sigmoid", 1.0}, {"sft", 0.5}}));
  EXPECT_EQ(dpo_losses(parse(dpo + "dpo_loss_type: hinge\n")),
            (std::vector<std::pair<std::string, double>>{{"hinge", 1.0}}));
  const auto robust = parse(dpo + "dpo_loss_type: [robust]\ndpo_label_smoothing: 0.1\n");
  EXPECT_EQ(robust.dpo_label_smoothing, 0.1);
  EXPECT_EQ(parse(dpo + "dpo_loss_type: [discopop]\ndiscopop_tau: 0.1\n").discopop_tau, 0.1);
  // A listed zero smoothing asks for nothing (axolotl's examples write it).
  EXPECT_EQ(parse(dpo + "dpo_label_smoothing: 0.0\n").dpo_label_smoothing, 0.0);
  for (const auto& text : {to_yaml(c), to_yaml(robust)}) {
    EXPECT_EQ(to_yaml(parse_run_config(text, "saved.yaml", "/elsewhere")), text);
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {dpo + "dpo_loss_type: [sigmoid, hnge]\n",
       "run.yaml:4:1: dpo_loss_type: 'hnge' is not one of TRL's DPO losses (sigmoid, hinge, "},
      {dpo + "dpo_loss_type: [sigmoid, hnge]\n", "; did you mean 'hinge'?"},
      {kHead + "rl: ipo\ndpo_loss_type: [hinge]\n",
       "dpo_loss_type: chooses rl: dpo's losses, and rl is ipo; write rl: dpo (rl: ipo is rl: dpo with dpo_loss_type: "
       "[ipo]: list ipo to keep it)"},
      {kHead + "dpo_loss_type: [hinge]\n", "dpo_loss_type: chooses rl: dpo's losses, and rl is not set"},
      {dpo + "dpo_loss_type: [sigmoid, sft]\ndpo_loss_weights: [1]\n",
       "dpo_loss_weights: 1 weights for 2 losses (dpo_loss_type); give one weight per loss, in its order"},
      {dpo + "dpo_loss_weights: [1, -1]\n", "dpo_loss_weights: -1 must be >= 0"},
      {dpo + "dpo_loss_weights: [1, x]\n", "dpo_loss_weights: expected a list of numbers, got an item 'x'"},
      {dpo + "dpo_label_smoothing: 0.1\n",
       "dpo_label_smoothing: 0.1 changes nothing: TRL 1.16 reads it only in the robust, exo_pair, aot and "
       "aot_unpaired losses, and dpo_loss_type is [sigmoid]"},
      {dpo + "dpo_loss_type: [robust]\ndpo_label_smoothing: 0.5\n", "robust's flip probability must be below 0.5"},
      {dpo + "dpo_loss_type: [exo_pair]\n", "exo_pair needs an epsilon above 0 (TRL refuses 0)"},
      {dpo + "discopop_tau: 0.1\n", "discopop_tau: is discopop's, which dpo_loss_type does not list"},
      {dpo + "rpo_alpha: 0.5\n", "write dpo_loss_type: [sigmoid, sft] with dpo_loss_weights: [1, <rpo_alpha>]"},
      {dpo + "dpo_norm_loss: true\n", "write dpo_loss_type: [sigmoid_norm]"},
      {kHead + "rl: dpo\nkto_loss_type: apo_zero_unpaired\n",
       "kto_loss_type: is rl: kto's loss, and rl is dpo; set rl: kto, or remove the key"},
      {kHead + "rl: ipo\ndpo_loss_weights: [2]\n",
       "dpo_loss_weights: weighs rl: dpo's losses, and rl is ipo; set rl: dpo (with dpo_loss_type), or remove the key"},
      {kHead + "rl: kto\ndpo_label_smoothing: 0.1\n",
       "dpo_label_smoothing: is rl: dpo's (DPOTrainer's label_smoothing), and rl is kto; remove the key"},
  };
  for (const auto& [yaml, fragment] : bad) {
    SCOPED_TRACE(yaml);
    expect_error([&] { parse(yaml); }, fragment);
  }
}

// DPOTrainer's f_divergence_type, f_alpha_divergence_coef, ld_alpha and use_weighting
// (dpo_use_weighting): read for rl: dpo and ipo, written back, and refused where TRL refuses them
// or where they would change nothing.
TEST(RunConfigTest, DpoVariationKeysReadTrlsOptionsAndRefuseWhatTrlRefuses) {
  const auto dpo = kHead + "rl: dpo\n";
  const auto plain = parse(dpo);
  EXPECT_EQ(plain.f_divergence_type, "reverse_kl");
  EXPECT_EQ(plain.f_alpha_divergence_coef, 0.5);
  EXPECT_FALSE(plain.ld_alpha.has_value());
  EXPECT_FALSE(plain.dpo_use_weighting);
  const auto c = parse(dpo +
                       "dpo_loss_type: [sigmoid, ipo]\nf_divergence_type: alpha_divergence\nf_alpha_divergence_coef: "
                       "0.3\nld_alpha: 0.25\ndpo_use_weighting: true\n");
  EXPECT_EQ(c.f_divergence_type, "alpha_divergence");
  EXPECT_EQ(c.f_alpha_divergence_coef, 0.3);
  EXPECT_EQ(c.ld_alpha, 0.25);
  EXPECT_TRUE(c.dpo_use_weighting);
  const auto ipo = parse(kHead + "rl: ipo\nf_divergence_type: js_divergence\nld_alpha: 0\n");
  EXPECT_EQ(ipo.f_divergence_type, "js_divergence");
  EXPECT_EQ(ipo.ld_alpha, 0.0);
  for (const auto& text : {to_yaml(c), to_yaml(ipo), to_yaml(plain)}) {
    EXPECT_EQ(to_yaml(parse_run_config(text, "saved.yaml", "/elsewhere")), text);
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {dpo + "f_divergence_type: kl\n",
       "f_divergence_type: 'kl' is not one of reverse_kl, forward_kl, js_divergence, alpha_divergence"},
      {dpo + "f_divergence_type: forward_k\n", "did you mean 'forward_kl'?"},
      {dpo + "dpo_loss_type: [sigmoid, nca_pair]\nf_divergence_type: forward_kl\n",
       "f_divergence_type: forward_kl has no form for the nca_pair loss (TRL 1.16 refuses it); use reverse_kl with "
       "it, or list only sigmoid, sigmoid_norm, hinge, ipo, exo_pair, robust, discopop, sft in dpo_loss_type"},
      {kHead + "rl: kto\nf_divergence_type: forward_kl\n",
       "f_divergence_type: is DPOTrainer's (rl: dpo or ipo), and rl is kto; remove the key"},
      {dpo + "f_alpha_divergence_coef: 0.3\n",
       "f_alpha_divergence_coef: is alpha_divergence's, and f_divergence_type is reverse_kl; set f_divergence_type: "
       "alpha_divergence, or remove the key"},
      {dpo + "ld_alpha: 1.5\n", "ld_alpha: 1.5 is outside [0, 1]"},
      {kHead + "rl: orpo\nld_alpha: 0.5\n", "ld_alpha: is DPOTrainer's (rl: dpo or ipo), and rl is orpo"},
      {kHead + "dpo_use_weighting: true\n", "dpo_use_weighting: is DPOTrainer's (rl: dpo or ipo), and rl is not set"},
      {dpo + "dpo_loss_type: [sigmoid, aot]\ndpo_use_weighting: true\n",
       "dpo_use_weighting: cannot weigh the aot loss, which sorts the pairs (TRL refuses it too)"},
  };
  for (const auto& [yaml, fragment] : bad) {
    SCOPED_TRACE(yaml);
    expect_error([&] { parse(yaml); }, fragment);
  }
}

// See Note [Every problem at once].
TEST(RunConfigTest, EveryProblemIsReportedAtOnce) {
  expect_error([] { parse(kHead + "lora_r: abc\nlearning_rte: 1e-4\nwandb_project: my-run\nbf16: maybe\n"); },
               "run.yaml: 4 problems in the run config; fix them all before the run:\n"
               "  run.yaml:4:1: learning_rte: unknown key 'learning_rte'; did you mean 'learning_rate'?\n"
               "  run.yaml:5:1: wandb_project: axolotl key 'wandb_project' is not supported by qtrain");
  expect_error([] { parse(kHead + "lora_r: abc\nlearning_rte: 1e-4\nwandb_project: my-run\nbf16: maybe\n"); },
               "\n  run.yaml:3:9: lora_r: expected an integer, got 'abc'; use a rank of 1 or more, typically 8 to "
               "64\n  run.yaml:6:7: bf16: expected true, false or auto, got 'maybe'");
  // Problems of --set arguments and of datasets entries join those of the file.
  expect_error([] { parse(kHead + "datasets:\n  - type: alpaca\n  - path: b.jsonl\n    typ: x\n", {"lora_r=x"}); },
               "3 problems in the run config");
  // A value that fails is not also reported through the combinations it takes part in: the
  // default that stands in for load_in_4bit would contradict adapter: qlora.
  try {
    parse(kHead + "load_in_4bit: yes please\nadapter: qlora\n");
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    EXPECT_NE(message.find("load_in_4bit: expected true or false, got 'yes please'"), std::string::npos) << message;
    EXPECT_EQ(message.find("problems"), std::string::npos) << message;
    EXPECT_EQ(message.find("qlora needs"), std::string::npos) << message;
  }
}

// See Note [Performance hints].
TEST(RunConfigTest, PerformanceSwitchesAreAcceptedAndNamed) {
  const RunConfig c = parse(kHead + R"(flash_attention: true
tf32: true
torch_compile: true
liger_rms_norm: true
liger_glu_activation: true
plugins:
  - axolotl.integrations.liger.LigerPlugin
gradient_checkpointing_kwargs:
  use_reentrant: false
pad_to_sequence_len: true
optimizer: paged_adamw_32bit
)");
  EXPECT_EQ(c.optimizer, "adamw_torch");
  const std::vector<std::string> expected = {
      "flash_attention (qtrain chooses its attention kernel itself)",
      "tf32 (qtrain's float32 matmuls stay float32)",
      "torch_compile (qtrain is compiled C++)",
      "liger_rms_norm (Liger kernels speed up the Python stack; qtrain has its own kernels)",
      "liger_glu_activation (Liger kernels speed up the Python stack; qtrain has its own kernels)",
      "plugins (axolotl plugins (Liger, cut cross-entropy) speed up the Python stack; qtrain has its own kernels)",
      "gradient_checkpointing_kwargs (qtrain's checkpointing has no reentrant variant to choose)",
      "pad_to_sequence_len (padding changes shapes, not the loss: padded positions carry no label)",
      "optimizer: paged_adamw_32bit (the same AdamW; paging moves its state to host memory under pressure, and "
      "LoRA's state is small)"};
  EXPECT_EQ(c.ignored_keys, expected);
  EXPECT_EQ(
      ignored_keys_note(c).rfind("accepted and ignored (they do not change what is trained): flash_attention (", 0), 0u)
      << ignored_keys_note(c);
  EXPECT_EQ(ignored_keys_note(parse(kMinimal)), "");
  // Switched off or blank, a switch asks for nothing and is not named.
  EXPECT_TRUE(parse(kHead + "flash_attention: false\ntf32:\nliger_rope: false\n").ignored_keys.empty());
  EXPECT_EQ(parse(kHead + "optimizer: adamw_torch_fused\n").optimizer, "adamw_torch");
}

// The kernel switches of axolotl's Gemma 4 26B-A4B QLoRA example (examples/gemma4/26b-a4b-moe-qlora.yaml).
TEST(RunConfigTest, Gemma4ExamplesKernelSwitchesAreAcceptedAndNamed) {
  const RunConfig c = parse(kHead +
                            "use_scattermoe: true\nexperts_implementation: scattermoe\n"
                            "gemma4_hybrid_attn_impl: true\n");
  const std::vector<std::string> expected = {
      "use_scattermoe (ScatterMoE speeds up the Python stack's experts; qtrain runs its own grouped expert kernel)",
      "experts_implementation (it chooses the Python stack's expert kernel; qtrain runs its own grouped expert kernel)",
      "gemma4_hybrid_attn_impl (it gives Gemma 4's sliding layers flash attention and its 512-wide global layers "
      "SDPA; qtrain chooses each layer's attention kernel itself)"};
  EXPECT_EQ(c.ignored_keys, expected);
}

// See Note [FSDP keys]: axolotl's fsdp list or string, or an fsdp_config alone, turn shard_base
// on; FSDP's own tuning is named as ignored; a contradiction or an unknown option is an error.
TEST(RunConfigTest, FsdpKeysTurnOnTheShardedBase) {
  EXPECT_FALSE(parse(kMinimal).shard_base);
  EXPECT_TRUE(parse(kHead + "shard_base: true\n").shard_base);
  const RunConfig listed = parse(kHead +
                                 "fsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n"
                                 "  fsdp_offload_params: true\n  fsdp_state_dict_type: FULL_STATE_DICT\n");
  EXPECT_TRUE(listed.shard_base);
  const std::vector<std::string> expected = {
      "fsdp: auto_wrap (qtrain shards and gathers each decoder layer)",
      "fsdp_config: fsdp_offload_params, fsdp_state_dict_type (FSDP's tuning; qtrain shards each decoder layer's "
      "quantized bytes and gathers them layer by layer; for parameters in host RAM use offload_layers: auto)"};
  EXPECT_EQ(listed.ignored_keys, expected);
  EXPECT_TRUE(parse(kHead + "fsdp: full_shard auto_wrap\n").shard_base);  // TrainingArguments' string
  EXPECT_TRUE(parse(kHead + "fsdp_version: 2\nfsdp_config:\n  reshard_after_forward: true\n").shard_base);
  EXPECT_FALSE(parse(kHead + "fsdp: no_shard\nfsdp_config:\n  fsdp_use_orig_params: false\n").shard_base);
  EXPECT_TRUE(parse(kHead + "fsdp: full_shard\nshard_base: true\n").shard_base);  // agreeing is fine
  // The key survives the round trip through run_config.yaml as shard_base.
  EXPECT_TRUE(parse(to_yaml(listed)).shard_base);
  for (const auto& [yaml, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"fsdp: [full_shard, bogus]\n",
            "run.yaml:3:7: fsdp: 'bogus' is not an FSDP option; use full_shard (qtrain's shard_base: true)"},
           {"fsdp_config: 3\n", "run.yaml:3:14: fsdp_config: expected a mapping of FSDP options"},
           {"shard_base: false\nfsdp: full_shard\n",
            "run.yaml:3:13: shard_base: shard_base is false but run.yaml:4:1 turns sharding on; remove one of the two"},
       }) {
    test::expect_error([&] { parse(kHead + yaml); }, fragment);
  }
}

// axolotl's evals_per_epoch / saves_per_epoch are read as counts (the trainer turns them into
// steps, See Note [Steps per epoch]); with eval_steps / save_steps as well they are refused, as
// axolotl refuses them, naming both places.
TEST(RunConfigTest, PerEpochCountsAreReadAndExcludeTheirStepKeys) {
  const RunConfig c = parse(kHead + "val_set_size: 0.1\nevals_per_epoch: 4\nsaves_per_epoch: 1\n");
  EXPECT_EQ(c.evals_per_epoch, 4);
  EXPECT_EQ(c.saves_per_epoch, 1);
  // Blank, as axolotl's Gemma examples write it.
  EXPECT_EQ(parse(kHead + "evals_per_epoch:\n").evals_per_epoch, 0);
  test::expect_error([] { parse(kHead + "val_set_size: 0.1\neval_steps: 10\nevals_per_epoch: 4\n"); },
                     "run.yaml:5:1: evals_per_epoch: eval_steps (run.yaml:4:1) is set too; they are two ways to say "
                     "one thing, keep one");
  test::expect_error([] { parse(kHead + "saves_per_epoch: 2\nsave_steps: 50\n"); },
                     "run.yaml:3:1: saves_per_epoch: save_steps (run.yaml:4:1) is set too");
  test::expect_error([] { parse(kHead + "saves_per_epoch: -1\n"); },
                     "run.yaml:3:18: saves_per_epoch: -1 is outside [0, 1000000]");
}

// See Note [Special tokens]: the roles are read here and checked against the tokenizer where the
// trainer loads it, with the place of the map.
TEST(RunConfigTest, SpecialTokensAreReadWithTheirPlace) {
  const RunConfig c = parse(kHead + "special_tokens:\n  pad_token: \"<|end_of_text|>\"\n  eos_token: <|im_end|>\n");
  EXPECT_EQ(c.special_tokens.pad_token, "<|end_of_text|>");
  EXPECT_EQ(c.special_tokens.eos_token, "<|im_end|>");
  EXPECT_TRUE(c.special_tokens.bos_token.empty());
  EXPECT_EQ(c.special_tokens.place, "run.yaml:3:1");
  EXPECT_TRUE(parse(kHead + "special_tokens:\n").special_tokens.empty());
  test::expect_error([] { parse(kHead + "special_tokens:\n  additional_special_tokens: [\"<x>\"]\n"); },
                     "run.yaml:4:3: special_tokens.additional_special_tokens: marking more tokens special changes how "
                     "text containing them is split");
  test::expect_error([] { parse(kHead + "special_tokens:\n  sep_token: \"<s>\"\n"); },
                     "run.yaml:4:3: special_tokens.sep_token: qtrain reads bos_token, eos_token, pad_token and "
                     "unk_token here");
  test::expect_error([] { parse(kHead + "special_tokens: <pad>\n"); },
                     "run.yaml:3:17: special_tokens: expected a map, got '<pad>'");
}

// activation_offloading: axolotl's true, legacy and hidden_states all offload the checkpointed
// inputs (the latter two named); disk and a run without checkpointing are refused.
TEST(RunConfigTest, ActivationOffloadingTakesAxolotlsValues) {
  EXPECT_FALSE(parse(kHead).activation_offloading);
  EXPECT_TRUE(parse(kHead + "activation_offloading: true\n").activation_offloading);
  EXPECT_TRUE(parse(kHead + "activation_offloading: true\n").ignored_keys.empty());
  EXPECT_FALSE(parse(kHead + "activation_offloading: false\n").activation_offloading);
  for (const std::string value : {"legacy", "hidden_states"}) {
    const RunConfig c = parse(kHead + "activation_offloading: " + value + "\n");
    EXPECT_TRUE(c.activation_offloading) << value;
    ASSERT_EQ(c.ignored_keys.size(), 1u) << ignored_keys_note(c);
    EXPECT_EQ(c.ignored_keys[0].rfind("activation_offloading: " + value + " (read as true: ", 0), 0u)
        << c.ignored_keys[0];
  }
  test::expect_error([] { parse(kHead + "activation_offloading: disk\n"); },
                     "run.yaml:3:24: activation_offloading: disk (activations written to files) is not supported; use "
                     "true");
  test::expect_error([] { parse(kHead + "activation_offloading: cpu\n"); },
                     "expected true, false, legacy, hidden_states or disk, got 'cpu'");
  test::expect_error([] { parse(kHead + "gradient_checkpointing: false\nactivation_offloading: true\n"); },
                     "run.yaml:4:1: activation_offloading: needs gradient_checkpointing (it offloads the inputs "
                     "checkpointed layers keep for their recompute), and gradient_checkpointing is false; set "
                     "gradient_checkpointing: true");
  // tiled_mlp and its shards.
  const RunConfig tiled = parse(kHead + "tiled_mlp: true\ntiled_mlp_num_shards: 4\n");
  EXPECT_TRUE(tiled.tiled_mlp);
  EXPECT_EQ(tiled.tiled_mlp_num_shards, 4);
  test::expect_error([] { parse(kHead + "tiled_mlp_num_shards: 4\n"); },
                     "run.yaml:3:1: tiled_mlp_num_shards: has no effect unless tiled_mlp: true");
  EXPECT_EQ(parse(kHead + "tiled_mlp: true\ntiled_mlp_use_original_mlp: true\n").ignored_keys.size(), 1u);
  // The resolved config says it, and reads back the same.
  const RunConfig on = parse(kHead + "activation_offloading: legacy\n");
  EXPECT_NE(to_yaml(on).find("activation_offloading: true\n"), std::string::npos);
}

// axolotl's names for what qtrain does already are silent; other class names, AdamW with
// quantized state and offloaded checkpoints are read as qtrain's and named in the one line.
TEST(RunConfigTest, AxolotlDefaultsAreSilentAndEquivalentsAreNamed) {
  EXPECT_TRUE(parse(kHead + "model_type: AutoModelForCausalLM\ntokenizer_type: AutoTokenizer\n").ignored_keys.empty());
  const RunConfig c = parse(kHead + R"(model_type: MistralForCausalLM
tokenizer_type: LlamaTokenizer
trust_remote_code: true
optimizer: adamw_bnb_8bit
gradient_checkpointing: offload
loss_watchdog_threshold: 5.0
loss_watchdog_patience: 3
)");
  // bitsandbytes' 8-bit AdamW is what qtrain runs for it: not named.
  EXPECT_EQ(c.optimizer, "adamw_bnb_8bit");
  EXPECT_EQ(c.gradient_checkpointing, GradientCheckpointing::every_layer);
  EXPECT_TRUE(c.activation_offloading) << "axolotl's older spelling of activation_offloading: true";
  EXPECT_EQ(c.loss_watchdog_threshold, 5.0);
  EXPECT_EQ(c.loss_watchdog_patience, 3);
  ASSERT_EQ(c.ignored_keys.size(), 3u) << ignored_keys_note(c);
  EXPECT_EQ(c.ignored_keys[0], "model_type: MistralForCausalLM (qtrain builds the architecture config.json names)");
  EXPECT_EQ(c.ignored_keys[1], "tokenizer_type: LlamaTokenizer (qtrain reads tokenizer.json (the fast tokenizer))");
  EXPECT_EQ(c.ignored_keys[2].rfind("trust_remote_code (", 0), 0u);
  const RunConfig plain = parse(kHead + "optimizer: adamw_8bit\n");
  EXPECT_EQ(plain.optimizer, "adamw_bnb_8bit");
  EXPECT_TRUE(plain.ignored_keys.empty());
  const RunConfig paged = parse(kHead + "optimizer: paged_adamw_8bit\n");
  EXPECT_EQ(paged.optimizer, "adamw_bnb_8bit");
  EXPECT_EQ(paged.ignored_keys.at(0),
            "optimizer: paged_adamw_8bit (the same 8-bit AdamW, adamw_bnb_8bit; paging moves its state to host "
            "memory under pressure, and LoRA's state is small)");
  // torchao's low-bit AdamW: never 32-bit state for a low-bit name. qtrain runs its 8-bit AdamW
  // and the run says so.
  const RunConfig eight = parse(kHead + "optimizer: adamw_torch_8bit\n");
  EXPECT_EQ(eight.optimizer, "adamw_bnb_8bit");
  EXPECT_EQ(eight.ignored_keys.at(0),
            "optimizer: adamw_torch_8bit (torchao's 8-bit AdamW is not implemented; qtrain runs bitsandbytes' 8-bit "
            "AdamW, adamw_bnb_8bit, whose state is quantized in blocks of 256 as bitsandbytes does it)");
  const RunConfig four = parse(kHead + "optimizer: adamw_torch_4bit\n");
  EXPECT_EQ(four.optimizer, "adamw_bnb_8bit");
  EXPECT_EQ(four.ignored_keys.at(0),
            "optimizer: adamw_torch_4bit (torchao's 4-bit AdamW is not implemented; qtrain runs bitsandbytes' 8-bit "
            "AdamW, adamw_bnb_8bit, whose state is quantized in blocks of 256 as bitsandbytes does it, at twice the "
            "bytes of torchao's 4-bit state)");
  test::expect_error([] { parse(kHead + "loss_watchdog_patience: 0\n"); }, "loss_watchdog_patience: 0 must be >= 1");
}

// A trial run shorter than the config's warmup (--set max_steps=8) runs, as in transformers and
// axolotl, with a warning that the learning rate never reaches its peak.
TEST(RunConfigTest, WarmupLongerThanTheRunIsAWarningNotAnError) {
  const RunConfig c = parse(kHead + "warmup_steps: 10\n", {"max_steps=8"});
  EXPECT_EQ(c.warmup_steps, 10);
  EXPECT_EQ(c.max_steps, 8);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0],
            "run.yaml:3:1: warmup_steps 10 is more than max_steps (8, at --set max_steps=8): the learning rate "
            "rises for the whole run, to 8/10 of learning_rate, as transformers and axolotl run it");
  EXPECT_TRUE(parse(kHead + "warmup_steps: 8\nmax_steps: 8\n").warnings.empty());
}

TEST(RunConfigTest, RoundTripThroughToYaml) {
  std::vector<RunConfig> configs = {parse(kMinimal), parse(kFull)};
  // Strings that must not be read back as anything else, and the other forms of the union keys.
  configs.push_back(parse(kMinimal,
                          {"base_model=\"/models/a b: c # d \\\"q\\\" \\\\ e\"",
                           "lora_target_modules=[\"true\", \"1\", q_proj]",
                           "val_set_size=250",
                           "resume_from_checkpoint=true",
                           "gradient_checkpointing=false",
                           "bf16=true",
                           "datasets=[{path: '#x.jsonl', type: completion, field: 'null', split: 'train[-10%:]'}]",
                           "offload_layers=auto",
                           "offload_prefetch_depth=2",
                           "gpu_memory_limit=1.5GiB"}));
  EXPECT_EQ(configs.back().base_model, "/models/a b: c # d \"q\" \\ e");
  EXPECT_EQ(configs.back().datasets[0].field, "null");
  EXPECT_EQ(parse_split(configs.back().datasets[0].split).slice, (SplitSlice{-10, std::nullopt, true}));
  configs.push_back(parse(kMinimal,
                          {"gpu_memory_limit=24GB",
                           "offload_layers=0",
                           "activation_offloading=true",
                           "tiled_mlp=true",
                           "tiled_mlp_num_shards=8"}));
  configs.push_back(parse(kMinimal, {"lora_target_modules='model.layers.[\\d]+.self_attn.(q|v)_proj'"}));
  EXPECT_EQ(configs.back().lora_target_modules_regex, "model.layers.[\\d]+.self_attn.(q|v)_proj");
  EXPECT_TRUE(configs.back().lora_target_modules.empty());
  configs.push_back(parse(kMinimal, {"gpu_memory_limit=1000001B"}));
  configs.push_back(parse(kMinimal,
                          {"special_tokens={pad_token: \"<|end_of_text|>\", eos_token: \"<|im_end|>\"}",
                           "evals_per_epoch=4",
                           "val_set_size=0.1",
                           "saves_per_epoch=2",
                           "loss_watchdog_threshold=5.5",
                           "loss_watchdog_patience=2"}));
  for (const RunConfig& c : configs) {
    const std::string text = to_yaml(c);
    SCOPED_TRACE(text);
    // Another base directory: to_yaml writes the resolved, absolute paths.
    EXPECT_EQ(parse_run_config(text, "saved.yaml", "/elsewhere"), c);
    EXPECT_EQ(to_yaml(parse_run_config(text, "saved.yaml", "/elsewhere")), text);
  }
}

// axolotl's template names: the named template's text for every dataset; with
// tokenizer_default_fallback_<name>, the tokenizer's template first (no source) and the named
// one as the fallback.
TEST(RunConfigTest, ChatTemplateNamesGiveTheNamedTemplate) {
  const std::string head =
      "base_model: m\nlora_target_linear: true\ndatasets:\n  - path: a.jsonl\n    type: chat_template\n";
  const auto named = parse(head + "chat_template: llama3\n");
  EXPECT_EQ(named.chat_template, "llama3");
  EXPECT_EQ(named.datasets.at(0).chat_template_source, text::named_chat_template("llama3"));
  EXPECT_EQ(named.datasets.at(0).chat_template_fallback, "");
  EXPECT_EQ(parse(to_yaml(named)), named);

  const auto fallback = parse(head + "chat_template: tokenizer_default_fallback_qwen3\n");
  EXPECT_EQ(fallback.datasets.at(0).chat_template_source, "");
  EXPECT_EQ(fallback.datasets.at(0).chat_template_fallback, text::named_chat_template("qwen3"));
  EXPECT_EQ(parse(to_yaml(fallback)), fallback);

  EXPECT_EQ(parse(head).datasets.at(0).chat_template_fallback, "");
}

// As in axolotl, a dataset entry may name its own template; the top-level one serves the others.
TEST(RunConfigTest, ADatasetsOwnChatTemplateReplacesTheTopLevelOne) {
  const auto c = parse(
      "base_model: m\nlora_target_linear: true\nchat_template: llama3\ndatasets:\n"
      "  - path: a.jsonl\n    type: chat_template\n    chat_template: chatml\n"
      "  - path: b.jsonl\n    type: chat_template\n"
      "  - path: c.jsonl\n    type: chat_template\n    chat_template_jinja: \"{{ messages[0].content }}\"\n"
      "  - path: d.jsonl\n    type: chat_template\n    chat_template: tokenizer_default_fallback_gemma\n");
  ASSERT_EQ(c.datasets.size(), 4u);
  EXPECT_EQ(c.datasets[0].chat_template, "chatml");
  EXPECT_EQ(c.datasets[0].chat_template_source, text::named_chat_template("chatml"));
  EXPECT_EQ(c.datasets[1].chat_template, "");
  EXPECT_EQ(c.datasets[1].chat_template_source, text::named_chat_template("llama3"));
  EXPECT_EQ(c.datasets[2].chat_template, "jinja");  // implied by chat_template_jinja
  EXPECT_EQ(c.datasets[2].chat_template_source, "{{ messages[0].content }}");
  EXPECT_EQ(c.datasets[3].chat_template_source, "");
  EXPECT_EQ(c.datasets[3].chat_template_fallback, text::named_chat_template("gemma"));
  EXPECT_EQ(parse(to_yaml(c)), c);

  const std::string head = "base_model: m\nlora_target_linear: true\ndatasets:\n  - path: a.jsonl\n";
  expect_error([&] { parse(head + "    type: chat_template\n    chat_template: chatml2\n"); },
               "run.yaml:6:20: datasets[0].chat_template: 'chatml2' is not one of");
  expect_error([&] { parse(head + "    type: chat_template\n    chat_template: jinja\n"); },
               "run.yaml:6:20: chat_template: jinja needs chat_template_jinja");
  expect_error([&] { parse(head + "    type: chat_template\n    chat_template_jinja: no/such.jinja\n"); },
               "run.yaml:6:26: chat_template_jinja: cannot read");
  expect_error([&] { parse(head + "    type: completion\n    chat_template: chatml\n"); },
               "datasets[0].chat_template: chat_template applies only to type: chat_template");
}

TEST(RunConfigTest, ChatTemplateDatasetsReadAxolotlsKeys) {
  const auto c = parse(
      "base_model: m\nlora_target_linear: true\n"
      "chat_template_jinja: \"{% for m in messages %}{{ m['content'] }}{% endfor %}\"\n"
      "eot_tokens: [\"<|im_end|>\"]\n"
      "datasets:\n"
      "  - path: chats.jsonl\n    type: chat_template\n    field_messages: conversations\n"
      "    message_property_mappings: {role: from, content: value}\n"
      "    roles: {user: [asker], assistant: [bot, model]}\n"
      "    roles_to_train: [user, assistant]\n    train_on_eos: last\n"
      "  - path: more.jsonl\n    type: chat_template\n");
  EXPECT_EQ(c.chat_template, "jinja");  // implied by chat_template_jinja
  ASSERT_EQ(c.datasets.size(), 2u);
  const auto& d = c.datasets[0];
  EXPECT_EQ(d.field_messages, "conversations");
  EXPECT_EQ(d.message_role, "from");
  EXPECT_EQ(d.message_content, "value");
  EXPECT_EQ(d.roles,
            (std::map<std::string, std::string>{{"asker", "user"}, {"bot", "assistant"}, {"model", "assistant"}}));
  EXPECT_EQ(d.roles_to_train, (std::vector<std::string>{"user", "assistant"}));
  EXPECT_EQ(d.train_on_eos, "last");
  // The top-level keys apply to every dataset.
  for (const auto& each : c.datasets) {
    EXPECT_EQ(each.chat_template_source, "{% for m in messages %}{{ m['content'] }}{% endfor %}");
    EXPECT_EQ(each.eot_tokens, (std::vector<std::string>{"<|im_end|>"}));
  }
  // axolotl's defaults.
  const auto& plain = c.datasets[1];
  EXPECT_EQ(plain.field_messages, "messages");
  EXPECT_EQ(plain.message_role, "role");
  EXPECT_EQ(plain.roles_to_train, (std::vector<std::string>{"assistant"}));
  EXPECT_EQ(plain.train_on_eos, "turn");
  EXPECT_EQ(parse(to_yaml(c)), c);
}

TEST(RunConfigTest, ChatTemplateMessageFeaturesAndLengthKeys) {
  const auto c = parse(
      "base_model: m\nlora_target_linear: true\nexcess_length_strategy: truncate\n"
      "datasets:\n"
      "  - path: chats.json\n    ds_type: json\n    type: chat_template\n"
      "    message_field_role: from\n    message_field_content: value\n"
      "    message_field_training: train\n    message_field_training_detail: detail\n"
      "    train_on_eot: none\n    drop_system_message: true\n    field_tools: functions\n"
      "  - path: more.jsonl\n    type: chat_template\n    field_thinking: thoughts\n"
      "  - path: other.jsonl\n    type: chat_template\n"
      "    message_property_mappings: {role: from, content: value, name: speaker}\n"
      "  - path: org/local.jsonl\n    type: input_output\n");
  ASSERT_EQ(c.datasets.size(), 4u);
  const auto& d = c.datasets[0];
  EXPECT_EQ(d.message_role, "from");
  EXPECT_EQ(d.message_content, "value");
  EXPECT_EQ(d.message_field_training, "train");
  EXPECT_EQ(d.message_field_training_detail, "detail");
  EXPECT_EQ(d.train_on_eos, "turn");
  EXPECT_EQ(d.train_on_eot, "none");
  EXPECT_TRUE(d.drop_system_message);
  EXPECT_EQ(d.field_tools, "functions");
  EXPECT_TRUE(d.message_properties.empty());
  EXPECT_EQ(c.datasets[1].message_properties, (std::map<std::string, std::string>{{"reasoning_content", "thoughts"}}));
  EXPECT_EQ(c.datasets[1].train_on_eot, "");
  EXPECT_FALSE(c.datasets[1].drop_system_message);
  EXPECT_EQ(c.datasets[2].message_properties, (std::map<std::string, std::string>{{"name", "speaker"}}));
  // A path with an extension is a local file even when it is not there yet.
  EXPECT_EQ(c.datasets[3].type, "input_output");
  EXPECT_EQ(c.excess_length_strategy, "truncate");
  for (const auto& each : c.datasets) EXPECT_EQ(each.excess_length_strategy, "truncate");
  EXPECT_EQ(parse(kMinimal).excess_length_strategy, "drop");
  EXPECT_EQ(parse(to_yaml(c)), c);
}

TEST(RunConfigTest, ToYamlWritesEveryKeyOnceInOrder) {
  const YAML::Node root = YAML::Load(to_yaml(parse(kFull)));
  std::vector<std::string> keys;
  for (const auto& pair : root) {
    keys.push_back(pair.first.Scalar());
  }
  EXPECT_EQ(keys, run_config_keys());
}

// docs/CONFIG.md must document every key the code reads (its key tables are the run config
// table's, row for row) and every axolotl key it refuses or ignores.
TEST(RunConfigTest, DocsListEveryKey) {
  const fs::path repo = QTRAIN_SOURCE_DIR;
  std::ifstream in(repo / "docs" / "CONFIG.md");
  ASSERT_TRUE(in.good()) << "cannot read " << (repo / "docs" / "CONFIG.md");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string docs = text.str();
  // The key tables are the run config table's (Note [Run config table]); `qtrain keys` prints them.
  for (const std::string& section : run_config_sections()) {
    const std::string table = run_config_key_table(section);
    EXPECT_NE(docs.find("### " + section + "\n\n" + table), std::string::npos)
        << "docs/CONFIG.md's table under '### " << section << "' is not the run config table's; replace it with:\n"
        << table;
  }
  for (const std::string& key : folded_keys()) EXPECT_NE(docs.find("`" + key + "`"), std::string::npos) << key;
  // So are the tables of the axolotl keys qtrain refuses and of those it accepts and ignores.
  for (const std::string& table : {refused_keys_table(refused_keys()),
                                   "Inside a `datasets` entry:\n\n" + refused_keys_table(refused_dataset_keys()),
                                   ignored_keys_table()}) {
    EXPECT_NE(docs.find(table), std::string::npos) << "docs/CONFIG.md lacks this table (qtrain keys prints it):\n"
                                                   << table;
  }
  // The example config is valid.
  const size_t begin = docs.find("```yaml\n");
  ASSERT_NE(begin, std::string::npos) << "docs/CONFIG.md has no ```yaml example";
  const size_t end = docs.find("```\n", begin + 8);
  ASSERT_NE(end, std::string::npos);
  const RunConfig example = parse_run_config(docs.substr(begin + 8, end - begin - 8), "CONFIG.md", "/cfg/run");
  EXPECT_EQ(example.adapter, "qlora");
  EXPECT_EQ(example.base_model, "/cfg/models/Meta-Llama-3-8B");
  EXPECT_EQ(example.datasets.size(), 2u);
}

}  // namespace
}  // namespace qtrain::engine::config
