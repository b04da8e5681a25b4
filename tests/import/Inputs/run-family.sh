#!/bin/sh
# run-family.sh CONFIG SEQ TRAIN OUT -- import CONFIG at SEQ tokens with TRAIN's devices and train
# block (OUT.octo), compile octoc's default plan (OUT.ois) and run one step of it at scale 64
# with --check (tests/import/run-families.test).
set -e
octo-import "$1" --seq="$2" --with="$3" -o "$4.octo"
octoc "$4.octo" --emit=stream -o "$4.ois"
octo-run "$4.ois" --scale=64 --steps=1 --check
