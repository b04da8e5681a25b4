#!/usr/bin/env python3
"""hf_params.py -- parameter counts of the configs of tests/import/Inputs: Hugging Face's
num_parameters() of the model built on the meta device (no weights) beside the cost model's
(octoc --hf ... --report=json: its "parameters", which counts a tied embedding matrix once as
Hugging Face does), and their difference.

    bench/hf_params.py BUILD_DIR [CONFIG ...]     (default: every config of tests/import/Inputs)

Needs transformers (and torch) in the Python that runs it, e.g. a venv:
    python3 -m venv /tmp/hf && /tmp/hf/bin/pip install transformers torch
Where transformers is missing it says so and exits 0 (tests/import/hf-params.test needs the lit
feature "transformers"). A config that octoc refuses (issue 27: the variants it does not compute)
prints "refused" in the octoc column; HF's count is still given."""
import contextlib
import glob
import json
import os
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = os.path.join(SRC, "tests", "import", "Inputs")


@contextlib.contextmanager
def on_meta():
    """Build modules with their parameters on the meta device (no memory): torch.device("meta")
    as a context (torch >= 2.0), else every parameter moved to meta as it is registered, before
    its initialization runs (torch 1.x, as Debian's 1.13), and a parameter already on meta kept
    as it is, so that a tied matrix stays one parameter."""
    import torch
    if hasattr(torch.device("meta"), "__enter__"):
        with torch.device("meta"):
            yield
        return
    register = torch.nn.Module.register_parameter

    def to_meta(module, name, param):
        register(module, name, param)
        # a parameter already on meta is one registered before: tie_weights() registers the
        # input embedding's as the output's, and a copy would count the tied matrix twice
        if param is not None and not param.is_meta:
            module._parameters[name] = torch.nn.Parameter(param.to("meta"),
                                                          requires_grad=param.requires_grad)
    torch.nn.Module.register_parameter = to_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def hf_count(path):
    """num_parameters() of the transformers model of config file 'path', built on meta."""
    import transformers
    with open(path) as f:
        cfg = transformers.AutoConfig.for_model(**json.load(f))
    with on_meta():
        if cfg.model_type == "llava":
            model = transformers.LlavaForConditionalGeneration(cfg)
        else:
            model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model.num_parameters()


def octoc_count(build, path):
    """The cost model's parameter count (the JSON report's "parameters": cost_module_parameters,
    a tied matrix once, as num_parameters() counts it), or None when octoc refuses the config."""
    r = subprocess.run([os.path.join(build, "tools", "octoc"), "--hf=" + path,
                        "--with=" + os.path.join(INPUTS, "h100-train.octo"), "--passes=cost",
                        "--report=json"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return int(json.loads(r.stdout)["parameters"])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print("hf_params: %s: skipped (pip install transformers torch)" % e)
        return 0
    build = sys.argv[1]
    configs = sys.argv[2:] or sorted(glob.glob(os.path.join(INPUTS, "*.json")) +
                                     glob.glob(os.path.join(INPUTS, "*", "config.json")))
    print("%-28s %16s %16s %10s" % ("config", "hf", "octoc", "octoc-hf"))
    for path in configs:
        name = os.path.basename(os.path.dirname(path)) if path.endswith("/config.json") \
            else os.path.basename(path)[:-5]
        try:
            hf = hf_count(path)
        except Exception as e:  # a config this transformers does not know
            print("%-28s %16s %16s %10s  (%s)" % (name, "-", "-", "-", str(e).splitlines()[0][:60]))
            continue
        ours = octoc_count(build, path)
        print("%-28s %16d %16s %10s" % (name, hf, "refused" if ours is None else ours,
                                         "-" if ours is None else ours - hf))
    return 0


if __name__ == "__main__":
    sys.exit(main())
