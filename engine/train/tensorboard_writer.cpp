// TensorBoard event files; see tensorboard_writer.h. Field numbers and wire types: TensorBoard's
// event.proto and summary.proto (Event.wall_time = 1 double, Event.step = 2 int64,
// Event.file_version = 3 string, Event.summary = 5 message; Summary.value = 1 repeated message;
// Summary.Value.tag = 1 string, Summary.Value.simple_value = 2 float).
#include "engine/train/tensorboard_writer.h"

#include <c10/util/Exception.h>
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>
#include <system_error>

#include "engine/io/crc32c.h"

namespace qtrain::engine::train {

namespace fs = std::filesystem;

namespace {

// --- protobuf wire format ------------------------------------------------------------------
// A key byte is (field_number << 3) | wire_type; wire types: 0 varint, 1 fixed64,
// 2 length-delimited, 5 fixed32. Fixed-width values are little-endian.

constexpr uint8_t kEventWallTime = (1 << 3) | 1;
constexpr uint8_t kEventStep = (2 << 3) | 0;
constexpr uint8_t kEventFileVersion = (3 << 3) | 2;
constexpr uint8_t kEventSummary = (5 << 3) | 2;
constexpr uint8_t kSummaryValue = (1 << 3) | 2;
constexpr uint8_t kValueTag = (1 << 3) | 2;
constexpr uint8_t kValueSimpleValue = (2 << 3) | 5;

constexpr const char* kFileVersion = "brain.Event:2";

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) {
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
}

void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
}

void put_bytes(std::string& out, uint8_t key, const std::string& bytes) {
  out.push_back(static_cast<char>(key));
  put_varint(out, bytes.size());
  out += bytes;
}

// Event's header fields. proto3 leaves out scalars equal to their default; protobuf tests a
// double's bits, so -0.0 is written and +0.0 is not.
std::string event_header(double wall_time, int64_t step) {
  std::string out;
  if (std::bit_cast<uint64_t>(wall_time) != 0) {
    out.push_back(static_cast<char>(kEventWallTime));
    put_fixed64(out, std::bit_cast<uint64_t>(wall_time));
  }
  if (step != 0) {
    // int64 (not sint64): a negative step is its two's complement, ten varint bytes.
    out.push_back(static_cast<char>(kEventStep));
    put_varint(out, static_cast<uint64_t>(step));
  }
  return out;
}

std::string hostname() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name.data();
}

}  // namespace

uint32_t masked_crc32c(const uint8_t* data, size_t size) {
  const uint32_t crc = io::crc32c(std::string_view(reinterpret_cast<const char*>(data), size));
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string summary_value;
  if (!tag.empty()) {
    put_bytes(summary_value, kValueTag, tag);
  }
  // simple_value is a member of a oneof, so it is written even when it is 0.
  summary_value.push_back(static_cast<char>(kValueSimpleValue));
  put_fixed32(summary_value, std::bit_cast<uint32_t>(value));

  std::string summary;
  put_bytes(summary, kSummaryValue, summary_value);

  std::string event = event_header(wall_time, step);
  put_bytes(event, kEventSummary, summary);
  return event;
}

std::string encode_file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, kEventFileVersion, kFileVersion);
  return event;
}

std::string frame_record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_fixed64(out, data.size());
  const uint32_t length_crc = masked_crc32c(reinterpret_cast<const uint8_t*>(out.data()), 8);
  put_fixed32(out, length_crc);
  out += data;
  put_fixed32(out, masked_crc32c(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  return out;
}

double wall_time_now() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(since_epoch).count();
}

TensorBoardWriter::TensorBoardWriter(const fs::path& log_dir) {
  std::error_code ec;
  fs::create_directories(log_dir, ec);
  TORCH_CHECK(!ec,
              "cannot create the TensorBoard log directory ",
              log_dir.string(),
              ": ",
              ec.message(),
              "; choose an output directory you can write to, or turn TensorBoard logging off");

  const double now = wall_time_now();
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%010lld", static_cast<long long>(now));
  const std::string base =
      std::string("events.out.tfevents.") + stamp + "." + hostname() + "." + std::to_string(::getpid()) + ".qtrain";
  // O_EXCL: an existing file (another writer in this second and process) is never truncated.
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    path_ = log_dir / (attempt == 0 ? base : base + "." + std::to_string(attempt));
    fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    TORCH_CHECK(fd >= 0 || (errno == EEXIST && attempt < 1000),
                "cannot create the TensorBoard event file ",
                path_.string(),
                ": ",
                std::strerror(errno),
                "; check that ",
                log_dir.string(),
                " is writable and not full");
  }
  file_ = ::fdopen(fd, "wb");
  if (file_ == nullptr) {
    const int error = errno;
    ::close(fd);
    TORCH_CHECK(false, "cannot open the TensorBoard event file ", path_.string(), ": ", std::strerror(error));
  }
  write_record(encode_file_version_event(now));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ == nullptr) {
    return;
  }
  try {
    flush();
  } catch (const std::exception& e) {
    TORCH_WARN("TensorBoard events were lost: ", e.what());
  }
  std::fclose(file_);
}

void TensorBoardWriter::add_scalar(const std::string& tag,
                                   double value,
                                   int64_t step,
                                   std::optional<double> wall_time) {
  TORCH_CHECK(
      !tag.empty(), "TensorBoard scalar at step ", step, " has an empty tag; give it a name such as train/loss");
  write_record(encode_scalar_event(wall_time.value_or(wall_time_now()), step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::write_record(const std::string& event) {
  const std::string record = frame_record(event);
  TORCH_CHECK(std::fwrite(record.data(), 1, record.size(), file_) == record.size(),
              "cannot write to the TensorBoard event file ",
              path_.string(),
              ": ",
              std::strerror(errno),
              "; check that the disk is not full");
}

void TensorBoardWriter::flush() {
  TORCH_CHECK(std::fflush(file_) == 0,
              "cannot write to the TensorBoard event file ",
              path_.string(),
              ": ",
              std::strerror(errno),
              "; check that the disk is not full");
}

}  // namespace qtrain::engine::train
