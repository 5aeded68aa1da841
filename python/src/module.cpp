// kcert._C: kcert's command line and registry, for the `kcert` Python package
// (python/kcert/__init__.py). Python is the process here ("extend, don't embed"): the package
// imports torch, then this module, which links the same LibTorch (and libtorch_python for
// torch's at::Tensor caster: tensors cross without a copy, autograd history included).
//
// A Python variant is a callable fn(inputs: dict[str, Tensor], p: Precision, params: dict)
// -> Tensor registered into the same registry the C++ variants live in. The command line runs
// with the GIL released; a Python variant takes it for its call only.
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "harness/cli/app.hpp"
#include "harness/kernels/registry.hpp"
#include "harness/numerics/precision.hpp"
#include "harness/store/environment.hpp"

namespace py = pybind11;

namespace {

using kcert::kernels::KernelInputs;
using kcert::kernels::ParamMap;
using kcert::kernels::ParamSpec;
using kcert::numerics::Precision;

// A Python object owned from C++: the last copy may go in a thread that does not hold the GIL
// (the registry is destroyed as the command line returns, GIL released), so its deleter takes it.
std::shared_ptr<py::object> hold(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// A variant parameter declared from its Python default: bool, int, float, str or a list of
// numbers (None: a required number).
ParamSpec param_of(const std::string& name, const py::handle& d) {
  namespace param = kcert::kernels::param;
  if (d.is_none()) return param::number(name);
  if (py::isinstance<py::bool_>(d)) return param::flag(name, d.cast<bool>());
  if (py::isinstance<py::int_>(d)) return param::integer(name, d.cast<std::int64_t>());
  if (py::isinstance<py::float_>(d)) return param::number(name, d.cast<double>());
  if (py::isinstance<py::str>(d)) return param::text(name, d.cast<std::string>());
  if (py::isinstance<py::list>(d) || py::isinstance<py::tuple>(d)) return param::number_list(name, d.cast<std::vector<double>>());
  throw std::invalid_argument("parameter '" + name + "': its default must be a bool, int, float, str, a list of numbers or None, not " +
                              py::str(py::type::of(d).attr("__name__")).cast<std::string>());
}

py::object python_value(const kcert::kernels::ParamValue& v) {
  return std::visit([](const auto& x) { return py::object(py::cast(x)); }, v);
}

// What the Python side registered: (family, name, version, description, origin, params, fn,
// unavailable).
struct PythonVariant {
  std::string family, name, version, description, origin;
  std::vector<ParamSpec> params;
  std::shared_ptr<py::object> fn;
  std::string unavailable;  // why this machine cannot run it (kcert.variant(unavailable=...))
  bool exact = true;        // kcert.variant(exact=False): an opaque kernel
};

kcert::kernels::KernelFn kernel_of(const PythonVariant& pv) {
  const std::string what = pv.family + "/" + pv.name;
  return [fn = pv.fn, what](const KernelInputs& in, const Precision& p, const ParamMap& params) -> torch::Tensor {
    py::gil_scoped_acquire gil;
    try {
      py::dict inputs;
      for (const auto& [name, t] : in.tensors()) inputs[py::str(name)] = py::cast(t);
      py::dict prm;
      for (const auto& [name, v] : params.values()) prm[py::str(name)] = python_value(v);
      py::object out = (*fn)(inputs, py::cast(p), prm);
      if (!THPVariable_Check(out.ptr())) {
        throw std::runtime_error("Python variant " + what + " returned a " +
                                 py::str(py::type::of(out).attr("__name__")).cast<std::string>() + ", not a torch.Tensor");
      }
      return out.cast<torch::Tensor>();
    } catch (py::error_already_set& e) {
      // SystemExit and KeyboardInterrupt included: a kernel's exception is its case's ERROR.
      throw std::runtime_error("Python variant " + what + " raised " + e.what());
    }
  };
}

// A family defined in Python (kcert.family): its probe parameters, bucket axes and the three
// callables that draw its inputs and bucket its outputs. Each call takes the GIL: the draw runs
// on LibTorch's threads (engine/draw.cpp), which then take turns.
struct PythonFamily {
  std::string name, description, origin;
  std::vector<ParamSpec> probe_params;
  std::vector<std::string> axes;
  std::shared_ptr<py::object> fixed;      // None: no fixed inputs
  std::shared_ptr<py::object> replicate;  // fn(probe, fixed, seed) -> dict[str, Tensor]
  std::shared_ptr<py::object> buckets;    // dict: axis -> fn(probe, shape) -> int64 Tensor
  // Its gradients (kcert.family(gradients=...)): schema, the bucket functions of each, and the
  // probe parameter that counts what a weight's gradient sums over ("" for an input's).
  struct Gradient {
    kcert::kernels::GradientSchema schema;
    std::shared_ptr<py::object> buckets;
    std::string reduction;
  };
  std::vector<Gradient> gradients;
};

// The probe as the family's callables see it: kcert.Probe-like attributes.
py::object python_probe(const kcert::kernels::ProbeContract& probe) {
  py::dict params;
  for (const auto& [name, v] : probe.params.values()) params[py::str(name)] = python_value(v);
  const auto dtype = py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(torch::getTHPDtype(kcert::numerics::to_dtype(probe.dtype))));
  return py::module_::import("types").attr("SimpleNamespace")(
      py::arg("dtype") = dtype, py::arg("seed") = probe.seed, py::arg("shift") = probe.shift,
      py::arg("scale") = probe.scale, py::arg("outlier_count") = probe.outlier_count,
      py::arg("outlier_magnitude") = probe.outlier_magnitude, py::arg("row_offset_sd") = probe.row_offset_sd,
      py::arg("params") = params);
}

KernelInputs inputs_of(const py::object& out, const std::string& what) {
  if (!py::isinstance<py::dict>(out)) {
    throw std::runtime_error(what + " returned a " + py::str(py::type::of(out).attr("__name__")).cast<std::string>() +
                             ", not a dict of tensors");
  }
  KernelInputs in;
  for (const auto& [k, v] : out.cast<py::dict>()) {
    if (!py::isinstance<py::str>(k)) {
      throw std::runtime_error(what + " returned a dict with the key " + py::repr(k).cast<std::string>() +
                               ": input names are str");
    }
    if (!THPVariable_Check(v.ptr())) throw std::runtime_error(what + ": input '" + py::str(k).cast<std::string>() + "' is not a torch.Tensor");
    in.set(k.cast<std::string>(), v.cast<torch::Tensor>());
  }
  return in;
}

// Runs a family callable under the GIL; a Python exception becomes the case's error.
template <typename F>
auto with_gil(const std::string& what, F&& call) {
  py::gil_scoped_acquire gil;
  try {
    return call();
  } catch (py::error_already_set& e) {
    throw std::runtime_error(what + " raised " + e.what());
  }
}

// The bucket of every element of `shape` on `axis`, from a dict of Python bucket functions.
torch::Tensor python_buckets(const std::shared_ptr<py::object>& buckets, const std::string& family, const std::string& axis,
                             const kcert::kernels::ProbeContract& probe, at::IntArrayRef shape) {
  return with_gil(family + ": buckets[" + axis + "]", [&] {
    py::tuple dims(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) dims[i] = py::int_(shape[i]);
    py::object ids = (*buckets)[py::str(axis)](python_probe(probe), dims);
    if (!THPVariable_Check(ids.ptr())) throw std::runtime_error(family + ": buckets[" + axis + "] did not return a torch.Tensor");
    auto t = ids.cast<torch::Tensor>();
    if (t.sizes() != shape) {
      throw std::runtime_error(family + ": buckets[" + axis + "] returned shape " + c10::str(t.sizes()) +
                               " for a tensor of shape " + c10::str(shape) + " (one bucket id per element)");
    }
    return t.to(torch::kLong).contiguous();
  });
}

kcert::kernels::Family family_of(const PythonFamily& pf) {
  kcert::kernels::Family f;
  f.name = pf.name;
  f.description = pf.description;
  f.bucket_axes = pf.axes;
  f.probe_params = pf.probe_params;
  const std::string family = "Python family " + pf.name;
  f.make_fixed = [fixed = pf.fixed, family](const kcert::kernels::ProbeContract& probe, std::uint64_t seed) {
    return with_gil(family + ": fixed", [&] {
      if (fixed->is_none()) return KernelInputs{};
      return inputs_of((*fixed)(python_probe(probe), seed), family + ": fixed");
    });
  };
  f.make_replicate = [replicate = pf.replicate, family](const kcert::kernels::ProbeContract& probe,
                                                        const KernelInputs& fixed, std::uint64_t seed) {
    return with_gil(family + ": replicate", [&] {
      py::dict fixed_dict;
      for (const auto& [name, t] : fixed.tensors()) fixed_dict[py::str(name)] = py::cast(t);
      return inputs_of((*replicate)(python_probe(probe), fixed_dict, seed), family + ": replicate");
    });
  };
  f.bucket_ids = [buckets = pf.buckets, family](const std::string& axis, const kcert::kernels::ProbeContract& probe,
                                                at::IntArrayRef shape) { return python_buckets(buckets, family, axis, probe, shape); };
  for (const auto& g : pf.gradients) {
    kcert::kernels::Family::Gradient fg;
    fg.schema = g.schema;
    const std::string what = family + " gradient " + g.schema.name;
    fg.bucket_ids = [buckets = g.buckets, what](const std::string& axis, const kcert::kernels::ProbeContract& probe,
                                                at::IntArrayRef shape) { return python_buckets(buckets, what, axis, probe, shape); };
    fg.reduction_size = [reduction = g.reduction](const kcert::kernels::ProbeContract& probe) -> std::int64_t {
      return reduction.empty() ? 0 : probe.params.integer(reduction);
    };
    f.gradients.push_back(std::move(fg));
  }
  return f;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "kcert's C++ core: the command line and the registry Python variants join";
  m.attr("torch_version") = TORCH_VERSION;

  py::class_<Precision>(m, "Precision",
                        "The precision policy a variant computes under (docs/python.md): up() to the "
                        "accumulation dtype, round_w() to the working dtype W; under the exact policy (the "
                        "oracle, the algebra gate) both are exact fp64.")
      .def("up", &Precision::up, "upcast to the accumulation dtype (fp32; fp64 under the exact policy)")
      .def("round_w", &Precision::round_w, "round to the working dtype W, nearest-even (exact policy: fp64)")
      .def("trunc_w", &Precision::trunc_w, "round toward zero to W (exact policy: fp64)")
      .def("tf32", &Precision::tf32, "round an fp32 GEMM operand to TF32 (exact policy: fp64)")
      .def("constant_w", &Precision::constant_w, "a constant as a kernel written in W would build it")
      .def_property_readonly("is_exact", &Precision::is_exact)
      .def_property_readonly("name", &Precision::name)
      .def_property_readonly("working_dtype",
                             [](const Precision& p) {
                               return py::reinterpret_borrow<py::object>(
                                   reinterpret_cast<PyObject*>(torch::getTHPDtype(p.working_dtype())));
                             })
      .def_property_readonly("compute_dtype",
                             [](const Precision& p) {
                               return py::reinterpret_borrow<py::object>(
                                   reinterpret_cast<PyObject*>(torch::getTHPDtype(p.accumulation_dtype())));
                             })
      .def("__repr__", [](const Precision& p) { return "<kcert.Precision " + p.name() + ">"; });

  m.def(
      "main",
      [](std::vector<std::string> args, std::vector<std::string> worker, py::list variants, std::string environment,
         py::list families) {
        // The front end's part of the environment identity (store/environment.hpp), as JSON text.
        if (!environment.empty()) kcert::store::set_front_end(nlohmann::json::parse(environment));
        std::vector<PythonVariant> pending;
        for (const auto& item : variants) {
          const auto t = item.cast<py::tuple>();
          PythonVariant pv{t[0].cast<std::string>(), t[1].cast<std::string>(), t[2].cast<std::string>(),
                           t[3].cast<std::string>(), t[4].cast<std::string>(), {}, hold(t[6].cast<py::object>()),
                           t[7].cast<std::string>(), t.size() > 8 ? t[8].cast<bool>() : true};
          for (const auto& [k, v] : t[5].cast<py::dict>()) pv.params.push_back(param_of(k.cast<std::string>(), v));
          pending.push_back(std::move(pv));
        }
        std::vector<PythonFamily> pending_families;
        for (const auto& item : families) {
          const auto t = item.cast<py::tuple>();
          // (name, description, origin, probe params, fixed, replicate, buckets, gradients); the
          // bucket axes are the buckets dict's keys, in order.
          const auto axes_of = [](const py::handle& buckets) {
            std::vector<std::string> axes;
            for (const auto& [axis, fn] : buckets.cast<py::dict>()) axes.push_back(axis.cast<std::string>());
            return axes;
          };
          PythonFamily pf{t[0].cast<std::string>(), t[1].cast<std::string>(), t[2].cast<std::string>(), {},
                          axes_of(t[6]), hold(t[4].cast<py::object>()),
                          hold(t[5].cast<py::object>()), hold(t[6].cast<py::object>())};
          for (const auto& [k, v] : t[3].cast<py::dict>()) pf.probe_params.push_back(param_of(k.cast<std::string>(), v));
          // (name, input, reduces, description, buckets, reduction param)
          for (const auto& g : t[7].cast<py::list>()) {
            const auto gt = g.cast<py::tuple>();
            pf.gradients.push_back({{gt[0].cast<std::string>(), gt[1].cast<std::string>(), axes_of(gt[4]),
                                     gt[2].cast<std::string>(), gt[3].cast<std::string>()},
                                    hold(gt[4].cast<py::object>()),
                                    gt[5].cast<std::string>()});
          }
          pending_families.push_back(std::move(pf));
        }
        kcert::cli::FrontEnd front_end;
        front_end.worker = std::move(worker);
        front_end.default_isolation_process = "spawn";
        front_end.python = front_end.worker;
        // Families once; a variant as soon as its family is registered (a plugin's family may
        // come with a case file's `plugins:`, after the command line's plugins), and refused
        // when its family is still unknown at the final call.
        bool families_added = false;
        front_end.extend = [&pending, &pending_families, &families_added](kcert::kernels::Registry& registry, bool final) {
          // Families first: a file's variants may belong to its own family.
          for (const auto& pf : pending_families) {
            if (families_added) break;
            try {
              registry.add_family(family_of(pf));
            } catch (const std::invalid_argument& e) {  // "family 'x' is already registered"
              throw std::invalid_argument(pf.origin + ": " + e.what());
            }
          }
          families_added = true;
          for (auto it = pending.begin(); it != pending.end();) {
            const auto& pv = *it;
            if (!final && registry.find_family(pv.family) == nullptr) {
              ++it;
              continue;
            }
            kcert::kernels::Variant v{{pv.name, pv.version, pv.description, pv.params}, kernel_of(pv), {}, pv.unavailable};
            v.schema.exact = pv.exact;
            try {
              registry.add_variant(pv.family, std::move(v));
            } catch (const std::out_of_range& e) {  // the registry lists the families it has
              throw std::invalid_argument(pv.origin + ": variant " + pv.name + " names family '" + pv.family +
                                          "', which is not registered: " + e.what());
            } catch (const std::invalid_argument& e) {
              throw std::invalid_argument(pv.origin + ": " + e.what());
            }
            registry.stamp_origin(pv.family, pv.name, pv.version, pv.origin);
            it = pending.erase(it);
          }
        };
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        py::gil_scoped_release release;  // Python variants take it back for their calls
        return kcert::cli::run_command_line(static_cast<int>(args.size()), argv.data(), front_end);
      },
      py::arg("argv"), py::arg("worker"), py::arg("variants"), py::arg("environment") = std::string(),
      py::arg("families") = py::list(),
      "Runs kcert's command line (argv[0] is the program name) with the given Python variants; returns the exit status.");
}
