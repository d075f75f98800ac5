// Data-parallel training with real processes over Gloo on 127.0.0.1 (a free port per test, so
// ctest -j is safe): two ranks train exactly as one rank with twice the gradient accumulation,
// started by `qtrain launch` or torchrun; only rank 0 writes files and prints steps; a checkpoint
// of two ranks resumes exactly on two and refuses to resume on one; a rank that dies makes the other stop with an error
// naming it, and `qtrain launch` ends the run with its code; Ctrl-C stops both ranks at one step
// with one checkpoint. See Note [Data-parallel steps].
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/io/peft_adapter.h"
#include "engine/io/remove_tree.h"
#include "engine/io/safetensors.h"
#include "engine/train/data_parallel.h"
#include "engine/train/run_state.h"
#include "engine/train/trainer.h"
#include "tests/expect_error.h"
#include "tests/free_port.h"
#include "tests/reference.h"
#include "tests/temp_dir.h"
#include "tests/thread_ranks.h"

extern char** environ;

namespace qtrain::engine::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// `argv` with this process's environment plus `env`, stdout and stderr into files.
pid_t spawn(const std::vector<std::string>& argv,
            const std::map<std::string, std::string>& env,
            const fs::path& out,
            const fs::path& err) {
  std::vector<std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (env.count(kv.substr(0, kv.find('='))) == 0) vars.push_back(kv);
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  std::vector<std::string> args = argv;
  std::vector<char*> c_args, c_vars;
  for (auto& a : args) c_args.push_back(a.data());
  for (auto& v : vars) c_vars.push_back(v.data());
  c_args.push_back(nullptr);
  c_vars.push_back(nullptr);
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execve(c_args[0], c_args.data(), c_vars.data());
    ::_exit(127);
  }
  ::close(out_fd);
  ::close(err_fd);
  return pid;
}

// The exit code (128 + signal when killed), or -1 after `limit` (the process is then killed).
int wait_for(pid_t pid, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > end) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits until `file` exists and is not empty; false if `pid` exited first (it is left to reap).
bool wait_for_file(const fs::path& file, pid_t pid) {
  for (int i = 0; i < 2400; ++i) {
    if (fs::exists(file) && fs::file_size(file) > 0) return true;
    siginfo_t info{};
    if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<nlohmann::json> step_records(const fs::path& output_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(output_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j);
  }
  return out;
}

void expect_same_tensors(const std::map<std::string, at::Tensor>& a,
                         const std::map<std::string, at::Tensor>& b,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << what << ": " << name;
    EXPECT_TRUE(test::bitwise_equal(t, b.at(name))) << what << ": " << name;
  }
}

