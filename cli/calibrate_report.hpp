#pragma once
// Presentation of `partune calibrate`'s result: what was measured and fitted, as text and
// as one JSON object. No computation happens here.
#include <string>

#include <nlohmann/json.hpp>

#include "partune/costmodel/hardware.hpp"
#include "partune/kernels/calibrate.hpp"
#include "partune/kernels/gpu_calibrate.hpp"

namespace partune::cli {

// `out`: the file written; `it`: the instance type as the loader read it back.
nlohmann::json calibration_json(const kernels::Calibration& c, const InstanceType& it, const std::string& out);
std::string calibration_text(const kernels::Calibration& c, const InstanceType& it, const std::string& out);
// --device cuda: the GPU, every measurement and every fit (measured: false where the
// datasheet value was kept), and the notes.
nlohmann::json gpu_calibration_json(const kernels::GpuCalibration& c, const InstanceType& it, const std::string& out);
std::string gpu_calibration_text(const kernels::GpuCalibration& c, const InstanceType& it, const std::string& out);

}  // namespace partune::cli
