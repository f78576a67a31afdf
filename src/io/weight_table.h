// Declarative weight tables. Each model stage declares the tensors it reads (checkpoint name, exact
// shape derived from the config, accepted dtypes); the loader checks a checkpoint against the whole
// table before any compute object is built, and errors name the file, the tensor and what was
// expected. The same table drives `chorus make-tiny` (random weights of the declared shapes) and
// `chorus inspect`.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace chorus::io {
class Checkpoint;
}

namespace chorus {

// How make-tiny initialises a tensor (real checkpoints ignore this).
enum class WeightInit : uint8_t {
  kLinear,      // N(0, 1/fan_in), fan_in = product of all dims but the first
  kEmbedding,   // N(0, 1)
  kNormWeight,  // 1 + N(0, 0.1²)
  kBias,        // N(0, 0.05²)
  kScale,       // U(0.2, 0.6): layer scales and ConvNeXt gammas (real init ~0.01 would hide branches)
  kSnakeLog,    // N(0, 0.3²): SnakeBeta log-alpha / log-beta
  kUsage,       // U(0.5, 2): codebook cluster usage
  kOnes,        // 1
};

enum DTypeMask : uint32_t {
  kAllowF32 = 1u << 0,
  kAllowBF16 = 1u << 1,
  kAllowF16 = 1u << 2,
  kAllowFloat = kAllowF32 | kAllowBF16 | kAllowF16,
};

struct WeightSpec {
  std::string name;
  Shape shape;
  uint32_t dtypes = kAllowFloat;
  WeightInit init = WeightInit::kLinear;
  bool optional = false;  // checked when present, fine when absent
};

class WeightTable {
 public:
  // `prefix` is prepended to names added through this table's add() (e.g. "talker.").
  WeightSpec& add(std::string name, Shape shape, WeightInit init = WeightInit::kLinear,
                  uint32_t dtypes = kAllowFloat);
  const std::vector<WeightSpec>& specs() const { return specs_; }
  const WeightSpec* find(const std::string& name) const;

  // Every required tensor present with the declared shape and an accepted dtype. `label` names the
  // checkpoint in messages. Tensors in the checkpoint that the table does not know are listed in
  // *unexpected (when given) but are not an error: published checkpoints may carry extras.
  Status check(const io::Checkpoint& ckpt, const std::string& label,
               std::vector<std::string>* unexpected = nullptr) const;

  int64_t total_params() const;

 private:
  std::vector<WeightSpec> specs_;
};

// Typed access to a checked checkpoint, for stage constructors.
class Weights {
 public:
  Weights(const io::Checkpoint& ckpt, std::string prefix = {}) : ckpt_(&ckpt), prefix_(std::move(prefix)) {}
  Weights sub(const std::string& p) const { return Weights(*ckpt_, prefix_ + p); }
  // The tensor as stored (borrowed view; bf16 stays bf16).
  Tensor raw(const std::string& name) const;
  // An owned f32 copy (norm weights, biases, small vectors).
  Tensor f32(const std::string& name) const;
  bool has(const std::string& name) const;

 private:
  const io::Checkpoint* ckpt_;
  std::string prefix_;
};

}  // namespace chorus