class DataParallel : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_test_dir(/*create=*/true);
    // Eight pre-tokenized rows of the llama fixture's vocabulary, some with masked prompts.
    at::manual_seed(5);
    std::ofstream data(dir_ / "data.jsonl");
    for (int i = 0; i < 8; ++i) {
      const int64_t len = 10 + 3 * i;
      const auto ids = at::randint(0, 160, {len}, at::kLong);
      std::vector<int64_t> v(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len), labels = v;
      if (i % 3 == 0) std::fill(labels.begin(), labels.begin() + 4, -100);
      data << nlohmann::json{{"input_ids", v}, {"labels", labels}}.dump() << "\n";
    }
    const auto base = test::model_fixture("llama");
    // Micro-batches of 2 rows, accumulation 2 on one rank or 1 on each of two: two steps per
    // epoch, so 4 steps cross an epoch (and a reshuffle).
    std::ofstream(dir_ / "cfg.yaml") << "base_model: " << (base / "base").string() << "\n"
                                     << "lora_model_dir: " << (base / "adapter").string() << "\n"
                                     << "lora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n"
                                     << "load_in_4bit: true\nlora_dropout: 0\n"
                                     << "datasets:\n  - path: data.jsonl\n"
                                     << "sequence_len: 64\nmicro_batch_size: 2\nmax_steps: 4\n"
                                     << "learning_rate: 0.002\nwarmup_steps: 2\nmax_grad_norm: 1.0\n"
                                     << "device: cpu\nlogging_steps: 1\nseed: 3\nsave_steps: 2\n"
                                     << "use_tensorboard: true\nddp_timeout: 60\n";
  }
  void TearDown() override { qtrain::engine::io::remove_tree(dir_); }

  // `[PREFIX...] qtrain ARGS... cfg.yaml --set output_dir=NAME --set SETS...`; PREFIX starts
  // qtrain through another program (torchrun).
  std::vector<std::string> qtrain(const std::vector<std::string>& args,
                                  const std::string& name,
                                  const std::vector<std::string>& sets,
                                  const std::vector<std::string>& prefix = {}) const {
    std::vector<std::string> argv = prefix;
    argv.push_back(QTRAIN_BINARY);
    argv.insert(argv.end(), args.begin(), args.end());
    argv.push_back((dir_ / "cfg.yaml").string());
    argv.insert(argv.end(), {"--set", "output_dir=" + name});
    for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});
    return argv;
  }
  // Runs `argv` to its end with one thread per process (as torchrun sets it), so that every run
  // computes with the same arithmetic; expects exit code 0.
  int run(const std::vector<std::string>& argv, const std::string& name) const {
    const pid_t pid = spawn(argv, {{"OMP_NUM_THREADS", "1"}}, dir_ / (name + ".out"), dir_ / (name + ".err"));
    const int code = wait_for(pid, std::chrono::seconds(120));
    EXPECT_EQ(code, 0) << name << ":\n" << read(dir_ / (name + ".err"));
    return code;
  }

  fs::path dir_;
};

