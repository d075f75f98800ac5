// The model without its adapters, for as long as a guard lives. See Note [Adapters off].
//
// Note [Adapters off]
// Preference tuning (DPO, KTO) compares the trained model with a reference, and on a LoRA run the
// reference is the base itself: TRL computes it through peft's disable_adapter(), under which
// every LoRA layer returns its base layer's output and every modules_to_save wrapper its original
// module. qtrain needs no second model for it either: while an AdaptersOff lives on a thread,
// each adapted linear, router and expert computes its base alone (LoRA and DoRA alike add
// nothing), and the token embeddings and head trained in full give way to the frozen ones, so
// the same weights, streamed or sharded as in training, compute the base model bit for bit. The
// norms trained in full replace the base's in their layers (Note [Modules trained in full]) and
// are not switched: a run that trains norms, or continues an adapter, takes its reference from a
// copy of its starting weights instead (Note [Reference adapter] in
// engine/train/reference_weights.h).
#pragma once

namespace qtrain::engine::lora {

// Whether the adapters compute on this thread (no AdaptersOff alive).
bool adapters_on();

class AdaptersOff {
 public:
  AdaptersOff();
  ~AdaptersOff();
  AdaptersOff(const AdaptersOff&) = delete;
  AdaptersOff& operator=(const AdaptersOff&) = delete;

 private:
  bool was_on_;
};

}  // namespace qtrain::engine::lora
