// TensorBoard event files for scalar metrics, written without TensorFlow or libprotobuf.
//
// A run's scalars are all qtrain logs to TensorBoard, and for those the format is small: TFRecord
// framing (length, masked CRC-32C, data, masked CRC-32C) around a protobuf Event that carries one
// Summary.Value{tag, simple_value}. Encoding those few fields by hand keeps a protobuf runtime out
// of the build. The bytes are what protobuf's serializer produces for the same message (the tests
// pin them); the record format is TensorFlow's TFRecord (tensorflow/core/lib/io/record_writer.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

namespace qtrain::engine::train {

// TFRecord's masked CRC of the CRC-32C (engine/io/crc32c.h): rotated and offset so that a CRC stored inside CRC'd data
// stays robust.
uint32_t masked_crc32c(const uint8_t* data, size_t size);

// Serialized Event{wall_time, step, summary: Summary{value: [Value{tag, simple_value: value}]}}.
// Like protobuf, a zero step and a +0.0 wall time are left out (proto3 defaults).
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
// Serialized Event{wall_time, file_version: "brain.Event:2"}: the record every event file starts
// with; readers use its version to decide how to treat out-of-order steps.
std::string encode_file_version_event(double wall_time);
// One TFRecord: uint64 length (LE) | masked_crc32c(length bytes) (LE) | data | masked_crc32c(data) (LE).
std::string frame_record(const std::string& data);

// Seconds since the Unix epoch, as TensorBoard's wall_time.
double wall_time_now();

// One event file in `log_dir`, named events.out.tfevents.<10-digit epoch seconds>.<hostname>.<pid>.qtrain
// (TensorBoard reads any file whose name contains "tfevents"; PyTorch's SummaryWriter names its
// files the same way up to the hostname). A file of that name is never overwritten: a second
// writer in the same second and process gets ".1", ".2", ... appended, which also sorts after
// the first, the order in which TensorBoard reads a directory's files.
//
// Records are buffered; flush() hands them to the OS, so a crash loses what was added since the
// last flush, and a record torn by the crash is skipped by readers (its CRC does not match).
class TensorBoardWriter {
 public:
  // Creates `log_dir` (and parents) and the file, and writes the file-version record.
  explicit TensorBoardWriter(const std::filesystem::path& log_dir);
  ~TensorBoardWriter();  // flushes; an error there becomes a c10 warning, not an exception
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // `value` is stored as a float (TensorBoard's simple_value); `wall_time` defaults to now.
  void add_scalar(const std::string& tag, double value, int64_t step, std::optional<double> wall_time = std::nullopt);
  void flush();

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace qtrain::engine::train