TEST_F(DataParallel, TwoRanksTrainAsOneRankWithTwiceTheAccumulation) {
  run(qtrain({"train"}, "one", {"gradient_accumulation_steps=2"}), "one");
  run(qtrain({"launch", "--nproc", "2", "--master-port", "0", "train"}, "two", {"gradient_accumulation_steps=1"}),
      "two");
  const auto one = dir_ / "one", two = dir_ / "two";

  // Losses, the saved adapter and the optimizer state: bitwise. With two ranks and one
  // micro-batch each, the sum over ranks g0 + g1 is the one-rank accumulation itself (See Note
  // [Data-parallel steps]); every micro-batch is computed with the same arithmetic (one thread).
  const auto a = step_records(one), b = step_records(two);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);  // one line per step: rank 1 appended nothing
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i].at("loss").get<double>(), b[i].at("loss").get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i].at("grad_norm").get<double>(), b[i].at("grad_norm").get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i].at("comm_seconds").get<double>(), 0.0);
    EXPECT_GT(b[i].at("comm_seconds").get<double>(), 0.0);
  }
  for (const char* ck : {"checkpoint-2", "checkpoint-4"}) {
    expect_same_tensors(io::safetensors_load(one / ck / "optimizer.safetensors"),
                        io::safetensors_load(two / ck / "optimizer.safetensors"),
                        std::string(ck) + " optimizer");
    EXPECT_EQ(load_checkpoint(one / ck).state.world_size, 1);
    const auto two_ck = load_checkpoint(two / ck);
    EXPECT_EQ(two_ck.state.world_size, 2);
    EXPECT_EQ(two_ck.state.rng_cpu.size(), 2u);  // each rank's generator, for an exact resume
  }
  const auto x = io::load_peft_adapter(one), y = io::load_peft_adapter(two);
  ASSERT_EQ(x.adapters.size(), y.adapters.size());
  for (const auto& [name, ad] : x.adapters) {
    EXPECT_TRUE(test::bitwise_equal(ad.a, y.adapters.at(name).a)) << name;
    EXPECT_TRUE(test::bitwise_equal(ad.b, y.adapters.at(name).b)) << name;
  }

  // Only rank 0 wrote: one TensorBoard event file, and one progress line per step on stdout.
  int events = 0;
  for (const auto& e : fs::directory_iterator(two / "runs")) events += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(events, 1);
  const auto out = read(dir_ / "two.out");
  EXPECT_NE(out.find("ranks: 2 (Gloo), a step is 2 micro-batches, 1 on each rank"), std::string::npos) << out;
  EXPECT_NE(out.find("step 1/4"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 1/4"), out.rfind("step 1/4")) << out;
  EXPECT_EQ(out.find("done: 4 steps"), out.rfind("done: 4 steps")) << out;

  // The same ranks under torchrun (its agent serves the store), from the venv, now with dropout:
  // each rank draws from its own generator. Resumed from its checkpoint-2 on two ranks (under
  // qtrain launch), it ends bit for bit where it ended: the checkpoint holds both ranks' states.
  const char* python = std::getenv("QTRAIN_PYTHON");
  if (python != nullptr) {
    const auto torchrun = fs::path(python).parent_path() / "torchrun";
    ASSERT_TRUE(fs::exists(torchrun)) << torchrun << ": the venv of scripts/setup.sh has torchrun";
    const std::vector<std::string> prefix = {
        torchrun.string(), "--no-python", "--nproc-per-node", "2", "--master-port", std::to_string(test::free_port())};
    const std::vector<std::string> sets = {"gradient_accumulation_steps=1", "lora_dropout=0.1"};
    run(qtrain({"train"}, "torchrun", sets, prefix), "torchrun");
    auto resume_sets = sets;
    resume_sets.push_back("resume_from_checkpoint=" + (dir_ / "torchrun" / "checkpoint-2").string());
    run(qtrain({"launch", "--nproc", "2", "--master-port", "0", "train"}, "resumed2", resume_sets), "resumed2");
    const auto full = step_records(dir_ / "torchrun"), resumed = step_records(dir_ / "resumed2");
    ASSERT_EQ(full.size(), 4u);
    ASSERT_EQ(resumed.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(resumed[i].at("loss").get<double>(), full[2 + i].at("loss").get<double>());
    const auto f = io::load_peft_adapter(dir_ / "torchrun"), r = io::load_peft_adapter(dir_ / "resumed2");
    for (const auto& [name, ad] : f.adapters) {
      EXPECT_TRUE(test::bitwise_equal(ad.a, r.adapters.at(name).a)) << name;
      EXPECT_TRUE(test::bitwise_equal(ad.b, r.adapters.at(name).b)) << name;
    }
  }

  // A checkpoint of two ranks refuses to resume on one, and says why and what to do.
  test::expect_error(
      [&] {
        train(config::load_run_config(
            dir_ / "cfg.yaml", {"output_dir=resumed", "resume_from_checkpoint=" + (two / "checkpoint-2").string()}));
      },
      "was written by a run of 2 rank(s) and this run has 1");
}

// Preference tuning (rl: dpo) over two ranks: each rank takes its micro-batch of pairs, runs the
// reference and the model, and the step's loss, gradient and TRL's metrics are summed over the
// ranks; so two ranks train as one rank with twice the accumulation, bit for bit (two summands
// add the same in any order), held-out pairs evaluate the same (rank 1 has no evaluation batch),
// and a sharded base, whose ranks pass through each other's two forwards of an evaluation batch,
// changes no bit.
TEST_F(DataParallel, TwoRanksOfDpoTrainAsOneRankWithTwiceTheAccumulation) {
  at::manual_seed(6);
  {
    std::ofstream pairs(dir_ / "pairs.jsonl");
    for (int i = 0; i < 8; ++i) {
      auto ids = [](int64_t n) {
        const auto t = at::randint(0, 160, {n}, at::kLong);
        return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
      };
      pairs
          << nlohmann::json{{"prompt_ids", ids(3 + i)}, {"chosen_ids", ids(2 + i % 3)}, {"rejected_ids", ids(4)}}.dump()
          << "\n";
    }
  }
  const auto base = test::model_fixture("llama");
  std::ofstream(dir_ / "cfg.yaml") << "base_model: " << (base / "base").string() << "\n"
                                   << "lora_model_dir: " << (base / "adapter").string() << "\n"
                                   << "lora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n"
                                   << "load_in_4bit: true\nrl: dpo\nrl_beta: 0.1\n"
                                   << "datasets:\n  - path: pairs.jsonl\n"
                                   << "val_set_size: 2\neval_steps: 2\n"
                                   << "sequence_len: 64\nmicro_batch_size: 2\nmax_steps: 4\n"
                                   << "learning_rate: 0.002\nwarmup_steps: 2\nmax_grad_norm: 1.0\n"
                                   << "device: cpu\nlogging_steps: 1\nseed: 3\nddp_timeout: 60\n";
  const std::vector<std::string> launch = {"launch", "--nproc", "2", "--master-port", "0", "train"};
  run(qtrain({"train"}, "one", {"gradient_accumulation_steps=2"}), "one");
  run(qtrain(launch, "two", {"gradient_accumulation_steps=1"}), "two");
  run(qtrain(launch, "sharded", {"gradient_accumulation_steps=1", "shard_base=true"}), "sharded");
  // With the reference precomputed, the ranks share the precompute pass (3 batches of training
  // pairs: rank 1 passes through the third's gathers), and an evaluation round runs one forward
  // per batch, rank 1, without a batch, passing through that one only.
  run(qtrain({"train"}, "one-precomputed", {"gradient_accumulation_steps=2", "precompute_ref_log_probs=true"}),
      "one-precomputed");
  run(qtrain(launch,
             "sharded-precomputed",
             {"gradient_accumulation_steps=1", "shard_base=true", "precompute_ref_log_probs=true"}),
      "sharded-precomputed");
  const auto rows = [](const fs::path& dir) {
    std::vector<nlohmann::json> out;
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  };
  const auto a = rows(dir_ / "one");
  ASSERT_EQ(a.size(), 6u);  // 4 steps, 2 evaluations
  for (const char* other : {"two", "sharded"}) {
    SCOPED_TRACE(other);
    const auto b = rows(dir_ / other);
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      for (const char* key :
           {"loss", "grad_norm", "rewards/margins", "logps/chosen", "eval_loss", "eval_rewards/margins"}) {
        if (!a[i].contains(key)) continue;
        EXPECT_EQ(a[i].at(key).get<double>(), b[i].at(key).get<double>()) << key << " in row " << i;
      }
    }
    const auto x = io::load_peft_adapter(dir_ / "one"), y = io::load_peft_adapter(dir_ / other);
    for (const auto& [name, ad] : x.adapters) {
      EXPECT_TRUE(test::bitwise_equal(ad.a, y.adapters.at(name).a)) << name;
      EXPECT_TRUE(test::bitwise_equal(ad.b, y.adapters.at(name).b)) << name;
    }
  }
  // Each pair's reference is computed by one rank, the same batch as one rank computes it: bitwise.
  // (Against the per-step reference, the same base in other batches: equal to float32 rounding.)
  const auto p = rows(dir_ / "sharded-precomputed"), q = rows(dir_ / "one-precomputed");
  ASSERT_EQ(p.size(), a.size());
  ASSERT_EQ(q.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* key : {"loss", "grad_norm", "rewards/margins", "eval_loss", "eval_rewards/margins"}) {
      if (!a[i].contains(key)) continue;
      EXPECT_EQ(q[i].at(key).get<double>(), p[i].at(key).get<double>()) << key << " in row " << i;
      EXPECT_NEAR(a[i].at(key).get<double>(), p[i].at(key).get<double>(), 1e-5) << key << " in row " << i;
    }
  }
  EXPECT_NE(read(dir_ / "sharded-precomputed.out").find("precompute_ref_log_probs: 6/8 pairs"), std::string::npos)
      << read(dir_ / "sharded-precomputed.out");
  EXPECT_NE(read(dir_ / "two.out").find("ranks: 2 (Gloo), a step is 2 micro-batches, 1 on each rank"),
            std::string::npos);
  EXPECT_NE(read(dir_ / "sharded.out").find("shard_base: "), std::string::npos);
  ASSERT_TRUE(a[2].contains("eval_loss")) << a[2].dump();
  EXPECT_TRUE(a[2].contains("eval_rewards/accuracies")) << a[2].dump();
  EXPECT_TRUE(a[3].contains("rewards/accuracies")) << a[3].dump();
}

