#include "io/weight_table.h"

#include "io/safetensors.h"

namespace chorus {

WeightSpec& WeightTable::add(std::string name, Shape shape, WeightInit init, uint32_t dtypes) {
  specs_.push_back(WeightSpec{std::move(name), std::move(shape), dtypes, init, false});
  return specs_.back();
}

const WeightSpec* WeightTable::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

static std::string allowed_dtypes(uint32_t mask) {
  std::string s;
  auto add = [&](const char* n) { s += s.empty() ? n : std::string(" or ") + n; };
  if (mask & kAllowF32) add("F32");
  if (mask & kAllowBF16) add("BF16");
  if (mask & kAllowF16) add("F16");
  return s;
}

static bool dtype_allowed(DType dt, uint32_t mask) {
  return (dt == DType::kF32 && (mask & kAllowF32)) || (dt == DType::kBF16 && (mask & kAllowBF16)) ||
         (dt == DType::kF16 && (mask & kAllowF16));
}

Status WeightTable::check(const io::Checkpoint& ckpt, const std::string& label,
                          std::vector<std::string>* unexpected) const {
  for (const auto& spec : specs_) {
    const io::TensorInfo* info = ckpt.find(spec.name);
    if (!info) {
      if (spec.optional) continue;
      return make_error(ErrorCode::kNotFound, label + ": missing tensor '" + spec.name + "' (expected " +
                                                  allowed_dtypes(spec.dtypes) + " " +
                                                  shape_to_string(spec.shape) + ")");
    }
    const std::string where = ckpt.file_of(spec.name);
    if (info->shape != spec.shape)
      return make_error(ErrorCode::kShapeMismatch,
                        where + ": tensor '" + spec.name + "' has shape " + shape_to_string(info->shape) +
                            " but the config implies " + shape_to_string(spec.shape));
    if (!dtype_allowed(info->dtype, spec.dtypes))
      return make_error(ErrorCode::kShapeMismatch, where + ": tensor '" + spec.name + "' has dtype " +
                                                       dtype_name(info->dtype) + ", expected " +
                                                       allowed_dtypes(spec.dtypes));
  }
  if (unexpected) {
    unexpected->clear();
    for (const auto& name : ckpt.names())
      if (!find(name)) unexpected->push_back(name);
  }
  return ok_status();
}

int64_t WeightTable::total_params() const {
  int64_t n = 0;
  for (const auto& s : specs_) n += shape_numel(s.shape);
  return n;
}

Tensor Weights::raw(const std::string& name) const { return ckpt_->tensor(prefix_ + name); }

Tensor Weights::f32(const std::string& name) const {
  Tensor t = raw(name);
  return t.empty() ? t : t.to_f32();
}

bool Weights::has(const std::string& name) const { return ckpt_->find(prefix_ + name) != nullptr; }

}  // namespace chorus
