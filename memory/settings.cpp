// SPDX-License-Identifier: MIT
#include <snug/memory/settings.h>

#include <cctype>
#include <climits>
#include <cstdlib>
#include <vector>

#include <snug/base/error.h>

namespace snug::memory {
namespace {

bool is_pow2(std::size_t v) { return v != 0 && (v & (v - 1)) == 0; }

std::string size_str(std::size_t v) { return v == kNoLimit ? "none" : std::to_string(v); }

// "64MiB" -> 67108864. Throws ValueError naming `key` on anything else.
std::size_t parse_size(const std::string& key, const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  SNUG_CHECK(i > 0, ValueError, "allocator setting ", key, ": expected a byte count like 512, 4MiB or 1G, got \"", text,
             "\"");
  // Digit by digit with an overflow check: every value to_string() prints (up
  // to SIZE_MAX, 20 digits) must parse back (found by fuzzing: a 13-digit
  // count in MiB printed as 20 digits, which a 19-digit limit refused).
  unsigned long long n = 0;
  for (std::size_t k = 0; k < i; ++k) {
    const unsigned d = static_cast<unsigned>(text[k] - '0');
    SNUG_CHECK(n <= (ULLONG_MAX - d) / 10, ValueError, "allocator setting ", key, ": \"", text, "\" is too large");
    n = n * 10 + d;
  }
  std::string suffix = text.substr(i);
  unsigned long long mult = 1;
  if (suffix.empty() || suffix == "B")
    mult = 1;
  else if (suffix == "K" || suffix == "KiB" || suffix == "k" || suffix == "KB")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "MiB" || suffix == "MB")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "GiB" || suffix == "GB")
    mult = 1ull << 30;
  else
    throw ValueError(str("allocator setting ", key, ": unknown size suffix \"", suffix, "\" in \"", text,
                         "\" (use K, M, G, KiB, MiB or GiB)"));
  SNUG_CHECK(n <= SIZE_MAX / mult, ValueError, "allocator setting ", key, ": \"", text, "\" is too large");
  return static_cast<std::size_t>(n * mult);
}

}  // namespace

namespace {
constexpr const char* kPolicyNames[kNumPolicies] = {"best_fit", "first_fit", "size_class",
                                                    "buddy",    "expandable", "planned"};
}

const char* policy_name(AllocPolicy p) { return kPolicyNames[static_cast<int>(p)]; }

AllocPolicy parse_policy(const std::string& name) {
  for (int i = 0; i < kNumPolicies; ++i)
    if (name == kPolicyNames[i]) return static_cast<AllocPolicy>(i);
  throw ValueError(str("allocator setting policy: unknown policy \"", name,
                       "\" (known: best_fit, first_fit, size_class, buddy, expandable, planned)"));
}

void AllocatorSettings::validate() const {
  // round must keep every block 64-byte aligned: segments start page-aligned
  // and blocks start at multiples of round inside them.
  SNUG_CHECK(is_pow2(round) && round >= 64, ValueError, "allocator setting round: must be a power of two >= 64, got ",
             round);
  SNUG_CHECK(small_threshold > 0 && small_threshold % round == 0, ValueError,
             "allocator setting small_threshold: must be a positive multiple of round (", round, "), got ",
             small_threshold);
  SNUG_CHECK(small_segment >= small_threshold && small_segment % round == 0, ValueError,
             "allocator setting small_segment: must be a multiple of round (", round, ") and >= small_threshold (",
             small_threshold, "), got ", small_segment);
  SNUG_CHECK(large_round > 0 && large_round % round == 0, ValueError,
             "allocator setting large_round: must be a positive multiple of round (", round, "), got ", large_round);
  SNUG_CHECK(large_segment > small_threshold && large_segment % large_round == 0, ValueError,
             "allocator setting large_segment: must be a multiple of large_round (", large_round,
             ") and > small_threshold (", small_threshold, "), got ", large_segment);
  SNUG_CHECK(large_threshold > small_threshold && large_threshold <= large_segment, ValueError,
             "allocator setting large_threshold: must be > small_threshold (", small_threshold,
             ") and <= large_segment (", large_segment, "), got ", large_threshold);
  SNUG_CHECK(large_growth <= 1024, ValueError,
             "allocator setting large_growth: must be 0 (fixed large_segment) or a divisor 1..1024, got ",
             large_growth);
  // A max_split_size at or below the shared large segment would leave fresh
  // large segments unsplittable and unusable by the requests they were made for.
  SNUG_CHECK(max_split_size > large_segment, ValueError, "allocator setting max_split_size: must be > large_segment (",
             large_segment, ") or none, got ", max_split_size);
  SNUG_CHECK(size_classes >= 1 && size_classes <= 64 && is_pow2(size_classes), ValueError,
             "allocator setting size_classes: must be a power of two from 1 to 64, got ", size_classes);
  SNUG_CHECK(is_pow2(map_granularity) && map_granularity >= 4096, ValueError,
             "allocator setting map_granularity: must be a power of two >= 4096, got ", map_granularity);
  SNUG_CHECK(planned_base == AllocPolicy::best_fit || planned_base == AllocPolicy::expandable, ValueError,
             "allocator setting planned_base: must be best_fit or expandable, got ", policy_name(planned_base));
  SNUG_CHECK(oom_snapshot.find(',') == std::string::npos, ValueError,
             "allocator setting oom_snapshot: the path may not contain a comma, got \"", oom_snapshot, "\"");
  SNUG_CHECK(max_split_tolerance % round == 0, ValueError,
             "allocator setting max_split_tolerance: must be a multiple of round (", round, "), got ",
             max_split_tolerance);
}