TEST_F(DataParallel, TwoRanksWithAShardedBaseTrainAsTwoRanksWithout) {
  // One held-out row: one evaluation batch, so rank 1 passes through the layers without one
  // (LayerScheduler::skip_eval) while rank 0 gathers them with it. With one layer also offloaded,
  // its shard gathers from host memory.
  const std::vector<std::string> sets = {"gradient_accumulation_steps=1", "val_set_size=1", "eval_steps=2"};
  auto sharded_sets = sets;
  sharded_sets.insert(sharded_sets.end(), {"shard_base=true", "offload_layers=1"});
  const std::vector<std::string> launch = {"launch", "--nproc", "2", "--master-port", "0", "train"};
  run(qtrain(launch, "whole", sets), "whole");
  run(qtrain(launch, "sharded", sharded_sets), "sharded");
  // Every gather puts back the very bytes of the layer (See Note [Sharded base]): bitwise.
  const auto a = step_records(dir_ / "whole"), b = step_records(dir_ / "sharded");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i].at("loss").get<double>(), b[i].at("loss").get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i].at("grad_norm").get<double>(), b[i].at("grad_norm").get<double>()) << "step " << i + 1;
  }
  const auto evals = [](const fs::path& dir) {
    std::vector<double> out;
    std::ifstream in(dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("eval_loss")) out.push_back(j.at("eval_loss").get<double>());
    }
    return out;
  };
  const auto ea = evals(dir_ / "whole"), eb = evals(dir_ / "sharded");
  ASSERT_EQ(ea.size(), 2u);
  EXPECT_EQ(ea, eb);
  const auto x = io::load_peft_adapter(dir_ / "whole"), y = io::load_peft_adapter(dir_ / "sharded");
  for (const auto& [name, ad] : x.adapters) {
    EXPECT_TRUE(test::bitwise_equal(ad.a, y.adapters.at(name).a)) << name;
    EXPECT_TRUE(test::bitwise_equal(ad.b, y.adapters.at(name).b)) << name;
  }
  const auto out = read(dir_ / "sharded.out");
  EXPECT_NE(out.find("shard_base: "), std::string::npos) << out;
  EXPECT_NE(out.find(" on each of 2 ranks"), std::string::npos) << out;
  // Rank 0 reads layers 0 and 2 of the three; rank 1 reads layer 1 and sends rank 0 its shard.
  EXPECT_NE(out.find("this rank read 2 of the 3 layers"), std::string::npos) << out;
}

