#!/usr/bin/env bash
# The wheels benchmarks/gpu_check.py needs on a GPU machine that has its own PyTorch, numpy,
# matplotlib and psutil but not the course's other packages, and no internet: saved into
# .whl/ (ignored by git) from this machine's PyPI, for that machine's Python (3.12 unless
# GPU_PYTHON=3.x), the versions the course's venv has. On the GPU machine:
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD python3 benchmarks/gpu_check.py --out gpu-check.md
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_PYTHON:-3.12}
NAMES="ipyparallel ipykernel ipython ipython-pygments-lexers jupyter-client jupyter-core pyzmq
tornado traitlets comm debugpy matplotlib-inline nest-asyncio2 decorator jedi parso
prompt-toolkit wcwidth pexpect ptyprocess stack-data executing asttokens pure-eval nbclient
nbformat fastjsonschema jsonschema jsonschema-specifications referencing rpds-py platformdirs
orjson py-spy pygments"
frozen=$(.venv/bin/python -m pip freeze --all 2>/dev/null | tr 'A-Z_' 'a-z-')
mkdir -p .whl
for name in $NAMES; do
    pin=$(printf '%s\n' "$frozen" | grep -E "^${name}==" || true)
    [ -n "$pin" ] || { echo "gpu_wheels: $name is not in .venv (make install first)" >&2; exit 1; }
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY" \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
        -d .whl "$pin" 2> >(grep -v "is ignored: it is neither" >&2)
done
du -sh .whl
