"""Parameter count of a compiled model from octoc's JSON report (stdin): the report's
"parameters" (the count as Hugging Face's num_parameters() gives it: a tied embedding and LM head
counted once) where the report has it, else the sum over layer kinds of count x param_bytes / 16,
the bytes per parameter of bf16 with Adam (2 weight + 2 gradient + 4 fp32 master + 8 moments;
tests/import/Inputs/h100-train.octo trains so). Prints "params N"."""
import json
import sys

report = json.load(sys.stdin)
if isinstance(report.get("parameters"), (int, float)):
    print("params %d" % report["parameters"])
    sys.exit(0)
total = sum(k["count"] * k["param_bytes"] for k in report["layer_kinds"])
if total % 16:
    sys.exit("param bytes %d are not a multiple of 16: not bf16 with Adam?" % total)
print("params %d" % (total // 16))
