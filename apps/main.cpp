// The qtrain command line: one subcommand per job. Errors reach the user as one line that names
// what was wrong and how to fix it, and a non-zero exit code.
#include <c10/util/Exception.h>
#include <CLI/CLI.hpp>

#include "apps/chat_command.h"
#include "apps/eval_command.h"
#include "apps/export_gguf_command.h"
#include "apps/generate_command.h"
#include "apps/init_model_command.h"
#include "apps/keys_command.h"
#include "apps/launch_command.h"
#include "apps/merge_command.h"
#include "apps/plan_command.h"
#include "apps/preprocess_command.h"
#include "apps/quant_report.h"
#include "apps/quantize_command.h"
#include "apps/tokenize_command.h"
#include "apps/train_command.h"
#include "engine/dist/rank_log.h"
#include "engine/dist/warnings_to_log.h"

namespace {

// The ranks' variables when they are valid; a bad one is reported by the command that uses it.
qtrain::engine::dist::DistEnv env_for_log() {
  try {
    return qtrain::engine::dist::dist_env();
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace

int main(int argc, char** argv) {
  qtrain::engine::dist::start_rank_log(env_for_log());
  qtrain::engine::dist::send_torch_warnings_to_log();
  CLI::App app{"qtrain: LoRA fine-tuning on a frozen quantized base (NF4/FP4/INT8), on libtorch"};
  app.require_subcommand(1);
  qtrain::apps::add_chat_command(app);
  qtrain::apps::add_eval_command(app);
  qtrain::apps::add_export_gguf_command(app);
  qtrain::apps::add_generate_command(app);
  qtrain::apps::add_init_model_command(app);
  qtrain::apps::add_keys_command(app);
  qtrain::apps::add_merge_command(app);
  qtrain::apps::add_preprocess_command(app);
  qtrain::apps::add_quant_report_command(app);
  qtrain::apps::add_quantize_command(app);
  qtrain::apps::add_tokenize_command(app);
  int exit_code = 0;
  qtrain::apps::add_plan_command(app, exit_code);
  qtrain::apps::add_train_command(app, exit_code);
  qtrain::apps::add_launch_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const c10::Error& e) {
    qtrain::engine::dist::log_error(e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    qtrain::engine::dist::log_error(e.what());
    return 1;
  }
  return exit_code;
}