// Three ranks as processes, each with a third of the base: the same bits as three ranks with the
// whole base, and the same training as one rank with three times the accumulation up to the
// grouping of the gradient sum (Gloo's ring sums 3 ranks in another order than one rank
// accumulates: float32 rounding, so a relative 1e-5 on losses and weights after 4 steps).
TEST_F(DataParallel, ThreeRanksWithAShardedBaseTrainAsOneRankWithThreeTimesTheAccumulation) {
  const std::vector<std::string> launch = {"launch", "--nproc", "3", "--master-port", "0", "train"};
  run(qtrain({"train"}, "one", {"gradient_accumulation_steps=3"}), "one");
  run(qtrain(launch, "whole3", {"gradient_accumulation_steps=1"}), "whole3");
  run(qtrain(launch, "sharded3", {"gradient_accumulation_steps=1", "shard_base=true"}), "sharded3");
  const auto one = step_records(dir_ / "one"), whole = step_records(dir_ / "whole3"),
             sharded = step_records(dir_ / "sharded3");
  ASSERT_EQ(one.size(), 4u);
  ASSERT_EQ(whole.size(), 4u);
  ASSERT_EQ(sharded.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(whole[i].at("loss").get<double>(), sharded[i].at("loss").get<double>()) << "step " << i + 1;
    const double a = one[i].at("loss").get<double>(), b = sharded[i].at("loss").get<double>();
    EXPECT_NEAR(a, b, 1e-5 * std::abs(a)) << "step " << i + 1;
  }
  const auto x = io::load_peft_adapter(dir_ / "whole3"), y = io::load_peft_adapter(dir_ / "sharded3"),
             z = io::load_peft_adapter(dir_ / "one");
  for (const auto& [name, ad] : x.adapters) {
    EXPECT_TRUE(test::bitwise_equal(ad.a, y.adapters.at(name).a)) << name;
    EXPECT_TRUE(test::bitwise_equal(ad.b, y.adapters.at(name).b)) << name;
    EXPECT_TRUE(at::allclose(z.adapters.at(name).b, y.adapters.at(name).b, 1e-5, 1e-7)) << name;
  }
}

