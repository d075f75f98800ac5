// The SentencePiece model reader on hand-encoded ModelProto bytes: pieces with and without score
// and type, the other fields of both messages skipped, and malformed files named with the byte
// where they break. transformers' protobuf bindings read a real-shaped file in
// ExportGguf.SentencePieceVocabularyIsTheConvertersAndTransformersReadsIt.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "engine/io/remove_tree.h"
#include "engine/io/sentencepiece_model.h"
#include "tests/expect_error.h"
#include "tests/temp_dir.h"

namespace qtrain {
namespace {

namespace fs = std::filesystem;
using engine::io::SentencePiece;

std::string varint(uint64_t v) {
  std::string out;
  do {
    out += static_cast<char>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    v >>= 7;
  } while (v);
  return out;
}

std::string field(int number, const std::string& bytes) {
  return varint(static_cast<uint64_t>(number) << 3 | 2) + varint(bytes.size()) + bytes;
}

std::string piece(const std::string& text, float score, int type) {
  std::string score_bytes(4, '\0');
  std::memcpy(score_bytes.data(), &score, 4);
  std::string p = field(1, text) + varint(2 << 3 | 5) + score_bytes;
  if (type) p += varint(3 << 3 | 0) + varint(type);
  return p;
}

class SentencePieceModel : public testing::Test {
 protected:
  void SetUp() override { dir_ = test::fresh_test_dir(/*create=*/true); }
  void TearDown() override { engine::io::remove_tree(dir_); }
  fs::path write(const std::string& bytes) const {
    const auto file = dir_ / "tokenizer.model";
    std::ofstream(file, std::ios::binary) << bytes;
    return file;
  }
  fs::path dir_;
};

TEST_F(SentencePieceModel, ReadsEachPiecesTextScoreAndType) {
  // A trainer spec (field 2) before the pieces and a normalizer spec (3) after, as spm writes
  // them; a piece with an unknown varint field (4) and one without a type (normal).
  const std::string bytes = field(2, field(1, "corpus.txt") + varint(3 << 3 | 0) + varint(8000)) +
                            field(1, piece("<unk>", 0.0f, SentencePiece::unknown)) +
                            field(1, piece("<s>", 0.0f, SentencePiece::control) + varint(4 << 3 | 0) + varint(1)) +
                            field(1, piece("<0x0A>", 0.0f, SentencePiece::byte)) +
                            field(1, piece("\xE2\x96\x81the", -3.5f, 0)) + field(3, field(1, "nmt_nfkc"));
  const auto pieces = engine::io::read_sentencepiece_model(write(bytes));
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].piece, "<unk>");
  EXPECT_EQ(pieces[0].type, SentencePiece::unknown);
  EXPECT_EQ(pieces[1].type, SentencePiece::control);
  EXPECT_EQ(pieces[2].piece, "<0x0A>");
  EXPECT_EQ(pieces[2].type, SentencePiece::byte);
  EXPECT_EQ(pieces[3].piece, "\xE2\x96\x81the");
  EXPECT_EQ(pieces[3].score, -3.5f);
  EXPECT_EQ(pieces[3].type, SentencePiece::normal);
}

TEST_F(SentencePieceModel, MalformedFilesNameTheFileAndTheByte) {
  const std::string good = field(1, piece("a", -1.0f, 0));
  // Cut inside the piece: its length says more bytes than follow.
  test::expect_error([&] { engine::io::read_sentencepiece_model(write(good.substr(0, good.size() - 2))); },
                     "tokenizer.model: not a SentencePiece model (tokenizer.model): a field runs past the end of its "
                     "message at byte");
  test::expect_error([&] { engine::io::read_sentencepiece_model(write(field(1, piece("a", 0.0f, 9)))); },
                     "piece type 9");
  test::expect_error([&] { engine::io::read_sentencepiece_model(write(field(2, "x"))); }, "without pieces");
}

}  // namespace
}  // namespace qtrain
