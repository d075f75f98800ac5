// See sentencepiece_model.h and Note [SentencePiece model] there.
#include "engine/io/sentencepiece_model.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <string_view>

#include <c10/util/Exception.h>

namespace qtrain::engine::io {
namespace {

// A cursor over one message's bytes; errors name the file and the offset in it.
class Wire {
 public:
  Wire(std::string_view bytes, size_t base, const std::filesystem::path& file)
      : bytes_(bytes), base_(base), file_(file) {}

  bool done() const { return at_ == bytes_.size(); }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto b = static_cast<uint8_t>(bytes_[at_++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    fail("a varint longer than 10 bytes");
    return 0;
  }

  // The bytes of a length-delimited field, and their offset in the file.
  std::pair<std::string_view, size_t> bytes() {
    const uint64_t n = varint();
    need(n);
    const auto out = std::pair{bytes_.substr(at_, n), base_ + at_};
    at_ += n;
    return out;
  }

  float fixed32_float() {
    need(4);
    float f;
    std::memcpy(&f, bytes_.data() + at_, 4);  // little-endian, as protobuf stores it
    at_ += 4;
    return f;
  }

  void skip(uint64_t wire_type) {
    switch (wire_type) {
      case 0:
        varint();
        return;
      case 1:
        need(8);
        at_ += 8;
        return;
      case 2:
        bytes();
        return;
      case 5:
        need(4);
        at_ += 4;
        return;
    }
    fail("wire type " + std::to_string(wire_type) + ", which a SentencePiece model does not use");
  }

  [[noreturn]] void fail(const std::string& what) const {
    TORCH_CHECK(
        false, file_.string(), ": not a SentencePiece model (tokenizer.model): ", what, " at byte ", base_ + at_);
  }

 private:
  void need(uint64_t n) const {
    if (n > bytes_.size() - at_) fail("a field runs past the end of its message");
  }

  std::string_view bytes_;
  size_t base_;
  const std::filesystem::path& file_;
  size_t at_ = 0;
};

SentencePiece read_piece(std::string_view bytes, size_t base, const std::filesystem::path& file) {
  SentencePiece p;
  Wire w(bytes, base, file);
  while (!w.done()) {
    const uint64_t key = w.varint();
    const uint64_t field = key >> 3, wire_type = key & 7;
    if (field == 1 && wire_type == 2) {
      p.piece = std::string(w.bytes().first);
    } else if (field == 2 && wire_type == 5) {
      p.score = w.fixed32_float();
    } else if (field == 3 && wire_type == 0) {
      const uint64_t type = w.varint();
      if (type < SentencePiece::normal || type > SentencePiece::byte) w.fail("piece type " + std::to_string(type));
      p.type = static_cast<SentencePiece::Type>(type);
    } else {
      w.skip(wire_type);
    }
  }
  return p;
}

}  // namespace

std::vector<SentencePiece> read_sentencepiece_model(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  TORCH_CHECK(in.good(), file.string(), ": cannot be read");
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<SentencePiece> pieces;
  Wire w(data, 0, file);
  while (!w.done()) {
    const uint64_t key = w.varint();
    if (key >> 3 == 1 && (key & 7) == 2) {
      const auto [bytes, offset] = w.bytes();
      pieces.push_back(read_piece(bytes, offset, file));
    } else {
      w.skip(key & 7);
    }
  }
  TORCH_CHECK(!pieces.empty(), file.string(), ": a SentencePiece model without pieces");
  return pieces;
}

}  // namespace qtrain::engine::io
