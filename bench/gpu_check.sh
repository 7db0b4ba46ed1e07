#!/usr/bin/env bash
# The GPU check, made for the GPU machine (one H200, Python 3.12 with torch 2.11 on CUDA 13,
# cuda-bindings, nvidia-ml-py, numpy, grpcio, protobuf, ... installed; no package index):
#
#   make gpu-wheels                       # here, once: .whl/ (bench/gpu/wheels.txt, ~8 MiB)
#   bench/gpu_check.sh LOG_DIR            # there, in one run, with .whl carried
#   bench/gpu_check.sh --cpu-only LOG_DIR # here or anywhere: the same script without a GPU
#
# On the GPU machine it installs the wheels offline (pip --no-index --no-deps --target, into a
# fresh folder under /tmp), installs inferd from this working tree as pure Python
# (bench/gpu/install_tree.py), puts both first on PYTHONPATH and runs bench/gpu/check.py with
# python3, which serves torch models on CUDA, checks them (what each check shows: its
# docstring) and ends with one PASS/FAIL/SKIP line per check. Everything it prints also goes
# to LOG_DIR/gpu_check.log, with the server's log (inferd.log) and summary.txt beside it.
# Arguments after LOG_DIR go to bench/gpu/check.py.
#
#   --cpu-only    no GPU: the same checks as a server without a GPU must pass them, in this
#                 checkout's environment as it is (.venv, made by 'make setup WITH_TF=0' if
#                 it is missing; $PYTHON if set), installing nothing
#   --install     install the wheels and the tree even with --cpu-only (a Python 3.12 with
#                 the GPU machine's packages, to try the offline install without a GPU)
#   --no-install  install nothing even without --cpu-only ($PYTHON as it is)
#   PYTHON        the interpreter (python3 on the GPU machine)
#   GPU_WHEELS    the wheel folder, .whl by default
#
# Exit status: bench/gpu/check.py's (0 when no check failed), 2 for a usage or install problem.
set -uo pipefail
cd "$(dirname "$0")/.."
cpu_only=()
install=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu-only) cpu_only=(--cpu-only); shift ;;
        --install) install=1; shift ;;
        --no-install) install=0; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) break ;;
    esac
done
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
    echo "usage: bench/gpu_check.sh [--cpu-only] [--install|--no-install] LOG_DIR" \
         "[bench/gpu/check.py args]" >&2
    exit 2
fi
log_dir="$1"
shift
if [ -z "$install" ]; then
    install=$([ ${#cpu_only[@]} -eq 0 ] && echo 1 || echo 0)
fi
if [ -z "${PYTHON:-}" ] && [ ${#cpu_only[@]} -gt 0 ] && [ "$install" = 0 ]; then
    if [ ! -x .venv/bin/python ]; then
        echo "== no .venv: make setup WITH_TF=0 (once; minutes)"
        make setup WITH_TF=0 || exit 2
    fi
    PYTHON=.venv/bin/python
fi
mkdir -p "$log_dir" || exit 2
exec > >(tee "$log_dir/gpu_check.log") 2>&1
tee_pid=$!
python="${PYTHON:-python3}"
wheel_dir="${GPU_WHEELS:-.whl}"
started=$(date +%s)
echo "== gpu_check $(date -u +%FT%TZ) on $(hostname), $($python --version 2>&1)"
if [ ${#cpu_only[@]} -eq 0 ]; then
    nvidia-smi -L || echo "gpu_check: nvidia-smi -L failed (the check says what torch sees)"
fi

if [ "$install" = 1 ]; then
    shopt -s nullglob
    wheels=("$wheel_dir"/*.whl)
    if [ ${#wheels[@]} -eq 0 ]; then
        echo "gpu_check: no wheels in $wheel_dir/: run 'make gpu-wheels' where pip can reach" \
             "an index and carry .whl" >&2
        exit 2
    fi
    site="$(mktemp -d /tmp/inferd-gpu-site.XXXXXX)"
    echo "== installing ${#wheels[@]} wheels and inferd (pure Python) into $site"
    "$python" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \
        --target "$site" "${wheels[@]}" || exit 2
    "$python" -m bench.gpu.install_tree "$site" || exit 2
    # tritonclient's cuda_shared_memory imports pkg_resources without using it; setuptools
    # >= 81 has none. An empty module there is enough.
    if ! "$python" -c "import pkg_resources" 2>/dev/null; then
        mkdir -p "$site/pkg_resources" && : > "$site/pkg_resources/__init__.py"
    fi
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$python" - <<'EOF' || exit 2
import importlib.metadata as metadata
names = ("torch", "numpy", "grpcio", "protobuf", "tritonclient", "pyzmq", "uvicorn",
         "cuda-bindings", "nvidia-ml-py", "inferd")
found = []
for name in names:
    try:
        found.append(f"{name} {metadata.version(name)}")
    except metadata.PackageNotFoundError:
        found.append(f"{name} -")
print("== versions:", ", ".join(found))
import inferd.kernel.cli.main, tritonclient.grpc, tritonclient.http, zmq  # noqa: E401,F401
EOF
PYTHONUNBUFFERED=1 "$python" -m bench.gpu.check --log-dir "$log_dir" "${cpu_only[@]}" "$@"
status=$?
[ -n "${site:-}" ] && rm -rf "$site"
echo "== gpu_check took $(( $(date +%s) - started )) s, exit status $status"
exec >&- 2>&-
wait "$tee_pid"  # the log is whole when the script returns
exit $status
