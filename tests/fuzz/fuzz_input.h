// How the fuzz targets of this folder read their input, and how the seed
// generator (seed_corpus.cc) writes inputs in the same form: a cursor over
// the bytes libFuzzer hands a target, taking fixed-size integers and
// length-prefixed blobs; what runs out reads as zero or empty, so that every
// input is a valid one. Single-threaded, like the targets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace collective::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return size_ == 0; }

  template <typename T>
  T Take() {
    T value{};
    const size_t n = size_ < sizeof(T) ? size_ : sizeof(T);
    std::memcpy(&value, data_, n);
    data_ += n;
    size_ -= n;
    return value;
  }

  // A blob of at most `max` bytes, its length taken first (two bytes).
  std::string_view TakeBlob(size_t max) {
    size_t n = Take<uint16_t>();
    if (n > max) n = max;
    if (n > size_) n = size_;
    const std::string_view blob(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return blob;
  }

  // Everything not yet taken.
  std::string_view Rest() {
    const std::string_view rest(reinterpret_cast<const char*>(data_), size_);
    data_ += size_;
    size_ = 0;
    return rest;
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

// The writing side, for seeds.
class FuzzOutput {
 public:
  template <typename T>
  FuzzOutput& Put(T value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(T));
    return *this;
  }
  FuzzOutput& PutBlob(std::string_view blob) {
    Put(static_cast<uint16_t>(blob.size()));
    bytes_.append(blob);
    return *this;
  }
  FuzzOutput& PutRest(std::string_view rest) {
    bytes_.append(rest);
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// What each target does with one input; fuzz_entry.cc hands it libFuzzer's.
void FuzzOne(FuzzInput& input);

}  // namespace collective::fuzz
