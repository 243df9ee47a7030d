#include "daemon/negotiation/response_cache.h"

#include <algorithm>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

namespace collective::daemon::negotiation {

v1::TensorRequest CacheForm(const v1::TensorRequest& request) {
  v1::TensorRequest form = request;
  form.clear_request_id();
  form.clear_offset();
  // Whether it is grouped, and in how many, stays (mismatch.h compares it);
  // the client's own id for the group goes.
  if (form.group_id() != 0) {
    form.set_group_id(1);
  } else {
    form.clear_group_size();
  }
  return form;
}

std::string CacheFormBytes(const v1::TensorRequest& request) {
  const v1::TensorRequest form = CacheForm(request);
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    form.SerializeToCodedStream(&coded);
  }  // the stream's end writes the last bytes
  return bytes;
}

void ResponseCache::Retire(uint32_t bit) {
  auto it = by_bit_.find(bit);
  if (it == by_bit_.end() || it->second.retired) return;
  by_key_.erase(it->second.key);
  it->second.retired = true;
  ++version_;
}

void ResponseCache::Put(uint32_t bit, Key key, std::vector<v1::RankRequest> ranks) {
  if (auto old = by_key_.find(key); old != by_key_.end()) Retire(old->second);
  if (auto it = by_bit_.find(bit); it != by_bit_.end() && !it->second.retired) {
    by_key_.erase(it->second.key);
  }
  std::vector<std::string> forms;
  forms.reserve(ranks.size());
  for (const v1::RankRequest& rank : ranks) forms.push_back(CacheFormBytes(rank.request()));
  by_key_[key] = bit;
  by_bit_[bit] = Entry{.key = std::move(key),
                       .ranks = std::move(ranks),
                       .forms = std::move(forms),
                       .retired = false};
  ++version_;
}

void ResponseCache::Apply(const v1::Decisions& batch) {
  for (const v1::Decision& decision : batch.decisions()) {
    for (uint32_t bit : decision.retire_bits()) Retire(bit);
    if (!decision.cache_put()) continue;
    std::vector<v1::RankRequest> ranks(decision.ranks().begin(), decision.ranks().end());
    for (v1::RankRequest& rank : ranks) *rank.mutable_request() = CacheForm(rank.request());
    Put(decision.cache_bit(), {decision.process_set_id(), decision.name()}, std::move(ranks));
  }
}

std::optional<uint32_t> ResponseCache::BitOf(const Key& key) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

const ResponseCache::Entry* ResponseCache::At(uint32_t bit) const {
  auto it = by_bit_.find(bit);
  return it == by_bit_.end() ? nullptr : &it->second;
}

std::optional<uint32_t> ResponseCache::Match(const ReadyTensor& tensor) const {
  if (!enabled()) return std::nullopt;
  const std::optional<uint32_t> bit = BitOf({tensor.process_set_id, tensor.name});
  if (!bit.has_value()) return std::nullopt;
  const Entry& entry = by_bit_.at(*bit);
  for (const Submission& submission : tensor.submissions) {
    const auto rank = static_cast<size_t>(submission.set_rank);
    if (rank >= entry.forms.size() || CacheFormBytes(submission.request) != entry.forms[rank]) {
      return std::nullopt;
    }
  }
  return bit;
}

CacheBits::CacheBits(uint32_t capacity, int nodes)
    : capacity_(capacity), applied_(static_cast<size_t>(nodes), 0) {}

std::optional<uint32_t> CacheBits::Take(uint64_t batch, std::vector<uint32_t>& retired) {
  Reclaim();
  std::optional<uint32_t> bit;
  if (!free_.empty()) {
    bit = free_.back();
    free_.pop_back();
  } else if (next_unused_ < capacity_) {
    bit = next_unused_++;
  } else if (!lru_.empty()) {
    // Full: make room for a later entry.
    const uint32_t oldest = lru_.front();
    Retire(oldest, batch);
    retired.push_back(oldest);
  }
  if (bit.has_value()) {
    lru_.push_back(*bit);
    live_[*bit] = std::prev(lru_.end());
  }
  return bit;
}

void CacheBits::Touch(uint32_t bit) {
  auto it = live_.find(bit);
  if (it == live_.end()) return;
  lru_.splice(lru_.end(), lru_, it->second);
}

void CacheBits::Retire(uint32_t bit, uint64_t batch) {
  auto it = live_.find(bit);
  if (it == live_.end()) return;
  lru_.erase(it->second);
  live_.erase(it);
  retiring_.emplace_back(batch, bit);
}

void CacheBits::Acknowledge(int node, uint64_t batches) {
  uint64_t& applied = applied_[static_cast<size_t>(node)];
  applied = std::max(applied, batches);
}

void CacheBits::Reclaim() {
  const uint64_t everyone = *std::min_element(applied_.begin(), applied_.end());
  // A bit retired in batch b (numbered from 1) is free once every node has
  // applied b batches.
  std::erase_if(retiring_, [&](const std::pair<uint64_t, uint32_t>& retiring) {
    if (retiring.first > everyone) return false;
    free_.push_back(retiring.second);
    return true;
  });
}

std::string PackBits(const std::vector<uint32_t>& bits) {
  std::string packed;
  for (uint32_t bit : bits) {
    if (packed.size() <= bit / 8) packed.resize(bit / 8 + 1, '\0');
    packed[bit / 8] =
        static_cast<char>(static_cast<unsigned char>(packed[bit / 8]) | (1u << (bit % 8)));
  }
  return packed;
}

std::vector<uint32_t> UnpackBits(const std::string& packed) {
  std::vector<uint32_t> bits;
  for (size_t byte = 0; byte < packed.size(); ++byte) {
    const auto value = static_cast<unsigned char>(packed[byte]);
    for (uint32_t bit = 0; bit < 8; ++bit) {
      if (value & (1u << bit)) bits.push_back(static_cast<uint32_t>(byte * 8 + bit));
    }
  }
  return bits;
}

}  // namespace collective::daemon::negotiation
