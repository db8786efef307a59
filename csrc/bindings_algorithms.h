// ringcoll._C's entry points for algorithms written in Python (bindings_algorithms.cc).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace ringcoll {

// register_algorithm and is_builtin.
void bindPythonAlgorithms(pybind11::module_& m);

}  // namespace ringcoll
