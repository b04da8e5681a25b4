# lit configuration of the OctoPipe test suite.
import os
import shutil
import shlex
import lit.formats

config.name = "OctoPipe"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".octo", ".oir", ".test"]
config.excludes = ["Inputs", "regress", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.octo_obj_root, "tests")

path = os.pathsep.join([config.octo_tools_dir, config.octo_unit_dir,
                        os.path.join(config.octo_obj_root, "tests", "fuzz"),
                        os.path.join(config.octo_obj_root, "tests", "gpu"), config.filecheck_dir,
                        config.environment.get("PATH", os.environ.get("PATH", ""))])
config.environment["PATH"] = path
config.substitutions.append(("%examples", os.path.join(config.octo_src_root, "examples")))
config.substitutions.append(("%srcroot", config.octo_src_root))
# %buildroot: the build directory (the bench/ drivers take it as their first argument).
config.substitutions.append(("%buildroot", config.octo_obj_root))
# Sanitizer builds: memory errors, leaks and undefined behaviour all fail the test.
config.environment["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0"
config.environment["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"

# The GPU code was built (the CUDA toolkit was found), GPU or not.
if config.octo_cuda in ("TRUE", "ON", "1"):
    config.available_features.add("cuda-build")
# A GPU is usable only when the CUDA backends were built and a device is visible.
if config.octo_cuda in ("TRUE", "ON", "1") and shutil.which("nvidia-smi") and \
        os.system("nvidia-smi -L >/dev/null 2>&1") == 0:
    config.available_features.add("cuda")
if config.octo_sanitize:
    config.available_features.add("sanitizer")
# libFuzzer: the tests/fuzz harnesses were built as fuzzers (-DOCTO_FUZZ=ON with clang); the
# smoke runs of tests/fuzz/smoke-*.test need it and are skipped elsewhere.
if getattr(config, "octo_fuzz", "") in ("ON", "TRUE", "1"):
    config.available_features.add("libfuzzer")
# %ois: the stream editor of tests/Inputs/ois.py (damaged and hand-edited .ois files).
import sys
config.substitutions.append(("%ois", sys.executable + " " +
                             os.path.join(config.octo_src_root, "tests", "Inputs", "ois.py")))
# The mpi backend is testable when octo-run was built with MPI and mpirun is on the PATH; %mpirun
# starts processes as root and on more processes than cores, as CI machines need. Sanitizer
# builds do not run it: OpenMPI's own allocations trip the leak checker.
if config.octo_mpi in ("ON", "TRUE", "1") and shutil.which("mpirun") and not config.octo_sanitize:
    config.available_features.add("mpi")
mpirun = "mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader,tcp"
config.substitutions.append(("%mpirun", mpirun))
config.environment["MPIRUN"] = mpirun
for var in ("HOME", "OMPI_MCA_plm_rsh_agent"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# py_has(py, stmt): whether Python py runs stmt, probed from "/" so that a folder of the test
# tree (tests/safetensors) never passes for a package of the same name.
def py_has(py, stmt):
    return bool(py) and os.system("cd / && " + shlex.quote(py) + " -c " + shlex.quote(stmt) +
                                  " >/dev/null 2>&1") == 0
# %torch_python: a Python with PyTorch and NumPy (Debian's python3-torch) for the checks against
# PyTorch (tests/runtime/torch_ref.py); those tests need the "torch" feature and are skipped
# where none is installed.
for py in (sys.executable, "/usr/bin/python3"):
    if py_has(py, "import torch, numpy"):
        config.available_features.add("torch")
        config.substitutions.append(("%torch_python", py))
        break
# %transformers_python: a Python with Hugging Face transformers and torch for bench/hf_params.py
# (parameter counts against HF's num_parameters()); tests/import/hf-params.test needs the
# "transformers" feature and is skipped where none is installed. The Python is the lit parameter
# transformers_python, else $OCTO_TRANSFORMERS_PYTHON (e.g. a venv), else lit's own.
for py in (lit_config.params.get("transformers_python"),
           os.environ.get("OCTO_TRANSFORMERS_PYTHON"), sys.executable, "/usr/bin/python3"):
    if py_has(py, "import transformers, torch"):
        config.available_features.add("transformers")
        config.substitutions.append(("%transformers_python", shlex.quote(py)))
        break
# %torch_pp_python: a Python whose torch has torch.distributed.pipelining's schedule runtime
# (torch 2.4 or later; Debian's python3-torch 1.13 has not) for examples/torch/run_plan.py; the
# test that runs it needs the "torch-pipelining" feature and is skipped elsewhere. The Python is
# the lit parameter torch_python (lit --param torch_python=PATH), else $OCTO_TORCH_PYTHON (e.g. a
# venv outside the tree: /work/venv-torch/bin/python), else lit's own or /usr/bin/python3; one
# named but without that runtime is reported and skipped.
torch_pp_named = lit_config.params.get("torch_python") or os.environ.get("OCTO_TORCH_PYTHON")
for py in (torch_pp_named, sys.executable, "/usr/bin/python3"):
    if py_has(py, "from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime"):
        config.available_features.add("torch-pipelining")
        config.substitutions.append(("%torch_pp_python", shlex.quote(py)))
        break
    if py and py == torch_pp_named:
        lit_config.note("torch_python/OCTO_TORCH_PYTHON '%s' has no torch.distributed.pipelining "
                        "schedule runtime (torch >= 2.4): not used" % py)
# %st_python: a Python with the safetensors package and NumPy (the reference implementation of
# the safetensors format; no torch needed) for tests/safetensors/python.test, which needs the
# "safetensors-py" feature and is skipped where there is none. The Python is the lit parameter
# safetensors_python (lit --param safetensors_python=PATH), else $OCTO_SAFETENSORS_PYTHON (e.g. a
# venv outside the tree: /work/venv-st/bin/python), else lit's own or /usr/bin/python3.
st_named = lit_config.params.get("safetensors_python") or os.environ.get("OCTO_SAFETENSORS_PYTHON")
for py in (st_named, sys.executable, "/usr/bin/python3"):
    if py_has(py, "import safetensors.numpy, numpy"):
        config.available_features.add("safetensors-py")
        config.substitutions.append(("%st_python", shlex.quote(py)))
        break
    if py and py == st_named:
        lit_config.note("safetensors_python/OCTO_SAFETENSORS_PYTHON '%s' has no safetensors and "
                        "numpy: not used" % py)
# %chromium: a headless-capable Chromium (Debian's chromium, or chromium-browser) for the test
# that runs the --emit=html page in a browser; it needs the "chromium" feature and is skipped
# where none is installed.
for exe in ("chromium", "chromium-browser"):
    if shutil.which(exe):
        config.available_features.add("chromium")
        config.substitutions.append(("%chromium", shutil.which(exe)))
        break
