// The pieces of a SentencePiece model file (tokenizer.model: a serialized ModelProto), read
// without the protobuf library: what llama.cpp's converter takes a Gemma or Llama 2 vocabulary
// from. See Note [SentencePiece model].
//
// Note [SentencePiece model]
// ModelProto's field 1 is repeated SentencePiece (other fields, the trainer and normalizer
// specs, are skipped); SentencePiece's fields are piece (1, string), score (2, float) and type
// (3, enum: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6; absent means
// NORMAL). Protocol buffer wire format: each field a varint key (number << 3 | wire type), then
// a varint (type 0), 8 bytes (1), a varint length and the bytes (2), or 4 bytes (5). A piece's
// id is its place in the list.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qtrain::engine::io {

struct SentencePiece {
  enum Type : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };
  std::string piece;
  float score = 0.0f;
  Type type = normal;
};

// The pieces of `file` in id order; an error naming the file and the byte where it is malformed.
std::vector<SentencePiece> read_sentencepiece_model(const std::filesystem::path& file);

}  // namespace qtrain::engine::io