TEST_F(DataParallel, ARankThatDiesIsNamedAndLaunchStopsTheOthers) {
  const pid_t launcher =
      spawn(qtrain({"launch", "--nproc", "2", "--master-port", "0", "train"}, "dies", {"max_steps=100000"}),
            {{"OMP_NUM_THREADS", "1"}},
            dir_ / "dies.out",
            dir_ / "dies.err");
  ASSERT_TRUE(wait_for_file(dir_ / "dies" / "metrics.jsonl", launcher)) << read(dir_ / "dies.err");
  // The launcher's children, and which of them is rank 1 (qtrain launch sets LOCAL_RANK = RANK).
  const auto tid = std::to_string(launcher);
  std::istringstream children(read("/proc/" + tid + "/task/" + tid + "/children"));
  pid_t rank1 = 0;
  for (pid_t child = 0; children >> child;) {
    const auto env = read("/proc/" + std::to_string(child) + "/environ");
    if (env.find(std::string("LOCAL_RANK=1") + '\0') != std::string::npos) rank1 = child;
  }
  ASSERT_NE(rank1, 0);
  ::kill(rank1, SIGKILL);
  // Well within ddp_timeout (60 s): rank 0's next sum fails at once, its roll call waits 3 s.
  const auto start = Clock::now();
  EXPECT_EQ(wait_for(launcher, std::chrono::seconds(60)), 128 + SIGKILL);  // rank 1's end is the run's
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  const auto err = read(dir_ / "dies.err");  // the launcher's and both ranks' stderr
  EXPECT_NE(err.find("qtrain launch: rank 1 was killed by signal 9"), std::string::npos) << err;
  // Rank 0 fails in whichever collective comes next (a sum, or a checkpoint's barrier).
  EXPECT_NE(err.find("qtrain: error: rank 0 of 2: "), std::string::npos) << err;
  EXPECT_NE(err.find("Rank 1 did not answer within 3 s"), std::string::npos) << err;
}

TEST_F(DataParallel, CtrlCStopsEveryRankAtOneStepWithOneCheckpoint) {
  const pid_t launcher = spawn(
      qtrain(
          {"launch", "--nproc", "2", "--master-port", "0", "train"}, "stopped", {"max_steps=100000", "save_steps=0"}),
      {{"OMP_NUM_THREADS", "1"}},
      dir_ / "stopped.out",
      dir_ / "stopped.err");
  ASSERT_TRUE(wait_for_file(dir_ / "stopped" / "metrics.jsonl", launcher)) << read(dir_ / "stopped.err");
  ::kill(launcher, SIGINT);  // passed on to both ranks
  EXPECT_EQ(wait_for(launcher, std::chrono::seconds(60)), 130) << read(dir_ / "stopped.err");
  const auto all = list_checkpoints(dir_ / "stopped");
  ASSERT_EQ(all.size(), 1u);
  const auto ck = load_checkpoint(all[0]);
  EXPECT_EQ(ck.state.world_size, 2);
  EXPECT_EQ(step_records(dir_ / "stopped").back().at("step").get<int64_t>(), ck.state.global_step);
}

// Only rank 0 looks at output_dir; the others take the checkpoint to resume from (a path, or none)
// from it, whatever they would find themselves.
TEST(TextFromRank0, EveryRankGetsRankZerosTextEmptyOrNot) {
  for (const std::string& sent : {std::string("/runs/a/checkpoint-12"), std::string()}) {
    std::vector<std::string> got(3);
    test::run_ranks(3, std::chrono::seconds(30), [&](dist::Comm& comm) {
      got[comm.rank()] =
          text_from_rank0(comm, comm.lead() ? sent : "rank's own " + std::to_string(comm.rank()), "telling");
    });
    for (const auto& g : got) EXPECT_EQ(g, sent);
  }
}

}  // namespace
}  // namespace qtrain::engine::train