std::string AllocatorSettings::to_string() const {
  return str("round=", round, ",small_threshold=", small_threshold, ",small_segment=", small_segment,
             ",large_segment=", large_segment, ",large_threshold=", large_threshold, ",large_round=", large_round,
             ",large_growth=", large_growth, ",max_split_size=", size_str(max_split_size),
             ",max_split_tolerance=", max_split_tolerance, ",policy=", policy_name(policy),
             ",size_classes=", size_classes, ",map_granularity=", map_granularity,
             ",planned_base=", policy_name(planned_base),
             oom_snapshot.empty() ? std::string() : ",oom_snapshot=" + oom_snapshot);
}

AllocatorSettings parse_settings(const std::string& conf, AllocatorSettings s) {
  std::size_t pos = 0;
  while (pos <= conf.size()) {
    std::size_t comma = conf.find(',', pos);
    if (comma == std::string::npos) comma = conf.size();
    std::string item = conf.substr(pos, comma - pos);
    pos = comma + 1;
    // Tolerate spaces around items and a trailing comma.
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(0, 1);
    if (item.empty()) continue;
    // key=value, or key:value as PyTorch writes them (keys have neither).
    std::size_t eq = item.find_first_of("=:");
    SNUG_CHECK(eq != std::string::npos && eq > 0, ValueError, "allocator settings: expected key=value, got \"", item,
               "\" in \"", conf, "\"");
    std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "round")
      s.round = parse_size(key, val);
    else if (key == "small_threshold")
      s.small_threshold = parse_size(key, val);
    else if (key == "small_segment")
      s.small_segment = parse_size(key, val);
    else if (key == "large_segment")
      s.large_segment = parse_size(key, val);
    else if (key == "large_threshold")
      s.large_threshold = parse_size(key, val);
    else if (key == "large_round")
      s.large_round = parse_size(key, val);
    else if (key == "large_growth")
      s.large_growth = parse_size(key, val);
    else if (key == "max_split_tolerance")
      s.max_split_tolerance = parse_size(key, val);
    else if (key == "max_split_size")
      s.max_split_size = (val == "none" || val == "inf") ? kNoLimit : parse_size(key, val);
    else if (key == "size_classes")
      s.size_classes = parse_size(key, val);
    else if (key == "map_granularity")
      s.map_granularity = parse_size(key, val);
    else if (key == "policy")
      s.policy = parse_policy(val);
    else if (key == "planned_base")
      s.planned_base = parse_policy(val);
    else if (key == "expandable_segments") {  // PyTorch's spelling
      if (val == "True" || val == "true" || val == "1")
        s.policy = AllocPolicy::expandable;
      else if (val == "False" || val == "false" || val == "0")
        s.policy = s.policy == AllocPolicy::expandable ? AllocPolicy::best_fit : s.policy;
      else
        throw ValueError(str("allocator setting expandable_segments: expected True or False, got \"", val, "\""));
    } else if (key == "oom_snapshot") {
      SNUG_CHECK(!val.empty(), ValueError, "allocator setting oom_snapshot: expected a file path");
      s.oom_snapshot = val;
    } else if (key == "fit") {  // the older spelling of policy=best_fit|first_fit
      if (val == "best")
        s.policy = AllocPolicy::best_fit;
      else if (val == "first")
        s.policy = AllocPolicy::first_fit;
      else
        throw ValueError(str("allocator setting fit: expected best or first, got \"", val, "\""));
    } else {
      throw ValueError(str("allocator settings: unknown setting \"", key,
                           "\" (known: round, small_threshold, small_segment, large_segment, large_threshold, "
                           "large_round, large_growth, max_split_size, max_split_tolerance, policy, size_classes, map_granularity, "
                           "planned_base, oom_snapshot, expandable_segments, fit)"));
    }
  }
  s.validate();
  return s;
}

AllocatorSettings settings_from_env() {
  const char* env = std::getenv("SNUG_ALLOC_CONF");
  if (!env || !*env) return {};
  try {
    return parse_settings(env);
  } catch (const ValueError& e) {
    throw ValueError(str("SNUG_ALLOC_CONF=\"", env, "\": ", e.what()));
  }
}

}  // namespace snug::memory
